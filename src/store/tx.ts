import { sql, type Transaction } from 'kysely';
import type { Store } from './db.js';
import type { DB } from './schema.js';

const hooksOf = new WeakMap<object, Array<() => void>>();

/**
 * What a PostgreSQL writer read when it took its workspace's lock, kept current by the writes
 * that move it (ObjectStore.casRef, appendAuditMany) for the rest of the transaction: nobody else
 * can move them while the lock is held, so they need not be read again.
 */
interface LockedState {
  workspaceId: string;
  /** refs/heads/main (null: no commit yet). */
  head: string | null;
  /** The newest audit entry (null: none yet). */
  auditTail: { seq: number; hash: string } | null;
  /** The newest commit's seq (0: no commit yet). */
  commitSeq: number;
  /** Whether a live page held `path` when the lock was granted (InTransactionOptions.freePath), until asked once. */
  pathCheck?: { path: string; taken: boolean } | undefined;
}
const lockedOf = new WeakMap<object, LockedState>();

/** The state read under the lock of `workspaceId` in this transaction, or undefined (not held, or SQLite). */
export function lockedState(db: object, workspaceId: string): Omit<LockedState, 'workspaceId'> | undefined {
  const s = lockedOf.get(db);
  return s && s.workspaceId === workspaceId ? s : undefined;
}

/**
 * Whether a live page held `path` when the lock was granted, if the lock was taken asking
 * (InTransactionOptions.freePath); undefined otherwise. Answered once: a write in the
 * transaction after it could change the answer.
 */
export function takeLockedPathCheck(db: object, workspaceId: string, path: string): boolean | undefined {
  const s = lockedOf.get(db);
  if (!s || s.workspaceId !== workspaceId || s.pathCheck?.path !== path) return undefined;
  const taken = s.pathCheck.taken;
  s.pathCheck = undefined;
  return taken;
}

/** Records a move of main, of the audit tail or of the commit seq made under the lock (no-op when not held). */
export function noteLocked(
  db: object,
  workspaceId: string,
  change: { head: string } | { auditTail: { seq: number; hash: string } } | { commitSeq: number },
): void {
  const s = lockedOf.get(db);
  if (!s || s.workspaceId !== workspaceId) return;
  if ('head' in change) s.head = change.head;
  else if ('auditTail' in change) s.auditTail = change.auditTail;
  else s.commitSeq = change.commitSeq;
}

/**
 * Runs one mutation in one transaction. With a workspace id, writers of that workspace
 * are serialised (PostgreSQL row lock; SQLite has a single writer already), so the
 * commit chain, the audit hash chain and inbox sequences never fork.
 */
export interface InTransactionOptions {
  /**
   * A page path the mutation needs free (a create): on PostgreSQL the lock's round trip asks
   * too, and assertPathFree's first call for it is answered from there (takeLockedPathCheck).
   */
  freePath?: string;
}

export async function inTransaction<T>(
  store: Store,
  workspaceId: string | null,
  fn: (trx: Transaction<DB>) => Promise<T>,
  opts: InTransactionOptions = {},
): Promise<T> {
  const hooks: Array<() => void> = [];
  // A node whose log could not be synced acknowledges no write (wal-sync.ts): fail before writing.
  store.assertWritable();
  const result = await store.db.transaction().execute(async (trx) => {
    hooksOf.set(trx, hooks);
    if (workspaceId && store.dialect === 'postgres') {
      // The lock, and what the writer reads first under it, in one round trip (migrations 018, 028).
      const r = await sql<{
        head: string | null;
        audit_seq: string | number | null;
        audit_hash: string | null;
        path_taken: boolean | null;
        commit_seq: string | number | null;
      }>`select head, audit_seq, audit_hash, path_taken, commit_seq from cv_lock_workspace_v2(${workspaceId}, ${opts.freePath ?? null})`.execute(trx);
      const row = r.rows[0];
      if (row) {
        lockedOf.set(trx, {
          workspaceId,
          head: row.head,
          auditTail: row.audit_seq === null || row.audit_hash === null ? null : { seq: Number(row.audit_seq), hash: row.audit_hash },
          commitSeq: Number(row.commit_seq ?? 0),
          pathCheck: opts.freePath !== undefined && row.path_taken !== null ? { path: opts.freePath, taken: row.path_taken } : undefined,
        });
      }
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
  // Acknowledged only once on disk (SQLite's group commit; at once on PostgreSQL).
  await store.durable();
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
