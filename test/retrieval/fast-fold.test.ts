import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/db.js';
import { FOLD_FROM, FOLD_TO } from '../../src/store/migrations/004_retrieval.js';
import { createTestDatabase, testEngines } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { Client, signupHuman, startServerOn } from '../support/server.js';

/**
 * Issue 18, migration 017: PostgreSQL's keyword column folds diacritics with `cv_fold`, which
 * translates one Unicode block at a time and only when the text holds a letter of it, instead of
 * one translate() over all ~700 letters (13 times the cost of to_tsvector, inside every write's
 * lock). It must fold exactly as before: the same lexemes, so the word statistics and every
 * query's folding (src/retrieval/keyword.ts foldPg) stay right.
 */
const hasPg = testEngines().includes('postgres');

/** The column's expression as migration 004 wrote it, to compare against. */
const oldTsv = (col: (name: string) => string) =>
  `setweight(to_tsvector('english', ${col('title')}), 'A') || setweight(to_tsvector('english', ${col('heading')}), 'B') || to_tsvector('english', ${col('text')})`;
const translated = (name: string) => `translate(${name}, $1, $2)`;

describe.skipIf(!hasPg)('cv_fold folds as the single translate did (postgres)', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let c: pg.Client;

  beforeAll(async () => {
    db = await createTestDatabase('postgres');
    const store = await openStore({ dataDir: db.dataDir, databaseUrl: db.databaseUrl });
    await store.close();
    c = new pg.Client({ connectionString: db.databaseUrl });
    await c.connect();
  });
  afterAll(async () => {
    await c?.end();
    await db?.cleanup();
  });

  const both = async (texts: string[]) =>
    (
      await c.query<{ t: string; fast: string; slow: string }>(`select t, cv_fold(t) as fast, translate(t, $1, $2) as slow from unnest($3::text[]) as u(t)`, [
        FOLD_FROM,
        FOLD_TO,
        texts,
      ])
    ).rows;

  it('every folded letter, alone and together, becomes the same ASCII letter', async () => {
    const letters = [...FOLD_FROM];
    const rows = await both([FOLD_FROM, ...letters, letters.reverse().join(' ')]);
    for (const r of rows) expect(r.fast, `cv_fold(${r.t})`).toBe(r.slow);
    expect(rows[0]!.fast).toBe(FOLD_TO);
    expect(rows[0]!.fast).toMatch(/^[A-Za-z]+$/);
  });

  it('text outside the folded letters is left as it is, whatever else it holds', async () => {
    const texts = [
      '',
      'plain ASCII text, nothing to fold',
      '“Curly quotes” — and an ellipsis…',
      'Ωμέγα and Кириллица and 漢字 and 🙂',
      'ɐ ɑ ʃ (IPA, just past Latin Extended-B) and ἀ ἁ (Greek Extended, just past Latin Extended Additional)',
      'Ÿ ÿ ſ Ǿ ǿ Ḁ ỹ Ỿ ỿ',
    ];
    for (const r of await both(texts)) expect(r.fast, `cv_fold(${r.t})`).toBe(r.slow);
  });

  it('random mixtures of every kind of letter fold the same', async () => {
    const pool = [...FOLD_FROM, ...'abcXYZ019 .,;-', ...'Ωμ漢字🙂“”…ɐἀ€ß', ...'ÆæŒœĲĳ'];
    let seed = 18;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    const texts = Array.from({ length: 300 }, () => Array.from({ length: 1 + Math.floor(next() * 80) }, () => pool[Math.floor(next() * pool.length)]).join(''));
    const rows = await both(texts);
    expect(rows).toHaveLength(300);
    for (const r of rows) expect(r.fast, `cv_fold(${r.t})`).toBe(r.slow);
  });
});

describe.skipIf(!hasPg)('migration 017 on an existing deployment (postgres)', () => {
  it('recomputes the keyword column with the same lexemes: search and word statistics as before', async () => {
    const tdb = await createTestDatabase('postgres');
    try {
      const first = await startServerOn(tdb);
      const h = await signupHuman(first.url, 'Before');
      for (const [path, content] of [
        ['fold/cafe.md', '# Café Müller\n\n## Crème brûlée\n\nThe façade of the Ångström café in Łódź.\n'],
        ['fold/plain.md', '# Plain\n\nNothing accented here, only “quotes”.\n'],
      ] as const) {
        expectStatus(await h.client.post('/api/v1/nodes', { path, content }), 201);
      }
      await first.close();

      // Back to the column of migration 004 (a generated column takes no parameters: literals).
      const c = new pg.Client({ connectionString: tdb.databaseUrl });
      await c.connect();
      try {
        const lit = (s: string) => `'${s.replace(/'/g, "''")}'`;
        await c.query(`alter table page_sections drop column if exists tsv`);
        await c.query(
          `alter table page_sections add column tsv tsvector generated always as (${oldTsv((n) => `translate(${n}, ${lit(FOLD_FROM)}, ${lit(FOLD_TO)})`)}) stored`,
        );
        await c.query(`create index page_sections_tsv on page_sections using gin (tsv)`);
        await c.query(`drop function cv_fold(text)`);
        await c.query(`delete from schema_migrations where name = '017_fast_fold'`);
        const before = (await c.query<{ id: string; tsv: string }>(`select id::text, tsv::text from page_sections order by id`)).rows;
        expect(before.some((r) => r.tsv.includes("'cafe'"))).toBe(true);

        const second = await startServerOn(tdb);
        try {
          const after = (await c.query<{ id: string; tsv: string }>(`select id::text, tsv::text from page_sections order by id`)).rows;
          expect(after).toEqual(before);
          const expr = (
            await c.query<{ e: string }>(
              `select pg_get_expr(adbin, adrelid) as e from pg_attrdef d join pg_attribute a on a.attrelid = d.adrelid and a.attnum = d.adnum where a.attname = 'tsv' and d.adrelid = 'page_sections'::regclass`,
            )
          ).rows[0]!.e;
          expect(expr).toContain('cv_fold');
          const again = (await c.query<{ ok: boolean }>(`select bool_and(tsv = (${oldTsv(translated)})) as ok from page_sections`, [FOLD_FROM, FOLD_TO]))
            .rows[0]!;
          expect(again.ok).toBe(true);
          const index = await c.query(`select 1 from pg_indexes where indexname = 'page_sections_tsv'`);
          expect(index.rowCount).toBe(1);

          const reader = new Client(second.url);
          reader.cookies = h.client.cookies;
          for (const q of ['cafe', 'café', 'facade', 'angstrom', 'creme brulee']) {
            const r = await reader.get(`/api/v1/search?q=${encodeURIComponent(q)}&mode=fts`);
            expectStatus(r, 200);
            expect(
              r.body.results.map((x: { path: string }) => x.path),
              q,
            ).toEqual(['fold/cafe.md']);
          }
          // A page written after the migration folds the same way.
          expectStatus(await reader.post('/api/v1/nodes', { path: 'fold/later.md', content: '# Später\n\nZürich naïve résumé.\n' }), 201);
          const r = await reader.get('/api/v1/search?q=zurich+naive+resume&mode=fts');
          expectStatus(r, 200);
          expect(r.body.results.map((x: { path: string }) => x.path)).toEqual(['fold/later.md']);
        } finally {
          await second.close();
        }
      } finally {
        await c.end();
      }
    } finally {
      await tdb.cleanup();
    }
  }, 60_000);
});
