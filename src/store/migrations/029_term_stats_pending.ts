import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 18: PostgreSQL's word statistics (`term_stats`, migration 016) were moved by each write
 * in its transaction, an upsert of every word of its sections (~170 rows a page, ~1 ms) made while
 * every other writer of the workspace waits for its lock. A write now appends what it adds and
 * removes to `term_stats_pending` (no upsert, no row lock, no foreign key: derived rows), a
 * background round folds them into `term_stats` (retrieval/term-stats-fold.ts), and readers count
 * through `term_counts`, both tables at once: one snapshot sees a fold whole or not at all, so
 * the counts stay exact. Nodes of the previous version, still writing `term_stats` itself during
 * a rolling upgrade, stay exact too. SQL only: a migration is a snapshot of its day.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect !== 'postgres') return;
  await sql`create table term_stats_pending (
      workspace_id text not null,
      lexeme text not null,
      level smallint not null,
      docs bigint not null
    )`.execute(db);
  await sql`create index term_stats_pending_key on term_stats_pending (workspace_id, lexeme, level)`.execute(db);
  await sql`create view term_counts as
      select workspace_id, lexeme, level, docs from term_stats
      union all
      select workspace_id, lexeme, level, docs from term_stats_pending`.execute(db);
}
