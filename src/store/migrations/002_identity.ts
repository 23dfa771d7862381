import type { Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import { lifetime, mintedToken, textId, workspaceFk } from './columns.js';

/** Identity and access: TOTP, pending sessions, invites, elevations, git tokens, rate-limit buckets. */
export async function up(db: Kysely<unknown>, _dialect: Dialect): Promise<void> {
  await db.schema.alterTable('principals').addColumn('totp_secret', 'text').execute();
  await db.schema.alterTable('principals').addColumn('totp_enabled_at', 'text').execute();
  // The last accepted TOTP time step: a code is never accepted twice.
  await db.schema.alterTable('principals').addColumn('totp_last_step', 'integer').execute();

  // A session is pending (password given, second factor not yet) until TOTP verify succeeds.
  await db.schema.alterTable('sessions').addColumn('pending', 'text').execute();

  await db.schema
    .createTable('invites')
    .$call(textId)
    .$call(workspaceFk)
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .addColumn('role', 'text', (c) => c.notNull())
    .addColumn('email', 'text')
    .addColumn('created_by', 'text', (c) => c.notNull())
    .$call(lifetime)
    .addColumn('accepted_at', 'text')
    .addColumn('accepted_by', 'text')
    .execute();
  await db.schema.createIndex('invites_workspace').on('invites').column('workspace_id').execute();

  await db.schema
    .createTable('elevations')
    .$call(textId)
    .$call(workspaceFk)
    .addColumn('agent_id', 'text', (c) => c.notNull().references('principals.id'))
    .addColumn('granted_by', 'text', (c) => c.notNull())
    .addColumn('reason', 'text', (c) => c.notNull())
    .$call(lifetime)
    .execute();
  await db.schema.createIndex('elevations_agent').on('elevations').column('agent_id').execute();

  await db.schema
    .createTable('git_tokens')
    .$call(mintedToken)
    .addColumn('epoch', 'integer', (c) => c.notNull())
    .$call(lifetime)
    .execute();

  await db.schema
    .createTable('rate_limits')
    .addColumn('bucket', 'text', (c) => c.primaryKey())
    .addColumn('tokens', 'real', (c) => c.notNull())
    .addColumn('updated_ms', 'bigint', (c) => c.notNull())
    .execute();
}
