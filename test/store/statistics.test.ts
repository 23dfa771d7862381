import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';

/**
 * Issue 18: the planner's statistics follow bulk writes without waiting for autovacuum (which
 * an operator's server may have turned off). A node analyzes the tables that changed by more
 * than a tenth since their last ANALYZE; tables that did not change are left alone.
 */
describe.skipIf(!testEngines().includes('postgres'))('planner statistics (postgres)', () => {
  let s: TestServer;
  let c: pg.Client;

  beforeAll(async () => {
    s = await startTestServer('postgres');
    c = new pg.Client({ connectionString: s.ctx.config.databaseUrl });
    await c.connect();
    // Autovacuum (on here) may analyze the tables first under a loaded CI run, and then the
    // service rightly finds nothing to do: this database's two tables are left to the service.
    await c.query(`alter table pages set (autovacuum_enabled = false)`);
    await c.query(`alter table page_sections set (autovacuum_enabled = false)`);
  });
  afterAll(async () => {
    await c?.end();
    await s?.stop();
  });

  const analyzed = async (table: string) =>
    (await c.query<{ n: string }>(`select analyze_count as n from pg_stat_user_tables where relname = $1`, [table])).rows[0]?.n;

  it('after 240 pages written over REST, pages and their sections are analyzed by the service; a quiet table is not analyzed again', async () => {
    const human = await signupHuman(s.url, 'Stats');
    const agent = await createAgentWithKey(human.client, [{ action: 'read' }, { action: 'write' }]);
    const before = { pages: await analyzed('pages'), sections: await analyzed('page_sections') };
    const inserted = async (table: string) =>
      Number((await c.query<{ n: string }>(`select n_tup_ins as n from pg_stat_user_tables where relname = $1`, [table])).rows[0]?.n ?? 0);
    const insertedBefore = { pages: await inserted('pages'), sections: await inserted('page_sections') };
    const rowsBefore = Number((await c.query<{ n: string }>(`select count(*) as n from page_sections`)).rows[0]!.n);
    let next = 0;
    await Promise.all(
      Array.from({ length: 6 }, async () => {
        while (next < 240) {
          const n = next++;
          const r = await agent.client.post('/api/v1/nodes', {
            path: `bulk/p${n}.md`,
            content: `# Page ${n}\n\nfirst part ${n}\n\n## Second\n\nmore words ${n}\n`,
          });
          expect(r.status, r.text).toBe(201);
        }
      }),
    );
    // PostgreSQL publishes each session's change counts within seconds, not at once, and a count
    // published after the analysis would look like new writes: wait until all of them show.
    const rowsAfter = Number((await c.query<{ n: string }>(`select count(*) as n from page_sections`)).rows[0]!.n);
    for (
      let i = 0;
      i < 60 &&
      ((await inserted('pages')) < insertedBefore.pages + 240 || (await inserted('page_sections')) < insertedBefore.sections + rowsAfter - rowsBefore);
      i++
    ) {
      await new Promise((r) => setTimeout(r, 500));
    }
    // analyze_count counts ANALYZE run by a session (autovacuum's are counted apart): the
    // service's rounds, the test's or the node's own timer's, whichever came first.
    const done = async () => Number(await analyzed('pages')) > Number(before.pages) && Number(await analyzed('page_sections')) > Number(before.sections);
    for (let i = 0; i < 60 && !(await done()); i++) {
      await s.statistics.tick();
      if (!(await done())) await new Promise((r) => setTimeout(r, 500));
    }
    expect(Number(await analyzed('pages'))).toBeGreaterThan(Number(before.pages));
    expect(Number(await analyzed('page_sections'))).toBeGreaterThan(Number(before.sections));

    // Nothing written since: the next round analyzes neither.
    const again = await s.statistics.tick();
    expect(again).not.toContain('pages');
    expect(again).not.toContain('page_sections');
    // Its own waits allow 30 s for the counts to show and 30 s of rounds: under a full CI run the
    // writes and the counts took past vitest's default 30 s once.
  }, 120_000);
  it('pages rewritten until a fifth of their sections are dead versions are vacuumed by the service', async () => {
    const human = await signupHuman(s.url, 'Vacuum');
    const agent = await createAgentWithKey(human.client, [{ action: 'read' }, { action: 'write' }]);
    const vacuumed = async (table: string) =>
      Number((await c.query<{ n: string }>(`select vacuum_count as n from pg_stat_user_tables where relname = $1`, [table])).rows[0]?.n ?? 0);
    const dead = async (table: string) =>
      Number((await c.query<{ n: string }>(`select n_dead_tup as n from pg_stat_user_tables where relname = $1`, [table])).rows[0]?.n ?? 0);
    const before = await vacuumed('page_sections');
    const ids: string[] = [];
    for (let n = 0; n < 120; n++) {
      const r = await agent.client.post('/api/v1/nodes', { path: `rewrite/p${n}.md`, content: `# Page ${n}\n\nfirst ${n}\n\n## Two\n\nsecond ${n}\n` });
      expect(r.status, r.text).toBe(201);
      ids.push(r.body.id as string);
    }
    // Each rewrite replaces the page's sections: their old versions are dead until a vacuum.
    for (let round = 1; round <= 6; round++) {
      await Promise.all(
        ids.map(async (id, n) => {
          const r = await agent.client.put(`/api/v1/nodes/${id}`, { content: `# Page ${n}\n\nround ${round} ${n}\n\n## Two\n\nagain ${round}\n` });
          expect(r.status, r.text).toBe(200);
        }),
      );
    }
    // Autovacuum is off for this table here: only the service's rounds (the test's or its own
    // timer's) can vacuum it.
    for (let i = 0; i < 60 && (await vacuumed('page_sections')) <= before; i++) {
      await s.statistics.tick();
      if ((await vacuumed('page_sections')) <= before) await new Promise((r) => setTimeout(r, 500));
    }
    expect(await vacuumed('page_sections')).toBeGreaterThan(before);
    // The rewrites left 6 × 240 dead sections. The service's own timer may vacuum between rounds,
    // after which the rounds still to come leave fewer than a fifth dead (no vacuum due): what is
    // dead now is less than the rewrites made, never all of it.
    expect(await dead('page_sections')).toBeLessThan(6 * 240);
  }, 120_000);

  it('a table that only grew by a fifth (a bulk load: no dead rows) is vacuumed by the service, its pages then all-visible', async () => {
    const human = await signupHuman(s.url, 'Grow');
    const agent = await createAgentWithKey(human.client, [{ action: 'read' }, { action: 'write' }]);
    const stat = async (column: 'vacuum_count' | 'n_ins_since_vacuum' | 'n_live_tup' | 'n_dead_tup') =>
      Number((await c.query<{ n: string }>(`select ${column} as n from pg_stat_user_tables where relname = 'page_sections'`)).rows[0]?.n ?? 0);
    // Start from a vacuumed table, so what follows is inserts alone.
    await c.query('vacuum page_sections');
    const before = await stat('vacuum_count');
    const live = Number((await c.query<{ n: string }>(`select count(*) as n from page_sections`)).rows[0]!.n);
    // More than 1,000 sections, and more than a fifth of the table: three per page.
    const pages = Math.max(400, Math.ceil(live / 15) + 10);
    let next = 0;
    await Promise.all(
      Array.from({ length: 6 }, async () => {
        while (next < pages) {
          const n = next++;
          const r = await agent.client.post('/api/v1/nodes', {
            path: `grow/p${n}.md`,
            content: `# Page ${n}\n\none ${n}\n\n## Two\n\ntwo ${n}\n\n## Three\n\nthree ${n}\n`,
          });
          expect(r.status, r.text).toBe(201);
        }
      }),
    );
    expect(await stat('n_dead_tup')).toBeLessThan(1_000);
    // The counts show within seconds; then a round (the test's or the node's own timer's) vacuums.
    for (let i = 0; i < 120 && (await stat('vacuum_count')) <= before; i++) {
      await s.statistics.tick();
      if ((await stat('vacuum_count')) <= before) await new Promise((r) => setTimeout(r, 500));
    }
    expect(await stat('vacuum_count')).toBeGreaterThan(before);
    // What the vacuum is for: the table's pages marked all-visible (index-only reads, no hint bits to set).
    const vis = (
      await c.query<{ pages: number; visible: number }>(`select relpages as pages, relallvisible as visible from pg_class where relname = 'page_sections'`)
    ).rows[0]!;
    expect(vis.visible).toBeGreaterThan(vis.pages * 0.9);
  }, 120_000);
});
