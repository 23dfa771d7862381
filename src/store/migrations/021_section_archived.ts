import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 18: `page_sections.archived` (both engines, so backups stay portable): 1 when the
 * section's page is archived. Keyword search takes the newest matches of a common word before
 * it joins their pages; without this, the sections of archived pages (archiving rewrites them,
 * so they are often the newest) took the places of active matches in a search that leaves
 * archived pages out (an attack found the active notes gone from such a search,
 * test/http/attack-session-h.test.ts). SQL only: a migration is a snapshot of its day.
 */
export async function up(db: Kysely<unknown>, _dialect: Dialect): Promise<void> {
  await sql`alter table page_sections add column archived integer not null default 0`.execute(db);
  await sql`update page_sections set archived = 1 where page_id in (select id from pages where state <> 'active')`.execute(db);
}
