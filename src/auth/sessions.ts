import { appendAudit } from '../core/audit.js';
import type { CoreContext } from '../core/context.js';
import { newId } from '../core/ids.js';
import { inTransaction } from '../store/tx.js';
import { hashSecret, newSecret } from './secrets.js';

/** Session lifetime (docs/decisions.md): 7 days absolute, 24 hours idle. */
export const SESSION_TTL_MS = 7 * 24 * 3600 * 1000;
export const SESSION_IDLE_MS = 24 * 3600 * 1000;
/** A pending session (waiting for its second factor or enrolment) lives 10 minutes. */
export const PENDING_TTL_MS = 10 * 60 * 1000;

export const SESSION_COOKIE = 'svc_session';
export const CSRF_COOKIE = 'svc_csrf';

export interface NewSession {
  id: string;
  token: string;
  csrf: string;
  expiresAt: Date;
}

/** Opens a server-side session; the opaque token goes in an HttpOnly cookie, only its hash is stored. */
export async function openSession(
  ctx: CoreContext,
  principalId: string,
  workspaceId: string,
  pending: 'totp' | 'totp_enroll' | null = null,
): Promise<NewSession> {
  const token = newSecret('ss_');
  const csrf = newSecret('');
  const now = new Date();
  // A pending session that later becomes active keeps this expiry; verify extends it.
  const expiresAt = new Date(now.getTime() + (pending ? PENDING_TTL_MS : SESSION_TTL_MS));
  const id = newId.session();
  // A sign-in is a security act: audited in the session's workspace, with the session row.
  await inTransaction(ctx.store, workspaceId, async (trx) => {
    await trx
      .insertInto('sessions')
      .values({
        id,
        token_hash: hashSecret(token),
        principal_id: principalId,
        workspace_id: workspaceId,
        csrf_token: csrf,
        created_at: now.toISOString(),
        last_seen_at: now.toISOString(),
        expires_at: expiresAt.toISOString(),
        revoked_at: null,
        stepup_at: null,
        pending,
      })
      .execute();
    await appendAudit(trx, workspaceId, { principalId, action: 'auth.session.open', detail: { session: id, ...(pending ? { pending } : {}) } }, now);
  });
  return { id, token, csrf, expiresAt };
}

export async function closeSession(ctx: CoreContext, sessionId: string): Promise<void> {
  await endSession(ctx, sessionId, null, 'auth.logout');
}

/**
 * Revokes a live session (of `principalId` when given) and audits it in the session's workspace,
 * in one transaction; false when there was none to end.
 */
async function endSession(ctx: CoreContext, sessionId: string, principalId: string | null, action: 'auth.logout' | 'auth.session.revoke'): Promise<boolean> {
  const s = await ctx.store.db.selectFrom('sessions').select(['principal_id', 'workspace_id']).where('id', '=', sessionId).executeTakeFirst();
  if (!s || (principalId !== null && s.principal_id !== principalId)) return false;
  return inTransaction(ctx.store, s.workspace_id, async (trx) => {
    const res = await trx
      .updateTable('sessions')
      .set({ revoked_at: new Date().toISOString() })
      .where('id', '=', sessionId)
      .where('principal_id', '=', s.principal_id)
      .where('revoked_at', 'is', null)
      .executeTakeFirst();
    if (Number(res.numUpdatedRows) !== 1) return false;
    await appendAudit(trx, s.workspace_id, { principalId: s.principal_id, action, detail: { session: sessionId } });
    return true;
  });
}

/** Once a pending session is verified it gets the full lifetime from now. */
export async function activateSession(ctx: CoreContext, sessionId: string): Promise<Date> {
  const expiresAt = new Date(Date.now() + SESSION_TTL_MS);
  await ctx.store.db.updateTable('sessions').set({ expires_at: expiresAt.toISOString() }).where('id', '=', sessionId).execute();
  return expiresAt;
}

export interface SessionRecord {
  id: string;
  created_at: string;
  last_seen_at: string;
  expires_at: string;
  pending: boolean;
  current: boolean;
}

/** A human's active sessions, newest first. */
export async function listSessions(ctx: CoreContext, principalId: string, currentId: string | null): Promise<SessionRecord[]> {
  const now = new Date().toISOString();
  const rows = await ctx.store.db
    .selectFrom('sessions')
    .select(['id', 'created_at', 'last_seen_at', 'expires_at', 'pending'])
    .where('principal_id', '=', principalId)
    .where('revoked_at', 'is', null)
    .where('expires_at', '>', now)
    .orderBy('created_at', 'desc')
    .execute();
  const idleCut = Date.now() - SESSION_IDLE_MS;
  return rows.filter((r) => Date.parse(r.last_seen_at) > idleCut).map((r) => ({ ...r, pending: r.pending !== null, current: r.id === currentId }));
}

/** Ends one of the caller's own sessions; someone else's is "not found". */
export async function revokeOwnSession(ctx: CoreContext, principalId: string, sessionId: string): Promise<boolean> {
  return endSession(ctx, sessionId, principalId, 'auth.session.revoke');
}
