import { compareEntries, encodeSorted, mergedChanges, parseTree, type TreeEntry } from './codec.js';

/**
 * Trees may be stored as deltas against the previous version of the same tree so that a
 * commit into a folder of thousands of pages adds bytes proportional to the change. This module
 * holds the chain limits and the delta format; ObjectStore (object-store.ts) builds and walks
 * the chains.
 */

/**
 * Longest delta chain. A cold read walks at most this many small rows (warm reads hit the tree
 * cache): ~60 ms to rebuild a 10,000-entry folder at depth 64 on a busy 2-CPU machine, about
 * half of it parsing the full copy. With re-basing (below) a longer chain would save almost no
 * storage, and 32 would double the re-based deltas written; 64 keeps both small.
 */
export const MAX_DELTA_DEPTH = 64;

/**
 * When a chain reaches MAX_DELTA_DEPTH, the next version is stored as one delta against the
 * chain's full copy (depth 1) if that delta is under this fraction of the full tree, and as a
 * new full copy otherwise. A full copy of a 10,000-entry folder deflates to ~240 KB, so a plain
 * "full copy every 64 versions" costs ~3.7 KB per commit; re-basing on the existing full copy
 * costs only the entries changed since it. About 10% balances the growing re-based deltas
 * against the next full copy (optimum near sqrt(2 x full size x growth per re-base)).
 */
export const REBASE_MAX_RATIO = 0.1;

// Delta format (deflated like every `data` value):
//   byte    format version (1)
//   varint  number of removed names, then each removed name as UTF-8 followed by NUL
//   rest    upserted entries (added or changed), encoded exactly like a git tree body
// Names are unique within a tree, so a name identifies the entry to remove or replace, and the
// reconstructed tree is re-sorted and re-hashed (then checked against its sha) on read.
const DELTA_FORMAT = 1;

function writeVarint(n: number, out: number[]): void {
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
}

export function encodeTreeDelta(base: readonly TreeEntry[], next: readonly TreeEntry[]): Buffer {
  const known = mergedChanges(base, next);
  if (known) {
    // Made from this base by mergeEntries: its changes are the delta. A replaced entry (same
    // name and kind) is an upsert alone; one that changed kind is removed, then upserted.
    const replaced = new Set(known.added.map((e) => `${e.mode} ${e.name}`));
    const names = known.removed.filter((e) => !replaced.has(`${e.mode} ${e.name}`)).map((e) => e.name);
    return deltaBody(names, known.added);
  }
  // Both lists are in git order, so one merge walk finds removals and upserts.
  const removed: string[] = [];
  const upserts: TreeEntry[] = [];
  let i = 0;
  let j = 0;
  while (i < base.length || j < next.length) {
    const b = base[i];
    const n = next[j];
    if (b === n) {
      // The same entry object: unchanged (a rewritten tree keeps its base's entries).
      i++;
      j++;
    } else if (b && n && b.name === n.name && b.mode === n.mode) {
      if (b.sha !== n.sha) upserts.push(n);
      i++;
      j++;
    } else if (b && (!n || compareEntries(b, n) < 0)) {
      removed.push(b.name);
      i++;
    } else if (n) {
      // A name that changes between file and folder is removed, then upserted: removals apply first.
      upserts.push(n);
      j++;
    }
  }
  return deltaBody(removed, upserts);
}

function deltaBody(removed: readonly string[], upserts: readonly TreeEntry[]): Buffer {
  const head: number[] = [DELTA_FORMAT];
  writeVarint(removed.length, head);
  const parts: Buffer[] = [Buffer.from(head)];
  for (const name of removed) parts.push(Buffer.from(`${name}\0`, 'utf8'));
  parts.push(encodeSorted(upserts));
  return Buffer.concat(parts);
}

/** Applies one delta to a name → entry map in place. */
export function applyTreeDelta(entries: Map<string, TreeEntry>, delta: Buffer): void {
  if (delta[0] !== DELTA_FORMAT) throw new Error(`Unknown tree delta format ${String(delta[0])}`);
  let i = 1;
  let count = 0;
  for (let shift = 0; ; shift += 7) {
    const b = delta[i++];
    if (b === undefined || shift > 28) throw new Error('Truncated tree delta');
    count |= (b & 0x7f) << shift;
    if (b < 0x80) break;
  }
  for (let k = 0; k < count; k++) {
    const nul = delta.indexOf(0, i);
    if (nul < 0) throw new Error('Truncated tree delta');
    entries.delete(delta.toString('utf8', i, nul));
    i = nul + 1;
  }
  for (const e of parseTree(delta.subarray(i))) entries.set(e.name, e);
}
