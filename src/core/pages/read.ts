import { createTwoFilesPatch } from 'diff';
import { sql } from 'kysely';
import { extractSections, redactDocument } from '../../markdown/index.js';
import { readViewKey } from '../../policy/access.js';
import { blockVisibility, canDiff, canReadInFull, canReadPage } from '../../policy/pages.js';
import type { Principal } from '../../policy/principal.js';
import { findReadablePage, isPageId, readableOrNotFound } from '../../retrieval/lookup.js';
import { suggestPagePath } from '../../retrieval/suggest.js';
import { ObjectStore } from '../../store/git/object-store.js';
import { resolveCommit } from '../../store/commits.js';
import { pinnedSnapshot, readCache } from '../../store/read-cache.js';
import type { Executor } from '../../store/db.js';
import type { PagesTable, PageVersionsTable } from '../../store/schema.js';
import type { CoreContext } from '../context.js';
import { forbidden, isServiceError, notFound } from '../errors.js';
import { presentPage, redactedValidator, type PageRecord, type PageRow } from './record.js';

/** The version of a page in force at a commit, or null if the page did not exist then. */
async function versionAt(db: Executor, workspaceId: string, pageId: string, seq: number): Promise<PageVersionsTable | null> {
  const v = await db
    .selectFrom('page_versions')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('page_id', '=', pageId)
    .where('commit_seq', '<=', seq)
    .orderBy('commit_seq', 'desc')
    .limit(1)
    .executeTakeFirst();
  return v ?? null;
}

/** A version is judged by its own level as well as today's (DESIGN.md §4). */
function versionVisible(p: Principal, v: PageVersionsTable): boolean {
  return canReadPage(p, { path: v.path, sensitivity: v.sensitivity, blockLevel: v.block_level });
}

async function versionContent(db: Executor, workspaceId: string, v: PageVersionsTable): Promise<string> {
  if (!v.blob_sha) throw notFound('The page was deleted at that commit');
  const blob = await new ObjectStore(db, workspaceId).getBlob(v.blob_sha);
  if (!blob) throw notFound('That version is missing from the object store', 'object_missing');
  return blob.toString('utf8');
}

export interface ReadOptions {
  at?: string | undefined;
  section?: string | undefined;
  /**
   * The live page at the id `ref`, read in the statement that checked the caller's key (null:
   * none); only for a read of now. PostgreSQL saves a round trip per read (auth/resolve.ts).
   */
  prefetched?: PagesTable | null | undefined;
}

function deepFreeze<T>(v: T): T {
  if (typeof v === 'object' && v !== null && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

const keptFrom = new WeakMap<PageRecord, PageRecord>();

/**
 * The kept, frozen record a read of now was copied from (the same in every field but
 * last_touched_at, and the same object for every read served by it): a face may keep what it
 * derives from it, such as its JSON, for as long as the object lives.
 */
export function keptRecord(record: PageRecord): Readonly<PageRecord> | undefined {
  return keptFrom.get(record);
}

/**
 * Rendered reads of now kept between commits, per store: at most 2,000, and about 32 MiB (a
 * record holds its text twice, content and body, and a face may keep its JSON beside it).
 */
const PAGE_READS_KEPT = {
  entries: 2_000,
  weight: 32 * 1024 * 1024,
  weigh: (r: unknown) => 4 * ((r as PageRecord).content.length + (r as PageRecord).body.length) + 2_048,
};

/** Reads a page redacted to the caller's ceiling, now or at a commit; counts as a read. */
export async function readPage(ctx: CoreContext, p: Principal, ref: string, opts: ReadOptions = {}): Promise<PageRecord> {
  const db = ctx.store.db;
  const now = new Date().toISOString();
  if (!opts.at) {
    const load = async (): Promise<PageRecord> => {
      const row =
        opts.prefetched !== undefined && isPageId(ref)
          ? readableOrNotFound(p, ref, opts.prefetched)
          : await findReadablePage(db, p, ref).catch((e: unknown) => withSuggestion(db, p, ref, e));
      return deepFreeze(presentSection(p, { ...row, last_touched_at: now }, opts.section));
    };
    // The same read by the same view of the workspace, with nothing committed since, renders
    // the same record (read-cache.ts); only the time of this read differs. Kept records are
    // frozen: a caller changing one would change every later answer.
    const kept =
      opts.prefetched === undefined
        ? await readCache<PageRecord>(ctx.store, 'page-reads', PAGE_READS_KEPT).through(
            JSON.stringify([readViewKey(p), ref, opts.section ?? null]),
            load,
            await pinnedSnapshot(ctx.store, p),
          )
        : await load();
    ctx.touches.touch(kept.id, now);
    const record = { ...kept, last_touched_at: now };
    keptFrom.set(record, kept);
    return record;
  }
  const row = await findReadablePage(db, p, ref, { includeDeleted: true }).catch((e: unknown) => withSuggestion(db, p, ref, e));
  const commit = await resolveCommit(db, p.workspaceId, opts.at);
  const v = await versionAt(db, p.workspaceId, row.id, commit.seq);
  if (!v || !v.blob_sha || !versionVisible(p, v)) throw notFound(`Page ${ref} did not exist at ${opts.at}`);
  const content = await versionContent(db, p.workspaceId, v);
  const first = await db
    .selectFrom('page_versions')
    .select('created_at')
    .where('workspace_id', '=', p.workspaceId)
    .where('page_id', '=', row.id)
    .orderBy('commit_seq')
    .limit(1)
    .executeTakeFirstOrThrow();
  ctx.touches.touch(row.id, now);
  const path = v.path;
  return presentSection(
    p,
    {
      id: row.id,
      path,
      space: path.split('/')[0]!,
      cluster_path: path.split('/').slice(0, -1).join('/'),
      content,
      content_hash: v.blob_sha,
      commit_sha: v.commit_sha,
      sensitivity: v.sensitivity,
      block_level: v.block_level,
      created_at: first.created_at,
      updated_at: v.created_at,
      last_touched_at: now,
      created_by: row.created_by,
      updated_by: v.principal_id,
    },
    opts.section,
  );
}

/**
 * A page not found by path: the same 404, with the path of a page the caller can read that it
 * likely meant (`.md` added, or a few letters off). Only pages the caller sees are suggested.
 */
export async function withSuggestion(db: Executor, p: Principal, ref: string, e: unknown): Promise<never> {
  if (!(isServiceError(e) && e.code === 'not_found') || isPageId(ref)) throw e;
  const guess = await suggestPagePath(db, p, ref);
  if (guess === null) throw e;
  throw notFound(`${e.message}; did you mean ${guess}?`);
}

/** Headings listed at most when a section is not found. */
const HEADINGS_SHOWN = 30;

/**
 * The page, or one section of it. A section that is not there answers 404 `section_not_found`
 * listing the headings that are, from the text the caller sees (a heading inside a redacted
 * block is not listed).
 */
function presentSection(p: Principal, row: PageRow, section: string | undefined): PageRecord {
  try {
    return presentPage(p, row, { section });
  } catch (e) {
    if (!(isServiceError(e) && e.code === 'section_not_found')) throw e;
    const heads = extractSections(presentPage(p, row).body)
      .map((s) => s.heading)
      .filter((h) => h !== '');
    const shown = [...new Set(heads)].slice(0, HEADINGS_SHOWN);
    const list =
      shown.length === 0 ? 'the page has no headings' : `headings: ${shown.map((h) => `"${h}"`).join(', ')}${heads.length > shown.length ? ', …' : ''}`;
    throw notFound(`${e.message}; ${list}`, 'section_not_found');
  }
}

export interface HistoryEntry {
  commit_sha: string;
  action: string;
  path: string;
  content_hash: string | null;
  message: string;
  principal_id: string;
  created_at: string;
}

/** Version rows read per round while paging history past versions the caller cannot see. */
const HISTORY_BATCH = 200;

/**
 * Versions of a page, newest first; versions above the caller's ceiling are left out, and
 * `next_before` is always the commit of the last version returned (a visible one), so the
 * commit ids of hidden versions never reach the caller. Hidden versions are skipped in rounds
 * until `limit` visible ones (and one more, to know a next page exists) are found.
 */
export async function pageHistory(
  ctx: CoreContext,
  p: Principal,
  ref: string,
  opts: { limit: number; before?: string | undefined },
): Promise<{ id: string; versions: HistoryEntry[]; next_before: string | null }> {
  const db = ctx.store.db;
  const row = await findReadablePage(db, p, ref, { includeDeleted: true });
  let beforeSeq = opts.before ? (await resolveCommit(db, p.workspaceId, opts.before)).seq : null;
  const visible: PageVersionsTable[] = [];
  for (;;) {
    let q = db.selectFrom('page_versions').selectAll().where('workspace_id', '=', p.workspaceId).where('page_id', '=', row.id);
    if (beforeSeq !== null) q = q.where('commit_seq', '<', beforeSeq);
    const batch = await q.orderBy('commit_seq', 'desc').limit(HISTORY_BATCH).execute();
    for (const v of batch) if (versionVisible(p, v)) visible.push(v);
    if (visible.length > opts.limit || batch.length < HISTORY_BATCH) break;
    beforeSeq = batch[batch.length - 1]!.commit_seq;
  }
  const page = visible.slice(0, opts.limit);
  const versions: HistoryEntry[] = [];
  for (const v of page) {
    versions.push({
      commit_sha: v.commit_sha,
      action: v.action,
      path: v.path,
      content_hash: await versionValidator(db, p, v),
      message: v.message,
      principal_id: v.principal_id,
      created_at: v.created_at,
    });
  }
  return { id: row.id, versions, next_before: visible.length > opts.limit ? page[page.length - 1]!.commit_sha : null };
}

/**
 * The content hash a caller is shown for a version: the git blob sha when it reads the version
 * whole, else the validator of its redacted view (never the hash of text it cannot see).
 */
async function versionValidator(db: Executor, p: Principal, v: PageVersionsTable): Promise<string | null> {
  if (!v.blob_sha) return null;
  if (canReadInFull(p, { path: v.path, sensitivity: v.sensitivity, blockLevel: v.block_level })) return v.blob_sha;
  return redactedValidator(redactDocument(await versionContent(db, p.workspaceId, v), blockVisibility(p, v.path)));
}

/** A unified diff between two versions of a page (raw content: secret-level read only). */
export async function pageDiff(
  ctx: CoreContext,
  p: Principal,
  ref: string,
  opts: { from?: string | undefined; to?: string | undefined },
): Promise<{ id: string; from: string | null; to: string; diff: string; from_content: string; to_content: string }> {
  const db = ctx.store.db;
  const row = await findReadablePage(db, p, ref, { includeDeleted: true });
  if (!canDiff(p, row.path)) throw forbidden('A diff shows raw content and needs secret-level read');
  // Both sides must be versions the caller reads whole; a hidden one answers as a version that
  // does not exist, so the diff tells nothing of it.
  const inFull = (v: PageVersionsTable | null) => v !== null && canReadInFull(p, { path: v.path, sensitivity: v.sensitivity, blockLevel: v.block_level });
  // Without `to`, the latest version: the largest seq an INTEGER column holds.
  const toSeq = opts.to ? (await resolveCommit(db, p.workspaceId, opts.to)).seq : 2_147_483_647;
  const to = await versionAt(db, p.workspaceId, row.id, toSeq);
  if (!to || !inFull(to)) throw notFound(`Page ${ref} did not exist at ${opts.to ?? 'the latest commit'}`);
  let from: PageVersionsTable | null;
  if (opts.from) {
    from = await versionAt(db, p.workspaceId, row.id, (await resolveCommit(db, p.workspaceId, opts.from)).seq);
    if (!from || !inFull(from)) throw notFound(`Page ${ref} did not exist at ${opts.from}`);
  } else {
    // The newest version before `to` that the caller reads whole (hidden ones are skipped).
    from = null;
    let seq = to.commit_seq - 1;
    for (;;) {
      const v = await versionAt(db, p.workspaceId, row.id, seq);
      if (!v || inFull(v)) {
        from = v;
        break;
      }
      seq = v.commit_seq - 1;
    }
  }
  const fromContent = from?.blob_sha ? await versionContent(db, p.workspaceId, from) : '';
  const toContent = to.blob_sha ? await versionContent(db, p.workspaceId, to) : '';
  const diff = createTwoFilesPatch(
    from ? `a/${from.path}` : '/dev/null',
    to.blob_sha ? `b/${to.path}` : '/dev/null',
    fromContent,
    toContent,
    from?.commit_sha ?? '',
    to.commit_sha,
  );
  return { id: row.id, from: from?.commit_sha ?? null, to: to.commit_sha, diff, from_content: fromContent, to_content: toContent };
}

/**
 * Deployment-wide figures for the liveness probe (`GET /healthz`): live pages, and the time of the
 * latest page write. The keyword index is written in each page write's own transaction, deletes
 * included: the latest page write is the latest indexed write.
 */
export async function pageTotals(ctx: CoreContext): Promise<{ nodes: number; indexed_at: string | null }> {
  const row = await ctx.store.db
    .selectFrom('pages')
    .select(sql<number>`count(*)`.as('n'))
    .where('deleted_at', 'is', null)
    .executeTakeFirstOrThrow();
  const idx = await ctx.store.db
    .selectFrom('pages')
    .select(sql<string | null>`max(updated_at)`.as('at'))
    .executeTakeFirstOrThrow();
  return { nodes: Number(row.n), indexed_at: idx.at };
}
