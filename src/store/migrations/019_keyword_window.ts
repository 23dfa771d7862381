import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 18: PostgreSQL's keyword search reads a word's newest matches through a window of the
 * newest section ids (src/retrieval/candidates.ts). Two index changes make that cheap at 100,000
 * pages:
 *
 * - A BRIN index on `page_sections.id`. Sections are appended in id order, so a range of ids is
 *   a range of the table's pages, and BRIN says which pages in a few dozen entries: PostgreSQL
 *   intersects it with the words' GIN entries and reads only the window's matching rows. Without
 *   it the planner often read every match of the word (a word in 1,779 sections: 1,619 table
 *   pages read for 1,000 wanted) and the id range's B-tree bitmap was too dear to choose. Ranges
 *   of 16 pages, summarized as they fill (autosummarize), so the newest sections are not one
 *   large unsummarized range read whole. fts p95 at 100,000 pages: 46–49 → 29 ms.
 * - A short GIN pending list. The GIN index takes new entries into a pending list, merged once
 *   it passes `gin_pending_list_limit` (4 MB by default) or at vacuum, and every search reads the
 *   whole list: a word's newest matches took 18–24 ms with 276 pending pages, 5–6 ms after the
 *   merge, and the writer whose insert crossed 4 MB paid for merging all of it. At 256 kB a
 *   search reads at most about 32 pending pages; the keyword index's share of a write rose by
 *   about a third (2,000 sections: 0.16 → 0.22 ms each, merges included). Nothing is rebuilt.
 *
 * SQL only: a migration is a snapshot of its day.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect !== 'postgres') return;
  await sql`create index page_sections_id_brin on page_sections using brin (id) with (pages_per_range = 16, autosummarize = on)`.execute(db);
  await sql`alter index page_sections_tsv set (gin_pending_list_limit = 256)`.execute(db);
  // What is pending now is merged at once rather than by the next writer.
  await sql`select gin_clean_pending_list('page_sections_tsv'::regclass)`.execute(db);
}
