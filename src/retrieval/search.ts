import type { RetrievalContext } from './context.js';
import { badRequest, forbidden } from '../errors/index.js';
import { searchSeconds } from '../metrics.js';
import { hasActionWithin } from '../policy/access.js';
import type { Principal } from '../policy/principal.js';
import { keywordCandidates, reachSql, vectorCandidates, widestCeiling, type Candidate, type Scope } from './candidates.js';
import { keywordPlan, PG_SCORE_BUDGET, SCORE_BUDGET, termDocCounts } from './keyword-plan.js';
import { EmbeddingUnavailableError } from './embeddings/provider.js';
import { boostAndSort, fuse, VECTOR_FLOOR, type Fused } from './hybrid.js';
import { queryTerms } from './keyword.js';
import { assertUsableScope } from './scope.js';

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
  results: SearchHit[];
}

/** Sections looked at per list before grouping by page (results are at most 50 pages). */
const CANDIDATES = 100;
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
  const cut = flat.slice(start, start + SNIPPET_CHARS);
  return `${start > 0 ? '…' : ''}${cut}${start + SNIPPET_CHARS < flat.length ? '…' : ''}`;
}

/** Best section per page, in the list's order. */
function byPage(list: Candidate[]): Candidate[] {
  const seen = new Set<string>();
  return list.filter((c) => !seen.has(c.page_id) && seen.add(c.page_id));
}

/**
 * Keyword sections: every term in one section is the precise answer; when nothing has them all,
 * any term. `weak` marks a keyword list that likely missed: it needed the any-word fallback and
 * some word is in no section at all (a misspelling, as far as the index can tell). Each query
 * is planned within the scoring budget (keywordPlan); a bounded plan that leaves almost nothing in scope is run again unbounded.
 */
export async function keywordList(ctx: RetrievalContext, p: Principal, scope: Scope, terms: string[], limit = CANDIDATES): Promise<KeywordList> {
  if (terms.length === 0) return [];
  const counted = { workspaceId: p.workspaceId, ceiling: widestCeiling(p, scope.action) ?? 'public', visibility: reachSql(p, scope.action) ?? undefined };
  // One count per word serves every plan and the "weak" test below.
  const docs = await termDocCounts(ctx.store, terms, counted);
  const run = async (op: 'AND' | 'OR', words: string[]) => {
    const plan = keywordPlan(words, op, docs, ctx.store.dialect === 'postgres' ? PG_SCORE_BUDGET : SCORE_BUDGET);
    const list = await keywordCandidates(ctx, p, scope, plan, limit, docs);
    if ((plan.scored && plan.newest === null) || list.length >= Math.min(limit, BOUNDED_MIN)) return list;
    return keywordCandidates(ctx, p, scope, { ...plan, scored: true, newest: null }, limit, docs);
  };
  const all = await run('AND', terms);
  if (all.length > 0 || terms.length <= 1) return all;
  // A word the index does not know here is likely a misspelling.
  const weak = terms.some((t) => docs.get(t) === 0);
  return Object.assign(await run('OR', terms), { weak, anyWord: true });
}

/** A bounded plan that finds fewer sections than this (a narrow scope) is run again over every match. */
const BOUNDED_MIN = 20;

/** `anyWord`: no section held every term, so the list ranks sections holding any of them. */
export type KeywordList = Candidate[] & { weak?: boolean; anyWord?: boolean };

/** Vector sections at or above VECTOR_FLOOR, or null when the provider cannot embed the query now. */
export async function vectorList(ctx: RetrievalContext, p: Principal, scope: Scope, q: string, limit = CANDIDATES): Promise<Candidate[] | null> {
  let qv: Float32Array;
  try {
    qv = await ctx.retrieval.embedQuery(q);
  } catch (e) {
    if (e instanceof EmbeddingUnavailableError) return null;
    throw e;
  }
  return (await vectorCandidates(ctx, p, scope, qv, limit)).filter((c) => c.score >= VECTOR_FLOOR);
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
): Promise<Fused<Candidate>[]> {
  const fused = fuse(kw, vec, key, vec[0]?.score ?? 0, kw.weak === true, kw.anyWord === true);
  return boostAndSort(fused, terms, await halfLives(ctx, p.workspaceId));
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
  // A scope naming nothing the caller can search is an error naming what it can (issue 13).
  await assertUsableScope(ctx, p, 'search', opts.space, opts.folder);
  const scope: Scope = { action: 'search', space: opts.space, folder: opts.folder, tags: opts.tags, includeArchived: opts.includeArchived };
  const terms = queryTerms(opts.q);
  const out: SearchResult = { mode: opts.mode, mode_used: opts.mode, results: [] };

  // Keyword alone needs only enough sections for `limit` pages; fusion looks deeper.
  const kwDepth = opts.mode === 'fts' ? Math.max(50, 5 * opts.limit) : Math.max(CANDIDATES, 5 * opts.limit);
  // The two lists at once: the keyword one waits mostly on the database (PostgreSQL), the
  // vector one on this process's CPU, so hybrid takes about the longer of the two, not their sum.
  const [kwSections, list] = await Promise.all([
    opts.mode === 'vector' ? ([] as KeywordList) : keywordList(ctx, p, scope, terms, kwDepth),
    opts.mode === 'fts' ? ([] as Candidate[]) : vectorList(ctx, p, scope, opts.q, Math.max(VECTOR_DEPTH, 2 * opts.limit)),
  ]);
  const kw: KeywordList = Object.assign(byPage(kwSections), { weak: kwSections.weak, anyWord: kwSections.anyWord });
  let vec: Candidate[] = [];
  if (opts.mode !== 'fts') {
    if (list === null) {
      out.mode_used = 'fts';
      out.note = `embeddings are unavailable (${ctx.retrieval.provider.provider}); ranked by keyword (fts)`;
      if (opts.mode === 'vector') return runSearch(ctx, p, { ...opts, mode: 'fts' }).then((r) => ({ ...r, mode: 'vector', mode_used: 'fts', note: out.note! }));
    } else vec = byPage(list);
  }

  let ranked: { c: Candidate; score: number }[];
  // In fts mode the score shown is derived from the rank alone (issue 11): SQLite's bm25 weighs
  // words by statistics of every workspace and level, so its raw value would tell of pages the
  // caller cannot see. Vector scores are cosines of the query and the page alone; hybrid
  // scores are fused from ranks in the caller's own lists.
  if (opts.mode === 'fts') ranked = kw.map((c, i) => ({ c, score: 1 / (i + 1) }));
  else if (opts.mode === 'vector') ranked = vec.map((c) => ({ c, score: c.score }));
  else ranked = (await rankHybrid(ctx, p, kw, vec, (c) => c.page_id, terms)).map((f) => ({ c: f.item, score: f.score }));
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
