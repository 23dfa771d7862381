import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

const LEVELS = ['public', 'internal', 'confidential', 'secret'] as const;

/**
 * Issue 11: the SQLite keyword index becomes, per workspace, one FTS5 table per reader level,
 * each holding the sections at or below it (retrieval/keyword-index.ts keeps them from then on),
 * so no statistic of another workspace, or of sections above a reader's ceiling, weighs in a
 * score, an order or a plan. The deployment-wide table, its triggers and its vocabulary go; the
 * sections are indexed again from page_sections. SQL only: a migration is a snapshot of the
 * schema of its day, not a caller of today's code.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect !== 'sqlite') return;
  for (const t of ['page_sections_ai', 'page_sections_ad', 'page_sections_au']) await sql`drop trigger if exists ${sql.raw(t)}`.execute(db);
  await sql`drop table if exists page_sections_vocab`.execute(db);
  await sql`drop table if exists page_sections_fts`.execute(db);
  const workspaces = (await sql<{ id: string }>`select id from workspaces`.execute(db)).rows;
  const rankOf = (col: RawSql) => sql`case coalesce(${col}, 'public') when 'public' then 0 when 'internal' then 1 when 'confidential' then 2 else 3 end`;
  for (const { id } of workspaces) {
    const name = /^[a-z0-9_]{1,80}$/.test(id) ? id : `x${Buffer.from(id).toString('hex')}`;
    for (const [i, level] of LEVELS.entries()) {
      const t = sql.table(`kw_${level}_${name}`);
      await sql`create virtual table if not exists ${t} using fts5(
        title, heading, text, content='', contentless_delete=1, tokenize='porter unicode61 remove_diacritics 2'
      )`.execute(db);
      await sql`create virtual table if not exists ${sql.table(`kwv_${level}_${name}`)} using fts5vocab(${t}, 'row')`.execute(db);
      await sql`insert into ${t} (${t}) values ('delete-all')`.execute(db);
      // A section's level: the higher of its page's sensitivity and its block's.
      await sql`insert into ${t} (rowid, title, heading, text)
        select s.id, s.title, s.heading, s.text from page_sections s join pages p on p.id = s.page_id
        where s.workspace_id = ${id} and max(${rankOf(sql.ref('p.sensitivity'))}, ${rankOf(sql.ref('s.block_level'))}) <= ${i}`.execute(db);
    }
  }
}

type RawSql = ReturnType<typeof sql.ref>;
