import { sql } from 'kysely';
import { commitsMade } from '../../metrics.js';
import type { Principal } from '../../policy/principal.js';
import type { Executor } from '../../store/db.js';
import { ObjectStore } from '../../store/git/object-store.js';
import { builtOnce } from '../../store/built-once.js';
import { applyChanges, treesOnPaths } from '../../store/git/tree-paths.js';
import { afterCommitIfAny, lockedState, noteLocked } from '../../store/tx.js';

export const MAIN_REF = 'refs/heads/main';

export interface FileChange {
  path: string;
  /** New raw content, or null to remove the file. */
  content: string | null;
}

export interface CommitResult {
  sha: string;
  seq: number;
  /** Blob sha per changed path (absent for removals). */
  blobs: Map<string, string>;
}

/**
 * Writes one git commit on the workspace's main line: blobs, the trees on their paths,
 * the commit, then moves the ref by compare-and-swap. Call inside the mutation's
 * transaction; nothing is visible until it commits.
 */
export async function commitFiles(
  trx: Executor,
  workspaceId: string,
  author: Pick<Principal, 'id' | 'name'>,
  changes: FileChange[],
  message: string,
  at: Date,
  /** Who applied the change when it is not the author (an accepted proposal). */
  committer?: Pick<Principal, 'id' | 'name'>,
): Promise<CommitResult> {
  const objects = new ObjectStore(trx, workspaceId, { deferWrites: true });
  const head = await objects.getRef(MAIN_REF);
  const rootTree = head ? (headTrees.get(`${workspaceId}:${head}`) ?? (await objects.getCommit(head))?.tree ?? null) : null;
  const blobs = new Map<string, string>();
  for (const c of changes) {
    if (c.content !== null) blobs.set(c.path, await objects.putBlob(c.content));
  }
  const pathChanges = changes.map((c) => ({ path: c.path, blobSha: c.content === null ? null : blobs.get(c.path)! }));
  // One query for what the new trees and the commit build on, instead of one per tree.
  await objects.prefetch([...(await treesOnPaths(objects, rootTree, pathChanges)), ...(head ? [head] : [])]);
  const tree = await applyChanges(objects, rootTree, pathChanges);
  // Ids, not emails, in git authorship: a clone must not hand out addresses.
  const ident = (who: Pick<Principal, 'id' | 'name'>) => ({
    name: who.name || who.id,
    email: `${who.id}@context-vault`,
    timestamp: Math.floor(at.getTime() / 1000),
    tzOffset: '+0000',
  });
  const sha = await objects.putCommit({
    tree,
    parents: head ? [head] : [],
    author: ident(author),
    committer: ident(committer ?? author),
    message,
  });
  const record = { sha, parent: head, principalId: author.id, message, at };
  // PostgreSQL under the workspace's lock knows the next seq: the commit's row rides with the move of main.
  const locked = lockedState(trx, workspaceId);
  let seq: number;
  if (locked) {
    seq = locked.commitSeq + 1;
    await objects.casRef(MAIN_REF, head, sha, [insertCommitAt.compiled(trx, commitValues(workspaceId, record, seq))]);
    noteLocked(trx, workspaceId, { commitSeq: seq });
    afterCommitIfAny(trx, () => commitsMade.inc());
  } else {
    await objects.casRef(MAIN_REF, head, sha);
    seq = await recordCommit(trx, workspaceId, record);
  }
  // Known only once durable: a rolled-back commit must not be taken for a stored one.
  afterCommitIfAny(trx, () => rememberHeadTree(`${workspaceId}:${sha}`, tree));
  return { sha, seq, blobs };
}

/**
 * The root tree of recent commits on main (`workspaceId:sha`), so the next write need not read
 * its parent commit back. A commit is immutable, so an entry never goes stale.
 */
const headTrees = new Map<string, string>();
const HEAD_TREES_MAX = 1_000;

function rememberHeadTree(key: string, tree: string): void {
  if (headTrees.size >= HEAD_TREES_MAX) headTrees.delete(headTrees.keys().next().value!);
  headTrees.set(key, tree);
}

const insertCommitAt = builtOnce((db, v: ReturnType<typeof commitValues> & { seq: number }) =>
  db.insertInto('commits').values({
    workspace_id: v.ws,
    seq: v.seq,
    sha: v.sha,
    parent_sha: v.parent,
    principal_id: v.principalId,
    message: v.message,
    created_at: v.at,
  }),
);

function commitValues(ws: string, c: CommitRecord, seq: number) {
  return { ws, seq, sha: c.sha, parent: c.parent, principalId: c.principalId, message: c.message, at: c.at.toISOString() };
}

/** A commit on main, as `commits` numbers it. */
interface CommitRecord {
  sha: string;
  parent: string | null;
  principalId: string;
  message: string;
  at: Date;
}

const insertCommit = builtOnce(
  (db, v: { ws: string; sha: string; parent: string | null; principalId: string; message: string; at: string }) => sql<{ seq: number | string }>`
    insert into commits (workspace_id, seq, sha, parent_sha, principal_id, message, created_at)
    values (${v.ws}, coalesce((select seq from commits where workspace_id = ${v.ws} order by seq desc limit 1), 0) + 1,
      ${v.sha}, ${v.parent}, ${v.principalId}, ${v.message}, ${v.at})
    returning seq`,
);

/** Numbers a commit now on main: the next seq of the workspace's line (`commits`). */
export async function recordCommit(trx: Executor, workspaceId: string, c: CommitRecord): Promise<number> {
  // The next seq is read in the insert itself: one round trip (the workspace's writers are serialized).
  const r = await insertCommit.execute(trx, {
    ws: workspaceId,
    sha: c.sha,
    parent: c.parent,
    principalId: c.principalId,
    message: c.message,
    at: c.at.toISOString(),
  });
  const seq = Number(r.rows[0]!.seq);
  noteLocked(trx, workspaceId, { commitSeq: seq });
  // Counted once durable: a transaction rolled back (a lost race, a failed push) made no commit.
  afterCommitIfAny(trx, () => commitsMade.inc());
  return seq;
}
