import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 18: a PostgreSQL write takes its workspace's lock, then read the head of main and the
 * tail of the audit chain, each a round trip made while every other writer of the workspace
 * waits. `cv_lock_workspace` does the three in one: it locks the workspace row, then reads both
 * in a statement of its own. A function's statements each take a new snapshot (READ COMMITTED),
 * so what it reads was committed before the lock was granted: a subquery beside the lock in one
 * statement would read from the snapshot taken before the wait, and could miss the commit of
 * the writer it waited for. No row when the workspace does not exist. SQL only: a migration is a
 * snapshot of its day.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect !== 'postgres') return;
  await sql`create function cv_lock_workspace(ws text) returns table (head text, audit_seq bigint, audit_hash text)
    language plpgsql volatile as $lock$
    begin
      perform 1 from workspaces where id = ws for update;
      if not found then return; end if;
      return query select
        (select r.sha from git_refs r where r.workspace_id = ws and r.name = 'refs/heads/main'),
        a.seq::bigint, a.hash
        from (select 1) as one
        left join lateral (select l.seq, l.hash from audit_log l where l.workspace_id = ws order by l.seq desc limit 1) as a on true;
    end
    $lock$`.execute(db);
}
