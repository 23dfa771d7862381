import { expect } from 'vitest';
import { type RowHit, VectorMatrix } from '../../src/retrieval/vectors/matrix.js';
import { helperStats } from '../../src/retrieval/vectors/scan-helper.js';
import { prng, unitVector } from './random.js';

/**
 * A matrix and its twin that scans alone (disposed before its first scan), filled alike with
 * `perPage` windows a page: what the attacks on the scan helper compare, bit for bit.
 */
export function matrixTwins(rows: number, dims: number, seed: number, perPage: number) {
  const rnd = prng(seed);
  const m = new VectorMatrix(dims, rows);
  const alone = new VectorMatrix(dims, rows);
  alone.dispose();
  for (let p = 0; p * perPage < rows; p++) {
    const vecs = Array.from({ length: Math.min(perPage, rows - p * perPage) }, (_, j) => ({ ord: j, vec: unitVector(rnd, dims), tag: (p * 31 + j) >>> 0 }));
    m.setPage(`p${p}`, vecs);
    alone.setPage(`p${p}`, vecs);
  }
  return { m, alone, rnd };
}

/** Hits as exact strings (NaN, -0 and infinities included). */
export const showHits = (hits: Pick<RowHit, 'pageId' | 'ord' | 'last' | 'tag' | 'score'>[]) =>
  hits.map((h) => `${h.pageId}#${h.ord}-${h.last}:${h.tag}=${Object.is(h.score, -0) ? '-0' : String(h.score)}`);

/** Scans until the helper thread runs (it starts on the first large scan), then once more with it running. */
export async function helperUp(m: VectorMatrix, dims: number): Promise<void> {
  const q = new Float32Array(dims).fill(1 / Math.sqrt(dims));
  for (let i = 0; i < 300 && !helperStats().running; i++) {
    m.scan(q, 1);
    await new Promise((r) => setTimeout(r, 10));
  }
  expect(helperStats().running).toBe(true);
  // One scan with the helper running: the loop's last may have run before it was.
  m.scan(q, 1);
}
