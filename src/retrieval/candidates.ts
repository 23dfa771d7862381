import { sql, type RawBuilder } from 'kysely';
import type { CoreContext } from '../core/context.js';
import { ceilingFor } from '../policy/access.js';
import type { Action, Principal } from '../policy/principal.js';
import { atOrBelow, isLevel, LEVELS, rank, type Level } from '../policy/sensitivity.js';
import { stemmer } from 'stemmer';
import { hashTag, textHash, windowEmbedText } from './embed-text.js';
import { fts5Match, pgTsQuery } from './keyword.js';

/**
 * In the any-word fallback, a word found in more than this many sections is dropped while a
 * rarer one remains: its bm25 weight is small, and ranking every section it matches was most of
 * the time of slow queries at 100,000 pages.
 */
const OR_MAX_DOCS = 10_000;

/** The terms worth an any-word query, from their section counts: all in a small workspace, the selective ones in a large one. */
export function selectiveTerms(terms: string[], docs: Map<string, number>): string[] {
  const keep = terms.filter((t) => (docs.get(t) ?? 0) <= OR_MAX_DOCS);
  return keep.length > 0 ? keep : terms;
}

/**
 * How many sections (of every workspace) hold each query term, by its Porter stem as the
 * SQLite index stores it; null on PostgreSQL, where counting would mean a scan.
 */
export async function termDocCounts(ctx: CoreContext, terms: string[]): Promise<Map<string, number> | null> {
  if (ctx.store.dialect !== 'sqlite' || terms.length === 0) return ctx.store.dialect === 'sqlite' ? new Map() : null;
  const stems = terms.map((t) => stemmer(t));
  const rows = (await sql<{ term: string; doc: number }>`select term, doc from page_sections_vocab where term in (${sql.join([...new Set(stems)])})`.execute(ctx.store.db)).rows;
  const doc = new Map(rows.map((r) => [r.term, Number(r.doc)]));
  return new Map(terms.map((t, i) => [t, doc.get(stems[i]!) ?? 0]));
}

/** Keyword matches ranked by the index alone before joins and filters (SQLite). */
const FTS_PREFILTER = 2000;

/** Nearest rows looked up at most per vector query before filters give up. */
const VECTOR_SCAN_CAP = 12_800;

/** A section that may answer a query, with what the caller needs to judge and show it. */
export interface Candidate {
  page_id: string;
  ord: number;
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
  commit_sha: string;
  updated_at: string;
}

/** What narrows a retrieval: the spec's filters, and the action whose ceiling applies (search or read). */
export interface Scope {
  action: Action;
  space?: string | undefined;
  /** A folder path, with or without its Space. */
  cluster?: string | undefined;
  tags?: string[] | undefined;
  includeArchived: boolean;
}

/** The highest ceiling the caller has for `action` anywhere (a cheap prefilter; each section is judged exactly after). */
export function widestCeiling(p: Principal, action: Action): Level | null {
  if (p.kind === 'human') return ceilingFor(p, action, '*');
  let best: Level | null = null;
  for (const g of p.grants) {
    if (g.action !== action) continue;
    const c = ceilingFor(p, action, g.scope === '*' ? '*' : g.scope);
    if (c && (best === null || rank(c) > rank(best))) best = c;
  }
  return best;
}

/** The caller may see this section: the page within its ceiling for the action at that path, and the section's block too. */
export function visible(p: Principal, action: Action, c: Pick<Candidate, 'path' | 'sensitivity' | 'block_level'>): boolean {
  const ceiling = ceilingFor(p, action, c.path);
  if (ceiling === null) return false;
  const sens: Level = isLevel(c.sensitivity) ? c.sensitivity : 'secret';
  if (!atOrBelow(sens, ceiling)) return false;
  if (c.block_level === null) return true;
  return isLevel(c.block_level) && atOrBelow(c.block_level, ceiling);
}

function codePoints(s: string): number {
  return [...s].length;
}

/** The folder filter as a full path: `ops` inside Space `eng` is `eng/ops`. */
export function clusterPath(space: string | undefined, cluster: string): string {
  let c = cluster.replace(/^\/+|\/+$/g, '');
  if (space && c !== space && !c.startsWith(`${space}/`)) c = `${space}/${c}`;
  return c;
}

/** SQL conditions over `s` (page_sections) and `p` (pages) for the scope and the caller's widest ceiling. */
function where(p: Principal, scope: Scope, allowed: Level[]): RawBuilder<unknown> {
  const filters: RawBuilder<unknown>[] = [
    sql`p.workspace_id = ${p.workspaceId}`,
    sql`p.deleted_at is null`,
    sql`p.sensitivity in (${sql.join(allowed)})`,
    sql`(s.block_level is null or s.block_level in (${sql.join(allowed)}))`,
  ];
  if (!scope.includeArchived) filters.push(sql`p.state = 'active'`);
  if (scope.space) filters.push(sql`p.space = ${scope.space}`);
  if (scope.cluster) {
    const c = clusterPath(scope.space, scope.cluster);
    filters.push(sql`(p.cluster_path = ${c} or substr(p.cluster_path, 1, ${codePoints(c) + 1}) = ${`${c}/`})`);
  }
  const tags = [...new Set(scope.tags ?? [])];
  if (tags.length > 0) {
    filters.push(sql`(select count(*) from page_tags t where t.page_id = p.id and t.tag in (${sql.join(tags)})) = ${tags.length}`);
  }
  return sql.join(filters, sql` and `);
}

const COLS = sql`s.page_id, s.ord, s.heading, s.text, s.block_level, p.path, p.title, p.space, p.cluster_path, p.tags, p.state, p.sensitivity, p.commit_sha, p.updated_at`;

function allowedLevels(p: Principal, action: Action): Level[] | null {
  const ceiling = widestCeiling(p, action);
  return ceiling === null ? null : LEVELS.filter((l) => atOrBelow(l, ceiling));
}

/** Keyword-matching sections, best first, that the caller may see (at most `limit`). */
export async function keywordCandidates(ctx: CoreContext, p: Principal, scope: Scope, terms: string[], op: 'AND' | 'OR', limit: number): Promise<Candidate[]> {
  const allowed = allowedLevels(p, scope.action);
  if (allowed === null || terms.length === 0) return [];
  const db = ctx.store.db;
  const w = where(p, scope, allowed);
  let rows: Candidate[];
  if (ctx.store.dialect === 'postgres') {
    // The tsquery is written out in place so the planner sees a constant and uses the GIN index.
    const tq = pgTsQuery(terms, op);
    rows = (
      await sql<Candidate>`
      select ${COLS}, ts_rank_cd(s.tsv, ${tq}) as score
      from page_sections s join pages p on p.id = s.page_id
      where s.tsv @@ ${tq} and ${w}
      order by score desc, s.id
      limit ${limit}`.execute(db)
    ).rows;
  } else {
    // bm25 weights: title 10, heading 4, text 1; lower is better, so the score is its negation.
    // First the best FTS_PREFILTER matches from the index alone, then the joins and filters on
    // those: a common word matches tens of thousands of sections, and joining them all before
    // the sort was most of a slow query. When the filters leave too few, the full query runs.
    const match = fts5Match(terms, op);
    rows = (
      await sql<Candidate>`
      with hits as (
        select rowid as rid, bm25(page_sections_fts, 10.0, 4.0, 1.0) as b from page_sections_fts
        where page_sections_fts match ${match} order by b limit ${FTS_PREFILTER})
      select ${COLS}, -hits.b as score
      from hits cross join page_sections s cross join pages p
      where s.id = hits.rid and p.id = s.page_id and ${w}
      order by hits.b, s.id
      limit ${limit}`.execute(db)
    ).rows;
    if (rows.length < limit) {
      rows = (
        await sql<Candidate>`
        select ${COLS}, -bm25(page_sections_fts, 10.0, 4.0, 1.0) as score
        from page_sections_fts
        join page_sections s on s.id = page_sections_fts.rowid
        join pages p on p.id = s.page_id
        where page_sections_fts match ${match} and ${w}
        order by bm25(page_sections_fts, 10.0, 4.0, 1.0), s.id
        limit ${limit}`.execute(db)
      ).rows;
    }
  }
  return rows.filter((c) => visible(p, scope.action, c)).map((c) => ({ ...c, score: Number(c.score) }));
}

/**
 * Sections nearest to the query vector that pass the scope and the caller's ceiling, best
 * first (at most `limit`). The matrix holds every section of the workspace; rows are looked up
 * in batches until enough pass the filters or the matrix is exhausted.
 */
export async function vectorCandidates(ctx: CoreContext, p: Principal, scope: Scope, query: Float32Array, limit: number): Promise<Candidate[]> {
  const allowed = allowedLevels(p, scope.action);
  if (allowed === null) return [];
  const m = await ctx.retrieval.matrix(p.workspaceId);
  if (!m || m.dims !== query.length) return [];
  const w = where(p, scope, allowed);
  const out: Candidate[] = [];
  // Each window gives at least one section: `limit` windows usually suffice; more only when filters drop some.
  let k = Math.max(limit, 50);
  let seen = 0;
  for (;;) {
    const hits = m.top(query, Math.min(k, m.rows));
    const batch = hits.slice(seen);
    seen = hits.length;
    for (let i = 0; i < batch.length; i += 400) {
      const part = batch.slice(i, i + 400);
      const pages = [...new Set(part.map((h) => h.pageId))];
      const rows = (
        await sql<Omit<Candidate, 'score'>>`
        select ${COLS} from page_sections s cross join pages p
        where s.page_id in (${sql.join(pages)}) and p.id = s.page_id and ${w}
        order by s.page_id, s.ord`.execute(ctx.store.db)
      ).rows;
      const byPage = new Map<string, Omit<Candidate, 'score'>[]>();
      for (const r of rows) {
        const list = byPage.get(r.page_id);
        if (list) list.push(r);
        else byPage.set(r.page_id, [r]);
      }
      for (const h of part) {
        const secs = (byPage.get(h.pageId) ?? []).filter((r) => r.ord >= h.ord && r.ord <= h.last);
        // Every section of the window must pass the filters and the ceiling, and the window's
        // text must be the one embedded: a vector of text the page no longer has (the worker
        // has not caught up) answers nothing.
        if (secs.length !== h.last - h.ord + 1 || !secs.every((r) => visible(p, scope.action, r))) continue;
        if (hashTag(textHash(windowEmbedText(secs[0]!.title, secs))) !== h.tag) continue;
        for (const r of secs) out.push({ ...r, score: h.score });
      }
    }
    // Narrow scopes in a large workspace: stop after the nearest VECTOR_SCAN_CAP rows (keyword search covers the rest).
    if (out.length >= limit || seen >= m.rows || k >= VECTOR_SCAN_CAP) return out.slice(0, limit);
    k *= 8;
  }
}
