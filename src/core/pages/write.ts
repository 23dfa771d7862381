import type { Transaction } from 'kysely';
import { serializeDocument, setFrontmatterFields } from '../../markdown/index.js';
import { assertFrontmatterDepth } from '../../markdown/frontmatter.js';
import { ceilingFor } from '../../policy/access.js';
import { decideDelete, decideMove, decideWrite, enforce, widensAudience } from '../../policy/pages.js';
import type { Principal } from '../../policy/principal.js';
import { decidePropose } from '../../policy/proposals.js';
import type { DB, PagesTable, ProposalsTable } from '../../store/schema.js';
import { inTransaction } from '../../store/tx.js';
import type { CoreContext } from '../context.js';
import { badRequest, conflict } from '../errors.js';
import { parsePagePath, slugify, type PagePath } from '../paths.js';
import { highest, insertProposal, presentProposal, supersedeForPage, type ProposalRecord } from '../proposals/record.js';
import { analyzeContent, type ArchiveReason } from './content.js';
import { findReadablePage } from './lookup.js';
import { assertPathFree, commitPage, facts, rowFacts } from './persist.js';
import { presentPage, type PageRecord } from './record.js';

export { assertPathFree, commitPage, facts, rowFacts } from './persist.js';
export { applyUpdate, updatePage, type PageUpdate, type Precondition, type UpdateResult } from './update.js';

export type NewPageInput =
  | { path: string; content: string }
  | { space: string; cluster_path?: string | undefined; title: string; body: string; frontmatter?: Record<string, unknown> | undefined };

/** What the caller last read, for optimistic concurrency: the If-Match header and/or base_sha. */
export interface WriteResult {
  record: PageRecord;
  /** False when the write changed nothing (no commit was made). */
  changed: boolean;
}

export function resolveNewPage(input: NewPageInput): { target: PagePath; raw: string } {
  if ('content' in input) return { target: parsePagePath(input.path), raw: input.content };
  const cluster = input.cluster_path
    ? input.cluster_path === input.space || input.cluster_path.startsWith(`${input.space}/`)
      ? input.cluster_path
      : `${input.space}/${input.cluster_path}`
    : input.space;
  const target = parsePagePath(`${cluster}/${slugify(input.title)}.md`);
  assertFrontmatterDepth(input.frontmatter);
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
