import type { CompiledQuery, Transaction } from 'kysely';
import type { PageFacts } from '../../policy/pages.js';
import type { Principal } from '../../policy/principal.js';
import { indexPage } from '../../retrieval/indexer.js';
import type { Insertable } from 'kysely';
import { builtOnce } from '../../store/built-once.js';
import { takeLockedPathCheck } from '../../store/tx.js';
import type { DB, PagesTable, PageVersionsTable } from '../../store/schema.js';
import { auditInserts, type AuditInput } from '../audit.js';
import type { CoreContext } from '../context.js';
import { badRequest, conflict } from '../errors.js';
import { newId } from '../ids.js';
import type { PagePath } from '../paths.js';
import { ensurePlace } from '../spaces.js';
import { deliverWatchEvents } from '../watches.js';
import { commitFiles } from './commit.js';
import type { PageContent } from './content.js';

/** Making a page change durable: the commit, page row, version row and audit entry. */

export type Action = 'create' | 'update' | 'move' | 'archive' | 'restore' | 'delete';

const VERB: Record<Action, string> = {
  create: 'Create',
  update: 'Update',
  move: 'Move',
  archive: 'Archive',
  restore: 'Restore',
  delete: 'Delete',
};

export function facts(path: string, c: { sensitivity: string; blockLevel: string | null }): PageFacts {
  return { path, sensitivity: c.sensitivity, blockLevel: c.blockLevel };
}

export function rowFacts(row: PagesTable): PageFacts {
  return { path: row.path, sensitivity: row.sensitivity, blockLevel: row.block_level };
}

function commitMessage(action: Action, path: string, message: string | undefined): string {
  const m = message?.trim();
  if (m && m.length > 2000) throw badRequest('Commit message is longer than 2000 characters', 'invalid_request');
  return m || `${VERB[action]} ${path}`;
}

/** What changes about one page: shared by commitPage (which makes the commit) and recordPageChange. */
export interface PageChange {
  action: Action;
  existing: PagesTable | null;
  target: PagePath;
  content: PageContent | null;
  /** The author to credit when `p` applies someone else's change (an accepted proposal). */
  credit?: { id: string; name: string } | undefined;
}

/**
 * The one place a page change becomes durable: commit, page row, version row, audit
 * entry and the watchers' inbox events, all in the caller's transaction.
 */
export async function commitPage(
  ctx: CoreContext,
  trx: Transaction<DB>,
  p: Principal,
  args: PageChange & { message: string | undefined },
): Promise<PagesTable> {
  const at = new Date();
  const { action, existing, target, content } = args;
  const author = args.credit ?? p;
  const changes: { path: string; content: string | null }[] = [];
  if (existing && existing.path !== target.path) changes.push({ path: existing.path, content: null });
  changes.push({ path: target.path, content: content ? content.raw : null });
  const message = commitMessage(action, target.path, args.message);
  const commit = await commitFiles(trx, p.workspaceId, author, changes, message, at, p);
  return recordPageChange(ctx, trx, p, { ...args, message, commit, blobSha: commit.blobs.get(target.path) ?? null, at });
}

/**
 * The page side of a change whose commit already exists (made by commitPage, or pushed over
 * git with its own ids): page row, keyword index, version row, audit entry and the watchers'
 * inbox events, in the caller's transaction.
 */
export async function recordPageChange(ctx: CoreContext, trx: Transaction<DB>, p: Principal, args: RecordedChange): Promise<PagesTable> {
  const { action, existing, target, content, commit, at } = args;
  const now = at.toISOString();
  const row = pageRow(p, args);
  const id = row.id;
  // A page already in this folder had its Space and folder rows made (they are never deleted).
  const sameFolder = existing !== null && existing.space === target.space && existing.cluster_path === target.folderPath;
  if (content && !sameFolder) {
    await ensurePlace(trx, p.workspaceId, target.space, target.folderPath, now);
  }
  // Keyword index, links and tags are current when the write is acknowledged (src/retrieval/);
  // the page row itself rides with the index's first statement.
  const write = existing ? updatePageRow.compiled(trx, row) : insertPageRow.compiled(trx, row);
  const links: CompiledQuery[] = [];
  await indexPage(trx, row, { fresh: existing === null, carried: [write], trailing: links });
  // The links, the writer's superseded conflicts, the version row and the audit entry ride with
  // the watchers' lookup (nothing reads them back here).
  const carried = [
    ...links,
    ...(existing ? supersedeStatements(trx, p, [id], commit.sha, now) : []),
    insertVersionRow.compiled(trx, versionRow(p, row, args)),
    ...(await auditInserts(trx, p.workspaceId, [pageAudit(p, row, args)], at)),
  ];
  // Watchers of the page or of a folder above it are told, in this transaction (issue 13).
  await deliverWatchEvents(ctx, trx, p.workspaceId, { action, row, before: existing, actor: p, author: args.credit, at }, carried);
  return row;
}

/**
 * The writer's own open conflict proposals on pages it has now written are answered by the
 * write: they were kept only because an earlier write of theirs clashed (issue 11).
 */
export async function supersedeOwnConflicts(trx: Transaction<DB>, p: Principal, pageIds: readonly string[], commitSha: string, now: string): Promise<void> {
  for (const update of supersedeStatements(trx, p, pageIds, commitSha, now)) await trx.executeQuery(update);
}

/** supersedeOwnConflicts's statements, for the caller to run (store/carried.ts). */
function supersedeStatements(trx: Transaction<DB>, p: Principal, pageIds: readonly string[], commitSha: string, now: string): CompiledQuery[] {
  const reason = `superseded by the proposer's later write (commit ${commitSha})`;
  const out: CompiledQuery[] = [];
  for (let i = 0; i < pageIds.length; i += 500) {
    out.push(supersede.compiled(trx, { workspaceId: p.workspaceId, proposerId: p.id, pageIds: pageIds.slice(i, i + 500), now, reason }));
  }
  return out;
}

// The statements of every page write, built once (store/built-once.ts).
const updatePageRow = builtOnce((db, row: PagesTable) => {
  const { id, ...rest } = row;
  return db.updateTable('pages').set(rest).where('id', '=', id);
});
const insertPageRow = builtOnce((db, row: PagesTable) => db.insertInto('pages').values(row));
const insertVersionRow = builtOnce((db, row: Insertable<PageVersionsTable>) => db.insertInto('page_versions').values(row));
const supersede = builtOnce((db, v: { workspaceId: string; proposerId: string; pageIds: readonly string[]; now: string; reason: string }) =>
  db
    .updateTable('proposals')
    .set({ status: 'superseded', decided_at: v.now, decision_reason: v.reason })
    .where('workspace_id', '=', v.workspaceId)
    .where('page_id', 'in', v.pageIds)
    .where('proposer_id', '=', v.proposerId)
    .where('origin', '=', 'conflict')
    .where('status', '=', 'open'),
);

/** What recordPageChange is told about a change whose commit exists. */
export type RecordedChange = PageChange & {
  message: string;
  commit: { sha: string; seq: number };
  /** The blob of the page's new content (null for a delete). */
  blobSha: string | null;
  at: Date;
};

/** The page row a change leaves. */
export function pageRow(p: Principal, args: RecordedChange): PagesTable {
  const { existing, target, content, commit, at } = args;
  const now = at.toISOString();
  const author = args.credit ?? p;
  return {
    id: existing?.id ?? newId.page(),
    workspace_id: p.workspaceId,
    path: target.path,
    space: target.space,
    cluster_path: target.folderPath,
    title: content?.title ?? existing?.title ?? target.slug,
    content: content?.raw ?? existing?.content ?? '',
    content_hash: content ? args.blobSha! : existing!.content_hash,
    commit_sha: commit.sha,
    sensitivity: content?.sensitivity ?? existing?.sensitivity ?? 'internal',
    block_level: content ? content.blockLevel : (existing?.block_level ?? null),
    state: content?.state ?? existing?.state ?? 'active',
    frontmatter: JSON.stringify(content?.frontmatter ?? {}),
    tags: JSON.stringify(content?.tags ?? []),
    links: JSON.stringify(content?.links ?? []),
    created_at: existing?.created_at ?? now,
    updated_at: now,
    last_touched_at: existing?.last_touched_at ?? null,
    created_by: existing?.created_by ?? author.id,
    updated_by: author.id,
    deleted_at: content ? null : now,
  };
}

/** The page_versions row of a change. */
export function versionRow(p: Principal, row: PagesTable, args: RecordedChange): Insertable<PageVersionsTable> {
  return {
    workspace_id: p.workspaceId,
    page_id: row.id,
    commit_seq: args.commit.seq,
    commit_sha: args.commit.sha,
    path: args.target.path,
    blob_sha: args.content ? row.content_hash : null,
    action: args.action,
    sensitivity: row.sensitivity,
    block_level: row.block_level,
    principal_id: (args.credit ?? p).id,
    message: args.message,
    created_at: args.at.toISOString(),
  };
}

/** The audit entry of a change. */
export function pageAudit(p: Principal, row: PagesTable, args: RecordedChange): AuditInput {
  const { existing, target, commit } = args;
  return {
    principalId: p.id,
    action: `page.${args.action}`,
    pageId: row.id,
    detail: {
      path: target.path,
      commit: commit.sha,
      ...(existing && existing.path !== target.path ? { from: existing.path } : {}),
      ...(args.credit ? { author: args.credit.id } : {}),
    },
  };
}

export async function assertPathFree(trx: Transaction<DB>, workspaceId: string, path: string): Promise<void> {
  // Asked with the lock when the transaction was opened for this path (store/tx.ts).
  const atLock = takeLockedPathCheck(trx, workspaceId, path);
  if (atLock !== undefined) {
    if (atLock) throw conflict(`A page already exists at ${path}`, 'already_exists');
    return;
  }
  const taken = await trx
    .selectFrom('pages')
    .select('id')
    .where('workspace_id', '=', workspaceId)
    .where('path', '=', path)
    .where('deleted_at', 'is', null)
    .executeTakeFirst();
  if (taken) throw conflict(`A page already exists at ${path}`, 'already_exists');
}

/** Resolves either creation form to a path and raw markdown. */
