import { sql } from 'kysely';
import type { Executor } from './db.js';

/**
 * A background job's rounds on a timer (PostgreSQL's statistics keeper, the word-statistics
 * fold): one round at a time (a call during a round joins it), errors reported unless stopping,
 * and a stop that can cut the round in progress short before waiting for it.
 */
export class Rounds<T> {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<T> | undefined;
  private stopping = false;

  constructor(
    private readonly round: () => Promise<T>,
    private readonly everyMs: number,
    private readonly onError: (err: unknown) => void,
  ) {}

  /** Starts the timer (again a no-op once started). */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      this.now().catch((err: unknown) => {
        if (!this.stopping) this.onError(err);
      });
    }, this.everyMs);
    this.timer.unref();
  }

  /** A round now, or the one in progress. */
  now(): Promise<T> {
    this.running ??= this.round().finally(() => (this.running = undefined));
    return this.running;
  }

  /** Whether stop was called: a long round checks it between its steps. */
  get stopped(): boolean {
    return this.stopping;
  }

  /** Stops the timer; with a round in progress, `cut` first (a cancel), then waits for the round. */
  async stop(cut?: () => Promise<void>): Promise<void> {
    this.stopping = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (this.running && cut) await cut().catch(() => undefined);
    await this.running?.catch(() => undefined);
  }
}

/**
 * Cancels the statement of backend `pid` if it still holds the advisory lock `key` (taken as
 * `pg_*advisory*_lock(key)`): by the time a pooled connection is free to ask, the round may have
 * ended and its process id may serve another request, which a bare cancel would hit.
 */
export async function cancelLockHolder(db: Executor, key: number, pid: number): Promise<void> {
  await sql`select pg_cancel_backend(pid) from pg_locks
    where locktype = 'advisory' and classid = 0 and objid = ${key} and objsubid = 1 and granted and pid = ${pid}`.execute(db);
}
