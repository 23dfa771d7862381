import { commitsMade } from '../../metrics.js';
import type { Principal } from '../../policy/principal.js';
import type { Executor } from '../../store/db.js';
import { ObjectStore } from '../../store/git/object-store.js';
import { applyChanges } from '../../store/git/tree-paths.js';
import { afterCommitIfAny } from '../../store/tx.js';

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
  const objects = new ObjectStore(trx, workspaceId);
  const head = await objects.getRef(MAIN_REF);
  const rootTree = head ? ((await objects.getCommit(head))?.tree ?? null) : null;
  const blobs = new Map<string, string>();
  for (const c of changes) {
    if (c.content !== null) blobs.set(c.path, await objects.putBlob(c.content));
  }
  const tree = await applyChanges(
    objects,
    rootTree,
    changes.map((c) => ({ path: c.path, blobSha: c.content === null ? null : blobs.get(c.path)! })),
  );
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
  await objects.casRef(MAIN_REF, head, sha);
  const seq = await recordCommit(trx, workspaceId, { sha, parent: head, principalId: author.id, message, at });
  return { sha, seq, blobs };
}

/** Numbers a commit now on main: the next seq of the workspace's line (`commits`). */
export async function recordCommit(
  trx: Executor,
  workspaceId: string,
  c: { sha: string; parent: string | null; principalId: string; message: string; at: Date },
): Promise<number> {
  const last = await trx.selectFrom('commits').select('seq').where('workspace_id', '=', workspaceId).orderBy('seq', 'desc').limit(1).executeTakeFirst();
  const seq = (last?.seq ?? 0) + 1;
  await trx
    .insertInto('commits')
    .values({
      workspace_id: workspaceId,
      seq,
      sha: c.sha,
      parent_sha: c.parent,
      principal_id: c.principalId,
      message: c.message,
      created_at: c.at.toISOString(),
    })
    .execute();
  // Counted once durable: a transaction rolled back (a lost race, a failed push) made no commit.
  afterCommitIfAny(trx, () => commitsMade.inc());
  return seq;
}
