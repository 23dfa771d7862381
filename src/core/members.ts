import type { Transaction } from 'kysely';
import { canListMembers, decideRemoval, decideRoleChange, type MemberDecision, type MemberFacts } from '../policy/members.js';
import type { Principal, Role } from '../policy/principal.js';
import type { Executor } from '../store/db.js';
import type { DB } from '../store/schema.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { forbidden, notFound } from './errors.js';
import { nowIso } from './ids.js';
import { findWorkspace } from './workspaces.js';
import { capCreatorsAgents, suspendCreatorsAgents } from './principals.js';
import { liveMembers } from './principal-loader.js';
import { ROLE_ACTIONS, ROLE_CEILING } from '../policy/access.js';
import { rank } from '../policy/sensitivity.js';
import { revokePersonsGrants } from '../auth/oauth/tokens.js';

/** A member as the interface shows it. */
export interface MemberRecord {
  id: string;
  name: string;
  email: string | null;
  role: Role;
  joined_at: string;
}

/** The workspace a membership request is about, and the caller's role there. */
export interface MemberScope {
  workspace: { id: string; slug: string };
  actor: MemberFacts;
}

const workspaceMissing = (ws: string) => notFound(`Workspace ${ws} not found`, 'workspace_not_found');

function requireHuman(p: Principal): void {
  if (p.kind !== 'human') throw forbidden('Only a signed-in human may manage members', 'session_required');
}

/**
 * The workspace of a members/invites request: the request's current workspace, or `:ws`
 * (id or slug) of the `/workspaces/:ws/…` form. A workspace the caller is not a member of
 * does not exist for them (404 workspace_not_found).
 */
export async function memberScope(db: Executor, p: Principal, ws?: string): Promise<MemberScope> {
  requireHuman(p);
  if (ws === undefined || ws === p.workspaceId || ws === p.workspaceSlug) {
    if (!p.role) throw workspaceMissing(ws ?? p.workspaceSlug);
    return { workspace: { id: p.workspaceId, slug: p.workspaceSlug }, actor: { id: p.id, role: p.role } };
  }
  const found = await findWorkspace(db, ws);
  if (!found) throw workspaceMissing(ws);
  const role = await roleIn(db, found.id, p.id);
  if (!role) throw workspaceMissing(ws);
  return { workspace: { id: found.id, slug: found.slug }, actor: { id: p.id, role } };
}

/** A principal's role in a workspace, or null when they are not a member. */
export async function roleIn(db: Executor, workspaceId: string, principalId: string): Promise<Role | null> {
  const row = await db.selectFrom('members').select('role').where('workspace_id', '=', workspaceId).where('principal_id', '=', principalId).executeTakeFirst();
  return row?.role ?? null;
}

async function ownerCount(db: Executor, workspaceId: string): Promise<number> {
  const row = await db
    .selectFrom('members')
    .select((eb) => eb.fn.countAll<number | string>().as('n'))
    .where('workspace_id', '=', workspaceId)
    .where('role', '=', 'owner')
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

function memberQuery(db: Executor, workspaceId: string) {
  return liveMembers(db, workspaceId).select(['principals.id', 'principals.name', 'principals.email', 'members.role', 'members.created_at as joined_at']);
}

function enforce(d: MemberDecision): void {
  if (d.kind === 'deny') throw d.error;
}

/**
 * Loads, inside the mutation's transaction, the facts a decision needs: the caller's role
 * now (it may have changed since the request was authenticated), the target's, and how
 * many owners there are. Writers of the workspace are serialised, so they stay true
 * until the transaction commits.
 */
async function loadFacts(trx: Transaction<DB>, scope: MemberScope, memberId: string) {
  const actorRole = await roleIn(trx, scope.workspace.id, scope.actor.id);
  if (!actorRole) throw workspaceMissing(scope.workspace.slug);
  const target = await memberQuery(trx, scope.workspace.id).where('principals.id', '=', memberId).executeTakeFirst();
  if (!target) throw notFound(`Member ${memberId} not found in this workspace`, 'member_not_found');
  return { actor: { id: scope.actor.id, role: actorRole }, target, owners: await ownerCount(trx, scope.workspace.id) };
}

export async function listMembers(ctx: CoreContext, p: Principal, ws?: string): Promise<MemberRecord[]> {
  const scope = await memberScope(ctx.store.db, p, ws);
  if (!canListMembers(scope.actor)) throw workspaceMissing(ws ?? p.workspaceSlug);
  return memberQuery(ctx.store.db, scope.workspace.id).orderBy('members.created_at').orderBy('principals.id').execute();
}

/** Changes a member's role (owners only); the last owner cannot be demoted. */
export async function changeRole(ctx: CoreContext, p: Principal, ws: string | undefined, memberId: string, role: Role): Promise<MemberRecord> {
  const scope = await memberScope(ctx.store.db, p, ws);
  return inTransaction(ctx.store, scope.workspace.id, async (trx) => {
    const { actor, target, owners } = await loadFacts(trx, scope, memberId);
    enforce(decideRoleChange(actor, { id: target.id, role: target.role }, role, owners));
    if (target.role === role) return target; // nothing changes, nothing to audit
    await trx.updateTable('members').set({ role }).where('workspace_id', '=', scope.workspace.id).where('principal_id', '=', memberId).execute();
    await appendAudit(trx, scope.workspace.id, {
      principalId: p.id,
      action: 'member.role',
      detail: { member: memberId, from: target.role, to: role },
    });
    // A lower role lowers the agents this member made (issue 11): same transaction, audited.
    const lowered = rank(ROLE_CEILING[role]) < rank(ROLE_CEILING[target.role]) || ROLE_ACTIONS[role].length < ROLE_ACTIONS[target.role].length;
    if (lowered) await capCreatorsAgents(trx, scope.workspace.id, p.id, memberId, role);
    return { ...target, role };
  });
}

/**
 * Removes a member, or lets a member leave (memberId = the caller). Access ends at once:
 * every request resolves membership afresh. The removed human's sessions that defaulted to
 * this workspace move to their oldest remaining membership (or end, when none remains), and
 * their git tokens and OAuth connections for this workspace are revoked. Agents they created are suspended (keys
 * revoked) until an owner adopts them.
 */
export async function removeMember(
  ctx: CoreContext,
  p: Principal,
  ws: string | undefined,
  memberId: string,
): Promise<{ id: string; workspace_id: string; left: boolean }> {
  const scope = await memberScope(ctx.store.db, p, ws);
  const wsId = scope.workspace.id;
  return inTransaction(ctx.store, wsId, async (trx) => {
    const { actor, target, owners } = await loadFacts(trx, scope, memberId);
    enforce(decideRemoval(actor, { id: target.id, role: target.role }, owners));
    const now = nowIso();
    await trx.deleteFrom('members').where('workspace_id', '=', wsId).where('principal_id', '=', memberId).execute();
    const next = await trx
      .selectFrom('members')
      .select('workspace_id')
      .where('principal_id', '=', memberId)
      .orderBy('created_at')
      .orderBy('workspace_id')
      .limit(1)
      .executeTakeFirst();
    const sessions = trx.updateTable('sessions').where('principal_id', '=', memberId).where('workspace_id', '=', wsId).where('revoked_at', 'is', null);
    if (next) await sessions.set({ workspace_id: next.workspace_id }).execute();
    else await sessions.set({ revoked_at: now }).execute();
    await trx
      .updateTable('git_tokens')
      .set({ revoked_at: now })
      .where('principal_id', '=', memberId)
      .where('workspace_id', '=', wsId)
      .where('revoked_at', 'is', null)
      .execute();
    await suspendCreatorsAgents(trx, wsId, p.id, memberId, now);
    const left = memberId === p.id;
    await revokePersonsGrants(trx, wsId, memberId, left ? 'the person left the workspace' : 'the person was removed from the workspace', p.id, new Date(now));
    await appendAudit(trx, wsId, {
      principalId: p.id,
      action: left ? 'member.leave' : 'member.remove',
      detail: { member: memberId, role: target.role },
    });
    return { id: memberId, workspace_id: wsId, left };
  });
}
