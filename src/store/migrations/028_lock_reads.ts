import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 18: creating a page takes its workspace's lock, then asks whether a live page holds the
 * path, and numbers its commit by reading the newest one: round trips made while every other
 * writer of the workspace waits. This variant of `cv_lock_workspace` (migration 018, kept for
 * nodes of the previous version during a rolling upgrade) answers both too: it reads in a
 * statement of its own after the lock is granted, so it sees everything committed before then.
 * `path_taken` is null when no path is given; `commit_seq` null when there is no commit yet.
 * SQL only: a migration is a snapshot of its day.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect !== 'postgres') return;
  await sql`create function cv_lock_workspace_v2(ws text, free_path text)
    returns table (head text, audit_seq bigint, audit_hash text, path_taken boolean, commit_seq bigint)
    language plpgsql volatile as $lock$
    begin
      perform 1 from workspaces where id = ws for update;
      if not found then return; end if;
      return query select
        (select r.sha from git_refs r where r.workspace_id = ws and r.name = 'refs/heads/main'),
        a.seq::bigint, a.hash,
        case when free_path is null then null
          else exists (select 1 from pages p where p.workspace_id = ws and p.path = free_path and p.deleted_at is null) end,
        (select c.seq from commits c where c.workspace_id = ws order by c.seq desc limit 1)::bigint
        from (select 1) as one
        left join lateral (select l.seq, l.hash from audit_log l where l.workspace_id = ws order by l.seq desc limit 1) as a on true;
    end
    $lock$`.execute(db);
}
