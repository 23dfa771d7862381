import type { Transaction } from 'kysely';
import { ulid } from 'ulid';
import { hashSecret, newSecret } from '../auth/secrets.js';
import { decideInviteManagement, decideInviteRevoke, decideInviteUse, inviteState, type InviteState, type MemberDecision } from '../policy/members.js';
import type { Principal, Role } from '../policy/principal.js';
import type { DB, InvitesTable } from '../store/schema.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { conflict, forbidden, notFound } from './errors.js';
import { nowIso } from './ids.js';
import { memberScope, roleIn } from './members.js';
import { addMember } from './workspaces.js';

/** Invite lifetime in days (docs/decisions.md): default 7, at most 30. */
export const INVITE_DEFAULT_DAYS = 7;
export const INVITE_MAX_DAYS = 30;

const newInviteId = () => `in_${ulid().toLowerCase()}`;

/** An invite as owners see it in listings: never the token, only a hint. */
export interface InviteRecord extends Pick<
  InvitesTable,
  'id' | 'role' | 'email' | 'created_by' | 'created_at' | 'expires_at' | 'revoked_at' | 'accepted_at' | 'accepted_by'
> {
  hint: string;
  state: InviteState;
}

/** A new invite: the token and its URL are in this answer only. */
export interface NewInvite extends InviteRecord {
  token: string;
  accept_url: string;
}

/**
 * The token is `iv_` + 256 random bits + the last four characters of the invite id, so a
 * listing can show the hint `iv_…<last four>` without storing anything about the token
 * beyond its SHA-256.
 */
function mintToken(id: string): string {
  return `${newSecret('iv_')}${id.slice(-4)}`;
}

function hintOf(id: string): string {
  return `iv_…${id.slice(-4)}`;
}

function toRecord(row: InvitesTable, now = new Date()): InviteRecord {
  return {
    id: row.id,
    role: row.role,
    email: row.email,
    hint: hintOf(row.id),
    state: inviteState(facts(row), now),
    created_by: row.created_by,
    created_at: row.created_at,
    expires_at: row.expires_at,
    revoked_at: row.revoked_at,
    accepted_at: row.accepted_at,
    accepted_by: row.accepted_by,
  };
}

function facts(row: InvitesTable) {
  return { expiresAt: row.expires_at, revokedAt: row.revoked_at, acceptedAt: row.accepted_at, email: row.email };
}

function enforce(d: MemberDecision): void {
  if (d.kind === 'deny') throw d.error;
}

const inviteMissing = () => notFound('No such invite', 'invite_not_found');

/** Owners only; the role is read again inside the transaction so a just-demoted owner is refused. */
async function requireInviteManager(trx: Transaction<DB>, workspaceId: string, p: Principal, wsLabel: string): Promise<void> {
  const role = await roleIn(trx, workspaceId, p.id);
  if (!role) throw notFound(`Workspace ${wsLabel} not found`, 'workspace_not_found');
  enforce(decideInviteManagement({ id: p.id, role }));
}

export async function listInvites(ctx: CoreContext, p: Principal, ws?: string): Promise<InviteRecord[]> {
  const scope = await memberScope(ctx.store.db, p, ws);
  enforce(decideInviteManagement(scope.actor));
  const rows = await ctx.store.db
    .selectFrom('invites')
    .selectAll()
    .where('workspace_id', '=', scope.workspace.id)
    .orderBy('created_at')
    .orderBy('id')
    .execute();
  const now = new Date();
  return rows.map((r) => toRecord(r, now));
}

export async function createInvite(
  ctx: CoreContext,
  p: Principal,
  ws: string | undefined,
  input: { role: Role; email?: string | null | undefined; expires_in_days?: number | undefined },
): Promise<NewInvite> {
  const scope = await memberScope(ctx.store.db, p, ws);
  enforce(decideInviteManagement(scope.actor));
  const email = input.email ? input.email.trim().toLowerCase() : null;
  const days = input.expires_in_days ?? INVITE_DEFAULT_DAYS;
  const now = new Date();
  const id = newInviteId();
  const token = mintToken(id);
  const row: InvitesTable = {
    id,
    workspace_id: scope.workspace.id,
    token_hash: hashSecret(token),
    role: input.role,
    email,
    created_by: p.id,
    created_at: now.toISOString(),
    expires_at: new Date(now.getTime() + days * 86_400_000).toISOString(),
    revoked_at: null,
    accepted_at: null,
    accepted_by: null,
  };
  await inTransaction(ctx.store, scope.workspace.id, async (trx) => {
    await requireInviteManager(trx, scope.workspace.id, p, scope.workspace.slug);
    if (email) {
      const member = await trx
        .selectFrom('members')
        .innerJoin('principals', 'principals.id', 'members.principal_id')
        .select('principals.id')
        .where('members.workspace_id', '=', scope.workspace.id)
        .where('principals.email', '=', email)
        .executeTakeFirst();
      if (member) throw conflict(`${email} is already a member of this workspace`, 'already_member');
    }
    await trx.insertInto('invites').values(row).execute();
    await appendAudit(trx, scope.workspace.id, {
      principalId: p.id,
      action: 'invite.create',
      detail: { invite: id, role: input.role, email, expires_at: row.expires_at },
    });
  });
  return { ...toRecord(row, now), token, accept_url: `${ctx.config.publicUrl}/invite/${token}` };
}

/** Revokes an invite; revoking a revoked one again answers the same and changes nothing. */
export async function revokeInvite(ctx: CoreContext, p: Principal, ws: string | undefined, inviteId: string): Promise<InviteRecord> {
  const scope = await memberScope(ctx.store.db, p, ws);
  enforce(decideInviteManagement(scope.actor));
  return inTransaction(ctx.store, scope.workspace.id, async (trx) => {
    await requireInviteManager(trx, scope.workspace.id, p, scope.workspace.slug);
    const row = await trx.selectFrom('invites').selectAll().where('id', '=', inviteId).where('workspace_id', '=', scope.workspace.id).executeTakeFirst();
    if (!row) throw inviteMissing();
    enforce(decideInviteRevoke(facts(row)));
    if (row.revoked_at) return toRecord(row);
    const revoked = { ...row, revoked_at: nowIso() };
    await trx.updateTable('invites').set({ revoked_at: revoked.revoked_at }).where('id', '=', inviteId).execute();
    await appendAudit(trx, scope.workspace.id, { principalId: p.id, action: 'invite.revoke', detail: { invite: inviteId } });
    return toRecord(revoked);
  });
}

async function inviteByToken(db: CoreContext['store']['db'] | Transaction<DB>, token: string): Promise<InvitesTable | undefined> {
  return db.selectFrom('invites').selectAll().where('token_hash', '=', hashSecret(token)).executeTakeFirst();
}

/**
 * Checks a token before any work is done (sign-up hashes a password after this): unknown,
 * used, revoked, expired and mismatched invites are refused with their codes. Returns the
 * invite's workspace, whose writers the accepting transaction must then lock.
 */
export async function checkInviteToken(ctx: CoreContext, token: string, email: string): Promise<{ workspaceId: string }> {
  const row = await inviteByToken(ctx.store.db, token);
  if (!row) throw inviteMissing();
  enforce(decideInviteUse(facts(row), email));
  return { workspaceId: row.workspace_id };
}

export interface AcceptedInvite {
  workspace: { id: string; slug: string; name: string };
  role: Role;
}

/**
 * Takes an invite inside the caller's transaction (which must hold the invite workspace's
 * lock): decides again on fresh rows, marks it used, adds the member and appends
 * `invite.accept` to the workspace's audit chain. Used by accept and by sign-up.
 */
export async function useInvite(trx: Transaction<DB>, token: string, who: { principalId: string; email: string }, now: string): Promise<AcceptedInvite> {
  const row = await inviteByToken(trx, token);
  if (!row) throw inviteMissing();
  enforce(decideInviteUse(facts(row), who.email, new Date(now)));
  if (await roleIn(trx, row.workspace_id, who.principalId)) {
    throw conflict('You are already a member of this workspace', 'already_member');
  }
  const res = await trx
    .updateTable('invites')
    .set({ accepted_at: now, accepted_by: who.principalId })
    .where('id', '=', row.id)
    .where('accepted_at', 'is', null)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  // Writers of the workspace are serialised, so this only guards against a caller that forgot the lock.
  if (Number(res.numUpdatedRows) !== 1) throw conflict('This invite has already been used', 'invite_used');
  await addMember(trx, row.workspace_id, who.principalId, row.role, now);
  await appendAudit(trx, row.workspace_id, {
    principalId: who.principalId,
    action: 'invite.accept',
    detail: { invite: row.id, role: row.role },
  });
  const ws = await trx.selectFrom('workspaces').select(['id', 'slug', 'name']).where('id', '=', row.workspace_id).executeTakeFirstOrThrow();
  return { workspace: ws, role: row.role };
}

/** A signed-in human accepts an invite: one transaction (mark used, add member, audit). */
export async function acceptInvite(ctx: CoreContext, p: Principal, token: string): Promise<AcceptedInvite> {
  if (p.kind !== 'human') throw forbidden('Only a signed-in human may accept invites', 'session_required');
  const who = await ctx.store.db.selectFrom('principals').select('email').where('id', '=', p.id).executeTakeFirstOrThrow();
  const email = who.email ?? '';
  const { workspaceId } = await checkInviteToken(ctx, token, email);
  return inTransaction(ctx.store, workspaceId, (trx) => useInvite(trx, token, { principalId: p.id, email }, nowIso()));
}

/** What an invite landing page may show before anyone signs in; unknown tokens are 404. */
export async function describeInvite(
  ctx: CoreContext,
  token: string,
): Promise<{ workspace: { id: string; slug: string; name: string }; role: Role; email: string | null; state: InviteState; expires_at: string }> {
  const row = await inviteByToken(ctx.store.db, token);
  if (!row) throw inviteMissing();
  const ws = await ctx.store.db.selectFrom('workspaces').select(['id', 'slug', 'name']).where('id', '=', row.workspace_id).executeTakeFirstOrThrow();
  return { workspace: ws, role: row.role, email: row.email, state: inviteState(facts(row)), expires_at: row.expires_at };
}
