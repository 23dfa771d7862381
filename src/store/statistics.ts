import { sql, type RawBuilder } from 'kysely';
import type { Executor, Store } from './db.js';
import { cancelLockHolder, Rounds } from './rounds.js';

/**
 * Keeps PostgreSQL's planner statistics current (issue 18). The planner picks index or
 * sequential scans, and join orders, from each table's statistics; a table loaded since its
 * last ANALYZE is planned as if it were still small, and a keyword search right after a bulk
 * load took seconds. Autovacuum would refresh them, but only after its own delay, and it may be
 * turned off on the operator's server (as on this project's CI machines). So the service refreshes
 * them itself: every CHECK_MS one node (a transaction-scoped advisory lock, so nodes do not
 * repeat each other's work) analyzes each table changed by more than a tenth since its last
 * ANALYZE, and vacuums each table whose dead row versions, or rows inserted since its last
 * vacuum, reach a fifth of its live ones.
 * SQLite plans from its own indexes and needs nothing of this.
 */

/** How often a node looks at the tables' change counts. */
export const CHECK_MS = 15_000;
/** A table is analyzed again once this many rows changed since the last time... */
const MIN_CHANGES = 200;
/** ...and at least one in this many of its rows. */
const CHANGED_ONE_IN = 10;
/**
 * The advisory lock one node holds while it analyzes (migrations use 7714201, sign-ups without an
 * invite 7714202: sharing that key made a sign-up wait for an ANALYZE, and an ANALYZE round skip).
 */
const LOCK_KEY = 7714204;
/** ...and while it vacuums (a session lock: VACUUM runs outside transactions). */
const VACUUM_LOCK_KEY = 7714203;
/** A table is vacuumed once it holds this many dead row versions... */
const MIN_DEAD = 1_000;
/** ...and at least one for every this-many live rows. */
const DEAD_ONE_IN = 5;
/**
 * A table is vacuumed too once this many rows were inserted since its last vacuum, and one for
 * every INSERTED_ONE_IN live rows (autovacuum's rule for tables that only grow, PostgreSQL 13+):
 * VACUUM sets the pages' hint bits and visibility map, without which every search after a bulk
 * load checked each row it read against the transaction log and set its hint bits (PostgreSQL
 * keyword search at 100,000 freshly loaded pages: p95 82 ms, 21 ms once vacuumed).
 */
const MIN_INSERTED = 1_000;
const INSERTED_ONE_IN = 5;

export class StatisticsKeeper {
  private readonly rounds: Rounds<string[]>;
  /** The backend running this node's VACUUM, cancelled on stop (a large table takes minutes). */
  private vacuumPid: number | undefined;

  constructor(
    private readonly store: Store,
    onError: (err: unknown) => void = () => {},
  ) {
    this.rounds = new Rounds(() => this.round(), CHECK_MS, onError);
  }

  start(): void {
    if (this.store.dialect === 'postgres') this.rounds.start();
  }

  /**
   * Stops the timer and waits for a round in progress. A VACUUM stopped half-way loses nothing;
   * waiting for it would hold the shutdown, so it is cancelled.
   */
  async stop(): Promise<void> {
    await this.rounds.stop(async () => {
      if (this.vacuumPid !== undefined) await cancelLockHolder(this.store.db, VACUUM_LOCK_KEY, this.vacuumPid);
    });
  }

  /** One round: the tables analyzed or vacuumed (none when another node holds the lock, or nothing changed much). */
  tick(): Promise<string[]> {
    if (this.store.dialect !== 'postgres') return Promise.resolve([]);
    return this.rounds.now();
  }

  private async round(): Promise<string[]> {
    const analyzed = await this.analyzeRound();
    const vacuumed = await this.vacuumRound();
    return [...new Set([...analyzed, ...vacuumed])];
  }

  /**
   * Tables where more than a fifth of the rows are dead versions (a bulk rewrite, a migration's
   * update) or were inserted since the last vacuum (a bulk load, MIN_INSERTED) are vacuumed:
   * dead versions and the full-text index's pending entries made keyword search about twice as
   * slow until autovacuum came (or forever, with it off).
   * VACUUM runs outside transactions, for minutes on a large table: on a connection of its own
   * (Store.maintenanceClient), never the pool's, whose query timeout gave up on a long vacuum and
   * handed the still-busy connection, advisory lock and all, to the next request (an attack,
   * test/http/attack-session-s.test.ts). That connection holds a session-level advisory lock, so
   * one node vacuums at a time, and is closed after the round.
   */
  private async vacuumRound(): Promise<string[]> {
    const due = async (find: Finder) =>
      [...new Set([...(await find('n_dead_tup', MIN_DEAD, DEAD_ONE_IN)), ...(await find('n_ins_since_vacuum', MIN_INSERTED, INSERTED_ONE_IN))])].sort();
    // Looked at through the pool first: most rounds find nothing and open no connection.
    if ((await due((...a) => tablesPast(this.store.db, ...a))).length === 0 || this.rounds.stopped) return [];
    const client = await this.store.maintenanceClient();
    if (!client) return [];
    try {
      const lock = await client.query<{ ok: boolean }>('select pg_try_advisory_lock($1) as ok', [VACUUM_LOCK_KEY]);
      if (!lock.rows[0]?.ok) return [];
      const names = await due(async (...a) => {
        const q = pastQuery(...a).compile(this.store.db);
        return (await client.query<{ relname: string }>(q.sql, [...q.parameters])).rows.map((r) => r.relname);
      });
      this.vacuumPid = (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid;
      const done: string[] = [];
      for (const name of names) {
        // A cancel that lands between two statements is lost: look before each.
        if (this.rounds.stopped) break;
        await client.query(`vacuum (analyze) ${client.escapeIdentifier(name)}`);
        done.push(name);
      }
      return done;
    } finally {
      this.vacuumPid = undefined;
      // Closing the session releases its advisory lock.
      await client.end().catch(() => undefined);
    }
  }

  private async analyzeRound(): Promise<string[]> {
    return this.store.db.transaction().execute(async (trx) => {
      const lock = await sql<{ ok: boolean }>`select pg_try_advisory_xact_lock(${LOCK_KEY}) as ok`.execute(trx);
      if (!lock.rows[0]?.ok) return [];
      const names = await tablesPast(trx, 'n_mod_since_analyze', MIN_CHANGES, CHANGED_ONE_IN);
      for (const name of names) await sql`analyze ${sql.id(name)}`.execute(trx);
      return names;
    });
  }
}

type Counted = 'n_dead_tup' | 'n_mod_since_analyze' | 'n_ins_since_vacuum';
/** The tables past a count, however the statement is run. */
type Finder = (column: Counted, min: number, oneIn: number) => Promise<string[]>;

/** The schema's tables whose `column` (a row count of pg_stat_user_tables) is at least `min` and one in `oneIn` of their live rows. */
function pastQuery(column: Counted, min: number, oneIn: number): RawBuilder<{ relname: string }> {
  const c = sql.ref(column);
  return sql<{ relname: string }>`
    select relname from pg_stat_user_tables
    where schemaname = current_schema() and ${c} >= ${min} and ${c} * ${oneIn} >= n_live_tup
    order by relname`;
}

async function tablesPast(db: Executor, column: Counted, min: number, oneIn: number): Promise<string[]> {
  return (await pastQuery(column, min, oneIn).execute(db)).rows.map((x) => x.relname);
}
