import { matchTotp, newTotpSecret, totpUri } from '../auth/totp.js';
import { verifyPassword } from '../auth/secrets.js';
import type { Principal } from '../policy/principal.js';
import { hasStepUp, STEP_UP_MS } from '../policy/access.js';
import { assertNotBackedOff, recordFailure, recordSuccess, type AttemptKind } from './account-guard.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { badRequest, conflict, forbidden, isServiceError, unauthorized } from './errors.js';
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

/** Counts a wrong code or password against the account (per-account back-off), then rethrows. */
async function countingFailures<T>(ctx: CoreContext, email: string | null, kind: AttemptKind, ip: string | undefined, run: () => Promise<T>): Promise<T> {
  try {
    const out = await run();
    if (email) await recordSuccess(ctx, email);
    return out;
  } catch (e) {
    if (email && isServiceError(e) && (e.code === 'invalid_code' || e.code === 'invalid_credentials')) await recordFailure(ctx, email, kind, ip);
    throw e;
  }
}

/** Second step of login: a pending session becomes active with a valid TOTP code. */
export async function verifyLoginCode(ctx: CoreContext, principalId: string, sessionId: string, code: string, ip?: string): Promise<void> {
  const s = await ctx.store.db.selectFrom('sessions').select(['pending', 'workspace_id']).where('id', '=', sessionId).executeTakeFirstOrThrow();
  const email = (await loadHuman(ctx.store.db, principalId)).email;
  if (email) await assertNotBackedOff(ctx, email);
  await countingFailures(ctx, email, 'totp', ip, () =>
    // The audit entry joins that workspace's hash chain: its writers' lock is held.
    inTransaction(ctx.store, s.workspace_id, async (trx) => {
      const cur = await trx.selectFrom('sessions').select(['pending']).where('id', '=', sessionId).executeTakeFirstOrThrow();
      if (cur.pending !== 'totp') throw conflict('This session is not waiting for a TOTP code', 'not_pending');
      const h = await loadHuman(trx, principalId);
      if (!h.totp_secret || !h.totp_enabled_at) throw conflict('TOTP is not enrolled for this account', 'totp_not_enrolled');
      await consumeCode(trx, principalId, h.totp_secret, h.totp_last_step, code);
      await trx.updateTable('sessions').set({ pending: null, last_seen_at: nowIso() }).where('id', '=', sessionId).execute();
      await appendAudit(trx, s.workspace_id, { principalId, action: 'auth.totp.verify' });
    }),
  );
}

export type EnrollResult = { enabled: false; otpauth_uri: string; secret: string } | { enabled: true };

/**
 * Without a code: a new secret and its otpauth:// URI (not yet active). With a code:
 * confirms the secret and enables TOTP; a session pending enrolment becomes active.
 *
 * From an active session both steps need a step-up (issue 11): a stolen session must not bind
 * its own second factor to the account. A session pending enrolment (REQUIRE_TOTP, right after
 * the password) is exempt: it has just proved the password.
 */
export async function enrollTotp(ctx: CoreContext, p: Principal, code: string | undefined): Promise<EnrollResult> {
  return inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const session = p.sessionId ? await trx.selectFrom('sessions').select('pending').where('id', '=', p.sessionId).executeTakeFirst() : undefined;
    if (session?.pending !== 'totp_enroll' && !hasStepUp(p)) {
      throw forbidden(
        'Enrolling a second factor from a signed-in session needs a step-up within the last 5 minutes (POST /api/auth/stepup)',
        'step_up_required',
      );
    }
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

/**
 * Step-up: a TOTP code, or the password when TOTP is not enrolled; valid five minutes. A wrong
 * one answers 403 (the session itself is fine) and counts against the account's back-off.
 */
export async function stepUp(
  ctx: CoreContext,
  p: Principal,
  input: { code?: string | undefined; password?: string | undefined },
  ip?: string,
): Promise<{ until: string }> {
  if (p.kind !== 'human' || !p.sessionId) throw unauthorized('Step-up needs a signed-in human', 'session_required');
  const sessionId = p.sessionId;
  const h = await loadHuman(ctx.store.db, p.id);
  const totp = Boolean(h.totp_enabled_at && h.totp_secret);
  if (totp && !input.code) throw badRequest('TOTP is enrolled: step up with a code', 'code_required');
  if (!totp && !input.password) throw badRequest('Step up with your password (TOTP is not enrolled)', 'password_required');
  if (h.email) await assertNotBackedOff(ctx, h.email);
  const now = new Date();
  await countingFailures(ctx, h.email, 'step_up', ip, async () => {
    if (!totp && (!h.password_hash || !(await verifyPassword(input.password!, h.password_hash)))) {
      throw forbidden('The password is wrong', 'invalid_credentials');
    }
    try {
      await inTransaction(ctx.store, p.workspaceId, async (trx) => {
        if (totp) await consumeCode(trx, p.id, h.totp_secret!, h.totp_last_step, input.code!);
        await trx.updateTable('sessions').set({ stepup_at: now.toISOString() }).where('id', '=', sessionId).execute();
        await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'auth.stepup' });
      });
    } catch (e) {
      if (isServiceError(e) && e.code === 'invalid_code') throw forbidden(e.message, 'invalid_code');
      throw e;
    }
  });
  return { until: new Date(now.getTime() + STEP_UP_MS).toISOString() };
}

/** Whether the account has TOTP on (for /me and login). */
export async function totpEnabled(db: Executor, principalId: string): Promise<boolean> {
  const h = await loadHuman(db, principalId);
  return Boolean(h.totp_enabled_at);
}
