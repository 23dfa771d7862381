import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * PostgreSQL: no B-tree over a page's title and tags. A B-tree row holds at most 2,704 bytes,
 * and migration 006's covering index `pages_retrieval_filter` held the title and the tags (as
 * JSON) whole: a page whose title or tags came to about 3 kB of little-compressible text was
 * refused with a 500 on PostgreSQL and written on SQLite (an attack, test/http/attack-session-i.test.ts).
 * The index exists for SQLite, whose page rows keep those columns after the page's content (a
 * candidate read the body's overflow pages without it); PostgreSQL keeps large values out of line,
 * and its retrieval statements join pages by primary key for the few rows they return. Titles
 * and tags are unbounded again on both engines (the link keys and tags that are indexed are
 * bounded where they are made: retrieval/links.ts, core/pages/content.ts).
 * SQL only: a migration is a snapshot of its day.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect !== 'postgres') return;
  await sql`drop index if exists pages_retrieval_filter`.execute(db);
}
