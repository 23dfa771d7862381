import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server.js';
import { openStore } from '../../src/store/db.js';
import { createTestDatabase, testEngines } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { Client, signupHuman, startServerOn } from '../support/server.js';

/**
 * Migration 021: `page_sections.archived` says whether the section's page is archived, so keyword
 * search cuts to the newest matches it will return without joining pages (an attack found
 * archived pages' sections crowding active ones out, test/http/attack-session-h.test.ts). Every
 * write keeps it, and the migration sets it for the sections already written.
 */
describe.each(testEngines())('sections know their page is archived (%s)', (engine) => {
  const archivedByPath = async (s: RunningServer) =>
    Object.fromEntries(
      (
        await sql<{ path: string; archived: number }>`select p.path, max(s.archived) as archived
          from page_sections s join pages p on p.id = s.page_id group by p.path order by p.path`.execute(s.ctx.store.db)
      ).rows.map((r) => [r.path, Number(r.archived)]),
    );
  const page = (title: string, state?: 'archived') =>
    `---\ntitle: ${title}\n${state ? 'state: archived\narchived_reason: manual\n' : ''}---\n# ${title}\n\nThe marrowick ${title}.\n\n## More\n\nMore marrowick.\n`;

  it('kept by every write, set by the migration on an existing deployment, and searched by', async () => {
    const tdb = await createTestDatabase(engine);
    try {
      const first = await startServerOn(tdb);
      const h = await signupHuman(first.url, 'Archive');
      const create = async (path: string, content: string) => {
        const r = await h.client.post('/api/v1/nodes', { path, content });
        expectStatus(r, 201);
        return r.body as { id: string };
      };
      await create('ar/active.md', page('active'));
      await create('ar/born-archived.md', page('born', 'archived'));
      const later = await create('ar/later.md', page('later'));
      const back = await create('ar/back.md', page('back', 'archived'));
      expectStatus(await h.client.put(`/api/v1/nodes/${later.id}`, { content: page('later', 'archived') }), 200);
      expectStatus(await h.client.put(`/api/v1/nodes/${back.id}`, { content: page('back') }), 200);
      const expected = { 'ar/active.md': 0, 'ar/back.md': 0, 'ar/born-archived.md': 1, 'ar/later.md': 1 };
      expect(await archivedByPath(first)).toEqual(expected);
      await first.close();

      // Back to the schema before migration 021: the column is gone, the migration not applied
      // (nor 027, SQLite's index of archived sections, which reads the column).
      const store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
      if (engine === 'sqlite') await sql`drop index page_sections_archived`.execute(store.db);
      await sql`alter table page_sections drop column archived`.execute(store.db);
      await sql`delete from schema_migrations where name in ('021_section_archived', '027_archived_sections')`.execute(store.db);
      await store.close();

      const second = await startServerOn(tdb);
      try {
        expect(await archivedByPath(second)).toEqual(expected);
        if (engine === 'sqlite') {
          // Keyword search checks a match against the index of archived sections (migration
          // 027), not the section's whole row: the plan names it.
          const idx = await sql<{ id: number }>`select id from page_sections indexed by page_sections_archived where archived = 1 order by id`.execute(
            second.ctx.store.db,
          );
          const all = await sql<{ id: number }>`select id from page_sections where archived = 1 order by id`.execute(second.ctx.store.db);
          expect(idx.rows.length).toBeGreaterThan(0);
          expect(idx.rows).toEqual(all.rows);
        }
        const c = new Client(second.url);
        c.cookies = h.client.cookies;
        const paths = async (q: string) => {
          const r = await c.get(q);
          expectStatus(r, 200);
          return (r.body.results as { path: string }[]).map((x) => x.path).sort();
        };
        expect(await paths('/api/v1/search?q=marrowick&mode=fts')).toEqual(['ar/active.md', 'ar/back.md']);
        expect(await paths('/api/v1/search?q=marrowick&mode=fts&include_archived=true')).toEqual([
          'ar/active.md',
          'ar/back.md',
          'ar/born-archived.md',
          'ar/later.md',
        ]);
      } finally {
        await second.close();
      }
    } finally {
      await tdb.cleanup();
    }
  }, 60_000);
});
