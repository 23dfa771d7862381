import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../../src/store/db.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';

/**
 * Issue 18: on PostgreSQL a connection prepares each statement once and then only binds and runs
 * it, reusing a generic plan where PostgreSQL finds one as good; statements whose plan depends on
 * their values (full text, LIKE) are planned per run; a connection prepares a bounded number.
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

  it('a new connection runs its session settings before any query: no query is queued behind them (pg 9 removes that)', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    const fresh = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
    try {
      // Ten queries at once on a fresh pool: each new connection's first query arrives while its
      // settings would still be running; each sees them applied.
      const jit = await Promise.all(
        Array.from({ length: 10 }, () => sql<{ jit: string }>`select current_setting('jit') as jit, pg_sleep(0.01)`.execute(fresh.db)),
      );
      expect(jit.map((r) => r.rows[0]!.jit)).toEqual(Array(10).fill('off'));
      // pg-pool's own pool.query (what the node asks of the snapshot by) queries in the very
      // callback that hands over a new connection, in pg's callback form.
      const another = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
      try {
        const snapshots = await Promise.all(Array.from({ length: 5 }, () => another.othersCommits()));
        for (const s of snapshots) expect(s).toMatch(/^\d+:\d+:/);
      } finally {
        await another.close();
      }
      await new Promise((r) => setImmediate(r));
      expect(warnings.filter((m) => /already executing a query/.test(m))).toEqual([]);
    } finally {
      process.off('warning', onWarning);
      await fresh.close();
    }
  });

  it('a statement run twice on a connection is prepared once, under its name', async () => {
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
      expect(mode.rows[0]!.mode).toBe('auto');
      const jit = await sql<{ jit: string }>`select current_setting('jit') as jit`.execute(db);
      expect(jit.rows[0]!.jit).toBe('off');
      // 1.1 unless the operator configured another value (then theirs stands).
      const cost = await sql<{ now: string; reset_val: string; boot_val: string }>`
        select current_setting('random_page_cost') as now, reset_val, boot_val from pg_settings where name = 'random_page_cost'`.execute(db);
      const r = cost.rows[0]!;
      expect(r.now).toBe(r.reset_val === r.boot_val ? '1.1' : r.reset_val);
      // No parallel workers for a request's statement unless the operator configured a number.
      const par = await sql<{ now: string; reset_val: string; boot_val: string }>`
        select current_setting('max_parallel_workers_per_gather') as now, reset_val, boot_val from pg_settings where name = 'max_parallel_workers_per_gather'`.execute(
        db,
      );
      const q = par.rows[0]!;
      expect(q.now).toBe(q.reset_val === q.boot_val ? '0' : q.reset_val);
    });
  });

  it('an operator’s own max_parallel_workers_per_gather and random_page_cost are kept', async () => {
    const name = new URL(tdb.databaseUrl!).pathname.slice(1);
    await sql.raw(`alter database ${name} set max_parallel_workers_per_gather = 1`).execute(store.db);
    await sql.raw(`alter database ${name} set random_page_cost = 2.5`).execute(store.db);
    const other = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
    try {
      await other.db.connection().execute(async (db) => {
        const r = await sql<{ par: string; cost: string }>`
          select current_setting('max_parallel_workers_per_gather') as par, current_setting('random_page_cost') as cost`.execute(db);
        expect(r.rows[0]).toEqual({ par: '1', cost: '2.5' });
      });
    } finally {
      await other.close();
      await sql.raw(`alter database ${name} reset all`).execute(store.db);
    }
  });

  it('migration 019: the keyword index keeps a short pending list, and section ids have a BRIN index summarized as ranges fill', async () => {
    const opts = async (index: string) =>
      (
        await sql<{ opts: string[] | null; am: string }>`
        select c.reloptions as opts, a.amname as am from pg_class c join pg_am a on a.oid = c.relam where c.relname = ${index}`.execute(store.db)
      ).rows[0];
    expect(await opts('page_sections_tsv')).toMatchObject({ am: 'gin', opts: ['gin_pending_list_limit=256'] });
    expect(await opts('page_sections_id_brin')).toMatchObject({ am: 'brin', opts: ['pages_per_range=16', 'autosummarize=on'] });
  });

  it('a lookup run often is served from a generic plan; full-text and LIKE statements are planned per run, unnamed', async () => {
    await store.db.connection().execute(async (db) => {
      for (let i = 0; i < 8; i++) {
        await sql`select id from pages where workspace_id = ${'w'} and id = ${`p${i}`}`.execute(db);
        await sql`select id from pages where path like ${`eng/${i}%`}`.execute(db);
        await sql`select id from page_sections where tsv @@ to_tsquery('simple', ${`word${i}`})`.execute(db);
      }
      const prepared = await sql<{ statement: string; generic_plans: string }>`select statement, generic_plans from pg_prepared_statements`.execute(db);
      const lookup = prepared.rows.find((r) => r.statement === 'select id from pages where workspace_id = $1 and id = $2');
      expect(lookup).toBeDefined();
      expect(Number(lookup!.generic_plans)).toBeGreaterThan(0);
      expect(prepared.rows.filter((r) => /like|@@/.test(r.statement))).toEqual([]);
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
