import { sql, type Insertable, type Kysely, type Transaction } from 'kysely';
import { extractLinks, maxBlockLevel, parseDocument, redactBlocks } from '../markdown/index.js';
import { visibleUnder } from '../policy/access.js';
import { LEVELS, type Level } from '../policy/sensitivity.js';
import type { DB, PagesTable } from '../store/schema.js';
import { afterCommitIfAny } from '../store/tx.js';
import { chunkBody, type Chunk } from './chunking.js';
import { wakeEmbedWorkers } from './embed-worker.js';
import { clearKeywordIndexes, ensureKeywordIndex, indexSections, isSqlite, unindexSections } from './keyword-index.js';
import { linkKey, pageKeys, pickTarget } from './links.js';

type Exec = Kysely<DB> | Transaction<DB>;

const BATCH = 200;

/** Inserts a page's index rows into `table`, BATCH at a time (engines bound a statement's parameters). */
async function insertBatched<T extends 'page_sections' | 'page_links' | 'page_tags' | 'page_keys'>(
  db: Exec,
  table: T,
  rows: Insertable<DB[T]>[],
): Promise<void> {
  for (let i = 0; i < rows.length; i += BATCH)
    await db
      .insertInto(table)
      .values(rows.slice(i, i + BATCH))
      .execute();
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
export async function indexPage(db: Exec, row: PagesTable): Promise<void> {
  await indexPages(db, [row]);
}

/**
 * indexPage for many pages of one workspace at once (an import's batch): the same rows, in a
 * few statements per batch instead of a dozen per page. Links between the pages resolve to
 * each other whatever their order. `chunked`: pages' chunks already cut (chunkBody of the
 * page's body), by page id, by a caller that parsed the pages anyway.
 */
export async function indexPages(db: Exec, rows: readonly PagesTable[], chunked?: ReadonlyMap<string, Chunk[]>): Promise<void> {
  const ws = rows[0]?.workspace_id;
  if (ws === undefined) return;
  if (rows.some((r) => r.workspace_id !== ws)) throw new Error('indexPages: pages of one workspace at a time');
  const sqlite = isSqlite(db);
  if (sqlite) await ensureKeywordIndex(db, ws);
  for (const ids of slices(rows.map((r) => r.id))) {
    if (sqlite) {
      await unindexSections(db, ws, ids);
      await db.deleteFrom('page_sections').where('page_id', 'in', ids).execute();
      await db.deleteFrom('page_links').where('source_id', 'in', ids).execute();
      await db.deleteFrom('page_keys').where('page_id', 'in', ids).execute();
      await db.deleteFrom('page_tags').where('page_id', 'in', ids).execute();
    } else {
      // One round trip instead of four: on PostgreSQL each is a wait inside the workspace's lock.
      const list = sql.join(ids);
      await sql`with s as (delete from page_sections where page_id in (${list})),
        l as (delete from page_links where source_id in (${list})),
        k as (delete from page_keys where page_id in (${list}))
        delete from page_tags where page_id in (${list})`.execute(db);
    }
  }
  // Vectors follow through the embedding worker (retrieval/embed-worker.ts): queue the pages.
  for (const batch of slices(rows)) {
    await db
      .insertInto('embed_jobs')
      .values(
        batch.map((row) => ({
          page_id: row.id,
          workspace_id: ws,
          content_hash: row.deleted_at === null ? row.content_hash : 'deleted',
          queued_at: row.updated_at,
          attempts: 0,
          not_before: null,
          last_error: null,
        })),
      )
      .onConflict((oc) =>
        oc.column('page_id').doUpdateSet((eb) => ({
          content_hash: eb.ref('excluded.content_hash'),
          queued_at: eb.ref('excluded.queued_at'),
          attempts: 0,
          not_before: null,
        })),
      )
      .execute();
  }
  afterCommitIfAny(db, wakeEmbedWorkers);
  // Links that reached a deleted page by id may reach a page created later at its name.
  for (const ids of slices(rows.filter((r) => r.deleted_at !== null).map((r) => r.id))) {
    await db.updateTable('page_links').set({ target_id: null }).where('workspace_id', '=', ws).where('target_id', 'in', ids).execute();
  }
  const live = rows.filter((r) => r.deleted_at === null);
  if (live.length === 0) return;

  const parsed = live.map((row) => ({ row, body: parseDocument(row.content).body }));
  await insertBatched(
    db,
    'page_sections',
    parsed.flatMap(({ row, body }) =>
      (chunked?.get(row.id) ?? chunkBody(body)).map((c) => ({
        workspace_id: ws,
        page_id: row.id,
        ord: c.ord,
        title: row.title,
        heading: c.heading,
        heading_level: c.headingLevel,
        text: c.text,
        block_level: c.blockLevel,
      })),
    ),
  );
  if (sqlite) for (const ids of slices(live.map((r) => r.id))) await indexSections(db, ws, ids);

  await insertBatched(
    db,
    'page_tags',
    live.flatMap((row) => [...new Set(JSON.parse(row.tags) as string[])].map((tag) => ({ workspace_id: ws, page_id: row.id, tag }))),
  );

  const keysOf = new Map(live.map((row) => [row.id, pageKeys(row.path, row.title)]));
  await insertBatched(
    db,
    'page_keys',
    live.flatMap((row) => keysOf.get(row.id)!.map((key) => ({ workspace_id: ws, key, page_id: row.id }))),
  );

  const linked = parsed.map(({ row, body }) => ({
    row,
    links: linkLevels(body, JSON.parse(row.links) as { target: string; kind: 'wiki' | 'markdown'; text: string }[]).map((l, ord) => ({
      ...l,
      ord,
      key: linkKey(l, row.cluster_path),
    })),
  }));
  const wanted = [...new Set(linked.flatMap((p) => p.links.map((l) => l.key)).filter((k): k is string => k !== null))];
  const found = new Map<string, { id: string; path: string }[]>();
  for (const keys of slices(wanted)) {
    const hits = await db
      .selectFrom('page_keys')
      .innerJoin('pages', 'pages.id', 'page_keys.page_id')
      .select(['page_keys.key', 'pages.id', 'pages.path'])
      .where('page_keys.workspace_id', '=', ws)
      .where('page_keys.key', 'in', keys)
      .where('pages.deleted_at', 'is', null)
      .execute();
    for (const r of hits) found.set(r.key, [...(found.get(r.key) ?? []), { id: r.id, path: r.path }]);
  }
  await insertBatched(
    db,
    'page_links',
    linked.flatMap(({ row, links }) =>
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
    ),
  );

  // Links written before these pages existed (or before they had these names) now reach them.
  const liveIds = live.map((r) => r.id);
  for (const keys of slices([...new Set([...keysOf.values()].flat())])) {
    await db
      .updateTable('page_links')
      .set((eb) => ({
        target_id: eb
          .selectFrom('page_keys')
          .select('page_keys.page_id')
          .whereRef('page_keys.workspace_id', '=', 'page_links.workspace_id')
          .whereRef('page_keys.key', '=', 'page_links.target_key')
          .where('page_keys.page_id', 'in', liveIds)
          .limit(1),
      }))
      .where('workspace_id', '=', ws)
      .where('target_id', 'is', null)
      .where('target_key', 'in', keys)
      .execute();
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
function linkLevels<L extends { target: string }>(body: string, links: L[]): (L & { blockLevel: Level | null })[] {
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
