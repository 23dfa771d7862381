import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteAdapter, SqliteDialect, sql, type Transaction } from 'kysely';
import pg from 'pg';
import type { DB } from './schema.js';
import { migrate } from './migrate.js';
import { Checkpointer } from './checkpointer.js';
import { WAL_SYNC_FAILED, WalSync } from './wal-sync.js';

export type Dialect = 'sqlite' | 'postgres';

export interface Store {
  db: Kysely<DB>;
  dialect: Dialect;
  /** SQLite: the database file, for a worker thread that reads on a connection of its own (null on PostgreSQL). */
  sqliteFile: string | null;
  /**
   * Resolves once every write committed so far is on disk. SQLite: group commit (wal-sync.ts);
   * PostgreSQL: already so when its COMMIT returned.
   */
  durable(): Promise<void>;
  /** True when a committed write may not be on disk yet (only SQLite between a commit and its sync). */
  syncPending(): boolean;
  /** Throws the sync failure that stopped this node acknowledging writes, if one did. */
  assertWritable(): void;
  /** That failure, or null. */
  syncFailure(): Error | null;
  /**
   * PostgreSQL: a connection of its own, outside the pool and with no query timeout, for
   * maintenance that may run for minutes (VACUUM); the caller ends it. SQLite: null.
   */
  maintenanceClient(): Promise<pg.Client | null>;
  /** Group-commit figures (SQLite): syncs made, commits they made durable, background checkpoints run. */
  syncStats(): { syncs: number; commits: number; checkpoints: number } | null;
  /**
   * How many commits this process has made on the store (SQLite; counted as they return). With
   * othersCommits, what read-cache.ts keys what it keeps by.
   */
  ownCommits(): number;
  /**
   * What other connections have committed, as read-cache.ts keys what it keeps by:
   * - SQLite: `PRAGMA data_version`, a count that grows whenever another connection (another
   *   process on the same file) commits (a few microseconds, no I/O);
   * - PostgreSQL: the text of `pg_current_snapshot()` (xmin:xmax:transactions in progress), one
   *   small round trip. Two equal snapshots see exactly the same committed transactions: any
   *   transaction that committed in between was in progress or not yet begun in the first and is
   *   neither in the second. (A WAL position was considered and rejected: a reader between a
   *   commit's WAL record and its visibility would tag what it read without the commit with a
   *   position that no later read tells apart.)
   * null when the store cannot tell (closed), and then nothing may be kept.
   */
  othersCommits(): StoreVersion | null | Promise<StoreVersion | null>;
  close(): Promise<void>;
}

/** A state of the store as othersCommits names it: a count that grows (SQLite) or a snapshot's text (PostgreSQL; read-cache.ts orders them). */
export type StoreVersion = number | string;

/** Either the root connection or an open transaction: core functions accept both. */
export type Executor = Kysely<DB> | Transaction<DB>;

/** Whether an executor (a database or a transaction on it) is the embedded SQLite. */
export function isSqlite(db: Executor): boolean {
  return db.getExecutor().adapter instanceof SqliteAdapter;
}

export interface StoreOptions {
  dataDir: string;
  databaseUrl?: string | undefined;
  /** SQLite page cache in MiB (SQLite's own default is 2). */
  cacheMb?: number | undefined;
  /** Connections of the PostgreSQL pool (default 10). */
  poolMax?: number | undefined;
  /** Called if SQLite's background checkpoint fails (it then runs in commits again: checkpointer.ts). */
  onCheckpointError?: ((err: Error) => void) | undefined;
  /** Called once if a sync of SQLite's WAL fails (the store then refuses writes: wal-sync.ts). */
  onSyncFailure?: ((err: Error) => void) | undefined;
}

// PostgreSQL returns BIGINT/NUMERIC as strings by default; COUNT(*) is bigint.
pg.types.setTypeParser(20, (v: string) => Number.parseInt(v, 10));

/** How long connecting to PostgreSQL (or waiting for a pooled connection) may take. */
const CONNECT_TIMEOUT_MS = 5_000;
/**
 * How long one query may wait for its answer. Generous (imports' batches, ANALYZE, lock waits
 * of serialised writers stay well under it); it only bounds a request whose database went silent.
 */
const QUERY_TIMEOUT_MS = 60_000;

/** Opens the store (SQLite file under dataDir, or PostgreSQL when databaseUrl is set) and migrates it. */
export async function openStore(opts: StoreOptions): Promise<Store> {
  if (opts.databaseUrl) {
    const pool = postgresPool(opts.databaseUrl, opts.poolMax);
    const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
    await migrate(db, 'postgres');
    const snapshot = { name: 'cv_snapshot', text: 'select pg_current_snapshot()::text as s' };
    return {
      db,
      dialect: 'postgres',
      sqliteFile: null,
      durable: () => Promise.resolve(),
      syncPending: () => false,
      assertWritable: () => {},
      syncFailure: () => null,
      syncStats: () => null,
      maintenanceClient: async () => {
        const client = new pg.Client({ connectionString: opts.databaseUrl, connectionTimeoutMillis: CONNECT_TIMEOUT_MS, keepAlive: true });
        // A dropped connection fails its query; it must not crash the process.
        client.on('error', () => {});
        await client.connect();
        return client;
      },
      ownCommits: () => 0,
      othersCommits: async () => (await pool.query<{ s: string }>(snapshot)).rows[0]?.s ?? null,
      close: () => db.destroy(),
    };
  }
  fs.mkdirSync(opts.dataDir, { recursive: true });
  const filePath = path.join(opts.dataDir, 'context-vault.sqlite');
  const file = new Database(filePath);
  // WAL for concurrent readers. NORMAL: a commit is written to the WAL but not synced; writes
  // are acknowledged only after WalSync's fdatasync covers them (group commit), so an
  // acknowledged commit survives power loss as it did with FULL, at one sync for many commits.
  // A file system without the shared memory WAL needs keeps the rollback journal: then FULL,
  // each commit synced in place, and no group commit.
  const wal = String(file.pragma('journal_mode = WAL', { simple: true })).toLowerCase() === 'wal';
  file.pragma(`synchronous = ${wal ? 'NORMAL' : 'FULL'}`);
  file.pragma('foreign_keys = ON');
  file.pragma('busy_timeout = 5000');
  // SQLite caches 2 MiB of pages by default; retrieval at 100,000 pages re-reads index pages of
  // far more, and 64 MiB cut keyword p95 from 11–16 ms to under 8 (docs/decisions.md).
  file.pragma(`cache_size = ${-Math.round((opts.cacheMb ?? 32) * 1024)}`);
  const syncer = wal ? new WalSync(`${filePath}-wal`, opts.onSyncFailure) : null;
  const checkpointer = new Checkpointer({
    file: filePath,
    setAutoCheckpoint: (on) => {
      if (file.open) file.pragma(`wal_autocheckpoint = ${on ? 1000 : 0}`);
    },
    onError: opts.onCheckpointError,
    // A checkpoint's sync failed: what it copied may not be on disk, and a retry could succeed
    // without it being so. As for the log's own sync: stop acknowledging.
    onIoError: (err) => syncer?.stop(err),
  });
  // Commits made on this connection: PRAGMA data_version does not count them.
  let commits = 0;
  const dataVersion = file.prepare('PRAGMA data_version').pluck();
  const onCommit = () => {
    commits++;
    if (!syncer) return;
    syncer.noteCommit();
    checkpointer.noteCommit();
  };
  const db = new Kysely<DB>({ dialect: new SqliteDialect({ database: withStatementCache(file, onCommit, () => syncer?.failure ?? null) }) });
  await migrate(db, 'sqlite');
  // The migrations' own writes are made durable before anything is served.
  await syncer?.durable();
  return {
    db,
    dialect: 'sqlite',
    sqliteFile: filePath,
    durable: () => syncer?.durable() ?? Promise.resolve(),
    syncPending: () => syncer?.pending ?? false,
    assertWritable: () => {
      if (syncer?.failure) throw syncer.failure;
    },
    syncFailure: () => syncer?.failure ?? null,
    syncStats: () => ({ syncs: syncer?.syncs ?? 0, commits: syncer?.commits ?? 0, checkpoints: checkpointer.runs }),
    maintenanceClient: () => Promise.resolve(null),
    ownCommits: () => commits,
    othersCommits: () => (file.open ? (dataVersion.get() as number) : null),
    close: async () => {
      await syncer?.close();
      await checkpointer.close();
      await db.destroy();
    },
  };
}

function postgresPool(connectionString: string, max: number | undefined): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max: max ?? 10,
    // A database that is down or unreachable fails a request within bounds (503, see
    // isDatabaseUnavailable) instead of holding it: connecting, or waiting for a free client,
    // gives up after this long; a query whose answer never comes, after QUERY_TIMEOUT_MS.
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    query_timeout: QUERY_TIMEOUT_MS,
    // A peer that vanished without closing (a network cut) is noticed by TCP, not only by a query.
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
  });
  // An idle client's error (server restart) must not crash the process.
  pool.on('error', () => {});
  // Nor a checked-out client's: pg emits 'error' on a client whose connection drops while a
  // request holds it between queries, and pg-pool listens only while the client is idle. The
  // query in flight (or the next one) fails and the pool discards the broken client on release.
  pool.on('connect', (client) => {
    client.on('error', () => {});
    preparedStatements(client);
  });
  return pool;
}

/**
 * Kysely prepares every query anew; preparing was an eighth of a page read's CPU. Statements
 * are reusable and better-sqlite3 runs one at a time, so a bounded cache keyed by SQL is safe.
 * Each statement also calls `onCommit` when it committed a write: a COMMIT (the connection leaves its
 * transaction), or a write statement run outside any transaction.
 */
function withStatementCache(file: Database.Database, onCommit: () => void, refused: () => Error | null, max = 500): Database.Database {
  const cache = new Map<string, Database.Statement>();
  const prepare = file.prepare.bind(file);
  const tracked = (stmt: Database.Statement): Database.Statement => {
    const writes = !stmt.readonly;
    // Runs one of the statement's methods: refused after a failed sync if it writes (nothing
    // more is written, whichever way it comes: wal-sync.ts), and noting a commit it made.
    const tracking =
      <A extends unknown[], R>(method: (...args: A) => R) =>
      (...args: A): R => {
        const failure = writes ? refused() : null;
        if (failure) throw failure;
        const wasInTx = file.inTransaction;
        const r = method(...args);
        if (!file.inTransaction && (wasInTx || writes)) onCommit();
        return r;
      };
    const run = tracking((...args: unknown[]) => stmt.run(...args));
    const all = tracking((...args: unknown[]) => stmt.all(...args));
    return new Proxy(stmt, {
      get(target, prop) {
        if (prop === 'run') return run;
        if (prop === 'all') return all;
        const v = Reflect.get(target, prop, target) as unknown;
        // Native methods must be called on the statement itself, not on the proxy.
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
  };
  return new Proxy(file, {
    get(target, prop, receiver) {
      if (prop !== 'prepare') return Reflect.get(target, prop, receiver) as unknown;
      return (source: string) => {
        let stmt = cache.get(source);
        if (!stmt) {
          stmt = tracked(prepare(source));
          if (cache.size >= max) cache.delete(cache.keys().next().value as string);
          cache.set(source, stmt);
        }
        return stmt;
      };
    },
  });
}

/** Statements one connection prepares at most; past that, new ones run unnamed on it. */
const MAX_PREPARED_PER_CONNECTION = 500;
/**
 * Each connection's settings. JIT off (below). `random_page_cost` 1.1 unless the operator set
 * one: PostgreSQL's default (4) prices an index probe as a disk seek, while the service's working
 * set is in memory (docs/deploy.md), and so a keyword query's 1,000 newest matches were joined
 * by scanning a whole table: 25 ms where nested index probes take 14 (3,000 pages, issue 18).
 * No parallel workers for one request's statement unless the operator set
 * `max_parallel_workers_per_gather`: starting them cost more than they saved on every keyword
 * plan that chose them (a common word's newest matches at 100,000 pages: 66 ms with two workers,
 * 23 ms without), and a service's requests already keep the cores busy side by side.
 */
const SESSION_SETTINGS = `set jit = off;
  do $$ begin
    if (select source from pg_settings where name = 'random_page_cost') = 'default' then
      perform set_config('random_page_cost', '1.1', false);
    end if;
    if (select source from pg_settings where name = 'max_parallel_workers_per_gather') = 'default' then
      perform set_config('max_parallel_workers_per_gather', '0', false);
    end if;
  end $$`;
/** Statements planned for each run's values: full-text matching and ranking, LIKE patterns. */
const VALUE_DEPENDENT_PLAN = /@@|\bts_rank|\bto_tsquery|\b(?:i?like)\b/i;
/** Statement names by text (a hash each), kept for the texts seen lately. */
const statementNames = new Map<string, string>();

function statementName(text: string): string {
  let name = statementNames.get(text);
  if (name === undefined) {
    if (statementNames.size >= 5_000) statementNames.clear();
    name = `cv_${createHash('sha1').update(text).digest('hex').slice(0, 24)}`;
    statementNames.set(text, name);
  }
  return name;
}

/**
 * Kysely sends every statement unnamed, so PostgreSQL parses it again on each run: a third to a
 * half of a simple statement's time here (issue 18). Statements are named by their text, so a
 * connection parses each once and afterwards only binds and runs it, and PostgreSQL's default
 * plan choice (`plan_cache_mode = auto`) may reuse a generic plan: planning the agent-key lookup
 * anew each time was more than half its cost (pgbench, one client: 0.39 ms a run with a plan per
 * run, 0.16 ms with the generic plan; a page by id 0.20 → 0.135 ms). Statements whose best plan
 * depends on their values stay unnamed, so each run is planned for its own values: full-text
 * matches and ranking (a generic plan cannot see a keyword query's words) and LIKE patterns (a
 * generic plan cannot use an index for a prefix it does not know). JIT compilation is off: it
 * pays off for long analytical queries, and a keyword query's estimate could cross its
 * threshold and spend tens of milliseconds compiling (fts p95 at 10,000 pages: 101 ms with it,
 * 82 ms without, bench/search-scale.ts). A connection prepares at most
 * MAX_PREPARED_PER_CONNECTION statements (texts vary with the length of IN lists); the pool
 * closes idle connections, so each new one prepares what is hot now.
 */
function preparedStatements(client: pg.PoolClient): void {
  const query = client.query.bind(client) as (...args: unknown[]) => unknown;
  // The settings first: a query sent while they run was queued by pg behind them, which pg 8
  // warns is deprecated (and pg 9 removes). Queries wait for them instead (failed settings
  // leave the server's defaults, as before).
  let settling: Promise<void> | null = (query(SESSION_SETTINGS) as Promise<unknown>).then(
    () => void (settling = null),
    () => void (settling = null),
  );
  const prepared = new Set<string>();
  const named = (config: unknown, values?: unknown, ...rest: unknown[]): unknown => {
    if (settling) {
      const after = settling.then(() => named(config, values, ...rest));
      // pg's callback form (pg-pool's own pool.query) answers through the callback, not a promise.
      return [values, ...rest].some((a) => typeof a === 'function') ? void after.catch(() => undefined) : after;
    }
    if (typeof config === 'string' && Array.isArray(values) && rest.length === 0 && !VALUE_DEPENDENT_PLAN.test(config)) {
      const name = statementName(config);
      if (prepared.has(name) || prepared.size < MAX_PREPARED_PER_CONNECTION) {
        prepared.add(name);
        return query({ name, text: config, values });
      }
    }
    return query(config, values, ...rest);
  };
  client.query = named as typeof client.query;
}

/** True when the database answers a trivial query. */
export async function pingStore(store: Store): Promise<boolean> {
  try {
    // A node that can no longer make writes durable is not ready either (wal-sync.ts).
    store.assertWritable();
    await sql`select 1`.execute(store.db);
    return true;
  } catch {
    return false;
  }
}

/** SQLSTATE classes and codes that mean the database cannot serve now, not that the request is wrong. */
const UNAVAILABLE_SQLSTATE = new Set([
  '57P01', // admin_shutdown: the server is stopping (a fast shutdown ends every session)
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now: starting up or shutting down
  '53300', // too_many_connections
]);
/** Socket errors of a connection to the database. */
const UNAVAILABLE_ERRNO = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);
/** pg, pg-pool and Kysely report a lost or refused connection by message only. */
const UNAVAILABLE_MESSAGE =
  /^(Connection terminated|Client has encountered a connection error|Client was closed and is not queryable|timeout exceeded when trying to connect|Query read timeout|Cannot use a pool after calling end|driver has already been destroyed)/;

/**
 * True when an error means the database is out of reach for now (stopped, restarting, a network
 * cut, every connection busy past the timeout; SQLite's write lock held past busy_timeout): the
 * request may succeed when tried again, so faces answer 503 `unavailable`, never 500. A write that
 * fails this way was not acknowledged; if its commit reached the server before the connection
 * dropped it is in, and trying again finds it (or conflicts).
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const { code, message } = err as { code?: unknown; message?: unknown };
  if (typeof code === 'string') {
    if (UNAVAILABLE_SQLSTATE.has(code) || UNAVAILABLE_ERRNO.has(code) || code === WAL_SYNC_FAILED) return true;
    // Class 08, connection exception; SQLite's write lock held past busy_timeout.
    if (/^08[0-9A-Z]{3}$/.test(code) || /^SQLITE_BUSY/.test(code)) return true;
  }
  if (typeof message === 'string' && UNAVAILABLE_MESSAGE.test(message)) return true;
  // Node's connect() to several addresses (localhost: ::1 and 127.0.0.1) fails with all of them.
  const inner = (err as { errors?: unknown }).errors;
  return Array.isArray(inner) && inner.length > 0 && inner.every(isDatabaseUnavailable);
}
