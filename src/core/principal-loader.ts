import type { Action, Grant, Principal, Role } from '../policy/principal.js';
import { isLevel, type Level } from '../policy/sensitivity.js';
import type { Executor } from '../store/db.js';

/**
 * Builds the Principal of someone other than the caller, as policy would see them in a
 * workspace: humans from their membership role, agents from their grants, own ceiling and
 * any active elevation. No key or session is involved (keyCeiling null), so this is the
 * widest the principal can see; the inbox checks the real caller again at read time.
 * Principals who are not (or no longer) in the workspace are left out.
 */
export interface WorkspacePrincipal {
  id: string;
  name: string;
  kind: 'human' | 'agent';
}

const toLevel = (v: string | null): Level | null => (isLevel(v) ? v : null);

/** Every live principal of the workspace: members (humans) and its agents, with names. */
export async function workspacePrincipals(db: Executor, workspaceId: string): Promise<WorkspacePrincipal[]> {
  const humans = await db
    .selectFrom('members')
    .innerJoin('principals', 'principals.id', 'members.principal_id')
    .select(['principals.id', 'principals.name'])
    .where('members.workspace_id', '=', workspaceId)
    .where('principals.deleted_at', 'is', null)
    .execute();
  const agents = await db
    .selectFrom('principals')
    .select(['id', 'name'])
    .where('workspace_id', '=', workspaceId)
    .where('kind', '=', 'agent')
    .where('deleted_at', 'is', null)
    .where('suspended_at', 'is', null)
    .execute();
  return [...humans.map((h) => ({ ...h, kind: 'human' as const })), ...agents.map((a) => ({ ...a, kind: 'agent' as const }))];
}

/** Principals for the given ids in the workspace; ids that are not live members or agents of it are absent. */
export async function loadPrincipals(db: Executor, workspaceId: string, ids: readonly string[], now = new Date()): Promise<Map<string, Principal>> {
  const out = new Map<string, Principal>();
  const wanted = [...new Set(ids)];
  if (wanted.length === 0) return out;
  const ws = await db.selectFrom('workspaces').select(['id', 'slug']).where('id', '=', workspaceId).executeTakeFirst();
  if (!ws) return out;
  const base = {
    workspaceId: ws.id,
    workspaceSlug: ws.slug,
    keyCeiling: null,
    sessionId: null,
    keyId: null,
    stepUpAt: null,
  };

  const humans = await db
    .selectFrom('members')
    .innerJoin('principals', 'principals.id', 'members.principal_id')
    .select(['principals.id', 'principals.name', 'members.role'])
    .where('members.workspace_id', '=', workspaceId)
    .where('principals.deleted_at', 'is', null)
    .where('principals.id', 'in', wanted)
    .execute();
  for (const h of humans) {
    out.set(h.id, {
      ...base,
      id: h.id,
      kind: 'human',
      name: h.name,
      role: h.role as Role,
      grants: [],
      agentCeiling: null,
      via: 'session',
      elevatedUntil: null,
      createdBy: null,
    });
  }

  const agents = await db
    .selectFrom('principals')
    .select(['id', 'name', 'ceiling', 'created_by'])
    .where('workspace_id', '=', workspaceId)
    .where('kind', '=', 'agent')
    .where('deleted_at', 'is', null)
    .where('suspended_at', 'is', null)
    .where('id', 'in', wanted)
    .execute();
  if (agents.length === 0) return out;
  const agentIds = agents.map((a) => a.id);
  const grantRows = await db
    .selectFrom('grants')
    .select(['principal_id', 'action', 'scope', 'ceiling'])
    .where('principal_id', 'in', agentIds)
    .orderBy('principal_id')
    .orderBy('position')
    .execute();
  const grants = new Map<string, Grant[]>();
  for (const g of grantRows) {
    const list = grants.get(g.principal_id) ?? [];
    list.push({ action: g.action as Action, scope: g.scope, ceiling: toLevel(g.ceiling) ?? 'public' });
    grants.set(g.principal_id, list);
  }
  const elevations = await db
    .selectFrom('elevations')
    .select(['agent_id', (eb) => eb.fn.max('expires_at').as('until')])
    .where('agent_id', 'in', agentIds)
    .where('workspace_id', '=', workspaceId)
    .where('revoked_at', 'is', null)
    .where('expires_at', '>', now.toISOString())
    .groupBy('agent_id')
    .execute();
  const until = new Map(elevations.map((e) => [e.agent_id, e.until as string | null]));
  const creators = [...new Set(agents.map((a) => a.created_by).filter((c): c is string => c !== null))];
  const creatorRoles = new Map<string, Role>();
  if (creators.length > 0) {
    const rows = await db.selectFrom('members').select(['principal_id', 'role']).where('workspace_id', '=', workspaceId).where('principal_id', 'in', creators).execute();
    for (const r of rows) creatorRoles.set(r.principal_id, r.role as Role);
  }
  for (const a of agents) {
    out.set(a.id, {
      ...base,
      id: a.id,
      kind: 'agent',
      name: a.name,
      role: null,
      grants: grants.get(a.id) ?? [],
      agentCeiling: toLevel(a.ceiling),
      via: 'key',
      elevatedUntil: until.get(a.id) ?? null,
      createdBy: a.created_by,
      creatorRole: a.created_by ? (creatorRoles.get(a.created_by) ?? null) : null,
    });
  }
  return out;
}

/** One principal of the workspace, or null when it is not a live member or agent of it. */
export async function loadPrincipal(db: Executor, workspaceId: string, id: string, now = new Date()): Promise<Principal | null> {
  return (await loadPrincipals(db, workspaceId, [id], now)).get(id) ?? null;
}
