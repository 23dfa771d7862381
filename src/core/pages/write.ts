import { serializeDocument, parseDocument, setFrontmatterFields } from '../../markdown/index.js';
import { decideDelete, decideMove, decideWrite, enforce, widensAudience, type PageFacts } from '../../policy/pages.js';
import { ObjectStore } from '../../store/git-objects.js';
import { mergePage } from '../merge.js';
import { pushEvents } from '../inbox-events.js';
import { highest, insertProposal, presentProposal, supersedeForPage, type ProposalRecord } from '../proposals/record.js';
import { decidePropose } from '../../policy/proposals.js';
import { ceilingFor } from '../../policy/access.js';
import type { Principal } from '../../policy/principal.js';
import type { Transaction } from 'kysely';
import type { DB, PagesTable, ProposalsTable } from '../../store/schema.js';
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

/**
 * The one place a page change becomes durable: commit, page row, version row and audit
 * entry, all in the caller's transaction.
 */
export async function commitPage(
  trx: Transaction<DB>,
  p: Principal,
  args: {
    action: Action;
    existing: PagesTable | null;
    target: PagePath;
    content: PageContent | null;
    message: string | undefined;
    /** The author to credit when `p` applies someone else's change (an accepted proposal). */
    credit?: { id: string; name: string } | undefined;
  },
): Promise<PagesTable> {
  const at = new Date();
  const now = at.toISOString();
  const { action, existing, target, content } = args;
  const author = args.credit ?? p;
  const changes: { path: string; content: string | null }[] = [];
  if (existing && existing.path !== target.path) changes.push({ path: existing.path, content: null });
  changes.push({ path: target.path, content: content ? content.raw : null });
  const message = commitMessage(action, target.path, args.message);
  const commit = await commitFiles(trx, p.workspaceId, author, changes, message, at, p);

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
    created_by: existing?.created_by ?? author.id,
    updated_by: author.id,
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
      principal_id: author.id,
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
      detail: {
        path: target.path,
        commit: commit.sha,
        ...(existing && existing.path !== target.path ? { from: existing.path } : {}),
        ...(args.credit ? { author: args.credit.id } : {}),
      },
    },
    at,
  );
  return row;
}

export async function assertPathFree(trx: Transaction<DB>, workspaceId: string, path: string): Promise<void> {
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
export function resolveNewPage(input: NewPageInput): { target: PagePath; raw: string } {
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

/** Whether the writer's precondition names the head (true), an older state (false), or nothing (null). */
function preconditionMatches(current: PagesTable, pre: Precondition): boolean | null {
  let seen: boolean | null = null;
  if (pre.ifMatch !== undefined) {
    const tags = pre.ifMatch.split(',').map(unquote);
    seen = tags.includes('*') || tags.includes(current.content_hash);
  }
  if (pre.baseSha !== undefined) {
    const b = pre.baseSha.trim().toLowerCase();
    seen = (seen ?? true) && (b === current.content_hash || b === current.commit_sha);
  }
  return seen;
}

/**
 * The content the writer started from, taken only from this page's own history (a hash
 * from elsewhere must not become a merge base), or null when it cannot be found.
 */
async function baseContent(trx: Transaction<DB>, current: PagesTable, pre: Precondition): Promise<{ hash: string; content: string } | null> {
  const candidates = [
    ...(pre.ifMatch ?? '').split(',').map(unquote).filter((t) => t && t !== '*'),
    ...(pre.baseSha ? [pre.baseSha.trim().toLowerCase()] : []),
  ];
  for (const c of candidates) {
    const v = await trx
      .selectFrom('page_versions')
      .select('blob_sha')
      .where('workspace_id', '=', current.workspace_id)
      .where('page_id', '=', current.id)
      .where((eb) => eb.or([eb('blob_sha', '=', c), eb('commit_sha', '=', c)]))
      .where('blob_sha', 'is not', null)
      .orderBy('commit_seq', 'desc')
      .limit(1)
      .executeTakeFirst();
    if (v?.blob_sha) {
      const blob = await new ObjectStore(trx, current.workspace_id).getBlob(v.blob_sha);
      if (blob) return { hash: v.blob_sha, content: blob.toString('utf8') };
    }
  }
  return null;
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

export function applyUpdate(currentRaw: string, u: PageUpdate): string {
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

export interface UpdateResult extends WriteResult {
  /** True when a stale write was merged with the changes made since its base. */
  merged: boolean;
}

/**
 * PUT and PATCH. Without a precondition the last writer wins. With one that names the head
 * the write lands. With a stale one the write is merged three-way with what changed since
 * its base: a clean merge lands as a commit; a conflict lands nowhere but in a proposal
 * (holding the writer's content and base) and a `conflict` event for the writer, and the
 * caller gets 409 `conflict` carrying that proposal.
 */
export async function updatePage(
  ctx: CoreContext,
  p: Principal,
  ref: string,
  update: PageUpdate,
  pre: Precondition,
  message?: string,
): Promise<UpdateResult> {
  const result = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const current = await findReadablePage(trx, p, ref);
    const target = parsePagePath(current.path);
    let raw: string;
    let merged = false;
    if (preconditionMatches(current, pre) === false) {
      const base = await baseContent(trx, current, pre);
      const theirs = applyUpdate(base?.content ?? current.content, update);
      analyzeContent(theirs, target.slug);
      const m = base ? mergePage(base.content, current.content, theirs) : null;
      if (!m || m.kind === 'conflict') {
        const content = analyzeContent(theirs, target.slug);
        const proposal = await insertProposal(ctx, trx, p, {
          kind: 'edit',
          origin: 'conflict',
          pageId: current.id,
          path: current.path,
          content: theirs,
          baseHash: base?.hash ?? null,
          baseCommit: null,
          reason: m ? m.reason : 'The base you wrote against is not in this page\'s history',
          sensitivity: highest(current.sensitivity, current.block_level, content.sensitivity, content.blockLevel),
        });
        await pushEvents(ctx, trx, p.workspaceId, [
          {
            principalId: p.id,
            kind: 'conflict',
            pageId: current.id,
            proposalId: proposal.id,
            payload: { proposal_id: proposal.id, page_id: current.id, path: current.path, reason: proposal.reason },
          },
        ]);
        return { kind: 'conflict' as const, proposal, current };
      }
      raw = m.content;
      merged = true;
    } else {
      raw = applyUpdate(current.content, update);
    }
    const content = analyzeContent(raw, target.slug);
    enforce(decideWrite(p, rowFacts(current), facts(current.path, content)));
    if (raw === current.content) return { kind: 'ok' as const, row: current, changed: false, merged };
    return { kind: 'ok' as const, row: await commitPage(trx, p, { action: 'update', existing: current, target, content, message }), changed: true, merged };
  });
  if (result.kind === 'conflict') {
    const { proposal, current } = result;
    throw conflict('The page changed since you read it and your change does not merge cleanly; it was saved as a proposal', 'conflict', {
      proposal: presentProposal(p, proposal),
      current: { content_hash: current.content_hash, commit_sha: current.commit_sha },
    });
  }
  return { record: presentPage(p, result.row), changed: result.changed, merged: result.merged };
}

/** A change either landed, or (the spec's "else proposal") became a proposal. */
export type ChangeOutcome = { kind: 'done'; row: PagesTable } | { kind: 'proposed'; proposal: ProposalsTable };

export interface PublicOutcome {
  record?: PageRecord;
  proposal?: ProposalRecord;
}

function present(p: Principal, o: ChangeOutcome): PublicOutcome {
  return o.kind === 'done' ? { record: presentPage(p, o.row) } : { proposal: presentProposal(p, o.proposal) };
}

interface ApplyOptions {
  message?: string | undefined;
  /** Credit this author (accepting a proposal). */
  credit?: { id: string; name: string } | undefined;
  /** When the caller lacks the right, make a proposal instead of refusing. */
  allowPropose: boolean;
  /** The decision to move was already taken (an accepted proposal): skip the audience gate. */
  skipAudienceGate?: boolean;
}

/** Moves a page inside the caller's transaction; an agent widening its audience proposes instead. */
export async function movePageTx(
  ctx: CoreContext,
  trx: Transaction<DB>,
  p: Principal,
  current: PagesTable,
  to: string,
  opts: ApplyOptions,
): Promise<ChangeOutcome> {
  const target = parsePagePath(to);
  if (current.path === target.path) throw badRequest(`The page is already at ${target.path}`, 'invalid_request');
  const content = analyzeContent(current.content, target.slug);
  enforce(decideWrite(p, rowFacts(current), facts(target.path, content)));
  if (!opts.skipAudienceGate) {
    const readScopes = await trx
      .selectFrom('grants')
      .innerJoin('principals', 'principals.id', 'grants.principal_id')
      .select('grants.scope')
      .where('principals.workspace_id', '=', p.workspaceId)
      .where('principals.deleted_at', 'is', null)
      .where('grants.action', '=', 'read')
      .execute();
    const gate = decideMove(p, widensAudience(readScopes.map((g) => g.scope), current.path, target.path));
    if (gate.kind === 'deny') {
      if (!(opts.allowPropose && p.kind === 'agent' && decidePropose(p, facts(target.path, content)).kind === 'allow')) throw gate.error;
      await assertPathFree(trx, p.workspaceId, target.path);
      const proposal = await insertProposal(ctx, trx, p, {
        kind: 'move',
        origin: 'step_up',
        pageId: current.id,
        path: current.path,
        content: null,
        baseHash: current.content_hash,
        baseCommit: current.commit_sha,
        params: { to: target.path },
        reason: opts.message ?? `Move ${current.path} to ${target.path}`,
        sensitivity: highest(current.sensitivity, current.block_level),
      });
      return { kind: 'proposed', proposal };
    }
  }
  await assertPathFree(trx, p.workspaceId, target.path);
  return { kind: 'done', row: await commitPage(trx, p, { action: 'move', existing: current, target, content, message: opts.message, credit: opts.credit }) };
}

export async function movePage(ctx: CoreContext, p: Principal, ref: string, to: string, message?: string): Promise<PublicOutcome> {
  const o = await inTransaction(ctx.store, p.workspaceId, async (trx) =>
    movePageTx(ctx, trx, p, await findReadablePage(trx, p, ref), to, { message, allowPropose: true }),
  );
  return present(p, o);
}

/** Archives or restores inside the caller's transaction; archiving without write proposes instead. */
export async function setStateTx(
  ctx: CoreContext,
  trx: Transaction<DB>,
  p: Principal,
  current: PagesTable,
  action: 'archive' | 'restore',
  reason: ArchiveReason | undefined,
  opts: ApplyOptions,
): Promise<ChangeOutcome> {
  if (action === 'archive' && current.state === 'archived') throw conflict('The page is already archived', 'already_archived');
  if (action === 'restore' && current.state !== 'archived') throw conflict('The page is not archived', 'not_archived');
  const raw =
    action === 'archive'
      ? setFrontmatterFields(current.content, { state: 'archived', archived_reason: reason ?? 'manual', archived_at: new Date().toISOString() })
      : setFrontmatterFields(current.content, { state: undefined, archived_reason: undefined, archived_at: undefined });
  const target = parsePagePath(current.path);
  const content = analyzeContent(raw, target.slug);
  const decision = decideWrite(p, rowFacts(current), facts(current.path, content));
  if (decision.kind === 'deny') {
    const noWrite = ceilingFor(p, 'write', current.path) === null;
    if (!(opts.allowPropose && action === 'archive' && noWrite && decidePropose(p, rowFacts(current)).kind === 'allow')) throw decision.error;
    const proposal = await insertProposal(ctx, trx, p, {
      kind: 'archive',
      origin: 'no_write',
      pageId: current.id,
      path: current.path,
      content: null,
      baseHash: current.content_hash,
      baseCommit: current.commit_sha,
      params: { reason: reason ?? 'manual' },
      reason: opts.message ?? `Archive ${current.path} (${reason ?? 'manual'})`,
      sensitivity: highest(current.sensitivity, current.block_level),
    });
    return { kind: 'proposed', proposal };
  }
  return { kind: 'done', row: await commitPage(trx, p, { action, existing: current, target, content, message: opts.message, credit: opts.credit }) };
}

export async function archivePage(ctx: CoreContext, p: Principal, ref: string, reason: ArchiveReason | undefined, message?: string): Promise<PublicOutcome> {
  const o = await inTransaction(ctx.store, p.workspaceId, async (trx) =>
    setStateTx(ctx, trx, p, await findReadablePage(trx, p, ref), 'archive', reason, { message, allowPropose: true }),
  );
  return present(p, o);
}

export async function restorePage(ctx: CoreContext, p: Principal, ref: string, message?: string): Promise<PublicOutcome> {
  const o = await inTransaction(ctx.store, p.workspaceId, async (trx) =>
    setStateTx(ctx, trx, p, await findReadablePage(trx, p, ref), 'restore', undefined, { message, allowPropose: false }),
  );
  return present(p, o);
}

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
    await supersedeForPage(trx, p.workspaceId, current.id, row.updated_at);
    return { id: row.id, path: row.path, commit_sha: row.commit_sha };
  });
}
