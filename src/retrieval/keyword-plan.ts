import { sql } from 'kysely';
import { stemmer } from 'stemmer';
import type { Store } from '../store/db.js';
import { hasKeywordIndex, levelVocabTable, RAISED_LEVELS, vocabTable } from './keyword-index.js';

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

/** How a keyword query runs. */
export interface KeywordPlan {
  /** The words matched (and, when `scored`, weighed by bm25). */
  terms: string[];
  op: 'AND' | 'OR';
  /** False when every word is common: the newest sections holding them all come first, unweighed. */
  scored: boolean;
  /** Score only the newest this-many matches (null: all of them). */
  newest: number | null;
}

/**
 * The plan from the words' section counts (`docs`, null on PostgreSQL: every match is scored).
 * - Common words are left out when a rarer word remains, as stop words are: a section need not
 *   hold them. When every word is common, the query ranks the newest sections holding them all
 *   (any, for the any-word fallback).
 * - All words: matches are at most the rarest word's sections; past SCORE_BUDGET only the
 *   newest that many are scored, so a query of frequent words ranks recent writing.
 * - Any word: the rarest words are kept while their sections total at most SCORE_BUDGET (at
 *   least one word); the more frequent ones weigh little in bm25.
 */
export function keywordPlan(terms: string[], op: 'AND' | 'OR', docs: Map<string, number> | null): KeywordPlan {
  if (docs === null || terms.length === 0) return { terms, op, scored: true, newest: null };
  const count = (t: string) => docs.get(t) ?? 0;
  const rare = terms.filter((t) => count(t) <= COMMON_DOCS);
  if (rare.length === 0) return { terms, op, scored: false, newest: null };
  if (op === 'AND') return { terms: rare, op, scored: true, newest: Math.min(...rare.map(count)) > SCORE_BUDGET ? SCORE_BUDGET : null };
  let total = 0;
  const chosen = new Set([...rare].sort((a, b) => count(a) - count(b)).filter((t, i) => (total += count(t)) <= SCORE_BUDGET || i === 0));
  const keep = rare.filter((t) => chosen.has(t));
  return { terms: keep, op, scored: true, newest: keep.reduce((n, t) => n + count(t), 0) > SCORE_BUDGET ? SCORE_BUDGET : null };
}

/** Counts change slowly and only steer plans: a common word's are reused for this long. */
const COUNT_TTL_MS = 10 * 60_000;
const COUNT_CACHE_MAX = 20_000;
/** Reading a word's counts costs about its list's length: cached from this many sections up. */
const CACHE_FROM = 1_000;

/** Sections of one workspace holding a word: all of them, and those at each level above public. */
interface LevelCounts {
  all: number;
  raised: Record<(typeof RAISED_LEVELS)[number], number>;
  at: number;
}
const countCaches = new WeakMap<Store, Map<string, LevelCounts>>();

/** Whose sections a count covers: one workspace, at the levels the caller may see there. */
export interface CountScope {
  workspaceId: string;
  levels: readonly string[];
}

/**
 * How many sections the caller may see hold each query term (null on PostgreSQL, where counting
 * would mean a scan), for keywordPlan.
 *
 * Per workspace and per level (issue 11): the plan changes what a caller sees, so no other
 * workspace's pages and no page above the caller's levels may move it. Every count is the
 * workspace's (its own index's vocabulary) minus the sections above the caller's levels that
 * hold the word (the level index's vocabulary, keyword-index.ts): exact, and two lookups.
 */
export async function termDocCounts(store: Store, terms: string[], scope: CountScope): Promise<Map<string, number> | null> {
  const counts = await levelCounts(store, terms, scope.workspaceId);
  if (counts === null) return null;
  return new Map(terms.map((t) => [t, visibleCount(counts.get(t)!, scope)]));
}

function visibleCount(c: LevelCounts, scope: CountScope): number {
  return RAISED_LEVELS.reduce((n, l) => (scope.levels.includes(l) ? n : n - c.raised[l]), c.all);
}

/** Each term's section counts in the workspace, by the index's stem (cached for common words). */
async function levelCounts(store: Store, terms: string[], workspaceId: string): Promise<Map<string, LevelCounts> | null> {
  if (store.dialect !== 'sqlite') return null;
  let cache = countCaches.get(store);
  if (!cache) countCaches.set(store, (cache = new Map()));
  const now = Date.now();
  const stems = terms.map(indexStem);
  const counts = new Map<string, LevelCounts>();
  const missing: string[] = [];
  for (const s of new Set(stems)) {
    const c = cache.get(`${workspaceId}|${s}`);
    if (c && now - c.at <= COUNT_TTL_MS) counts.set(s, c);
    else missing.push(s);
  }
  if (missing.length > 0) {
    const rows = (await hasKeywordIndex(store, workspaceId))
      ? (
          await sql<{ term: string; col: string; doc: number }>`
          select term, '*' as col, doc from ${vocabTable(workspaceId)} where term in (${sql.join(missing)})
          union all
          select term, col, doc from ${levelVocabTable(workspaceId)} where term in (${sql.join(missing)})`.execute(store.db)
        ).rows
      : [];
    if (cache.size >= COUNT_CACHE_MAX) {
      for (const [k, c] of cache) if (now - c.at > COUNT_TTL_MS) cache.delete(k);
      if (cache.size >= COUNT_CACHE_MAX) cache.clear();
    }
    for (const s of missing) {
      const c: LevelCounts = { all: 0, raised: { internal: 0, confidential: 0, secret: 0 }, at: now };
      counts.set(s, c);
      for (const r of rows) {
        if (r.term !== s) continue;
        if (r.col === '*') c.all = Number(r.doc);
        else if ((RAISED_LEVELS as readonly string[]).includes(r.col)) c.raised[r.col as (typeof RAISED_LEVELS)[number]] = Number(r.doc);
      }
      if (c.all >= CACHE_FROM) cache.set(`${workspaceId}|${s}`, c);
    }
  }
  return new Map(terms.map((t, i) => [t, counts.get(stems[i]!)!]));
}

/** A query term as the SQLite index stores it: diacritics removed (remove_diacritics), then the Porter stem. */
function indexStem(term: string): string {
  return stemmer(term.normalize('NFKD').replace(/\p{M}/gu, ''));
}
