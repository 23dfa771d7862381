import type { Executor } from '../store/db.js';

/** The live (not deleted) pages of one Space of a workspace; callers add columns, order and limit. */
export function livePagesOfSpace(db: Executor, workspaceId: string, space: string) {
  return db.selectFrom('pages').where('workspace_id', '=', workspaceId).where('space', '=', space).where('deleted_at', 'is', null);
}
