import type { Action, Grant, Principal, Role } from '../policy/principal.js';
import { isLevel, type Level } from '../policy/sensitivity.js';
import type { Executor } from '../store/db.js';
import type { GrantsTable } from '../store/schema.js';

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

/** A stored level, or null when the column holds none. */
export const toLevel = (v: string | null): Level | null => (isLevel(v) ? v : null);

/** A stored grant row as policy sees it (a ceiling that is not a level reads as public). */
export const toGrant = (g: Pick<GrantsTable, 'action' | 'scope' | 'ceiling'>): Grant => ({
  action: g.action as Action,
  scope: g.scope,
  ceiling: toLevel(g.ceiling) ?? 'public',
});

/** The members of a workspace whose account is not deleted: `members` joined to `principals`, to select from. */
export function liveMembers(db: Executor, workspaceId: string) {
  return db
    .selectFrom('members')
    .innerJoin('principals', 'principals.id', 'members.principal_id')
    .where('members.workspace_id', '=', workspaceId)
    .where('principals.deleted_at', 'is', null);
}

/** The agents of a workspace that are not deleted (suspended ones included), to select from. */
export function workspaceAgents(db: Executor, workspaceId: string) {
  return db.selectFrom('principals').where('workspace_id', '=', workspaceId).where('kind', '=', 'agent').where('deleted_at', 'is', null);
}

/** Every live principal of the workspace: members (humans) and its agents, with names. */
export async function workspacePrincipals(db: Executor, workspaceId: string): Promise<WorkspacePrincipal[]> {
  const humans = await liveMembers(db, workspaceId).select(['principals.id', 'principals.name']).execute();
  const agents = await workspaceAgents(db, workspaceId).select(['id', 'name']).where('suspended_at', 'is', null).execute();
  return [...humans.map((h) => ({ ...h, kind: 'human' as const })), ...agents.map((a) => ({ ...a, kind: 'agent' as const }))];
}

/** Principals for the given ids in the workspace; ids that are not live members or agents of it are absent. */
export async function loadPrincipals(db: Executor, workspaceId: string, ids: readonly string[], now = new Date()): Promise<Map<string, Principal>> {
  const out = new Map<string, Principal>();
  const wanted = [...new Set(ids)];
  if (wanted.length === 0) return out;
  const ws = await db.selectFrom('workspaces').select(['id', 'slug']).where('id', '=', workspaceId).executeTakeFirst();
  if (!ws) return out;
  // No key or session is involved; a human holds none of an agent's grants, ceiling, elevation or creator.
  const base = {
    workspaceId: ws.id,
    workspaceSlug: ws.slug,
    keyCeiling: null,
    sessionId: null,
    keyId: null,
    stepUpAt: null,
    agentCeiling: null,
    elevatedUntil: null,
    createdBy: null,
  };

  const humans = await liveMembers(db, workspaceId).select(['principals.id', 'principals.name', 'members.role']).where('principals.id', 'in', wanted).execute();
  for (const h of humans) {
    out.set(h.id, { ...base, id: h.id, kind: 'human', name: h.name, role: h.role as Role, grants: [], via: 'session' });
  }

  const agents = await workspaceAgents(db, workspaceId)
    .select(['id', 'name', 'ceiling', 'created_by'])
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
    list.push(toGrant(g));
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
    const rows = await db
      .selectFrom('members')
      .select(['principal_id', 'role'])
      .where('workspace_id', '=', workspaceId)
      .where('principal_id', 'in', creators)
      .execute();
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

/** The live keys among `keyIds` (not revoked, not expired, of the current token epoch) and their ceilings. */
export async function liveKeys(db: Executor, workspaceId: string, keyIds: readonly string[], now: Date): Promise<Map<string, Level | null>> {
  const out = new Map<string, Level | null>();
  const ids = [...new Set(keyIds)];
  if (ids.length === 0) return out;
  const rows = await db
    .selectFrom('agent_keys')
    .innerJoin('workspaces', 'workspaces.id', 'agent_keys.workspace_id')
    .select(['agent_keys.id', 'agent_keys.ceiling', 'agent_keys.revoked_at', 'agent_keys.expires_at', 'agent_keys.epoch', 'workspaces.token_epoch'])
    .where('agent_keys.workspace_id', '=', workspaceId)
    .where('agent_keys.id', 'in', ids)
    .execute();
  for (const k of rows) {
    if (k.revoked_at || k.epoch !== k.token_epoch || (k.expires_at && Date.parse(k.expires_at) <= now.getTime())) continue;
    out.set(k.id, isLevel(k.ceiling) ? k.ceiling : null);
  }
  return out;
}
