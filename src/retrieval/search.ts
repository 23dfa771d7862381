import type { RetrievalContext } from './context.js';
import { badRequest, forbidden } from '../errors/index.js';
import { searchSeconds } from '../metrics.js';
import { hasActionWithin } from '../policy/access.js';
import type { Principal } from '../policy/principal.js';
import type { Candidate, Scope } from './candidates.js';
import { boostAndSort, fuse, type Fused } from './hybrid.js';
import { queryTerms } from './keyword.js';
import { CANDIDATES, hybridLists, listSource, type KeywordList } from './lists.js';
import { assertUsableScope } from './scope.js';
import { sliceWhole } from './text-cut.js';

export const SEARCH_MODES = ['hybrid', 'fts', 'vector'] as const;
export type SearchMode = (typeof SEARCH_MODES)[number];

export interface SearchOptions {
  q: string;
  space?: string | undefined;
  folder?: string | undefined;
  tags?: string[] | undefined;
  mode: SearchMode;
  limit: number;
  includeArchived: boolean;
  /** Answer from the workspace as it was at this commit (a sha or unique prefix). */
  at?: string | undefined;
}

export interface SearchHit {
  id: string;
  path: string;
  title: string;
  space: string;
  cluster_path: string;
  tags: string[];
  state: string;
  score: number;
  /** The heading of the best-matching section ('' before the first heading). */
  section: string;
  snippet: string;
}

export interface SearchResult {
  mode: SearchMode;
  /** The ranking actually used: a vector ranking falls back to fts while embeddings are unavailable. */
  mode_used: SearchMode;
  note?: string;
  /** The commit answered from, when one was asked for (`at`), in full. */
  at?: string;
  results: SearchHit[];
}

/** Vector windows looked at for search (at least; twice the limit when more pages are asked for): fusion uses the top few dozen pages of each list. */
const VECTOR_DEPTH = 50;
const SNIPPET_CHARS = 240;

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** A window of the section's text around the first query term (whitespace collapsed). */
export function makeSnippet(text: string, terms: string[]): string {
  const flat = text.split(/\s+/).filter(Boolean).join(' ');
  let at = -1;
  for (const t of terms) {
    // Stemming matches `deploying` for `deploy`: fall back to the term's first letters.
    for (const probe of [t, t.slice(0, Math.max(4, t.length - 3))]) {
      const m = new RegExp(escapeRegExp(probe), 'iu').exec(flat);
      if (m && (at < 0 || m.index < at)) at = m.index;
      if (m) break;
    }
  }
  if (flat.length <= SNIPPET_CHARS) return flat;
  const start = at < 0 ? 0 : Math.max(0, at - Math.floor(SNIPPET_CHARS / 3));
  const cut = sliceWhole(flat, start, start + SNIPPET_CHARS);
  return `${start > 0 ? '…' : ''}${cut}${start + SNIPPET_CHARS < flat.length ? '…' : ''}`;
}

/** Best section per page, in the list's order. */
function byPage(list: Candidate[]): Candidate[] {
  const seen = new Set<string>();
  return list.filter((c) => !seen.has(c.page_id) && seen.add(c.page_id));
}

/**
 * The hybrid ranking of two lists of the same items (pages for search, sections for the
 * bundle, told apart by `key`): fused, then boosted by title and freshness. Best first.
 */
export async function rankHybrid(
  ctx: RetrievalContext,
  p: Principal,
  kw: KeywordList,
  vec: Candidate[],
  key: (c: Candidate) => string,
  terms: string[],
  now = Date.now(),
): Promise<Fused<Candidate>[]> {
  const fused = fuse(kw, vec, key, vec[0]?.score ?? 0, kw.weak === true, kw.anyWord === true);
  return boostAndSort(fused, terms, await halfLives(ctx, p.workspaceId), now);
}

/** Half-life of a page's folder: the nearest folder up its path that sets one. */
export async function halfLives(ctx: RetrievalContext, workspaceId: string): Promise<(folderPath: string) => number | null> {
  const rows = await ctx.store.db
    .selectFrom('folders')
    .select(['path', 'half_life_days'])
    .where('workspace_id', '=', workspaceId)
    .where('half_life_days', 'is not', null)
    .execute();
  if (rows.length === 0) return () => null;
  const map = new Map(rows.map((r) => [r.path, r.half_life_days]));
  return (folder) => {
    for (let c = folder; c !== ''; c = c.includes('/') ? c.slice(0, c.lastIndexOf('/')) : '') {
      const h = map.get(c);
      if (h !== undefined) return h;
    }
    return null;
  };
}

/**
 * Search over the caller's workspace: one result per page, best section as snippet. Pages above
 * the caller's search ceiling never appear, and a section inside a `::: level` block above it
 * neither matches nor gives a snippet.
 */
export async function searchPages(ctx: RetrievalContext, p: Principal, opts: SearchOptions): Promise<SearchResult> {
  const end = searchSeconds.startTimer({ mode: opts.mode });
  try {
    return await runSearch(ctx, p, opts);
  } finally {
    end();
  }
}

async function runSearch(ctx: RetrievalContext, p: Principal, opts: SearchOptions): Promise<SearchResult> {
  if (opts.q.trim() === '') throw badRequest('The query q is empty', 'invalid_query');
  if (!hasActionWithin(p, 'search', '*')) throw forbidden('No search grant');
  // A scope naming nothing the caller can search is an error naming what it can (issue 13). At
  // a commit the scope is a path of then: a folder since removed still names its old pages.
  if (opts.at === undefined) await assertUsableScope(ctx, p, 'search', opts.space, opts.folder);
  const scope: Scope = { action: 'search', space: opts.space, folder: opts.folder, tags: opts.tags, includeArchived: opts.includeArchived };
  const source = await listSource(ctx, p, scope, opts.at);
  const terms = queryTerms(opts.q);
  const out: SearchResult = { mode: opts.mode, mode_used: opts.mode, results: [] };
  if (source.commit) out.at = source.commit.sha;

  // Keyword alone needs only enough sections for `limit` pages; fusion looks deeper.
  const kwDepth = opts.mode === 'fts' ? Math.max(50, 5 * opts.limit) : Math.max(CANDIDATES, 5 * opts.limit);
  // The two lists at once: the keyword one runs while the helper thread scans the matrix, or
  // waits on the database (PostgreSQL), so hybrid takes less than their sum.
  const vectorDepth = Math.max(VECTOR_DEPTH, 2 * opts.limit);
  const [vecList, kwSections] =
    opts.mode === 'hybrid'
      ? await hybridLists(source, opts.q, vectorDepth, terms, kwDepth)
      : await Promise.all([
          opts.mode === 'fts' ? ([] as Candidate[]) : source.vector(opts.q, vectorDepth),
          opts.mode === 'vector' ? ([] as KeywordList) : source.keyword(terms, kwDepth),
        ]);
  let mode = opts.mode;
  let vec: Candidate[] = [];
  if (typeof vecList === 'string') {
    // No vectors now: ranked by keyword, and the answer says so.
    out.mode_used = 'fts';
    out.note = `${vecList}; ranked by keyword (fts)`;
    if (mode === 'vector') return runRanking(await source.keyword(terms, Math.max(50, 5 * opts.limit)), [], 'fts');
    mode = 'fts';
  } else vec = byPage(vecList);
  return runRanking(kwSections, vec, mode);

  async function runRanking(kwList: KeywordList, vecPages: Candidate[], used: SearchMode): Promise<SearchResult> {
    const kw: KeywordList = Object.assign(byPage(kwList), { weak: kwList.weak, anyWord: kwList.anyWord });
    let ranked: { c: Candidate; score: number }[];
    // In fts mode the score shown is derived from the rank alone (issue 11): SQLite's bm25 weighs
    // words by statistics of every workspace and level, so its raw value would tell of pages the
    // caller cannot see. Vector scores are cosines of the query and the page alone; hybrid
    // scores are fused from ranks in the caller's own lists.
    if (used === 'fts') ranked = kw.map((c, i) => ({ c, score: 1 / (i + 1) }));
    else if (used === 'vector') ranked = vecPages.map((c) => ({ c, score: c.score }));
    else ranked = (await rankHybrid(ctx, p, kw, vecPages, (c) => c.page_id, terms, source.now)).map((f) => ({ c: f.item, score: f.score }));
    out.results = ranked.slice(0, opts.limit).map(({ c, score }) => ({
      id: c.page_id,
      path: c.path,
      title: c.title,
      space: c.space,
      cluster_path: c.cluster_path,
      tags: JSON.parse(c.tags) as string[],
      state: c.state,
      score: Math.round(score * 1e6) / 1e6,
      section: c.heading,
      snippet: makeSnippet(c.text, terms),
    }));
    return out;
  }
}
