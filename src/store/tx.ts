import { sql, type Transaction } from 'kysely';
import type { Store } from './db.js';
import type { DB } from './schema.js';

const hooksOf = new WeakMap<object, Array<() => void>>();

/**
 * Runs one mutation in one transaction. With a workspace id, writers of that workspace
 * are serialised (PostgreSQL row lock; SQLite has a single writer already), so the
 * commit chain, the audit hash chain and inbox sequences never fork.
 */
export async function inTransaction<T>(store: Store, workspaceId: string | null, fn: (trx: Transaction<DB>) => Promise<T>): Promise<T> {
  const hooks: Array<() => void> = [];
  const result = await store.db.transaction().execute(async (trx) => {
    hooksOf.set(trx, hooks);
    if (workspaceId && store.dialect === 'postgres') {
      await sql`select id from workspaces where id = ${workspaceId} for update`.execute(trx);
    }
    return fn(trx);
  });
  // Only now is the change visible to other connections: wake whoever waits for it.
  for (const h of hooks) {
    try {
      h();
    } catch {
      /* a waker must never fail the request it follows */
    }
  }
  return result;
}

/** Runs `fn` once the transaction commits (never if it rolls back). */
export function afterCommit(trx: Transaction<DB>, fn: () => void): void {
  const hooks = hooksOf.get(trx);
  if (!hooks) throw new Error('afterCommit is only available inside inTransaction');
  hooks.push(fn);
}

/** Like afterCommit, but outside inTransaction (a migration's backfill) it does nothing. */
export function afterCommitIfAny(db: object, fn: () => void): void {
  hooksOf.get(db)?.push(fn);
}
