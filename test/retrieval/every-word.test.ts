import { spawnSync } from 'node:child_process';
import { sql } from 'kysely';
import { foldTermStats } from '../../src/retrieval/term-stats-fold.js';
import { describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/db.js';
import { createTestDatabase, testEngines } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { Client, signupHuman, startServerOn } from '../support/server.js';

/**
 * Migration 026 (issue 20): PostgreSQL's keyword index keeps every word, as SQLite's does. Its
 * `english` configuration dropped stop words (`between`, `who`, `with`) from the index and from
 * queries: a query of such words found nothing there, and a longer one was ranked without them.
 * And a `pg_dump` of a deployment restores with its sections (the column's functions find each
 * other whatever search path `pg_restore` sets).
 */
const PAGES: Record<string, string> = {
  'music/the-who.md': '# The Who\n\nAn English rock band formed in London in 1964.\n',
  'music/let-it-be.md': '# Let It Be\n\nThe twelfth album, released in 1970.\n',
  'io/sendfile.md': '# Sendfile\n\nCopies data between one file descriptor and another.\n',
  'io/pipes.md': '# Pipes\n\nA pipe carries data from a writer to a reader.\n',
};

async function fts(c: Client, q: string): Promise<string[]> {
  const r = await c.get(`/api/v1/search?q=${encodeURIComponent(q)}&mode=fts`);
  expectStatus(r, 200);
  return (r.body.results as { path: string }[]).map((x) => x.path);
}

async function writePages(c: Client): Promise<void> {
  for (const [path, content] of Object.entries(PAGES)) expectStatus(await c.post('/api/v1/nodes', { path, content }), 201);
}

/** Queries of words the `english` configuration calls stop words, and what they find. */
const STOP_WORD_QUERIES: [string, string[]][] = [
  ['who', ['music/the-who.md']],
  // `the` is on both album pages; the one holding both words comes first.
  ['the who', ['music/the-who.md', 'music/let-it-be.md']],
  ['let it be', ['music/let-it-be.md']],
  ['between', ['io/sendfile.md']],
];

describe.each(testEngines())('every word is indexed and searched (%s)', (engine) => {
  it('a query of stop words finds the pages holding them; a stop word weighs in a longer query', async () => {
    const tdb = await createTestDatabase(engine);
    const s = await startServerOn(tdb);
    try {
      const h = await signupHuman(s.url, 'Words');
      await writePages(h.client);
      for (const [q, want] of STOP_WORD_QUERIES) expect(await fts(h.client, q), q).toEqual(want);
      // Both pages hold `data`; only one holds `between`.
      expect((await fts(h.client, 'data between'))[0]).toBe('io/sendfile.md');
      const hy = await h.client.get(`/api/v1/search?q=${encodeURIComponent('the who')}&mode=hybrid`);
      expectStatus(hy, 200);
      expect((hy.body.results as { path: string }[])[0]?.path).toBe('music/the-who.md');
      if (engine === 'postgres') {
        // The word statistics count stop words like any word.
        const n = await sql<{ docs: number }>`select sum(docs)::int as docs from term_counts where lexeme = 'between'`.execute(s.ctx.store.db);
        expect(n.rows[0]?.docs).toBe(1);
      }
    } finally {
      await s.close();
      await tdb.cleanup();
    }
  }, 60_000);
});

const pg = testEngines().includes('postgres');

describe.runIf(pg)('migration 026 on PostgreSQL', () => {
  it('a deployment indexed without stop words finds them after the upgrade', async () => {
    const tdb = await createTestDatabase('postgres');
    try {
      const first = await startServerOn(tdb);
      const h = await signupHuman(first.url, 'Upgrade');
      await writePages(h.client);
      await first.close();

      // Back to the index as it was before migration 026.
      const store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
      await sql`create or replace function cv_section_tsv(title text, heading text, body text) returns tsvector language plpgsql immutable parallel safe as $tsv$
        begin
          return setweight(to_tsvector('english', cv_index_text(coalesce(title, ''), 2147483647)), 'A') ||
            setweight(to_tsvector('english', cv_index_text(coalesce(heading, ''), 2147483647)), 'B') ||
            to_tsvector('english', cv_index_text(coalesce(body, ''), 2147483647));
        end
        $tsv$`.execute(store.db);
      await sql`alter table page_sections drop column tsv`.execute(store.db);
      await sql`alter table page_sections add column tsv tsvector generated always as (cv_section_tsv(title, heading, text)) stored`.execute(store.db);
      await sql`create index page_sections_tsv on page_sections using gin (tsv) with (gin_pending_list_limit = 256)`.execute(store.db);
      await sql`drop text search configuration cv_english`.execute(store.db);
      await sql`drop text search dictionary cv_english_stem`.execute(store.db);
      // What was pending is folded first: before migration 029 the writes moved term_stats themselves.
      await foldTermStats(store.db);
      await sql`delete from term_stats where lexeme in ('between', 'who')`.execute(store.db);
      // Proof the old index lacks them (else the upgrade below proves nothing).
      const before = await sql<{ n: number }>`select count(*)::int as n from page_sections where tsv @@ to_tsquery('simple', 'between | who')`.execute(
        store.db,
      );
      expect(before.rows[0]?.n).toBe(0);
      await sql`delete from schema_migrations where name = '026_pg_every_word'`.execute(store.db);
      await store.close();

      const second = await startServerOn(tdb);
      try {
        const c = new Client(second.url);
        c.cookies = h.client.cookies;
        for (const [q, want] of STOP_WORD_QUERIES) expect(await fts(c, q), q).toEqual(want);
        const n = await sql<{ lexeme: string; docs: number }>`select lexeme, sum(docs)::int as docs from term_counts
          where lexeme in ('between', 'who', '') group by lexeme order by lexeme`.execute(second.ctx.store.db);
        expect(n.rows).toEqual([
          { lexeme: '', docs: Object.keys(PAGES).length },
          { lexeme: 'between', docs: 1 },
          { lexeme: 'who', docs: 1 },
        ]);
      } finally {
        await second.close();
      }
    } finally {
      await tdb.cleanup();
    }
  }, 90_000);

  it('pg_dump and pg_restore into an empty database keep every section: the copy serves searches and takes writes', async () => {
    const have = spawnSync('pg_dump', ['--version'], { encoding: 'utf8' });
    if (have.status !== 0) throw new Error('pg_dump is not installed (Debian: postgresql-client); .ci/run installs it');
    const src = await createTestDatabase('postgres');
    const dst = await createTestDatabase('postgres');
    try {
      const first = await startServerOn(src);
      const h = await signupHuman(first.url, 'Dump');
      await writePages(h.client);
      const sections = await sql<{ n: number }>`select count(*)::int as n from page_sections`.execute(first.ctx.store.db);
      await first.close();

      const dump = spawnSync('pg_dump', ['-Fc', '-d', src.databaseUrl!], { maxBuffer: 1 << 28 });
      expect(dump.status, dump.stderr?.toString()).toBe(0);
      const restore = spawnSync('pg_restore', ['--exit-on-error', '-d', dst.databaseUrl!], { input: dump.stdout, encoding: 'buffer' });
      expect(restore.status, restore.stderr.toString()).toBe(0);

      const copy = await startServerOn(dst);
      try {
        const n = await sql<{ n: number }>`select count(*)::int as n from page_sections`.execute(copy.ctx.store.db);
        expect(n.rows[0]?.n).toBe(sections.rows[0]?.n);
        const c = new Client(copy.url);
        c.cookies = h.client.cookies;
        expect(await fts(c, 'sendfile')).toEqual(['io/sendfile.md']);
        expect(await fts(c, 'between')).toEqual(['io/sendfile.md']);
        expectStatus(await c.post('/api/v1/nodes', { path: 'io/splice.md', content: '# Splice\n\nMoves data between two file descriptors.\n' }), 201);
        expect((await fts(c, 'splice')).sort()).toEqual(['io/splice.md']);
      } finally {
        await copy.close();
      }
    } finally {
      await src.cleanup();
      await dst.cleanup();
    }
  }, 90_000);
});
