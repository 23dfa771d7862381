import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/db.js';
import { readVectorsInWorker, type VectorRowsPage } from '../../src/retrieval/vectors/load-worker.js';
import { openTestStore } from '../support/engines.js';

/**
 * On SQLite a workspace's vectors are read by a worker thread on its own connection
 * (retrieval/vectors/load-worker.ts): every row of the workspace and model, in page order, a page
 * never split between two pages of rows, each vector as it is stored, and the worker gone when
 * the reading ends, fails or is abandoned.
 */
describe('vectors read by a worker thread (sqlite)', () => {
  let store: Store;
  let cleanup: () => Promise<void>;
  const vec = (seed: number, dims: number) => Buffer.from(new Float32Array(Array.from({ length: dims }, (_, i) => Math.sin(seed * 31 + i))).buffer);
  // Pages of 1 to 5 rows in two workspaces and two models (a page id per model: the key is page and ord); ids sort as their numbers.
  const rows: { workspace_id: string; page_id: string; ord: number; last_ord: number; model: string; text_hash: string; vec: Buffer }[] = [];
  for (let p = 0; p < 40; p++) {
    for (let o = 0; o < 1 + (p % 5); o++) {
      for (const [ws, model] of [
        ['ws_a', 'm1'],
        ['ws_a', 'm2'],
        ['ws_b', 'm1'],
      ] as const) {
        rows.push({
          workspace_id: ws,
          page_id: `pg_${ws}${model}${String(p).padStart(4, '0')}`,
          ord: o * 2,
          last_ord: o * 2 + (o % 2),
          model,
          text_hash: `${(p * 7 + o).toString(16).padStart(8, '0')}hash`,
          vec: vec(p * 10 + o, model === 'm1' ? 16 : 8),
        });
      }
    }
  }

  beforeAll(async () => {
    ({ store, cleanup } = await openTestStore('sqlite'));
    // Rows straight into the table (no pages behind them): this is the reader, not the service.
    for (let i = 0; i < rows.length; i += 100)
      await store.db
        .insertInto('section_vectors')
        .values(rows.slice(i, i + 100))
        .execute();
  });
  afterAll(async () => {
    await cleanup?.();
  });

  const readAll = async (ws: string, model: string, pageRows: number) => {
    const pages: { ids: string[]; rows: { page_id: string; ord: number; last_ord: number; text_hash: string; vec: Buffer }[] }[] = [];
    for await (const page of readVectorsInWorker(store.sqliteFile!, ws, model, pageRows)) pages.push(copyOf(page));
    return pages;
  };
  /** What a page holds, copied before the next is asked for (its buffer is reused). */
  const copyOf = (page: VectorRowsPage) => {
    const out = page.pageIds.map((page_id, i) => ({
      page_id,
      ord: page.ords[i]!,
      last_ord: page.lastOrds[i]!,
      text_hash: page.textHashes[i]!,
      vec: Buffer.from(page.vecs.buffer.slice(page.vecs.byteOffset + page.offsets[i]!, page.vecs.byteOffset + page.offsets[i + 1]!)),
    }));
    return { ids: [...new Set(page.pageIds)], rows: out };
  };

  it('reads every row of the workspace and model, as stored, in order, pages never split', async () => {
    for (const [ws, model, pageRows] of [
      ['ws_a', 'm1', 3],
      ['ws_a', 'm2', 7],
      ['ws_b', 'm1', 1000],
      ['ws_a', 'm1', 5],
    ] as const) {
      const pages = await readAll(ws, model, pageRows);
      const want = rows
        .filter((r) => r.workspace_id === ws && r.model === model)
        .sort((a, b) => (a.page_id === b.page_id ? a.ord - b.ord : a.page_id < b.page_id ? -1 : 1))
        .map(({ page_id, ord, last_ord, text_hash, vec }) => ({ page_id, ord, last_ord, text_hash, vec }));
      expect(pages.flatMap((p) => p.rows)).toEqual(want);
      // A page of the workspace sits in one page of rows.
      const seen = pages.flatMap((p) => p.ids);
      expect(new Set(seen).size).toBe(seen.length);
      // No page of rows holds more than asked for, unless one page of the workspace alone does.
      for (const p of pages) expect(p.rows.length <= pageRows || p.ids.length === 1).toBe(true);
    }
  });

  it('a page of the workspace larger than a page of rows comes whole, alone', async () => {
    const pages = await readAll('ws_a', 'm1', 2);
    expect(pages.flatMap((p) => p.rows)).toHaveLength(rows.filter((r) => r.workspace_id === 'ws_a' && r.model === 'm1').length);
    const big = pages.filter((p) => p.rows.length > 2);
    expect(big.length).toBeGreaterThan(0);
    for (const p of big) expect(p.ids).toHaveLength(1);
  });

  it('nothing for an unknown workspace or model', async () => {
    expect(await readAll('ws_none', 'm1', 10)).toEqual([]);
    expect(await readAll('ws_a', 'm9', 10)).toEqual([]);
  });

  it('abandoned after one page: the reading stops, and a new one starts over', async () => {
    let n = 0;
    for await (const page of readVectorsInWorker(store.sqliteFile!, 'ws_a', 'm1', 4)) {
      n += page.pageIds.length;
      break;
    }
    expect(n).toBeGreaterThan(0);
    expect((await readAll('ws_a', 'm1', 4)).flatMap((p) => p.rows)).toHaveLength(rows.filter((r) => r.workspace_id === 'ws_a' && r.model === 'm1').length);
  });

  it('a file that is not there: refused with what failed, no worker left behind', async () => {
    const read = async () => {
      for await (const page of readVectorsInWorker(`${store.sqliteFile!}.missing`, 'ws_a', 'm1', 4)) void page;
    };
    await expect(read()).rejects.toThrow(/loading vectors failed/);
  });
});
