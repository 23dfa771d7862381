import { serializeDocument, parseDocument, setFrontmatterFields } from '../../markdown/index.js';
import { decideDelete, decideMove, decideWrite, enforce, widensAudience, type PageFacts } from '../../policy/pages.js';
import type { Principal } from '../../policy/principal.js';
import type { Transaction } from 'kysely';
import type { DB, PagesTable } from '../../store/schema.js';
import { inTransaction } from '../../store/tx.js';
import { appendAudit } from '../audit.js';
import type { CoreContext } from '../context.js';
import { badRequest, conflict } from '../errors.js';
import { newId } from '../ids.js';
import { parsePagePath, slugify, type PagePath } from '../paths.js';
import { ensureFolders, ensureSpace } from '../spaces.js';
import { commitFiles } from './commit.js';
import { analyzeContent, type ArchiveReason, type PageContent } from './content.js';
import { findReadablePage } from './lookup.js';
import { presentPage, type PageRecord } from './record.js';

export type NewPageInput =
  | { path: string; content: string }
  | { space: string; cluster_path?: string | undefined; title: string; body: string; frontmatter?: Record<string, unknown> | undefined };

/** What the caller last read, for optimistic concurrency: the If-Match header and/or base_sha. */
export interface Precondition {
  ifMatch?: string | undefined;
  baseSha?: string | undefined;
}

export interface WriteResult {
  record: PageRecord;
  /** False when the write changed nothing (no commit was made). */
  changed: boolean;
}

type Action = 'create' | 'update' | 'move' | 'archive' | 'restore' | 'delete';

const VERB: Record<Action, string> = {
  create: 'Create',
  update: 'Update',
  move: 'Move',
  archive: 'Archive',
  restore: 'Restore',
  delete: 'Delete',
};

function facts(path: string, c: { sensitivity: string; blockLevel: string | null }): PageFacts {
  return { path, sensitivity: c.sensitivity, blockLevel: c.blockLevel };
}

function rowFacts(row: PagesTable): PageFacts {
  return { path: row.path, sensitivity: row.sensitivity, blockLevel: row.block_level };
}

function commitMessage(action: Action, path: string, message: string | undefined): string {
  const m = message?.trim();
  if (m && m.length > 2000) throw badRequest('Commit message is longer than 2000 characters', 'invalid_request');
  return m || `${VERB[action]} ${path}`;
}

/**
 * The one place a page change becomes durable: commit, page row, version row and audit
 * entry, all in the caller's transaction.
 */
async function commitPage(
  trx: Transaction<DB>,
  p: Principal,
  args: {
    action: Action;
    existing: PagesTable | null;
    target: PagePath;
    content: PageContent | null;
    message: string | undefined;
  },
): Promise<PagesTable> {
  const at = new Date();
  const now = at.toISOString();
  const { action, existing, target, content } = args;
  const changes: { path: string; content: string | null }[] = [];
  if (existing && existing.path !== target.path) changes.push({ path: existing.path, content: null });
  changes.push({ path: target.path, content: content ? content.raw : null });
  const message = commitMessage(action, target.path, args.message);
  const commit = await commitFiles(trx, p.workspaceId, p, changes, message, at);

  const id = existing?.id ?? newId.page();
  const row: PagesTable = {
    id,
    workspace_id: p.workspaceId,
    path: target.path,
    space: target.space,
    cluster_path: target.clusterPath,
    title: content?.title ?? existing?.title ?? target.slug,
    content: content?.raw ?? existing?.content ?? '',
    content_hash: content ? commit.blobs.get(target.path)! : existing!.content_hash,
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
    created_by: existing?.created_by ?? p.id,
    updated_by: p.id,
    deleted_at: content ? null : now,
  };
  if (content) {
    await ensureSpace(trx, p.workspaceId, target.space, now);
    await ensureFolders(trx, p.workspaceId, target.clusterPath, now);
  }
  if (existing) {
    const { id: _id, ...rest } = row;
    await trx.updateTable('pages').set(rest).where('id', '=', id).execute();
  } else {
    await trx.insertInto('pages').values(row).execute();
  }
  await trx
    .insertInto('page_versions')
    .values({
      workspace_id: p.workspaceId,
      page_id: id,
      commit_seq: commit.seq,
      commit_sha: commit.sha,
      path: target.path,
      blob_sha: content ? row.content_hash : null,
      action,
      sensitivity: row.sensitivity,
      block_level: row.block_level,
      principal_id: p.id,
      message,
      created_at: now,
    })
    .execute();
  await appendAudit(
    trx,
    p.workspaceId,
    {
      principalId: p.id,
      action: `page.${action}`,
      nodeId: id,
      detail: { path: target.path, commit: commit.sha, ...(existing && existing.path !== target.path ? { from: existing.path } : {}) },
    },
    at,
  );
  return row;
}

async function assertPathFree(trx: Transaction<DB>, workspaceId: string, path: string): Promise<void> {
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
function resolveNewPage(input: NewPageInput): { target: PagePath; raw: string } {
  if ('content' in input) return { target: parsePagePath(input.path), raw: input.content };
  const cluster = input.cluster_path
    ? input.cluster_path === input.space || input.cluster_path.startsWith(`${input.space}/`)
      ? input.cluster_path
      : `${input.space}/${input.cluster_path}`
    : input.space;
  const target = parsePagePath(`${cluster}/${slugify(input.title)}.md`);
  const fm = { ...(input.frontmatter ?? {}), title: input.title };
  return { target, raw: serializeDocument(fm, input.body.endsWith('\n') || input.body === '' ? input.body : `${input.body}\n`) };
}

export async function createPage(ctx: CoreContext, p: Principal, input: NewPageInput, message?: string): Promise<WriteResult> {
  const { target, raw } = resolveNewPage(input);
  const content = analyzeContent(raw, target.slug);
  enforce(decideWrite(p, null, facts(target.path, content)));
  const row = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    await assertPathFree(trx, p.workspaceId, target.path);
    return commitPage(trx, p, { action: 'create', existing: null, target, content, message });
  });
  return { record: presentPage(p, row), changed: true };
}

function unquote(tag: string): string {
  return tag.trim().replace(/^W\//, '').replace(/^"(.*)"$/, '$1');
}

/**
 * Checks what the writer last read against the head. Stale writes answer 409 for now;
 * the collaboration issue turns this seam into a three-way merge or a proposal.
 */
function checkPrecondition(current: PagesTable, pre: Precondition): void {
  const stale = (seen: string) =>
    conflict('The page changed since you read it; read it again and reapply your change', 'conflict', {
      current: { content_hash: current.content_hash, commit_sha: current.commit_sha },
      yours: seen,
    });
  if (pre.ifMatch !== undefined) {
    const tags = pre.ifMatch.split(',').map(unquote);
    if (!tags.includes('*') && !tags.includes(current.content_hash)) throw stale(pre.ifMatch);
  }
  if (pre.baseSha !== undefined) {
    const b = pre.baseSha.trim().toLowerCase();
    if (b !== current.content_hash && b !== current.commit_sha) throw stale(pre.baseSha);
  }
}

export type PageUpdate =
  | { kind: 'replace'; content: string }
  | {
      kind: 'fields';
      title?: string | undefined;
      body?: string | undefined;
      /** Keys to set; a null value removes the key. */
      frontmatter?: Record<string, unknown> | undefined;
      /** PUT with fields replaces the whole frontmatter; PATCH merges it. */
      mergeFrontmatter: boolean;
    };

function applyUpdate(currentRaw: string, u: PageUpdate): string {
  if (u.kind === 'replace') return u.content;
  const doc = parseDocument(currentRaw);
  let fm: Record<string, unknown>;
  if (u.mergeFrontmatter) {
    fm = { ...doc.frontmatter };
    for (const [k, v] of Object.entries(u.frontmatter ?? {})) {
      if (v === null) delete fm[k];
      else fm[k] = v;
    }
  } else {
    fm = { ...(u.frontmatter ?? {}) };
  }
  if (u.title !== undefined) fm.title = u.title;
  else if (!u.mergeFrontmatter && doc.frontmatter.title !== undefined && u.frontmatter?.title === undefined) fm.title = doc.frontmatter.title;
  const body = u.body ?? doc.body;
  return serializeDocument(fm, body);
}

/** PUT and PATCH: lands when the precondition (if any) matches the head; last writer wins without one. */
export async function updatePage(
  ctx: CoreContext,
  p: Principal,
  ref: string,
  update: PageUpdate,
  pre: Precondition,
  message?: string,
): Promise<WriteResult> {
  const result = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const current = await findReadablePage(trx, p, ref);
    checkPrecondition(current, pre);
    const raw = applyUpdate(current.content, update);
    const target = parsePagePath(current.path);
    const content = analyzeContent(raw, target.slug);
    enforce(decideWrite(p, rowFacts(current), facts(current.path, content)));
    if (raw === current.content) return { row: current, changed: false };
    return { row: await commitPage(trx, p, { action: 'update', existing: current, target, content, message }), changed: true };
  });
  return { record: presentPage(p, result.row), changed: result.changed };
}

export async function movePage(ctx: CoreContext, p: Principal, ref: string, to: string, message?: string): Promise<WriteResult> {
  const target = parsePagePath(to);
  const row = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const current = await findReadablePage(trx, p, ref);
    if (current.path === target.path) throw badRequest(`The page is already at ${target.path}`, 'invalid_request');
    const content = analyzeContent(current.content, target.slug);
    enforce(decideWrite(p, rowFacts(current), facts(target.path, content)));
    const readScopes = await trx
      .selectFrom('grants')
      .innerJoin('principals', 'principals.id', 'grants.principal_id')
      .select('grants.scope')
      .where('principals.workspace_id', '=', p.workspaceId)
      .where('principals.deleted_at', 'is', null)
      .where('grants.action', '=', 'read')
      .execute();
    enforce(decideMove(p, widensAudience(readScopes.map((g) => g.scope), current.path, target.path)));
    await assertPathFree(trx, p.workspaceId, target.path);
    return commitPage(trx, p, { action: 'move', existing: current, target, content, message });
  });
  return { record: presentPage(p, row), changed: true };
}

async function setState(
  ctx: CoreContext,
  p: Principal,
  ref: string,
  action: 'archive' | 'restore',
  reason: ArchiveReason | undefined,
  message?: string,
): Promise<WriteResult> {
  const row = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const current = await findReadablePage(trx, p, ref);
    if (action === 'archive' && current.state === 'archived') throw conflict('The page is already archived', 'already_archived');
    if (action === 'restore' && current.state !== 'archived') throw conflict('The page is not archived', 'not_archived');
    const raw =
      action === 'archive'
        ? setFrontmatterFields(current.content, { state: 'archived', archived_reason: reason ?? 'manual', archived_at: new Date().toISOString() })
        : setFrontmatterFields(current.content, { state: undefined, archived_reason: undefined, archived_at: undefined });
    const target = parsePagePath(current.path);
    const content = analyzeContent(raw, target.slug);
    enforce(decideWrite(p, rowFacts(current), facts(current.path, content)));
    return commitPage(trx, p, { action, existing: current, target, content, message });
  });
  return { record: presentPage(p, row), changed: true };
}

export const archivePage = (ctx: CoreContext, p: Principal, ref: string, reason: ArchiveReason | undefined, message?: string) =>
  setState(ctx, p, ref, 'archive', reason, message);

export const restorePage = (ctx: CoreContext, p: Principal, ref: string, message?: string) =>
  setState(ctx, p, ref, 'restore', undefined, message);

/** Delete is a commit that removes the file; history (and reads at older commits) keep it. */
export async function deletePage(
  ctx: CoreContext,
  p: Principal,
  ref: string,
  message?: string,
): Promise<{ id: string; path: string; commit_sha: string }> {
  return inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const current = await findReadablePage(trx, p, ref);
    enforce(decideDelete(p, rowFacts(current)));
    const row = await commitPage(trx, p, { action: 'delete', existing: current, target: parsePagePath(current.path), content: null, message });
    return { id: row.id, path: row.path, commit_sha: row.commit_sha };
  });
}
