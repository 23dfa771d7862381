import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { Dialect, Store } from '../../src/store/db.js';
import { createTestDatabase, testEngines } from '../support/engines.js';
import { waitForVectors } from '../support/embeddings-server.js';
import { expectStatus } from '../support/expect.js';
import { Client, signupHuman, startServerOn } from '../support/server.js';

/**
 * A workspace's vector matrix loads from `section_vectors` in pages of 2,000 rows, never splitting
 * a page of the workspace between two (retrieval/runtime.ts `load`). After a restart, every page
 * of rows is in the matrix, each vector in its own row: the same answers, to the score, as the
 * matrix kept current write by write from the log.
 */
const PAGES = 18;
const SECTIONS = 250;
/** A word of page p, section j: letters only, so each is its own keyword and its own n-grams. */
const word = (p: number, j: number) =>
  `${'qzv'}${String.fromCharCode(97 + (p % 26))}${String.fromCharCode(97 + Math.floor(p / 26))}x${[...String(j)].map((d) => String.fromCharCode(104 + Number(d))).join('')}`;
/** Every other section inside an `internal` block: consecutive sections of different levels never share a vector's window, so each section is a row. */
const page = (p: number) =>
  `# Load ${p}\n\n` +
  Array.from({ length: SECTIONS }, (_, j) => {
    const text = `${word(p, j)} ${word(p, j)} moraine ${j % 7} drumlin`;
    return `## part ${j}\n\n${j % 2 === 1 ? `::: internal\n${text}\n:::` : text}\n`;
  }).join('\n');

/** Top hit of a vector query per probe: the section and page it names, and its score. */
type Hit = { path: string; section: string; score: number };
async function topHits(c: Client, queries: string[]): Promise<Hit[]> {
  const out: Hit[] = [];
  for (const q of queries) {
    const r = await c.get(`/api/v1/search?mode=vector&limit=3&q=${encodeURIComponent(q)}`);
    expectStatus(r, 200);
    const top = (r.body.results as Hit[])[0]!;
    out.push({ path: top.path, section: top.section, score: top.score });
  }
  return out;
}

/**
 * Writes with `write` on a first server (then waits for every vector), asks `queries`, restarts on
 * the same database (the matrix loads from section_vectors) and asks again: returns both answers.
 */
async function acrossRestart(engine: Dialect, write: (c: Client, store: Store) => Promise<void>, queries: string[]): Promise<{ before: Hit[]; after: Hit[] }> {
  const tdb = await createTestDatabase(engine);
  let before: Hit[];
  let cookies: Client['cookies'];
  const first = await startServerOn(tdb);
  try {
    const h = await signupHuman(first.url, 'Loader');
    cookies = h.client.cookies;
    await write(h.client, first.ctx.store);
    await waitForVectors(h.client, 120_000);
    before = await topHits(h.client, queries);
  } finally {
    await first.close();
  }
  const second = await startServerOn(tdb);
  try {
    const c = new Client(second.url);
    c.cookies = cookies;
    return { before, after: await topHits(c, queries) };
  } finally {
    await second.close();
    await tdb.cleanup();
  }
}

const vectorRows = async (store: Store) => Number((await sql<{ n: number }>`select count(*) as n from section_vectors`.execute(store.db)).rows[0]?.n);

describe.each(testEngines())('the vector matrix loads in pages of rows (%s)', (engine) => {
  it('after a restart every section of 4,500 is found by vector search with the scores it had before', async () => {
    const probes = [
      [0, 0],
      [0, SECTIONS - 1],
      [7, 120],
      [8, 3],
      [15, 77],
      [PAGES - 1, SECTIONS - 1],
    ] as const;
    let rows = 0;
    const { before, after } = await acrossRestart(
      engine,
      async (c, store) => {
        // The matrix loads now, empty: the writes below reach it through the log, row by row.
        expectStatus(await c.get('/api/v1/search?mode=vector&q=moraine'), 200);
        for (let p = 0; p < PAGES; p++) expectStatus(await c.post('/api/v1/nodes', { path: `load/p${p}.md`, content: page(p) }), 201);
        await waitForVectors(c, 120_000);
        rows = await vectorRows(store);
      },
      probes.map(([p, j]) => word(p, j)),
    );
    // More than two pages of rows, so the load crosses page boundaries inside and between pages.
    expect(rows).toBeGreaterThan(4_000);
    expect(before.map((b) => b.path)).toEqual(probes.map(([p]) => `load/p${p}.md`));
    expect(after).toEqual(before);
  }, 240_000);

  it('a page with more rows than one read of the load (2,100 against 2,000) loads whole after a restart', async () => {
    const ROWS = 2100;
    const content =
      `# Long load\n\n` +
      Array.from({ length: ROWS }, (_, j) => {
        const text = `${word(99, j)} ${word(99, j)} esker ${j % 5}`;
        return `## s${j}\n\n${j % 2 === 1 ? `::: internal\n${text}\n:::` : text}\n`;
      }).join('\n');
    const probes = [1, 1999, 2000, 2050, ROWS - 1];
    let rows = 0;
    const { before, after } = await acrossRestart(
      engine,
      async (c, store) => {
        expectStatus(await c.post('/api/v1/nodes', { path: 'load/long.md', content }), 201);
        await waitForVectors(c, 120_000);
        rows = await vectorRows(store);
      },
      probes.map((j) => word(99, j)),
    );
    expect(rows).toBe(ROWS);
    // Each probe finds its own section, with the score of its own row.
    expect(before.map((b) => b.section)).toEqual(probes.map((j) => `s${j}`));
    expect(after).toEqual(before);
  }, 240_000);
});
