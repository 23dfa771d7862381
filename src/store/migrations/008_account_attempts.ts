import type { Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import { required, requiredInteger } from './columns.js';

/**
 * Issue 11: failed password, TOTP and step-up attempts counted per account (by normalised
 * email, known or not), beside the per-IP limits, so guessing spread over many addresses meets
 * a growing back-off. One row per account with recent failures; a success deletes it.
 */
export async function up(db: Kysely<unknown>, _dialect: Dialect): Promise<void> {
  await db.schema
    .createTable('auth_failures')
    .addColumn('account', 'text', (c) => c.primaryKey())
    .$call(requiredInteger('failures'))
    .$call(required('bigint', 'last_failure_ms', 'blocked_until_ms'))
    .execute();
}
