import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db.js';

/**
 * Issue 11: the SQLite keyword index becomes one FTS5 table per workspace, so no statistic of
 * another workspace weighs in a score, an order or a plan (retrieval/keyword-index.ts keeps
 * them from then on). The deployment-wide table, its triggers and its vocabulary go; each
 * workspace's sections are indexed again from page_sections. SQL only: a migration is a
 * snapshot of the schema of its day, not a caller of today's code.
 */
export async function up(db: Kysely<unknown>, dialect: Dialect): Promise<void> {
  if (dialect !== 'sqlite') return;
  for (const t of ['page_sections_ai', 'page_sections_ad', 'page_sections_au']) await sql`drop trigger if exists ${sql.raw(t)}`.execute(db);
  await sql`drop table if exists page_sections_vocab`.execute(db);
  await sql`drop table if exists page_sections_fts`.execute(db);
  const workspaces = (await sql<{ id: string }>`select id from workspaces`.execute(db)).rows;
  for (const { id } of workspaces) {
    const name = /^[a-z0-9_]{1,80}$/.test(id) ? id : `x${Buffer.from(id).toString('hex')}`;
    const t = sql.table(`kw_${name}`);
    await sql`create virtual table if not exists ${t} using fts5(
      title, heading, text, content='', contentless_delete=1, tokenize='porter unicode61 remove_diacritics 2'
    )`.execute(db);
    await sql`create virtual table if not exists ${sql.table(`kwv_${name}`)} using fts5vocab(${t}, 'row')`.execute(db);
    await sql`insert into ${t} (${t}) values ('delete-all')`.execute(db);
    await sql`insert into ${t} (rowid, title, heading, text) select id, title, heading, text from page_sections where workspace_id = ${id}`.execute(db);
    // The sections above public, each in the column of its level (the higher of page and block).
    const l = sql.table(`kwl_${name}`);
    await sql`create virtual table if not exists ${l} using fts5(
      internal, confidential, secret, content='', contentless_delete=1, tokenize='porter unicode61 remove_diacritics 2'
    )`.execute(db);
    await sql`create virtual table if not exists ${sql.table(`kwlv_${name}`)} using fts5vocab(${l}, 'col')`.execute(db);
    await sql`insert into ${l} (${l}) values ('delete-all')`.execute(db);
    await sql`insert into ${l} (rowid, internal, confidential, secret)
      select id, iif(lvl = 'internal', words, null), iif(lvl = 'confidential', words, null), iif(lvl = 'secret', words, null)
      from (
        select s.id, s.title || ' ' || s.heading || ' ' || s.text as words, case
          when p.sensitivity not in ('public', 'internal', 'confidential') or coalesce(s.block_level, 'public') not in ('public', 'internal', 'confidential') then 'secret'
          when p.sensitivity = 'confidential' or s.block_level = 'confidential' then 'confidential'
          when p.sensitivity = 'internal' or s.block_level = 'internal' then 'internal'
          else 'public' end as lvl
        from page_sections s join pages p on p.id = s.page_id
        where s.workspace_id = ${id})
      where lvl <> 'public'`.execute(db);
  }
}
