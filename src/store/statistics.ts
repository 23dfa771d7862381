import { sql } from 'kysely';
import type { Store } from './db.js';

/**
 * Keeps PostgreSQL's planner statistics current (issue 18). The planner picks index or
 * sequential scans, and join orders, from each table's statistics; a table loaded since its
 * last ANALYZE is planned as if it were still small, and a keyword search right after a bulk
 * load took seconds. Autovacuum would refresh them, but only after its own delay, and it may be
 * turned off on the operator's server (it is on the test machines). So the service refreshes
 * them itself: every CHECK_MS one node (a transaction-scoped advisory lock, so nodes do not
 * repeat each other's work) analyzes each table changed by more than a tenth since its last
 * ANALYZE. SQLite plans from its own indexes and needs nothing of this.
 */

/** How often a node looks at the tables' change counts. */
export const CHECK_MS = 15_000;
/** A table is analyzed again once this many rows changed since the last time... */
const MIN_CHANGES = 200;
/** ...and at least one in this many of its rows. */
const CHANGED_ONE_IN = 10;
/** The advisory lock one node holds while it analyzes (migrations use 7714201). */
const LOCK_KEY = 7714202;

export class StatisticsKeeper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<string[]> | undefined;

  constructor(
    private readonly store: Store,
    private readonly onError: (err: unknown) => void = () => {},
  ) {}

  start(): void {
    if (this.store.dialect !== 'postgres' || this.timer) return;
    this.timer = setInterval(() => {
      this.tick().catch(this.onError);
    }, CHECK_MS);
    this.timer.unref();
  }

  /** Stops the timer and waits for a round in progress. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running?.catch(() => undefined);
  }

  /** One round: the tables analyzed (none when another node holds the lock, or nothing changed much). */
  tick(): Promise<string[]> {
    if (this.store.dialect !== 'postgres') return Promise.resolve([]);
    this.running ??= this.round().finally(() => (this.running = undefined));
    return this.running;
  }

  private async round(): Promise<string[]> {
    return this.store.db.transaction().execute(async (trx) => {
      const lock = await sql<{ ok: boolean }>`select pg_try_advisory_xact_lock(${LOCK_KEY}) as ok`.execute(trx);
      if (!lock.rows[0]?.ok) return [];
      const stale = await sql<{ relname: string }>`
        select relname from pg_stat_user_tables
        where schemaname = current_schema()
          and n_mod_since_analyze >= ${MIN_CHANGES}
          and n_mod_since_analyze * ${CHANGED_ONE_IN} >= n_live_tup
        order by relname`.execute(trx);
      const names = stale.rows.map((r) => r.relname);
      for (const name of names) await sql`analyze ${sql.id(name)}`.execute(trx);
      return names;
    });
  }
}
