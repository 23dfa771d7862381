import { createHash } from 'node:crypto';
import { deflateSync, inflateSync } from 'node:zlib';
import { badRequest, conflict, type ServiceError } from '../core/errors.js';
import type { Executor } from './db.js';

/**
 * Git objects, hashed exactly as git hashes them, stored in `git_objects`.
 *
 * Trees may be stored as deltas against the previous version of the same tree so that a
 * commit into a folder of thousands of pages adds bytes proportional to the change.
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

/**
 * Upper bound of the decoded-tree cache, in tree entries: the working set of a few very large
 * folders plus every small tree on their paths. Successive versions of a folder share their
 * unchanged entry objects, so real memory is usually far below the worst case (~250 bytes per
 * entry, ~50 MB).
 */
export const TREE_CACHE_MAX_ENTRIES = 200_000;

const SHA_RE = /^[0-9a-f]{40}$/;
const TZ_RE = /^[+-]\d{4}$/;
const DELTA_FORMAT = 1;

// ---------------------------------------------------------------------------------------------
// Pure encoders and decoders
// ---------------------------------------------------------------------------------------------

export function hashObject(type: ObjectType, body: Buffer): string {
  return createHash('sha1').update(`${type} ${body.length}\0`).update(body).digest('hex');
}

export function isSha(value: string): boolean {
  return SHA_RE.test(value);
}

function assertSha(value: string, what: string): void {
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

  /** From a tree body already split into fields; `encoded` is the entry's own bytes (copied). */
  static parsed(mode: TreeMode, name: string, sha: string, encoded: Buffer): CheckedEntry {
    validateName(name);
    return new CheckedEntry(mode, name, sha, Buffer.from(encoded));
  }

  get encoded(): Buffer {
    return this.#encoded;
  }

  get key(): string {
    return this.#key;
  }
}

function compareEntries(a: TreeEntry, b: TreeEntry): number {
  const x = CheckedEntry.of(a).key;
  const y = CheckedEntry.of(b).key;
  return x < y ? -1 : x > y ? 1 : 0;
}

function hasKey(sorted: readonly CheckedEntry[], key: string): boolean {
  let lo = 0;
  let hi = sorted.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const k = sorted[mid]!.key;
    if (k === key) return true;
    if (k < key) lo = mid + 1;
    else hi = mid - 1;
  }
  return false;
}

/** Validates and returns the entries in git order (a new frozen array of frozen entries). */
export function sortTreeEntries(entries: Iterable<TreeEntry>): readonly TreeEntry[] {
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
  return Object.freeze(out);
}

function duplicateEntry(name: string): ServiceError {
  return badRequest(`Duplicate tree entry ${JSON.stringify(name)}`, 'invalid_path');
}

/** Encodes entries already validated and sorted. */
function encodeSorted(entries: readonly TreeEntry[]): Buffer {
  const parts: Buffer[] = new Array<Buffer>(entries.length);
  for (let i = 0; i < entries.length; i++) parts[i] = CheckedEntry.of(entries[i]!).encoded;
  return Buffer.concat(parts);
}

export function encodeTree(entries: Iterable<TreeEntry>): Buffer {
  return encodeSorted(sortTreeEntries(entries));
}

/** Decodes a tree body (only the two modes this service writes are accepted). */
export function parseTree(body: Buffer): TreeEntry[] {
  const out: TreeEntry[] = [];
  let i = 0;
  while (i < body.length) {
    const sp = body.indexOf(0x20, i);
    const nul = sp < 0 ? -1 : body.indexOf(0, sp + 1);
    if (sp < 0 || nul < 0 || nul + 21 > body.length) throw badRequest('Truncated tree object', 'invalid_object');
    const mode = body.toString('latin1', i, sp);
    if (mode !== '100644' && mode !== '40000') throw badRequest(`Unsupported tree entry mode ${mode}`, 'invalid_object');
    const name = body.toString('utf8', sp + 1, nul);
    // A name that is not UTF-8 would decode to something else than its bytes.
    if (!PLAIN_NAME_RE.test(name) && !Buffer.from(name, 'utf8').equals(body.subarray(sp + 1, nul))) {
      throw badRequest('Tree entry name is not valid UTF-8', 'invalid_object');
    }
    out.push(CheckedEntry.parsed(mode, name, body.toString('hex', nul + 1, nul + 21), body.subarray(i, nul + 21)));
    i = nul + 21;
  }
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

// ---------------------------------------------------------------------------------------------
// Tree deltas
//
// Format (deflated like every `data` value):
//   byte    format version (1)
//   varint  number of removed names, then each removed name as UTF-8 followed by NUL
//   rest    upserted entries (added or changed), encoded exactly like a git tree body
// Names are unique within a tree, so a name identifies the entry to remove or replace, and the
// reconstructed tree is re-sorted and re-hashed (then checked against its sha) on read.
// ---------------------------------------------------------------------------------------------

function writeVarint(n: number, out: number[]): void {
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
}

export function encodeTreeDelta(base: readonly TreeEntry[], next: readonly TreeEntry[]): Buffer {
  // Both lists are in git order, so one merge walk finds removals and upserts.
  const removed: string[] = [];
  const upserts: TreeEntry[] = [];
  let i = 0;
  let j = 0;
  while (i < base.length || j < next.length) {
    const b = base[i];
    const n = next[j];
    if (b && n && b.name === n.name && b.mode === n.mode) {
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

// ---------------------------------------------------------------------------------------------
// Decoded-tree cache
// ---------------------------------------------------------------------------------------------

/**
 * LRU of decoded trees bounded by total entries. Objects are immutable and content-addressed,
 * so a cached tree is never stale. Keys include the workspace so one workspace never sees
 * another's objects through the cache.
 */
class TreeCache {
  private readonly map = new Map<string, readonly TreeEntry[]>();
  private total = 0;

  constructor(private readonly maxEntries: number) {}

  get(key: string): readonly TreeEntry[] | undefined {
    const v = this.map.get(key);
    if (v) {
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }

  set(key: string, entries: readonly TreeEntry[]): void {
    const cost = entries.length + 1;
    if (cost > this.maxEntries || this.map.has(key)) return;
    this.map.set(key, entries);
    this.total += cost;
    for (const [k, v] of this.map) {
      if (this.total <= this.maxEntries) break;
      this.map.delete(k);
      this.total -= v.length + 1;
    }
  }

  clear(): void {
    this.map.clear();
    this.total = 0;
  }
}

const treeCache = new TreeCache(TREE_CACHE_MAX_ENTRIES);

/** Empties the process-wide tree cache (tests use it to force reads from the database). */
export function clearTreeCache(): void {
  treeCache.clear();
}

function corrupt(workspaceId: string, sha: string, why: string): Error {
  return new Error(`git object ${sha} of workspace ${workspaceId} is corrupt: ${why}`);
}

const REF_RE = /^refs\/(heads|tags)\/[A-Za-z0-9][A-Za-z0-9._-]*$/;

// ---------------------------------------------------------------------------------------------
// Database object store
// ---------------------------------------------------------------------------------------------

export class ObjectStore {
  constructor(
    private readonly db: Executor,
    readonly workspaceId: string,
  ) {}

  private cacheKey(sha: string): string {
    return `${this.workspaceId}:${sha}`;
  }

  private async insert(sha: string, type: ObjectType, data: Buffer, baseSha: string | null, depth: number): Promise<void> {
    await this.db
      .insertInto('git_objects')
      .values({ workspace_id: this.workspaceId, sha, type, data, base_sha: baseSha, depth })
      .onConflict((oc) => oc.columns(['workspace_id', 'sha']).doNothing())
      .execute();
  }

  async putBlob(content: Buffer | string): Promise<string> {
    const body = typeof content === 'string' ? Buffer.from(content, 'utf8') : content;
    const sha = hashObject('blob', body);
    await this.insert(sha, 'blob', deflateSync(body), null, 0);
    return sha;
  }

  /**
   * Stores an object given as a raw git body (e.g. received from a push), in full. Trees and
   * commits are checked to be well formed and canonical so that what we store is what git reads.
   */
  async putObject(type: ObjectType, body: Buffer): Promise<string> {
    if (type === 'tree') {
      const sorted = sortTreeEntries(parseTree(body));
      if (!encodeSorted(sorted).equals(body)) throw badRequest('Tree object is not in canonical git order', 'invalid_object');
    } else if (type === 'commit') {
      parseCommit(body);
    }
    const sha = hashObject(type, body);
    await this.insert(sha, type, deflateSync(body), null, 0);
    return sha;
  }

  /**
   * Stores a tree. With `previousSha` (the version of the same tree this one replaces) the tree
   * is stored as a delta against it when the delta is under half the tree (small trees are
   * cheaper to read whole). A chain that would pass MAX_DELTA_DEPTH re-bases on its full copy
   * (see REBASE_MAX_RATIO) or starts again from a new full copy.
   */
  async putTree(entries: Iterable<TreeEntry>, previousSha?: string | null): Promise<string> {
    const sorted = sortTreeEntries(entries);
    const body = encodeSorted(sorted);
    const sha = hashObject('tree', body);
    const wanted = previousSha && previousSha !== sha ? [sha, previousSha] : [sha];
    // The base must be visible to this executor (not just cached from a rolled-back write).
    const rows = await this.db
      .selectFrom('git_objects')
      .select(['sha', 'type', 'depth'])
      .where('workspace_id', '=', this.workspaceId)
      .where('sha', 'in', wanted)
      .execute();
    if (rows.some((r) => r.sha === sha)) {
      treeCache.set(this.cacheKey(sha), sorted);
      return sha;
    }
    let data: Buffer | undefined;
    let baseSha: string | null = null;
    let depth = 0;
    const base = previousSha ? rows.find((r) => r.sha === previousSha) : undefined;
    if (base && base.type === 'tree') {
      if (Number(base.depth) < MAX_DELTA_DEPTH) {
        // A delta not clearly smaller than the tree costs a chain step for nothing (small trees).
        data = await this.deltaAgainst(base.sha, sorted, body.length / 2);
        baseSha = base.sha;
        depth = Number(base.depth) + 1;
      } else {
        const root = await this.chainRoot(base.sha);
        data = await this.deltaAgainst(root, sorted, body.length * REBASE_MAX_RATIO);
        baseSha = root;
        depth = 1;
      }
    }
    if (!data) {
      baseSha = null;
      depth = 0;
    }
    await this.insert(sha, 'tree', data ?? deflateSync(body), baseSha, depth);
    treeCache.set(this.cacheKey(sha), sorted);
    return sha;
  }

  /** The deflated delta from a stored tree to `entries`, or undefined when it is not under maxBytes. */
  private async deltaAgainst(baseSha: string, entries: readonly TreeEntry[], maxBytes: number): Promise<Buffer | undefined> {
    const baseEntries = await this.getTree(baseSha);
    if (!baseEntries) return undefined;
    const delta = encodeTreeDelta(baseEntries, entries);
    return delta.length < maxBytes ? deflateSync(delta) : undefined;
  }

  /** The full copy at the end of a tree's delta chain. */
  private async chainRoot(sha: string): Promise<string> {
    let cur = sha;
    let lastDepth = Number.POSITIVE_INFINITY;
    for (;;) {
      const row = await this.db
        .selectFrom('git_objects')
        .select(['base_sha', 'depth'])
        .where('workspace_id', '=', this.workspaceId)
        .where('sha', '=', cur)
        .executeTakeFirst();
      if (!row) throw corrupt(this.workspaceId, sha, `delta base ${cur} is missing`);
      if (Number(row.depth) >= lastDepth) throw corrupt(this.workspaceId, sha, 'delta chain does not descend');
      lastDepth = Number(row.depth);
      if (row.base_sha === null) return cur;
      cur = row.base_sha;
    }
  }

  /** Stores a commit; its tree and parents must already be stored in this workspace. */
  async putCommit(commit: CommitData): Promise<string> {
    const body = encodeCommit(commit);
    const needed = [...new Set([commit.tree, ...commit.parents])];
    const found = await this.db
      .selectFrom('git_objects')
      .select(['sha', 'type'])
      .where('workspace_id', '=', this.workspaceId)
      .where('sha', 'in', needed)
      .execute();
    const types = new Map(found.map((r) => [r.sha, r.type]));
    if (types.get(commit.tree) !== 'tree') throw badRequest(`Commit tree ${commit.tree} is not stored`, 'invalid_object');
    for (const p of commit.parents) {
      if (types.get(p) !== 'commit') throw badRequest(`Commit parent ${p} is not stored`, 'invalid_object');
    }
    const sha = hashObject('commit', body);
    await this.insert(sha, 'commit', deflateSync(body), null, 0);
    return sha;
  }

  async hasObject(sha: string): Promise<boolean> {
    const row = await this.db
      .selectFrom('git_objects')
      .select('sha')
      .where('workspace_id', '=', this.workspaceId)
      .where('sha', '=', sha)
      .executeTakeFirst();
    return row !== undefined;
  }

  /** The full git body of an object (delta trees reconstructed), verified against its sha. */
  async getObject(sha: string): Promise<GitObject | null> {
    const row = await this.db
      .selectFrom('git_objects')
      .select(['type', 'data', 'base_sha'])
      .where('workspace_id', '=', this.workspaceId)
      .where('sha', '=', sha)
      .executeTakeFirst();
    if (!row) return null;
    if (row.base_sha !== null) {
      const entries = await this.getTree(sha);
      if (!entries) throw corrupt(this.workspaceId, sha, 'delta tree vanished');
      return { type: 'tree', body: encodeSorted(entries) };
    }
    const body = inflateSync(row.data);
    if (hashObject(row.type, body) !== sha) throw corrupt(this.workspaceId, sha, 'hash mismatch');
    return { type: row.type, body };
  }

  async getBlob(sha: string): Promise<Buffer | null> {
    const obj = await this.getObject(sha);
    return obj && obj.type === 'blob' ? obj.body : null;
  }

  async getCommit(sha: string): Promise<CommitData | null> {
    const obj = await this.getObject(sha);
    return obj && obj.type === 'commit' ? parseCommit(obj.body) : null;
  }

  /**
   * A tree's entries in git order, or null when no such tree is stored. A delta tree is rebuilt
   * by walking base_sha down to a full copy (or a cached version) and applying the deltas upward.
   */
  async getTree(sha: string): Promise<readonly TreeEntry[] | null> {
    const hit = treeCache.get(this.cacheKey(sha));
    if (hit) return hit;

    const deltas: Buffer[] = [];
    let start: readonly TreeEntry[] | undefined;
    let cur = sha;
    let lastDepth = Number.POSITIVE_INFINITY;
    for (;;) {
      if (cur !== sha) {
        const cached = treeCache.get(this.cacheKey(cur));
        if (cached) {
          start = cached;
          break;
        }
      }
      const row = await this.db
        .selectFrom('git_objects')
        .select(['type', 'data', 'base_sha', 'depth'])
        .where('workspace_id', '=', this.workspaceId)
        .where('sha', '=', cur)
        .executeTakeFirst();
      if (!row) {
        if (cur === sha) return null;
        throw corrupt(this.workspaceId, sha, `delta base ${cur} is missing`);
      }
      if (row.type !== 'tree') {
        if (cur === sha) return null;
        throw corrupt(this.workspaceId, sha, `delta base ${cur} is a ${row.type}`);
      }
      // Depth strictly decreases along a chain, which also rules out cycles.
      const depth = Number(row.depth);
      if (depth >= lastDepth) throw corrupt(this.workspaceId, sha, 'delta chain does not descend');
      lastDepth = depth;
      const data = inflateSync(row.data);
      if (row.base_sha === null) {
        const body = data;
        if (hashObject('tree', body) !== cur) throw corrupt(this.workspaceId, cur, 'hash mismatch');
        start = sortTreeEntries(parseTree(body));
        if (cur === sha) {
          treeCache.set(this.cacheKey(sha), start);
          return start;
        }
        break;
      }
      deltas.push(data);
      cur = row.base_sha;
    }

    if (!start) throw corrupt(this.workspaceId, sha, 'delta chain has no base');
    const map = new Map(start.map((e) => [e.name, e]));
    for (let i = deltas.length - 1; i >= 0; i--) applyTreeDelta(map, deltas[i] as Buffer);
    const entries = sortTreeEntries(map.values());
    if (hashObject('tree', encodeSorted(entries)) !== sha) throw corrupt(this.workspaceId, sha, 'rebuilt tree hash mismatch');
    treeCache.set(this.cacheKey(sha), entries);
    return entries;
  }

  async getRef(name: string): Promise<string | null> {
    const row = await this.db
      .selectFrom('git_refs')
      .select('sha')
      .where('workspace_id', '=', this.workspaceId)
      .where('name', '=', name)
      .executeTakeFirst();
    return row?.sha ?? null;
  }

  /**
   * Moves a ref only if it still points at `expectedOldSha` (null: only if it does not exist).
   * Throws ServiceError 409 `conflict` otherwise, leaving the ref unchanged.
   */
  async casRef(name: string, expectedOldSha: string | null, newSha: string): Promise<void> {
    if (!REF_RE.test(name) || name.includes('..') || name.endsWith('.lock')) {
      throw badRequest(`Invalid ref name ${JSON.stringify(name)}`, 'invalid_request');
    }
    assertSha(newSha, 'ref target');
    const target = await this.db
      .selectFrom('git_objects')
      .select('type')
      .where('workspace_id', '=', this.workspaceId)
      .where('sha', '=', newSha)
      .executeTakeFirst();
    // A ref to a missing object would make every git reader fail.
    if (target?.type !== 'commit') throw badRequest(`Ref target ${newSha} is not a stored commit`, 'invalid_object');

    let changed: bigint;
    if (expectedOldSha === null) {
      const r = await this.db
        .insertInto('git_refs')
        .values({ workspace_id: this.workspaceId, name, sha: newSha })
        .onConflict((oc) => oc.columns(['workspace_id', 'name']).doNothing())
        .executeTakeFirst();
      changed = r.numInsertedOrUpdatedRows ?? 0n;
    } else {
      const r = await this.db
        .updateTable('git_refs')
        .set({ sha: newSha })
        .where('workspace_id', '=', this.workspaceId)
        .where('name', '=', name)
        .where('sha', '=', expectedOldSha)
        .executeTakeFirst();
      changed = r.numUpdatedRows;
    }
    if (changed === 0n) {
      const current = await this.getRef(name);
      throw conflict(`${name} has moved: expected ${expectedOldSha ?? 'no ref'}, found ${current ?? 'no ref'}`, 'conflict', {
        ref: name,
        current,
      });
    }
  }
}
