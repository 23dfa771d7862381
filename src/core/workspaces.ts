import type { Executor } from '../store/db.js';
import { inTransaction } from '../store/tx.js';
import { canCreateWorkspace } from '../policy/members.js';
import type { Principal, Role } from '../policy/principal.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { newId, nowIso } from './ids.js';
import { forbidden, notFound } from './errors.js';

export interface WorkspaceRow {
  id: string;
  slug: string;
  name: string;
  token_epoch: number;
}

/** A URL-safe slug derived from a name, made unique with a numeric suffix. */
async function uniqueSlug(db: Executor, base: string): Promise<string> {
  const root =
    base
      .normalize('NFKD')
      .replace(/[\u0300-\u036f]/g, '')
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-+|-+$/g, '')
      .slice(0, 40) || 'workspace';
  for (let n = 1; n < 1000; n++) {
    const slug = n === 1 ? root : `${root}-${n}`;
    const taken = await db.selectFrom('workspaces').select('id').where('slug', '=', slug).executeTakeFirst();
    if (!taken) return slug;
  }
  return `${root}-${newId.workspace().slice(-8)}`;
}

/** Creates a workspace with its first owner; call inside the mutation's transaction. */
export async function createWorkspace(trx: Executor, name: string, ownerId: string, now: string): Promise<WorkspaceRow> {
  const ws = { id: newId.workspace(), slug: await uniqueSlug(trx, name), name, token_epoch: 0, created_at: now };
  await trx.insertInto('workspaces').values(ws).execute();
  await addMember(trx, ws.id, ownerId, 'owner', now);
  return ws;
}

export async function addMember(trx: Executor, workspaceId: string, principalId: string, role: Role, now: string): Promise<void> {
  await trx.insertInto('members').values({ workspace_id: workspaceId, principal_id: principalId, role, created_at: now }).execute();
}

/** Resolves a workspace by id or slug. */
export async function findWorkspace(db: Executor, idOrSlug: string): Promise<WorkspaceRow | undefined> {
  return db
    .selectFrom('workspaces')
    .select(['id', 'slug', 'name', 'token_epoch'])
    .where((eb) => eb.or([eb('id', '=', idOrSlug), eb('slug', '=', idOrSlug)]))
    .executeTakeFirst();
}

export async function requireWorkspace(db: Executor, idOrSlug: string): Promise<WorkspaceRow> {
  const ws = await findWorkspace(db, idOrSlug);
  if (!ws) throw notFound(`Workspace ${idOrSlug} not found`, 'workspace_not_found');
  return ws;
}

/** The workspaces a human belongs to, with their role in each. */
export async function workspacesOf(db: Executor, principalId: string) {
  return db
    .selectFrom('members')
    .innerJoin('workspaces', 'workspaces.id', 'members.workspace_id')
    .select(['workspaces.id', 'workspaces.slug', 'workspaces.name', 'members.role'])
    .where('members.principal_id', '=', principalId)
    .orderBy('members.created_at')
    .execute();
}

/** A workspace as the interface shows it to one caller. */
export interface WorkspaceView {
  id: string;
  slug: string;
  name: string;
  /** The caller's role there; null for an agent (agents act through grants). */
  role: Role | null;
  /** True for the workspace this request works in. */
  current: boolean;
  created_at: string;
}

/** The workspaces the caller belongs to: a human's memberships, or an agent's one workspace. */
export async function listWorkspaces(ctx: CoreContext, p: Principal): Promise<WorkspaceView[]> {
  const db = ctx.store.db;
  if (p.kind === 'agent') {
    const ws = await db.selectFrom('workspaces').select(['id', 'slug', 'name', 'created_at']).where('id', '=', p.workspaceId).executeTakeFirstOrThrow();
    return [{ ...ws, role: null, current: true }];
  }
  const rows = await db
    .selectFrom('members')
    .innerJoin('workspaces', 'workspaces.id', 'members.workspace_id')
    .select(['workspaces.id', 'workspaces.slug', 'workspaces.name', 'workspaces.created_at', 'members.role'])
    .where('members.principal_id', '=', p.id)
    .orderBy('members.created_at')
    .orderBy('workspaces.id')
    .execute();
  return rows.map((r) => ({ id: r.id, slug: r.slug, name: r.name, role: r.role, current: r.id === p.workspaceId, created_at: r.created_at }));
}

/** A human creates a workspace and becomes its owner; the slug comes from the name. */
export async function createWorkspaceFor(ctx: CoreContext, p: Principal, name: string): Promise<WorkspaceView> {
  if (!canCreateWorkspace(p)) throw forbidden('Only a signed-in human may create workspaces', 'session_required');
  const now = nowIso();
  // The workspace is new: no other writer can hold its chain, so no row lock is needed.
  const ws = await inTransaction(ctx.store, null, async (trx) => {
    const created = await createWorkspace(trx, name, p.id, now);
    await appendAudit(trx, created.id, { principalId: p.id, action: 'workspace.create', detail: { slug: created.slug, name } });
    return created;
  });
  return { id: ws.id, slug: ws.slug, name: ws.name, role: 'owner', current: false, created_at: now };
}
