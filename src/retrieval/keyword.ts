import { sql, type RawBuilder } from 'kysely';
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

/** An FTS5 MATCH string: each term a quoted string, all required (AND) or any (OR). */
export function fts5Match(terms: string[], op: 'AND' | 'OR'): string {
  return terms.map((t) => `"${t.replaceAll('"', '""')}"`).join(` ${op} `);
}

/**
 * A PostgreSQL tsquery built from the terms. Terms hold only letters, digits and marks, so they
 * cannot be tsquery syntax; each still goes through `plainto_tsquery`, which never raises, and
 * the results are joined with && or ||. Stop words become empty queries and drop out.
 */
export function pgTsQuery(terms: string[], op: 'AND' | 'OR'): RawBuilder<unknown> {
  const parts = terms.map((t) => sql`plainto_tsquery('english', ${foldPg(t)})`);
  // Parenthesised: `@@` and `&&` share a precedence, so `tsv @@ a && b` would read as `(tsv @@ a) && b`.
  return sql`(${sql.join(parts, op === 'AND' ? sql` && ` : sql` || `)})`;
}

/**
 * PostgreSQL's score of a section for the terms, shaped as FTS5's bm25, in two steps so the
 * matches are read once: `cols`, read with each match (over `s`: each word's weighted frequency
 * as `ts_rank_cd(…, 0)`, and the section's length in distinct words as `len`), and `score`,
 * computed from those (over `m`, the matches, and `f.avglen`, their average length): for each
 * word its inverse document frequency (from the words' section counts, within the caller's
 * reach) times its bm25 term weight (`cv_bm25`, migration 020: the frequency saturated, over
 * the section's length against the average of the sections ranked).
 * ts_rank_cd alone weighed every word alike (fts MRR@10 on the evaluation set 0.58, SQLite
 * 0.76); times the idf, saturated as rank / (rank + 1) and with no length, it gave a title
 * occurrence five times a text one where bm25 gives two, and long sections the edge: fts 0.693,
 * paraphrases 0.378 (SQLite 0.571). As bm25: 0.751 and 0.545 (issue 18); with FTS5's idf
 * (inverseFrequency), the same words kept as SQLite keeps (keywordPlan) and the index reading
 * text as queries do (migration 022): 0.759 and 0.586.
 */
export function pgRank(terms: string[], docs: DocCounts | undefined, tq: RawBuilder<unknown>): { cols: RawBuilder<unknown>; score: RawBuilder<unknown> } {
  if (!docs || terms.length === 0) return { cols: sql`ts_rank_cd(s.tsv, ${tq}) as r0, length(s.tsv) as len`, score: sql`m.r0` };
  const cols = terms.map((t, i) => sql`ts_rank_cd(s.tsv, plainto_tsquery('english', ${foldPg(t)}), 0) as ${sql.ref(`r${i}`)}`);
  const parts = terms.map((t, i) => {
    const idf = inverseFrequency(docs.get(t) ?? 0, docs.sections);
    return sql`${idf}::float8 * cv_bm25(${sql.ref(`m.r${i}`)}, m.len, f.avglen)`;
  });
  return { cols: sql`${sql.join(cols)}, length(s.tsv) as len`, score: sql`(${sql.join(parts, sql` + `)})` };
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
