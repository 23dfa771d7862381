import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 18: PostgreSQL's own word statistics, as SQLite's per-level keyword tables have them.
 *
 * A keyword plan weighs each query word by how many sections hold it (retrieval/keyword-plan.ts).
 * PostgreSQL counted them from the GIN index on every search, joined to `pages` for the
 * sections' levels: 20–50 ms a common word at 100,000 pages. `term_stats` holds, per workspace,
 * level and lexeme, the sections holding it; the indexer keeps it in the page's own transaction,
 * so a count is one indexed read and never outlives a write (a page made secret moves its
 * sections' counts to `secret` in the commit that does it). The lexeme '' (no word becomes it)
 * counts every section: the workspace's sections per level.
 *
 * `page_sections.level` (both engines, so backups stay portable): the section's reader level as
 * a rank (0 public … 3 secret), the higher of its page's sensitivity and its block's, as it was
 * counted; an unknown level counts as secret. SQL only: a migration is a snapshot of its day.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  await sql`alter table page_sections add column level integer`.execute(db);
  const rank = (col: string, missing: string) =>
    sql`case coalesce(${sql.raw(col)}, ${sql.lit(missing)}) when 'public' then 0 when 'internal' then 1 when 'confidential' then 2 else 3 end`;
  const higher = dialect === 'postgres' ? sql.raw('greatest') : sql.raw('max');
  await sql`update page_sections set level = (
      select ${higher}(${rank('p.sensitivity', 'secret')}, ${rank('page_sections.block_level', 'public')}) from pages p where p.id = page_sections.page_id)`.execute(
    db,
  );
  await sql`update page_sections set level = 3 where level is null`.execute(db);
  if (dialect !== 'postgres') return;
  // fillfactor: a count changes in place, and room on its page keeps the update HOT.
  await sql`create table term_stats (
      workspace_id text not null references workspaces(id),
      lexeme text not null,
      level smallint not null,
      docs integer not null,
      primary key (workspace_id, lexeme, level)
    ) with (fillfactor = 70)`.execute(db);
  await sql`insert into term_stats (workspace_id, lexeme, level, docs)
      select s.workspace_id, x.lexeme, s.level, count(*) from page_sections s cross join unnest(tsvector_to_array(s.tsv) || '{""}'::text[]) as x(lexeme)
      group by 1, 2, 3`.execute(db);
}
