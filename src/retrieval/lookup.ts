import { notFound } from '../errors/index.js';
import { canReadPage } from '../policy/pages.js';
import type { Principal } from '../policy/principal.js';
import type { Executor } from '../store/db.js';
import type { PagesTable } from '../store/schema.js';

/**
 * Finding one page by id or path, as the caller may see it. The core's page acts and retrieval's
 * related lists both start here; it sits in retrieval, below the core, so that retrieval need not
 * import the core.
 */

/** Page ids look like `pg_…`; anything else is taken as a path. */
export function isPageId(ref: string): boolean {
  return /^pg_[0-9a-z]{26}$/.test(ref);
}

/**
 * Loads a page the caller may read, by id or path, in the caller's workspace. A page in
 * another workspace, above the caller's ceiling, or (unless asked) deleted is 404: the
 * caller cannot tell those apart.
 */
export async function findReadablePage(db: Executor, p: Principal, ref: string, opts: { includeDeleted?: boolean } = {}): Promise<PagesTable> {
  let q = db.selectFrom('pages').selectAll().where('workspace_id', '=', p.workspaceId);
  if (isPageId(ref)) {
    q = q.where('id', '=', ref);
    if (!opts.includeDeleted) q = q.where('deleted_at', 'is', null);
  } else {
    q = q.where('path', '=', ref.replace(/^\/+/, '')).where('deleted_at', 'is', null);
  }
  return readableOrNotFound(p, ref, await q.executeTakeFirst());
}

/** The live page row found for `ref` (by findReadablePage or read with the caller's key), if the caller may read it; else 404. */
export function readableOrNotFound(p: Principal, ref: string, row: PagesTable | undefined | null): PagesTable {
  if (!row || !canReadPage(p, { path: row.path, sensitivity: row.sensitivity, blockLevel: row.block_level })) {
    throw notFound(`Page ${ref} not found`);
  }
  return row;
}

/** The live page at an id or path in the workspace, whoever may read it (callers judge). */
export async function loadLivePage(db: Executor, workspaceId: string, ref: { id?: string; path?: string }): Promise<PagesTable | undefined> {
  let q = db.selectFrom('pages').selectAll().where('workspace_id', '=', workspaceId).where('deleted_at', 'is', null);
  q = ref.id ? q.where('id', '=', ref.id) : q.where('path', '=', ref.path ?? '');
  return q.executeTakeFirst();
}
