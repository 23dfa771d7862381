import { sql } from 'kysely';
import type { CoreContext } from './context.js';
import { ServiceError } from './errors.js';

/**
 * Guessing spread over addresses (issue 11): failed password, TOTP and step-up attempts are
 * counted per account as well as per IP. The first FREE_FAILURES failures cost nothing; each
 * one after them blocks the account's sign-in steps for twice as long as the last (1 s, 2 s,
 * 4 s … at most MAX_BLOCK_MS). While blocked, an attempt is refused before its secret is
 * checked — a right password too, or the back-off would only slow the wrong ones. A success
 * clears the count; failures older than WINDOW_MS are forgotten. Accounts are keyed by
 * normalised email whether or not one exists, so the back-off tells nothing about existence.
 * Off with RATE_LIMITS=off (benchmarks), like every other limit.
 */

export const FREE_FAILURES = 5;
export const MAX_BLOCK_MS = 15 * 60_000;
export const WINDOW_MS = 60 * 60_000;

export type AttemptKind = 'password' | 'totp' | 'step_up';

const key = (email: string) => `email:${email.trim().toLowerCase()}`;

function blockFor(failures: number): number {
  if (failures < FREE_FAILURES) return 0;
  return Math.min(MAX_BLOCK_MS, 1000 * 2 ** Math.min(failures - FREE_FAILURES, 30));
}

/** Throws 429 `rate_limited` (with `retryAfterSeconds` in details) while the account is backed off. */
export async function assertNotBackedOff(ctx: CoreContext, email: string): Promise<void> {
  if (!ctx.config.rateLimits.enabled) return;
  const row = await ctx.store.db.selectFrom('auth_failures').selectAll().where('account', '=', key(email)).executeTakeFirst();
  if (!row) return;
  const wait = Number(row.blocked_until_ms) - Date.now();
  if (wait > 0) {
    const s = Math.max(1, Math.ceil(wait / 1000));
    throw new ServiceError(429, 'rate_limited', `Too many failed attempts for this account; retry in ${s} s`, { retryAfterSeconds: s });
  }
}

/** Counts one failed attempt for the account and logs it (never the secret tried). */
export async function recordFailure(ctx: CoreContext, email: string, kind: AttemptKind, ip: string | undefined): Promise<void> {
  if (!ctx.config.rateLimits.enabled) return;
  const now = Date.now();
  const account = key(email);
  // One atomic upsert counts the failure, so failures sent at once all count.
  const counted = await ctx.store.db
    .insertInto('auth_failures')
    .values({ account, failures: 1, last_failure_ms: now, blocked_until_ms: now })
    .onConflict((oc) =>
      oc.column('account').doUpdateSet({
        failures: sql<number>`case when ${now} - auth_failures.last_failure_ms > ${WINDOW_MS} then 1 else auth_failures.failures + 1 end`,
        last_failure_ms: now,
      }),
    )
    .returning('failures')
    .executeTakeFirstOrThrow();
  const failures = Number(counted.failures);
  const block = blockFor(failures);
  if (block > 0)
    await ctx.store.db
      .updateTable('auth_failures')
      .set({ blocked_until_ms: now + block })
      .where('account', '=', account)
      .execute();
  ctx.log?.warn({ account, kind, ip, failures, backoff_ms: blockFor(failures) }, `failed ${kind} attempt`);
}

/** A success clears the account's count (a write only when there is one to clear). */
export async function recordSuccess(ctx: CoreContext, email: string): Promise<void> {
  if (!ctx.config.rateLimits.enabled) return;
  const account = key(email);
  const row = await ctx.store.db.selectFrom('auth_failures').select('account').where('account', '=', account).executeTakeFirst();
  if (row) await ctx.store.db.deleteFrom('auth_failures').where('account', '=', account).execute();
}
