import { sql } from 'kysely';
import { ceilingFor } from '../policy/access.js';
import { decideFolderArchive } from '../policy/folders.js';
import { canReadPage, enforce } from '../policy/pages.js';
import type { Principal } from '../policy/principal.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { badRequest, conflict, notFound } from './errors.js';
import type { ArchiveReason } from './pages/content.js';
import { rowFacts } from './pages/persist.js';
import { setStateTx } from './pages/write.js';
import { parseFolderPath } from './paths.js';
import { presentProposal, type ProposalRecord } from './proposals/record.js';

/** Pages one folder archive or restore may touch: each is a commit in one transaction. */
export const MAX_FOLDER_PAGES = 1000;

export interface FolderChangeResult {
  cluster_path: string;
  /** Pages that changed state (one commit each). */
  pages: { id: string; path: string; commit_sha: string }[];
  /** Pages the caller could not archive (no write grant) became proposals. */
  proposals: ProposalRecord[];
  /** The folder's own flag after the change. */
  archived: boolean;
}

function folderArg(raw: string): string {
  const path = parseFolderPath(raw.replace(/^\/+|\/+$/g, '')).path;
  if (!path.includes('/')) throw badRequest('cluster_path is <space>/<folder>', 'invalid_path');
  return path;
}

/**
 * Archives or restores every page of a folder (and its sub-folders) that the caller can read,
 * as one transaction: each page through the same setStateTx as a single-page archive, so a
 * page the caller may not write becomes an archive proposal (archive only; a restore without
 * write is refused). The folder's own `archived` flag follows when every page it holds
 * changed. Humans need a step-up to archive a folder (policy/clusters.ts).
 */
export async function changeFolderState(
  ctx: CoreContext,
  p: Principal,
  rawPath: string,
  action: 'archive' | 'restore',
  reason?: ArchiveReason | undefined,
  message?: string | undefined,
): Promise<FolderChangeResult> {
  const cluster = folderArg(rawPath);
  if (action === 'archive') enforce(decideFolderArchive(p));
  const result = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    // Sub-folders by prefix on a segment boundary (no LIKE: `_` is a legal name character).
    const prefix = `${cluster}/`;
    const under = (col: 'cluster_path' | 'path') => sql<boolean>`substr(${sql.ref(col)}, 1, ${[...prefix].length}) = ${prefix}`;
    const rows = await trx
      .selectFrom('pages')
      .selectAll()
      .where('workspace_id', '=', p.workspaceId)
      .where('deleted_at', 'is', null)
      .where((eb) => eb.or([eb('cluster_path', '=', cluster), under('cluster_path')]))
      .orderBy('path')
      .execute();
    const visible = rows.filter((r) => canReadPage(p, rowFacts(r)));
    const folder = await trx
      .selectFrom('folders')
      .select(['path', 'archived'])
      .where('workspace_id', '=', p.workspaceId)
      .where('path', '=', cluster)
      .executeTakeFirst();
    // A folder whose pages are all hidden from the caller (or that its read grants do not
    // cover) answers exactly as a folder that does not exist; only a truly empty folder the
    // caller may read in is known to exist.
    if (visible.length === 0 && (!folder || rows.length > 0 || ceilingFor(p, 'read', cluster) === null)) throw notFound(`Folder ${cluster} not found`);
    const from = action === 'archive' ? 'active' : 'archived';
    const todo = visible.filter((r) => r.state === from);
    if (todo.length === 0) {
      throw action === 'archive'
        ? conflict(`Folder ${cluster} holds no active page`, 'already_archived')
        : conflict(`Folder ${cluster} holds no archived page`, 'not_archived');
    }
    if (todo.length > MAX_FOLDER_PAGES) {
      throw badRequest(
        `Folder ${cluster} holds ${todo.length} pages to ${action}; at most ${MAX_FOLDER_PAGES} at once (do its sub-folders one by one)`,
        'cluster_too_large',
      );
    }
    const pages: FolderChangeResult['pages'] = [];
    const proposals: ProposalRecord[] = [];
    for (const row of todo) {
      const o = await setStateTx(ctx, trx, p, row, action, reason, { message, allowPropose: action === 'archive' });
      if (o.kind === 'done') pages.push({ id: o.row.id, path: o.row.path, commit_sha: o.row.commit_sha });
      else proposals.push(presentProposal(p, o.proposal));
    }
    // The flag follows only when the folder really is in that state for everyone.
    const settled = proposals.length === 0 && todo.length === rows.filter((r) => r.state === from).length && ceilingFor(p, 'write', cluster) !== null;
    let archived = (folder?.archived ?? 0) === 1;
    if (settled) {
      archived = action === 'archive';
      await trx
        .updateTable('folders')
        .set({ archived: archived ? 1 : 0 })
        .where('workspace_id', '=', p.workspaceId)
        .where((eb) => eb.or([eb('path', '=', cluster), under('path')]))
        .execute();
    }
    await appendAudit(trx, p.workspaceId, {
      principalId: p.id,
      action: `cluster.${action}`,
      detail: { cluster, pages: pages.length, proposals: proposals.map((x) => x.id), ...(reason ? { reason } : {}) },
    });
    return { cluster_path: cluster, pages, proposals, archived };
  });
  return result;
}
