import { sql } from 'kysely';
import { stemmer } from 'stemmer';
import { LEVELS } from '../policy/sensitivity.js';
import type { Store } from '../store/db.js';
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
/** How long a small per-workspace count is reused (the fallback asks for several per query). */
const RARE_TTL_MS = 30_000;
const countCaches = new WeakMap<Store, Map<string, { n: number; at: number }>>();

/** Whose sections a count covers: one workspace, at the levels the caller may see there. */
export interface CountScope {
  workspaceId: string;
  levels: readonly string[];
}

/**
 * How many sections hold each query term, as far as planning can tell (null on PostgreSQL, where
 * counting would mean a scan), for keywordPlan.
 *
 * Per workspace and per level (issue 11): the plan changes what a caller sees, so no other
 * workspace's pages and no page above the caller's levels may move it. The workspace's counts
 * come from its own index's vocabulary (cheap and cached); for a caller who sees every level
 * they are the answer. For one who does not, they are an upper bound of the caller's own
 * counts, and while every workspace count, and their sum, is within SCORE_BUDGET the plan is the
 * same whatever the exact counts (every word kept, every match scored): those counts are
 * returned as they are. Only past that are the caller's own counts taken (capped past
 * COMMON_DOCS, cached per workspace and levels), so the decision always equals the one
 * per-level counts give; only its cost differs.
 */
export async function termDocCounts(store: Store, terms: string[], scope: CountScope, op: 'AND' | 'OR' = 'OR'): Promise<Map<string, number> | null> {
  const all = await workspaceCounts(store, terms, scope.workspaceId);
  if (all === null) return null;
  if (seesEveryLevel(scope)) return all;
  const counts = [...all.values()];
  const exact = async (some: string[]) => {
    // Past SCORE_BUDGET a count matters only as "common or not": count that far only when the
    // workspace's count says it could be common.
    const out = new Map<string, number>();
    for (const common of [false, true]) {
      const part = some.filter((t) => ((all.get(t) ?? 0) > COMMON_DOCS) === common);
      if (part.length > 0) for (const [t, n] of await scopeCounts(store, part, scope, common ? COMMON_DOCS + 1 : SCORE_BUDGET + 1)) out.set(t, n);
    }
    return out;
  };
  if (op === 'OR') {
    // Any word: the rarest are kept while their sum is within SCORE_BUDGET, so past it the order
    // of the exact counts decides.
    if (counts.every((n) => n <= SCORE_BUDGET) && counts.reduce((a, b) => a + b, 0) <= SCORE_BUDGET) return all;
    const ex = await exact(terms);
    return new Map(terms.map((t) => [t, ex.get(t)!]));
  }
  // All words: only "common or not" (past COMMON_DOCS) and, when no word is within SCORE_BUDGET,
  // the smallest count decide the plan. A word the workspace holds at most SCORE_BUDGET times
  // settles the second (the plan scores every match) and its own count needs no lookup.
  const settled = counts.some((n) => n <= SCORE_BUDGET);
  const need = terms.filter((t) => (all.get(t) ?? 0) > COMMON_DOCS || (!settled && (all.get(t) ?? 0) > 0));
  if (need.length === 0) return all;
  const ex = await exact(need);
  return new Map(terms.map((t) => [t, ex.get(t) ?? all.get(t)!]));
}

/**
 * The query terms that no section of the caller's workspace, at its levels, holds (the "weak"
 * fallback's test: a word the index does not know here is likely a misspelling). Per workspace
 * and per level, like the plan; a word no section of the workspace holds needs no lookup.
 */
export async function termsAbsent(store: Store, terms: string[], scope: CountScope): Promise<Set<string> | null> {
  const all = await workspaceCounts(store, terms, scope.workspaceId);
  if (all === null) return null;
  if (seesEveryLevel(scope)) return new Set(terms.filter((t) => (all.get(t) ?? 0) === 0));
  const present = terms.filter((t) => (all.get(t) ?? 0) > 0);
  const here = await scopeCounts(store, present, scope, 1);
  return new Set(terms.filter((t) => (here.get(t) ?? 0) === 0));
}

/** Sections of the workspace, at the levels, holding each term; counting stops at `cap`. */
async function scopeCounts(store: Store, terms: string[], scope: CountScope, cap: number): Promise<Map<string, number>> {
  let cache = countCaches.get(store);
  if (!cache) countCaches.set(store, (cache = new Map()));
  const now = Date.now();
  const stems = terms.map(indexStem);
  const fts = keywordTable(scope.workspaceId);
  const prefix = `${scope.workspaceId}|${[...scope.levels].sort().join(',')}|${cap}|`;
  const counts = new Map<string, number>();
  for (const [i, s] of stems.entries()) {
    if (counts.has(s)) continue;
    const c = cache.get(prefix + s);
    if (c && now - c.at <= COUNT_TTL_MS) {
      counts.set(s, c.n);
      continue;
    }
    // The word as the user typed it, as one FTS5 phrase: the index's tokenizer folds and stems it
    // exactly as it did the text (stemming a stem again may not give the stem back).
    const match = `"${terms[i]!.replaceAll('"', '""')}"`;
    const levels = [...scope.levels];
    const n = Number(
      (
        await sql<{ n: number }>`select count(*) as n from (
          select 1 from ${fts} f cross join page_sections s cross join pages p
          where f.${fts} match ${match} and s.id = f.rowid
            and p.id = s.page_id and p.sensitivity in (${sql.join(levels)}) and (s.block_level is null or s.block_level in (${sql.join(levels)}))
          limit ${cap})`.execute(store.db)
      ).rows[0]?.n ?? 0,
    );
    counts.set(s, n);
    trimCache(cache, now);
    // Costly counts are kept for COUNT_TTL_MS, smaller ones briefly (RARE_TTL_MS), a word absent
    // here not at all, so a new word counts at once. A stale count only steers a plan.
    if (n > 0) cache.set(prefix + s, { n, at: n >= CACHE_FROM ? now : now - COUNT_TTL_MS + RARE_TTL_MS });
  }
  return new Map(terms.map((t, i) => [t, counts.get(stems[i]!)!]));
}

function trimCache(cache: Map<string, { n: number; at: number }>, now: number): void {
  if (cache.size < COUNT_CACHE_MAX) return;
  for (const [k, c] of cache) if (now - c.at > COUNT_TTL_MS) cache.delete(k);
  if (cache.size >= COUNT_CACHE_MAX) cache.clear();
}

function seesEveryLevel(scope: CountScope): boolean {
  return LEVELS.every((l) => scope.levels.includes(l));
}

/**
 * How many sections of the workspace hold each term (its index's fts5vocab reads the word's
 * whole list: milliseconds for a common word, so those counts are cached).
 */
async function workspaceCounts(store: Store, terms: string[], workspaceId: string): Promise<Map<string, number> | null> {
  if (store.dialect !== 'sqlite') return null;
  let cache = countCaches.get(store);
  if (!cache) countCaches.set(store, (cache = new Map()));
  const now = Date.now();
  const stems = terms.map(indexStem);
  const counts = new Map<string, number>();
  const missing: string[] = [];
  for (const s of new Set(stems)) {
    const c = cache.get(`${workspaceId}|*|${s}`);
    if (c && now - c.at <= COUNT_TTL_MS) counts.set(s, c.n);
    else missing.push(s);
  }
  if (missing.length > 0) {
    const rows = (await hasKeywordIndex(store, workspaceId))
      ? (await sql<{ term: string; doc: number }>`select term, doc from ${vocabTable(workspaceId)} where term in (${sql.join(missing)})`.execute(store.db)).rows
      : [];
    const found = new Map(rows.map((r) => [r.term, Number(r.doc)]));
    trimCache(cache, now);
    for (const s of missing) {
      const n = found.get(s) ?? 0;
      counts.set(s, n);
      if (n >= CACHE_FROM) cache.set(`${workspaceId}|*|${s}`, { n, at: now });
    }
  }
  return new Map(terms.map((t, i) => [t, counts.get(stems[i]!)!]));
}

/** A query term as the SQLite index stores it: diacritics removed (remove_diacritics), then the Porter stem. */
function indexStem(term: string): string {
  return stemmer(term.normalize('NFKD').replace(/\p{M}/gu, ''));
}
