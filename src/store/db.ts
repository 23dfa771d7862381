import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, sql, type Transaction } from 'kysely';
import pg from 'pg';
import type { DB } from './schema.js';
import { migrate } from './migrate.js';

export type Dialect = 'sqlite' | 'postgres';

export interface Store {
  db: Kysely<DB>;
  dialect: Dialect;
  close(): Promise<void>;
}

/** Either the root connection or an open transaction: core functions accept both. */
export type Executor = Kysely<DB> | Transaction<DB>;

export interface StoreOptions {
  dataDir: string;
  databaseUrl?: string | undefined;
  /** SQLite page cache in MiB (SQLite's own default is 2). */
  cacheMb?: number | undefined;
}

// PostgreSQL returns BIGINT/NUMERIC as strings by default; COUNT(*) is bigint.
pg.types.setTypeParser(20, (v: string) => Number.parseInt(v, 10));

/** Opens the store (SQLite file under dataDir, or PostgreSQL when databaseUrl is set) and migrates it. */
export async function openStore(opts: StoreOptions): Promise<Store> {
  let db: Kysely<DB>;
  let dialect: Dialect;
  if (opts.databaseUrl) {
    dialect = 'postgres';
    const pool = new pg.Pool({ connectionString: opts.databaseUrl, max: 10 });
    // An idle client's error (server restart) must not crash the process.
    pool.on('error', () => {});
    db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
  } else {
    dialect = 'sqlite';
    fs.mkdirSync(opts.dataDir, { recursive: true });
    const file = new Database(path.join(opts.dataDir, 'context-vault.sqlite'));
    // WAL for concurrent readers; FULL so an acknowledged commit survives power loss.
    file.pragma('journal_mode = WAL');
    file.pragma('synchronous = FULL');
    file.pragma('foreign_keys = ON');
    file.pragma('busy_timeout = 5000');
    // SQLite caches 2 MiB of pages by default; retrieval at 100,000 pages re-reads index pages of
    // far more, and 64 MiB cut keyword p95 from 11–16 ms to under 8 (docs/decisions.md).
    file.pragma(`cache_size = ${-Math.round((opts.cacheMb ?? 64) * 1024)}`);
    db = new Kysely<DB>({ dialect: new SqliteDialect({ database: withStatementCache(file) }) });
  }
  await migrate(db, dialect);
  return {
    db,
    dialect,
    close: () => db.destroy(),
  };
}

/**
 * Kysely prepares every query anew; preparing was an eighth of a page read's CPU. Statements
 * are reusable and better-sqlite3 runs one at a time, so a bounded cache keyed by SQL is safe.
 */
function withStatementCache(file: Database.Database, max = 500): Database.Database {
  const cache = new Map<string, Database.Statement>();
  const prepare = file.prepare.bind(file);
  return new Proxy(file, {
    get(target, prop, receiver) {
      if (prop !== 'prepare') return Reflect.get(target, prop, receiver) as unknown;
      return (source: string) => {
        let stmt = cache.get(source);
        if (!stmt) {
          stmt = prepare(source);
          if (cache.size >= max) cache.delete(cache.keys().next().value as string);
          cache.set(source, stmt);
        }
        return stmt;
      };
    },
  });
}

/** True when the database answers a trivial query. */
export async function pingStore(store: Store): Promise<boolean> {
  try {
    await sql`select 1`.execute(store.db);
    return true;
  } catch {
    return false;
  }
}
