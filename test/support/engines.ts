import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import pg from 'pg';
import { openStore, type Dialect, type Store } from '../../src/store/db.js';

/**
 * The engines a suite runs on. SQLite always; PostgreSQL when a server answers at
 * TEST_PG_URL (default postgres://postgres@127.0.0.1:5432/test). In CI (CI=true) a
 * missing PostgreSQL is an error, never a silent skip.
 */
const PG_ADMIN_URL = process.env.TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

function pgReachable(): boolean {
  const u = new URL(PG_ADMIN_URL);
  // Suites are declared synchronously, so the probe runs in a short child process.
  const probe =
    `const s=require('net').connect(${Number(u.port || 5432)},${JSON.stringify(u.hostname)});` +
    `s.on('connect',()=>process.exit(0));s.on('error',()=>process.exit(1));setTimeout(()=>process.exit(1),1500);`;
  return spawnSync(process.execPath, ['-e', probe], { stdio: 'ignore' }).status === 0;
}

let cached: Dialect[] | undefined;
export function testEngines(): Dialect[] {
  if (cached) return cached;
  if (process.env.TEST_ENGINES === 'sqlite') return (cached = ['sqlite']);
  if (pgReachable()) return (cached = ['sqlite', 'postgres']);
  if (process.env.CI) throw new Error(`PostgreSQL is required in CI but ${PG_ADMIN_URL} does not answer`);
  console.warn(`\n!!! PostgreSQL not reachable at ${PG_ADMIN_URL}: the PostgreSQL suites are SKIPPED on this machine !!!\n`);
  return (cached = ['sqlite']);
}

export interface TestDatabase {
  dataDir: string;
  databaseUrl: string | undefined;
  /** Drops the throwaway database and removes the data directory. */
  cleanup(): Promise<void>;
}

/** A fresh, empty database for one suite: a temp dir for SQLite, a new database for PostgreSQL. */
export async function createTestDatabase(engine: Dialect): Promise<TestDatabase> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-test-'));
  if (engine === 'sqlite') {
    return { dataDir, databaseUrl: undefined, cleanup: async () => fs.rmSync(dataDir, { recursive: true, force: true }) };
  }
  const name = `cv_test_${process.pid}_${Math.random().toString(36).slice(2, 10)}`;
  const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const u = new URL(PG_ADMIN_URL);
  u.pathname = `/${name}`;
  return {
    dataDir,
    databaseUrl: u.toString(),
    cleanup: async () => {
      fs.rmSync(dataDir, { recursive: true, force: true });
      const c = new pg.Client({ connectionString: PG_ADMIN_URL });
      await c.connect();
      await c.query(`drop database if exists ${name} with (force)`);
      await c.end();
    },
  };
}

/** Opens a migrated store on a fresh test database. */
export async function openTestStore(engine: Dialect): Promise<{ store: Store; cleanup(): Promise<void> }> {
  const tdb = await createTestDatabase(engine);
  const store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
  return {
    store,
    cleanup: async () => {
      await store.close();
      await tdb.cleanup();
    },
  };
}
