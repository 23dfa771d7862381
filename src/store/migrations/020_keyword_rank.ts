import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 18: PostgreSQL's keyword score of one word in one section, shaped as bm25's (what
 * SQLite's FTS5 ranks by), from the word's weighted frequency and the section's length:
 *
 *   tf · (k1 + 1) / (tf + k1 · (1 − b + b · len / avglen)),  k1 = 1.2, b = 0.75
 *
 * `r` is `ts_rank_cd` of the word without normalisation: the sum of its occurrences' weights
 * (title 1.0, heading 0.4, text 0.1), so tf = 10 · r counts a title occurrence 10, a heading 4
 * and the text 1, FTS5's column weights. `len` is the section's distinct words (`length(tsv)`),
 * `avglen` theirs over the sections ranked. A function, so each word's `ts_rank_cd` is computed
 * once where the formula reads it twice. SQL only: a migration is a snapshot of its day.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect !== 'postgres') return;
  await sql`create function cv_bm25(r float8, len integer, avglen float8) returns float8
    language sql immutable parallel safe
    as $$ select (10 * r) * 2.2 / (10 * r + 1.2 * (0.25 + 0.75 * len / greatest(avglen, 1))) $$`.execute(db);
}
