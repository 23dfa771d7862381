import type { Transaction } from 'kysely';
import { serializeDocument, setFrontmatterFields } from '../../markdown/index.js';
import { assertFrontmatterDepth } from '../../markdown/frontmatter.js';
import { canReadPage, decideDelete, decideMove, decideWrite, enforce, widensAudience, type PageFacts } from '../../policy/pages.js';
import type { Principal } from '../../policy/principal.js';
import { decidePropose, decideWriteOrPropose } from '../../policy/proposals.js';
import { findReadablePage, loadLivePage } from '../../retrieval/lookup.js';
import type { DB, PagesTable, ProposalsTable } from '../../store/schema.js';
import { inTransaction } from '../../store/tx.js';
import type { CoreContext } from '../context.js';
import { badRequest, conflict } from '../errors.js';
import { parsePagePath, slugify, type PagePath } from '../paths.js';
import { highest, insertProposal, presentProposal, supersedeForPage, type ProposalRecord } from '../proposals/record.js';
import { analyzeContent, type ArchiveReason } from './content.js';
import { assertPathFree, commitPage, facts, rowFacts, type PageChange } from './persist.js';
import { presentPage, type PageRecord } from './record.js';

export { assertPathFree, commitPage, facts, rowFacts } from './persist.js';
export { applyUpdate, updateOrProposePage, updatePage, type PageUpdate, type Precondition, type UpdateResult } from './update.js';

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

/** A write that became a proposal (the spec's "an agent action that lacks permission"). */
export interface Proposed {
  proposal: ProposalRecord;
}

/** Creates a page (MCP, imports): a caller without write is refused. */
export async function createPage(ctx: CoreContext, p: Principal, input: NewPageInput, message?: string): Promise<WriteResult> {
  const r = await writeNewPage(ctx, p, input, message, { allowPropose: false });
  if ('proposal' in r) throw new Error('unreachable: a proposal where none was allowed');
  return r;
}

/**
 * A create over REST: as createPage, but an agent that may not write there and holds the
 * propose grant opens a `create` proposal instead (202). A path held by a page it cannot see is,
 * to it, free: the proposal says no more than POST /api/v1/proposals would.
 */
export function createOrProposePage(ctx: CoreContext, p: Principal, input: NewPageInput, message?: string): Promise<WriteResult | Proposed> {
  return writeNewPage(ctx, p, input, message, { allowPropose: true });
}

async function writeNewPage(
  ctx: CoreContext,
  p: Principal,
  input: NewPageInput,
  message: string | undefined,
  opts: { allowPropose: boolean },
): Promise<WriteResult | Proposed> {
  const { target, raw } = resolveNewPage(input);
  const content = analyzeContent(raw, target.slug);
  const next = facts(target.path, content);
  const decision = decideWriteOrPropose(p, null, next, { proposers: 'agents', carriesContent: true });
  if (decision.kind === 'deny' || (decision.kind === 'propose' && !opts.allowPropose)) throw decisionError(p, null, next);
  if (decision.kind === 'propose') {
    const proposal = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
      const held = await loadLivePage(trx, p.workspaceId, { path: target.path });
      if (held && canReadPage(p, rowFacts(held))) await assertPathFree(trx, p.workspaceId, target.path);
      return insertProposal(ctx, trx, p, {
        kind: 'create',
        origin: decision.origin,
        pageId: null,
        path: target.path,
        content: raw,
        baseHash: null,
        baseCommit: null,
        reason: message ?? `Create ${target.path}`,
        sensitivity: highest(content.sensitivity, content.blockLevel),
      });
    });
    return { proposal: presentProposal(p, proposal) };
  }
  const row = await inTransaction(
    ctx.store,
    p.workspaceId,
    async (trx) => {
      await assertPathFree(trx, p.workspaceId, target.path);
      return commitPage(ctx, trx, p, { action: 'create', existing: null, target, content, message });
    },
    { freePath: target.path },
  );
  return { record: presentPage(p, row), changed: true };
}

/** The refusal a writer gets (a proposal was not allowed here). */
function decisionError(p: Principal, current: PageFacts | null, next: PageFacts): Error {
  const d = decideWrite(p, current, next);
  return d.kind === 'deny' ? d.error : new Error('unreachable: the write was allowed');
}

export type ChangeOutcome = { kind: 'done'; row: PagesTable } | { kind: 'proposed'; proposal: ProposalsTable };

export interface PublicOutcome {
  record?: PageRecord;
  proposal?: ProposalRecord;
}

function present(p: Principal, o: ChangeOutcome): PublicOutcome {
  return o.kind === 'done' ? { record: presentPage(p, o.row) } : { proposal: presentProposal(p, o.proposal) };
}

export interface ApplyOptions {
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
    const gate = decideMove(
      p,
      widensAudience(
        readScopes.map((g) => g.scope),
        current.path,
        target.path,
      ),
    );
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
  return {
    kind: 'done',
    row: await commitPage(ctx, trx, p, { action: 'move', existing: current, target, content, message: opts.message, credit: opts.credit }),
  };
}

export async function movePage(ctx: CoreContext, p: Principal, ref: string, to: string, message?: string): Promise<PublicOutcome> {
  const o = await inTransaction(ctx.store, p.workspaceId, async (trx) =>
    movePageTx(ctx, trx, p, await findReadablePage(trx, p, ref), to, { message, allowPropose: true }),
  );
  return present(p, o);
}

/** An archive or restore decided and, when it became a proposal, recorded; a change still to commit otherwise. */
export type StatePlan = { kind: 'apply'; change: PageChange } | { kind: 'proposed'; proposal: ProposalsTable };

/** Archives or restores inside the caller's transaction; archiving without write proposes instead. */
export async function setStateTx(...args: Parameters<typeof planStateTx>): Promise<ChangeOutcome> {
  const [ctx, trx, p, , , , opts] = args;
  const plan = await planStateTx(...args);
  if (plan.kind === 'proposed') return plan;
  return { kind: 'done', row: await commitPage(ctx, trx, p, { ...plan.change, message: opts.message }) };
}

/**
 * The decision half of setStateTx: the new content and the proposal when there is one, but no
 * commit, so a folder archive can put every page's change into one commit (core/folders.ts).
 */
export async function planStateTx(
  ctx: CoreContext,
  trx: Transaction<DB>,
  p: Principal,
  current: PagesTable,
  action: 'archive' | 'restore',
  reason: ArchiveReason | undefined,
  opts: ApplyOptions,
): Promise<StatePlan> {
  if (action === 'archive' && current.state === 'archived') throw conflict('The page is already archived', 'already_archived');
  if (action === 'restore' && current.state !== 'archived') throw conflict('The page is not archived', 'not_archived');
  const raw =
    action === 'archive'
      ? setFrontmatterFields(current.content, { state: 'archived', archived_reason: reason ?? 'manual', archived_at: new Date().toISOString() })
      : setFrontmatterFields(current.content, { state: undefined, archived_reason: undefined, archived_at: undefined });
  const target = parsePagePath(current.path);
  const content = analyzeContent(raw, target.slug);
  const next = facts(current.path, content);
  // Archiving proposes for anyone without write (it carries no text); restoring, for agents (REST).
  const rule = action === 'archive' ? { proposers: 'anyone' as const, carriesContent: false } : { proposers: 'agents' as const, carriesContent: true };
  const decision = decideWriteOrPropose(p, rowFacts(current), next, rule);
  if (decision.kind === 'deny' || (decision.kind === 'propose' && !opts.allowPropose)) throw decisionError(p, rowFacts(current), next);
  if (decision.kind === 'propose') {
    // A restore is proposed as the edit that restores (accepting an edit applies it).
    const proposal = await insertProposal(ctx, trx, p, {
      kind: action === 'archive' ? 'archive' : 'edit',
      origin: decision.origin,
      pageId: current.id,
      path: current.path,
      content: action === 'archive' ? null : raw,
      baseHash: current.content_hash,
      baseCommit: current.commit_sha,
      ...(action === 'archive' ? { params: { reason: reason ?? 'manual' } } : {}),
      reason: opts.message ?? (action === 'archive' ? `Archive ${current.path} (${reason ?? 'manual'})` : `Restore ${current.path}`),
      sensitivity: highest(current.sensitivity, current.block_level),
    });
    return { kind: 'proposed', proposal };
  }
  return { kind: 'apply', change: { action, existing: current, target, content, credit: opts.credit } };
}

export async function archivePage(ctx: CoreContext, p: Principal, ref: string, reason: ArchiveReason | undefined, message?: string): Promise<PublicOutcome> {
  const o = await inTransaction(ctx.store, p.workspaceId, async (trx) =>
    setStateTx(ctx, trx, p, await findReadablePage(trx, p, ref), 'archive', reason, { message, allowPropose: true }),
  );
  return present(p, o);
}

/** Restores an archived page; with `allowPropose` (REST) an agent without write proposes instead. */
export async function restorePage(ctx: CoreContext, p: Principal, ref: string, message?: string, opts = { allowPropose: false }): Promise<PublicOutcome> {
  const o = await inTransaction(ctx.store, p.workspaceId, async (trx) =>
    setStateTx(ctx, trx, p, await findReadablePage(trx, p, ref), 'restore', undefined, { message, allowPropose: opts.allowPropose }),
  );
  return present(p, o);
}

/** Delete is a commit that removes the file; history (and reads at older commits) keep it. */
export async function deletePage(ctx: CoreContext, p: Principal, ref: string, message?: string): Promise<{ id: string; path: string; commit_sha: string }> {
  return inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const current = await findReadablePage(trx, p, ref);
    enforce(decideDelete(p, rowFacts(current)));
    const row = await commitPage(ctx, trx, p, { action: 'delete', existing: current, target: parsePagePath(current.path), content: null, message });
    await supersedeForPage(trx, p.workspaceId, current.id, row.updated_at);
    return { id: row.id, path: row.path, commit_sha: row.commit_sha };
  });
}
