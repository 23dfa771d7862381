import { sql } from 'kysely';
import { stemmer } from 'stemmer';
import type { Store } from '../store/db.js';

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

/** Counts change slowly and only steer plans: each is reused for this long. */
const COUNT_TTL_MS = 10 * 60_000;
const COUNT_CACHE_MAX = 20_000;
const CACHE_FROM = 1_000;
const countCaches = new WeakMap<Store, Map<string, { n: number; at: number }>>();

/** Whose sections a count covers: one workspace, at the levels the caller may see there. */
export interface CountScope {
  workspaceId: string;
  levels: readonly string[];
}

/**
 * How many sections of the caller's workspace, at the levels it may see, hold each query term
 * (by its Porter stem as the SQLite index stores it); null on PostgreSQL, where counting would
 * mean a scan. Counting stops past COMMON_DOCS (only "common or not" matters above it).
 *
 * Per workspace and per level (issue 11): a count drives the plan and the "weak" decision,
 * both of which change what a caller sees, so no other workspace's pages and no page above
 * the caller's levels may move it. Costly counts are cached per store, workspace and levels.
 */
export async function termDocCounts(store: Store, terms: string[], scope: CountScope): Promise<Map<string, number> | null> {
  if (store.dialect !== 'sqlite') return null;
  let cache = countCaches.get(store);
  if (!cache) countCaches.set(store, (cache = new Map()));
  const now = Date.now();
  const stems = terms.map(indexStem);
  const prefix = `${scope.workspaceId}|${[...scope.levels].sort().join(',')}|`;
  const counts = new Map<string, number>();
  for (const s of new Set(stems)) {
    const c = cache.get(prefix + s);
    if (c && now - c.at <= COUNT_TTL_MS) {
      counts.set(s, c.n);
      continue;
    }
    // The stem as an FTS5 phrase: the tokenizer stems it again to itself.
    const match = `"${s.replaceAll('"', '""')}"`;
    const levels = [...scope.levels];
    const n = Number(
      (
        await sql<{ n: number }>`select count(*) as n from (
          select 1 from page_sections_fts f cross join page_sections s cross join pages p
          where f.page_sections_fts match ${match} and s.id = f.rowid and s.workspace_id = ${scope.workspaceId}
            and p.id = s.page_id and p.sensitivity in (${sql.join(levels)}) and (s.block_level is null or s.block_level in (${sql.join(levels)}))
          limit ${COMMON_DOCS + 1})`.execute(store.db)
      ).rows[0]?.n ?? 0,
    );
    counts.set(s, n);
    if (cache.size >= COUNT_CACHE_MAX) {
      for (const [k, c] of cache) if (now - c.at > COUNT_TTL_MS) cache.delete(k);
      if (cache.size >= COUNT_CACHE_MAX) cache.clear();
    }
    // Only costly counts are kept: a rare word's is read fresh, so new words count at once.
    if (n >= CACHE_FROM) cache.set(prefix + s, { n, at: now });
    else cache.delete(prefix + s);
  }
  return new Map(terms.map((t, i) => [t, counts.get(stems[i]!)!]));
}

/** A query term as the SQLite index stores it: diacritics removed (remove_diacritics), then the Porter stem. */
function indexStem(term: string): string {
  return stemmer(term.normalize('NFKD').replace(/\p{M}/gu, ''));
}
