/**
 * Database bytes added per commit with 10,000 pages in one folder: checkpointed SQLite file
 * growth over N single-page updates, and the git_objects bytes each commit adds, next to what a
 * full copy of the folder's tree would cost.
 */
import fs from 'node:fs';
import { deflateSync } from 'node:zlib';
import { sql } from 'kysely';
import { MAIN_REF } from '../src/core/pages/commit.js';
import { encodeTree } from '../src/store/git/codec.js';
import { ObjectStore } from '../src/store/git/object-store.js';
import { MAX_DELTA_DEPTH, REBASE_MAX_RATIO } from '../src/store/git/tree-deltas.js';
import { coreUpdate, FOLDER, randomPage, type Fixture } from './writes.js';
import { log, percentile, round } from './util.js';

interface FileSize {
  file_bytes: number;
  page_count_x_page_size_bytes: number;
  freelist_pages: number;
}

async function pragmaNumber(fx: Fixture, pragma: string): Promise<number> {
  const r = await sql.raw(`PRAGMA ${pragma}`).execute(fx.ctx.store.db);
  const row = r.rows[0] as Record<string, unknown> | undefined;
  return Number(row ? Object.values(row)[0] : Number.NaN);
}

/** PRAGMA wal_checkpoint(TRUNCATE) through the store's connection; fails if the checkpoint was blocked. */
export async function checkpoint(fx: Fixture): Promise<void> {
  const r = await sql<{ busy: number; log: number; checkpointed: number }>`PRAGMA wal_checkpoint(TRUNCATE)`.execute(fx.ctx.store.db);
  const row = r.rows[0];
  if (!row || Number(row.busy) !== 0) throw new Error(`wal_checkpoint(TRUNCATE) was blocked: ${JSON.stringify(row)}`);
  const wal = `${fx.dbFile}-wal`;
  if (fs.existsSync(wal) && fs.statSync(wal).size !== 0) throw new Error('WAL not empty after TRUNCATE checkpoint');
}

export async function fileSize(fx: Fixture): Promise<FileSize> {
  await checkpoint(fx);
  const pageCount = await pragmaNumber(fx, 'page_count');
  const pageSize = await pragmaNumber(fx, 'page_size');
  return {
    file_bytes: fs.statSync(fx.dbFile).size,
    page_count_x_page_size_bytes: pageCount * pageSize,
    freelist_pages: await pragmaNumber(fx, 'freelist_count'),
  };
}

/** Bytes per table and index (dbstat), to show where growth goes. */
async function tableBytes(fx: Fixture): Promise<Map<string, number>> {
  const r = await sql<{ name: string; bytes: number }>`select name, sum(pgsize) as bytes from dbstat group by name`.execute(fx.ctx.store.db);
  return new Map(r.rows.map((x) => [x.name, Number(x.bytes)]));
}

async function maxObjectRowid(fx: Fixture): Promise<number> {
  const r = await sql<{ m: number | null }>`select max(rowid) as m from git_objects`.execute(fx.ctx.store.db);
  return Number(r.rows[0]?.m ?? 0);
}

async function objectsSince(fx: Fixture, rowid: number): Promise<{ bytes: number; rows: number; maxRowid: number }> {
  const r = await sql<{ bytes: number | null; n: number; m: number | null }>`
    select sum(length(data)) as bytes, count(*) as n, max(rowid) as m
    from git_objects where rowid > ${rowid} and workspace_id = ${fx.workspaceId}`.execute(fx.ctx.store.db);
  const row = r.rows[0];
  return { bytes: Number(row?.bytes ?? 0), rows: Number(row?.n ?? 0), maxRowid: Math.max(rowid, Number(row?.m ?? 0)) };
}

/** The folder's current tree, encoded as git would store a full copy of it. */
async function fullFolderTree(fx: Fixture): Promise<{ entries: number; raw_bytes: number; deflated_bytes: number }> {
  const objects = new ObjectStore(fx.ctx.store.db, fx.workspaceId);
  const head = await objects.getRef(MAIN_REF);
  if (!head) throw new Error('no head commit');
  const commit = await objects.getCommit(head);
  let treeSha = commit!.tree;
  for (const seg of FOLDER.split('/')) {
    const entries = await objects.getTree(treeSha);
    const e = entries?.find((x) => x.name === seg && x.mode === '40000');
    if (!e) throw new Error(`folder ${FOLDER} not found in the head tree`);
    treeSha = e.sha;
  }
  const entries = (await objects.getTree(treeSha))!;
  const raw = encodeTree(entries);
  return {
    entries: entries.length,
    raw_bytes: raw.length,
    deflated_bytes: deflateSync(raw).length,
  };
}

function diffTables(before: Map<string, number>, after: Map<string, number>, n: number): Record<string, number> {
  const out: Record<string, number> = {};
  const names = new Set([...before.keys(), ...after.keys()]);
  const rows = [...names].map((k) => [k, (after.get(k) ?? 0) - (before.get(k) ?? 0)] as const).filter(([, d]) => d !== 0);
  rows.sort((a, b) => b[1] - a[1]);
  for (const [k, d] of rows) out[k] = round(d / n, 1);
  return out;
}

/** Measures growth over the seeding (already done) and over `commits` single-page updates. */
export async function benchBytesPerCommit(
  fx: Fixture,
  opts: { commits: number; maxSeconds: number; beforeSeed: SeedSnapshot },
): Promise<Record<string, unknown>> {
  const db = fx.ctx.store.db;
  const sizeBefore = await fileSize(fx);
  const tablesBefore = await tableBytes(fx);
  const full = await fullFolderTree(fx);
  const startRowid = await maxObjectRowid(fx);
  const seededPages = fx.pages.length;

  log(`bytes: ${opts.commits} single-page updates in ${FOLDER}/ (${full.entries} entries; a full tree copy is ${full.deflated_bytes} bytes deflated)`);
  const perCommitObjectBytes: number[] = [];
  const changeRaw: number[] = [];
  const changeDeflated: number[] = [];
  let rowid = startRowid;
  const stopAt = Date.now() + opts.maxSeconds * 1000;
  for (let i = 0; i < opts.commits && Date.now() < stopAt; i++) {
    const { content } = await coreUpdate(fx, randomPage(fx));
    changeRaw.push(Buffer.byteLength(content));
    changeDeflated.push(deflateSync(Buffer.from(content)).length);
    const added = await objectsSince(fx, rowid);
    perCommitObjectBytes.push(added.bytes);
    rowid = added.maxRowid;
  }
  const n = perCommitObjectBytes.length;
  const sizeAfter = await fileSize(fx);
  const tablesAfter = await tableBytes(fx);

  const byKind = await sql<{ type: string; delta: number; rows: number; bytes: number }>`
    select type, (base_sha is not null) as delta, count(*) as rows, sum(length(data)) as bytes
    from git_objects where rowid > ${startRowid} and workspace_id = ${fx.workspaceId}
    group by type, delta order by type, delta`.execute(db);
  const bigFull = await sql<{ n: number }>`
    select count(*) as n from git_objects
    where rowid > ${startRowid} and workspace_id = ${fx.workspaceId} and type = 'tree' and base_sha is null and length(data) > ${Math.floor(full.deflated_bytes / 2)}`.execute(
    db,
  );
  const sorted = [...perCommitObjectBytes].sort((a, b) => a - b);
  const objectBytesTotal = sorted.reduce((a, b) => a + b, 0);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const fileGrowthPerCommit = (sizeAfter.file_bytes - sizeBefore.file_bytes) / n;
  const pagesGrowthPerCommit = (sizeAfter.page_count_x_page_size_bytes - sizeBefore.page_count_x_page_size_bytes) / n;

  // Over the seeding: 10,000 creates into the growing folder (includes periodic full tree copies).
  const seedObjects = await sql<{ bytes: number | null }>`
    select sum(length(data)) as bytes from git_objects
    where rowid > ${opts.beforeSeed.rowid} and rowid <= ${startRowid} and workspace_id = ${fx.workspaceId}`.execute(db);

  return {
    pages_in_folder: full.entries,
    update_commits_measured: n,
    sqlite_file_bytes_before: sizeBefore.file_bytes,
    sqlite_file_bytes_after: sizeAfter.file_bytes,
    sqlite_file_growth_bytes_per_commit: round(fileGrowthPerCommit, 1),
    page_count_x_page_size_growth_bytes_per_commit: round(pagesGrowthPerCommit, 1),
    freelist_pages_before: sizeBefore.freelist_pages,
    freelist_pages_after: sizeAfter.freelist_pages,
    git_objects_bytes_per_commit_mean: round(objectBytesTotal / n, 1),
    git_objects_bytes_per_commit_p50: percentile(sorted, 50),
    git_objects_bytes_per_commit_p99: percentile(sorted, 99),
    git_objects_bytes_per_commit_max: sorted[sorted.length - 1] ?? 0,
    git_objects_added_by_kind: byKind.rows.map((r) => ({
      type: r.type,
      stored_as: Number(r.delta) ? 'delta' : 'full',
      rows: Number(r.rows),
      bytes_total: Number(r.bytes),
      bytes_per_commit: round(Number(r.bytes) / n, 1),
    })),
    full_folder_tree_copies_written: Number(bigFull.rows[0]?.n ?? 0),
    growth_by_table_or_index_bytes_per_commit: diffTables(tablesBefore, tablesAfter, n),
    change_page_raw_bytes_mean: round(mean(changeRaw), 1),
    change_blob_deflated_bytes_mean: round(mean(changeDeflated), 1),
    full_folder_tree_entries: full.entries,
    full_folder_tree_raw_bytes: full.raw_bytes,
    full_folder_tree_deflated_bytes: full.deflated_bytes,
    full_tree_deflated_bytes_over_sqlite_growth_per_commit: round(full.deflated_bytes / fileGrowthPerCommit, 1),
    sqlite_growth_per_commit_over_change_blob_deflated: round(fileGrowthPerCommit / mean(changeDeflated), 2),
    delta_settings: { max_delta_depth: MAX_DELTA_DEPTH, rebase_max_ratio: REBASE_MAX_RATIO },
    during_seeding: {
      create_commits: seededPages,
      sqlite_file_growth_bytes_per_commit: round((sizeBefore.file_bytes - opts.beforeSeed.size.file_bytes) / seededPages, 1),
      git_objects_bytes_per_commit: round(Number(seedObjects.rows[0]?.bytes ?? 0) / seededPages, 1),
    },
  };
}

export interface SeedSnapshot {
  size: FileSize;
  rowid: number;
}

/** Sizes right before seeding, so the seeding's own growth per commit can be reported. */
export async function snapshotBeforeSeed(fx: Fixture): Promise<SeedSnapshot> {
  return { size: await fileSize(fx), rowid: await maxObjectRowid(fx) };
}
