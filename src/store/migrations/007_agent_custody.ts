import type { Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 11: power that ends when its reason ends.
 * - `principals.suspended_at`: an agent whose creator left the workspace is suspended (its keys
 *   revoked) until an owner adopts it.
 * - `workspaces.locked_at` / `locked_by_session`: a lockdown ends every other session's access to
 *   that workspace only; the same sessions keep working in the members' other workspaces.
 */
export async function up(db: Kysely<unknown>, _dialect: Dialect): Promise<void> {
  await db.schema.alterTable('principals').addColumn('suspended_at', 'text').execute();
  await db.schema.alterTable('workspaces').addColumn('locked_at', 'text').execute();
  await db.schema.alterTable('workspaces').addColumn('locked_by_session', 'text').execute();
}
