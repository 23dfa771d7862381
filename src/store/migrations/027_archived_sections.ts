import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 19 (SQLite): the ids of archived pages' sections, in an index of their own. Keyword
 * search leaves archived pages out before it cuts a common word's matches to the newest ones,
 * one check per match: against the table that check read a whole section row (text included)
 * per match, about half of a common word's query at 100,000 pages, and its pages pushed the
 * keyword index's out of the page cache. Against this index (archived sections only: few, and
 * small) a match's check reads a page or two that stay cached (retrieval/candidates.ts).
 * PostgreSQL filters by a column of the rows it reads already. SQL only: a migration is a
 * snapshot of its day.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect === 'postgres') return;
  await sql`create index page_sections_archived on page_sections (id) where archived = 1`.execute(db);
}
