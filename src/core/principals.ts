import { isIP } from 'node:net';
import { hashSecret, newSecret, secretHint } from '../auth/secrets.js';
import { canGrant, canManageAgent, capGrantsToRole, grantingNeedsStepUp, hasStepUp, ROLE_CEILING, seesPrincipalDetails } from '../policy/access.js';
import type { Grant, Principal, Role } from '../policy/principal.js';
import type { Executor } from '../store/db.js';
import type { AgentKeysTable } from '../store/schema.js';
import { atOrBelow, minLevel, type Level } from '../policy/sensitivity.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { badRequest, conflict, forbidden, notFound } from './errors.js';
import { newId, nowIso } from './ids.js';
import { parseFolderPath } from './paths.js';
import { liveMembers, workspaceAgents } from './principal-loader.js';

export interface AgentRecord {
  id: string;
  kind: 'agent';
  name: string;
  ceiling: Level;
  creator: string | null;
  grants: Grant[];
  created_at: string;
  /** Set while the agent is suspended (its creator left the workspace) until an owner adopts it. */
  suspended_at: string | null;
}

export interface PrincipalSummary {
  id: string;
  name: string;
  kind: 'human' | 'agent';
  email?: string | null;
  role?: string;
  ceiling?: string | null;
  creator?: string | null;
  created_at?: string;
  suspended_at?: string | null;
}

function requireStepUpForSecret(p: Principal, grants: Grant[], ceiling?: Level | null): void {
  if (grantingNeedsStepUp(grants, ceiling) && !hasStepUp(p)) {
    throw forbidden('Granting secret needs a step-up within the last 5 minutes (POST /api/auth/stepup)', 'step_up_required');
  }
}

function requireHuman(p: Principal, what: string): asserts p is Principal & { role: NonNullable<Principal['role']> } {
  if (p.kind !== 'human' || !p.role) throw forbidden(`Only a signed-in human may ${what}`);
}

/** Validates grants: known scope shape, and never above what the granting human holds. */
function checkGrants(p: Principal & { role: NonNullable<Principal['role']> }, grants: Grant[]): Grant[] {
  if (grants.length > 100) throw badRequest('At most 100 grants per agent', 'invalid_grants');
  return grants.map((g) => {
    if (g.scope !== '*') parseFolderPath(g.scope);
    if (!canGrant(p.role, g)) {
      throw forbidden(
        `A ${p.role} cannot grant ${g.action} at ${g.ceiling}: grants never exceed your role (ceiling ${ROLE_CEILING[p.role]})`,
        'grant_exceeds_role',
      );
    }
    return { action: g.action, scope: g.scope, ceiling: g.ceiling };
  });
}

async function loadAgentRow(ctx: CoreContext, p: Principal, id: string) {
  const row = await workspaceAgents(ctx.store.db, p.workspaceId).selectAll().where('id', '=', id).executeTakeFirst();
  if (!row) throw notFound(`Principal ${id} not found`);
  return row;
}

async function grantsOf(ctx: CoreContext, id: string): Promise<Grant[]> {
  const rows = await ctx.store.db.selectFrom('grants').selectAll().where('principal_id', '=', id).orderBy('position').execute();
  return rows.map((r) => ({ action: r.action as Grant['action'], scope: r.scope, ceiling: r.ceiling as Level }));
}

async function writeGrants(trx: Parameters<Parameters<typeof inTransaction>[2]>[0], id: string, grants: Grant[]) {
  await trx.deleteFrom('grants').where('principal_id', '=', id).execute();
  if (grants.length > 0) {
    await trx
      .insertInto('grants')
      .values(grants.map((g, i) => ({ principal_id: id, position: i, action: g.action, scope: g.scope, ceiling: g.ceiling })))
      .execute();
  }
}

export async function createAgent(ctx: CoreContext, p: Principal, input: { name: string; grants: Grant[]; ceiling: Level }): Promise<AgentRecord> {
  requireHuman(p, 'create agents');
  if (!atOrBelow(input.ceiling, ROLE_CEILING[p.role])) {
    throw forbidden(`Agent ceiling ${input.ceiling} is above your role's ceiling`, 'grant_exceeds_role');
  }
  const grants = checkGrants(p, input.grants);
  requireStepUpForSecret(p, grants, input.ceiling);
  const id = newId.principal();
  const now = nowIso();
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    await trx
      .insertInto('principals')
      .values({
        id,
        kind: 'agent',
        name: input.name,
        email: null,
        password_hash: null,
        workspace_id: p.workspaceId,
        created_by: p.id,
        ceiling: input.ceiling,
        created_at: now,
        deleted_at: null,
      })
      .execute();
    await writeGrants(trx, id, grants);
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'agent.create', detail: { agent: id, name: input.name, grants } });
  });
  return { id, kind: 'agent', name: input.name, ceiling: input.ceiling, creator: p.id, grants, created_at: now, suspended_at: null };
}

/** Humans (members) and agents of the workspace; agents see only id, name and kind. */
export async function listPrincipals(ctx: CoreContext, p: Principal): Promise<PrincipalSummary[]> {
  const db = ctx.store.db;
  const humans = await liveMembers(db, p.workspaceId)
    .select(['principals.id', 'principals.name', 'principals.email', 'members.role', 'members.created_at'])
    .orderBy('members.created_at')
    .execute();
  const agents = await workspaceAgents(db, p.workspaceId)
    .select(['id', 'name', 'ceiling', 'created_by', 'created_at', 'suspended_at'])
    .orderBy('created_at')
    .execute();
  const full = seesPrincipalDetails(p);
  // Suspended agents cannot act or be mentioned: agents do not see them at all.
  if (!full) agents.splice(0, agents.length, ...agents.filter((a) => !a.suspended_at));
  return [
    ...humans.map((h) =>
      full
        ? { id: h.id, name: h.name, kind: 'human' as const, email: h.email, role: h.role, created_at: h.created_at }
        : { id: h.id, name: h.name, kind: 'human' as const },
    ),
    ...agents.map((a) =>
      full
        ? {
            id: a.id,
            name: a.name,
            kind: 'agent' as const,
            ceiling: a.ceiling,
            creator: a.created_by,
            created_at: a.created_at,
            suspended_at: a.suspended_at ?? null,
          }
        : { id: a.id, name: a.name, kind: 'agent' as const },
    ),
  ];
}

export async function getAgent(ctx: CoreContext, p: Principal, id: string): Promise<AgentRecord | PrincipalSummary> {
  const row = await loadAgentRow(ctx, p, id);
  if (!seesPrincipalDetails(p) && row.id !== p.id) return { id: row.id, name: row.name, kind: 'agent' };
  return {
    id: row.id,
    kind: 'agent',
    name: row.name,
    ceiling: (row.ceiling ?? 'internal') as Level,
    creator: row.created_by,
    grants: await grantsOf(ctx, row.id),
    created_at: row.created_at,
    suspended_at: row.suspended_at ?? null,
  };
}

async function manageable(ctx: CoreContext, p: Principal, id: string) {
  const row = await loadAgentRow(ctx, p, id);
  if (!canManageAgent(p, { createdBy: row.created_by, workspaceId: row.workspace_id ?? '' })) {
    throw forbidden("Only the agent's creator or a workspace owner may manage it");
  }
  return row;
}

export async function deleteAgent(ctx: CoreContext, p: Principal, id: string): Promise<void> {
  await manageable(ctx, p, id);
  const now = nowIso();
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    await trx.updateTable('principals').set({ deleted_at: now }).where('id', '=', id).execute();
    await trx.updateTable('agent_keys').set({ revoked_at: now }).where('principal_id', '=', id).where('revoked_at', 'is', null).execute();
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'agent.delete', detail: { agent: id } });
  });
}

export async function getGrants(ctx: CoreContext, p: Principal, id: string): Promise<Grant[]> {
  const row = await loadAgentRow(ctx, p, id);
  // An agent may read its own grants; other agents' grants are for humans.
  if (p.kind === 'agent' && row.id !== p.id) throw forbidden('Agents may read only their own grants');
  return grantsOf(ctx, id);
}

export async function replaceGrants(ctx: CoreContext, p: Principal, id: string, grants: Grant[]): Promise<Grant[]> {
  requireHuman(p, 'change grants');
  await manageable(ctx, p, id);
  const checked = checkGrants(p, grants);
  requireStepUpForSecret(p, checked);
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    await writeGrants(trx, id, checked);
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'agent.grants', detail: { agent: id, grants: checked } });
  });
  return checked;
}

export type KeyRecord = Pick<AgentKeysTable, 'id' | 'name' | 'hint' | 'ceiling' | 'ip_pin' | 'expires_at' | 'revoked_at' | 'created_at' | 'last_used_at'>;

export async function listKeys(ctx: CoreContext, p: Principal, id: string): Promise<KeyRecord[]> {
  await manageable(ctx, p, id);
  return ctx.store.db
    .selectFrom('agent_keys')
    .select(['id', 'name', 'hint', 'ceiling', 'ip_pin', 'expires_at', 'revoked_at', 'created_at', 'last_used_at'])
    .where('principal_id', '=', id)
    .orderBy('created_at')
    .execute();
}

/** Key lifetime bounds (docs/decisions.md). */
export const KEY_MAX_DAYS = 3650;

export async function mintKey(
  ctx: CoreContext,
  p: Principal,
  id: string,
  input: { name: string; expires_in_days?: number | null | undefined; ip_pin?: string | null | undefined; ceiling?: Level | null | undefined },
  /** Set by the operator's command line (src/core/operator.ts): recorded in the audit entry. */
  by?: { via: 'operator'; operator: string },
): Promise<KeyRecord & { key: string }> {
  const agent = await manageable(ctx, p, id);
  if (agent.suspended_at) {
    throw conflict(
      `Agent ${id} is suspended (its creator left the workspace); an owner adopts it first: POST /api/v1/principals/${id}/adopt`,
      'agent_suspended',
    );
  }
  if (input.ip_pin && isIP(input.ip_pin) === 0) throw badRequest('ip_pin must be an IPv4 or IPv6 address', 'invalid_request');
  const secret = newSecret('ak_');
  const now = new Date();
  const row = {
    id: newId.key(),
    principal_id: id,
    workspace_id: p.workspaceId,
    name: input.name,
    token_hash: hashSecret(secret),
    hint: secretHint(secret),
    ceiling: input.ceiling ?? null,
    ip_pin: input.ip_pin || null,
    expires_at: input.expires_in_days ? new Date(now.getTime() + input.expires_in_days * 86_400_000).toISOString() : null,
    revoked_at: null,
    epoch: 0,
    created_at: now.toISOString(),
    last_used_at: null,
  };
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const ws = await trx.selectFrom('workspaces').select('token_epoch').where('id', '=', p.workspaceId).executeTakeFirstOrThrow();
    row.epoch = ws.token_epoch;
    await trx.insertInto('agent_keys').values(row).execute();
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'agent.key.mint', detail: { agent: id, key: row.id, ...by } });
  });
  const { token_hash: _h, principal_id: _p, workspace_id: _w, epoch: _e, ...rest } = row;
  return { ...rest, key: secret };
}

export async function revokeKey(ctx: CoreContext, p: Principal, id: string, keyId: string): Promise<void> {
  await manageable(ctx, p, id);
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const res = await trx
      .updateTable('agent_keys')
      .set({ revoked_at: nowIso() })
      .where('id', '=', keyId)
      .where('principal_id', '=', id)
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    if (Number(res.numUpdatedRows) === 0) {
      const exists = await trx.selectFrom('agent_keys').select('id').where('id', '=', keyId).where('principal_id', '=', id).executeTakeFirst();
      if (!exists) throw notFound(`Key ${keyId} not found`);
      return; // already revoked: revoking again changes nothing
    }
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'agent.key.revoke', detail: { agent: id, key: keyId } });
  });
}

/**
 * An owner takes custody of an agent: they become its creator, its grants and own ceiling are
 * capped to their role, and a suspended agent is active again (its old keys stay revoked; mint
 * new ones). Used after the creator left the workspace, or was demoted.
 */
export async function adoptAgent(ctx: CoreContext, p: Principal, id: string): Promise<AgentRecord> {
  requireHuman(p, 'adopt agents');
  if (p.role !== 'owner') throw forbidden('Only a workspace owner may adopt an agent');
  const row = await loadAgentRow(ctx, p, id);
  const grants = capGrantsToRole(await grantsOf(ctx, id), p.role);
  const ceiling = minLevel((row.ceiling ?? 'internal') as Level, ROLE_CEILING[p.role]);
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    await trx.updateTable('principals').set({ created_by: p.id, suspended_at: null, ceiling }).where('id', '=', id).execute();
    await writeGrants(trx, id, grants);
    await appendAudit(trx, p.workspaceId, {
      principalId: p.id,
      action: 'agent.adopt',
      detail: { agent: id, from: row.created_by, was_suspended: row.suspended_at ?? null, grants },
    });
  });
  return { ...(await getAgent(ctx, p, id)) } as AgentRecord;
}

/**
 * When a member's role falls, the agents they made fall with it, in the caller's transaction:
 * actions the new role lacks are dropped from their grants, ceilings (grants' and the agent's
 * own) fall to the role's, and each change is audited. The resolver caps them at the
 * creator's current role too; this makes the stored grants say the truth.
 */
export async function capCreatorsAgents(trx: Executor, workspaceId: string, actorId: string, creatorId: string, role: Role): Promise<void> {
  const agents = await workspaceAgents(trx, workspaceId).select(['id', 'ceiling']).where('created_by', '=', creatorId).execute();
  for (const a of agents) {
    const rows = await trx.selectFrom('grants').selectAll().where('principal_id', '=', a.id).orderBy('position').execute();
    const before = rows.map((r) => ({ action: r.action as Grant['action'], scope: r.scope, ceiling: r.ceiling as Level }));
    const after = capGrantsToRole(before, role);
    const ceiling = minLevel((a.ceiling ?? 'internal') as Level, ROLE_CEILING[role]);
    if (JSON.stringify(before) === JSON.stringify(after) && ceiling === a.ceiling) continue;
    await writeGrants(trx as Parameters<typeof writeGrants>[0], a.id, after);
    await trx.updateTable('principals').set({ ceiling }).where('id', '=', a.id).execute();
    await appendAudit(trx, workspaceId, {
      principalId: actorId,
      action: 'agent.grants.capped',
      detail: { agent: a.id, creator: creatorId, role, before, after, ceiling },
    });
  }
}

/**
 * When a member leaves or is removed, the agents they made in that workspace are suspended and
 * every key of theirs revoked, in the caller's transaction, until an owner adopts them.
 */
export async function suspendCreatorsAgents(trx: Executor, workspaceId: string, actorId: string, creatorId: string, now: string): Promise<number> {
  const agents = await workspaceAgents(trx, workspaceId).select('id').where('created_by', '=', creatorId).where('suspended_at', 'is', null).execute();
  for (const a of agents) {
    await trx.updateTable('principals').set({ suspended_at: now }).where('id', '=', a.id).execute();
    await trx.updateTable('agent_keys').set({ revoked_at: now }).where('principal_id', '=', a.id).where('revoked_at', 'is', null).execute();
    await trx.updateTable('elevations').set({ revoked_at: now }).where('agent_id', '=', a.id).where('revoked_at', 'is', null).execute();
    await appendAudit(trx, workspaceId, { principalId: actorId, action: 'agent.suspend', detail: { agent: a.id, creator: creatorId } });
  }
  return agents.length;
}
