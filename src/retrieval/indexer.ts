import { sql, type CompiledQuery, type Insertable, type Kysely, type QueryResult, type RawBuilder, type Transaction } from 'kysely';
import { documentBody, extractLinks, maxBlockLevel, redactBlocks } from '../markdown/index.js';
import { visibleUnder } from '../policy/access.js';
import { isLevel, LEVELS, rank, type Level } from '../policy/sensitivity.js';
import { builtOnce, type BuiltOnce } from '../store/built-once.js';
import { executeCarrying } from '../store/carried.js';
import type { DB, PagesTable } from '../store/schema.js';
import { afterCommitIfAny } from '../store/tx.js';
import { chunkBody, type Chunk } from './chunking.js';
import { wakeEmbedWorkers } from './embed-worker.js';
import { clearKeywordIndexes, ensureKeywordIndex, indexSections, isSqlite, unindexSections } from './keyword-index.js';
import { countWords } from './keyword.js';
import { linkKey, pageKeys, pickTarget } from './links.js';

type Exec = Kysely<DB> | Transaction<DB>;

const BATCH = 200;

/** Inserts a page's index rows into `table`, BATCH at a time (engines bound a statement's parameters). */
async function insertBatched<T extends DerivedTable>(db: Exec, table: T, rows: Insertable<DB[T]>[]): Promise<void> {
  const insert = INSERT[table] as BuiltOnce<Insertable<DB[T]>[], unknown>;
  for (let i = 0; i < rows.length; i += BATCH) await insert.execute(db, rows.slice(i, i + BATCH));
}

type DerivedTable = 'page_sections' | 'page_links' | 'page_tags' | 'page_keys';

// The index's statements, built once per shape (store/built-once.ts): every page write runs them.
const INSERT: { [T in DerivedTable]: BuiltOnce<Insertable<DB[T]>[], unknown> } = {
  page_sections: builtOnce((db, rows: Insertable<DB['page_sections']>[]) => db.insertInto('page_sections').values(rows)),
  page_links: builtOnce((db, rows: Insertable<DB['page_links']>[]) => db.insertInto('page_links').values(rows)),
  page_tags: builtOnce((db, rows: Insertable<DB['page_tags']>[]) => db.insertInto('page_tags').values(rows)),
  page_keys: builtOnce((db, rows: Insertable<DB['page_keys']>[]) => db.insertInto('page_keys').values(rows)),
};
/** A derived table's rows of some pages (the table is the run's key). */
const derivedRows = builtOnce((db, v: { ids: readonly string[] }, table) => {
  const spec = DERIVED[table as keyof typeof DERIVED];
  return sql<
    Record<string, unknown>
  >`select ${sql.join(spec.columns.map((c) => sql.ref(c)))} from ${sql.table(table)} where ${sql.ref(spec.page)} in (${sql.join(v.ids)})`;
});
const deleteDerived = builtOnce((db, v: { ids: readonly string[] }, table) => {
  const spec = DERIVED[table as keyof typeof DERIVED];
  return sql`delete from ${sql.table(table)} where ${sql.ref(spec.page)} in (${sql.join(v.ids)})`;
});
/** One row of a derived table, by the columns naming it (in the spec's order). */
const deleteDerivedRow = builtOnce((db, v: { identity: readonly unknown[] }, table) => {
  const spec = DERIVED[table as keyof typeof DERIVED];
  return sql`delete from ${sql.table(table)} where ${sql.join(
    spec.identity.map((c, i) => sql`${sql.ref(c)} = ${v.identity[i]}`),
    sql` and `,
  )}`;
});
const deleteSections = builtOnce((db, v: { ids: readonly string[] }) => db.deleteFrom('page_sections').where('page_id', 'in', v.ids));
const queueEmbedJobs = builtOnce((db, rows: Insertable<DB['embed_jobs']>[]) =>
  db
    .insertInto('embed_jobs')
    .values(rows)
    .onConflict((oc) =>
      oc.column('page_id').doUpdateSet((eb) => ({
        content_hash: eb.ref('excluded.content_hash'),
        queued_at: eb.ref('excluded.queued_at'),
        attempts: 0,
        not_before: null,
      })),
    ),
);
const unlinkDeleted = builtOnce((db, v: { ws: string; ids: readonly string[] }) =>
  db.updateTable('page_links').set({ target_id: null }).where('workspace_id', '=', v.ws).where('target_id', 'in', v.ids),
);
const linkToNames = builtOnce((db, v: { ws: string; keys: readonly string[]; pageIds: readonly string[] }) =>
  db
    .updateTable('page_links')
    .set((eb) => ({
      target_id: eb
        .selectFrom('page_keys')
        .select('page_keys.page_id')
        .whereRef('page_keys.workspace_id', '=', 'page_links.workspace_id')
        .whereRef('page_keys.key', '=', 'page_links.target_key')
        .where('page_keys.page_id', 'in', v.pageIds)
        .limit(1),
    }))
    .where('workspace_id', '=', v.ws)
    .where('target_id', 'is', null)
    .where('target_key', 'in', v.keys),
);
// The names first, then their pages by id: PostgreSQL planning the join from stale statistics
// (a workspace loaded since its last ANALYZE) walked every live page instead (88 ms).
const pagesByName = builtOnce((db, v: { ws: string; keys: readonly string[] }) =>
  db
    .with(
      (w) => w('k').materialized(),
      (q) => q.selectFrom('page_keys').select(['key', 'page_id']).where('workspace_id', '=', v.ws).where('key', 'in', v.keys),
    )
    .selectFrom('k')
    .innerJoin('pages', 'pages.id', 'k.page_id')
    .select(['k.key', 'pages.id', 'pages.path'])
    .where('pages.deleted_at', 'is', null),
);

/** The derived tables synced row by row, each with its columns and the columns naming a row. */
const DERIVED = {
  page_tags: { page: 'page_id', columns: ['workspace_id', 'page_id', 'tag'], identity: ['page_id', 'tag'] },
  page_keys: { page: 'page_id', columns: ['workspace_id', 'key', 'page_id'], identity: ['workspace_id', 'key', 'page_id'] },
  page_links: {
    page: 'source_id',
    columns: ['workspace_id', 'source_id', 'ord', 'target', 'kind', 'text', 'block_level', 'target_key', 'target_id'],
    identity: ['source_id', 'ord'],
  },
} as const;
/** Past this many rows to change, the pages' rows are replaced wholesale (one delete, not one per row). */
const ROW_BY_ROW_MAX = 20;

/**
 * Makes the pages' rows of a derived table exactly `rows`, writing only the rows that differ:
 * a page rewritten with its tags, names and links unchanged writes none of them (SQLite: each
 * row rewritten dirtied index pages that the commit wrote to its log, ~18 of a write's ~90).
 */
async function syncDerived<T extends keyof typeof DERIVED>(db: Exec, table: T, pageIds: readonly string[], rows: Insertable<DB[T]>[]): Promise<void> {
  const spec = DERIVED[table];
  const print = (r: Record<string, unknown>) => JSON.stringify(spec.columns.map((c) => r[c] ?? null));
  const old = new Map<string, Record<string, unknown>>();
  for (const ids of slices(pageIds)) {
    for (const row of (await derivedRows.execute(db, { ids }, table)).rows) old.set(print(row), row);
  }
  const wanted = new Set<string>();
  const added: Insertable<DB[T]>[] = [];
  for (const row of rows) {
    const key = print(row as Record<string, unknown>);
    if (wanted.has(key)) continue;
    wanted.add(key);
    if (!old.has(key)) added.push(row);
  }
  const stale = [...old].filter(([key]) => !wanted.has(key)).map(([, row]) => row);
  if (stale.length + added.length > ROW_BY_ROW_MAX) {
    for (const ids of slices(pageIds)) await deleteDerived.execute(db, { ids }, table);
    await insertBatched(db, table, rows);
    return;
  }
  for (const row of stale) await deleteDerivedRow.execute(db, { identity: spec.identity.map((c) => row[c]) }, table);
  await insertBatched(db, table, added);
}

/** `values` in slices the engines take (they bound a statement's parameters). */
function slices<T>(values: readonly T[], size = BATCH): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < values.length; i += size) out.push(values.slice(i, i + size));
  return out;
}

/**
 * Brings a page's keyword index, links, tags and keys in line with its row, in the caller's
 * transaction (commitPage calls it for every create, update, move, archive, restore and
 * delete). Everything is rebuilt from the row: a page is small and a write is rare next to reads.
 */
export async function indexPage(db: Exec, row: PagesTable, opts: IndexOptions = {}): Promise<void> {
  await indexPages(db, [row], undefined, opts);
}

export interface IndexOptions {
  /** The pages are new (ids never indexed before): there are no old rows to remove. */
  fresh?: boolean;
  /**
   * Writes of the pages' own rows, run before the index reads anything (store/carried.ts): on
   * PostgreSQL sent with the index's first statement, which reads none of `pages`.
   */
  carried?: readonly CompiledQuery[];
  /**
   * PostgreSQL: the index's last writes (the pages' links) are pushed here instead of run, for
   * the caller to send with its next statement, which must not read `page_links`.
   */
  trailing?: CompiledQuery[];
}

/**
 * indexPage for many pages of one workspace at once (an import's batch): the same rows, in a
 * few statements per batch instead of a dozen per page. Links between the pages resolve to
 * each other whatever their order. `chunked`: pages' chunks already cut (chunkBody of the
 * page's body), by page id, by a caller that parsed the pages anyway.
 */
export async function indexPages(db: Exec, rows: readonly PagesTable[], chunked?: ReadonlyMap<string, Chunk[]>, opts: IndexOptions = {}): Promise<void> {
  const ws = rows[0]?.workspace_id;
  const carried = new Carried(opts.carried);
  if (ws === undefined) return carried.runRest(db);
  if (rows.some((r) => r.workspace_id !== ws)) throw new Error('indexPages: pages of one workspace at a time');
  const live = rows.filter((r) => r.deleted_at === null);
  const parsed = live.map((row) => ({ row, body: documentBody(row.content) }));
  const rowsOf: IndexRows = {
    sections: parsed.flatMap(({ row, body }) =>
      (chunked?.get(row.id) ?? chunkBody(body)).map((c) => ({
        workspace_id: ws,
        page_id: row.id,
        ord: c.ord,
        title: row.title,
        heading: c.heading,
        heading_level: c.headingLevel,
        text: c.text,
        block_level: c.blockLevel,
        level: sectionLevel(row.sensitivity, c.blockLevel),
        archived: row.state === 'active' ? 0 : 1,
        tokens: countWords(row.title, c.heading, c.text),
      })),
    ),
    tags: live.flatMap((row) => [...new Set(JSON.parse(row.tags) as string[])].map((tag) => ({ workspace_id: ws, page_id: row.id, tag }))),
    keys: live.flatMap((row) => pageKeys(row.path, row.title).map((key) => ({ workspace_id: ws, key, page_id: row.id }))),
  };
  const linked = parsed.map(({ row, body }) => ({
    row,
    links: linkLevels(body, JSON.parse(row.links) as { target: string; kind: 'wiki' | 'markdown'; text: string }[]).map((l, ord) => ({
      ...l,
      ord,
      key: linkKey(l, row.cluster_path),
    })),
  }));
  const wanted = [...new Set(linked.flatMap((p) => p.links.map((l) => l.key)).filter((k): k is string => k !== null))];
  // PostgreSQL: the pages the links name are read by the index's last statement (one round trip
  // fewer under the lock); it cannot see the names it inserts itself, so this batch's own are added.
  let named: NamedPage[] | undefined;
  if (isSqlite(db)) {
    await carried.runRest(db);
    await rewriteSqlite(db, ws, rows, rowsOf);
  } else if (opts.fresh && live.length === rows.length) {
    named = await writeIndexPg(db, ws, rowsOf, { levels: [], lexemes: [], docs: [] }, carried, wanted, rows.map(embedJob));
  } else named = await rewritePg(db, ws, rows, rowsOf, carried, wanted);
  await carried.runRest(db);
  afterCommitIfAny(db, wakeEmbedWorkers);
  if (live.length === 0) return;

  const found = new Map<string, { id: string; path: string }[]>();
  const note = (r: NamedPage) => {
    const list = found.get(r.key);
    if (!list) found.set(r.key, [{ id: r.id, path: r.path }]);
    else if (!list.some((x) => x.id === r.id)) list.push({ id: r.id, path: r.path });
  };
  if (named) {
    const wantedSet = new Set(wanted);
    const pathOf = new Map(live.map((r) => [r.id, r.path]));
    for (const r of named) note(r);
    for (const k of rowsOf.keys) if (wantedSet.has(k.key)) note({ key: k.key, id: k.page_id, path: pathOf.get(k.page_id)! });
  } else {
    for (const keys of slices(wanted)) for (const r of await pagesByName.rows(db, { ws, keys })) note(r);
  }
  const links: Insertable<DB['page_links']>[] = linked.flatMap(({ row, links }) =>
    links.map((l) => ({
      workspace_id: ws,
      source_id: row.id,
      ord: l.ord,
      target: l.target,
      kind: l.kind,
      text: l.text,
      block_level: l.blockLevel,
      target_key: l.key,
      target_id: l.key === null ? null : (pickTarget(found.get(l.key) ?? [], l.key, row.path)?.id ?? null),
    })),
  );
  // SQLite kept the live pages' old links: only those that changed are written. PostgreSQL
  // removed them with the rest of the pages' rows (rewritePg).
  if (isSqlite(db)) {
    await syncDerived(
      db,
      'page_links',
      live.map((p) => p.id),
      links,
    );
  } else if (opts.trailing) {
    for (const batch of slices(links)) opts.trailing.push(INSERT.page_links.compiled(db, batch));
  } else await insertBatched(db, 'page_links', links);
}

/** A page's derived rows, as indexPages writes them. */
interface IndexRows {
  sections: Insertable<DB['page_sections']>[];
  tags: Insertable<DB['page_tags']>[];
  keys: Insertable<DB['page_keys']>[];
}

/** The embedding worker's job for a page (retrieval/embed-worker.ts): vectors follow the page. */
const embedJob = (row: PagesTable) => ({ page_id: row.id, content_hash: row.deleted_at === null ? row.content_hash : 'deleted', queued_at: row.updated_at });
type EmbedJob = ReturnType<typeof embedJob>;

/** PostgreSQL: the pages' embedding jobs queued (or re-queued), as one part of a statement. */
function embedJobsInsert(ws: string, jobs: readonly EmbedJob[]) {
  return sql`insert into embed_jobs (page_id, workspace_id, content_hash, queued_at, attempts, not_before, last_error)
    select u.page_id, ${ws}, u.content_hash, u.queued_at, 0, null, null
    from unnest(${jobs.map((j) => j.page_id)}::text[], ${jobs.map((j) => j.content_hash)}::text[], ${jobs.map((j) => j.queued_at)}::text[]) as u(page_id, content_hash, queued_at)
    on conflict (page_id) do update set content_hash = excluded.content_hash, queued_at = excluded.queued_at, attempts = 0, not_before = null`;
}

/** SQLite: the pages' old rows out, the new ones in, statement by statement (each is a call into the same process). */
async function rewriteSqlite(db: Exec, ws: string, rows: readonly PagesTable[], next: IndexRows): Promise<void> {
  await ensureKeywordIndex(db, ws);
  for (const ids of slices(rows.map((r) => r.id))) {
    await unindexSections(db, ws, ids);
    await deleteSections.execute(db, { ids });
  }
  // Deleted pages lose their links here; live pages' links are synced once resolved (indexPages).
  for (const ids of slices(rows.filter((r) => r.deleted_at !== null).map((r) => r.id))) {
    await deleteDerived.execute(db, { ids }, 'page_links');
  }
  for (const batch of slices(rows)) {
    await queueEmbedJobs.execute(
      db,
      batch.map((row) => ({ ...embedJob(row), workspace_id: ws, attempts: 0, not_before: null, last_error: null })),
    );
  }
  // Links that reached a deleted page by id may reach a page created later at its name.
  for (const ids of slices(rows.filter((r) => r.deleted_at !== null).map((r) => r.id))) {
    await unlinkDeleted.execute(db, { ws, ids });
  }
  await insertBatched(db, 'page_sections', next.sections);
  const live = [...new Set(next.sections.map((r) => r.page_id))];
  for (const ids of slices(live)) await indexSections(db, ws, ids);
  const ids = rows.map((r) => r.id);
  await syncDerived(db, 'page_tags', ids, next.tags);
  await syncDerived(db, 'page_keys', ids, next.keys);
  // Links written before these pages existed (or before they had these names) now reach them.
  const pageIds = rows.filter((r) => r.deleted_at === null).map((r) => r.id);
  for (const keys of slices([...new Set(next.keys.map((k) => k.key))])) await linkToNames.execute(db, { ws, keys, pageIds });
}

/**
 * PostgreSQL: the same rows in two statements per batch, each one round trip inside the
 * workspace's lock. The first removes the pages' old rows, queues their embedding jobs, unlinks
 * links that reached deleted pages, and answers with the removed sections' lexemes by level. The
 * second (writeIndexPg) adds the new rows and moves the word statistics.
 */
async function rewritePg(
  db: Exec,
  ws: string,
  rows: readonly PagesTable[],
  next: IndexRows,
  carried: Carried,
  wanted: readonly string[],
): Promise<NamedPage[] | undefined> {
  const removed: TermCounts = { levels: [], lexemes: [], docs: [] };
  for (const batch of slices(rows)) {
    const ids = batch.map((r) => r.id);
    const gone = batch.filter((r) => r.deleted_at !== null).map((r) => r.id);
    const jobs = batch.map(embedJob);
    const r = await carried.with(
      db,
      sql<{
        level: number;
        lexeme: string;
        docs: number | string;
      }>`with s as (delete from page_sections where page_id = any(${ids}::text[]) returning level, tsv, tokens),
        l as (delete from page_links where source_id = any(${ids}::text[])),
        k as (delete from page_keys where page_id = any(${ids}::text[])),
        t as (delete from page_tags where page_id = any(${ids}::text[])),
        j as (${embedJobsInsert(ws, jobs)}),
        -- Links that reached a deleted page by id may reach a page created later at its name
        -- (the pages' own links are deleted above: one statement may not change a row twice).
        g as (update page_links set target_id = null where workspace_id = ${ws} and target_id = any(${gone}::text[]) and source_id <> all(${ids}::text[]))
        select coalesce(s.level, 3) as level, x.lexeme, count(*)::int8 as docs
        from s cross join unnest(tsvector_to_array(s.tsv) || '{""}'::text[]) as x(lexeme) group by 1, 2
        union all
        select coalesce(s.level, 3), ' ', sum(s.tokens)::int8 from s group by 1`,
    );
    for (const row of r.rows) {
      removed.levels.push(row.level);
      removed.lexemes.push(row.lexeme);
      removed.docs.push(-Number(row.docs));
    }
  }
  return writeIndexPg(db, ws, next, removed, carried, wanted);
}

/** A live page holding a name (page_keys) a link asks for. */
interface NamedPage {
  key: string;
  id: string;
  path: string;
}

/** Lexeme counts by level, as parallel arrays (one parameter each on PostgreSQL). */
interface TermCounts {
  levels: number[];
  lexemes: string[];
  docs: number[];
}

/**
 * A section's reader level as a rank (page_sections.level): the higher of its page's
 * sensitivity and its block's; an unknown level counts as secret, as search judges it.
 */
export function sectionLevel(sensitivity: string, blockLevel: string | null): number {
  const page = isLevel(sensitivity) ? rank(sensitivity) : rank('secret');
  const block = blockLevel === null ? 0 : isLevel(blockLevel) ? rank(blockLevel) : rank('secret');
  return Math.max(page, block);
}

/**
 * PostgreSQL: inserts the pages' sections, tags and names (one statement, whatever their
 * number: each column is one array parameter), points links written before these pages existed
 * (or before they had these names) at them, and moves the workspace's word statistics by
 * what the sections add and what `removed` took away, netted per lexeme and level: rewriting a
 * page changes only the counts of the words that came or went. Every section also counts under
 * the lexeme '' (keyword-plan.ts DocCounts): the sections per level; and its words (`tokens`,
 * migration 025) under ' ': their sum per level. The changes are appended to
 * `term_stats_pending` (migration 029), which a background round folds into `term_stats`
 * (term-stats-fold.ts): no upsert, no row lock while the workspace's writers wait.
 */
async function writeIndexPg(
  db: Exec,
  ws: string,
  next: IndexRows,
  removed: TermCounts,
  carried: Carried,
  wanted: readonly string[],
  jobs: readonly EmbedJob[] = [],
): Promise<NamedPage[] | undefined> {
  const { sections, tags, keys } = next;
  if (sections.length === 0 && removed.lexemes.length === 0 && keys.length === 0 && jobs.length === 0) return undefined;
  const col = <K extends keyof Insertable<DB['page_sections']>>(k: K) => sections.map((r) => r[k]);
  const r = await carried.with(
    db,
    sql<NamedPage>`with j as (${embedJobsInsert(ws, jobs)}),
    ins as (
      insert into page_sections (workspace_id, page_id, ord, title, heading, heading_level, text, block_level, level, archived, tokens)
      select ${ws}, * from unnest(${col('page_id')}::text[], ${col('ord')}::int[], ${col('title')}::text[], ${col('heading')}::text[],
        ${col('heading_level')}::int[], ${col('text')}::text[], ${col('block_level')}::text[], ${col('level')}::int[], ${col('archived')}::int[],
        ${col('tokens')}::int[])
      returning level, tsv, tokens),
    tg as (insert into page_tags (workspace_id, page_id, tag) select ${ws}, * from unnest(${tags.map((t) => t.page_id)}::text[], ${tags.map((t) => t.tag)}::text[])),
    ky as (insert into page_keys (workspace_id, key, page_id) select ${ws}, * from unnest(${keys.map((k) => k.key)}::text[], ${keys.map((k) => k.page_id)}::text[])),
    -- The names are known here: this statement cannot read the page_keys rows it inserts. The
    -- links are looked up by workspace and name (page_links_key), not joined to the names: a join
    -- planned from statistics that lag a load walked the workspace's links in name order.
    lk as (update page_links l set target_id = (
        select min(u.page_id) from unnest(${keys.map((k) => k.key)}::text[], ${keys.map((k) => k.page_id)}::text[]) as u(key, page_id)
        where u.key = l.target_key)
      where l.workspace_id = ${ws} and l.target_key = any(${keys.map((k) => k.key)}::text[]) and l.target_id is null),
    delta as (
      select level, lexeme, sum(docs)::int8 as docs from (
        select ins.level, x.lexeme, 1::int8 as docs from ins cross join unnest(tsvector_to_array(ins.tsv) || '{""}'::text[]) as x(lexeme)
        union all
        select ins.level, ' ', ins.tokens::int8 from ins
        union all
        select * from unnest(${removed.levels}::int[], ${removed.lexemes}::text[], ${removed.docs}::int8[])
      ) d group by 1, 2 having sum(docs) <> 0),
    ts as (insert into term_stats_pending (workspace_id, lexeme, level, docs) select ${ws}, lexeme, level, docs from delta),
    -- The pages the links name (pagesByName's shape: the names first, then their pages by id).
    k as materialized (select key, page_id from page_keys where workspace_id = ${ws} and key = any(${wanted}::text[]))
    select k.key, p.id, p.path from k join pages p on p.id = k.page_id where p.deleted_at is null`,
  );
  return r.rows;
}

/** Writes carried into the index's first statement (IndexOptions.carried), each run exactly once. */
class Carried {
  private rest: readonly CompiledQuery[];
  constructor(writes: readonly CompiledQuery[] = []) {
    this.rest = writes;
  }
  private take(): readonly CompiledQuery[] {
    const out = this.rest;
    this.rest = [];
    return out;
  }
  /** Runs `statement` with the writes not yet run in front of it. */
  with<R>(db: Exec, statement: RawBuilder<R>): Promise<QueryResult<R>> {
    return executeCarrying(db, this.take(), statement.compile(db));
  }
  /** Runs the writes not yet run (the index had no statement to send them with). */
  async runRest(db: Exec): Promise<void> {
    for (const w of this.take()) await db.executeQuery(w);
  }
}

/** indexPages for pages of any workspaces: one call per workspace (re-indexing batches). */
export async function indexPagesOfAnyWorkspace(db: Exec, rows: readonly PagesTable[]): Promise<void> {
  const byWorkspace = new Map<string, PagesTable[]>();
  for (const r of rows) byWorkspace.set(r.workspace_id, [...(byWorkspace.get(r.workspace_id) ?? []), r]);
  for (const group of byWorkspace.values()) await indexPages(db, group);
}

/**
 * Each link with the lowest reader level that sees it: null when it is outside every block
 * above public, else the level of the blocks it sits in. A link inside a `::: secret` block
 * must not make its source a backlink for readers who cannot see the block.
 */
export function linkLevels<L extends { target: string }>(body: string, links: L[]): (L & { blockLevel: Level | null })[] {
  if (links.length === 0 || maxBlockLevel(body) === null) return links.map((l) => ({ ...l, blockLevel: null }));
  const levelOf = new Map<string, Level | null>();
  for (const level of LEVELS) {
    for (const l of extractLinks(redactBlocks(body, visibleUnder(level)))) {
      if (!levelOf.has(l.target)) levelOf.set(l.target, level === 'public' ? null : level);
    }
  }
  // A link the redacted bodies never show (it straddles a block edge) counts as the highest level.
  return links.map((l) => ({ ...l, blockLevel: levelOf.has(l.target) ? levelOf.get(l.target)! : 'secret' }));
}

/**
 * Indexes every live page at once, in the caller's hands (tests and operators). It empties the
 * SQLite keyword index first, so search finds nothing until it ends: a running service re-indexes
 * with the background job instead (reindex-job.ts, requested by a `maintenance_jobs` row).
 */
export async function reindexAll(db: Kysely<DB>): Promise<number> {
  if (isSqlite(db)) await clearKeywordIndexes(db);
  const ids = await db.selectFrom('pages').select('id').where('deleted_at', 'is', null).orderBy('id').execute();
  for (const { id } of ids) {
    const row = await db.selectFrom('pages').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    await indexPage(db, row);
  }
  return ids.length;
}
