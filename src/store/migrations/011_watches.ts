import type { Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import { createdAt, principalFk, textId, workspaceFk } from './columns.js';

/**
 * Issue 13: watches. A principal watches a page (by id, so the watch follows it through moves)
 * or a folder or Space (by path prefix, so pages created or moved in later are covered).
 *
 * `target` is the one normalised key a change is matched on: `page:<id>` or `path:<folder>`
 * (no trailing slash). A page change looks up `page:<its id>` and `path:<each ancestor folder>`
 * of its old and new paths in one indexed `target in (…)` query; `(workspace_id, principal_id,
 * target)` is unique, which makes watching idempotent.
 *
 * `key_id` is the agent key the watch was made with (null for a web session): a revoked or
 * expired key's watches stop delivering (checked at delivery).
 *
 * Two indexes on `inbox_events` serve delivery: finding the watcher's unread event about the same
 * page (coalescing) and counting the watch events of the last window (the rate bound).
 */
export async function up(db: Kysely<unknown>, _dialect: Dialect): Promise<void> {
  await db.schema
    .createTable('watches')
    .$call(textId)
    .$call(workspaceFk)
    .$call(principalFk)
    .addColumn('key_id', 'text')
    .addColumn('target', 'text', (c) => c.notNull())
    // page | folder
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('page_id', 'text')
    // The folder or Space path; for a page watch, the page's path when it was watched.
    .addColumn('path', 'text', (c) => c.notNull())
    .$call(createdAt)
    .execute();
  await db.schema.createIndex('watches_target').on('watches').columns(['workspace_id', 'target']).execute();
  await db.schema.createIndex('watches_owner').unique().on('watches').columns(['workspace_id', 'principal_id', 'target']).execute();
  await db.schema.createIndex('inbox_events_page').on('inbox_events').columns(['workspace_id', 'principal_id', 'page_id']).execute();
  await db.schema.createIndex('inbox_events_kind_time').on('inbox_events').columns(['workspace_id', 'principal_id', 'kind', 'created_at']).execute();
}
