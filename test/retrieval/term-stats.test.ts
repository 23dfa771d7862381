import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { termDocCounts } from '../../src/retrieval/keyword-plan.js';
import { foldTermStats } from '../../src/retrieval/term-stats-fold.js';
import { openStore } from '../../src/store/db.js';
import { createTestDatabase, testEngines } from '../support/engines.js';
import { PASSWORD } from '../support/actors.js';
import { finished, postJson } from '../support/imports.js';
import { expectStatus } from '../support/expect.js';
import { Client, signupHuman, startServerOn, startTestServer, type TestServer } from '../support/server.js';

/**
 * Issue 18: PostgreSQL's word statistics (term_stats, migration 016) are kept by the indexer in
 * each write's own transaction. After every kind of write a user can make, through the real
 * REST face, they must equal a count made afresh from the sections, level by level, and each
 * section's level must be the higher of its page's sensitivity and its block's.
 */
describe.skipIf(!testEngines().includes('postgres'))('word statistics follow every write (postgres)', () => {
  let s: TestServer;
  let c: pg.Client;
  let owner: Client;
  let workspaceId: string;

  beforeAll(async () => {
    s = await startTestServer('postgres');
    c = new pg.Client({ connectionString: s.ctx.config.databaseUrl });
    await c.connect();
    const h = await signupHuman(s.url, 'Stats');
    owner = h.client;
    workspaceId = h.workspace.id;
  });
  afterAll(async () => {
    await c?.end();
    await s?.stop();
  });

  const rankSql = (col: string, missing: string) =>
    `case coalesce(${col}, '${missing}') when 'public' then 0 when 'internal' then 1 when 'confidential' then 2 else 3 end`;

  /** term_stats against a fresh count, and every section's level against its page's. */
  async function expectConsistent(): Promise<void> {
    const kept = await c.query<{ k: string; docs: number }>(
      `select workspace_id || ' ' || lexeme || ' ' || level as k, sum(docs)::int as docs from term_counts group by workspace_id, lexeme, level having sum(docs) <> 0 order by 1`,
    );
    const fresh = await c.query<{ k: string; docs: number }>(
      `select s.workspace_id || ' ' || x.lexeme || ' ' || s.level as k, count(*)::int as docs
       from page_sections s cross join unnest(tsvector_to_array(s.tsv) || '{""}'::text[]) as x(lexeme) group by 1
       union all
       select workspace_id || '   ' || level, sum(tokens)::int from page_sections group by workspace_id, level having sum(tokens) <> 0 order by 1`,
    );
    expect(kept.rows.length).toBeGreaterThan(0);
    expect(kept.rows).toEqual(fresh.rows);
    const wrong = await c.query(
      `select s.id from page_sections s join pages p on p.id = s.page_id
       where s.level is distinct from greatest(${rankSql('p.sensitivity', 'secret')}, ${rankSql('s.block_level', 'public')})`,
    );
    expect(wrong.rows).toEqual([]);
    const negative = await c.query(`select lexeme from term_counts group by workspace_id, lexeme, level having sum(docs) < 0`);
    expect(negative.rows).toEqual([]);
    // Folded into term_stats (migration 029), the pending changes leave the same counts there alone.
    await s.termStats.fold();
    const pending = await c.query(`select 1 from term_stats_pending`);
    expect(pending.rows).toEqual([]);
    const folded = await c.query<{ k: string; docs: number }>(
      `select workspace_id || ' ' || lexeme || ' ' || level as k, docs::int as docs from term_stats where docs <> 0 order by 1`,
    );
    expect(folded.rows).toEqual(fresh.rows);
  }

  const counted = async (word: string, ceiling: 'public' | 'internal' | 'confidential' | 'secret') =>
    (await termDocCounts(s.ctx.store, [word], { workspaceId, ceiling })).get(word);

  const page = (level: string, words: string, block = '') =>
    `---\nsensitivity: ${level}\n---\n# ${words.split(' ')[0]}\n\n${words}\n\n## More\n\n${words} trailing quillwort\n${block}`;

  it('creates, rewrites, level changes, moves, archives, restores, deletes and imports keep the counts exact', async () => {
    const ids: string[] = [];
    for (const [i, level] of ['public', 'internal', 'confidential', 'secret'].entries()) {
      const r = await owner.post('/api/v1/nodes', { path: `eng/p${i}.md`, content: page(level, `zephyrine alpha${i} shared words here`) });
      expectStatus(r, 201);
      ids.push(r.body.id);
    }
    const withBlock = await owner.post('/api/v1/nodes', {
      path: 'eng/block.md',
      content: page('public', 'zephyrine open text', '\n::: secret\nhidden marrowbone zephyrine\n:::\n'),
    });
    expectStatus(withBlock, 201);
    ids.push(withBlock.body.id);
    await expectConsistent();
    // "zephyrine": one section of each page's two holds it once per section (title and body, then "More").
    expect(await counted('zephyrine', 'public')).toBe(4);
    expect(await counted('zephyrine', 'secret')).toBe(11);
    expect(await counted('marrowbone', 'confidential')).toBe(0);
    expect(await counted('marrowbone', 'secret')).toBe(1);

    // A rewrite that keeps most words and changes a few.
    let r = await owner.put(`/api/v1/nodes/${ids[0]}`, { content: page('public', 'zephyrine alpha0 shared words there newword') });
    expectStatus(r, 200);
    await expectConsistent();

    // The public page made secret: its sections leave the public counts in the same commit.
    r = await owner.put(`/api/v1/nodes/${ids[0]}`, { content: page('secret', 'zephyrine alpha0 shared words there newword') });
    expectStatus(r, 200);
    await expectConsistent();
    expect(await counted('zephyrine', 'public')).toBe(2);
    expect(await counted('newword', 'public')).toBe(0);
    expect(await counted('newword', 'secret')).toBe(2);

    // The block's level changes, then the block goes.
    r = await owner.put(`/api/v1/nodes/${ids[4]}`, { content: page('public', 'zephyrine open text', '\n::: internal\nhidden marrowbone zephyrine\n:::\n') });
    expectStatus(r, 200);
    await expectConsistent();
    expect(await counted('marrowbone', 'internal')).toBe(1);
    r = await owner.put(`/api/v1/nodes/${ids[4]}`, { content: page('public', 'zephyrine open text') });
    expectStatus(r, 200);
    await expectConsistent();
    expect(await counted('marrowbone', 'secret')).toBe(0);

    expectStatus(await owner.post(`/api/v1/nodes/${ids[1]}/move`, { to: 'ops/moved.md' }), 200);
    await expectConsistent();
    expectStatus(await owner.post(`/api/v1/nodes/${ids[2]}/archive`, { reason: 'stale' }), 200);
    await expectConsistent();
    expectStatus(await owner.post(`/api/v1/nodes/${ids[2]}/restore`, {}), 200);
    await expectConsistent();
    expectStatus(await owner.post('/api/auth/stepup', { password: PASSWORD }), 200);
    expectStatus(await owner.delete(`/api/v1/nodes/${ids[3]}`), 200);
    await expectConsistent();
    expect(await counted('alpha3', 'secret')).toBe(0);

    const job = await postJson(
      owner,
      'imported',
      Array.from({ length: 30 }, (_, i) => ({ path: `batch/i${i}.md`, content: page(i % 2 ? 'internal' : 'public', `zephyrine import${i} quillwort`) })),
    );
    expect([200, 202], job.text).toContain(job.status);
    expect((await finished(owner, job.body)).status).toBe('done');
    await expectConsistent();
    expect(await counted('quillwort', 'public')).toBeGreaterThanOrEqual(15);
  });

  it('six writers creating and rewriting pages at once leave the counts exact', async () => {
    let next = 0;
    await Promise.all(
      Array.from({ length: 6 }, async (_, w) => {
        while (next < 60) {
          const n = next++;
          const created = await owner.post('/api/v1/nodes', {
            path: `many/w${w}-${n}.md`,
            content: page('internal', `zephyrine writer${w} page${n} common words`),
          });
          expectStatus(created, 201);
          if (n % 3 === 0) {
            const again = await owner.put(`/api/v1/nodes/${created.body.id}`, { content: page('public', `zephyrine writer${w} rewritten${n}`) });
            expectStatus(again, 200);
          }
        }
      }),
    );
    await expectConsistent();
  });

  // Migration 029: writes append their changes, folds move them into term_stats. Folds run here
  // without pause beside the writers, the service's own (one node at a time, by its lock) and two
  // more at once that bypass the lock, as two nodes' rounds could overlap a lock's release: each
  // pending row is folded once, and what search counts meanwhile never goes below a fresh count's.
  it('folds running all the time beside six writers, also two at once past the lock, leave the counts exact; search counts stay exact meanwhile', async () => {
    let writing = true;
    let folds = 0;
    const folder = async (direct: boolean) => {
      while (writing) {
        if (direct) await foldTermStats(s.ctx.store.db);
        else await s.termStats.fold();
        folds++;
      }
    };
    const before = await counted('foldwort', 'secret');
    const running = [folder(false), folder(true), folder(true)];
    let next = 0;
    await Promise.all(
      Array.from({ length: 6 }, async (_, w) => {
        while (next < 60) {
          const n = next++;
          const created = await owner.post('/api/v1/nodes', { path: `fold/w${w}-${n}.md`, content: page('internal', `foldwort writer${w} page${n}`) });
          expectStatus(created, 201);
          // Every page holds the word: the count search reads is exactly the pages written so far.
          expect(await counted('foldwort', 'secret')).toBeGreaterThanOrEqual(n + 1 - 6 + (before ?? 0));
          if (n % 4 === 0) expectStatus(await owner.put(`/api/v1/nodes/${created.body.id}`, { content: page('confidential', `foldwort again${n}`) }), 200);
        }
      }),
    );
    writing = false;
    await Promise.all(running);
    expect(folds).toBeGreaterThan(3);
    // Two sections a page hold the word (the page's and the "More" section).
    expect(await counted('foldwort', 'secret')).toBe((before ?? 0) + 60 * 2);
    await expectConsistent();
  });
});

/**
 * Migration 016 on a deployment that already has pages: every section gets its level, and on
 * PostgreSQL the word statistics are counted from the sections, so search ranks as before.
 */
describe.each(testEngines())('migration 016 on an existing deployment (%s)', (engine) => {
  it('sets every section’s level and counts the words already written', async () => {
    const tdb = await createTestDatabase(engine);
    try {
      const first = await startServerOn(tdb);
      const h = await signupHuman(first.url, 'Before');
      for (const [path, level, extra] of [
        ['up/pub.md', 'public', ''],
        ['up/conf.md', 'confidential', ''],
        ['up/blocks.md', 'internal', '\n::: secret\nbrindlewort hidden\n:::\n'],
      ] as const) {
        const r = await h.client.post('/api/v1/nodes', { path, content: `---\nsensitivity: ${level}\n---\n# ${level}\n\nbrindlewort in ${level}.\n${extra}` });
        expectStatus(r, 201);
      }
      await first.close();

      // Back to the schema before migration 016.
      const store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
      if (engine === 'postgres') {
        // Migration 029 after it goes too: its view reads term_stats.
        await sql`drop view term_counts`.execute(store.db);
        await sql`drop table term_stats_pending`.execute(store.db);
        await sql`delete from schema_migrations where name = '029_term_stats_pending'`.execute(store.db);
        await sql`drop table term_stats`.execute(store.db);
      }
      await sql`alter table page_sections drop column level`.execute(store.db);
      await sql`delete from schema_migrations where name = '016_term_stats'`.execute(store.db);
      await store.close();

      const second = await startServerOn(tdb);
      try {
        const levels = (
          await sql<{ path: string; block_level: string | null; level: number }>`select p.path, s.block_level, s.level
            from page_sections s join pages p on p.id = s.page_id order by p.path, s.ord`.execute(second.ctx.store.db)
        ).rows;
        expect(levels).toEqual([
          { path: 'up/blocks.md', block_level: null, level: 1 },
          { path: 'up/blocks.md', block_level: 'secret', level: 3 },
          { path: 'up/conf.md', block_level: null, level: 2 },
          { path: 'up/pub.md', block_level: null, level: 0 },
        ]);
        if (engine === 'postgres') {
          const counted = async (ceiling: 'public' | 'internal' | 'confidential' | 'secret') =>
            (await termDocCounts(second.ctx.store, ['brindlewort'], { workspaceId: h.workspace.id, ceiling })).get('brindlewort');
          expect([await counted('public'), await counted('internal'), await counted('confidential'), await counted('secret')]).toEqual([1, 2, 3, 4]);
        }
        const c = new Client(second.url);
        c.cookies = h.client.cookies;
        const r = await c.get('/api/v1/search?q=brindlewort&mode=fts');
        expectStatus(r, 200);
        expect(r.body.results.map((x: { path: string }) => x.path).sort()).toEqual(['up/blocks.md', 'up/conf.md', 'up/pub.md']);
      } finally {
        await second.close();
      }
    } finally {
      await tdb.cleanup();
    }
  }, 60_000);
  it.runIf(engine === 'postgres')(
    'migration 025 counts the words of the sections already written, and searches use them',
    async () => {
      const tdb = await createTestDatabase(engine);
      try {
        const first = await startServerOn(tdb);
        const h = await signupHuman(first.url, 'Tokens');
        for (const [path, body] of [
          ['tk/a.md', 'One two three four.'],
          ['tk/b.md', 'Five six, seven-eight nine!'],
        ] as const) {
          expectStatus(await h.client.post('/api/v1/nodes', { path, content: `# ${path}\n\n${body}\n` }), 201);
        }
        await first.close();

        // Back to the schema before migration 025.
        const store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
        await sql`alter table page_sections drop column tokens`.execute(store.db);
        await sql`drop function cv_section_tokens(text, text, text)`.execute(store.db);
        // Migration 029 after it goes too (its view reads term_stats): what was pending is folded first.
        await foldTermStats(store.db);
        await sql`drop view term_counts`.execute(store.db);
        await sql`drop table term_stats_pending`.execute(store.db);
        await sql`delete from schema_migrations where name = '029_term_stats_pending'`.execute(store.db);
        await sql`delete from term_stats where lexeme = ' '`.execute(store.db);
        await sql`alter table term_stats alter column docs type integer`.execute(store.db);
        await sql`delete from schema_migrations where name = '025_section_tokens'`.execute(store.db);
        await store.close();

        const second = await startServerOn(tdb);
        try {
          const db = second.ctx.store.db;
          // Title and heading `tk/a.md` three words each, the text (heading line included) seven (eight for b).
          const tokens = (
            await sql<{ path: string; tokens: number }>`select p.path, s.tokens from page_sections s join pages p on p.id = s.page_id order by 1`.execute(db)
          ).rows;
          expect(tokens).toEqual([
            { path: 'tk/a.md', tokens: 13 },
            { path: 'tk/b.md', tokens: 14 },
          ]);
          const sum = await sql<{ docs: string }>`select sum(docs) as docs from term_counts where workspace_id = ${h.workspace.id} and lexeme = ' '`.execute(
            db,
          );
          expect(sum.rows.map((r) => Number(r.docs))).toEqual([27]);
          const counts = await termDocCounts(second.ctx.store, ['five'], { workspaceId: h.workspace.id, ceiling: 'secret' });
          expect(counts.avgTokens).toBe(13.5);
          // A write after it keeps the sum.
          const c = new Client(second.url);
          c.cookies = h.client.cookies;
          expectStatus(await c.post('/api/v1/nodes', { path: 'tk/c.md', content: '# C\n\nTen.\n' }), 201);
          const after = await sql<{ docs: string }>`select sum(docs) as docs from term_counts where workspace_id = ${h.workspace.id} and lexeme = ' '`.execute(
            db,
          );
          expect(after.rows.map((r) => Number(r.docs))).toEqual([27 + 4]);
          const r = await c.get('/api/v1/search?q=seven&mode=fts');
          expectStatus(r, 200);
          expect(r.body.results.map((x: { path: string }) => x.path)).toEqual(['tk/b.md']);
        } finally {
          await second.close();
        }
      } finally {
        await tdb.cleanup();
      }
    },
    60_000,
  );
});
