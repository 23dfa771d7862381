import { describe, expect, it } from 'vitest';
import { hashTag } from '../../src/retrieval/embed-text.js';
import { PARALLEL_FROM, quantizedScore, selectTop, VectorMatrix } from '../../src/retrieval/vectors/matrix.js';
import { helperStats, stopHelper } from '../../src/retrieval/vectors/scan-helper.js';
import { prng, unitVector } from '../support/random.js';

interface Row {
  pageId: string;
  ord: number;
  tag: number;
  vec: Float64Array;
}

/**
 * A vector as the matrix holds it: each component rounded to a multiple of the row's scale
 * (its largest component / 127), the scale kept in f32.
 */
function quantized(vec: Float32Array): Float64Array {
  let max = 0;
  for (const x of vec) max = Math.max(max, Math.abs(x));
  const scale = max / 127;
  if (scale === 0) return new Float64Array(vec.length);
  const stored = Math.fround(scale);
  return Float64Array.from(vec, (x) => Math.max(-127, Math.min(127, Math.round(x / scale))) * stored);
}

/** The plain JS reference: a map of pages to rows, each quantized as the matrix does, scored by a dot product in f64. */
class Reference {
  readonly pages = new Map<string, Row[]>();
  setPage(pageId: string, vectors: { ord: number; vec: Float32Array; tag: number }[]): void {
    this.pages.delete(pageId);
    if (vectors.length > 0)
      this.pages.set(
        pageId,
        vectors.map((v) => ({ pageId, ...v, vec: quantized(v.vec) })),
      );
  }
  removePage(pageId: string): void {
    this.pages.delete(pageId);
  }
  get rows(): number {
    let n = 0;
    for (const r of this.pages.values()) n += r.length;
    return n;
  }
  scored(q: Float32Array): { pageId: string; ord: number; tag: number; score: number }[] {
    const out: { pageId: string; ord: number; tag: number; score: number }[] = [];
    for (const rows of this.pages.values()) {
      for (const r of rows) {
        let s = 0;
        for (let i = 0; i < q.length; i++) s += q[i]! * r.vec[i]!;
        out.push({ pageId: r.pageId, ord: r.ord, tag: r.tag, score: s });
      }
    }
    return out.sort((a, b) => b.score - a.score);
  }
}

const key = (h: { pageId: string; ord: number }) => `${h.pageId}#${h.ord}`;

/**
 * Checks the matrix's top k against the reference: same length, scores equal (to f32 rounding of
 * the dot product), sorted best first, each row's page, ord and tag as set, and the same set of
 * rows except where two scores are too close to order reliably at the cut.
 */
function expectSameTop(m: VectorMatrix, ref: Reference, q: Float32Array, k: number, scored = ref.scored(q)): void {
  const got = m.top(q, k);
  const want = scored.slice(0, Math.min(k, ref.rows));
  expect(got).toHaveLength(want.length);
  const eps = 1e-5;
  const problems: string[] = [];
  const all = new Map(scored.map((h) => [key(h), h]));
  for (let i = 0; i < got.length; i++) {
    const g = got[i]!;
    if (Math.abs(g.score - want[i]!.score) >= eps) problems.push(`rank ${i}: score ${g.score} vs ${want[i]!.score}`);
    if (i > 0 && g.score > got[i - 1]!.score) problems.push(`rank ${i}: not sorted`);
    const r = all.get(key(g));
    if (!r) problems.push(`rank ${i}: ${key(g)} is no row`);
    else {
      if (g.tag !== r.tag) problems.push(`${key(g)}: tag ${g.tag} vs ${r.tag}`);
      if (Math.abs(g.score - r.score) >= eps) problems.push(`${key(g)}: score ${g.score} vs its own ${r.score}`);
    }
  }
  if (new Set(got.map(key)).size !== got.length) problems.push('a row twice');
  const cut = want[want.length - 1]?.score ?? 0;
  const gotKeys = new Set(got.map(key));
  for (const w of want) if (w.score > cut + eps && !gotKeys.has(key(w))) problems.push(`${key(w)} (score ${w.score}) missing`);
  expect(problems, `k=${k}`).toEqual([]);
}

/** Every row's approximate score is within the scan's stated error of its exact score. */
function expectWithinBound(m: VectorMatrix, scored: { pageId: string; ord: number; score: number }[], q: Float32Array): void {
  const scan = m.scan(q, m.rows);
  const exact = new Map(scored.map((h) => [key(h), h.score]));
  let worst = 0;
  for (const h of scan.hits) worst = Math.max(worst, Math.abs(h.score - exact.get(key(h))!));
  expect(scan.hits).toHaveLength(m.rows);
  expect(worst).toBeLessThanOrEqual(scan.error);
}

describe('VectorMatrix', () => {
  it('keeps the quantization error within its bound for skewed vectors, and widens its candidates until the answer is exact', () => {
    const dims = 64;
    const rnd = prng(7);
    const m = new VectorMatrix(dims);
    const ref = new Reference();
    // Rows nearly alike (scores differ by less than the error bound) plus some with one huge
    // component (coarse codes): the first candidates cannot prove the top k, so exactTop must widen.
    const base = unitVector(rnd, dims);
    for (let p = 0; p < 400; p++) {
      const v = Float32Array.from(base, (x) => x + (rnd() - 0.5) * 0.01);
      if (p % 50 === 0) v[p % dims] = 40;
      let n = 0;
      for (const x of v) n += x * x;
      const unit = v.map((x) => x / Math.sqrt(n));
      m.setPage(`p${p}`, [{ ord: 0, vec: unit, tag: p }]);
      ref.setPage(`p${p}`, [{ ord: 0, vec: unit, tag: p }]);
    }
    const q = Float32Array.from(base, (x) => x + (rnd() - 0.5) * 0.02);
    const scored = ref.scored(q);
    expectWithinBound(m, scored, q);
    // The scan's scores cannot order these rows; rescoring widened candidates with the f32 query does.
    const got = m.top(q, 5);
    expect(got.map(key)).toEqual(scored.slice(0, 5).map(key));
    expect(got.map((h) => h.score)).toEqual(scored.slice(0, 5).map((h) => expect.closeTo(h.score, 6)));
    for (const k of [1, 20, 100, 399, 400]) expectSameTop(m, ref, q, k, scored);
  });

  for (const dims of [1, 3, 7, 8, 9, 16, 17, 31, 100, 384, 512, 1537]) {
    it(`finds the same top k as a plain scan (${dims} dimensions), through sets, replaces and removes`, () => {
      const rnd = prng(dims * 7919);
      const m = new VectorMatrix(dims);
      const ref = new Reference();
      expect(m.dims).toBe(dims);
      expect(m.rows).toBe(0);
      expect(m.top(unitVector(rnd, dims), 5)).toEqual([]);

      const pages = dims > 1000 ? 60 : 500; // 500 pages of 0-5 rows: past the first layout's 1024 rows
      const set = (id: string) => {
        const n = Math.floor(rnd() * 6); // 0 rows sometimes: a page without sections
        const vecs = Array.from({ length: n }, (_, ord) => ({ ord, vec: unitVector(rnd, dims), tag: Math.floor(rnd() * 2 ** 32) }));
        m.setPage(id, vecs);
        ref.setPage(id, vecs);
      };
      // Enough rows to grow past the first layout (1024 rows) more than once.
      for (let p = 0; p < pages; p++) set(`pg_${p}`);
      const check = () => {
        expect(m.rows).toBe(ref.rows);
        expect(m.pages).toBe(ref.pages.size);
        for (let i = 0; i < 5; i++) {
          const q = unitVector(rnd, dims);
          const scored = ref.scored(q);
          for (const k of [1, 5, 10, 50, ref.rows, ref.rows + 10]) expectSameTop(m, ref, q, k, scored);
          expectWithinBound(m, scored, q);
        }
      };
      check();
      // Replace a third of the pages (different row counts), remove another third, add new ones.
      for (let p = 0; p < pages; p += 3) set(`pg_${p}`);
      for (let p = 1; p < pages; p += 3) {
        m.removePage(`pg_${p}`);
        ref.removePage(`pg_${p}`);
      }
      m.removePage('pg_never'); // unknown: nothing happens
      for (let p = pages; p < pages + 40; p++) set(`pg_${p}`);
      check();
      for (const id of ref.pages.keys()) expect(m.has(id)).toBe(true);
      expect(m.has('pg_1')).toBe(false);
      // Remove all but a few: what remains is found exactly.
      for (const id of [...ref.pages.keys()].slice(3)) {
        m.removePage(id);
        ref.removePage(id);
      }
      check();
      // A row's own vector is its best match (cosine 1).
      const [first] = [...ref.pages.values()];
      if (first) {
        const best = m.top(Float32Array.from(first[0]!.vec), 1)[0]!;
        if (dims > 1) expect(best.pageId).toBe(first[0]!.pageId); // with one dimension every vector is ±1: ties
        expect(best.score).toBeCloseTo(1, 2);
      }
      for (const id of [...ref.pages.keys()]) {
        m.removePage(id);
        ref.removePage(id);
      }
      expect(m.rows).toBe(0);
      expect(m.pages).toBe(0);
      expect(m.top(unitVector(rnd, dims), 3)).toEqual([]);
    });
  }

  it('scores each row within scale / 2 × |q|₁ of its f32 vector (the price of holding int8 rows)', () => {
    const rnd = prng(99);
    for (const dims of [16, 512]) {
      const m = new VectorMatrix(dims);
      const vecs = Array.from({ length: 200 }, () => unitVector(rnd, dims));
      vecs.forEach((vec, p) => m.setPage(`p${p}`, [{ ord: 0, vec, tag: p }]));
      const q = unitVector(rnd, dims);
      const l1 = q.reduce((a, x) => a + Math.abs(x), 0);
      let worst = 0;
      for (const h of m.top(q, 200)) {
        const v = vecs[Number(h.pageId.slice(1))]!;
        let exact = 0;
        let max = 0;
        for (let i = 0; i < dims; i++) {
          exact += q[i]! * v[i]!;
          max = Math.max(max, Math.abs(v[i]!));
        }
        const bound = (max / 127 / 2) * l1 + 1e-6;
        expect(Math.abs(h.score - exact)).toBeLessThanOrEqual(bound);
        worst = Math.max(worst, Math.abs(h.score - exact));
      }
      // And in practice far smaller than the bound: rounding errors mostly cancel.
      expect(worst).toBeLessThan(0.01);
    }
  });

  it('scores a vector outside the matrix exactly as a row of it (quantizedScore: point-in-time answers)', () => {
    const rnd = prng(123);
    for (const dims of [7, 512]) {
      const m = new VectorMatrix(dims);
      const vecs = Array.from({ length: 50 }, () => unitVector(rnd, dims));
      vecs.forEach((vec, p) => m.setPage(`p${p}`, [{ ord: 0, vec, tag: p }]));
      const q = unitVector(rnd, dims);
      for (const [p, vec] of vecs.entries()) expect(quantizedScore(vec, q)).toBe(m.pageScores(`p${p}`, q)[0]!.score);
    }
  });

  it('pads dimensions that are not a multiple of 16 with zeros (old row contents never leak into a score)', () => {
    const dims = 5;
    const m = new VectorMatrix(dims);
    const ref = new Reference();
    const set = (id: string, vecs: { ord: number; vec: Float32Array; tag: number }[]) => {
      m.setPage(id, vecs);
      ref.setPage(id, vecs);
    };
    const one = (i: number) => Float32Array.from({ length: dims }, (_, j) => (j === i ? 1 : 0));
    set('a', [{ ord: 0, vec: one(0), tag: 1 }]);
    set('b', [
      { ord: 0, vec: one(4), tag: 2 },
      { ord: 1, vec: one(2), tag: 3 },
    ]);
    set('c', [{ ord: 0, vec: one(1), tag: 4 }]);
    m.removePage('a'); // c's row moves into a's slot
    ref.removePage('a');
    set('b', [{ ord: 0, vec: one(3), tag: 5 }]); // b shrinks and moves
    // The scan alone (no rescoring) already separates them: old codes of moved rows never count.
    const scan = m.scan(one(3), 10);
    expect(scan.complete).toBe(true);
    expect(scan.hits.map((h) => [h.pageId, h.ord, h.tag])).toEqual([
      ['b', 0, 5],
      ['c', 0, 4],
    ]);
    expect(scan.hits[0]!.score).toBeCloseTo(1, 4);
    expect(scan.hits[1]!.score).toBe(0);
    const hits = m.top(one(3), 10);
    // A one-hot row is held exactly but for its f32 scale (1/127): its score is 1 to f32 precision.
    expect(hits.map((h) => [h.pageId, h.ord, h.tag, h.score])).toEqual([
      ['b', 0, 5, expect.closeTo(1, 6)],
      ['c', 0, 4, 0],
    ]);
    expect(m.top(one(1), 1)).toEqual([{ pageId: 'c', ord: 0, last: 0, tag: 4, score: expect.closeTo(1, 6) }]);
    expect(m.top(one(4), 2).every((h) => h.score === 0)).toBe(true);
  });

  it('makes room for the rows it is told of at once, and grows only past them', () => {
    const dims = 24;
    const rnd = prng(5);
    const m = new VectorMatrix(dims, 5000);
    const before = m.bytes;
    for (let p = 0; p < 5000; p++) m.setPage(`p${p}`, [{ ord: 0, vec: unitVector(rnd, dims), tag: p }]);
    expect(m.bytes).toBe(before);
    m.setPage('one-more', [{ ord: 0, vec: unitVector(rnd, dims), tag: 1 }]);
    expect(m.bytes).toBeGreaterThan(before);
    expect(m.rows).toBe(5001);
  });

  it('refuses vectors of the wrong size and bad dimensions; k <= 0 is empty', () => {
    expect(() => new VectorMatrix(0)).toThrow();
    expect(() => new VectorMatrix(-3)).toThrow();
    expect(() => new VectorMatrix(2.5)).toThrow();
    const m = new VectorMatrix(4);
    expect(() => m.setPage('x', [{ ord: 0, vec: new Float32Array(3), tag: 0 }])).toThrow(/dimensions/);
    m.setPage('y', [{ ord: 0, vec: Float32Array.from([1, 0, 0, 0]), tag: 0 }]);
    expect(() => m.scan(new Float32Array(5), 1)).toThrow(/dimensions/);
    expect(() => m.top(new Float32Array(5), 1)).toThrow(/dimensions/);
    expect(m.top(Float32Array.from([1, 0, 0, 0]), 0)).toEqual([]);
    expect(m.top(Float32Array.from([1, 0, 0, 0]), -1)).toEqual([]);
    expect(m.scan(Float32Array.from([1, 0, 0, 0]), 0).hits).toEqual([]);
  });

  it('holds many rows (memory grows, rows stay packed) and still matches the reference', () => {
    const dims = 24;
    const rnd = prng(42);
    const m = new VectorMatrix(dims);
    const ref = new Reference();
    for (let p = 0; p < 3000; p++) {
      const vecs = [0, 1].map((ord) => ({ ord, vec: unitVector(rnd, dims), tag: p * 2 + ord }));
      m.setPage(`p${p}`, vecs);
      ref.setPage(`p${p}`, vecs);
    }
    const before = m.bytes;
    expect(before).toBeGreaterThan(6000 * dims); // a byte per dimension per row, at least
    for (let p = 0; p < 3000; p += 2) {
      m.removePage(`p${p}`);
      ref.removePage(`p${p}`);
    }
    expect(m.rows).toBe(3000);
    for (let i = 0; i < 10; i++) expectSameTop(m, ref, unitVector(rnd, dims), 25);
  });
});

describe('VectorMatrix scanned by two threads (scan-helper.ts)', () => {
  const dims = 40;
  /** Two matrices of the same rows: `m` may be helped, `alone` never is. */
  const pair = (rows: number, seed: number) => {
    const rnd = prng(seed);
    const m = new VectorMatrix(dims);
    const alone = new VectorMatrix(dims);
    alone.dispose();
    const ref = new Reference();
    for (let p = 0; p < rows / 2; p++) {
      const vecs = [0, 1].map((ord) => ({ ord, vec: unitVector(rnd, dims), tag: p * 2 + ord }));
      m.setPage(`p${p}`, vecs);
      alone.setPage(`p${p}`, vecs);
      ref.setPage(`p${p}`, vecs);
    }
    return { m, alone, ref, rnd };
  };
  /** The helper starts on the first large scan and takes parts once its thread runs. */
  const helperUp = async (m: VectorMatrix, q: Float32Array) => {
    for (let i = 0; i < 200 && !helperStats().running; i++) {
      m.scan(q, 1);
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(helperStats().running).toBe(true);
    // One scan with the helper running: the loop's last may have run before it was (the matrix
    // is then not handed to it yet).
    m.scan(q, 1);
  };
  const sameScan = (a: VectorMatrix, b: VectorMatrix, q: Float32Array) => {
    const x = a.scan(q, a.rows).hits.map((h) => `${key(h)}=${h.score}`);
    const y = b.scan(q, b.rows).hits.map((h) => `${key(h)}=${h.score}`);
    expect(x).toEqual(y);
  };

  it('scores every row as one thread does, to the bit, through sets, removes and growth, and finds the same top k', async () => {
    const { m, alone, ref, rnd } = pair(PARALLEL_FROM + 2_000, 7);
    await helperUp(m, unitVector(rnd, dims));
    const jobs = helperStats().jobs;
    for (let i = 0; i < 5; i++) {
      const q = unitVector(rnd, dims);
      sameScan(m, alone, q);
      expectSameTop(m, ref, q, 30);
    }
    // The rows the helper scans (the upper half) change and move: removed pages' holes are
    // filled by the last rows, new pages make the memory grow.
    for (let p = 0; p < 4_000; p += 3) for (const x of [m, alone]) x.removePage(`p${p}`);
    for (let p = 0; p < 4_000; p += 3) ref.removePage(`p${p}`);
    for (let p = 100_000; p < 108_000; p++) {
      const vecs = [{ ord: 0, vec: unitVector(rnd, dims), tag: p }];
      for (const x of [m, alone]) x.setPage(`p${p}`, vecs);
      ref.setPage(`p${p}`, vecs);
    }
    for (let i = 0; i < 5; i++) {
      const q = unitVector(rnd, dims);
      sameScan(m, alone, q);
      expectSameTop(m, ref, q, 30);
    }
    // The helper took a part of every scan of `m` (each sameScan and top scans once or more).
    expect(helperStats().jobs - jobs).toBeGreaterThanOrEqual(20);
  });

  it('lets go of a disposed matrix (the helper stops, and a new one serves the rest), which still answers alone', async () => {
    const { m, alone, ref, rnd } = pair(PARALLEL_FROM + 500, 11);
    await helperUp(m, unitVector(rnd, dims));
    const held = helperStats().matrices;
    expect(held).toBeGreaterThanOrEqual(1);
    const other = pair(PARALLEL_FROM + 500, 12).m;
    other.scan(unitVector(rnd, dims), 1);
    expect(helperStats().matrices).toBe(held + 1);
    // The helper's thread never collects garbage, so letting go of one memory stops it.
    other.dispose();
    expect(helperStats().running).toBe(false);
    const q = unitVector(rnd, dims);
    sameScan(m, alone, q);
    expectSameTop(m, ref, q, 20);
    // A new helper takes `m` again; `other` scans alone from now on.
    await helperUp(m, q);
    expect(helperStats().matrices).toBe(1);
    let jobs = helperStats().jobs;
    other.scan(unitVector(rnd, dims), 1);
    expect(helperStats().jobs).toBe(jobs);
    expect(helperStats().matrices).toBe(1);
    sameScan(m, alone, unitVector(rnd, dims));
    expect(helperStats().jobs).toBeGreaterThan(jobs);

    // Stopped (as after a part that timed out): scans go on alone, then with a new helper.
    stopHelper();
    expect(helperStats().running).toBe(false);
    sameScan(m, alone, q);
    expectSameTop(m, ref, q, 20);
    await helperUp(m, q);
    jobs = helperStats().jobs;
    sameScan(m, alone, unitVector(rnd, dims));
    expectSameTop(m, ref, unitVector(rnd, dims), 20);
    expect(helperStats().jobs).toBeGreaterThan(jobs);
  });

  it('a scan begun on the helper (begin) and finished later (topOf) answers as top, whatever happened in between', async () => {
    const { m, alone, ref, rnd } = pair(PARALLEL_FROM + 3_000, 21);
    await helperUp(m, unitVector(rnd, dims));
    const same = (got: ReturnType<VectorMatrix['top']>, want: ReturnType<VectorMatrix['top']>) =>
      expect(got.map((h) => `${key(h)}=${h.score}`)).toEqual(want.map((h) => `${key(h)}=${h.score}`));
    // Nothing in between; then this thread busy elsewhere before finishing (the helper takes more chunks).
    for (const busyMs of [0, 5]) {
      const q = unitVector(rnd, dims);
      const jobs = helperStats().jobs;
      const pending = m.begin(q);
      expect(pending).not.toBeNull();
      for (const until = performance.now() + busyMs; performance.now() < until;);
      same(m.topOf(pending!, q, 25), alone.top(q, 25));
      expect(helperStats().jobs).toBe(jobs + 1);
      expectSameTop(m, ref, q, 25);
    }
    // A page written in between (its rows may sit in chunks already scanned): scanned again.
    let q = unitVector(rnd, dims);
    let pending = m.begin(q)!;
    const vecs = [{ ord: 0, vec: q, tag: 777 }];
    for (const x of [m, alone]) x.setPage('written-meanwhile', vecs);
    ref.setPage('written-meanwhile', vecs);
    const top = m.topOf(pending, q, 10);
    expect(top[0]!.pageId).toBe('written-meanwhile');
    same(top, alone.top(q, 10));
    // A page removed in between (the last rows move into its place).
    pending = m.begin(q)!;
    for (const x of [m, alone]) x.removePage('written-meanwhile');
    ref.removePage('written-meanwhile');
    expect(m.topOf(pending, q, 10).map(key)).not.toContain('written-meanwhile#0');
    expectSameTop(m, ref, q, 10);
    // Another scan of the same matrix in between (its scores overwrite the begun one's).
    q = unitVector(rnd, dims);
    pending = m.begin(q)!;
    const other = unitVector(rnd, dims);
    same(m.top(other, 10), alone.top(other, 10));
    same(m.topOf(pending, q, 10), alone.top(q, 10));
    // Another matrix scanned in between: the helper is taken, so it scans alone; both right.
    const { m: m2, alone: alone2 } = pair(PARALLEL_FROM + 100, 22);
    pending = m.begin(q)!;
    same(m2.top(other, 5), alone2.top(other, 5));
    same(m.topOf(pending, q, 10), alone.top(q, 10));
    // The helper stopped in between; the matrix disposed in between.
    pending = m.begin(q)!;
    stopHelper();
    same(m.topOf(pending, q, 10), alone.top(q, 10));
    await helperUp(m, q);
    pending = m.begin(q)!;
    expect(pending).not.toBeNull();
    m.dispose();
    same(m.topOf(pending, q, 10), alone.top(q, 10));
    expect(m.begin(q)).toBeNull();
  });

  it('scans a matrix below PARALLEL_FROM rows alone', async () => {
    const { m, rnd } = pair(PARALLEL_FROM - 2, 13);
    const big = pair(PARALLEL_FROM + 2, 14).m;
    await helperUp(big, unitVector(rnd, dims));
    const jobs = helperStats().jobs;
    for (let i = 0; i < 5; i++) m.top(unitVector(rnd, dims), 10);
    expect(helperStats().jobs).toBe(jobs);
    big.top(unitVector(rnd, dims), 10);
    expect(helperStats().jobs).toBeGreaterThan(jobs);
  });
});

describe('selectTop', () => {
  it('returns the indices of the k largest, best first, ties by index', () => {
    const rnd = prng(7);
    for (const n of [1, 2, 10, 100, 1000]) {
      const s = Float32Array.from({ length: n }, () => Math.round(rnd() * 20) / 20);
      const want = [...s.keys()].sort((a, b) => s[b]! - s[a]! || a - b);
      for (const k of [1, 3, n]) {
        const got = selectTop(s, k);
        expect(got.map((i) => s[i])).toEqual(want.slice(0, k).map((i) => s[i]));
        expect(new Set(got).size).toBe(got.length);
      }
    }
  });

  it('takes every stored text hash as a row tag: hex by its first 32 bits, anything else by a 32-bit hash of it', () => {
    expect(hashTag('deadbeef0123')).toBe(0xdeadbeef);
    expect(hashTag('00000000ffff')).toBe(0);
    for (const odd of ['h-page-1', '', 'zz', 'DEADBEE', '日本語']) {
      const t = hashTag(odd);
      expect(Number.isInteger(t) && t >= 0 && t < 2 ** 32, odd).toBe(true);
      expect(hashTag(odd)).toBe(t);
    }
    expect(hashTag('h-page-1')).not.toBe(hashTag('h-page-2'));
    const m = new VectorMatrix(4);
    m.setPage('p', [{ ord: 0, vec: Float32Array.of(1, 0, 0, 0), tag: hashTag('h-page-1') }]);
    expect(m.top(Float32Array.of(1, 0, 0, 0), 1)[0]!.tag).toBe(hashTag('h-page-1'));
    // What the matrix cannot hold it refuses, rather than storing something else.
    expect(() => m.setPage('q', [{ ord: 0, vec: Float32Array.of(1, 0, 0, 0), tag: Number.NaN }])).toThrow(/unsigned 32-bit/);
    expect(() => m.setPage('q', [{ ord: -1, vec: Float32Array.of(1, 0, 0, 0), tag: 1 }])).toThrow(/31-bit/);
  });
});
