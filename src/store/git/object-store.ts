import { deflateSync, inflateSync } from 'node:zlib';
import { sql, type CompiledQuery } from 'kysely';
import { badRequest, conflict } from '../../errors/index.js';
import { isSqlite, type Executor } from '../db.js';
import { afterCommitIfAny, lockedState, noteLocked } from '../tx.js';
import { builtOnce } from '../built-once.js';
import { executeCarrying } from '../carried.js';
import { treeCache } from './cache.js';
import {
  assertSha,
  encodeCommit,
  encodeSorted,
  hashObject,
  parseCommit,
  parseTree,
  sortTreeEntries,
  type CommitData,
  type GitObject,
  type ObjectType,
  type TreeEntry,
} from './codec.js';
import { applyTreeDelta, encodeTreeDelta, MAX_DELTA_DEPTH, REBASE_MAX_RATIO } from './tree-deltas.js';

/**
 * Git objects and refs of one workspace, stored in `git_objects` and `git_refs`. Trees may be
 * stored as deltas against their previous version (see tree-deltas.ts); reads rebuild them
 * through the process-wide tree cache (cache.ts).
 */

function corrupt(workspaceId: string, sha: string, why: string): Error {
  return new Error(`git object ${sha} of workspace ${workspaceId} is corrupt: ${why}`);
}

const REF_RE = /^refs\/(heads|tags)\/[A-Za-z0-9][A-Za-z0-9._-]*$/;
const MAIN_REF = 'refs/heads/main';

/**
 * Type and depth of objects known to be stored, by `workspaceId:sha`, learned only once the
 * transaction that wrote or read them committed: objects are never removed, so an entry never
 * goes stale, and a write's next commit finds the trees it builds on here instead of asking the
 * database while its workspace's lock is held. Bounded: the oldest entries go first.
 */
const storedKinds = new Map<string, { type: ObjectType; depth: number }>();
const STORED_KINDS_MAX = 20_000;

function rememberStored(entries: Iterable<[string, { type: ObjectType; depth: number }]>): void {
  for (const [key, kind] of entries) {
    if (storedKinds.has(key)) continue;
    if (storedKinds.size >= STORED_KINDS_MAX) storedKinds.delete(storedKinds.keys().next().value!);
    storedKinds.set(key, kind);
  }
}

/**
 * The full copy at the end of a stored tree delta's chain, by `workspaceId:sha`, learned like
 * storedKinds (only rows this node wrote, once committed): the rebase every MAX_DELTA_DEPTH
 * versions of a tree then needs no walk of the chain while the workspace's lock is held (the
 * walk took 10–17 ms on a table whose statistics lagged a bulk load).
 */
const chainRoots = new Map<string, string>();

function rememberRoots(entries: Iterable<[string, string]>): void {
  for (const [key, root] of entries) {
    if (chainRoots.has(key)) continue;
    if (chainRoots.size >= STORED_KINDS_MAX) chainRoots.delete(chainRoots.keys().next().value!);
    chainRoots.set(key, root);
  }
}

/** A stored object's row, as `git_objects` holds it. */
interface ObjectRow {
  type: ObjectType;
  data: Buffer;
  base_sha: string | null;
  depth: number;
}

/** Deferred objects written per statement (6 parameters a row, PostgreSQL allows 65,535). */
const FLUSH_ROWS = 1_000;
/** Blobs read per query by getBlobs (engines bound a statement's parameters). */
const BLOB_BATCH = 500;

export class ObjectStore {
  /**
   * With `deferWrites`, objects are kept here and written in one statement when a ref moves
   * (casRef) instead of one statement each: on PostgreSQL each statement is a round trip made
   * while the workspace's write lock is held. Reads of this store see them meanwhile.
   */
  private readonly pending: Map<string, ObjectRow> | null;
  /** Type and depth of objects this store has seen in the table (objects are never removed). */
  private readonly known = new Map<string, { type: ObjectType; depth: number }>();
  /** The chain root of each delta tree this store offered (see chainRoots), when known. */
  private readonly offeredRoots = new Map<string, string>();

  constructor(
    private readonly db: Executor,
    readonly workspaceId: string,
    opts: { deferWrites?: boolean } = {},
  ) {
    this.pending = opts.deferWrites ? new Map() : null;
  }

  private cacheKey(sha: string): string {
    return `${this.workspaceId}:${sha}`;
  }

  /** This workspace's rows of `git_objects`, to select from. */
  private objects() {
    return this.db.selectFrom('git_objects').where('workspace_id', '=', this.workspaceId);
  }

  private async insert(sha: string, type: ObjectType, data: Buffer, baseSha: string | null, depth: number): Promise<void> {
    if (this.pending) {
      if (!this.pending.has(sha)) this.pending.set(sha, { type, data, base_sha: baseSha, depth });
      return;
    }
    await this.db
      .insertInto('git_objects')
      .values({ workspace_id: this.workspaceId, sha, type, data, base_sha: baseSha, depth })
      .onConflict((oc) => oc.columns(['workspace_id', 'sha']).doNothing())
      .execute();
  }

  /** Writes the deferred objects (see `pending`); casRef does before it moves a ref. */
  async flush(): Promise<void> {
    const rows = this.takePending();
    for (let i = 0; i < rows.length; i += FLUSH_ROWS) {
      const batch = rows.slice(i, i + FLUSH_ROWS);
      const wrote = await insertObjects.rows(this.db, batch);
      this.inserted(
        batch,
        wrote.map((r) => r.sha),
      );
    }
  }

  /** Empties the deferred objects, to be written by the caller (who calls `inserted` with what it wrote). */
  private takePending(): ({ workspace_id: string; sha: string } & ObjectRow)[] {
    if (!this.pending || this.pending.size === 0) return [];
    const rows = [...this.pending].map(([sha, r]) => ({ workspace_id: this.workspaceId, sha, ...r }));
    this.pending.clear();
    return rows;
  }

  /**
   * Objects of `rows` the insert actually wrote (`shas`, from its RETURNING) are known once the
   * transaction commits. Not the others: a row already stored may differ from the one offered
   * (a tree stored earlier as a delta comes back whole), and its depth must be read.
   */
  private inserted(rows: readonly ({ sha: string } & ObjectRow)[], shas: readonly string[]): void {
    const wrote = new Set(shas);
    const known = rows
      .filter((r) => wrote.has(r.sha))
      .map((r): [string, { type: ObjectType; depth: number }] => [this.cacheKey(r.sha), { type: r.type, depth: r.depth }]);
    const roots = rows.flatMap((r): [string, string][] => {
      const root = wrote.has(r.sha) ? this.offeredRoots.get(r.sha) : undefined;
      return root ? [[this.cacheKey(r.sha), root]] : [];
    });
    afterCommitIfAny(this.db, () => {
      rememberStored(known);
      rememberRoots(roots);
    });
  }

  /** Type and delta depth of the stored (or deferred) objects among `shas`. */
  private async kinds(shas: readonly string[]): Promise<Map<string, { type: ObjectType; depth: number }>> {
    const out = new Map<string, { type: ObjectType; depth: number }>();
    const rest: string[] = [];
    for (const sha of shas) {
      const p = this.pending?.get(sha);
      const k = p ? { type: p.type, depth: p.depth } : (this.known.get(sha) ?? storedKinds.get(this.cacheKey(sha)));
      if (k) out.set(sha, k);
      else rest.push(sha);
    }
    if (rest.length > 0) {
      const found: [string, { type: ObjectType; depth: number }][] = [];
      for (const r of await this.objects().select(['sha', 'type', 'depth']).where('sha', 'in', rest).execute()) {
        const k = { type: r.type, depth: Number(r.depth) };
        this.known.set(r.sha, k);
        out.set(r.sha, k);
        found.push([this.cacheKey(r.sha), k]);
      }
      // Read inside a transaction, a row may be this transaction's own write: known once it commits.
      afterCommitIfAny(this.db, () => rememberStored(found));
    }
    return out;
  }

  /**
   * Looks up, in one query, objects a write is about to build on (the trees on its paths, the
   * parent commit), so that putTree, putCommit and casRef need not ask one at a time.
   */
  async prefetch(shas: readonly string[]): Promise<void> {
    await this.kinds([...new Set(shas)]);
  }

  /** One object's row, deferred or stored. */
  private async row(sha: string): Promise<ObjectRow | undefined> {
    return this.pending?.get(sha) ?? (await this.objects().select(['type', 'data', 'base_sha', 'depth']).where('sha', '=', sha).executeTakeFirst());
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
    if (this.pending?.has(sha)) {
      treeCache.set(this.cacheKey(sha), sorted);
      return sha;
    }
    // Deferring, a tree already in the table is not looked for: the write of it is skipped at
    // flush. A base written by this store is flushed first, so its depth is the stored one.
    if (previousSha && this.pending?.has(previousSha)) await this.flush();
    const other = previousSha && previousSha !== sha ? [previousSha] : [];
    const wanted = this.pending ? other : [sha, ...other];
    // The base must be visible to this executor (not just cached from a rolled-back write).
    const rows = await this.kinds(wanted);
    if (rows.has(sha)) {
      treeCache.set(this.cacheKey(sha), sorted);
      return sha;
    }
    let data: Buffer | undefined;
    let baseSha: string | null = null;
    let depth = 0;
    const base = previousSha ? rows.get(previousSha) : undefined;
    if (previousSha && base && base.type === 'tree') {
      if (base.depth < MAX_DELTA_DEPTH) {
        // A delta not clearly smaller than the tree costs a chain step for nothing (small trees).
        data = await this.deltaAgainst(previousSha, sorted, body.length / 2);
        baseSha = previousSha;
        depth = base.depth + 1;
      } else {
        const root = await this.chainRoot(previousSha);
        data = await this.deltaAgainst(root, sorted, body.length * REBASE_MAX_RATIO);
        baseSha = root;
        depth = 1;
      }
    }
    if (!data) {
      baseSha = null;
      depth = 0;
    } else {
      const root = depth === 1 ? baseSha : chainRoots.get(this.cacheKey(baseSha!));
      if (root) this.offeredRoots.set(sha, root);
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

  /**
   * The full copy at the end of a tree's delta chain, in one query (a chain is up to
   * MAX_DELTA_DEPTH long; one query per step was a round trip each on PostgreSQL). Each step must
   * descend in depth, which also rules out cycles.
   */
  private async chainRoot(sha: string): Promise<string> {
    const known = chainRoots.get(this.cacheKey(sha));
    if (known) return known;
    // The walk is one query: deferred objects must be in the table for it to see them.
    await this.flush();
    const rows = (
      await sql<{ sha: string; base_sha: string | null; depth: number }>`
      with recursive chain(sha, base_sha, depth) as (
        select sha, base_sha, depth from git_objects where workspace_id = ${this.workspaceId} and sha = ${sha}
        union all
        select o.sha, o.base_sha, o.depth from chain c join git_objects o on o.workspace_id = ${this.workspaceId} and o.sha = c.base_sha and o.depth < c.depth
      )
      select sha, base_sha, depth from chain`.execute(this.db)
    ).rows;
    if (rows.length === 0) throw corrupt(this.workspaceId, sha, `delta base ${sha} is missing`);
    const root = rows.find((r) => r.base_sha === null);
    if (root) return root.sha;
    // The walk stopped on a row whose base is missing, or whose base does not descend.
    const last = rows.reduce((a, b) => (Number(b.depth) < Number(a.depth) ? b : a));
    const base = await this.objects().select('depth').where('sha', '=', last.base_sha!).executeTakeFirst();
    throw corrupt(this.workspaceId, sha, base ? 'delta chain does not descend' : `delta base ${last.base_sha} is missing`);
  }

  /** Stores a commit; its tree and parents must already be stored in this workspace. */
  async putCommit(commit: CommitData): Promise<string> {
    const body = encodeCommit(commit);
    const needed = [...new Set([commit.tree, ...commit.parents])];
    const found = await this.kinds(needed);
    const types = new Map([...found].map(([sha, k]) => [sha, k.type]));
    if (types.get(commit.tree) !== 'tree') throw badRequest(`Commit tree ${commit.tree} is not stored`, 'invalid_object');
    for (const p of commit.parents) {
      if (types.get(p) !== 'commit') throw badRequest(`Commit parent ${p} is not stored`, 'invalid_object');
    }
    const sha = hashObject('commit', body);
    await this.insert(sha, 'commit', deflateSync(body), null, 0);
    return sha;
  }

  async hasObject(sha: string): Promise<boolean> {
    if (this.pending?.has(sha)) return true;
    const row = await this.objects().select('sha').where('sha', '=', sha).executeTakeFirst();
    return row !== undefined;
  }

  /** The full git body of an object (delta trees reconstructed), verified against its sha. */
  async getObject(sha: string): Promise<GitObject | null> {
    const row = await this.row(sha);
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

  /**
   * Many blobs at once (a point-in-time search reads every page of a commit): one query per
   * BLOB_BATCH, each body verified against its sha. Shas that are not stored blobs are absent.
   */
  async getBlobs(shas: readonly string[]): Promise<Map<string, Buffer>> {
    const out = new Map<string, Buffer>();
    const wanted = [...new Set(shas)];
    for (let i = 0; i < wanted.length; i += BLOB_BATCH) {
      const rows = await this.objects()
        .select(['sha', 'data'])
        .where('type', '=', 'blob')
        .where('sha', 'in', wanted.slice(i, i + BLOB_BATCH))
        .execute();
      for (const r of rows) {
        const body = inflateSync(r.data);
        if (hashObject('blob', body) !== r.sha) throw corrupt(this.workspaceId, r.sha, 'hash mismatch');
        out.set(r.sha, body);
      }
    }
    return out;
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
      const row = await this.row(cur);
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
    // Under PostgreSQL's workspace lock main was read with the lock (store/tx.ts).
    const locked = name === MAIN_REF ? lockedState(this.db, this.workspaceId) : undefined;
    if (locked) return locked.head;
    const row = await refSha.first(this.db, { ws: this.workspaceId, name });
    return row?.sha ?? null;
  }

  /**
   * Moves a ref only if it still points at `expectedOldSha` (null: only if it does not exist).
   * Throws ServiceError 409 `conflict` otherwise, leaving the ref unchanged. `carried`: writes
   * sent with the move (store/carried.ts), run whether or not it succeeds (a failed move fails
   * the caller's transaction).
   */
  async casRef(name: string, expectedOldSha: string | null, newSha: string, carried: readonly CompiledQuery[] = []): Promise<void> {
    if (!REF_RE.test(name) || name.includes('..') || name.endsWith('.lock')) {
      throw badRequest(`Invalid ref name ${JSON.stringify(name)}`, 'invalid_request');
    }
    assertSha(newSha, 'ref target');
    const target = (await this.kinds([newSha])).get(newSha);
    // A ref to a missing object would make every git reader fail.
    if (target?.type !== 'commit') throw badRequest(`Ref target ${newSha} is not a stored commit`, 'invalid_object');

    let changed: bigint;
    if (expectedOldSha !== null && !isSqlite(this.db) && this.pending && this.pending.size > 0 && this.pending.size <= FLUSH_ROWS) {
      // PostgreSQL: the deferred objects and the move of the ref in one round trip (each is one
      // made while the workspace's writers wait). The objects go in first in any case: the
      // statement's parts see one snapshot, and the ref's check does not read them.
      const rows = this.takePending();
      const moved = sql<{ inserted: string[] }>`with o as (
          insert into git_objects (workspace_id, sha, type, data, base_sha, depth)
          select ${this.workspaceId}, * from unnest(${rows.map((x) => x.sha)}::text[], ${rows.map((x) => x.type)}::text[],
            ${rows.map((x) => x.data)}::bytea[], ${rows.map((x) => x.base_sha)}::text[], ${rows.map((x) => x.depth)}::int[])
          on conflict (workspace_id, sha) do nothing
          returning sha)
        update git_refs set sha = ${newSha} where workspace_id = ${this.workspaceId} and name = ${name} and sha = ${expectedOldSha}
        returning (select coalesce(array_agg(sha), '{}') from o) as inserted`;
      const r = await executeCarrying(this.db, carried, moved.compile(this.db));
      changed = BigInt(r.rows.length);
      if (r.rows[0]) this.inserted(rows, r.rows[0].inserted);
    } else if (expectedOldSha === null) {
      for (const w of carried) await this.db.executeQuery(w);
      await this.flush();
      const r = await this.db
        .insertInto('git_refs')
        .values({ workspace_id: this.workspaceId, name, sha: newSha })
        .onConflict((oc) => oc.columns(['workspace_id', 'name']).doNothing())
        .executeTakeFirst();
      changed = r.numInsertedOrUpdatedRows ?? 0n;
    } else {
      await this.flush();
      const r = await executeCarrying(this.db, carried, moveRef.compiled(this.db, { ws: this.workspaceId, name, from: expectedOldSha, to: newSha }));
      changed = r.numAffectedRows ?? 0n;
    }
    if (changed === 0n) {
      const current =
        (await this.db.selectFrom('git_refs').select('sha').where('workspace_id', '=', this.workspaceId).where('name', '=', name).executeTakeFirst())?.sha ??
        null;
      throw conflict(`${name} has moved: expected ${expectedOldSha ?? 'no ref'}, found ${current ?? 'no ref'}`, 'conflict', {
        ref: name,
        current,
      });
    }
    if (name === MAIN_REF) noteLocked(this.db, this.workspaceId, { head: newSha });
  }
}

// Statements of every commit, built once per shape (store/built-once.ts).
const insertObjects = builtOnce((db, rows: ({ workspace_id: string; sha: string } & ObjectRow)[]) =>
  db
    .insertInto('git_objects')
    .values(rows)
    .onConflict((oc) => oc.columns(['workspace_id', 'sha']).doNothing())
    .returning('sha'),
);
const refSha = builtOnce((db, v: { ws: string; name: string }) =>
  db.selectFrom('git_refs').select('sha').where('workspace_id', '=', v.ws).where('name', '=', v.name),
);
const moveRef = builtOnce((db, v: { ws: string; name: string; from: string; to: string }) =>
  db.updateTable('git_refs').set({ sha: v.to }).where('workspace_id', '=', v.ws).where('name', '=', v.name).where('sha', '=', v.from),
);
