import { sql } from 'kysely';
import type { Executor, Store } from '../store/db.js';
import { cancelLockHolder, Rounds } from '../store/rounds.js';
import { inTransaction } from '../store/tx.js';

/**
 * PostgreSQL: folds the word-statistics changes that writes append (`term_stats_pending`,
 * migration 029) into `term_stats`, netted per workspace, word and level, in one statement: the
 * rows it deletes are the ones its snapshot saw, so a write committing meanwhile is folded by the
 * next round, and a reader (through `term_counts`) sees a fold whole or not at all. One node at a
 * time (a transaction-scoped advisory lock); rows in key order, as writers of the previous version
 * (still upserting `term_stats` themselves during a rolling upgrade) take them.
 */

/** How often a node folds: the pending rows a count reads stay few. */
export const FOLD_MS = 1_000;
/** How long a fold waits for a row another transaction holds before it gives the round up. */
const FOLD_LOCK_TIMEOUT_MS = 1_000;
/** The advisory lock of a fold (migrations 7714201, sign-ups 7714202, vacuum 7714203, analyze 7714204). */
const LOCK_KEY = 7714205;

export class TermStatsFolder {
  private readonly rounds: Rounds<number>;
  /** The backend of the fold in progress (stop cancels it). */
  private pid: number | undefined;

  constructor(
    private readonly store: Store,
    onError: (err: unknown) => void = () => {},
  ) {
    this.rounds = new Rounds(() => this.round(), FOLD_MS, onError);
  }

  start(): void {
    if (this.store.dialect === 'postgres') this.rounds.start();
  }

  /**
   * Stops the timer and ends a fold in progress: a fold stopped half-way loses nothing (its
   * transaction rolls back, the rows stay pending for the next), so it is cancelled rather than
   * waited for.
   */
  async stop(): Promise<void> {
    await this.rounds.stop(async () => {
      if (this.pid !== undefined) await cancelLockHolder(this.store.db, LOCK_KEY, this.pid);
    });
  }

  /** One round: the number of pending rows folded (0 when another node is folding, or none waited). */
  fold(): Promise<number> {
    if (this.store.dialect !== 'postgres') return Promise.resolve(0);
    return this.rounds.now();
  }

  private round(): Promise<number> {
    return inTransaction(this.store, null, async (trx) => {
      // A fold waiting on a row (a writer of the previous version upserting term_stats) gives up
      // soon: the next round folds what it left.
      const lock = await sql<{ ok: boolean; pid: number }>`select pg_try_advisory_xact_lock(${LOCK_KEY}) as ok, pg_backend_pid() as pid,
          set_config('lock_timeout', ${`${FOLD_LOCK_TIMEOUT_MS}ms`}, true) as lock_timeout`.execute(trx);
      if (!lock.rows[0]?.ok) return 0;
      this.pid = lock.rows[0].pid;
      try {
        return await foldTermStats(trx);
      } finally {
        this.pid = undefined;
      }
    });
  }
}

/** The fold itself, in the caller's transaction (also: tests putting a database back to an older schema). */
export async function foldTermStats(db: Executor): Promise<number> {
  const r = await sql<{ folded: number | string }>`with d as (delete from term_stats_pending returning workspace_id, lexeme, level, docs),
      n as (select workspace_id, lexeme, level, sum(docs)::int8 as docs from d group by 1, 2, 3 having sum(docs) <> 0),
      f as (insert into term_stats (workspace_id, lexeme, level, docs)
        select workspace_id, lexeme, level, docs from n order by workspace_id, lexeme, level
        on conflict (workspace_id, lexeme, level) do update set docs = term_stats.docs + excluded.docs)
    select count(*) as folded from d`.execute(db);
  return Number(r.rows[0]?.folded ?? 0);
}
