import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../../src/store/db.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';

/**
 * Issue 18: on PostgreSQL a connection prepares each statement once and then only binds and runs
 * it, planning every run for its own values; a connection prepares a bounded number of them.
 */
describe.skipIf(!testEngines().includes('postgres'))('prepared statements (postgres)', () => {
  let tdb: TestDatabase;
  let store: Store;
  beforeAll(async () => {
    tdb = await createTestDatabase('postgres');
    store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
  });
  afterAll(async () => {
    await store?.close();
    await tdb?.cleanup();
  });

  it('a statement run twice on a connection is prepared once, under its name, and planned for its values', async () => {
    await store.db.connection().execute(async (db) => {
      const text = 'select count(*) from pages where workspace_id = $1';
      for (const ws of ['a', 'b']) {
        const r = await sql<{ count: number }>`select count(*) from pages where workspace_id = ${ws}`.execute(db);
        expect(Number(r.rows[0]!.count)).toBe(0);
      }
      const prepared = await sql<{ name: string; statement: string }>`select name, statement from pg_prepared_statements`.execute(db);
      const mine = prepared.rows.filter((r) => r.statement === text);
      expect(mine).toHaveLength(1);
      expect(mine[0]!.name).toMatch(/^cv_[0-9a-f]{24}$/);
      const mode = await sql<{ mode: string }>`select current_setting('plan_cache_mode') as mode`.execute(db);
      expect(mode.rows[0]!.mode).toBe('force_custom_plan');
      const jit = await sql<{ jit: string }>`select current_setting('jit') as jit`.execute(db);
      expect(jit.rows[0]!.jit).toBe('off');
    });
  });

  it('a connection prepares at most 500 statements; the ones past that still run, unnamed', async () => {
    await store.db.connection().execute(async (db) => {
      for (let i = 0; i < 520; i++) {
        const r = await sql<{ n: number }>`select ${sql.lit(i)}::int + ${1}::int as n`.execute(db);
        expect(Number(r.rows[0]!.n)).toBe(i + 1);
      }
      const count = await sql<{ n: number }>`select count(*)::int as n from pg_prepared_statements where name like 'cv\\_%'`.execute(db);
      expect(Number(count.rows[0]!.n)).toBe(500);
    });
  });
});
