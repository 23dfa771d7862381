import { sql, type RawBuilder } from 'kysely';
import { LEVELS, type Level } from '../policy/sensitivity.js';
import type { Executor, Store } from '../store/db.js';
import { builtOnce } from '../store/built-once.js';
import { afterCommitIfAny } from '../store/tx.js';
import { indexText } from './keyword.js';

/**
 * The SQLite keyword index: per workspace, one FTS5 table per reader level (issue 11).
 *
 * FTS5's bm25 weighs a word by how many rows of the table hold it, and a row's length by the
 * table's average; plans cut to the newest matches of the table. So a table may hold only rows
 * its readers may see: in one table for the deployment, another tenant's writing reordered this
 * tenant's results; in one table per workspace, secret pages reordered (and, through the
 * newest-N cut, replaced) a viewer's. Each workspace has four tables, `kw_<level>_<workspace>`,
 * the one for level L holding every section at or below L (a section's level: the higher of its
 * page's sensitivity and its block's). A caller queries the table of its widest ceiling, and its
 * word counts are that table's vocabulary (`kwv_<level>_<workspace>`): exact, and one lookup.
 * The cost is space and write time: a public section is indexed four times.
 *
 * The tables are contentless (rows are read from page_sections by id) with
 * `contentless_delete`, so the indexer removes a page's rows by id alone. PostgreSQL keeps its
 * word statistics per workspace and level in `term_stats` instead (migration 016, indexer.ts).
 */

/** A workspace id as part of an SQL name: ids are `ws_` and a ULID; anything else is hex-encoded. */
function suffix(workspaceId: string): string {
  return /^[a-z0-9_]{1,80}$/.test(workspaceId) ? workspaceId : `x${Buffer.from(workspaceId).toString('hex')}`;
}

/** The FTS5 table of the workspace's sections at or below `level`, as an identifier for SQL. */
export function keywordTable(workspaceId: string, level: Level): RawBuilder<unknown> {
  return sql.table(keywordTableName(workspaceId, level));
}

function keywordTableName(workspaceId: string, level: Level): string {
  return `kw_${level}_${suffix(workspaceId)}`;
}

/** Its fts5vocab table (rows: term, doc = sections holding the term, cnt). */
export function vocabTable(workspaceId: string, level: Level): RawBuilder<unknown> {
  return sql.table(`kwv_${level}_${suffix(workspaceId)}`);
}

export { isSqlite } from '../store/db.js';

const known = new WeakMap<object, Set<string>>();

/** Whether the workspace has its keyword tables yet (created with its first indexed page). */
export async function hasKeywordIndex(store: Store, workspaceId: string): Promise<boolean> {
  let seen = known.get(store);
  if (!seen) known.set(store, (seen = new Set()));
  if (seen.has(workspaceId)) return true;
  const r = await sql<{ n: number }>`select count(*) as n from sqlite_master where name = ${`kw_public_${suffix(workspaceId)}`}`.execute(store.db);
  if (Number(r.rows[0]?.n ?? 0) === 0) return false;
  seen.add(workspaceId);
  return true;
}

/**
 * Workspaces whose tables this process has seen committed, per database (its Kysely adapter).
 * The tables are never dropped while a service runs, so what was seen stays true.
 */
const complete = new WeakMap<object, Set<string>>();

/** Creates the workspace's tables when missing (in the caller's transaction). */
export async function ensureKeywordIndex(db: Executor, workspaceId: string): Promise<void> {
  // Every page write passes here: a lookup the first time (sqlite_master is scanned: ~0.1 ms),
  // and the eight statements only for a new workspace.
  const adapter = db.getExecutor().adapter;
  let seen = complete.get(adapter);
  if (!seen) complete.set(adapter, (seen = new Set()));
  if (seen.has(workspaceId)) return;
  const names = LEVELS.flatMap((l) => [`kw_${l}_${suffix(workspaceId)}`, `kwv_${l}_${suffix(workspaceId)}`]);
  const have = await sql<{ n: number }>`select count(*) as n from sqlite_master where name in (${sql.join(names)})`.execute(db);
  // Remembered once committed (tables created by a transaction that rolls back are gone with
  // it), and only once they all exist (a failed create never gets this far).
  const remember = () => afterCommitIfAny(db, () => seen.add(workspaceId));
  if (Number(have.rows[0]?.n ?? 0) === names.length) return remember();
  for (const level of LEVELS) {
    const t = keywordTable(workspaceId, level);
    await sql`create virtual table if not exists ${t} using fts5(
      title, heading, text,
      content='', contentless_delete=1,
      tokenize='porter unicode61 remove_diacritics 2'
    )`.execute(db);
    await sql`create virtual table if not exists ${vocabTable(workspaceId, level)} using fts5vocab(${t}, 'row')`.execute(db);
  }
  remember();
}

/** Drops pages' sections from the index: call before their page_sections rows are deleted. */
export async function unindexSections(db: Executor, workspaceId: string, pageIds: readonly string[]): Promise<void> {
  for (const level of LEVELS) await unindex.execute(db, { ids: pageIds }, keywordTableName(workspaceId, level));
}

// Built once per table and shape (store/built-once.ts): every page write runs them.
const unindex = builtOnce(
  (db, v: { ids: readonly string[] }, table) =>
    sql`delete from ${sql.table(table)} where rowid in (select id from page_sections where page_id in (${sql.join(v.ids)}))`,
);
const index = builtOnce(
  (db, v: { json: string; rank: number }, table) => sql`insert into ${sql.table(table)} (rowid, title, heading, text)
      select json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), json_extract(value, '$[3]')
      from json_each(${v.json}) where json_extract(value, '$[4]') <= ${v.rank}`,
);
const sectionsToIndex = builtOnce(
  (db, v: { ids: readonly string[] }) => sql<{ id: number; title: string | null; heading: string | null; text: string | null; r: number }>`
    select s.id, s.title, s.heading, s.text, max(${rankSql(sql.ref('p.sensitivity'), 'secret')}, ${rankSql(sql.ref('s.block_level'), 'public')}) as r
    from page_sections s join pages p on p.id = s.page_id
    where s.page_id in (${sql.join(v.ids)})`,
);

/** A level's rank in SQL (an unknown or missing level counts as secret, as search judges it). */
function rankSql(column: RawBuilder<unknown>, missing: string) {
  return sql`case coalesce(${column}, ${missing}) when 'public' then 0 when 'internal' then 1 when 'confidential' then 2 else 3 end`;
}

/**
 * Adds pages' sections to the index: call after their page_sections and pages rows are
 * written. A section goes into the table of every level at or above its rank: the higher of
 * its page's sensitivity and its block's.
 */
export async function indexSections(db: Executor, workspaceId: string, pageIds: readonly string[]): Promise<void> {
  const rows = await sectionsToIndex.rows(db, { ids: pageIds });
  if (rows.length === 0) return;
  // Each section's text is prepared once (indexText), not once per level's table.
  const prepared = (t: string | null) => (t === null ? null : indexText(t));
  const json = JSON.stringify(rows.map((x) => [x.id, prepared(x.title), prepared(x.heading), prepared(x.text), x.r]));
  for (const [rank, level] of LEVELS.entries()) await index.execute(db, { json, rank }, keywordTableName(workspaceId, level));
}

/** Empties every workspace's index (before a full rebuild from the pages). */
export async function clearKeywordIndexes(db: Executor): Promise<void> {
  const ws = await db.selectFrom('workspaces').select('id').execute();
  for (const { id } of ws) {
    await ensureKeywordIndex(db, id);
    for (const level of LEVELS) {
      const t = keywordTable(id, level);
      await sql`insert into ${t} (${t}) values ('delete-all')`.execute(db);
    }
  }
}
