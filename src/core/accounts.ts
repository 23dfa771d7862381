import { sql } from 'kysely';
import { checkPassword } from '../auth/password-policy.js';
import { hashNeedsUpgrade, hashPassword, verifyPassword } from '../auth/secrets.js';
import { assertNotBackedOff, recordFailure, recordSuccess } from './account-guard.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { badRequest, conflict, forbidden, unauthorized } from './errors.js';
import { newId, nowIso } from './ids.js';
import { checkInviteToken, useInvite } from './invites.js';
import { createWorkspace, type WorkspaceRow } from './workspaces.js';
import type { Principal, Role } from '../policy/principal.js';

export interface SignupInput {
  email: string;
  password: string;
  name: string;
  invite_token?: string | undefined;
}

export { checkPassword };

/** True once any human account exists (invite-only deployments admit the first one freely). */
export async function hasAnyHuman(ctx: CoreContext): Promise<boolean> {
  const row = await ctx.store.db.selectFrom('principals').select('id').where('kind', '=', 'human').limit(1).executeTakeFirst();
  return row !== undefined;
}

export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

export interface SignupResult {
  principalId: string;
  /** The workspace the new session works in: the invited one when an invite was used, else the own one. */
  workspace: WorkspaceRow | { id: string; slug: string; name: string };
  /** The account's own workspace (every account gets one, spec §1). */
  ownWorkspace: WorkspaceRow;
  /** The role taken through the invite, when one was used. */
  invitedRole: Role | null;
}

/**
 * Creates a human account and its own workspace, the caller as owner. With an
 * `invite_token` (required when SIGNUPS=invite, honoured in open mode too) the same
 * transaction consumes the invite and joins its workspace with the invite's role, and that
 * workspace becomes the session's default.
 */
export async function signup(ctx: CoreContext, input: SignupInput): Promise<SignupResult> {
  if (ctx.config.signups === 'invite' && !input.invite_token && (await hasAnyHuman(ctx))) {
    // The very first account of an invite-only deployment bootstraps it (docs/decisions.md).
    throw forbidden('Sign-ups need an invite on this deployment (SIGNUPS=invite)', 'invite_required');
  }
  checkDisplayName(input.name);
  const email = normalizeEmail(input.email);
  // Refuse a dead invite before spending a password hash on it; decided again in the transaction.
  const invite = input.invite_token ? await checkInviteToken(ctx, input.invite_token, email) : null;
  checkPassword(input.password, email);
  const passwordHash = await hashPassword(input.password);
  const now = nowIso();
  // With an invite, lock the invited workspace: its audit chain gets the invite.accept entry.
  return inTransaction(ctx.store, invite?.workspaceId ?? null, async (trx) => {
    if (ctx.config.signups === 'invite' && !input.invite_token) {
      // Decided again where it counts: two first sign-ups at once must not both pass. Sign-ups
      // without an invite are serialised (PostgreSQL advisory lock; SQLite has one writer).
      if (ctx.store.dialect === 'postgres') await sql`select pg_advisory_xact_lock(7714202)`.execute(trx);
      const any = await trx.selectFrom('principals').select('id').where('kind', '=', 'human').limit(1).executeTakeFirst();
      if (any) throw forbidden('Sign-ups need an invite on this deployment (SIGNUPS=invite)', 'invite_required');
    }
    const taken = await trx.selectFrom('principals').select('id').where('email', '=', email).executeTakeFirst();
    if (taken) throw conflict('An account with this email already exists', 'email_taken');
    const principalId = newId.principal();
    await trx
      .insertInto('principals')
      .values({
        id: principalId,
        kind: 'human',
        name: input.name.trim(),
        email,
        password_hash: passwordHash,
        workspace_id: null,
        created_by: null,
        ceiling: null,
        created_at: now,
        deleted_at: null,
      })
      .execute();
    const workspace = await createWorkspace(trx, input.name.trim() || email.split('@')[0]!, principalId, now);
    await appendAudit(trx, workspace.id, { principalId, action: 'account.signup', detail: { email } });
    if (!input.invite_token) return { principalId, workspace, ownWorkspace: workspace, invitedRole: null };
    const joined = await useInvite(trx, input.invite_token, { principalId, email }, now);
    return { principalId, workspace: joined.workspace, ownWorkspace: workspace, invitedRole: joined.role };
  });
}

// A hash to verify against when the email is unknown, so both paths take the same time.
let dummyHash: Promise<string> | undefined;

/** Checks email and password; the same error for an unknown email and a wrong password. */
export async function checkCredentials(ctx: CoreContext, emailRaw: string, password: string, ip?: string): Promise<string> {
  const email = normalizeEmail(emailRaw);
  // Per account, whether it exists or not (issue 11): a backed-off account is refused unchecked.
  await assertNotBackedOff(ctx, email);
  const row = await ctx.store.db
    .selectFrom('principals')
    .select(['id', 'password_hash'])
    .where('email', '=', email)
    .where('kind', '=', 'human')
    .where('deleted_at', 'is', null)
    .executeTakeFirst();
  dummyHash ??= hashPassword('not-a-real-password-0');
  const ok = await verifyPassword(password, row?.password_hash ?? (await dummyHash));
  if (!row || !row.password_hash || !ok) {
    await recordFailure(ctx, email, 'password', ip);
    throw unauthorized('Email or password is wrong', 'invalid_credentials');
  }
  await recordSuccess(ctx, email);
  await upgradeHash(ctx, row.id, password, row.password_hash);
  return row.id;
}

/** A hash made with weaker parameters than today's is replaced on a successful login (the password is at hand only then). */
async function upgradeHash(ctx: CoreContext, principalId: string, password: string, stored: string): Promise<void> {
  if (!hashNeedsUpgrade(stored)) return;
  const fresh = await hashPassword(password);
  await ctx.store.db.updateTable('principals').set({ password_hash: fresh }).where('id', '=', principalId).where('password_hash', '=', stored).execute();
}

export interface LoginStart {
  principalId: string;
  principal: { id: string; name: string; email: string };
  workspace: { id: string; slug: string; name: string };
  /** Set when the session must wait for a second factor. */
  pending: 'totp_required' | 'totp_enroll_required' | null;
}

/** First login step: the password, then what the second factor requires. */
export async function beginLogin(
  ctx: CoreContext,
  email: string,
  password: string,
  ip?: string,
): Promise<LoginStart & { pendingKind: 'totp' | 'totp_enroll' | null }> {
  const principalId = await checkCredentials(ctx, email, password, ip);
  const who = await ctx.store.db.selectFrom('principals').select(['name', 'email', 'totp_enabled_at']).where('id', '=', principalId).executeTakeFirstOrThrow();
  const ws = await ctx.store.db
    .selectFrom('members')
    .innerJoin('workspaces', 'workspaces.id', 'members.workspace_id')
    .select(['workspaces.id', 'workspaces.slug', 'workspaces.name'])
    .where('members.principal_id', '=', principalId)
    // Oldest membership first; a tie (an invite sign-up joins two at once) goes to the invited one.
    .orderBy('members.created_at')
    .orderBy(sql`case when members.role = 'owner' then 1 else 0 end`)
    .limit(1)
    .executeTakeFirst();
  if (!ws) throw unauthorized('This account belongs to no workspace', 'invalid_credentials');
  const pendingKind = who.totp_enabled_at ? 'totp' : ctx.config.requireTotp ? 'totp_enroll' : null;
  return {
    principalId,
    principal: { id: principalId, name: who.name, email: who.email ?? '' },
    workspace: ws,
    pending: pendingKind === 'totp' ? 'totp_required' : pendingKind === 'totp_enroll' ? 'totp_enroll_required' : null,
    pendingKind,
  };
}

/** Display names: 1 to 100 characters after trimming; no control characters or angle brackets (they end up in git author lines). */
export function checkDisplayName(raw: string): string {
  const name = raw.trim();
  if (name.length < 1 || name.length > 100) throw badRequest('The name must be 1 to 100 characters', 'invalid_request');
  if (/[\u0000-\u001f\u007f<>]/.test(name)) throw badRequest('The name must not contain control characters or < >', 'invalid_request');
  return name;
}

/** A human changes their display name; audited in the workspace the request works in. */
export async function updateDisplayName(ctx: CoreContext, p: Principal, raw: string): Promise<{ id: string; name: string }> {
  if (p.kind !== 'human') throw forbidden('Only a signed-in human may change their name', 'session_required');
  const name = checkDisplayName(raw);
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const before = await trx.selectFrom('principals').select('name').where('id', '=', p.id).executeTakeFirstOrThrow();
    if (before.name === name) return;
    await trx.updateTable('principals').set({ name }).where('id', '=', p.id).execute();
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'account.name', detail: { from: before.name, to: name } });
  });
  return { id: p.id, name };
}
