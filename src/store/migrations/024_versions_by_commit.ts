import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 20: `page_versions` by commit. A live bundle names the newest commit that changed a
 * page its caller may see (not the workspace's newest, which moves with hidden writes), found
 * by walking the versions newest first; the changes feed and the point-in-time snapshot read
 * them by commit too. The primary key leads with the page, so without this index each of those
 * sorted every version of the workspace. SQL only: a migration is a snapshot of its day.
 */
export async function up(db: Kysely<unknown>, _dialect: Dialect): Promise<void> {
  await sql`create index if not exists page_versions_by_commit on page_versions (workspace_id, commit_seq)`.execute(db);
}
