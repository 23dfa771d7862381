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

/**
 * One workspace's section vectors as a dense row-major f32 matrix in WebAssembly memory,
 * scanned exactly (every row, SIMD dot products: the vectors are unit length, so the dot is the
 * cosine). Rows are (page, section ord); a page's rows are replaced together and removed by
 * moving the last row into the hole, so the matrix stays packed.
 */
export class VectorMatrix {
  private readonly instance = new WebAssembly.Instance(MODULE, {});
  private readonly memory = this.instance.exports.memory as WebAssembly.Memory;
  private readonly scanFn = this.instance.exports.scan as (m: number, rows: number, dims: number, q: number, out: number) => void;
  private rowPage: string[] = [];
  private rowOrd: number[] = [];
  private rowTag: number[] = [];
  private rowLast: number[] = [];
  private readonly rowsOf = new Map<string, number[]>();
  private capacity = 0;
  /** Byte offsets inside linear memory: [query | scores | matrix]. */
  private queryOff = 0;
  private scoresOff = 0;
  private matrixOff = 0;

  /** Row length in memory: dims rounded up to the SIMD step, zero-padded. */
  private readonly stride: number;

  constructor(readonly dims: number) {
    if (!Number.isInteger(dims) || dims <= 0) throw new Error('vector dimensions must be a positive integer');
    this.stride = Math.ceil(dims / 8) * 8;
    this.layout(1024);
  }

  get rows(): number {
    return this.rowPage.length;
  }

  get pages(): number {
    return this.rowsOf.size;
  }

  /** Bytes of linear memory held (the matrix, the score buffer and headroom). */
  get bytes(): number {
    return this.memory.buffer.byteLength;
  }

  has(pageId: string): boolean {
    return this.rowsOf.has(pageId);
  }

  /** Sets a page's vectors (one per section ord), replacing what it had. */
  setPage(pageId: string, vectors: { ord: number; last?: number; vec: Float32Array; tag: number }[]): void {
    this.removePage(pageId);
    if (vectors.length === 0) return;
    this.ensure(this.rows + vectors.length);
    const rows: number[] = [];
    for (const { ord, last, vec, tag } of vectors) {
      if (vec.length !== this.dims) throw new Error(`vector of ${vec.length} dimensions in a ${this.dims}-dimension matrix`);
      const r = this.rowPage.length;
      new Float32Array(this.memory.buffer, this.matrixOff + r * this.stride * 4, this.stride).fill(0).set(vec);
      this.rowPage.push(pageId);
      this.rowOrd.push(ord);
      this.rowTag.push(tag);
      this.rowLast.push(last ?? ord);
      rows.push(r);
    }
    this.rowsOf.set(pageId, rows);
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
      const bytes = this.stride * 4;
      new Uint8Array(this.memory.buffer).copyWithin(this.matrixOff + r * bytes, this.matrixOff + last * bytes, this.matrixOff + (last + 1) * bytes);
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

  /** The `k` rows most similar to `query`, best first (exact: every row is scored). */
  top(query: Float32Array, k: number): RowHit[] {
    const n = this.rows;
    if (n === 0 || k <= 0) return [];
    if (query.length !== this.dims) throw new Error(`query of ${query.length} dimensions in a ${this.dims}-dimension matrix`);
    new Float32Array(this.memory.buffer, this.queryOff, this.stride).fill(0).set(query);
    this.scanFn(this.matrixOff, n, this.stride, this.queryOff, this.scoresOff);
    const scores = new Float32Array(this.memory.buffer, this.scoresOff, n);
    return selectTop(scores, Math.min(k, n)).map((r) => ({ pageId: this.rowPage[r]!, ord: this.rowOrd[r]!, last: this.rowLast[r]!, tag: this.rowTag[r]!, score: scores[r]! }));
  }

  private ensure(rows: number): void {
    if (rows <= this.capacity) return;
    this.layout(Math.max(rows, Math.ceil(this.capacity * 1.5)));
  }

  /** Grows memory to hold `capacity` rows; the matrix moves to make room for a larger score buffer. */
  private layout(capacity: number): void {
    const dimsBytes = this.stride * 4;
    const queryOff = 0;
    const scoresOff = Math.ceil(dimsBytes / 16) * 16;
    const matrixOff = scoresOff + Math.ceil((capacity * 4) / 16) * 16;
    const need = matrixOff + capacity * dimsBytes;
    const have = this.memory.buffer.byteLength;
    if (need > have) this.memory.grow(Math.ceil((need - have) / PAGE));
    if (matrixOff !== this.matrixOff && this.rows > 0) {
      new Uint8Array(this.memory.buffer).copyWithin(matrixOff, this.matrixOff, this.matrixOff + this.rows * dimsBytes);
    }
    this.queryOff = queryOff;
    this.scoresOff = scoresOff;
    this.matrixOff = matrixOff;
    this.capacity = capacity;
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
      for (let j = heap.length - 1; j > 0; ) {
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
