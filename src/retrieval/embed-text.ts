import { createHash } from 'node:crypto';

/** Consecutive sections are embedded together up to this many characters of text. */
export const WINDOW_CHARS = 1500;

export interface EmbedSection {
  ord: number;
  heading: string;
  text: string;
  block_level: string | null;
}

/** A run of consecutive sections of one page that share one vector. */
export interface Window<S extends EmbedSection = EmbedSection> {
  first: number;
  last: number;
  sections: S[];
}

/**
 * Groups a page's sections (in ord order) into windows: consecutive sections up to WINDOW_CHARS,
 * never across a change of block level, so a vector never mixes text of a `::: level` block
 * with text outside it (a hidden block must not make its neighbours findable by its words).
 * Pages of many short sections get few vectors; a long section is a window of its own.
 */
export function windows<S extends EmbedSection>(sections: S[]): Window<S>[] {
  const out: Window<S>[] = [];
  let cur: Window<S> | null = null;
  let size = 0;
  for (const s of sections) {
    if (cur && (cur.sections[0]!.block_level !== s.block_level || size + s.text.length > WINDOW_CHARS)) cur = null;
    if (!cur) {
      cur = { first: s.ord, last: s.ord, sections: [] };
      out.push(cur);
      size = 0;
    }
    cur.sections.push(s);
    cur.last = s.ord;
    size += s.text.length;
  }
  return out;
}

/** What a window's vector is computed from: the page title, then each section's heading and text. */
export function windowEmbedText(title: string, sections: readonly Pick<EmbedSection, 'heading' | 'text'>[]): string {
  const parts = [title];
  for (const s of sections) {
    if (s.heading && s.heading !== title && !s.text.trimStart().startsWith('#')) parts.push(s.heading);
    parts.push(s.text);
  }
  return parts.join('\n');
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

/**
 * The vector in a driver's bytes, without a copy where they are 4-byte aligned: for reading a
 * vector once and dropping it (the matrix loader quantizes 240,000 of them; a copy of each
 * doubled what the allocator churned through, which it keeps as resident memory). Do not keep
 * the result: it holds the driver's buffer.
 */
export function bytesAsVec(b: Uint8Array): Float32Array {
  return b.byteOffset % 4 === 0 ? new Float32Array(b.buffer, b.byteOffset, b.byteLength >> 2) : bytesToVec(b);
}

/**
 * 32 bits of a text hash, kept per matrix row to tell a stale vector from a current one: its
 * first eight hex digits. A stored hash that is not hex (never written by the service; a row
 * put in by hand) gets 32 bits of its own FNV-1a instead of NaN, so the matrix (which holds
 * tags as unsigned 32-bit integers) still takes the row, and it still differs from current
 * texts' tags but by a 2^-32 chance, as any two tags do.
 */
export function hashTag(hash: string): number {
  if (/^[0-9a-f]{8}/i.test(hash)) return Number.parseInt(hash.slice(0, 8), 16);
  let h = 0x811c9dc5;
  for (let i = 0; i < hash.length; i++) h = Math.imul(h ^ hash.charCodeAt(i), 0x01000193);
  return h >>> 0;
}
