import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 18: a keyword query of frequent words on PostgreSQL ranks only the newest matches of
 * the caller's workspace (keyword-plan.ts, PG_SCORE_BUDGET). This index lets PostgreSQL read a
 * workspace's sections newest first and stop at the budget, whatever the other workspaces hold.
 * SQLite keeps a keyword table per workspace, ordered by rowid already.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect !== 'postgres') return;
  await sql`create index page_sections_ws_recent on page_sections (workspace_id, id)`.execute(db);
}
