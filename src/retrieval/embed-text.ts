import { createHash } from 'node:crypto';

/** What a section's vector is computed from: its page title, its heading and its text. */
export function sectionEmbedText(title: string, heading: string, text: string): string {
  return heading && heading !== title ? `${title}\n${heading}\n${text}` : `${title}\n${text}`;
}

export function textHash(s: string): string {
  return createHash('sha1').update(s).digest('hex');
}

/** Float32Array ⇄ bytes as stored in section_vectors.vec (little-endian f32). */
export function vecToBytes(v: Float32Array): Buffer {
  return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
}

export function bytesToVec(b: Uint8Array): Float32Array {
  // Copy: a Buffer from the driver may sit at an unaligned offset of a shared pool.
  const out = new Float32Array(b.byteLength / 4);
  new Uint8Array(out.buffer).set(b);
  return out;
}

/** 32 bits of a text hash, kept per matrix row to tell a stale vector from a current one. */
export function hashTag(hash: string): number {
  return Number.parseInt(hash.slice(0, 8), 16);
}
