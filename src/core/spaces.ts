import { canCreateSpace, hasActionWithin } from '../policy/access.js';
import { canReadPage } from '../policy/pages.js';
import type { Principal } from '../policy/principal.js';
import type { Executor } from '../store/db.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { conflict, forbidden, notFound } from './errors.js';
import { nowIso } from './ids.js';
import { folderChain, parseFolderPath, parseSpaceId } from './paths.js';

export interface SpaceRecord {
  id: string;
  name: string;
  summary: string;
  created_at: string;
}

/** A Space named by a page path that does not exist yet is created with it (docs/decisions.md). */
export async function ensureSpace(trx: Executor, workspaceId: string, space: string, now: string): Promise<void> {
  await trx
    .insertInto('spaces')
    .values({ workspace_id: workspaceId, id: space, name: space, summary: '', created_at: now })
    .onConflict((oc) => oc.columns(['workspace_id', 'id']).doNothing())
    .execute();
}

/** Folder rows hold settings (summary, lifecycle); they appear on first use. */
export async function ensureFolders(trx: Executor, workspaceId: string, clusterPath: string, now: string): Promise<void> {
  const chain = folderChain(clusterPath);
  if (chain.length === 0) return;
  const space = clusterPath.split('/')[0]!;
  await trx
    .insertInto('folders')
    .values(
      chain.map((path) => ({
        workspace_id: workspaceId,
        path,
        space,
        summary: '',
        auto_archive_days: null,
        half_life_days: null,
        archived: 0,
        created_at: now,
      })),
    )
    .onConflict((oc) => oc.columns(['workspace_id', 'path']).doNothing())
    .execute();
}

/** The Spaces the caller can read something in. */
export async function listSpaces(ctx: CoreContext, p: Principal): Promise<SpaceRecord[]> {
  const rows = await ctx.store.db
    .selectFrom('spaces')
    .select(['id', 'name', 'summary', 'created_at'])
    .where('workspace_id', '=', p.workspaceId)
    .orderBy('id')
    .execute();
  return rows.filter((s) => hasActionWithin(p, 'read', s.id));
}

export async function createSpace(
  ctx: CoreContext,
  p: Principal,
  input: { id: string; name: string; summary?: string | undefined },
): Promise<SpaceRecord> {
  if (!canCreateSpace(p)) throw forbidden('Creating a Space needs the admin grant over the whole workspace');
  const id = parseSpaceId(input.id);
  const now = nowIso();
  const record = { id, name: input.name.trim() || id, summary: input.summary ?? '', created_at: now };
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const exists = await trx.selectFrom('spaces').select('id').where('workspace_id', '=', p.workspaceId).where('id', '=', id).executeTakeFirst();
    if (exists) throw conflict(`Space ${id} already exists`, 'already_exists');
    await trx.insertInto('spaces').values({ workspace_id: p.workspaceId, ...record }).execute();
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'space.create', detail: { space: id } });
  });
  return record;
}

export interface TreePage {
  id: string;
  path: string;
  title: string;
  state: string;
  sensitivity: string;
  updated_at: string;
}

export interface TreeFolder {
  path: string;
  name: string;
  summary: string;
  archived: boolean;
  page_count: number;
  folders: TreeFolder[];
  pages: TreePage[];
  /** True when deeper levels exist but were cut by `depth`. */
  truncated?: boolean;
}

/**
 * The folder tree of a Space (or of a folder inside it), built from the pages the caller
 * can read, so a folder holding only invisible pages does not appear at all.
 */
export async function spaceTree(
  ctx: CoreContext,
  p: Principal,
  spaceId: string,
  opts: { path?: string | undefined; depth: number; includeArchived: boolean },
): Promise<{ space: SpaceRecord; tree: TreeFolder }> {
  const space = await ctx.store.db
    .selectFrom('spaces')
    .select(['id', 'name', 'summary', 'created_at'])
    .where('workspace_id', '=', p.workspaceId)
    .where('id', '=', spaceId)
    .executeTakeFirst();
  if (!space || !hasActionWithin(p, 'read', space.id)) throw notFound(`Space ${spaceId} not found`);
  const root = opts.path ? parseFolderPath(opts.path.startsWith(`${spaceId}/`) ? opts.path : `${spaceId}/${opts.path}`).path : spaceId;
  let q = ctx.store.db
    .selectFrom('pages')
    .select(['id', 'path', 'title', 'state', 'sensitivity', 'block_level', 'cluster_path', 'updated_at'])
    .where('workspace_id', '=', p.workspaceId)
    .where('deleted_at', 'is', null)
    .where((eb) => eb.or([eb('cluster_path', '=', root), eb('cluster_path', 'like', `${root.replace(/[%_\\]/g, '\\$&')}/%`)]));
  if (!opts.includeArchived) q = q.where('state', '=', 'active');
  const pages = (await q.orderBy('path').execute()).filter((r) => canReadPage(p, { path: r.path, sensitivity: r.sensitivity, blockLevel: r.block_level }));
  if (root !== spaceId && pages.length === 0) throw notFound(`Folder ${root} not found`);

  const folderRows = await ctx.store.db
    .selectFrom('folders')
    .select(['path', 'summary', 'archived'])
    .where('workspace_id', '=', p.workspaceId)
    .where('space', '=', spaceId)
    .execute();
  const settings = new Map(folderRows.map((f) => [f.path, f]));

  const make = (path: string): TreeFolder => ({
    path,
    name: path.split('/').pop() ?? path,
    summary: settings.get(path)?.summary ?? (path === spaceId ? space.summary : ''),
    archived: (settings.get(path)?.archived ?? 0) === 1,
    page_count: 0,
    folders: [],
    pages: [],
  });
  const top = make(root);
  const index = new Map<string, TreeFolder>([[root, top]]);
  const rootDepth = root.split('/').length;
  const folderFor = (clusterPath: string): TreeFolder => {
    const segs = clusterPath.split('/');
    let node = top;
    for (let i = rootDepth + 1; i <= segs.length; i++) {
      const path = segs.slice(0, i).join('/');
      let child = index.get(path);
      if (!child) {
        child = make(path);
        index.set(path, child);
        node.folders.push(child);
      }
      node = child;
    }
    return node;
  };
  for (const r of pages) {
    const folder = folderFor(r.cluster_path);
    folder.pages.push({ id: r.id, path: r.path, title: r.title, state: r.state, sensitivity: r.sensitivity, updated_at: r.updated_at });
    for (let f: string = r.cluster_path; f.length >= root.length; f = f.slice(0, Math.max(f.lastIndexOf('/'), 0))) {
      const node = index.get(f);
      if (node) node.page_count++;
      if (f === root || !f.includes('/')) break;
    }
  }
  const cut = (node: TreeFolder, level: number): void => {
    node.folders.sort((a, b) => a.path.localeCompare(b.path));
    if (level >= opts.depth) {
      if (node.folders.length > 0) node.truncated = true;
      node.folders = [];
      return;
    }
    for (const f of node.folders) cut(f, level + 1);
  };
  cut(top, 0);
  return { space, tree: top };
}
