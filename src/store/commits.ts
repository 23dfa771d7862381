import { badRequest, notFound } from '../errors/index.js';
import type { Executor } from './db.js';

/** A commit of a workspace: its sha, its position in the workspace's history, and when it was made. */
export interface CommitRef {
  sha: string;
  seq: number;
  created_at: string;
}

/** Resolves a commit sha (full, or a unique prefix of at least 7) in the workspace. */
export async function resolveCommit(db: Executor, workspaceId: string, sha: string): Promise<CommitRef> {
  const s = sha.toLowerCase();
  if (!/^[0-9a-f]{7,40}$/.test(s)) throw badRequest('A commit sha is 7 to 40 hexadecimal characters', 'invalid_sha');
  const rows = await db
    .selectFrom('commits')
    .select(['sha', 'seq', 'created_at'])
    .where('workspace_id', '=', workspaceId)
    .where(s.length === 40 ? (eb) => eb('sha', '=', s) : (eb) => eb('sha', 'like', `${s}%`))
    .limit(2)
    .execute();
  if (rows.length === 0) throw notFound(`Commit ${sha} not found`, 'commit_not_found');
  if (rows.length > 1) throw badRequest(`Commit prefix ${sha} is ambiguous`, 'invalid_sha');
  return { ...rows[0]!, seq: Number(rows[0]!.seq) };
}

/** The workspace's newest commit, or null before its first. */
export async function headCommit(db: Executor, workspaceId: string): Promise<CommitRef | null> {
  const row = await db
    .selectFrom('commits')
    .select(['sha', 'seq', 'created_at'])
    .where('workspace_id', '=', workspaceId)
    .orderBy('seq', 'desc')
    .limit(1)
    .executeTakeFirst();
  return row ? { ...row, seq: Number(row.seq) } : null;
}
