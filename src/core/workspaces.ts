import type { Executor } from '../store/db.js';
import { newId } from './ids.js';
import { notFound } from './errors.js';
import type { Role } from '../policy/principal.js';

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
