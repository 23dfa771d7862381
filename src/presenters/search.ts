import type { SearchResult } from '../retrieval/search.js';
import { pageUrl } from './pages.js';

/**
 * Search results as each face shows them. One source: `searchPages` (retrieval/search.ts), whose
 * result is the REST answer of `GET /api/v1/search` as it is (its JSON shape is the route's
 * response schema). The tools' views are cut from it here.
 */

/** `context_search`: per hit, where the page is, how it ranked and why. */
export function searchToolView(r: SearchResult) {
  return {
    mode_used: r.mode_used,
    ...(r.note === undefined ? {} : { note: r.note }),
    ...(r.at === undefined ? {} : { at: r.at }),
    results: r.results.map((h) => ({ id: h.id, path: h.path, title: h.title, state: h.state, score: h.score, section: h.section, snippet: h.snippet })),
  };
}

/** `search` (the connector tool): per hit, id, title and the page's URL; `fetch` gives the text. */
export function searchConnectorView(publicUrl: string, r: SearchResult) {
  return { results: r.results.map((h) => ({ id: h.id, title: h.title, url: pageUrl(publicUrl, h.id) })) };
}
