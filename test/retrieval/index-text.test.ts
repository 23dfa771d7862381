import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { keywordTable } from '../../src/retrieval/keyword-index.js';
import { LEVELS } from '../../src/policy/sensitivity.js';
import { openStore } from '../../src/store/db.js';
import { createTestDatabase, testEngines } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { Client, signupHuman, startServerOn } from '../support/server.js';

/**
 * Migration 022 (issues 18 and 20): the keyword index reads a section's text as a query reads
 * the user's words: NFKC-folded (a ligature, full-width letters, a superscript), and split at
 * punctuation (PostgreSQL's parser kept `/etc/passwd`, `nsswitch.conf`, `user@example.com`
 * whole and dropped `<tag>`-shaped words, so their parts were never found there).
 */
const PAGE = [
  '# Zorb notes',
  '',
  'The ﬂorbix ﬁle lives in /etc/zorbwd and zorbswitch.conf; run <grindle> as admin@quixotica.example',
  'from https://plonkhost.example/trellium/path?x=1, version 4.17.32 of Ｗｉｄｇｅｔｚ, and m² of qarbon_fibre.',
  '',
].join('\n');

/** Query → found. Each word appears only inside one of PAGE's compounds or compatibility forms. */
const FOUND = [
  'florbix',
  'file florbix',
  'zorbwd',
  'etc zorbwd',
  '/etc/zorbwd',
  'zorbswitch',
  'zorbswitch.conf',
  'grindle',
  'quixotica',
  'plonkhost',
  'trellium',
  'widgetz',
  'qarbon',
  'fibre qarbon',
];

describe.each(testEngines())('the keyword index reads text as queries do (%s)', (engine) => {
  const fts = async (c: Client, q: string) => {
    const r = await c.get(`/api/v1/search?q=${encodeURIComponent(q)}&mode=fts`);
    expectStatus(r, 200);
    return (r.body.results as { path: string }[]).map((x) => x.path);
  };

  it('words inside paths, hosts, addresses, tags and compatibility characters are found; a ligature in a query finds plain letters', async () => {
    const tdb = await createTestDatabase(engine);
    const s = await startServerOn(tdb);
    try {
      const h = await signupHuman(s.url, 'Text');
      expectStatus(await h.client.post('/api/v1/nodes', { path: 'zorb/notes.md', content: PAGE }), 201);
      expectStatus(await h.client.post('/api/v1/nodes', { path: 'zorb/plain.md', content: '# Plain\n\nThe snorfield office.\n' }), 201);
      for (const q of FOUND) expect(await fts(h.client, q), q).toEqual(['zorb/notes.md']);
      // The query side folds too: a ligature or full-width letters typed find the plain word.
      expect(await fts(h.client, 'snorﬁeld')).toEqual(['zorb/plain.md']);
      expect(await fts(h.client, 'ｓｎｏｒｆｉｅｌｄ')).toEqual(['zorb/plain.md']);
      // Hybrid and the bundle read the same index.
      const hy = await h.client.get(`/api/v1/search?q=zorbwd&mode=hybrid`);
      expectStatus(hy, 200);
      expect((hy.body.results as { path: string }[])[0]?.path).toBe('zorb/notes.md');
      // Still nothing for a word the page does not hold.
      expect(await fts(h.client, 'zorbwdx')).toEqual([]);
    } finally {
      await s.close();
      await tdb.cleanup();
    }
  }, 60_000);

  it('migration 022 on an existing deployment: pages indexed the old way are found after the upgrade', async () => {
    const tdb = await createTestDatabase(engine);
    try {
      const first = await startServerOn(tdb);
      const h = await signupHuman(first.url, 'Upgrade');
      expectStatus(await h.client.post('/api/v1/nodes', { path: 'zorb/notes.md', content: PAGE }), 201);
      await first.close();

      // Back to the index as it was before migration 022.
      const store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
      if (engine === 'postgres') {
        await sql`alter table page_sections drop column tsv`.execute(store.db);
        await sql`alter table page_sections add column tsv tsvector generated always as (
          setweight(to_tsvector('english', cv_fold(title)), 'A') || setweight(to_tsvector('english', cv_fold(heading)), 'B') ||
          to_tsvector('english', cv_fold(text))) stored`.execute(store.db);
        await sql`create index page_sections_tsv on page_sections using gin (tsv) with (gin_pending_list_limit = 256)`.execute(store.db);
        await sql`drop function cv_section_tsv(text, text, text)`.execute(store.db);
        await sql`drop function cv_index_text(text, integer)`.execute(store.db);
        // Counted again from the old lexemes, as before migration 029 (nothing pending).
        await sql`delete from term_stats_pending`.execute(store.db);
        await sql`delete from term_stats`.execute(store.db);
        await sql`insert into term_stats (workspace_id, lexeme, level, docs)
          select s.workspace_id, x.lexeme, s.level, count(*) from page_sections s cross join unnest(tsvector_to_array(s.tsv) || '{""}'::text[]) as x(lexeme)
          group by 1, 2, 3`.execute(store.db);
      } else {
        const ws = (await sql<{ id: string }>`select id from workspaces`.execute(store.db)).rows.map((r) => r.id);
        for (const id of ws) {
          for (const [i, level] of LEVELS.entries()) {
            const t = keywordTable(id, level);
            await sql`delete from ${t} where rowid in (select id from page_sections)`.execute(store.db);
            await sql`insert into ${t} (rowid, title, heading, text) select id, title, heading, text from page_sections where level <= ${i}`.execute(store.db);
          }
        }
        await sql`update maintenance_jobs set finished_at = ${new Date().toISOString()} where name = 'reindex_pages'`.execute(store.db);
      }
      // Proof the old index misses them (else the upgrade below proves nothing).
      if (engine === 'postgres') {
        const n = await sql<{ n: number }>`select count(*)::int as n from page_sections
          where tsv @@ plainto_tsquery('english', 'zorbwd') or tsv @@ plainto_tsquery('english', 'florbix')`.execute(store.db);
        expect(n.rows[0]?.n).toBe(0);
      } else {
        const ws = (await sql<{ id: string }>`select id from workspaces`.execute(store.db)).rows[0]!.id;
        const t = keywordTable(ws, 'secret');
        const n = await sql<{ n: number }>`select count(*) as n from ${t} where ${t} match 'florbix OR widgetz'`.execute(store.db);
        expect(Number(n.rows[0]?.n)).toBe(0);
      }
      await sql`delete from schema_migrations where name = '022_index_text'`.execute(store.db);
      await store.close();

      const second = await startServerOn(tdb);
      try {
        const c = new Client(second.url);
        c.cookies = h.client.cookies;
        if (engine === 'sqlite') await reindexFinished(c);
        for (const q of FOUND) expect(await fts(c, q), q).toEqual(['zorb/notes.md']);
        // Word statistics were counted again from the new lexemes: a word once inside a compound has its count.
        if (engine === 'postgres') {
          const n = await sql<{ docs: number }>`select sum(docs)::int as docs from term_counts where lexeme = 'zorbwd'`.execute(second.ctx.store.db);
          expect(n.rows[0]?.docs).toBe(1);
        }
      } finally {
        await second.close();
      }
    } finally {
      await tdb.cleanup();
    }
  }, 90_000);
});

async function reindexFinished(c: Client): Promise<void> {
  const end = Date.now() + 30_000;
  for (;;) {
    const r = await c.get('/readyz');
    if (r.body.reindex?.state === 'finished') return;
    if (Date.now() > end) throw new Error(`re-index job did not finish: ${JSON.stringify(r.body.reindex)}`);
    await new Promise((res) => setTimeout(res, 25));
  }
}

describe.each(testEngines())('sections too large for a PostgreSQL tsvector (%s)', (engine) => {
  it('a page of 30,000 distinct hashes is written and found by its first ones; every word of an ordinary page still counts', async () => {
    const tdb = await createTestDatabase(engine);
    const s = await startServerOn(tdb);
    try {
      const h = await signupHuman(s.url, 'Big');
      // 30,000 distinct 32-letter words: 1.09 MB as a tsvector (the limit is 1 MB), under the page limit.
      const words = Array.from({ length: 30_000 }, (_, i) => createHash('md5').update(`cv-${i}`).digest('hex'));
      const r = await h.client.post('/api/v1/nodes', { path: 'big/hashes.md', content: `# Checksums\n\n${words.join(' ')}\n` });
      expectStatus(r, 201);
      const found = async (q: string) => {
        const x = await h.client.get(`/api/v1/search?q=${encodeURIComponent(q)}&mode=fts`);
        expectStatus(x, 200);
        return (x.body.results as { path: string }[]).map((y) => y.path);
      };
      expect(await found(words[0]!)).toEqual(['big/hashes.md']);
      expect(await found('checksums')).toEqual(['big/hashes.md']);
      // NFKC lengthens U+FDFA eighteenfold: written, and its words found.
      expectStatus(await h.client.post('/api/v1/nodes', { path: 'big/expands.md', content: `# Expands\n\n${'\uFDFA '.repeat(100_000)}\n` }), 201);
      expect(await found('عليه')).toEqual(['big/expands.md']);
      // A rewrite of the large page back to ordinary size is indexed whole again.
      const id = (r.body as { id: string }).id;
      expectStatus(await h.client.put(`/api/v1/nodes/${id}`, { content: `# Checksums\n\nNone left but ${words[29_999]}.\n` }), 200);
      expect(await found(words[29_999]!)).toEqual(['big/hashes.md']);
    } finally {
      await s.close();
      await tdb.cleanup();
    }
  }, 120_000);
});

describe.each(testEngines())('long titles, tags and link targets (%s)', (engine) => {
  it('a 3 kB title is written and found, a link to a 3 kB name resolves to nothing, a tag over 200 characters is a 400', async () => {
    const tdb = await createTestDatabase(engine);
    const s = await startServerOn(tdb);
    try {
      const h = await signupHuman(s.url, 'Long');
      const words = Array.from({ length: 400 }, (_, i) => createHash('md5').update(`t-${i}`).digest('hex').slice(0, 8));
      const title = words.join(' ');
      expect(title.length).toBeGreaterThan(3000);
      // Migration 023: no B-tree over titles and tags on PostgreSQL (its rows hold at most 2,704 bytes).
      const idx = await sql<{
        n: number;
      }>`select count(*) as n from ${sql.raw(engine === 'postgres' ? 'pg_indexes where indexname' : 'sqlite_master where name')} = 'pages_retrieval_filter'`.execute(
        s.ctx.store.db,
      );
      expect(Number(idx.rows[0]?.n)).toBe(engine === 'postgres' ? 0 : 1);

      const a = await h.client.post('/api/v1/nodes', { path: 'long/title.md', content: `---\ntitle: ${title}\n---\nBody.\n` });
      expectStatus(a, 201);
      expect((a.body as { title: string }).title).toBe(title);
      const b = await h.client.post('/api/v1/nodes', { path: 'long/heading.md', content: `# ${title} again\n\nBody [[${title}]] and [[long/title]].\n` });
      expectStatus(b, 201);
      const found = await h.client.get(`/api/v1/search?q=${words[0]}&mode=fts`);
      expectStatus(found, 200);
      expect((found.body.results as { path: string }[]).map((r) => r.path).sort()).toEqual(['long/heading.md', 'long/title.md']);
      // The link by the long title names no page (keys are bounded); the one by path does.
      const back = await h.client.get(`/api/v1/nodes/${(a.body as { id: string }).id}/backlinks`);
      expectStatus(back, 200);
      expect(JSON.stringify(back.body)).toContain('long/heading.md');

      const tag = 'x'.repeat(201);
      const c = await h.client.post('/api/v1/nodes', { path: 'long/tagged.md', content: `---\ntags: [ok, ${tag}]\n---\nBody.\n` });
      expectStatus(c, 400);
      expect(c.body.error.code).toBe('invalid_frontmatter');
      expect(c.body.error.message).toContain('200 characters');
      expectStatus(await h.client.post('/api/v1/nodes', { path: 'long/tagged.md', content: `---\ntags: [ok, ${'x'.repeat(200)}]\n---\nBody.\n` }), 201);
    } finally {
      await s.close();
      await tdb.cleanup();
    }
  }, 60_000);
});
