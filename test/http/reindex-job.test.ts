import { sql, type Kysely } from 'kysely';
import { describe, expect, it } from 'vitest';
import { clearKeywordIndexes } from '../../src/retrieval/keyword-index.js';
import { PG_FOLD } from '../../src/retrieval/keyword.js';
import { REINDEX_JOB, ReindexJob, type MaintenanceJobsTable } from '../../src/retrieval/reindex-job.js';
import type { SearchHit } from '../../src/retrieval/search.js';
import { openStore, type Dialect, type Store } from '../../src/store/db.js';
import { FOLD_FROM, FOLD_TO } from '../../src/store/migrations/004_retrieval.js';
import type { DB } from '../../src/store/schema.js';
import { waitForVectors } from '../support/embeddings-server.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { Client, signupHuman, startServerOn } from '../support/server.js';

/**
 * Issue 12: migrations are SQL only; re-indexing after an upgrade is a background job
 * (src/retrieval/reindex-job.ts) that the server runs while it serves, reports in /readyz and
 * resumes after a restart.
 */

type JobDB = DB & { maintenance_jobs: MaintenanceJobsTable };
const jobs = (store: Store) => store.db as unknown as Kysely<JobDB>;
const open = (tdb: TestDatabase) => openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
const paths = (r: { body: { results: SearchHit[] } }) => r.body.results.map((h) => h.path).sort();

async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const finished = (c: Client) =>
  until('the re-index job to finish', async () => {
    const r = await c.get('/readyz');
    return r.body.reindex?.state === 'finished' ? r.body : undefined;
  });

/** Three pages (one links to another, one is tagged) written by a first server, which then stops. */
async function seed(tdb: TestDatabase) {
  const first = await startServerOn(tdb);
  try {
    const h = await signupHuman(first.url);
    const wombat = await h.client.post('/api/v1/nodes', { path: 'eng/up/wombat.md', content: '# Wombat\n\nwombat burrows. [[Other]]\n' });
    expect(wombat.status, wombat.text).toBe(201);
    const other = await h.client.post('/api/v1/nodes', { path: 'eng/up/other.md', content: '# Other\n\nnumbat termites.\n' });
    expect(other.status, other.text).toBe(201);
    const tagged = await h.client.post('/api/v1/nodes', { path: 'eng/up/quokka.md', content: '---\ntags: [marsupial]\n---\n# Quokka\n\nquokka smiles.\n' });
    expect(tagged.status, tagged.text).toBe(201);
    return { h, ids: { wombat: wombat.body.id as string, other: other.body.id as string, quokka: tagged.body.id as string } };
  } finally {
    await first.close();
  }
}

/** Empties every index row, as in a database whose pages were never indexed. */
async function dropIndexRows(db: Kysely<DB>, engine: Dialect): Promise<void> {
  if (engine === 'sqlite') await clearKeywordIndexes(db);
  for (const t of ['page_sections', 'page_links', 'page_keys', 'page_tags', 'section_vectors', 'embed_jobs'] as const) await db.deleteFrom(t).execute();
}

/** Forgets migration 010, so the next start runs it again over the database as it is. */
async function rerunMigration010(db: Kysely<DB>): Promise<void> {
  await sql`drop table maintenance_jobs`.execute(db);
  await sql`delete from schema_migrations where name = '010_maintenance_jobs'`.execute(db);
}

/**
 * Puts a migrated database back as it was after migrations 001–004 of the version before issue 12
 * (pages, empty index tables, nothing of 005–010), so that starting a server runs 005–010 as an
 * upgrade would.
 */
async function downgradeTo004(db: Kysely<DB>, engine: Dialect): Promise<void> {
  const x = (q: ReturnType<typeof sql>) => q.execute(db);
  await dropIndexRows(db, engine);
  if (engine === 'sqlite') {
    // 009 → 004: the deployment-wide FTS5 table and its triggers.
    const kw = (await sql<{ name: string }>`select name from sqlite_master where type = 'table' and name like 'kw%' and sql like 'CREATE VIRTUAL%'`.execute(db))
      .rows;
    expect(kw.length).toBeGreaterThanOrEqual(4);
    for (const t of kw) await x(sql`drop table ${sql.table(t.name)}`);
    await x(
      sql`create virtual table page_sections_fts using fts5(title, heading, text, content='page_sections', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')`,
    );
    await x(sql`create trigger page_sections_ai after insert on page_sections begin
      insert into page_sections_fts(rowid, title, heading, text) values (new.id, new.title, new.heading, new.text); end`);
    await x(sql`create trigger page_sections_ad after delete on page_sections begin
      insert into page_sections_fts(page_sections_fts, rowid, title, heading, text) values ('delete', old.id, old.title, old.heading, old.text); end`);
    await x(sql`create trigger page_sections_au after update on page_sections begin
      insert into page_sections_fts(page_sections_fts, rowid, title, heading, text) values ('delete', old.id, old.title, old.heading, old.text);
      insert into page_sections_fts(rowid, title, heading, text) values (new.id, new.title, new.heading, new.text); end`);
  }
  // 010, 008, 007, 006, 005.
  await x(sql`drop table maintenance_jobs`);
  await x(sql`drop table auth_failures`);
  await x(sql`alter table principals drop column suspended_at`);
  await x(sql`alter table workspaces drop column locked_at`);
  await x(sql`alter table workspaces drop column locked_by_session`);
  await x(sql`drop index if exists pages_retrieval_filter`);
  for (const t of ['embed_jobs', 'section_vectors', 'vector_log']) await x(sql`drop table ${sql.table(t)}`);
  for (const n of ['005_vectors', '006_search_filters', '007_agent_custody', '008_account_attempts', '009_keyword_per_workspace', '010_maintenance_jobs']) {
    await x(sql`delete from schema_migrations where name = ${n}`);
  }
}

describe('migration snapshots', () => {
  it('migration 004 bakes in the folding that PostgreSQL queries still use', () => {
    expect(FOLD_FROM).toBe(PG_FOLD.from);
    expect(FOLD_TO).toBe(PG_FOLD.to);
  });
});

describe.each(testEngines())('re-index after an upgrade (%s)', (engine) => {
  it('a fresh database asks for no job, and /readyz says so', async () => {
    const tdb = await createTestDatabase(engine);
    try {
      const s = await startServerOn(tdb);
      try {
        const r = await new Client(s.url).get('/readyz');
        expect(r.status).toBe(200);
        expect(r.body.reindex).toEqual({ state: 'none', done: 0, total: null, started_at: null, finished_at: null, last_error: null });
      } finally {
        await s.close();
      }
    } finally {
      await tdb.cleanup();
    }
  });

  it('a database whose pages are indexed asks for no job when migration 010 runs', async () => {
    const tdb = await createTestDatabase(engine);
    try {
      await seed(tdb);
      const store = await open(tdb);
      await rerunMigration010(store.db);
      await store.close();
      const again = await open(tdb);
      try {
        expect(await jobs(again).selectFrom('maintenance_jobs').selectAll().execute()).toEqual([]);
      } finally {
        await again.close();
      }
    } finally {
      await tdb.cleanup();
    }
  });

  it('a database that ran migrations 001–004 serves at once and is indexed in the background', async () => {
    const tdb = await createTestDatabase(engine);
    try {
      const { h, ids } = await seed(tdb);
      const store = await open(tdb);
      await downgradeTo004(store.db, engine);
      await store.close();

      // Migrations 005–010 run as an upgrade: SQL only, and 010 asks for the job.
      const s = await startServerOn(tdb);
      try {
        const c = new Client(s.url);
        c.cookies = h.client.cookies;
        const ready = await c.get('/readyz');
        expect(ready.status).toBe(200);
        expect(ready.body).toMatchObject({ status: 'ready', database: { ok: true, engine }, embeddings: { provider: 'builtin' } });
        expect(['pending', 'running', 'finished']).toContain(ready.body.reindex.state);
        expect(ready.body.reindex.last_error).toBeNull();

        const body = await finished(c);
        expect(body.status).toBe('ready');
        expect(body.reindex).toMatchObject({ state: 'finished', done: 3, total: 3, last_error: null });
        expect(Date.parse(body.reindex.started_at)).toBeLessThanOrEqual(Date.parse(body.reindex.finished_at));
        expect(s.ctx.retrieval.reindex.batches).toBe(1);

        const r = await c.get('/api/v1/search?q=wombat&mode=fts');
        expect(r.status, r.text).toBe(200);
        expect(paths(r)).toEqual(['eng/up/wombat.md']);
        expect(paths(await c.get('/api/v1/search?q=numbat&mode=fts'))).toEqual(['eng/up/other.md']);
        expect(paths(await c.get('/api/v1/search?q=quokka&tags=marsupial&mode=fts'))).toEqual(['eng/up/quokka.md']);
        const b = await c.get(`/api/v1/nodes/${ids.other}/backlinks`);
        expect(b.status, b.text).toBe(200);
        expect(b.body.backlinks.map((x: SearchHit) => x.path)).toEqual(['eng/up/wombat.md']);

        // The job queued every page for vectors too.
        await waitForVectors(c);
        expect(paths(await c.get('/api/v1/search?q=wombat%20burrows&mode=vector'))).toContain('eng/up/wombat.md');
      } finally {
        await s.close();
      }

      // Finished stays finished: a restart asks for nothing more.
      const again = await startServerOn(tdb);
      try {
        const r = await new Client(again.url).get('/readyz');
        expect(r.body.reindex).toMatchObject({ state: 'finished', done: 3, total: 3 });
        expect(again.ctx.retrieval.reindex.batches).toBe(0);
      } finally {
        await again.close();
      }
    } finally {
      await tdb.cleanup();
    }
  });

  it('resumes where a node that died mid-job stopped, once its claim lapses, and serves meanwhile', async () => {
    const tdb = await createTestDatabase(engine);
    try {
      const { h } = await seed(tdb);
      const store = await open(tdb);
      await dropIndexRows(store.db, engine);
      await rerunMigration010(store.db);
      await store.close();

      // Migration 010 asks for the job (the pages have no index rows) ...
      const mid = await open(tdb);
      const order = await mid.db.selectFrom('pages').select(['id', 'path']).where('deleted_at', 'is', null).orderBy('id').execute();
      expect(order).toHaveLength(3);
      const requested = await jobs(mid).selectFrom('maintenance_jobs').selectAll().where('name', '=', REINDEX_JOB).executeTakeFirstOrThrow();
      expect(requested).toMatchObject({ started_at: null, finished_at: null, done: 0, last_id: null });
      // ... and a node did two pages, then died holding its claim for another moment.
      await jobs(mid)
        .updateTable('maintenance_jobs')
        .set({
          started_at: new Date().toISOString(),
          last_id: order[1]!.id,
          done: 2,
          total: 3,
          claimed_by: 'gone:1:dead',
          claimed_until: new Date(Date.now() + 3000).toISOString(),
        })
        .execute();
      await mid.close();

      const s = await startServerOn(tdb);
      try {
        const c = new Client(s.url);
        c.cookies = h.client.cookies;
        // Ready at once, the job shown as it stands; the page it has not reached is not found yet.
        const ready = await c.get('/readyz');
        expect(ready.status).toBe(200);
        expect(ready.body.status).toBe('ready');
        expect(ready.body.reindex).toMatchObject({ state: 'running', done: 2, total: 3, finished_at: null, last_error: null });
        const word = { 'eng/up/wombat.md': 'wombat', 'eng/up/other.md': 'numbat', 'eng/up/quokka.md': 'quokka' } as Record<string, string>;
        const last = order[2]!.path;
        const early = await c.get(`/api/v1/search?q=${word[last]}&mode=fts`);
        expect(early.status).toBe(200);
        expect(paths(early)).toEqual([]);

        // The claim lapses; this node takes over after the last page the dead one recorded.
        const body = await finished(c);
        expect(body.reindex).toMatchObject({ state: 'finished', done: 3, total: 3 });
        expect(s.ctx.retrieval.reindex.batches).toBe(1);
        expect(paths(await c.get(`/api/v1/search?q=${word[last]}&mode=fts`))).toEqual([last]);
        // The two pages the dead node's record counts as done were not done again.
        expect(paths(await c.get(`/api/v1/search?q=${word[order[0]!.path]}&mode=fts`))).toEqual([]);
      } finally {
        await s.close();
      }
    } finally {
      await tdb.cleanup();
    }
  });

  it('a stopped job gives its claim back and the next start goes on from its last batch', async () => {
    const tdb = await createTestDatabase(engine);
    try {
      await seed(tdb);
      const store = await open(tdb);
      try {
        await dropIndexRows(store.db, engine);
        await jobs(store)
          .insertInto('maintenance_jobs')
          .values({
            name: REINDEX_JOB,
            requested_at: new Date().toISOString(),
            started_at: null,
            finished_at: null,
            last_id: null,
            done: 0,
            total: null,
            claimed_by: null,
            claimed_until: null,
            last_error: null,
          })
          .execute();
        const a = new ReindexJob(store, { batch: 1, pauseMs: 200 });
        a.start();
        await until('a first batch', async () => (a.batches >= 1 ? true : undefined));
        await a.stop();
        const row = await jobs(store).selectFrom('maintenance_jobs').selectAll().executeTakeFirstOrThrow();
        expect(row).toMatchObject({ claimed_by: null, claimed_until: null, finished_at: null, total: 3 });
        expect(Number(row.done)).toBe(a.batches);
        expect(a.batches).toBeLessThan(3);

        const b = new ReindexJob(store, { batch: 1, pauseMs: 0 });
        b.start();
        await until('the job to finish', async () => ((await b.status()).state === 'finished' ? true : undefined));
        await b.stop();
        expect(a.batches + b.batches).toBe(3);
        expect(await b.status()).toMatchObject({ state: 'finished', done: 3, total: 3 });
        // Every live page is indexed (it answers to its path), none twice.
        const keys = await store.db.selectFrom('page_keys').select('page_id').distinct().execute();
        expect(keys).toHaveLength(3);
        const sections = await store.db.selectFrom('page_sections').select(['page_id', 'ord']).execute();
        expect(new Set(sections.map((r) => `${r.page_id}:${r.ord}`)).size).toBe(sections.length);
      } finally {
        await store.close();
      }
    } finally {
      await tdb.cleanup();
    }
  });
});

describe.each(testEngines().filter((e) => e === 'postgres'))('re-index job on two nodes (%s)', (engine) => {
  it('one node runs the job; the other waits and does nothing', async () => {
    const tdb = await createTestDatabase(engine);
    try {
      await seed(tdb);
      const one = await open(tdb);
      const two = await open(tdb);
      try {
        await dropIndexRows(one.db, engine);
        await jobs(one)
          .insertInto('maintenance_jobs')
          .values({
            name: REINDEX_JOB,
            requested_at: new Date().toISOString(),
            started_at: null,
            finished_at: null,
            last_id: null,
            done: 0,
            total: null,
            claimed_by: null,
            claimed_until: null,
            last_error: null,
          })
          .execute();
        const a = new ReindexJob(one, { batch: 1, pauseMs: 30 });
        const b = new ReindexJob(two, { batch: 1, pauseMs: 30 });
        a.start();
        b.start();
        await until('the job to finish', async () => ((await a.status()).state === 'finished' ? true : undefined));
        await Promise.all([a.stop(), b.stop()]);
        expect([a.batches, b.batches].sort()).toEqual([0, 3]);
        expect(await b.status()).toMatchObject({ state: 'finished', done: 3, total: 3 });
        expect(await one.db.selectFrom('page_keys').select('page_id').distinct().execute()).toHaveLength(3);
      } finally {
        await one.close();
        await two.close();
      }
    } finally {
      await tdb.cleanup();
    }
  });
});
