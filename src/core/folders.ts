import { sql, type Transaction } from 'kysely';
import { ceilingFor } from '../policy/access.js';
import { decideFolderArchive, decideFolderSettings } from '../policy/folders.js';
import { canReadPage, enforce } from '../policy/pages.js';
import type { Principal } from '../policy/principal.js';
import type { DB, PagesTable } from '../store/schema.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { badRequest, conflict, notFound } from './errors.js';
import { commitFiles } from './pages/commit.js';
import type { ArchiveReason } from './pages/content.js';
import { recordPageChange, rowFacts, type PageChange } from './pages/persist.js';
import { planStateTx } from './pages/write.js';
import { parseFolderPath } from './paths.js';
import { presentProposal, type ProposalRecord } from './proposals/record.js';
import { ensureFolders, indexSummaries } from './spaces.js';
import { nowIso } from './ids.js';

/** Pages one folder archive or restore may touch: all of them go into one commit, in one transaction. */
export const MAX_FOLDER_PAGES = 1000;

export interface FolderChangeResult {
  cluster_path: string;
  /** The one commit that changed every page below (null when each page became a proposal). */
  commit_sha: string | null;
  /** Pages that changed state, all in `commit_sha`. */
  pages: { id: string; path: string; commit_sha: string }[];
  /** Pages the caller could not archive (no write grant) became proposals. */
  proposals: ProposalRecord[];
  /** The folder's own flag after the change. */
  archived: boolean;
}

/** A folder's settings as a caller sees them (the tree shows the same fields). */
export interface FolderSettings {
  path: string;
  summary: string;
  auto_archive_days: number | null;
  half_life_days: number | null;
  archived: boolean;
}

/** What PUT …/lifecycle changes: a value sets, null clears, a missing field keeps (core/folder-input.ts). */
export interface LifecycleChange {
  auto_archive_days?: number | null | undefined;
  half_life_days?: number | null | undefined;
}

function folderArg(raw: string): string {
  const path = parseFolderPath(raw.replace(/^\/+|\/+$/g, '')).path;
  if (!path.includes('/')) throw badRequest('cluster_path is <space>/<folder>', 'invalid_path');
  return path;
}

/** Sub-folders by prefix on a segment boundary (no LIKE: `_` is a legal name character). */
function under(cluster: string, col: 'cluster_path' | 'path') {
  const prefix = `${cluster}/`;
  return sql<boolean>`substr(${sql.ref(col)}, 1, ${[...prefix].length}) = ${prefix}`;
}

/**
 * The folder as the caller may know it: its row, and its live pages (sub-folders included),
 * all of them and those the caller can read. A folder whose pages are all hidden from the
 * caller (or that its read grants do not cover) answers exactly as a folder that does not
 * exist; only a truly empty folder the caller may read in is known to exist.
 */
async function visibleFolder(trx: Transaction<DB>, p: Principal, cluster: string) {
  const rows = await trx
    .selectFrom('pages')
    .selectAll()
    .where('workspace_id', '=', p.workspaceId)
    .where('deleted_at', 'is', null)
    .where((eb) => eb.or([eb('cluster_path', '=', cluster), under(cluster, 'cluster_path')]))
    .orderBy('path')
    .execute();
  const visible = rows.filter((r) => canReadPage(p, rowFacts(r)));
  const row = () => trx.selectFrom('folders').selectAll().where('workspace_id', '=', p.workspaceId).where('path', '=', cluster).executeTakeFirst();
  let folder = await row();
  if (visible.length === 0 && (!folder || rows.length > 0 || ceilingFor(p, 'read', cluster) === null)) throw notFound(`Folder ${cluster} not found`);
  if (!folder) {
    // Pages written before folder rows existed: the row appears now, as on any write.
    await ensureFolders(trx, p.workspaceId, cluster, nowIso());
    folder = await row();
  }
  return { folder: folder!, rows, visible };
}

/**
 * Archives or restores every page of a folder (and its sub-folders) that the caller can read,
 * as one transaction and one commit: each page is decided as a single-page archive is
 * (planStateTx), so a page the caller may not write becomes an archive proposal (archive only;
 * a restore without write is refused), and every page that may change goes into the same
 * commit. The folder's own `archived` flag follows when every page it holds changed. Humans
 * need a step-up to archive a folder (policy/folders.ts).
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
  return inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const { folder, rows, visible } = await visibleFolder(trx, p, cluster);
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
    const changes: PageChange[] = [];
    const proposals: ProposalRecord[] = [];
    for (const row of todo) {
      const plan = await planStateTx(ctx, trx, p, row, action, reason, { message, allowPropose: action === 'archive' });
      if (plan.kind === 'apply') changes.push(plan.change);
      else proposals.push(presentProposal(p, plan.proposal));
    }
    const landed = await commitFolder(ctx, trx, p, cluster, action, changes, message);
    // The flag follows only when the folder really is in that state for everyone.
    const settled = proposals.length === 0 && todo.length === rows.filter((r) => r.state === from).length && ceilingFor(p, 'write', cluster) !== null;
    let archived = folder.archived === 1;
    if (settled) {
      archived = action === 'archive';
      await trx
        .updateTable('folders')
        .set({ archived: archived ? 1 : 0 })
        .where('workspace_id', '=', p.workspaceId)
        .where((eb) => eb.or([eb('path', '=', cluster), under(cluster, 'path')]))
        .execute();
    }
    await appendAudit(trx, p.workspaceId, {
      principalId: p.id,
      action: `cluster.${action}`,
      detail: {
        cluster,
        pages: landed.pages.length,
        ...(landed.sha ? { commit: landed.sha } : {}),
        proposals: proposals.map((x) => x.id),
        ...(reason ? { reason } : {}),
      },
    });
    return { cluster_path: cluster, commit_sha: landed.sha, pages: landed.pages, proposals, archived };
  });
}

/** One commit holding every page change of a folder action, then each page's row, index, version and audit entry. */
async function commitFolder(
  ctx: CoreContext,
  trx: Transaction<DB>,
  p: Principal,
  cluster: string,
  action: 'archive' | 'restore',
  changes: PageChange[],
  message: string | undefined,
): Promise<{ sha: string | null; pages: FolderChangeResult['pages'] }> {
  if (changes.length === 0) return { sha: null, pages: [] };
  const at = new Date();
  const n = changes.length;
  const text = message?.trim() || `${action === 'archive' ? 'Archive' : 'Restore'} folder ${cluster} (${n} page${n === 1 ? '' : 's'})`;
  const files = changes.map((c) => ({ path: c.target.path, content: c.content!.raw }));
  const commit = await commitFiles(trx, p.workspaceId, p, files, text, at);
  const pages: FolderChangeResult['pages'] = [];
  for (const c of changes) {
    const row: PagesTable = await recordPageChange(ctx, trx, p, { ...c, message: text, commit, blobSha: commit.blobs.get(c.target.path) ?? null, at });
    pages.push({ id: row.id, path: row.path, commit_sha: row.commit_sha });
  }
  return { sha: commit.sha, pages };
}

/**
 * Sets a folder's lifecycle settings (spec: PUT /api/v1/clusters/<space>/<folder>/lifecycle,
 * admin): `auto_archive_days` (the lifecycle job's threshold) and `half_life_days` (search
 * freshness). The folder must exist for the caller as for an archive; an admin grant over it
 * is then needed. Answers the folder's settings with its summary, as the tree shows them.
 */
export async function setFolderLifecycle(ctx: CoreContext, p: Principal, rawPath: string, change: LifecycleChange): Promise<FolderSettings> {
  const cluster = folderArg(rawPath);
  return inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const { folder } = await visibleFolder(trx, p, cluster);
    enforce(decideFolderSettings(p, cluster));
    const next = {
      auto_archive_days: change.auto_archive_days === undefined ? folder.auto_archive_days : change.auto_archive_days,
      half_life_days: change.half_life_days === undefined ? folder.half_life_days : change.half_life_days,
    };
    await trx.updateTable('folders').set(next).where('workspace_id', '=', p.workspaceId).where('path', '=', cluster).execute();
    await appendAudit(trx, p.workspaceId, {
      principalId: p.id,
      action: 'cluster.lifecycle',
      detail: { cluster, ...next, before: { auto_archive_days: folder.auto_archive_days, half_life_days: folder.half_life_days } },
    });
    const summary = (await indexSummaries(trx, p, [cluster])).get(cluster) ?? folder.summary;
    return { path: cluster, summary, ...next, archived: folder.archived === 1 };
  });
}
