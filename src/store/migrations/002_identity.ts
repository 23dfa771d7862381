import type { Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import { lifetime, mintedToken, optionalText, required, requiredInteger, requiredText, textId, workspaceFk } from './columns.js';

/** Identity and access: TOTP, pending sessions, invites, elevations, git tokens, rate-limit buckets. */
export async function up(db: Kysely<unknown>, _dialect: Dialect): Promise<void> {
  const table = (name: string) => db.schema.createTable(name);
  await db.schema.alterTable('principals').addColumn('totp_secret', 'text').execute();
  await db.schema.alterTable('principals').addColumn('totp_enabled_at', 'text').execute();
  // The last accepted TOTP time step: a code is never accepted twice.
  await db.schema.alterTable('principals').addColumn('totp_last_step', 'integer').execute();

  // A session is pending (password given, second factor not yet) until TOTP verify succeeds.
  await db.schema.alterTable('sessions').addColumn('pending', 'text').execute();

  await table('invites')
    .$call(textId)
    .$call(workspaceFk)
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .$call(requiredText('role'))
    .$call(optionalText('email'))
    .$call(requiredText('created_by'))
    .$call(lifetime)
    .$call(optionalText('accepted_at', 'accepted_by'))
    .execute();
  await db.schema.createIndex('invites_workspace').on('invites').column('workspace_id').execute();

  await table('elevations')
    .$call(textId)
    .$call(workspaceFk)
    .addColumn('agent_id', 'text', (c) => c.notNull().references('principals.id'))
    .$call(requiredText('granted_by', 'reason'))
    .$call(lifetime)
    .execute();
  await db.schema.createIndex('elevations_agent').on('elevations').column('agent_id').execute();

  await table('git_tokens').$call(mintedToken).$call(requiredInteger('epoch')).$call(lifetime).execute();

  await table('rate_limits')
    .addColumn('bucket', 'text', (c) => c.primaryKey())
    .$call(required('real', 'tokens'))
    .$call(required('bigint', 'updated_ms'))
    .execute();
}
