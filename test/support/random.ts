/** A small deterministic PRNG (mulberry32), so generated data is the same on every run. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A random unit vector of `dims` components from `rnd` (components uniform in [-1, 1), then normalised). */
export function unitVector(rnd: () => number, dims: number): Float32Array {
  const v = new Float32Array(dims);
  let s = 0;
  for (let i = 0; i < dims; i++) {
    v[i] = rnd() * 2 - 1;
    s += v[i]! * v[i]!;
  }
  const k = 1 / Math.sqrt(s);
  for (let i = 0; i < dims; i++) v[i]! *= k;
  return v;
}
