import { matchTotp, newTotpSecret, totpUri } from '../auth/totp.js';
import { verifyPassword } from '../auth/secrets.js';
import type { Principal } from '../policy/principal.js';
import { STEP_UP_MS } from '../policy/access.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { badRequest, conflict, unauthorized } from './errors.js';
import { nowIso } from './ids.js';
import type { Executor } from '../store/db.js';

async function loadHuman(db: Executor, id: string) {
  return db
    .selectFrom('principals')
    .select(['id', 'email', 'password_hash', 'totp_secret', 'totp_enabled_at', 'totp_last_step'])
    .where('id', '=', id)
    .executeTakeFirstOrThrow();
}

/**
 * Checks a TOTP code and records its time step in the same transaction, so the same
 * code (or an older one) is never accepted twice, even by two nodes at once.
 */
async function consumeCode(db: Executor, principalId: string, secret: string, lastStep: number | null, code: string): Promise<void> {
  const step = matchTotp(secret, code.trim());
  if (step === null || (lastStep !== null && step <= lastStep)) {
    throw unauthorized('The code is wrong, expired or already used', 'invalid_code');
  }
  const res = await db
    .updateTable('principals')
    .set({ totp_last_step: step })
    .where('id', '=', principalId)
    .where((eb) => eb.or([eb('totp_last_step', 'is', null), eb('totp_last_step', '<', step)]))
    .executeTakeFirst();
  if (Number(res.numUpdatedRows) !== 1) throw unauthorized('The code is wrong, expired or already used', 'invalid_code');
}

/** Second step of login: a pending session becomes active with a valid TOTP code. */
export async function verifyLoginCode(ctx: CoreContext, principalId: string, sessionId: string, code: string): Promise<void> {
  await inTransaction(ctx.store, null, async (trx) => {
    const s = await trx.selectFrom('sessions').select(['pending', 'workspace_id']).where('id', '=', sessionId).executeTakeFirstOrThrow();
    if (s.pending !== 'totp') throw conflict('This session is not waiting for a TOTP code', 'not_pending');
    const h = await loadHuman(trx, principalId);
    if (!h.totp_secret || !h.totp_enabled_at) throw conflict('TOTP is not enrolled for this account', 'totp_not_enrolled');
    await consumeCode(trx, principalId, h.totp_secret, h.totp_last_step, code);
    await trx.updateTable('sessions').set({ pending: null, last_seen_at: nowIso() }).where('id', '=', sessionId).execute();
    await appendAudit(trx, s.workspace_id, { principalId, action: 'auth.totp.verify' });
  });
}

export type EnrollResult = { enabled: false; otpauth_uri: string; secret: string } | { enabled: true };

/**
 * Without a code: a new secret and its otpauth:// URI (not yet active). With a code:
 * confirms the secret and enables TOTP; a session pending enrolment becomes active.
 */
export async function enrollTotp(ctx: CoreContext, p: Principal, code: string | undefined): Promise<EnrollResult> {
  return inTransaction(ctx.store, null, async (trx) => {
    const h = await loadHuman(trx, p.id);
    if (h.totp_enabled_at) throw conflict('TOTP is already enabled for this account', 'totp_already_enabled');
    if (code === undefined) {
      const secret = newTotpSecret();
      await trx.updateTable('principals').set({ totp_secret: secret, totp_last_step: null }).where('id', '=', p.id).execute();
      return { enabled: false as const, otpauth_uri: totpUri(secret, h.email ?? p.name), secret };
    }
    if (!h.totp_secret) throw badRequest('Ask for a secret first (enroll without a code)', 'totp_not_started');
    await consumeCode(trx, p.id, h.totp_secret, h.totp_last_step, code);
    const now = nowIso();
    await trx.updateTable('principals').set({ totp_enabled_at: now }).where('id', '=', p.id).execute();
    if (p.sessionId) await trx.updateTable('sessions').set({ pending: null }).where('id', '=', p.sessionId).where('pending', '=', 'totp_enroll').execute();
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'auth.totp.enroll' });
    return { enabled: true as const };
  });
}

/** Step-up: a TOTP code, or the password when TOTP is not enrolled; valid five minutes. */
export async function stepUp(ctx: CoreContext, p: Principal, input: { code?: string | undefined; password?: string | undefined }): Promise<{ until: string }> {
  if (p.kind !== 'human' || !p.sessionId) throw unauthorized('Step-up needs a signed-in human', 'session_required');
  const sessionId = p.sessionId;
  const h = await loadHuman(ctx.store.db, p.id);
  if (h.totp_enabled_at && h.totp_secret) {
    if (!input.code) throw badRequest('TOTP is enrolled: step up with a code', 'code_required');
  } else {
    if (!input.password) throw badRequest('Step up with your password (TOTP is not enrolled)', 'password_required');
    if (!h.password_hash || !(await verifyPassword(input.password, h.password_hash))) {
      throw unauthorized('The password is wrong', 'invalid_credentials');
    }
  }
  const now = new Date();
  await inTransaction(ctx.store, null, async (trx) => {
    if (h.totp_enabled_at && h.totp_secret) await consumeCode(trx, p.id, h.totp_secret, h.totp_last_step, input.code!);
    await trx.updateTable('sessions').set({ stepup_at: now.toISOString() }).where('id', '=', sessionId).execute();
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'auth.stepup' });
  });
  return { until: new Date(now.getTime() + STEP_UP_MS).toISOString() };
}

/** Whether the account has TOTP on (for /me and login). */
export async function totpEnabled(db: Executor, principalId: string): Promise<boolean> {
  const h = await loadHuman(db, principalId);
  return Boolean(h.totp_enabled_at);
}
