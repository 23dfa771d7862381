import { DOT_WASM_BASE64, DOT_WASM_SHARED_BASE64 } from './dot-wasm.js';
import { finish, handOver, type Part, releaseMatrix, scanInParallel, settle, shareChunks } from './scan-helper.js';

/** Compiled once each; every matrix gets its own instance and linear memory. */
const MODULE = new WebAssembly.Module(Buffer.from(DOT_WASM_BASE64, 'base64'));
const SHARED_MODULE = new WebAssembly.Module(Buffer.from(DOT_WASM_SHARED_BASE64, 'base64'));
const PAGE = 65536;
/** A shared memory needs a maximum: 4 GiB, as far as a plain one may grow. */
const MAX_PAGES = 65536;

/**
 * From this many rows a scan is split with the helper thread (scan-helper.ts): below it the
 * hand-over (~0.1 ms) is a sizeable share of a scan that takes a few milliseconds.
 */
export const PARALLEL_FROM = 16_384;

/**
 * A shared memory when this process can make one (scan-helper.ts reads the same rows from its
 * thread), else a plain one scanned by the serving thread alone.
 */
function linearMemory(): { memory: WebAssembly.Memory; module: WebAssembly.Module; shared: boolean } {
  try {
    return { memory: new WebAssembly.Memory({ initial: 1, maximum: MAX_PAGES, shared: true }), module: SHARED_MODULE, shared: true };
  } catch {
    return { memory: new WebAssembly.Memory({ initial: 1 }), module: MODULE, shared: false };
  }
}

/** Matrices dropped without `dispose` are let go by the helper once collected. */
const released = new FinalizationRegistry<number>((id) => releaseMatrix(id));
let nextMatrixId = 1;

export interface RowHit {
  pageId: string;
  /** The row's first and last section ord (a row may stand for a window of sections). */
  ord: number;
  last: number;
  /** The row's tag as stored (callers keep 32 bits of the embedded text's hash there, to spot stale rows). */
  tag: number;
  score: number;
}

/** A scan begun by `VectorMatrix.begin`, the helper claiming chunks of its rows. */
export interface PendingScan {
  readonly query: Float32Array;
  /** The query's scale in the scan. */
  readonly t: number;
  readonly part: Part;
  /** Rows when it began. */
  readonly n: number;
  /** The matrix's counts when it began: a scan or a change since makes `topOf` scan again. */
  readonly scans: number;
  readonly mutations: number;
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
/** Float rounding in the scan and in rescoring, well above f32 epsilon at these magnitudes. */
const SLACK = 1e-5;

/**
 * One workspace's section vectors as a dense row-major int8 matrix in WebAssembly memory, each
 * row with its own scale (its largest component maps to ±127): a vector is held as scale ×
 * codes, a quarter of its f32 bytes (issue 19: the f32 copy kept beside it for rescoring was
 * four fifths of the memory, 490 MB at 240,000 sections). The quantized vectors are the ones
 * searched: a row's score is the f32 query's dot product with its scale × codes (a component is
 * off its f32 value by at most scale / 2, so a score by at most scale / 2 × |q|₁; the f32
 * vectors stay in the database). Every query scans the whole matrix with the query quantized to
 * int16 (SIMD integer dot products), whose scores are off by a bound known per row; `top`
 * rescores the best rows with the f32 query and widens its candidates until no row left out
 * could beat the k-th score, so its answer is the exact top k of the quantized vectors. Rows are
 * (page, window of section ords); a page's rows are replaced together and removed by moving the
 * last row into the hole, so the matrix stays packed.
 */
export class VectorMatrix {
  private readonly id = nextMatrixId++;
  private readonly linear = linearMemory();
  private readonly memory = this.linear.memory;
  private readonly scanFn = new WebAssembly.Instance(this.linear.module, { env: { memory: this.memory } }).exports.scan as (
    m: number,
    rows: number,
    stride: number,
    q: number,
    scales: number,
    out: number,
  ) => void;
  /** Set by `dispose`: scans stay on this thread. */
  private alone = false;
  /** Bumped by every change of rows and every scan: a scan begun (`begin`) is finished only if neither moved. */
  private mutations = 0;
  private scans = 0;
  /**
   * Per row, sized to the capacity: its page, first and last ord, tag, and the next row of the
   * same page (-1 ends the list); a page is found by its first row. Typed arrays and one map
   * entry a page: at 100,000 pages a list of row numbers per page and four arrays of JS numbers
   * held ~30 MB of the heap, these ~10 (docs/decisions.md "Resident memory at 100,000 pages").
   */
  private count = 0;
  private rowPage: string[] = [];
  private rowOrd = new Int32Array(0);
  private rowLast = new Int32Array(0);
  private rowTag = new Uint32Array(0);
  private rowNext = new Int32Array(0);
  private readonly firstRow = new Map<string, number>();
  private capacity = 0;
  /** Byte offsets inside linear memory: [query i16 | scores f32 | scales f32 | matrix i8]. */
  private queryOff = 0;
  private scoresOff = 0;
  private scalesOff = 0;
  private matrixOff = 0;
  /** Each quantized row's L1 norm (scale × Σ|code|), in row order. */
  private rowL1 = new Float32Array(0);
  /** The largest quantized L1 norm ever stored: a quick bound before the per-row one. */
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
    if (this.linear.shared) released.register(this, this.id, this);
  }

  /** The helper thread lets go of this matrix's memory now; the matrix still answers, scanning alone. */
  dispose(): void {
    this.alone = true;
    released.unregister(this);
    releaseMatrix(this.id);
  }

  get rows(): number {
    return this.count;
  }

  get pages(): number {
    return this.firstRow.size;
  }

  /** Bytes held: linear memory (int8 rows, scales, score buffer) and the rows' norms and metadata, with headroom. */
  get bytes(): number {
    return this.memory.buffer.byteLength + this.capacity * (4 * 5 + 8);
  }

  has(pageId: string): boolean {
    return this.firstRow.has(pageId);
  }

  /** A page's rows in the order they were set. */
  private rowsOfPage(pageId: string): number[] {
    const rows: number[] = [];
    for (let r = this.firstRow.get(pageId) ?? -1; r >= 0; r = this.rowNext[r]!) {
      if (rows.length === this.count) throw new Error(`matrix rows of ${pageId} form a cycle`);
      rows.push(r);
    }
    return rows;
  }

  /** Sets a page's vectors (one per window of sections), replacing what it had. */
  setPage(pageId: string, vectors: { ord: number; last?: number; vec: Float32Array; tag: number }[]): void {
    // removePage waits for the helper and counts the change first.
    this.removePage(pageId);
    if (vectors.length === 0) return;
    for (const { ord, last, vec, tag } of vectors) {
      if (vec.length !== this.dims) throw new Error(`vector of ${vec.length} dimensions in a ${this.dims}-dimension matrix`);
      for (const o of [ord, last ?? ord]) if (!Number.isInteger(o) || o < 0 || o > I32_MAX) throw new Error(`ord ${o} is not a 31-bit integer`);
      if (tag >>> 0 !== tag) throw new Error(`tag ${tag} is not an unsigned 32-bit integer`);
    }
    this.ensure(this.count + vectors.length);
    this.firstRow.set(pageId, this.count);
    for (const { ord, last, vec, tag } of vectors) {
      const r = this.count++;
      this.writeRow(r, vec);
      this.rowPage[r] = pageId;
      this.rowOrd[r] = ord;
      this.rowLast[r] = last ?? ord;
      this.rowTag[r] = tag;
      this.rowNext[r] = r + 1;
    }
    this.rowNext[this.count - 1] = -1;
  }

  private writeRow(r: number, vec: Float32Array): void {
    const codes = new Int8Array(this.memory.buffer, this.matrixOff + r * this.stride, this.stride).fill(0);
    const scale = quantize(vec, codes);
    let l1 = 0;
    for (let i = 0; i < vec.length; i++) l1 += Math.abs(codes[i]!);
    new Float32Array(this.memory.buffer, this.scalesOff, this.capacity)[r] = scale;
    this.rowL1[r] = l1 * Math.fround(scale);
    if (this.rowL1[r]! > this.maxL1) this.maxL1 = this.rowL1[r]!;
  }

  removePage(pageId: string): void {
    settle(this.id);
    this.mutations++;
    const rows = this.rowsOfPage(pageId);
    if (rows.length === 0) return;
    this.firstRow.delete(pageId);
    // Highest first, so a moved row never lands in a hole still to be filled (the last row is
    // then always another page's, or the one removed).
    for (const r of rows.sort((a, b) => b - a)) this.removeRow(r);
  }

  private removeRow(r: number): void {
    const last = this.count - 1;
    if (r !== last) {
      new Uint8Array(this.memory.buffer).copyWithin(
        this.matrixOff + r * this.stride,
        this.matrixOff + last * this.stride,
        this.matrixOff + (last + 1) * this.stride,
      );
      const scales = new Float32Array(this.memory.buffer, this.scalesOff, this.capacity);
      scales[r] = scales[last]!;
      this.rowL1[r] = this.rowL1[last]!;
      const movedPage = this.rowPage[last]!;
      this.rowPage[r] = movedPage;
      this.rowOrd[r] = this.rowOrd[last]!;
      this.rowTag[r] = this.rowTag[last]!;
      this.rowLast[r] = this.rowLast[last]!;
      this.rowNext[r] = this.rowNext[last]!;
      // Whatever pointed at the moved row points at its new place.
      const head = this.firstRow.get(movedPage)!;
      if (head === last) this.firstRow.set(movedPage, r);
      else {
        let prev = head;
        while (this.rowNext[prev] !== last) {
          prev = this.rowNext[prev]!;
          if (prev < 0) throw new Error(`matrix row ${last} is not in the list of its page`);
        }
        this.rowNext[prev] = r;
      }
    }
    this.rowPage.length = last;
    this.count = last;
  }

  /**
   * The `k` rows most similar to `query` (dot product with the quantized rows), best first. The
   * scan ranks every row with the query quantized; the best candidates are rescored with the
   * f32 query, and more are taken until the k-th score is at least every other row's upper
   * bound (its scan score plus its error), so no row left out could rank higher.
   */
  top(query: Float32Array, k: number): RowHit[] {
    const n = this.rows;
    this.checkQuery(query);
    if (n === 0 || k <= 0) return [];
    return this.ranked(query, k, this.scanAll(query));
  }

  /**
   * Begins a scan whose rows the helper thread claims chunk by chunk while the caller does other work (a
   * hybrid search's keyword statements), to be finished by `topOf`; null when there is no helper
   * to hand it to (the caller then calls `top`). Nothing is held: a change of the rows or another
   * scan meanwhile only makes `topOf` scan again.
   */
  begin(query: Float32Array): PendingScan | null {
    const n = this.rows;
    this.checkQuery(query);
    if (!this.helped(n)) return null;
    settle(this.id);
    const t = this.quantizeQuery(query);
    const part = handOver(this.id, this.memory, this.linear.module, this.scanArgs(0, n));
    if (!part) return null;
    return { query, t, part, n, scans: ++this.scans, mutations: this.mutations };
  }

  /** The `k` rows `top` gives, from a scan begun with `begin`: this thread scans what the helper has not taken yet. */
  topOf(pending: PendingScan, query: Float32Array, k: number): RowHit[] {
    // Finished already (a second call, or waited for by a change or a stop), or anything moved.
    const current =
      pending.part.ok === null && pending.query === query && pending.scans === this.scans && pending.mutations === this.mutations && pending.n === this.rows;
    if (!current || k <= 0) {
      finish(pending.part);
      return this.top(query, k);
    }
    shareChunks(pending.part, this.scanChunk);
    if (!finish(pending.part)) this.scanFn(...this.scanArgs(0, pending.n));
    return this.ranked(query, k, pending.t);
  }

  /** `top`'s answer from the scores of a whole scan (`t`: the query's scale in it). */
  private ranked(query: Float32Array, k: number, t: number): RowHit[] {
    const n = this.rows;
    const scores = new Float32Array(this.memory.buffer, this.scoresOff, n);
    // Rescored scores survive a widening: each row is rescored once.
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
      if (want >= n || this.provedTop(top[top.length - 1]!.score, candidates, scores, t)) return top.map(({ r, score }) => this.rowHit(r, score));
      want = Math.min(n, want * 4);
    }
  }

  /** Every row of one page scored against the f32 query (none when the page has no rows). */
  pageScores(pageId: string, query: Float32Array): RowHit[] {
    this.checkQuery(query);
    return this.rowsOfPage(pageId).map((r) => this.rowHit(r, this.dot(r, query)));
  }

  private rowHit(r: number, score: number): RowHit {
    return { pageId: this.rowPage[r]!, ord: this.rowOrd[r]!, last: this.rowLast[r]!, tag: this.rowTag[r]!, score };
  }

  private checkQuery(query: Float32Array): void {
    if (query.length !== this.dims) throw new Error(`query of ${query.length} dimensions in a ${this.dims}-dimension matrix`);
  }

  /** The scan's error bound that holds for every row: the largest quantized L1 norm stored. */
  private matrixBound(t: number): number {
    return (t / 2) * this.maxL1 + SLACK;
  }

  /** No row outside `candidates` can score above `kth`: first by the matrix-wide bound, else row by row. */
  private provedTop(kth: number, candidates: number[], scores: Float32Array, t: number): boolean {
    const threshold = scores[candidates[candidates.length - 1]!]! * t;
    if (kth >= threshold + this.matrixBound(t)) return true;
    const taken = new Uint8Array(scores.length);
    for (const r of candidates) taken[r] = 1;
    for (let r = 0; r < scores.length; r++) {
      if (taken[r]) continue;
      if (scores[r]! * t + (t / 2) * this.rowL1[r]! + SLACK > kth) return false;
    }
    return true;
  }

  /** Row r's score: the f32 query against its scale × codes. */
  private dot(r: number, query: Float32Array): number {
    const codes = new Int8Array(this.memory.buffer, this.matrixOff + r * this.stride, this.dims);
    return codesDot(codes, new Float32Array(this.memory.buffer, this.scalesOff + r * 4, 1)[0]!, query);
  }

  /** Quantizes the query into linear memory and scans every row: scores[r] · t is row r's approximate score. */
  private scanAll(query: Float32Array): number {
    settle(this.id);
    this.scans++;
    const t = this.quantizeQuery(query);
    const n = this.rows;
    if (!this.helped(n)) {
      this.scanFn(this.matrixOff, n, this.stride, this.queryOff, this.scalesOff, this.scoresOff);
      return t;
    }
    // The helper and this thread scan chunks of rows until none is left; this thread then waits
    // for it, so nothing can change the rows meanwhile (scan-helper.ts).
    if (!scanInParallel(this.id, this.memory, this.linear.module, this.scanArgs(0, n), this.scanChunk)) this.scanFn(...this.scanArgs(0, n));
    return t;
  }

  /** Whether a scan of `n` rows is shared with the helper thread. */
  private helped(n: number): boolean {
    return this.linear.shared && !this.alone && n >= PARALLEL_FROM;
  }

  /** The scan's arguments for `rows` rows from row `first`. */
  private scanArgs(first: number, rows: number): readonly [number, number, number, number, number, number] {
    return [this.matrixOff + first * this.stride, rows, this.stride, this.queryOff, this.scalesOff + first * 4, this.scoresOff + first * 4];
  }

  private readonly scanChunk = (first: number, rows: number): void => this.scanFn(...this.scanArgs(first, rows));

  /** The query's int16 codes into linear memory; returns its scale t (q ≈ t · codes). */
  private quantizeQuery(query: Float32Array): number {
    let qmax = 0;
    for (const x of query) {
      const a = Math.abs(x);
      if (a > qmax) qmax = a;
    }
    const t = qmax > 0 && Number.isFinite(qmax) ? qmax / this.queryRange : 0;
    const codes = new Int16Array(this.memory.buffer, this.queryOff, this.stride).fill(0);
    if (t > 0) for (let i = 0; i < query.length; i++) codes[i] = Math.round(query[i]! / t);
    return t;
  }

  /**
   * The scan alone: the `k` rows with the highest approximate scores and a bound on every row's
   * error against its score (`top`'s). With row r held as s·c and the query scanned as t·d
   * (|q − t·d| ≤ t/2 per component), |q·(s·c) − (t·d)·(s·c)| ≤ (t/2)·|s·c|₁.
   */
  scan(query: Float32Array, k: number): Scan {
    const n = this.rows;
    this.checkQuery(query);
    if (n === 0 || k <= 0) return { hits: [], complete: n === 0, threshold: -Infinity, error: 0 };
    const t = this.scanAll(query);
    const scores = new Float32Array(this.memory.buffer, this.scoresOff, n);
    const top = selectTop(scores, Math.min(k, n));
    const hits = top.map((r) => this.rowHit(r, scores[r]! * t));
    return {
      hits,
      complete: top.length === n,
      threshold: top.length === n ? -Infinity : hits[hits.length - 1]!.score,
      error: this.matrixBound(t),
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
    const grown = <T extends Float32Array | Int32Array | Uint32Array>(old: T, make: (n: number) => T): T => {
      const next = make(capacity);
      next.set(old.subarray(0, this.count) as never);
      return next;
    };
    this.rowL1 = grown(this.rowL1, (n) => new Float32Array(n));
    this.rowOrd = grown(this.rowOrd, (n) => new Int32Array(n));
    this.rowLast = grown(this.rowLast, (n) => new Int32Array(n));
    this.rowTag = grown(this.rowTag, (n) => new Uint32Array(n));
    this.rowNext = grown(this.rowNext, (n) => new Int32Array(n));
  }
}

/** Writes `vec`'s int8 codes (its largest component maps to ±127) into `codes`; returns the scale. */
function quantize(vec: Float32Array, codes: Int8Array): number {
  let max = 0;
  for (const x of vec) if (Math.abs(x) > max) max = Math.abs(x);
  const scale = max > 0 && Number.isFinite(max) ? max / CODE : 0;
  if (scale > 0) for (let i = 0; i < vec.length; i++) codes[i] = Math.max(-CODE, Math.min(CODE, Math.round(vec[i]! / scale)));
  return scale;
}

/** The f32 query against codes × scale (the scale as f32, as the matrix keeps it). */
function codesDot(codes: Int8Array, scale: number, query: Float32Array): number {
  let s = 0;
  for (let i = 0; i < query.length; i++) s += codes[i]! * query[i]!;
  return s * Math.fround(scale);
}

/**
 * The score a matrix row made of `vec` would get for `query`, to the bit: for vectors scored
 * outside a matrix (a point-in-time answer embeds text that is no longer current) so that they
 * rank exactly as the same text's row does.
 */
export function quantizedScore(vec: Float32Array, query: Float32Array): number {
  const codes = new Int8Array(vec.length);
  return codesDot(codes, quantize(vec, codes), query);
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
