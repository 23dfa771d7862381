import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
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

describe.each(testEngines())('the vector matrix loads in pages of rows (%s)', (engine) => {
  it('after a restart every section of 4,500 is found by vector search with the scores it had before', async () => {
    const tdb = await createTestDatabase(engine);
    const probes = [
      [0, 0],
      [0, SECTIONS - 1],
      [7, 120],
      [8, 3],
      [15, 77],
      [PAGES - 1, SECTIONS - 1],
    ] as const;
    const ask = async (c: Client) => {
      const out: { path: string; score: number }[] = [];
      for (const [p, j] of probes) {
        const r = await c.get(`/api/v1/search?mode=vector&limit=3&q=${encodeURIComponent(word(p, j))}`);
        expectStatus(r, 200);
        const top = (r.body.results as { path: string; score: number }[])[0]!;
        out.push({ path: top.path, score: top.score });
      }
      return out;
    };
    let before: { path: string; score: number }[];
    let cookies: Client['cookies'];
    const first = await startServerOn(tdb);
    try {
      const h = await signupHuman(first.url, 'Loader');
      cookies = h.client.cookies;
      // The matrix loads now, empty: the writes below reach it through the log, row by row.
      expectStatus(await h.client.get('/api/v1/search?mode=vector&q=moraine'), 200);
      for (let p = 0; p < PAGES; p++) expectStatus(await h.client.post('/api/v1/nodes', { path: `load/p${p}.md`, content: page(p) }), 201);
      await waitForVectors(h.client, 120_000);
      const n = await sql<{ n: number }>`select count(*) as n from section_vectors`.execute(first.ctx.store.db);
      // More than two pages of rows, so the load crosses page boundaries inside and between pages.
      expect(Number(n.rows[0]?.n)).toBeGreaterThan(4_000);
      before = await ask(h.client);
      expect(before.map((b) => b.path)).toEqual(probes.map(([p]) => `load/p${p}.md`));
    } finally {
      await first.close();
    }
    const second = await startServerOn(tdb);
    try {
      const c = new Client(second.url);
      c.cookies = cookies;
      expect(await ask(c)).toEqual(before);
    } finally {
      await second.close();
      await tdb.cleanup();
    }
  }, 240_000);

  it('a page with more rows than one read of the load (2,100 against 2,000) loads whole after a restart', async () => {
    const tdb = await createTestDatabase(engine);
    const ROWS = 2100;
    const content =
      `# Long load\n\n` +
      Array.from({ length: ROWS }, (_, j) => {
        const text = `${word(99, j)} ${word(99, j)} esker ${j % 5}`;
        return `## s${j}\n\n${j % 2 === 1 ? `::: internal\n${text}\n:::` : text}\n`;
      }).join('\n');
    const probes = [1, 1999, 2000, 2050, ROWS - 1];
    const ask = async (c: Client) => {
      const out: { heading: string; score: number }[] = [];
      for (const j of probes) {
        const r = await c.get(`/api/v1/search?mode=vector&limit=1&q=${encodeURIComponent(word(99, j))}`);
        expectStatus(r, 200);
        const top = (r.body.results as { section: string; score: number }[])[0]!;
        out.push({ heading: top.section, score: top.score });
      }
      return out;
    };
    let before: { heading: string; score: number }[];
    let cookies: Client['cookies'];
    const first = await startServerOn(tdb);
    try {
      const h = await signupHuman(first.url, 'LongLoader');
      cookies = h.client.cookies;
      expectStatus(await h.client.post('/api/v1/nodes', { path: 'load/long.md', content }), 201);
      await waitForVectors(h.client, 120_000);
      const n = await sql<{ n: number }>`select count(*) as n from section_vectors`.execute(first.ctx.store.db);
      expect(Number(n.rows[0]?.n)).toBe(ROWS);
      before = await ask(h.client);
      // Each probe finds its own section, with the score of its own row.
      expect(before.map((b) => b.heading)).toEqual(probes.map((j) => `s${j}`));
    } finally {
      await first.close();
    }
    const second = await startServerOn(tdb);
    try {
      const c = new Client(second.url);
      c.cookies = cookies;
      expect(await ask(c)).toEqual(before);
    } finally {
      await second.close();
      await tdb.cleanup();
    }
  }, 240_000);
});
