import { DOT_WASM_BASE64 } from './dot-wasm.js';

/** Compiled once; each matrix gets its own instance (and linear memory). */
const MODULE = new WebAssembly.Module(Buffer.from(DOT_WASM_BASE64, 'base64'));
const PAGE = 65536;

export interface RowHit {
  pageId: string;
  /** The row's first and last section ord (a row may stand for a window of sections). */
  ord: number;
  last: number;
  /** The row's tag as stored (callers keep 32 bits of the embedded text's hash there, to spot stale rows). */
  tag: number;
  score: number;
}

/** What a scan of the quantized matrix found: candidates by approximate score, and how far off they may be. */
export interface Scan {
  /** The `k` rows with the highest approximate scores, best first (scores approximate). */
  hits: RowHit[];
  /** True when every row is a candidate. */
  complete: boolean;
  /** The lowest approximate score among the candidates: every other row scored at most this. */
  threshold: number;
  /** A bound on |approximate − exact| for every row and this query. */
  error: number;
}

/** Largest int8 code; rows are scaled so their largest component maps to it. */
const CODE = 127;
const I32_MAX = 2 ** 31 - 1;
/** Float rounding in the scan and in exact rescoring, well above f32 epsilon at these magnitudes. */
const SLACK = 1e-5;

/**
 * One workspace's section vectors, held twice: as a dense row-major int8 matrix in WebAssembly
 * memory, scanned in full (SIMD integer dot products) for every query — a quarter of the bytes
 * an f32 scan reads — and as the f32 vectors themselves, which rescore the scan's best rows
 * exactly. Each int8 row keeps its own scale (its largest component maps to ±127), so the
 * scan's scores are off by at most a bound known per row; `top` widens its candidates until no
 * row left out could beat the k-th exact score, so its answer is the exact top k. Rows are
 * (page, window of section ords); a page's rows are replaced together and removed by moving the
 * last row into the hole, so the matrix stays packed.
 */
export class VectorMatrix {
  private readonly instance = new WebAssembly.Instance(MODULE, {});
  private readonly memory = this.instance.exports.memory as WebAssembly.Memory;
  private readonly scanFn = this.instance.exports.scan as (m: number, rows: number, stride: number, q: number, scales: number, out: number) => void;
  private rowPage: string[] = [];
  private rowOrd: number[] = [];
  private rowTag: number[] = [];
  private rowLast: number[] = [];
  private readonly rowsOf = new Map<string, number[]>();
  private capacity = 0;
  /** Byte offsets inside linear memory: [query i16 | scores f32 | scales f32 | matrix i8]. */
  private queryOff = 0;
  private scoresOff = 0;
  private scalesOff = 0;
  private matrixOff = 0;
  /** The exact vectors (row-major, `dims` per row) and each quantized row's L1 norm, in row order. */
  private exact = new Float32Array(0);
  private rowL1 = new Float32Array(0);
  /** The largest row scale and quantized L1 norm ever stored: a quick bound before the per-row one. */
  private maxScale = 0;
  private maxL1 = 0;

  /** Row length in bytes: dims rounded up to the SIMD step (16 int8), zero-padded. */
  private readonly stride: number;
  /** Query codes stay within ±this, so no 32-bit lane of the scan can overflow. */
  private readonly queryRange: number;

  /** `rows`: room to make at once (a loader that knows the count avoids growing by halves past it). */
  constructor(
    readonly dims: number,
    rows = 1024,
  ) {
    if (!Number.isInteger(dims) || dims <= 0) throw new Error('vector dimensions must be a positive integer');
    this.stride = Math.ceil(dims / 16) * 16;
    this.queryRange = Math.min(32767, Math.floor(I32_MAX / (CODE * this.stride)));
    this.layout(Math.max(1024, Math.ceil(rows)));
  }

  get rows(): number {
    return this.rowPage.length;
  }

  get pages(): number {
    return this.rowsOf.size;
  }

  /** Bytes held: linear memory (int8 rows, scales, score buffer) and the f32 vectors, with headroom. */
  get bytes(): number {
    return this.memory.buffer.byteLength + this.exact.byteLength + this.rowL1.byteLength;
  }

  has(pageId: string): boolean {
    return this.rowsOf.has(pageId);
  }

  /** Sets a page's vectors (one per window of sections), replacing what it had. */
  setPage(pageId: string, vectors: { ord: number; last?: number; vec: Float32Array; tag: number }[]): void {
    this.removePage(pageId);
    if (vectors.length === 0) return;
    for (const { vec } of vectors) {
      if (vec.length !== this.dims) throw new Error(`vector of ${vec.length} dimensions in a ${this.dims}-dimension matrix`);
    }
    this.ensure(this.rows + vectors.length);
    const rows: number[] = [];
    for (const { ord, last, vec, tag } of vectors) {
      const r = this.rowPage.length;
      this.writeRow(r, vec);
      this.rowPage.push(pageId);
      this.rowOrd.push(ord);
      this.rowTag.push(tag);
      this.rowLast.push(last ?? ord);
      rows.push(r);
    }
    this.rowsOf.set(pageId, rows);
  }

  private writeRow(r: number, vec: Float32Array): void {
    let max = 0;
    for (const x of vec) if (Math.abs(x) > max) max = Math.abs(x);
    const scale = max > 0 && Number.isFinite(max) ? max / CODE : 0;
    const codes = new Int8Array(this.memory.buffer, this.matrixOff + r * this.stride, this.stride).fill(0);
    let l1 = 0;
    if (scale > 0) {
      for (let i = 0; i < vec.length; i++) {
        const c = Math.max(-CODE, Math.min(CODE, Math.round(vec[i]! / scale)));
        codes[i] = c;
        l1 += Math.abs(c);
      }
    }
    new Float32Array(this.memory.buffer, this.scalesOff, this.capacity)[r] = scale;
    const stored = Math.fround(scale);
    this.exact.set(vec, r * this.dims);
    this.rowL1[r] = l1 * stored;
    if (stored > this.maxScale) this.maxScale = stored;
    if (this.rowL1[r]! > this.maxL1) this.maxL1 = this.rowL1[r]!;
  }

  removePage(pageId: string): void {
    const rows = this.rowsOf.get(pageId);
    if (!rows) return;
    this.rowsOf.delete(pageId);
    // Highest first, so a moved row never lands in a hole still to be filled.
    for (const r of [...rows].sort((a, b) => b - a)) this.removeRow(r);
  }

  private removeRow(r: number): void {
    const last = this.rowPage.length - 1;
    if (r !== last) {
      new Uint8Array(this.memory.buffer).copyWithin(
        this.matrixOff + r * this.stride,
        this.matrixOff + last * this.stride,
        this.matrixOff + (last + 1) * this.stride,
      );
      const scales = new Float32Array(this.memory.buffer, this.scalesOff, this.capacity);
      scales[r] = scales[last]!;
      this.exact.copyWithin(r * this.dims, last * this.dims, (last + 1) * this.dims);
      this.rowL1[r] = this.rowL1[last]!;
      const movedPage = this.rowPage[last]!;
      this.rowPage[r] = movedPage;
      this.rowOrd[r] = this.rowOrd[last]!;
      this.rowTag[r] = this.rowTag[last]!;
      this.rowLast[r] = this.rowLast[last]!;
      const list = this.rowsOf.get(movedPage)!;
      list[list.indexOf(last)] = r;
    }
    this.rowPage.pop();
    this.rowOrd.pop();
    this.rowTag.pop();
    this.rowLast.pop();
  }

  /**
   * The `k` rows most similar to `query` by exact cosine (dot product of unit vectors), best
   * first. The int8 scan ranks every row; the best candidates are rescored from the f32
   * vectors, and more are taken until the k-th exact score is at least every other row's upper
   * bound (its approximate score plus its error), so no row left out could rank higher.
   */
  top(query: Float32Array, k: number): RowHit[] {
    const n = this.rows;
    this.checkQuery(query);
    if (n === 0 || k <= 0) return [];
    const { t, l1 } = this.scanAll(query);
    const scores = new Float32Array(this.memory.buffer, this.scoresOff, n);
    const scales = new Float32Array(this.memory.buffer, this.scalesOff, n);
    // Exact scores survive a widening: each row is rescored once.
    const exactOf = new Map<number, number>();
    const exact = (r: number) => {
      let e = exactOf.get(r);
      if (e === undefined) exactOf.set(r, (e = this.dot(r, query)));
      return e;
    };
    let want = Math.min(n, k + Math.max(16, k >> 1));
    for (;;) {
      const candidates = selectTop(scores, want);
      const top = candidates
        .map((r) => ({ r, score: exact(r) }))
        .sort((a, b) => b.score - a.score || a.r - b.r)
        .slice(0, Math.min(k, n));
      if (want >= n || this.provedTop(top[top.length - 1]!.score, candidates, scores, scales, t, l1)) return top.map(({ r, score }) => this.rowHit(r, score));
      want = Math.min(n, want * 4);
    }
  }

  /** Every row of one page scored exactly against the query (none when the page has no rows). */
  pageScores(pageId: string, query: Float32Array): RowHit[] {
    this.checkQuery(query);
    return (this.rowsOf.get(pageId) ?? []).map((r) => this.rowHit(r, this.dot(r, query)));
  }

  private rowHit(r: number, score: number): RowHit {
    return { pageId: this.rowPage[r]!, ord: this.rowOrd[r]!, last: this.rowLast[r]!, tag: this.rowTag[r]!, score };
  }

  private checkQuery(query: Float32Array): void {
    if (query.length !== this.dims) throw new Error(`query of ${query.length} dimensions in a ${this.dims}-dimension matrix`);
  }

  /** The error bound that holds for every row: the largest row scale and quantized L1 norm stored. */
  private matrixBound(t: number, l1: number): number {
    return (this.maxScale / 2) * l1 + (t / 2) * this.maxL1 + SLACK;
  }

  /** No row outside `candidates` can score above `kth`: first by the matrix-wide bound, else row by row. */
  private provedTop(kth: number, candidates: number[], scores: Float32Array, scales: Float32Array, t: number, l1: number): boolean {
    const threshold = scores[candidates[candidates.length - 1]!]! * t;
    if (kth >= threshold + this.matrixBound(t, l1)) return true;
    const taken = new Uint8Array(scores.length);
    for (const r of candidates) taken[r] = 1;
    for (let r = 0; r < scores.length; r++) {
      if (taken[r]) continue;
      if (scores[r]! * t + (scales[r]! / 2) * l1 + (t / 2) * this.rowL1[r]! + SLACK > kth) return false;
    }
    return true;
  }

  private dot(r: number, query: Float32Array): number {
    const base = r * this.dims;
    let s = 0;
    for (let i = 0; i < query.length; i++) s += this.exact[base + i]! * query[i]!;
    return s;
  }

  /** Quantizes the query into linear memory and scans every row: scores[r] · t is row r's approximate score. */
  private scanAll(query: Float32Array): { t: number; l1: number } {
    let qmax = 0;
    let l1 = 0;
    for (const x of query) {
      const a = Math.abs(x);
      if (a > qmax) qmax = a;
      l1 += a;
    }
    const t = qmax > 0 && Number.isFinite(qmax) ? qmax / this.queryRange : 0;
    const codes = new Int16Array(this.memory.buffer, this.queryOff, this.stride).fill(0);
    if (t > 0) for (let i = 0; i < query.length; i++) codes[i] = Math.round(query[i]! / t);
    this.scanFn(this.matrixOff, this.rows, this.stride, this.queryOff, this.scalesOff, this.scoresOff);
    return { t, l1 };
  }

  /**
   * The scan alone: the `k` rows with the highest approximate scores and a bound on every row's
   * error. With row r stored as s·c (|v − s·c| ≤ s/2 per component) and the query as t·d
   * (|q − t·d| ≤ t/2), |q·v − (t·d)·(s·c)| ≤ (s/2)·|q|₁ + (t/2)·|s·c|₁.
   */
  scan(query: Float32Array, k: number): Scan {
    const n = this.rows;
    this.checkQuery(query);
    if (n === 0 || k <= 0) return { hits: [], complete: n === 0, threshold: -Infinity, error: 0 };
    const { t, l1 } = this.scanAll(query);
    const scores = new Float32Array(this.memory.buffer, this.scoresOff, n);
    const top = selectTop(scores, Math.min(k, n));
    const hits = top.map((r) => this.rowHit(r, scores[r]! * t));
    return {
      hits,
      complete: top.length === n,
      threshold: top.length === n ? -Infinity : hits[hits.length - 1]!.score,
      error: this.matrixBound(t, l1),
    };
  }

  private ensure(rows: number): void {
    if (rows <= this.capacity) return;
    this.layout(Math.max(rows, Math.ceil(this.capacity * 1.5)));
  }

  /** Grows memory to hold `capacity` rows; scales and matrix move up to make room for larger buffers. */
  private layout(capacity: number): void {
    const align = (x: number) => Math.ceil(x / 16) * 16;
    const queryOff = 0;
    const scoresOff = align(this.stride * 2);
    const scalesOff = scoresOff + align(capacity * 4);
    const matrixOff = scalesOff + align(capacity * 4);
    const need = matrixOff + capacity * this.stride;
    const have = this.memory.buffer.byteLength;
    if (need > have) this.memory.grow(Math.ceil((need - have) / PAGE));
    const bytes = new Uint8Array(this.memory.buffer);
    // Every region moves up (or stays): the matrix first, then the scales below it.
    if (this.rows > 0 && matrixOff !== this.matrixOff) bytes.copyWithin(matrixOff, this.matrixOff, this.matrixOff + this.rows * this.stride);
    if (this.rows > 0 && scalesOff !== this.scalesOff) bytes.copyWithin(scalesOff, this.scalesOff, this.scalesOff + this.rows * 4);
    this.queryOff = queryOff;
    this.scoresOff = scoresOff;
    this.scalesOff = scalesOff;
    this.matrixOff = matrixOff;
    this.capacity = capacity;
    const exact = new Float32Array(capacity * this.dims);
    exact.set(this.exact.subarray(0, this.rows * this.dims));
    this.exact = exact;
    const rowL1 = new Float32Array(capacity);
    rowL1.set(this.rowL1.subarray(0, this.rows));
    this.rowL1 = rowL1;
  }
}

/** Indices of the k largest scores, best first: a bounded min-heap over one pass. */
export function selectTop(scores: Float32Array, k: number): number[] {
  const heap: number[] = [];
  const less = (a: number, b: number) => scores[a]! < scores[b]!;
  const down = (i: number) => {
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < heap.length && less(heap[l]!, heap[m]!)) m = l;
      if (r < heap.length && less(heap[r]!, heap[m]!)) m = r;
      if (m === i) return;
      [heap[i], heap[m]] = [heap[m]!, heap[i]!];
      i = m;
    }
  };
  for (let i = 0; i < scores.length; i++) {
    if (heap.length < k) {
      heap.push(i);
      for (let j = heap.length - 1; j > 0;) {
        const p = (j - 1) >> 1;
        if (!less(heap[j]!, heap[p]!)) break;
        [heap[j], heap[p]] = [heap[p]!, heap[j]!];
        j = p;
      }
    } else if (scores[i]! > scores[heap[0]!]!) {
      heap[0] = i;
      down(0);
    }
  }
  return heap.sort((a, b) => scores[b]! - scores[a]! || a - b);
}
