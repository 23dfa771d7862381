import { spawn } from 'node:child_process';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { openStore, type Dialect } from '../../src/store/db.js';
import { SchemaAheadError } from '../../src/store/migrate.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { ROOT } from '../support/service-process.js';

/** Runs `src/main.ts <args>` as an operator would and collects its exit code and stderr. */
function runMain(args: string[], env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', ...args], {
      cwd: ROOT,
      env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'warn', ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('exit', (code) => resolve({ code, stderr }));
  });
}

function envOf(tdb: TestDatabase): Record<string, string> {
  return { DATA_DIR: tdb.dataDir, ...(tdb.databaseUrl ? { DATABASE_URL: tdb.databaseUrl } : {}) };
}

/** A database on `engine` that records a migration this version does not have. */
async function migratedByANewerVersion(engine: Dialect): Promise<TestDatabase> {
  const tdb = await createTestDatabase(engine);
  const store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
  await sql`insert into schema_migrations (name, applied_at) values ('999_from_the_future', ${new Date().toISOString()})`.execute(store.db);
  await store.close();
  return tdb;
}

describe.each(testEngines())('a database a newer version migrated (%s)', (engine) => {
  let tdb: TestDatabase;

  beforeAll(async () => {
    tdb = await migratedByANewerVersion(engine);
  });
  afterAll(async () => tdb?.cleanup());

  it('is refused by openStore, naming the migrations this version does not know', async () => {
    const err = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(SchemaAheadError);
    expect((err as SchemaAheadError).unknown).toEqual(['999_from_the_future']);
  });
});

describe.skipIf(!testEngines().includes('postgres'))('nodes migrating one empty database at once (postgres)', () => {
  it('all of them open it, each migration applied once', { timeout: 120_000 }, async () => {
    // CI once lost a node to PostgreSQL's catalog race on CREATE TABLE IF NOT EXISTS; rounds make it likely.
    for (let round = 0; round < 6; round++) {
      const tdb = await createTestDatabase('postgres');
      try {
        const opened = await Promise.allSettled(Array.from({ length: 4 }, () => openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl })));
        const failures = opened.flatMap((o) => (o.status === 'rejected' ? [String(o.reason)] : []));
        expect(failures, `round ${round}`).toEqual([]);
        const store = (opened[0] as PromiseFulfilledResult<Awaited<ReturnType<typeof openStore>>>).value;
        const rows = await sql<{ name: string; n: string }>`select name, count(*) as n from schema_migrations group by name`.execute(store.db);
        expect(rows.rows.length).toBeGreaterThan(10);
        expect(rows.rows.every((r) => Number(r.n) === 1)).toBe(true);
        for (const o of opened) if (o.status === 'fulfilled') await o.value.close();
      } finally {
        await tdb.cleanup();
      }
    }
  });
});

// The refusal in main.ts does not depend on the engine: one engine's run proves it.
describe('the server on a database a newer version migrated', () => {
  let tdb: TestDatabase;

  beforeAll(async () => {
    tdb = await migratedByANewerVersion(testEngines()[0]!);
  });
  afterAll(async () => tdb?.cleanup());

  it('the server does not start: exit code 2 and a message saying what to do', { timeout: 60_000 }, async () => {
    for (const args of [[], ['migrate']]) {
      const r = await runMain(args, envOf(tdb));
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain('999_from_the_future');
      expect(r.stderr).toContain('newer version');
      expect(r.stderr).not.toMatch(/\n\s+at /);
    }
  });
});

describe('DATABASE_POOL_MAX', () => {
  it('a value out of range or not a number is a configuration error naming the setting (the server exits 2 on those)', () => {
    for (const bad of ['1', 'ten', '1001', '2.5']) {
      expect(() => loadConfig({ DATABASE_POOL_MAX: bad }), bad).toThrow(ConfigError);
      expect(() => loadConfig({ DATABASE_POOL_MAX: bad }), bad).toThrow(/DATABASE_POOL_MAX/);
    }
    expect(loadConfig({}).databasePoolMax).toBe(10);
    expect(loadConfig({ DATABASE_POOL_MAX: '40' }).databasePoolMax).toBe(40);
  });

  it.skipIf(!testEngines().includes('postgres'))('bounds the connections one process opens (postgres)', async () => {
    const tdb = await createTestDatabase('postgres');
    const store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl, poolMax: 3 });
    try {
      const dbName = new URL(tdb.databaseUrl!).pathname.slice(1);
      // Eight queries at once each hold a connection while they sleep: only three run together.
      const seen: number[] = [];
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          const r = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity, pg_sleep(0.15) where datname = ${dbName}`.execute(store.db);
          seen.push(Number(r.rows[0]!.n));
        }),
      );
      expect(Math.max(...seen)).toBe(3);
    } finally {
      await store.close();
      await tdb.cleanup();
    }
  });
});
