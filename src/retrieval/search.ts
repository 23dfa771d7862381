import { sql, type RawBuilder } from 'kysely';
import type { CoreContext } from '../core/context.js';
import { badRequest, forbidden } from '../core/errors.js';
import { ceilingFor, hasActionWithin } from '../policy/access.js';
import type { Principal } from '../policy/principal.js';
import { atOrBelow, isLevel, LEVELS, rank, type Level } from '../policy/sensitivity.js';
import { fts5Match, pgTsQuery, queryTerms } from './keyword.js';

export const SEARCH_MODES = ['hybrid', 'fts', 'vector'] as const;
export type SearchMode = (typeof SEARCH_MODES)[number];

export interface SearchOptions {
  q: string;
  space?: string | undefined;
  cluster?: string | undefined;
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
  mode_used: 'fts';
  note?: string;
  results: SearchHit[];
}

/** Sections looked at per query before grouping by page and filtering by ceiling. */
const CANDIDATES = 400;
const SNIPPET_CHARS = 240;

interface Candidate {
  sid: number;
  page_id: string;
  heading: string;
  text: string;
  block_level: string | null;
  score: number;
  path: string;
  title: string;
  space: string;
  cluster_path: string;
  tags: string;
  state: string;
  sensitivity: string;
}

/** The highest ceiling the caller searches with anywhere (a cheap prefilter; each page is judged exactly after). */
function widestCeiling(p: Principal): Level | null {
  if (p.kind === 'human') return ceilingFor(p, 'search', '*');
  let best: Level | null = null;
  for (const g of p.grants) {
    if (g.action !== 'search') continue;
    const c = ceilingFor(p, 'search', g.scope === '*' ? '*' : g.scope);
    if (c && (best === null || rank(c) > rank(best))) best = c;
  }
  return best;
}

/** The caller may see this section in a result: the page within its search ceiling, the section's block too. */
function visible(p: Principal, c: Candidate): boolean {
  const ceiling = ceilingFor(p, 'search', c.path);
  if (ceiling === null) return false;
  const sens: Level = isLevel(c.sensitivity) ? c.sensitivity : 'secret';
  if (!atOrBelow(sens, ceiling)) return false;
  if (c.block_level === null) return true;
  return isLevel(c.block_level) && atOrBelow(c.block_level, ceiling);
}

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

function codePoints(s: string): number {
  return [...s].length;
}

/**
 * Keyword search over the caller's workspace: one result per page, best section first.
 * Pages above the caller's search ceiling never appear, and a section inside a `::: level`
 * block above it neither matches nor gives a snippet.
 */
export async function searchPages(ctx: CoreContext, p: Principal, opts: SearchOptions): Promise<SearchResult> {
  if (opts.q.trim() === '') throw badRequest('The query q is empty', 'invalid_query');
  if (!hasActionWithin(p, 'search', '*')) throw forbidden('No search grant');
  const base: SearchResult = { mode: opts.mode, mode_used: 'fts', results: [] };
  if (opts.mode !== 'fts') base.note = `mode ${opts.mode} is not available yet (no vector index); ranked by keyword (fts)`;
  const ceiling = widestCeiling(p);
  const terms = queryTerms(opts.q);
  if (ceiling === null || terms.length === 0) return base;
  const allowed = LEVELS.filter((l) => atOrBelow(l, ceiling));

  let results = await run(ctx, p, opts, terms, allowed, 'AND');
  // Every term in one section is the precise answer; when nothing has them all, rank by any.
  if (results.length === 0 && terms.length > 1) results = await run(ctx, p, opts, terms, allowed, 'OR');
  return { ...base, results };
}

async function run(ctx: CoreContext, p: Principal, opts: SearchOptions, terms: string[], allowed: Level[], op: 'AND' | 'OR'): Promise<SearchHit[]> {
  const db = ctx.store.db;
  const filters: RawBuilder<unknown>[] = [
    sql`s.workspace_id = ${p.workspaceId}`,
    sql`p.deleted_at is null`,
    sql`p.sensitivity in (${sql.join(allowed)})`,
    sql`(s.block_level is null or s.block_level in (${sql.join(allowed)}))`,
  ];
  if (!opts.includeArchived) filters.push(sql`p.state = 'active'`);
  if (opts.space) filters.push(sql`p.space = ${opts.space}`);
  if (opts.cluster) {
    let c = opts.cluster.replace(/^\/+|\/+$/g, '');
    if (opts.space && c !== opts.space && !c.startsWith(`${opts.space}/`)) c = `${opts.space}/${c}`;
    filters.push(sql`(p.cluster_path = ${c} or substr(p.cluster_path, 1, ${codePoints(c) + 1}) = ${`${c}/`})`);
  }
  const tags = [...new Set(opts.tags ?? [])];
  if (tags.length > 0) {
    filters.push(sql`(select count(*) from page_tags t where t.page_id = p.id and t.tag in (${sql.join(tags)})) = ${tags.length}`);
  }
  const where = sql.join(filters, sql` and `);
  const cols = sql`s.id as sid, s.page_id, s.heading, s.text, s.block_level, p.path, p.title, p.space, p.cluster_path, p.tags, p.state, p.sensitivity`;
  let rows: Candidate[];
  if (ctx.store.dialect === 'postgres') {
    // The tsquery is written out in place (not joined from a subquery) so the planner sees a
    // constant and uses the GIN index.
    const tq = pgTsQuery(terms, op);
    const r = await sql<Candidate>`
      select ${cols}, ts_rank_cd(s.tsv, ${tq}) as score
      from page_sections s
      join pages p on p.id = s.page_id
      where s.tsv @@ ${tq} and ${where}
      order by score desc, s.id
      limit ${CANDIDATES}`.execute(db);
    rows = r.rows;
  } else {
    // bm25 weights: title 10, heading 4, text 1; lower is better, so the score is its negation.
    const r = await sql<Candidate>`
      select ${cols}, -bm25(page_sections_fts, 10.0, 4.0, 1.0) as score
      from page_sections_fts
      join page_sections s on s.id = page_sections_fts.rowid
      join pages p on p.id = s.page_id
      where page_sections_fts match ${fts5Match(terms, op)} and ${where}
      order by bm25(page_sections_fts, 10.0, 4.0, 1.0), s.id
      limit ${CANDIDATES}`.execute(db);
    rows = r.rows;
  }
  const seen = new Set<string>();
  const hits: SearchHit[] = [];
  for (const c of rows) {
    if (seen.has(c.page_id) || !visible(p, c)) continue;
    seen.add(c.page_id);
    hits.push({
      id: c.page_id,
      path: c.path,
      title: c.title,
      space: c.space,
      cluster_path: c.cluster_path,
      tags: JSON.parse(c.tags) as string[],
      state: c.state,
      score: Math.round(Number(c.score) * 1e6) / 1e6,
      section: c.heading,
      snippet: makeSnippet(c.text, terms),
    });
    if (hits.length >= opts.limit) break;
  }
  return hits;
}
