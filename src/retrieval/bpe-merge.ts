/**
 * Byte-pair merging of one pre-tokenized piece, as gpt-tokenizer does it (repeatedly merge the
 * adjacent pair of parts whose joined bytes have the lowest rank, the leftmost among equal
 * ranks, until no joined pair has a rank) but in O(n log n): the parts are a linked list over
 * their start offsets and the candidate pairs sit in a binary heap ordered by (rank, start).
 * The library scans every pair for the lowest and splices arrays at each merge, O(n²): a page
 * holding one long run of letters (a 20,000-character line of CJK text, a pasted blob) took
 * seconds to count and held the event loop — every request of the node — while it did.
 *
 * An entry of the heap is stale when its part has been merged away or its pair's rank has
 * changed since; a pair's bytes only grow, so a rank never comes back to an older value.
 * Returns the start offsets of the final parts, then `piece.length`.
 */
export function mergeParts(piece: Uint8Array, rankOf: (bytes: Uint8Array) => number | undefined): number[] {
  const n = piece.length;
  if (n === 0) return [0];
  const next = new Int32Array(n);
  const prev = new Int32Array(n);
  const rank = new Float64Array(n);
  const alive = new Uint8Array(n).fill(1);
  for (let i = 0; i < n; i++) {
    next[i] = i + 1;
    prev[i] = i - 1;
  }
  // The rank of joining part s with the part after it (Infinity: no such token, or no next part).
  const pairRank = (s: number): number => {
    const a = next[s]!;
    if (a >= n) return Infinity;
    return rankOf(piece.subarray(s, next[a]!)) ?? Infinity;
  };
  // Keys rank × (n + 1) + start: one number orders by rank, then leftmost (ranks < 2^21, so
  // exact for pieces far beyond a page's size limit).
  const heap: number[] = [];
  const stride = n + 1;
  const push = (key: number) => {
    let i = heap.length;
    heap.push(key);
    while (i > 0) {
      const up = (i - 1) >> 1;
      if (heap[up]! <= key) break;
      heap[i] = heap[up]!;
      i = up;
    }
    heap[i] = key;
  };
  const pop = (): number => {
    const top = heap[0]!;
    const last = heap.pop()!;
    if (heap.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= heap.length) break;
        const r = l + 1;
        const c = r < heap.length && heap[r]! < heap[l]! ? r : l;
        if (heap[c]! >= last) break;
        heap[i] = heap[c]!;
        i = c;
      }
      heap[i] = last;
    }
    return top;
  };
  const rerank = (s: number) => {
    rank[s] = pairRank(s);
    if (rank[s] !== Infinity) push(rank[s]! * stride + s);
  };
  for (let s = 0; s < n; s++) rerank(s);
  while (heap.length > 0) {
    const key = pop();
    const s = key % stride;
    if (!alive[s] || rank[s]! * stride + s !== key) continue;
    // Join s with the part after it.
    const a = next[s]!;
    alive[a] = 0;
    next[s] = next[a]!;
    if (next[a]! < n) prev[next[a]!] = s;
    rerank(s);
    if (prev[s]! >= 0) rerank(prev[s]!);
  }
  const starts: number[] = [];
  for (let s = 0; s < n; s = next[s]!) starts.push(s);
  starts.push(n);
  return starts;
}
