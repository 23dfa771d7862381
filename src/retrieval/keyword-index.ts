import { sql, SqliteAdapter, type RawBuilder } from 'kysely';
import type { Executor, Store } from '../store/db.js';

/**
 * The SQLite keyword index: one FTS5 table per workspace (issue 11).
 *
 * FTS5's bm25 weighs a word by how many rows of the table hold it, and a row's length by the
 * table's average: in one table for the whole deployment, another tenant's writing moved the
 * order of this tenant's results (and, through plans and the "weak" fallback, what they found).
 * A table per workspace keeps every statistic inside the workspace. The tables are contentless
 * (rows are read from page_sections by id) with `contentless_delete`, so the indexer removes a
 * page's rows by id alone. PostgreSQL needs none of this: ts_rank_cd uses no corpus statistics.
 *
 * Beside it, a smaller table holds only the sections above public, each in the column of its
 * level (the higher of its page's sensitivity and its block's): its `col` vocabulary tells how
 * many sections at each level hold a word, so a caller's own count (every section minus those
 * above its ceiling) is two vocabulary lookups, never a count over the matches.
 */

/** A workspace id as part of an SQL name: ids are `ws_` and a ULID; anything else is hex-encoded. */
function suffix(workspaceId: string): string {
  return /^[a-z0-9_]{1,80}$/.test(workspaceId) ? workspaceId : `x${Buffer.from(workspaceId).toString('hex')}`;
}

/** The workspace's FTS5 table, as an identifier to place in SQL. */
export function keywordTable(workspaceId: string): RawBuilder<unknown> {
  return sql.table(`kw_${suffix(workspaceId)}`);
}

/** Its fts5vocab table (rows: term, doc = sections holding the term, cnt). */
export function vocabTable(workspaceId: string): RawBuilder<unknown> {
  return sql.table(`kwv_${suffix(workspaceId)}`);
}

/** The levels above public, in order: the columns of the level table. */
export const RAISED_LEVELS = ['internal', 'confidential', 'secret'] as const;

/** The fts5vocab (`col`) table of the sections above public: term, col = level, doc. */
export function levelVocabTable(workspaceId: string): RawBuilder<unknown> {
  return sql.table(`kwlv_${suffix(workspaceId)}`);
}

function levelTable(workspaceId: string): RawBuilder<unknown> {
  return sql.table(`kwl_${suffix(workspaceId)}`);
}

export function isSqlite(db: Executor): boolean {
  return db.getExecutor().adapter instanceof SqliteAdapter;
}

const known = new WeakMap<object, Set<string>>();

/** Whether the workspace has a keyword table yet (created with its first indexed page). */
export async function hasKeywordIndex(store: Store, workspaceId: string): Promise<boolean> {
  let seen = known.get(store);
  if (!seen) known.set(store, (seen = new Set()));
  if (seen.has(workspaceId)) return true;
  const r = await sql<{ n: number }>`select count(*) as n from sqlite_master where name = ${`kw_${suffix(workspaceId)}`}`.execute(store.db);
  if (Number(r.rows[0]?.n ?? 0) === 0) return false;
  seen.add(workspaceId);
  return true;
}

/** Creates the workspace's tables when missing (in the caller's transaction). */
export async function ensureKeywordIndex(db: Executor, workspaceId: string): Promise<void> {
  const t = keywordTable(workspaceId);
  await sql`create virtual table if not exists ${t} using fts5(
    title, heading, text,
    content='', contentless_delete=1,
    tokenize='porter unicode61 remove_diacritics 2'
  )`.execute(db);
  await sql`create virtual table if not exists ${vocabTable(workspaceId)} using fts5vocab(${t}, 'row')`.execute(db);
  const l = levelTable(workspaceId);
  await sql`create virtual table if not exists ${l} using fts5(
    internal, confidential, secret,
    content='', contentless_delete=1,
    tokenize='porter unicode61 remove_diacritics 2'
  )`.execute(db);
  await sql`create virtual table if not exists ${levelVocabTable(workspaceId)} using fts5vocab(${l}, 'col')`.execute(db);
}

/** Drops a page's sections from the index: call before its page_sections rows are deleted. */
export async function unindexSections(db: Executor, workspaceId: string, pageId: string): Promise<void> {
  await sql`delete from ${keywordTable(workspaceId)} where rowid in (select id from page_sections where page_id = ${pageId})`.execute(db);
  await sql`delete from ${levelTable(workspaceId)} where rowid in (select id from page_sections where page_id = ${pageId})`.execute(db);
}

/**
 * Adds a page's sections to the index: call after its page_sections rows are written, with the
 * page's sensitivity (an unknown level counts as secret, as search judges it).
 */
export async function indexSections(db: Executor, workspaceId: string, pageId: string, sensitivity: string): Promise<void> {
  await sql`insert into ${keywordTable(workspaceId)} (rowid, title, heading, text)
    select id, title, heading, text from page_sections where page_id = ${pageId}`.execute(db);
  const sens = (RAISED_LEVELS as readonly string[]).includes(sensitivity) || sensitivity === 'public' ? sensitivity : 'secret';
  // A section's level: the higher of the page's and its block's (an unknown block level is secret).
  const lvl = sql`case
    when ${sens} = 'secret' or coalesce(block_level, 'public') not in ('public', 'internal', 'confidential') then 'secret'
    when ${sens} = 'confidential' or block_level = 'confidential' then 'confidential'
    when ${sens} = 'internal' or block_level = 'internal' then 'internal'
    else 'public' end`;
  await sql`insert into ${levelTable(workspaceId)} (rowid, internal, confidential, secret)
    select id, iif(lvl = 'internal', words, null), iif(lvl = 'confidential', words, null), iif(lvl = 'secret', words, null)
    from (select id, ${lvl} as lvl, title || ' ' || heading || ' ' || text as words from page_sections where page_id = ${pageId})
    where lvl <> 'public'`.execute(db);
}

/** Empties every workspace's index (before a full rebuild from the pages). */
export async function clearKeywordIndexes(db: Executor): Promise<void> {
  const ws = await db.selectFrom('workspaces').select('id').execute();
  for (const { id } of ws) {
    await ensureKeywordIndex(db, id);
    for (const t of [keywordTable(id), levelTable(id)]) await sql`insert into ${t} (${t}) values ('delete-all')`.execute(db);
  }
}
