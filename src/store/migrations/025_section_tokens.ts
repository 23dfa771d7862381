import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 20: a section's length in words, as FTS5's bm25 measures it, for PostgreSQL's ranking.
 * PostgreSQL's bm25-shaped score (retrieval/keyword.ts pgRank) measured a section by its
 * distinct lexemes and against the average of the sections it ranked; FTS5 counts every word,
 * against the average of the table's sections. Long sections repeat words, so distinct lexemes
 * under-counted them: the short section that names the thing (a manual page's NAME line) lost
 * to longer ones.
 *
 * - `page_sections.tokens` (both engines, so backups stay portable): the runs of letters and
 *   digits in the section's title, heading and text, counted by the indexer (keyword.ts
 *   `countWords`, about 27 µs a 2 kB section). PostgreSQL counts the sections already written
 *   here (`cv_section_tokens`, about 110 µs a 2 kB section, and the update rewrites the
 *   table); SQLite does not read it, and leaves them at 0 until they are written again (a
 *   backup restored into PostgreSQL counts them: reindex-pages.ts rebuildKeywordIndexes).
 * - PostgreSQL: `term_stats.docs` becomes bigint, and the lexeme ' ' (no word becomes it) holds
 *   the sum of the sections' tokens per level, kept by the indexer as the other counts are: the
 *   average section length of a caller who reads every section at its ceiling.
 * SQL only: a migration is a snapshot of its day.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  await sql`alter table page_sections add column tokens integer not null default 0`.execute(db);
  if (dialect !== 'postgres') return;
  // One expression, so PostgreSQL inlines it (a subquery made it four times slower). Letters,
  // digits and the combining marks' blocks, as countWords: text written decomposed (NFD) counts
  // alike. Digits other than decimal ones (superscripts, fractions) count in JS only: a few
  // words' difference in such a section's length until it is written again.
  await sql`create function cv_section_tokens(title text, heading text, body text) returns integer language sql immutable parallel safe
    as $$ select coalesce(cardinality(string_to_array(nullif(btrim(regexp_replace(
      coalesce(title, '') || ' ' || coalesce(heading, '') || ' ' || coalesce(body, ''),
      '[^[:alnum:]\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+', ' ', 'g')), ''), ' ')), 0) $$`.execute(db);
  await sql`update page_sections set tokens = cv_section_tokens(title, heading, text)`.execute(db);
  await sql`alter table term_stats alter column docs type bigint`.execute(db);
  await sql`delete from term_stats where lexeme = ' '`.execute(db);
  await sql`insert into term_stats (workspace_id, lexeme, level, docs)
      select workspace_id, ' ', level, sum(tokens) from page_sections group by workspace_id, level`.execute(db);
}
