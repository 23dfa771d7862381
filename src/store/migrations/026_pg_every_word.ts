import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 20: PostgreSQL's keyword index keeps every word, as SQLite's does.
 *
 * - The `english` text search configuration drops its stop words (`between`, `with`, `all`,
 *   `from`, …) from the index and from queries; FTS5 keeps them and its bm25 weighs them by
 *   their counts like any word (`between` in 236 of the man-page set's 6,183 sections weighs
 *   more than `file`). PostgreSQL ranked `transfer data between file descriptors` without the
 *   word that tells sendfile(2) from copy_file_range(2). `cv_english` is `english` with
 *   Snowball's English stemmer and no stop-word list; the column is recomputed with it, its
 *   index rebuilt and the word statistics counted again (they gain the stop words' counts).
 *   Evaluation, PostgreSQL, MRR@10: man-page set fts 0.688 → 0.693, hybrid 0.692 → 0.696 (plain
 *   bm25 0.691); Debian set fts 0.765 → 0.766, hybrid 0.816 → 0.823 (SQLite 0.820).
 * - The functions the column is computed by call each other and name `cv_english`, so they run
 *   with the schema they were made in on their search path: `pg_restore` sets an empty search
 *   path, and computing the column then failed (`function cv_index_text(text, integer) does not
 *   exist`) and lost every row of `page_sections` from the restored copy.
 *
 * SQL only: a migration is a snapshot of its day.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect !== 'postgres') return;
  await sql`create text search dictionary cv_english_stem (template = snowball, language = english)`.execute(db);
  await sql`create text search configuration cv_english (copy = english)`.execute(db);
  await sql`alter text search configuration cv_english
    alter mapping for asciiword, asciihword, hword_asciipart, word, hword, hword_part with cv_english_stem`.execute(db);
  await sql`create or replace function cv_section_tsv(title text, heading text, body text) returns tsvector language plpgsql immutable parallel safe as $tsv$
    declare
      cap integer := 2147483647;
    begin
      loop
        begin
          return setweight(to_tsvector('cv_english', cv_index_text(coalesce(title, ''), cap)), 'A') ||
            setweight(to_tsvector('cv_english', cv_index_text(coalesce(heading, ''), cap)), 'B') ||
            to_tsvector('cv_english', cv_index_text(coalesce(body, ''), cap));
        exception when program_limit_exceeded then
          cap := least(cap, greatest(length(title), length(heading), length(body))) / 2;
        end;
      end loop;
    end
    $tsv$`.execute(db);
  // The migration's own search path (its schema first), fixed on the functions that name others.
  await sql`alter function cv_section_tsv(text, text, text) set search_path from current`.execute(db);
  await sql`alter function cv_index_text(text, integer) set search_path from current`.execute(db);
  await sql`alter table page_sections drop column tsv`.execute(db);
  await sql`alter table page_sections add column tsv tsvector generated always as (cv_section_tsv(title, heading, text)) stored`.execute(db);
  await sql`create index page_sections_tsv on page_sections using gin (tsv) with (gin_pending_list_limit = 256)`.execute(db);
  await sql`delete from term_stats`.execute(db);
  await sql`insert into term_stats (workspace_id, lexeme, level, docs)
      select s.workspace_id, x.lexeme, s.level, count(*) from page_sections s cross join unnest(tsvector_to_array(s.tsv) || '{""}'::text[]) as x(lexeme)
      group by 1, 2, 3
      union all
      select workspace_id, ' ', level, sum(tokens) from page_sections group by 1, 3`.execute(db);
}
