import { sql, type RawBuilder } from 'kysely';
import { stemmer } from 'stemmer';
import type { DocCounts } from './keyword-plan.js';

/** Query parsing for keyword search: user text becomes plain terms, never engine syntax. */

/** At most this many terms are used; the rest of a very long query is ignored. */
export const MAX_TERMS = 32;
const MAX_TERM_LENGTH = 64;

/** A word of a query, and of the text SQLite's keyword index reads: letters, digits and marks. */
const WORD = /[\p{L}\p{N}\p{M}]+/gu;
const NOT_WORD = /[^\p{L}\p{N}\p{M}]+/gu;

/**
 * Section text as SQLite's keyword index reads it (keyword-index.ts, migration 022): NFKC-folded,
 * and everything but letters, digits and marks a space, as `queryTerms` reads a query. FTS5's
 * tokenizer has tables of Unicode 6.1 and reads later symbols as letters (`🦄word🦄` was one
 * token, so `word` never found it: an attack, test/http/attack-session-i.test.ts). ASCII text is
 * already split that way by the tokenizer, and is passed as it is.
 */
export function indexText(t: string): string {
  if (/^[\x00-\x7f]*$/.test(t)) return t;
  return t.normalize('NFKC').replace(NOT_WORD, ' ');
}

/** The words of a text as the keyword index reads them (indexText), lower-cased: what SQLite's tokenizer then folds and stems. */
export function indexWords(t: string): string[] {
  return indexText(t).toLowerCase().match(WORD) ?? [];
}

/** A word's stem as SQLite's tokenizer makes it (diacritics folded, Porter), memoised: words repeat. */
const stems = new Map<string, string>();
const STEMS_MAX = 200_000;
export function stemOf(word: string): string {
  let s = stems.get(word);
  if (s === undefined) {
    s = stemmer(word.normalize('NFKD').replace(/\p{M}/gu, ''));
    if (stems.size >= STEMS_MAX) stems.clear();
    stems.set(word, s);
  }
  return s;
}

/** The stems of a text's words, as the keyword index reads them. */
export function stemsOf(text: string): string[] {
  return indexWords(text)
    .map(stemOf)
    .filter((s) => s !== '');
}

/**
 * How much of a query a section answers counts beside how well: an any-word list's scores are
 * multiplied by the share of the query's words (stems) the section holds, to the power
 * COVERAGE_POWER, and the list re-sorted. It replaces the all-words stage that ran first and,
 * when some section held every word, answered those alone: that lost the page that says it in
 * other words (issue 20: man-page evaluation set fts MRR@10 0.645, plain bm25 0.691). Plain
 * any-word bm25 lost the Debian set's questions a section answers whole (paraphrase 0.571 →
 * 0.559); the square root of the share kept both (0.694 and 0.574, SQLite).
 */
export const COVERAGE_POWER = 0.5;

/** The list's scores times the share of the query's words each section holds, best first. */
export function byCoverage<C extends { score: number; title: string; heading: string; text: string }>(list: C[], terms: string[]): C[] {
  const words = [...new Set(terms.map(stemOf).filter((w) => w !== ''))];
  if (words.length <= 1) return list;
  const held = heldWords(words);
  return list
    .map((c) => ({ ...c, score: c.score * (held(`${c.title}\n${c.heading}\n${c.text}`) / words.length) ** COVERAGE_POWER }))
    .sort((a, b) => b.score - a.score);
}

/**
 * How many of `stems` a text's words stem to. Each stem's first letters are looked for with
 * `indexOf` (a Porter stem keeps its word's first letters) and only the words found there are
 * stemmed: tokenising every word with a Unicode regular expression cost 15 ms per 100 sections
 * of 1,500 characters, this well under 1. A word whose first letters carry a diacritic the stem
 * does not (`élan` for `elan`) is not counted: the share is a ranking hint, the match was made
 * by the index.
 */
function heldWords(stems: string[]): (text: string) => number {
  const want = [...new Set(stems)];
  return (text) => {
    const t = text.toLowerCase();
    let n = 0;
    for (const s of want) if (holdsStem(t, s)) n++;
    return n;
  };
}

const LETTER = /[\p{L}\p{N}\p{M}]/u;
function isWordChar(t: string, i: number): boolean {
  const c = t.charCodeAt(i);
  if (c < 128) return (c >= 97 && c <= 122) || (c >= 48 && c <= 57) || (c >= 65 && c <= 90);
  return LETTER.test(t[i]!);
}

function holdsStem(t: string, stem: string): boolean {
  const head = stem.slice(0, 3);
  for (let i = t.indexOf(head); i >= 0; i = t.indexOf(head, i + 1)) {
    if (i > 0 && isWordChar(t, i - 1)) continue;
    let j = i + head.length;
    while (j < t.length && isWordChar(t, j)) j++;
    if (stemOf(t.slice(i, j).normalize('NFKC')) === stem) return true;
  }
  return false;
}

/**
 * The terms of a query: runs of letters and digits (any script, NFKC-folded), lower-cased,
 * deduplicated. Quotes, operators (AND, OR, NOT, NEAR, `*`, `^`, `-`, `:`) and punctuation are
 * separators, not syntax: a user's query can never be an engine query.
 */
export function queryTerms(q: string): string[] {
  const out: string[] = [];
  for (const m of q.normalize('NFKC').matchAll(WORD)) {
    const t = m[0].toLowerCase().slice(0, MAX_TERM_LENGTH);
    if (!out.includes(t)) out.push(t);
    if (out.length >= MAX_TERMS) break;
  }
  return out;
}

/**
 * A section's length as bm25 measures it: the runs of letters and digits in its title, heading
 * and text (FTS5 counts its tokens so; PostgreSQL reads `page_sections.tokens`, migration 025).
 */
export function countWords(...parts: string[]): number {
  let n = 0;
  for (const p of parts) {
    WORD.lastIndex = 0;
    while (WORD.exec(p)) n++;
  }
  return n;
}

/** An FTS5 MATCH string: each term a quoted string, all required (AND) or any (OR). */
export function fts5Match(terms: string[], op: 'AND' | 'OR'): string {
  return terms.map((t) => `"${t.replaceAll('"', '""')}"`).join(` ${op} `);
}

/**
 * PostgreSQL's text search configuration of the keyword index (migration 026): `english` with no
 * stop words, so every word is indexed and weighed as FTS5 does. A literal, as the index names it.
 */
export const PG_TS_CONFIG = sql.lit('cv_english');

/**
 * A PostgreSQL tsquery built from the terms. Terms hold only letters, digits and marks, so they
 * cannot be tsquery syntax; each still goes through `plainto_tsquery`, which never raises, and
 * the results are joined with && or ||. A term the parser makes no lexeme of drops out.
 */
export function pgTsQuery(terms: string[], op: 'AND' | 'OR'): RawBuilder<unknown> {
  const parts = terms.map((t) => sql`plainto_tsquery(${PG_TS_CONFIG}, ${foldPg(t)})`);
  // Parenthesised: `@@` and `&&` share a precedence, so `tsv @@ a && b` would read as `(tsv @@ a) && b`.
  return sql`(${sql.join(parts, op === 'AND' ? sql` && ` : sql` || `)})`;
}

/**
 * PostgreSQL's score of a section for the terms, shaped as FTS5's bm25, in two steps so the
 * matches are read once: `cols`, read with each match (over `s`: each word's weighted frequency
 * as `ts_rank_cd(…, 0)`, and the section's length in words as `len`), and `score`, computed
 * from those (over `m`, the matches, and `f.avglen`, the average length of the workspace's
 * sections at the caller's ceiling, or of the matches for a caller counted by its reach): for each
 * word its inverse document frequency (from the words' section counts, within the caller's
 * reach) times its bm25 term weight (`cv_bm25`, migration 020: the frequency saturated, over
 * the section's length against the average of the sections ranked).
 * ts_rank_cd alone weighed every word alike (fts MRR@10 on the evaluation set 0.58, SQLite
 * 0.76); times the idf, saturated as rank / (rank + 1) and with no length, it gave a title
 * occurrence five times a text one where bm25 gives two, and long sections the edge: fts 0.693,
 * paraphrases 0.378 (SQLite 0.571). As bm25: 0.751 and 0.545 (issue 18); with FTS5's idf
 * (inverseFrequency), the same words kept as SQLite keeps (keywordPlan) and the index reading
 * text as queries do (migration 022): 0.759 and 0.586. Lengths in words against the workspace's
 * average, as FTS5 measures them, instead of distinct lexemes against the matches' (migration
 * 025; issue 20): man-page set fts 0.678 → 0.688.
 */
export function pgRank(terms: string[], docs: DocCounts | undefined, tq: RawBuilder<unknown>): { cols: RawBuilder<unknown>; score: RawBuilder<unknown> } {
  if (!docs || terms.length === 0) return { cols: sql`ts_rank_cd(s.tsv, ${tq}) as r0, s.tokens as len`, score: sql`m.r0` };
  const cols = terms.map((t, i) => sql`ts_rank_cd(s.tsv, plainto_tsquery(${PG_TS_CONFIG}, ${foldPg(t)}), 0) as ${sql.ref(`r${i}`)}`);
  const parts = terms.map((t, i) => {
    const idf = inverseFrequency(docs.get(t) ?? 0, docs.sections);
    return sql`${idf}::float8 * cv_bm25(${sql.ref(`m.r${i}`)}, m.len, f.avglen)`;
  });
  return { cols: sql`${sql.join(cols)}, s.tokens as len`, score: sql`(${sql.join(parts, sql` + `)})` };
}

/**
 * A word's weight from the sections holding it (`n`) of the `sections` counted: FTS5's bm25
 * idf, log((N − n + 0.5) / (n + 0.5)), at least 1e-6. Evaluation set (with the any-word words
 * chosen as on SQLite): hybrid MRR@10 0.815 → 0.819 (SQLite 0.824), paraphrases 0.569 → 0.583.
 * Without the section count (a caller counted by its reach alone), a fixed collection size.
 */
export function inverseFrequency(n: number, sections: number | undefined): number {
  if (sections && sections > 0) return Math.max(1e-6, Math.log((sections - n + 0.5) / (n + 0.5)));
  return Math.log(1 + IDF_SCALE / (n + 0.5));
}

/** The collection size the inverse document frequency assumes (counts stop at COMMON_DOCS + 1). */
const IDF_SCALE = 20_000;

/**
 * Diacritics folding for PostgreSQL, which has no `remove_diacritics` without the unaccent
 * extension: each precomposed Latin letter (U+00C0–U+024F, U+1E00–U+1EFF) whose compatibility
 * decomposition is one ASCII letter plus marks maps to that letter. The index applies it with
 * `translate()` (immutable, so a generated column may use it) and queries with `foldPg`.
 * Migration 004 bakes these strings into the column: change them only with a new migration.
 */
function buildFold(): { from: string; to: string } {
  let from = '';
  let to = '';
  for (const [lo, hi] of [
    [0xc0, 0x24f],
    [0x1e00, 0x1eff],
  ] as const) {
    for (let cp = lo; cp <= hi; cp++) {
      const ch = String.fromCodePoint(cp);
      const base = ch.normalize('NFKD').replace(/\p{M}/gu, '');
      if (base.length === 1 && /^[A-Za-z]$/.test(base) && base !== ch) {
        from += ch;
        to += base;
      }
    }
  }
  return { from, to };
}

export const PG_FOLD = buildFold();
const FOLD_MAP = new Map([...PG_FOLD.from].map((c, i) => [c, PG_FOLD.to[i]!]));

/** Folds a query term the way the PostgreSQL index folds text. */
export function foldPg(term: string): string {
  // Combining diacritical marks go, as the index drops them (migration 022).
  return [...term.replace(/[\u0300-\u036f]+/g, '')].map((c) => FOLD_MAP.get(c) ?? c).join('');
}
