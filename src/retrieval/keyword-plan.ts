import { sql, type RawBuilder } from 'kysely';
import { stemmer } from 'stemmer';
import type { Store } from '../store/db.js';
import { rank, type Level } from '../policy/sensitivity.js';
import { foldPg, PG_TS_CONFIG, pgTsQuery } from './keyword.js';
import { hasKeywordIndex, keywordTable, vocabTable } from './keyword-index.js';

/**
 * Planning a keyword query on SQLite so its cost stays bounded at any size.
 *
 * FTS5's bm25 costs two things: for each query word, a pass over every section holding it (to
 * weigh the word: about 9 ms for a word in 200,000 sections), and about 0.7 µs per matching
 * section scored. Word counts tell which words are costly; the plan leaves those out of the
 * scoring or caps the sections scored. Measured at 100,000 pages (docs/decisions.md).
 */

/**
 * A word in more sections than this (of the caller's workspace) is a common word: weighing it
 * would cost more than the whole query may, and bm25 gives it almost no weight anyway.
 */
export const COMMON_DOCS = 20_000;

/** Matching sections scored at most per query: past this, the newest matches are scored. */
export const SCORE_BUDGET = 2_000;

/**
 * PostgreSQL's budget: ts_rank_cd costs about 5 µs a section (FTS5's bm25 0.7 µs), and the
 * newest matches come from a backward scan of (workspace_id, id) that stops at the budget. At
 * 3,000 pages, a word in a fifth of the sections: 46 ms at 2,000, 8 ms at 500. 1,000 keeps
 * the evaluation set's quality of 2,000 (500 lost some); issue 18, docs/decisions.md.
 */
export const PG_SCORE_BUDGET = 1000;

/**
 * An any-word query keeps its rarest words while their sections total at most this many (at
 * least one word), and SQLite scores every match of them (about 4 ms at FTS5's 0.7 µs a match).
 * At SCORE_BUDGET (2,000) the plan left out words plain bm25 weighs: man-page evaluation set,
 * fts MRR@10 0.664 against plain bm25's 0.691; at 5,000 0.693 (issue 20, docs/decisions.md).
 */
export const ANY_WORD_BUDGET = 5_000;

/**
 * PostgreSQL's: each word kept costs a ts_rank_cd per match (about 5 µs), so keeping words up to
 * 5,000 sections cost keyword p50 +6 ms and hybrid p95 +7 ms at 100,000 pages; at 2,000 the
 * speed is the all-words plan's, for man-page fts MRR@10 0.673 instead of 0.680 (0.635 before
 * issue 20).
 */
export const PG_ANY_WORD_BUDGET = 2_000;

/** How a keyword query runs. */
export interface KeywordPlan {
  /** The words matched (and, when `scored`, weighed by bm25). */
  terms: string[];
  op: 'AND' | 'OR';
  /** False when every word is common: the newest sections holding them all come first, unweighed. */
  scored: boolean;
  /** Score only the newest this-many matches (null: all of them). */
  newest: number | null;
  /**
   * Any word, past `newest`: the rarest words whose sections together fit the budget. Every
   * match of these is scored, and only the newest of the other words' matches fill the rest.
   */
  whole?: { terms: string[]; sections: number };
  /**
   * PostgreSQL, any word: the words weighed in each match's score when they are more than those
   * matched (`terms`): the words SQLite's budget keeps. A match costs its row's read whatever it
   * is scored with, and a word more in its score about a microsecond.
   */
  weighed?: string[];
}

/**
 * The plan from the words' section counts (`docs`; null: every match is scored).
 * - Common words are left out when a rarer word remains, as stop words are: a section need not
 *   hold them. When every word is common, the query ranks the newest sections holding them all
 *   (any, for the any-word fallback).
 * - All words: matches are at most the rarest word's sections; past SCORE_BUDGET only the
 *   newest that many are scored, so a query of frequent words ranks recent writing.
 * - Any word: the rarest words are kept while their sections total at most `keepUpTo` (at least
 *   one word; whatever `budget` says); the more frequent ones weigh little in bm25.
 *   Past `budget` matches, every match of the rarest words that fit it is scored (`whole`) and
 *   the newest matches of the rest fill the budget.
 */
export function keywordPlan(
  terms: string[],
  op: 'AND' | 'OR',
  docs: Map<string, number> | null,
  /** Matches ranked at most (the newest of them past it). */
  budget = SCORE_BUDGET,
  /** The sections an any-word query's kept words may total. */
  keepUpTo = ANY_WORD_BUDGET,
): KeywordPlan {
  if (docs === null || terms.length === 0) return { terms, op, scored: true, newest: null };
  const count = (t: string) => docs.get(t) ?? 0;
  const rare = terms.filter((t) => count(t) <= COMMON_DOCS);
  if (rare.length === 0) return { terms, op, scored: false, newest: null };
  if (op === 'AND') return { terms: rare, op, scored: true, newest: Math.min(...rare.map(count)) > budget ? budget : null };
  // The words kept are chosen by `keepUpTo`, not by `budget`: PostgreSQL's smaller `budget` caps
  // only the matches it scores. Choosing by 1,000 there dropped words SQLite kept: paraphrases
  // (mostly any-word questions) MRR@10 0.537 against SQLite's 0.571; 0.562 with SQLite's words
  // (evaluation set, issue 18). Since issue 20 each engine keeps by its own figure
  // (ANY_WORD_BUDGET, PG_ANY_WORD_BUDGET): what a kept word costs differs sevenfold.
  let total = 0;
  const chosen = new Set([...rare].sort((a, b) => count(a) - count(b)).filter((t, i) => (total += count(t)) <= keepUpTo || i === 0));
  const keep = rare.filter((t) => chosen.has(t));
  if (keep.reduce((n, t) => n + count(t), 0) <= budget) return { terms: keep, op, scored: true, newest: null };
  // Past the budget, a newest-first cut alone dropped the old sections holding the rarest word,
  // the ones bm25 ranks first (man-page evaluation set on PostgreSQL: `reposition read/write file
  // offset` lost lseek(2)). The rarest words that fit the budget keep every match.
  let fit = 0;
  const whole = [...keep].sort((a, b) => count(a) - count(b)).filter((t) => (fit += count(t)) <= budget);
  const sections = whole.reduce((n, t) => n + count(t), 0);
  return { terms: keep, op, scored: true, newest: budget, ...(whole.length > 0 ? { whole: { terms: whole, sections } } : {}) };
}

/**
 * PostgreSQL's plan: matches within PG_SCORE_BUDGET, the words matched within PG_ANY_WORD_BUDGET,
 * and for any word, the words weighed in each match's score within ANY_WORD_BUDGET (`weighed`,
 * SQLite's words). Weighing the words PostgreSQL could not afford to match brought man-page fts
 * MRR@10 0.665 → 0.678 and hybrid 0.678 → 0.682 at no measurable cost (issue 20).
 */
export function pgKeywordPlan(terms: string[], op: 'AND' | 'OR', docs: Map<string, number> | null): KeywordPlan {
  const plan = keywordPlan(terms, op, docs, PG_SCORE_BUDGET, PG_ANY_WORD_BUDGET);
  if (op !== 'OR' || !plan.scored) return plan;
  const weighed = keywordPlan(terms, op, docs, PG_SCORE_BUDGET, ANY_WORD_BUDGET).terms;
  return weighed.length > plan.terms.length ? { ...plan, weighed } : plan;
}

/** Counts change slowly and only steer plans: a common word's are reused for this long. */
const COUNT_TTL_MS = 10 * 60_000;
const COUNT_CACHE_MAX = 20_000;
/** Reading a word's count costs about its list's length: cached from this many sections up. */
const CACHE_FROM = 1_000;
const countCaches = new WeakMap<Store, Map<string, { n: number; at: number }>>();

/**
 * Sections holding each term; on PostgreSQL also `sections`, how many sections the ceiling reads
 * in the workspace (term_stats keeps them as the lexeme '', which no word becomes), by which
 * keywordCandidates sizes its window of newest sections.
 */
export type DocCounts = Map<string, number> & { sections?: number; span?: IdSpan; avgTokens?: number };

/** The lowest and highest section id of a workspace when its words were counted (PostgreSQL). */
export interface IdSpan {
  lo: number;
  hi: number;
}

/** Whose sections a count covers. */
export interface CountScope {
  workspaceId: string;
  /** The caller's widest ceiling: its keyword table (keyword-index.ts). */
  ceiling: Level;
  /**
   * For a caller whose reach is not that one ceiling over the whole workspace (an agent with
   * grants on some paths only, or ceilings that differ by path): the SQL condition over `s`
   * (page_sections) and `p` (pages) that a section it may see meets.
   */
  visibility?: RawBuilder<unknown> | undefined;
}

/**
 * How many sections the caller may see hold each query term, for keywordPlan.
 *
 * The plan changes what a caller sees, so no other workspace's pages and no page the caller
 * cannot see may move it (issue 11).
 * - SQLite: the vocabulary of the caller's keyword table, which holds only the workspace's
 *   sections at or below its ceiling: exact for a caller that sees every such section.
 * - PostgreSQL (issue 18): the workspace's word statistics at the levels at or below the
 *   ceiling (term_stats), exact and current in every transaction.
 * For a caller whose reach is narrower (`visibility`), the sections it may reach are counted,
 * stopping past COMMON_DOCS (past it a count only says "common"), and uncached.
 */
export async function termDocCounts(store: Store, terms: string[], scope: CountScope): Promise<DocCounts> {
  if (store.dialect === 'postgres') return pgCounts(store, terms, scope);
  const table = await tableCounts(store, terms, scope.workspaceId, scope.ceiling);
  if (!scope.visibility) return table;
  const fts = keywordTable(scope.workspaceId, scope.ceiling);
  const out = new Map<string, number>();
  for (const t of terms) {
    // A table count of 0 is never cached, so it is current: nothing to count. Any other table
    // count may be a cached one and must not bound this one (it counts sections the caller
    // cannot reach).
    if (out.has(t)) continue;
    if (table.get(t) === 0) {
      out.set(t, 0);
      continue;
    }
    // The word as the user typed it, as one FTS5 phrase: the index's tokenizer folds and stems
    // it exactly as it did the text.
    const match = `"${t.replaceAll('"', '""')}"`;
    const r = await sql<{ n: number }>`select count(*) as n from (
      select 1 from ${fts} f cross join page_sections s cross join pages p
      where f.${fts} match ${match} and s.id = f.rowid and p.id = s.page_id and ${scope.visibility}
      limit ${COMMON_DOCS + 1})`.execute(store.db);
    out.set(t, Number(r.rows[0]?.n ?? 0));
  }
  return out;
}

/**
 * PostgreSQL's counts. For a caller that sees every section of the workspace at or below its
 * ceiling: the workspace's word statistics (term_stats, migration 016, and the changes not yet
 * folded into it, term_stats_pending: `term_counts`, migration 029, exact in one snapshot),
 * summed over the levels it reads, in indexed reads. A term is
 * looked up by the lexemes PostgreSQL's parser makes of it (as the query does); a term of
 * several lexemes counts as its rarest. The index keeps every word (migration 026: no stop
 * words); a term the parser makes no lexeme of counts as common, so the plan leaves it out.
 */
async function pgCounts(store: Store, terms: string[], scope: CountScope): Promise<DocCounts> {
  if (scope.visibility) return pgReachCounts(store, terms, scope, scope.visibility);
  const unique = [...new Set(terms)];
  // The workspace's span of section ids comes along (two probes of its (workspace_id, id)
  // index): keywordCandidates sizes its window of newest sections by it without another trip.
  const r = await sql<{
    i: string;
    lexemes: number;
    n: number | null;
    sections: number | null;
    tokens: string | null;
    lo: string | null;
    hi: string | null;
  }>`
    select q.i, count(x.lexeme)::int as lexemes, min(coalesce(st.n, 0)) as n,
      (select sum(docs) from term_counts where workspace_id = ${scope.workspaceId} and lexeme = '' and level <= ${rank(scope.ceiling)}) as sections,
      (select sum(docs) from term_counts where workspace_id = ${scope.workspaceId} and lexeme = ' ' and level <= ${rank(scope.ceiling)}) as tokens,
      (select min(id) from page_sections where workspace_id = ${scope.workspaceId}) as lo,
      (select max(id) from page_sections where workspace_id = ${scope.workspaceId}) as hi
    from unnest(${unique.map(foldPg)}::text[]) with ordinality as q(t, i)
    left join lateral unnest(tsvector_to_array(to_tsvector(${PG_TS_CONFIG}, q.t))) as x(lexeme) on true
    left join lateral (select sum(docs) as n from term_counts s
      where s.workspace_id = ${scope.workspaceId} and s.lexeme = x.lexeme and s.level <= ${rank(scope.ceiling)}) as st on true
    group by q.i`.execute(store.db);
  const out: DocCounts = new Map<string, number>();
  for (const row of r.rows) {
    const t = unique[Number(row.i) - 1]!;
    out.set(t, Number(row.lexemes) === 0 ? COMMON_DOCS + 1 : Math.max(0, Number(row.n ?? 0)));
    out.sections = Number(row.sections ?? 0);
    if (out.sections > 0 && row.tokens !== null) out.avgTokens = Number(row.tokens) / out.sections;
    if (row.lo !== null && row.hi !== null) out.span = { lo: Number(row.lo), hi: Number(row.hi) };
  }
  return out;
}

/**
 * For a caller whose reach is narrower than its ceiling over the workspace (`visibility`): the
 * sections it may reach holding the word, counted live up to COMMON_DOCS + 1 (past it a count
 * only says "common"), and uncached.
 */
async function pgReachCounts(store: Store, terms: string[], scope: CountScope, visibility: RawBuilder<unknown>): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const t of terms) {
    if (out.has(t)) continue;
    const q = pgTsQuery([t], 'AND');
    const r = await sql<{ nodes: number; n: number }>`select numnode(${q}) as nodes, (select count(*) from (
      select 1 from page_sections s join pages p on p.id = s.page_id
      where s.tsv @@ ${q} and s.workspace_id = ${scope.workspaceId} and s.level <= ${rank(scope.ceiling)} and ${visibility}
      limit ${COMMON_DOCS + 1}) m) as n`.execute(store.db);
    const row = r.rows[0];
    out.set(t, row && Number(row.nodes) === 0 ? COMMON_DOCS + 1 : Number(row?.n ?? 0));
  }
  return out;
}

/** Sections of the workspace's table at `ceiling` holding each term, by the index's stem (cached for common words). */
async function tableCounts(store: Store, terms: string[], workspaceId: string, ceiling: Level): Promise<Map<string, number>> {
  let cache = countCaches.get(store);
  if (!cache) countCaches.set(store, (cache = new Map()));
  const now = Date.now();
  const stems = terms.map(indexStem);
  const key = (s: string) => `${workspaceId}|${ceiling}|${s}`;
  const counts = new Map<string, number>();
  const missing: string[] = [];
  for (const s of new Set(stems)) {
    const c = cache.get(key(s));
    if (c && now - c.at <= COUNT_TTL_MS) counts.set(s, c.n);
    else missing.push(s);
  }
  if (missing.length > 0) {
    const rows = (await hasKeywordIndex(store, workspaceId))
      ? (
          await sql<{ term: string; doc: number }>`select term, doc from ${vocabTable(workspaceId, ceiling)} where term in (${sql.join(missing)})`.execute(
            store.db,
          )
        ).rows
      : [];
    if (cache.size >= COUNT_CACHE_MAX) {
      for (const [k, c] of cache) if (now - c.at > COUNT_TTL_MS) cache.delete(k);
      if (cache.size >= COUNT_CACHE_MAX) cache.clear();
    }
    const found = new Map(rows.map((r) => [r.term, Number(r.doc)]));
    for (const s of missing) {
      const n = found.get(s) ?? 0;
      counts.set(s, n);
      if (n >= CACHE_FROM) cache.set(key(s), { n, at: now });
    }
  }
  return new Map(terms.map((t, i) => [t, counts.get(stems[i]!)!]));
}

/** A query term as the SQLite index stores it: diacritics removed (remove_diacritics), then the Porter stem. */
function indexStem(term: string): string {
  return stemmer(term.normalize('NFKD').replace(/\p{M}/gu, ''));
}
