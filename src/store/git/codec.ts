import { createHash } from 'node:crypto';
import { badRequest, type ServiceError } from '../../errors/index.js';

/**
 * Git objects (blobs, trees, commits) encoded, decoded and hashed exactly as git does, so that
 * what the store holds is what git reads. Pure functions: storage is in object-store.ts.
 */

export type ObjectType = 'blob' | 'tree' | 'commit';
export type TreeMode = '100644' | '40000';

export interface TreeEntry {
  mode: TreeMode;
  name: string;
  sha: string;
}

export interface GitIdentity {
  name: string;
  email: string;
  /** Seconds since the epoch. */
  timestamp: number;
  /** `+hhmm` or `-hhmm`, e.g. `+0000`. */
  tzOffset: string;
}

export interface CommitData {
  tree: string;
  parents: string[];
  author: GitIdentity;
  committer: GitIdentity;
  /** Stored with a trailing newline (as git writes it); parseCommit returns it verbatim. */
  message: string;
}

export interface GitObject {
  type: ObjectType;
  body: Buffer;
}

export const EMPTY_TREE_SHA = '4b825dc642cb6eb9a060e54bf8d69288fbee4904';
export const EMPTY_BLOB_SHA = 'e69de29bb2d1d6434b8b29ae775ad8c2e48c5391';

const SHA_RE = /^[0-9a-f]{40}$/;
const TZ_RE = /^[+-]\d{4}$/;

export function hashObject(type: ObjectType, body: Buffer): string {
  return createHash('sha1').update(`${type} ${body.length}\0`).update(body).digest('hex');
}

export function isSha(value: string): boolean {
  return SHA_RE.test(value);
}

/** Throws ServiceError 400 unless `value` is a 40-hex git object id. */
export function assertSha(value: string, what: string): void {
  if (!SHA_RE.test(value)) throw badRequest(`${what} is not a git object id: ${JSON.stringify(value)}`, 'invalid_object');
}

// Characters HFS+ ignores when comparing names: git refuses `.g\u200cit` for the same reason as `.git`.
const HFS_IGNORABLE_RE = /[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]/g;
// Printable ASCII: the common case, checked without encoding the name.
const PLAIN_NAME_RE = /^[\x20-\x7e]{1,255}$/;
const DOT_GIT_RE = /^(\.git|git~1)[. ]*$/i;

function badName(name: string, why: string): ServiceError {
  return badRequest(`Invalid path segment ${JSON.stringify(name)}: ${why}`, 'invalid_path');
}

/** Throws ServiceError 400 for a name git would refuse in a tree (what `git fsck --strict` flags). */
export function validateName(name: string): void {
  if (name === '' || name === '.' || name === '..') throw badName(name, 'empty, "." or ".."');
  if (name.includes('/')) throw badName(name, 'contains "/"');
  if (PLAIN_NAME_RE.test(name)) {
    if (DOT_GIT_RE.test(name)) throw badName(name, 'reserved by git');
    return;
  }
  if (/[\0\n]/.test(name)) throw badName(name, 'contains NUL or a newline');
  if (Buffer.from(name, 'utf8').toString('utf8') !== name) throw badName(name, 'not valid UTF-8');
  // A longer name cannot be checked out on common file systems.
  if (Buffer.byteLength(name, 'utf8') > 255) throw badName(name, 'longer than 255 bytes');
  if (DOT_GIT_RE.test(name.replace(HFS_IGNORABLE_RE, ''))) throw badName(name, 'reserved by git');
}

function encodeEntry(mode: TreeMode, name: string, sha: string): Buffer {
  const buf = Buffer.allocUnsafe(mode.length + Buffer.byteLength(name, 'utf8') + 22);
  let o = buf.write(mode, 0, 'latin1');
  buf[o++] = 0x20;
  o += buf.write(name, o, 'utf8');
  buf[o++] = 0;
  buf.write(sha, o, 'hex');
  return buf;
}

/**
 * Git compares names as bytes, a directory as if its name ended with '/'. The key is those
 * UTF-8 bytes as a latin1 string, so plain string comparison gives git's order.
 */
function sortKeyOf(mode: TreeMode, name: string): string {
  const key = mode === '40000' ? `${name}/` : name;
  return PLAIN_NAME_RE.test(name) ? key : Buffer.from(key, 'utf8').toString('latin1');
}

/**
 * A validated, immutable entry carrying its encoded bytes and sort key in private fields (so
 * it still compares, spreads and serialises as a plain {mode, name, sha}). A tree of thousands
 * of entries is rewritten on every commit into its folder; re-validating, re-encoding and
 * re-keying the unchanged entries each time would dominate the cost of the commit.
 */
class CheckedEntry implements TreeEntry {
  readonly mode: TreeMode;
  readonly name: string;
  readonly sha: string;
  readonly #encoded: Buffer;
  readonly #key: string;

  private constructor(mode: TreeMode, name: string, sha: string, encoded: Buffer) {
    this.mode = mode;
    this.name = name;
    this.sha = sha;
    this.#encoded = encoded;
    this.#key = sortKeyOf(mode, name);
    Object.freeze(this);
  }

  static of(e: TreeEntry): CheckedEntry {
    if (e instanceof CheckedEntry) return e;
    if (e.mode !== '100644' && e.mode !== '40000') throw badRequest(`Unsupported tree entry mode ${String(e.mode)}`, 'invalid_object');
    validateName(e.name);
    assertSha(e.sha, `tree entry ${JSON.stringify(e.name)}`);
    return new CheckedEntry(e.mode, e.name, e.sha, encodeEntry(e.mode, e.name, e.sha));
  }

  /** From a tree body already split into fields; `encoded` is the entry's bytes (kept as given). */
  static parsed(mode: TreeMode, name: string, sha: string, encoded: Buffer): CheckedEntry {
    validateName(name);
    return new CheckedEntry(mode, name, sha, encoded);
  }

  get encoded(): Buffer {
    return this.#encoded;
  }

  get key(): string {
    return this.#key;
  }
}

/** Git's order of tree entries (see sortKeyOf). */
export function compareEntries(a: TreeEntry, b: TreeEntry): number {
  const x = CheckedEntry.of(a).key;
  const y = CheckedEntry.of(b).key;
  return x < y ? -1 : x > y ? 1 : 0;
}

/** The entry named `name` (file or folder) in a tree's entries in git order, by binary search. */
export function findEntry(sorted: readonly TreeEntry[], name: string): TreeEntry | undefined {
  for (const mode of ['100644', '40000'] as const) {
    const i = indexOfKey(sorted, sortKeyOf(mode, name));
    if (i >= 0) return sorted[i];
  }
  return undefined;
}

function hasKey(sorted: readonly CheckedEntry[], key: string): boolean {
  return indexOfKey(sorted, key) >= 0;
}

/** Validates and returns the entries in git order (a new frozen array of frozen entries). */
export function sortTreeEntries(entries: Iterable<TreeEntry>): readonly TreeEntry[] {
  if (merged.has(entries as readonly TreeEntry[])) return entries as readonly TreeEntry[];
  const out: CheckedEntry[] = [];
  let increasing = true;
  let prevKey: string | undefined;
  for (const e of entries) {
    const entry = CheckedEntry.of(e);
    const key = entry.key;
    if (prevKey !== undefined && key <= prevKey) increasing = false;
    prevKey = key;
    out.push(entry);
  }
  // Rewritten trees arrive mostly in order already; only sort when they are not.
  if (!increasing) {
    out.sort(compareEntries);
    for (let i = 1; i < out.length; i++) {
      if (out[i]!.key === out[i - 1]!.key) throw duplicateEntry(out[i]!.name);
    }
  }
  // A file and a folder of one name have different keys ("x", "x/"): look for the file's key.
  for (const entry of out) {
    if (entry.mode === '40000' && hasKey(out, entry.key.slice(0, -1))) throw duplicateEntry(entry.name);
  }
  const list = Object.freeze(out);
  // In the order given: the given list's body (parseTree's) is this list's too.
  const enc = increasing && Array.isArray(entries) ? encodedOf.get(entries as TreeEntry[]) : undefined;
  if (enc && enc.offsets.length === list.length + 1) encodedOf.set(list, enc);
  return list;
}

function duplicateEntry(name: string): ServiceError {
  return badRequest(`Duplicate tree entry ${JSON.stringify(name)}`, 'invalid_path');
}

/**
 * The encoded body of a frozen entry list and where each entry starts in it (`offsets[n]` is
 * the body's length). A folder of thousands of pages is rewritten on every commit into it:
 * with its previous body at hand, the new body is a few slices of it (mergeEntries), not
 * thousands of entries encoded and joined again.
 */
interface Encoded {
  body: Buffer;
  offsets: Int32Array;
}
const encodedOf = new WeakMap<readonly TreeEntry[], Encoded>();
/** Lists built by mergeEntries: in git order and valid by construction (sortTreeEntries passes them). */
const merged = new WeakSet<readonly TreeEntry[]>();

/** Encodes entries already validated and sorted (a frozen list's body is kept for next time). */
export function encodeSorted(entries: readonly TreeEntry[]): Buffer {
  return encodedList(entries).body;
}

function encodedList(entries: readonly TreeEntry[]): Encoded {
  const known = encodedOf.get(entries);
  if (known) return known;
  const parts = new Array<Buffer>(entries.length);
  const offsets = new Int32Array(entries.length + 1);
  let total = 0;
  for (let i = 0; i < entries.length; i++) {
    const enc = CheckedEntry.of(entries[i]!).encoded;
    parts[i] = enc;
    offsets[i] = total;
    total += enc.length;
  }
  offsets[entries.length] = total;
  const out = { body: Buffer.concat(parts, total), offsets };
  if (Object.isFrozen(entries)) encodedOf.set(entries, out);
  return out;
}

/** The first index whose key is not below `key` (entries in git order). */
function lowerBound(sorted: readonly TreeEntry[], key: string): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (CheckedEntry.of(sorted[mid]!).key < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The index of the entry whose key is `key`, or -1. */
function indexOfKey(sorted: readonly TreeEntry[], key: string): number {
  const i = lowerBound(sorted, key);
  return i < sorted.length && CheckedEntry.of(sorted[i]!).key === key ? i : -1;
}

/**
 * `base` (in git order, valid) without the entries in `removed` and with `added`, in git
 * order, and its encoded body: both built from slices of the base's, so a change of a few
 * entries in a large tree costs neither a sort nor an encoding of it.
 */
export function mergeEntries(base: readonly TreeEntry[], removed: ReadonlySet<TreeEntry>, added: Iterable<TreeEntry>): readonly TreeEntry[] {
  const adds = sortTreeEntries(added);
  const frozenBase = Object.isFrozen(base) ? base : Object.freeze([...base]);
  const enc = encodedList(frozenBase);
  const drops: number[] = [];
  for (const r of removed) {
    const at = lowerBound(frozenBase, CheckedEntry.of(r).key);
    if (frozenBase[at] !== r) throw new Error(`tree entry ${JSON.stringify(r.name)} to remove is not in its tree`);
    drops.push(at);
  }
  drops.sort((a, b) => a - b);
  const dropped = new Set(drops);
  const at: number[] = [];
  for (const a of adds) {
    const key = CheckedEntry.of(a).key;
    // One name once: as it is (not removed), or as the other kind of entry (a file `x`, a folder `x/`).
    const same = indexOfKey(frozenBase, key);
    const other = indexOfKey(frozenBase, a.mode === '40000' ? key.slice(0, -1) : `${key}/`);
    if ((same >= 0 && !dropped.has(same)) || (other >= 0 && !dropped.has(other))) throw duplicateEntry(a.name);
    at.push(lowerBound(frozenBase, key));
  }
  const out: TreeEntry[] = [];
  const parts: Buffer[] = [];
  const offsets = new Int32Array(frozenBase.length - drops.length + adds.length + 1);
  let pos = 0;
  let runStart = -1;
  let d = 0;
  let j = 0;
  const closeRun = (k: number) => {
    if (runStart >= 0) parts.push(enc.body.subarray(enc.offsets[runStart], enc.offsets[k]));
    runStart = -1;
  };
  for (let k = 0; k <= frozenBase.length; k++) {
    while (j < adds.length && at[j] === k) {
      closeRun(k);
      const e = adds[j++]!;
      const bytes = CheckedEntry.of(e).encoded;
      offsets[out.length] = pos;
      out.push(e);
      parts.push(bytes);
      pos += bytes.length;
    }
    if (k === frozenBase.length) break;
    if (d < drops.length && drops[d] === k) {
      d++;
      closeRun(k);
      continue;
    }
    if (runStart < 0) runStart = k;
    offsets[out.length] = pos;
    out.push(frozenBase[k]!);
    pos += enc.offsets[k + 1]! - enc.offsets[k]!;
  }
  closeRun(frozenBase.length);
  offsets[out.length] = pos;
  const list = Object.freeze(out);
  encodedOf.set(list, { body: Buffer.concat(parts, pos), offsets });
  merged.add(list);
  changesOf.set(list, { base: frozenBase, removed: [...removed], added: adds });
  return list;
}

/** What mergeEntries changed to make a list: its delta against that base needs no walk of both. */
const changesOf = new WeakMap<readonly TreeEntry[], { base: readonly TreeEntry[]; removed: readonly TreeEntry[]; added: readonly TreeEntry[] }>();

/** The entries removed from `base` and added to make `next`, when mergeEntries made it from that very list. */
export function mergedChanges(
  base: readonly TreeEntry[],
  next: readonly TreeEntry[],
): { removed: readonly TreeEntry[]; added: readonly TreeEntry[] } | undefined {
  const c = changesOf.get(next);
  return c && c.base === base ? c : undefined;
}

export function encodeTree(entries: Iterable<TreeEntry>): Buffer {
  return encodeSorted(sortTreeEntries(entries));
}

/** A tree entry as git wrote it, any mode (a pushed tree, before it is judged). */
export interface RawTreeEntry {
  mode: string;
  name: string;
  sha: string;
}

/**
 * Walks a tree body's entries in order: `at` is where the entry starts, `sp` the space after its
 * mode, `nul` the NUL after its name (the 20-byte id follows). Throws on a truncated entry.
 */
function scanTree(body: Buffer, visit: (at: number, sp: number, nul: number) => void): void {
  let i = 0;
  while (i < body.length) {
    const sp = body.indexOf(0x20, i);
    const nul = sp < 0 ? -1 : body.indexOf(0, sp + 1);
    if (sp < 0 || nul < 0 || nul + 21 > body.length) throw badRequest('Truncated tree object', 'invalid_object');
    visit(i, sp, nul);
    i = nul + 21;
  }
}

/** Decodes a tree body without judging its modes or names (the push import names what it refuses). */
export function readTreeEntries(body: Buffer): RawTreeEntry[] {
  const out: RawTreeEntry[] = [];
  scanTree(body, (at, sp, nul) => {
    out.push({ mode: body.toString('latin1', at, sp), name: body.toString('utf8', sp + 1, nul), sha: body.toString('hex', nul + 1, nul + 21) });
  });
  return out;
}

/** Decodes a tree body (only the two modes this service writes are accepted). */
export function parseTree(input: Buffer): TreeEntry[] {
  const out: TreeEntry[] = [];
  // One copy for the whole tree: its entries keep slices of it (side by side, see encodeSorted),
  // and not of the caller's buffer (a pooled one, or a larger delta).
  const body = Buffer.from(input);
  const starts: number[] = [];
  scanTree(body, (at, sp, nul) => {
    starts.push(at);
    const mode = body.toString('latin1', at, sp);
    if (mode !== '100644' && mode !== '40000') throw badRequest(`Unsupported tree entry mode ${mode}`, 'invalid_object');
    const name = body.toString('utf8', sp + 1, nul);
    // A name that is not UTF-8 would decode to something else than its bytes.
    if (!PLAIN_NAME_RE.test(name) && !Buffer.from(name, 'utf8').equals(body.subarray(sp + 1, nul))) {
      throw badRequest('Tree entry name is not valid UTF-8', 'invalid_object');
    }
    out.push(CheckedEntry.parsed(mode, name, body.toString('hex', nul + 1, nul + 21), body.subarray(at, nul + 21)));
  });
  // sortTreeEntries carries this body over when the entries were already in order.
  encodedOf.set(out, { body, offsets: Int32Array.from([...starts, body.length]) });
  return out;
}

/** Strips what would break git's `Name <email>` syntax; git has no escape for these. */
function sanitizeIdentity(id: GitIdentity, role: string): GitIdentity {
  const strip = (s: string) => s.replace(/[<>\n\r\0]/g, '').trim();
  if (!Number.isSafeInteger(id.timestamp) || id.timestamp < 0) {
    throw badRequest(`${role} timestamp must be a non-negative integer of seconds`, 'invalid_request');
  }
  if (!TZ_RE.test(id.tzOffset)) throw badRequest(`${role} tzOffset must look like +0000`, 'invalid_request');
  // An empty name makes `author <e>` which fsck reports as a missing name.
  return { name: strip(id.name) || 'unknown', email: strip(id.email), timestamp: id.timestamp, tzOffset: id.tzOffset };
}

function formatIdentity(id: GitIdentity): string {
  return `${id.name} <${id.email}> ${id.timestamp} ${id.tzOffset}`;
}

export function encodeCommit(c: CommitData): Buffer {
  assertSha(c.tree, 'commit tree');
  for (const p of c.parents) assertSha(p, 'commit parent');
  const author = sanitizeIdentity(c.author, 'author');
  const committer = sanitizeIdentity(c.committer, 'committer');
  // NUL would truncate the message in every git reader.
  let message = c.message.replace(/\0/g, '');
  if (!message.endsWith('\n')) message += '\n';
  const lines = [`tree ${c.tree}`, ...c.parents.map((p) => `parent ${p}`)];
  lines.push(`author ${formatIdentity(author)}`, `committer ${formatIdentity(committer)}`);
  return Buffer.from(`${lines.join('\n')}\n\n${message}`, 'utf8');
}

function parseIdentity(value: string): GitIdentity {
  const m = /^(.*?) ?<([^<>]*)> (\d+) ([+-]\d{4})$/.exec(value);
  if (!m) throw badRequest(`Malformed identity in commit: ${JSON.stringify(value)}`, 'invalid_object');
  return { name: m[1] ?? '', email: m[2] ?? '', timestamp: Number(m[3]), tzOffset: m[4] ?? '+0000' };
}

/** Parses tree, parents, author, committer and message; other headers (gpgsig, encoding) are ignored. */
export function parseCommit(body: Buffer): CommitData {
  const text = body.toString('utf8');
  const split = text.indexOf('\n\n');
  const header = split < 0 ? text : text.slice(0, split);
  const message = split < 0 ? '' : text.slice(split + 2);
  let tree: string | undefined;
  let author: GitIdentity | undefined;
  let committer: GitIdentity | undefined;
  const parents: string[] = [];
  for (const line of header.split('\n')) {
    if (line.startsWith(' ')) continue; // continuation of a multi-line header
    const sp = line.indexOf(' ');
    const key = sp < 0 ? line : line.slice(0, sp);
    const value = sp < 0 ? '' : line.slice(sp + 1);
    if (key === 'tree') tree = value;
    else if (key === 'parent') parents.push(value);
    else if (key === 'author') author = parseIdentity(value);
    else if (key === 'committer') committer = parseIdentity(value);
  }
  if (!tree || !SHA_RE.test(tree) || !author || !committer || parents.some((p) => !SHA_RE.test(p))) {
    throw badRequest('Malformed commit object', 'invalid_object');
  }
  return { tree, parents, author, committer, message };
}
