import { sql, type Transaction } from 'kysely';
import type { Store } from './db.js';
import type { DB } from './schema.js';

/**
 * Runs one mutation in one transaction. With a workspace id, writers of that workspace
 * are serialised (PostgreSQL row lock; SQLite has a single writer already), so the
 * commit chain and the audit hash chain never fork.
 */
export async function inTransaction<T>(
  store: Store,
  workspaceId: string | null,
  fn: (trx: Transaction<DB>) => Promise<T>,
): Promise<T> {
  return store.db.transaction().execute(async (trx) => {
    if (workspaceId && store.dialect === 'postgres') {
      await sql`select id from workspaces where id = ${workspaceId} for update`.execute(trx);
    }
    return fn(trx);
  });
}
