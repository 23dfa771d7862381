import { sql, type RawBuilder } from 'kysely';
import type { RetrievalContext } from './context.js';
import { ceilingFor } from '../policy/access.js';
import type { Action, Principal } from '../policy/principal.js';
import { atOrBelow, isLevel, LEVELS, rank, type Level } from '../policy/sensitivity.js';
import { hashTag, textHash, windowEmbedText } from './embed-text.js';
import { fts5Match, pgRank, pgTsQuery } from './keyword.js';
import { hasKeywordIndex, keywordTable } from './keyword-index.js';
import type { DocCounts, IdSpan, KeywordPlan } from './keyword-plan.js';
import type { RowHit } from './vectors/matrix.js';

/**
 * Keyword matches ranked by the index alone before joins and filters (SQLite): four per
 * section wanted, at least 400; unscored ones (every word common) come newest first, and half
 * as many suffice.
 */
const prefilter = (limit: number, scored: boolean) => (scored ? Math.max(400, 4 * limit) : Math.max(200, 2 * limit));
/** bm25 weights: title 10, heading 4, text 1; lower is better, so scores are its negation. */
const bm25 = (t: RawBuilder<unknown>) => sql`bm25(${t}, 10.0, 4.0, 1.0)`;

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
  folder?: string | undefined;
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
export function folderPath(space: string | undefined, folder: string): string {
  let c = folder.replace(/^\/+|\/+$/g, '');
  if (space && c !== space && !c.startsWith(`${space}/`)) c = `${space}/${c}`;
  return c;
}

/** `p.path` inside a grant's scope (scopeCovers in SQL). */
function inScope(scope: string): RawBuilder<unknown> {
  if (scope === '*') return sql`1 = 1`;
  return sql`(p.path = ${scope} or substr(p.path, 1, ${codePoints(scope) + 1}) = ${`${scope}/`})`;
}

/** A section at or below `ceiling`: its page's sensitivity and its block's. */
function atOrBelowSql(ceiling: Level): RawBuilder<unknown> {
  const levels = LEVELS.filter((l) => atOrBelow(l, ceiling));
  return sql`p.sensitivity in (${sql.join(levels)}) and (s.block_level is null or s.block_level in (${sql.join(levels)}))`;
}

/**
 * For a caller whose reach is not one ceiling over the whole workspace — an agent whose grants
 * for the action name paths, or give different ceilings by path — the SQL condition (over `s`
 * and `p`) a section it may see meets: inside some grant's scope, at or below the ceiling it
 * has there. Null when the widest ceiling holds everywhere (humans; agents with a `*` grant at
 * it). Filtering in SQL, not after the limit, keeps pages outside the grants from crowding out
 * the caller's own (issue 11).
 */
export function reachSql(p: Principal, action: Action): RawBuilder<unknown> | null {
  if (p.kind === 'human') return null;
  const widest = widestCeiling(p, action);
  if (widest === null || ceilingFor(p, action, '*') === widest) return null;
  const parts: RawBuilder<unknown>[] = [];
  for (const g of p.grants) {
    if (g.action !== action) continue;
    const c = ceilingFor(p, action, g.scope);
    if (c !== null) parts.push(sql`(${inScope(g.scope)} and ${atOrBelowSql(c)})`);
  }
  return parts.length === 0 ? sql`1 = 0` : sql`(${sql.join(parts, sql` or `)})`;
}

/** SQL conditions over `s` (page_sections) and `p` (pages) for the scope and what the caller may see. */
function where(p: Principal, scope: Scope, allowed: Level[]): RawBuilder<unknown> {
  const filters: RawBuilder<unknown>[] = [
    sql`p.workspace_id = ${p.workspaceId}`,
    sql`p.deleted_at is null`,
    sql`p.sensitivity in (${sql.join(allowed)})`,
    sql`(s.block_level is null or s.block_level in (${sql.join(allowed)}))`,
  ];
  const reach = reachSql(p, scope.action);
  if (reach) filters.push(reach);
  if (!scope.includeArchived) filters.push(sql`p.state = 'active'`);
  if (scope.space) filters.push(sql`p.space = ${scope.space}`);
  if (scope.folder) {
    const c = folderPath(scope.space, scope.folder);
    filters.push(sql`(p.cluster_path = ${c} or substr(p.cluster_path, 1, ${codePoints(c) + 1}) = ${`${c}/`})`);
  }
  const tags = [...new Set(scope.tags ?? [])];
  if (tags.length > 0) {
    filters.push(sql`(select count(*) from page_tags t where t.page_id = p.id and t.tag in (${sql.join(tags)})) = ${tags.length}`);
  }
  return sql.join(filters, sql` and `);
}

const COLS = sql`s.page_id, s.ord, s.heading, s.text, s.block_level, p.path, p.title, p.space, p.cluster_path, p.tags, p.state, p.sensitivity, p.commit_sha, p.updated_at`;

/**
 * Every section of these pages, with the page fields a candidate carries (deleted pages left
 * out), in page then section order; unfiltered: the caller judges each one (`visible`, scope).
 */
export async function sectionsOfPages(ctx: RetrievalContext, pageIds: readonly string[]): Promise<Omit<Candidate, 'score'>[]> {
  if (pageIds.length === 0) return [];
  return (
    await sql<Omit<Candidate, 'score'>>`
    select ${COLS} from page_sections s join pages p on p.id = s.page_id
    where s.page_id in (${sql.join(pageIds)}) and p.deleted_at is null
    order by s.page_id, s.ord`.execute(ctx.store.db)
  ).rows;
}

/** The levels the caller's widest ceiling for the action reads (null: none). */
export function allowedLevels(p: Principal, action: Action): Level[] | null {
  const ceiling = widestCeiling(p, action);
  return ceiling === null ? null : LEVELS.filter((l) => atOrBelow(l, ceiling));
}

/**
 * The windows as a table `j(page_id, ord, last)` from one parameter (three arrays on
 * PostgreSQL), so the statement's text, and its cached prepared statement, is the same
 * whatever the number of windows.
 */
function windowList(ctx: RetrievalContext, hits: { pageId: string; ord: number; last: number }[]): RawBuilder<unknown> {
  if (ctx.store.dialect === 'postgres') {
    return sql`unnest(${hits.map((h) => h.pageId)}::text[], ${hits.map((h) => h.ord)}::int[], ${hits.map((h) => h.last)}::int[]) as j(page_id, ord, last)`;
  }
  const json = JSON.stringify(hits.map((h) => [h.pageId, h.ord, h.last]));
  return sql`(select json_extract(value, '$[0]') as page_id, json_extract(value, '$[1]') as ord, json_extract(value, '$[2]') as last from json_each(${json})) as j`;
}

/** More than `n` sections of the workspace match (counting stops at n + 1, and scores nothing). */
async function matchesMoreThan(ctx: RetrievalContext, fts: RawBuilder<unknown>, match: string, n: number): Promise<boolean> {
  const r = await sql<{ n: number }>`select count(*) as n from (select 1 from ${fts} where ${fts} match ${match} limit ${n + 1})`.execute(ctx.store.db);
  return Number(r.rows[0]?.n ?? 0) > n;
}

/** A bounded plan that finds fewer sections than this (a narrow scope) is run again over every match (lists.ts). */
export const BOUNDED_MIN = 20;

/**
 * Keyword-matching sections, best first, that the caller may see (at most `limit`). `complete`:
 * a newest-N plan found fewer matches than its cut, so it ranked every one.
 */
export async function keywordCandidates(
  ctx: RetrievalContext,
  p: Principal,
  scope: Scope,
  plan: KeywordPlan,
  limit: number,
  /** The words' section counts (termDocCounts): PostgreSQL weighs each word by its rarity. */
  docs?: DocCounts,
): Promise<Candidate[] & { complete?: boolean }> {
  const { terms, op } = plan;
  const allowed = allowedLevels(p, scope.action);
  if (allowed === null || terms.length === 0) return [];
  const db = ctx.store.db;
  const w = where(p, scope, allowed);
  let rows: Candidate[];
  let complete = false;
  if (ctx.store.dialect === 'postgres') {
    const pgRows = await pgKeywordRows(ctx, p, scope, plan, limit, w, docs);
    rows = pgRows;
    complete = pgRows.complete === true;
  } else {
    // The workspace's index of what the caller's widest ceiling reads (keyword-index.ts): no
    // statistic of another workspace, or of a section above that ceiling, weighs in.
    const ceiling = widestCeiling(p, scope.action);
    if (ceiling === null || !(await hasKeywordIndex(ctx.store, p.workspaceId))) return [];
    const fts = keywordTable(p.workspaceId, ceiling);
    // The newest-N and unscored cuts count only sections that pass the filters (the table holds
    // the ceiling's levels already): pages outside an agent's grants, archived pages in a search
    // that leaves them out, pages outside the Space, folder or tags asked for must not take the
    // places of the caller's own (issue 11; archived pages and scopes: an attack,
    // test/http/attack-session-h.test.ts).
    const reachable = sectionsSayAll(p, scope)
      ? scope.includeArchived
        ? sql``
        : // Against the small index of archived sections (migration 027), named because the
          // planner otherwise reads the section's row by its key: a whole row, text included,
          // per match (half of a common word's query at 100,000 pages).
          sql`and not exists (select 1 from page_sections s indexed by page_sections_archived where s.id = ${fts}.rowid and s.archived = 1)`
      : sql`and exists (select 1 from page_sections s cross join pages p where s.id = ${fts}.rowid and p.id = s.page_id and ${w})`;
    // First the best matches from the index alone (prefilter), then the joins and filters on
    // those: a common word matches tens of thousands of sections, and joining them all before
    // the sort was most of a slow query. When the filters leave too few, the full query runs.
    const match = fts5Match(terms, op);
    // Two steps: the filters pick the best `limit` of the ranked matches (from a covering index,
    // migration 006), and only those rows are read whole (a section's text, a page's columns
    // past its body).
    const best = async (hits: RawBuilder<unknown>) =>
      (
        await sql<Candidate>`
        with hits as (${hits}),
        top as materialized (
          select hits.rid, hits.b from hits cross join page_sections s cross join pages p
          where s.id = hits.rid and p.id = s.page_id and ${w}
          order by hits.b, hits.rid desc limit ${limit})
        select ${COLS}, -top.b as score
        from top cross join page_sections s cross join pages p
        where s.id = top.rid and p.id = s.page_id
        order by top.b, top.rid desc`.execute(db)
      ).rows;
    // The ranked matches: all scored by bm25, the newest `newest` scored, or (every word
    // common) the newest unscored; each cut to the prefilter. Ties and unscored rows go newest first.
    const scoredAll = sql`select rowid as rid, ${bm25(fts)} as b from ${fts} where ${fts} match ${match} order by b, rowid desc`;
    rows = await best(
      !plan.scored
        ? sql`select rowid as rid, 0.0 as b from ${fts} where ${fts} match ${match} ${reachable} order by rowid desc limit ${prefilter(limit, false)}`
        : plan.newest !== null
          ? sql`select rid, b from (select rowid as rid, ${bm25(fts)} as b from ${fts} where ${fts} match ${match} ${reachable} order by rowid desc limit ${plan.newest}) order by b, rid desc limit ${prefilter(limit, true)}`
          : sql`${scoredAll} limit ${prefilter(limit, true)}`,
    );
    // A newest-N cut that left few: when the words match no more sections than the cut took,
    // every match was ranked and a run over all of them (lists.ts) would find no other. Counting
    // up to the cut costs a walk of the matches; ranking them all again cost twice that.
    if (plan.scored && plan.newest !== null && rows.length < Math.min(limit, BOUNDED_MIN)) complete = !(await matchesMoreThan(ctx, fts, match, plan.newest));
    if (rows.length < limit && plan.scored && plan.newest === null && (await matchesMoreThan(ctx, fts, match, prefilter(limit, true)))) {
      // The filters left too few of the best matches, and there are more: rank every match that passes them.
      rows = await best(scoredAll);
    }
  }
  const out = rows.filter((c) => visible(p, scope.action, c)).map((c) => ({ ...c, score: Number(c.score) }));
  return complete ? Object.assign(out, { complete }) : out;
}

/**
 * PostgreSQL's keyword rows (before the `visible` judgement), by the plan:
 * - every match ranked (its words are rare enough: at most the budget of sections);
 * - else the newest `plan.newest` matches ranked, or (every word common) the newest matches
 *   unranked (below).
 * One statement per round: the matches (`m`, filtered as the final rows are: matchesCounted),
 * each read once with what its score needs (pgRank's `cols`); their count and average length
 * (`f`); the best `limit` of them by score (`top`); and only those joined to their pages for
 * the columns a candidate carries. Joining every match to its page and reading it again to rank
 * it was half of a common word's statement at 100,000 pages.
 * The tsquery is written out in place so the planner sees a constant and uses the GIN index.
 */
async function pgKeywordRows(
  ctx: RetrievalContext,
  p: Principal,
  scope: Scope,
  plan: KeywordPlan,
  limit: number,
  w: RawBuilder<unknown>,
  docs: DocCounts | undefined,
): Promise<Candidate[] & { complete?: boolean }> {
  const db = ctx.store.db;
  const tq = pgTsQuery(plan.terms, plan.op);
  const rank = plan.scored ? pgRank(plan.weighed ?? plan.terms, docs, tq) : { cols: sql`0 as len`, score: sql`0.0::float8` };
  const pick = matchesCounted(p, scope, w);
  // bm25 measures a section against the average of the workspace's (at the ceiling the counts
  // read); a caller counted by its reach has no such figure: the matches' average stands in.
  // (One row whatever the branch: a scalar, never a column of m.)
  const avglen = docs?.avgTokens !== undefined ? sql`${docs.avgTokens}::float8` : sql`(select avg(len) from m)::float8`;
  // An any-word plan past its budget scores every match of its rarest words (`whole`) beside the
  // window's newest matches (keywordPlan).
  const whole = plan.scored && plan.newest !== null && plan.whole ? plan.whole : null;
  const matches = (q: RawBuilder<unknown>, window: { lo: number; want: number } | null) =>
    sql`select s.id, ${rank.cols} from ${pick.from}
        where s.tsv @@ ${q} and s.workspace_id = ${p.workspaceId} and ${pick.where}
        ${window ? sql`and s.id >= ${window.lo} order by s.id desc limit ${window.want}` : sql``}`;
  const round = async (window: { lo: number; want: number } | null) =>
    (
      await sql<Omit<Candidate, 'page_id'> & { page_id: string | null; found: number; sid: string | null }>`
      with ${
        whole && window
          ? sql`b as materialized (${matches(tq, window)}),
      m as materialized (select distinct on (id) * from (${matches(pgTsQuery(whole.terms, 'OR'), null)} union all select * from b) u order by id),
      f as (select (select count(*) from b)::int as found, ${avglen} as avglen),`
          : sql`m as materialized (${matches(tq, window)}),
      f as (select count(*)::int as found, ${avglen} as avglen from m),`
      }
      top as (
        select m.id, ${rank.score} as score from m cross join f
        order by ${plan.scored ? sql`score desc, m.id` : sql`m.id desc`} limit ${limit}),
      r as (
        select ${COLS}, top.score, s.id as sid
        from top join page_sections s on s.id = top.id join pages p on p.id = s.page_id
        where ${w})
      select r.*, f.found from f left join r on true order by r.score desc, ${plan.scored ? sql`r.sid` : sql`r.sid desc`}`.execute(db)
    ).rows;
  // The count of the round's matches comes with the ranked rows, or alone (page_id null) when
  // there are none.
  const rows = (r: Awaited<ReturnType<typeof round>>) => r.flatMap(({ found: _n, sid: _s, page_id, ...c }) => (page_id === null ? [] : [{ ...c, page_id }]));
  if (plan.scored && plan.newest === null) return rows(await round(null));
  // The newest `want` matches, ranked (or, every word common, newest first): each round is one
  // statement (one snapshot: a page rewritten meanwhile, its sections deleted and inserted under
  // new ids, is seen whole: an attack found such a page missing from 10–20 % of the answers when
  // rounds were separate statements). Its window of newest sections is open above (sections
  // written since the span was read are in it). The first is sized from the counts
  // (firstWindow); when a window holds fewer than `want` matches and older sections remain, the
  // next round's window is sized by the matches this one held: at least twice as wide, eightfold
  // when it held none.
  //
  // Reading matches newest first instead walked the workspace's sections backwards testing each
  // (at 100,000 pages, 57,000 rows read for a word in 8,800 sections: 130 ms), and ranking or
  // sorting every match read them all. A window lets PostgreSQL intersect the words' index
  // entries with the id range (migration 019's BRIN index) before it reads a row.
  // The window fills what the whole words leave of the budget.
  const want = plan.scored ? Math.max(1, plan.newest! - (whole?.sections ?? 0)) : prefilter(limit, false);
  const span = docs?.span ?? (await idSpan(ctx, p.workspaceId));
  if (span === null) return [];
  // The sections the counts are shares of: all the ceiling reads (term_stats), or for a
  // caller counted by its reach alone, about the span's ids.
  const sections = docs?.sections || span.hi - span.lo + 1;
  const step = Math.max(1, (span.hi - span.lo + 1) / Math.max(1, sections));
  let width = Math.ceil((docs ? firstWindow(want, plan, docs, sections) : want) * step);
  for (;;) {
    const lo = Math.max(span.lo, span.hi + 1 - width);
    const r = await round({ lo, want });
    const found = Number(r[0]?.found ?? 0);
    if (found >= want) return rows(r);
    // Every section of the span looked at, and fewer matches than the cut: each one was ranked
    // (a ranked plan), so a run over every match (lists.ts, when this left few) would find no other.
    if (lo <= span.lo) return plan.scored ? Object.assign(rows(r), { complete: true }) : rows(r);
    const spanned = span.hi + 1 - lo;
    width = found > 0 ? Math.max(2 * spanned, Math.ceil(((spanned * want) / found) * 1.25)) : 8 * spanned;
  }
}

/** The lowest and highest id of the workspace's sections (null: it has none). */
async function idSpan(ctx: RetrievalContext, workspaceId: string): Promise<IdSpan | null> {
  const row = (
    await sql<{ lo: string | null; hi: string | null }>`select min(id) as lo, max(id) as hi from page_sections where workspace_id = ${workspaceId}`.execute(
      ctx.store.db,
    )
  ).rows[0];
  return row?.lo && row.hi ? { lo: Number(row.lo), hi: Number(row.hi) } : null;
}

/**
 * A caller whose reach is its widest ceiling over the whole workspace, in a query naming no
 * Space, folder or tag: a section's own columns say whether it passes the filters (its level is
 * the higher of its page's sensitivity and its block's, `archived` its page's state, and a
 * deleted page has no sections), so the newest-matches cuts need not join its page.
 */
function sectionsSayAll(p: Principal, scope: Scope): boolean {
  return widestCeiling(p, scope.action) !== null && reachSql(p, scope.action) === null && !scope.space && !scope.folder && (scope.tags ?? []).length === 0;
}

/**
 * What the newest-matches cuts count, as SQL over `s` (and `p` when joined): exactly the
 * sections the final filters `w` keep, so none the caller will not get takes the place of one it
 * would (an attack found archived pages' sections, the newest after an archive, crowding active
 * matches out, test/http/attack-session-h.test.ts). From the section's own columns when they say
 * it all (sectionsSayAll): joining every match's page only to check was half a common query's
 * time at 100,000 pages (issue 18). Otherwise the pages are joined and `w` applies.
 */
function matchesCounted(p: Principal, scope: Scope, w: RawBuilder<unknown>): { from: RawBuilder<unknown>; where: RawBuilder<unknown> } {
  const ceiling = widestCeiling(p, scope.action);
  if (ceiling === null || !sectionsSayAll(p, scope)) return { from: sql`page_sections s join pages p on p.id = s.page_id`, where: w };
  return { from: sql`page_sections s`, where: scope.includeArchived ? sql`s.level <= ${rank(ceiling)}` : sql`s.level <= ${rank(ceiling)} and s.archived = 0` };
}

/**
 * How many of the workspace's newest sections the first window spans: enough to hold `want`
 * matches, with a quarter more, if the words are spread evenly. Any word: as many matches as the
 * words' sections together. All words: as many as the rarest word's (words of one text come
 * together), except when every word is common: then as if they came together by chance (a
 * smaller share, so a wider window). A window too narrow costs another round, which for common
 * words means reading their long index entries again; one too wide, some rows more.
 */
function firstWindow(want: number, plan: KeywordPlan, docs: ReadonlyMap<string, number>, sections: number): number {
  const total = Math.max(1, sections);
  const counts = plan.terms.map((t) => Math.min(total, docs.get(t) ?? 0));
  const expected =
    plan.op === 'OR' ? counts.reduce((a, b) => a + b, 0) : plan.scored ? Math.min(...counts) : counts.reduce((share, n) => share * (n / total), total);
  return ((want * total) / Math.max(1, expected)) * 1.25;
}

/**
 * Sections nearest to the query vector that pass the scope and the caller's ceiling, best
 * first (at most `limit`). The matrix holds every section of the workspace; rows are looked up
 * in batches until enough pass the filters or the matrix is exhausted.
 */
export async function vectorCandidates(
  ctx: RetrievalContext,
  p: Principal,
  scope: Scope,
  query: Float32Array,
  limit: number,
  /**
   * Other work waits to run beside this (a hybrid search's keyword list, lists.ts hybridLists),
   * and this is called when it may: once the helper thread is claiming chunks of the matrix, this
   * thread lets that work run, then claims what is left.
   */
  started?: () => void,
): Promise<Candidate[]> {
  const allowed = allowedLevels(p, scope.action);
  if (allowed === null) return [];
  const m = await ctx.retrieval.matrix(p.workspaceId);
  if (!m || m.dims !== query.length) return [];
  const w = where(p, scope, allowed);
  const out: Candidate[] = [];
  // Each window gives at least one section: `limit` windows usually suffice; more only when filters drop some.
  let k = Math.max(limit, 50);
  // Windows already looked at, by what they are (not by rank: rows may go or come between two
  // rounds, and a row that moved up into the part read before would never be looked at; attack
  // of session r).
  const looked = new Set<string>();
  const windowKey = (h: RowHit) => `${h.pageId}\u0000${h.ord}\u0000${h.last}\u0000${h.tag}`;
  let pending = started ? m.begin(query) : null;
  if (started) {
    started();
    // The work let go runs (its statements are synchronous on SQLite) before this resumes.
    if (pending) await new Promise((resolve) => setImmediate(resolve));
  }
  for (;;) {
    const hits = pending ? m.topOf(pending, query, Math.min(k, m.rows)) : m.top(query, Math.min(k, m.rows));
    pending = null;
    const batch = hits.filter((h) => !looked.has(windowKey(h)));
    for (const h of batch) looked.add(windowKey(h));
    for (let i = 0; i < batch.length; i += 400) {
      const part = batch.slice(i, i + 400);
      // Only the windows' own sections, each read once however many windows share its page.
      const rows = (
        await sql<Omit<Candidate, 'score'>>`
        select ${COLS} from ${windowList(ctx, part)} cross join page_sections s cross join pages p
        where s.page_id = j.page_id and s.ord between j.ord and j.last and p.id = s.page_id and ${w}
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
    // A later round may find windows that rank above earlier ones (they moved up): best first again.
    if (out.length >= limit || hits.length >= m.rows || k >= VECTOR_SCAN_CAP) return out.sort((a, b) => b.score - a.score).slice(0, limit);
    k *= 8;
  }
}
