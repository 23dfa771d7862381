import { sql } from 'kysely';
import { expect } from 'vitest';
import { walkAuditChain } from '../../src/core/audit.js';
import type { Executor } from '../../src/store/db.js';

/**
 * A workspace's history is one line: commits numbered without gaps, each the child of the one
 * before, main at the last; and its audit chain unbroken. Returns the commits and the audit
 * entries counted, for the caller's own expectations.
 */
export async function expectSingleLine(db: Executor, workspaceId: string): Promise<{ commits: { seq: number; sha: string }[]; auditEntries: number }> {
  const commits = (
    await sql<{
      seq: number;
      sha: string;
      parent_sha: string | null;
    }>`select seq, sha, parent_sha from commits where workspace_id = ${workspaceId} order by seq`.execute(db)
  ).rows;
  commits.forEach((c, i) => {
    expect(Number(c.seq), `seq of commit ${i}`).toBe(Number(commits[0]!.seq) + i);
    if (i > 0) expect(c.parent_sha, `parent of commit ${c.seq}`).toBe(commits[i - 1]!.sha);
  });
  const main = await db
    .selectFrom('git_refs')
    .select('sha')
    .where('workspace_id', '=', workspaceId)
    .where('name', '=', 'refs/heads/main')
    .executeTakeFirstOrThrow();
  expect(main.sha).toBe(commits.at(-1)!.sha);
  const chain = await walkAuditChain(db, workspaceId);
  expect(chain.firstBroken).toBeNull();
  return { commits, auditEntries: chain.entries };
}
