import type { Transaction } from 'kysely';
import { canReadPage, enforce } from '../../policy/pages.js';
import { canSeeProposal, decideOnProposal, decidePropose, decideWithdraw } from '../../policy/proposals.js';
import type { Principal } from '../../policy/principal.js';
import { isPageId, loadLivePage } from '../../retrieval/lookup.js';
import type { DB, PagesTable, ProposalsTable } from '../../store/schema.js';
import { inTransaction } from '../../store/tx.js';
import { appendAudit } from '../audit.js';
import type { CoreContext } from '../context.js';
import { badRequest, conflict, notFound } from '../errors.js';
import { pushEvents } from '../inbox-events.js';
import { mergePage } from '../merge.js';
import { analyzeContent, type ArchiveReason } from '../pages/content.js';
import { assertPathFree, commitPage, facts, movePageTx, rowFacts, setStateTx } from '../pages/write.js';
import { parsePagePath } from '../paths.js';
import { highest, insertProposal, presentProposal, proposalFacts, type ProposalRecord } from './record.js';
import { invalidBase, readableBase } from '../pages/base.js';
import { decideWrite } from '../../policy/pages.js';
import { ObjectStore } from '../../store/git/object-store.js';

export const PROPOSAL_STATUSES = ['open', 'accepted', 'rejected', 'superseded'] as const;

/**
 * POST /api/v1/proposals and context_propose with content: a change for human review. An
 * existing page the caller can read (by node_id or path) gets an `edit`; a free path — or a
 * path where a page the caller cannot see lives, which must answer exactly like a free one —
 * gets a `create` (accepting it there fails cleanly for the human: 409 already_exists).
 *
 * The base of an edit is the version the proposer read: `base_sha` (a content hash or commit
 * sha of a version they may read in full, else 400 invalid_base), or without it the page's
 * head now. Accepting merges three-way from that base, so changes made since are kept.
 */
export async function createProposal(
  ctx: CoreContext,
  p: Principal,
  input: { node_id?: string | undefined; path?: string | undefined; content: string; reason?: string | undefined; base_sha?: string | undefined },
): Promise<ProposalRecord> {
  if (!input.node_id && !input.path) throw badRequest('Name the page: node_id or path');
  const row = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const ref = input.node_id ?? input.path!;
    const byId = isPageId(ref);
    let page = byId ? await loadLivePage(trx, p.workspaceId, { id: ref }) : await loadLivePage(trx, p.workspaceId, { path: ref });
    if (page && !canReadPage(p, rowFacts(page))) {
      // By id a hidden page is unknown; by path it is a free path as far as the caller knows.
      if (byId || input.node_id) throw notFound(`Page ${ref} not found`);
      page = undefined;
    }
    if (!page && (byId || input.node_id)) throw notFound(`Page ${ref} not found`);
    const target = parsePagePath(page?.path ?? ref);
    const content = analyzeContent(input.content, target.slug);
    enforce(decidePropose(p, facts(target.path, content)));
    let base: { blobSha: string; commitSha: string } | null = null;
    if (page) {
      if (input.base_sha !== undefined) {
        base = await readableBase(trx, p, page, input.base_sha);
        if (!base) throw invalidBase(input.base_sha);
      } else {
        base = { blobSha: page.content_hash, commitSha: page.commit_sha };
      }
      if (input.content === page.content) {
        throw conflict(`The proposal is identical to the current content of ${page.path} (commit ${page.commit_sha}); nothing to review`, 'no_change');
      }
    } else if (input.base_sha !== undefined) {
      throw invalidBase(input.base_sha);
    }
    return insertProposal(ctx, trx, p, {
      kind: page ? 'edit' : 'create',
      origin: 'propose',
      pageId: page?.id ?? null,
      path: target.path,
      content: input.content,
      baseHash: base?.blobSha ?? null,
      baseCommit: base?.commitSha ?? null,
      reason: input.reason ?? '',
      sensitivity: highest(page?.sensitivity, page?.block_level, content.sensitivity, content.blockLevel),
    });
  });
  return presentProposal(p, row);
}

/** Proposals listed per round while filling a page past ones the caller cannot see. */
const LIST_BATCH = 200;

/** The opaque cursor of a proposal list: where the next page starts (created_at, id). */
function encodeCursor(row: Pick<ProposalsTable, 'created_at' | 'id'>): string {
  return Buffer.from(`${row.created_at}|${row.id}`, 'utf8').toString('base64url');
}

function decodeCursor(cursor: string): { createdAt: string; id: string } {
  const raw = Buffer.from(cursor, 'base64url').toString('utf8');
  const [createdAt, id, ...rest] = raw.split('|');
  if (!createdAt || !id || rest.length > 0 || Number.isNaN(Date.parse(createdAt)) || !/^pp_[0-9a-z]+$/.test(id)) {
    throw badRequest('cursor is not one this list returned (send next_cursor as given)', 'invalid_cursor');
  }
  return { createdAt, id };
}

/**
 * Which proposals the caller may see: judged on what each proposal holds (its stored path and
 * level) AND on its page as it is now (moved, raised, deleted since), as the inbox does.
 */
async function visibleTo(db: Transaction<DB> | CoreContext['store']['db'], p: Principal, rows: ProposalsTable[]): Promise<ProposalsTable[]> {
  const pageIds = [...new Set(rows.map((r) => r.page_id).filter((x): x is string => x !== null))];
  const pages = new Map<string, boolean>();
  for (let i = 0; i < pageIds.length; i += 500) {
    const found = await db
      .selectFrom('pages')
      .select(['id', 'path', 'sensitivity', 'block_level'])
      .where('workspace_id', '=', p.workspaceId)
      .where('id', 'in', pageIds.slice(i, i + 500))
      .execute();
    for (const pg of found) pages.set(pg.id, canReadPage(p, { path: pg.path, sensitivity: pg.sensitivity, blockLevel: pg.block_level }));
  }
  return rows.filter((r) => canSeeProposal(p, proposalFacts(r)) && (r.page_id === null || pages.get(r.page_id) === true));
}

/**
 * Proposals the caller can see, newest first, `limit` at a time: hidden ones are skipped in
 * rounds until the page is full, and `next_cursor` (null on the last page) continues after the
 * last one returned, so every visible proposal comes exactly once.
 */
export async function listProposals(
  ctx: CoreContext,
  p: Principal,
  opts: { status?: ProposalsTable['status'] | undefined; limit: number; cursor?: string | undefined; mine?: boolean | undefined },
): Promise<{ proposals: ProposalRecord[]; next_cursor: string | null }> {
  const db = ctx.store.db;
  let after = opts.cursor ? decodeCursor(opts.cursor) : null;
  const found: ProposalsTable[] = [];
  for (;;) {
    let q = db.selectFrom('proposals').selectAll().where('workspace_id', '=', p.workspaceId);
    if (opts.status) q = q.where('status', '=', opts.status);
    // `mine`: the caller's own proposals (MCP context_proposals, issue 13).
    if (opts.mine) q = q.where('proposer_id', '=', p.id);
    if (after) {
      const a = after;
      q = q.where((eb) => eb.or([eb('created_at', '<', a.createdAt), eb.and([eb('created_at', '=', a.createdAt), eb('id', '<', a.id)])]));
    }
    const batch = await q.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(LIST_BATCH).execute();
    found.push(...(await visibleTo(db, p, batch)));
    if (found.length > opts.limit || batch.length < LIST_BATCH) break;
    const last = batch[batch.length - 1]!;
    after = { createdAt: last.created_at, id: last.id };
  }
  const page = found.slice(0, opts.limit);
  return { proposals: page.map((r) => presentProposal(p, r)), next_cursor: found.length > opts.limit ? encodeCursor(page[page.length - 1]!) : null };
}

async function loadProposal(db: Transaction<DB> | CoreContext['store']['db'], p: Principal, id: string): Promise<ProposalsTable> {
  const row = await db.selectFrom('proposals').selectAll().where('id', '=', id).where('workspace_id', '=', p.workspaceId).executeTakeFirst();
  if (!row || (await visibleTo(db, p, [row])).length === 0) throw notFound(`Proposal ${id} not found`);
  return row;
}

export async function getProposal(ctx: CoreContext, p: Principal, id: string): Promise<ProposalRecord> {
  return presentProposal(p, await loadProposal(ctx.store.db, p, id));
}

async function notifyProposer(
  ctx: CoreContext,
  trx: Transaction<DB>,
  p: Principal,
  row: ProposalsTable,
  event: 'accepted' | 'rejected',
  extra: Record<string, unknown>,
) {
  if (row.proposer_id === p.id) return;
  await pushEvents(ctx, trx, p.workspaceId, [
    {
      principalId: row.proposer_id,
      kind: 'proposal',
      pageId: row.page_id,
      proposalId: row.id,
      payload: { proposal_id: row.id, event, kind: row.kind, path: row.path, by: { id: p.id, name: p.name }, ...extra },
    },
  ]);
}

/**
 * Accept: applied as a commit credited to the proposer (the acceptor is the committer). An
 * edit whose page moved on since its base is merged again; a conflict leaves the proposal
 * open and answers 409. An acceptor may send edited content, which is applied as given.
 */
export async function acceptProposal(ctx: CoreContext, p: Principal, id: string, input: { content?: string | undefined }): Promise<ProposalRecord> {
  const result = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const row = await loadProposal(trx, p, id);
    enforce(decideOnProposal(p, proposalFacts(row), 'accept'));
    if (row.status !== 'open') throw conflict(`The proposal is ${row.status}`, 'proposal_closed');
    if (input.content !== undefined && row.kind !== 'edit' && row.kind !== 'create') {
      throw badRequest(`A ${row.kind} proposal takes no content`);
    }
    const proposer = await trx.selectFrom('principals').select(['id', 'name']).where('id', '=', row.proposer_id).executeTakeFirstOrThrow();
    const credit = { id: proposer.id, name: proposer.name };
    const message = `Accept proposal ${row.id}${row.reason ? `: ${row.reason}` : ''}`.slice(0, 2000);
    let page: PagesTable | undefined;
    if (row.page_id) {
      page = await loadLivePage(trx, p.workspaceId, { id: row.page_id });
      if (!page) throw conflict('The page no longer exists', 'proposal_closed');
      if (!canReadPage(p, rowFacts(page))) throw notFound(`Proposal ${id} not found`);
    }
    let commitSha: string;
    if (row.kind === 'create') {
      const target = parsePagePath(row.path);
      const content = analyzeContent(input.content ?? row.content ?? '', target.slug);
      enforce(decideWrite(p, null, facts(target.path, content)));
      await assertPathFree(trx, p.workspaceId, target.path);
      commitSha = (await commitPage(ctx, trx, p, { action: 'create', existing: null, target, content, message, credit })).commit_sha;
    } else if (row.kind === 'edit') {
      let raw = input.content;
      if (raw === undefined) {
        raw = row.content ?? '';
        if (row.base_hash && page!.content_hash !== row.base_hash) {
          const base = await new ObjectStore(trx, p.workspaceId).getBlob(row.base_hash);
          const m = base ? mergePage(base.toString('utf8'), page!.content, raw) : null;
          if (!m || m.kind === 'conflict') {
            // The proposal stays open; the answer shows the clash so the acceptor can resolve it.
            throw conflict('The page changed since the version this proposal was based on, and the changes clash; accept it with edited content', 'conflict', {
              current: { content_hash: page!.content_hash, commit_sha: page!.commit_sha },
              base: { content_hash: row.base_hash, commit_sha: row.base_commit },
              conflicts: m ? m.conflicts : [],
            });
          }
          raw = m.content;
        }
      }
      const target = parsePagePath(page!.path);
      const content = analyzeContent(raw, target.slug);
      enforce(decideWrite(p, rowFacts(page!), facts(page!.path, content)));
      commitSha =
        raw === page!.content
          ? page!.commit_sha
          : (await commitPage(ctx, trx, p, { action: 'update', existing: page!, target, content, message, credit })).commit_sha;
    } else if (row.kind === 'archive') {
      const params = JSON.parse(row.params) as { reason?: ArchiveReason };
      const o = await setStateTx(ctx, trx, p, page!, 'archive', params.reason, { message, credit, allowPropose: false });
      commitSha = o.kind === 'done' ? o.row.commit_sha : '';
    } else if (row.kind === 'move') {
      const params = JSON.parse(row.params) as { to: string };
      const o = await movePageTx(ctx, trx, p, page!, params.to, { message, credit, allowPropose: false, skipAudienceGate: true });
      commitSha = o.kind === 'done' ? o.row.commit_sha : '';
    } else {
      throw badRequest(`Cannot apply a ${row.kind} proposal`);
    }
    const decidedAt = new Date().toISOString();
    await trx
      .updateTable('proposals')
      .set({
        status: 'accepted',
        decided_by: p.id,
        decided_at: decidedAt,
        result_commit: commitSha,
        ...(input.content !== undefined ? { content: input.content } : {}),
      })
      .where('id', '=', row.id)
      .execute();
    await appendAudit(trx, p.workspaceId, {
      principalId: p.id,
      action: 'proposal.accept',
      pageId: row.page_id,
      detail: { proposal: row.id, commit: commitSha, proposer: row.proposer_id },
    });
    await notifyProposer(ctx, trx, p, row, 'accepted', { commit_sha: commitSha });
    return loadProposal(trx, p, row.id);
  });
  return presentProposal(p, result);
}

export async function rejectProposal(ctx: CoreContext, p: Principal, id: string, reason: string): Promise<ProposalRecord> {
  const result = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const row = await loadProposal(trx, p, id);
    enforce(decideOnProposal(p, proposalFacts(row), 'reject'));
    if (row.status !== 'open') throw conflict(`The proposal is ${row.status}`, 'proposal_closed');
    await trx
      .updateTable('proposals')
      .set({ status: 'rejected', decided_by: p.id, decided_at: new Date().toISOString(), decision_reason: reason })
      .where('id', '=', row.id)
      .execute();
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'proposal.reject', pageId: row.page_id, detail: { proposal: row.id, reason } });
    await notifyProposer(ctx, trx, p, row, 'rejected', { reason });
    return loadProposal(trx, p, row.id);
  });
  return presentProposal(p, result);
}

/** What a withdrawn proposal's decision reason says (the spec has no `withdrawn` status). */
export const WITHDRAWN_REASON = 'Withdrawn by its author';

/**
 * Withdraw (issue 13, beyond the spec): the author of an open proposal closes it. The spec's
 * proposal states are open, accepted, rejected and superseded; a withdrawn proposal is shown as
 * `rejected`, decided by its own author, with the decision reason starting "Withdrawn by its
 * author" (docs/decisions.md), so every list and filter of the spec keeps working.
 */
export async function withdrawProposal(ctx: CoreContext, p: Principal, id: string, reason?: string): Promise<ProposalRecord> {
  const result = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const row = await loadProposal(trx, p, id);
    enforce(decideWithdraw(p, { ...proposalFacts(row), status: row.status }));
    const why = reason ? `${WITHDRAWN_REASON}: ${reason}` : WITHDRAWN_REASON;
    await trx
      .updateTable('proposals')
      .set({ status: 'rejected', decided_by: p.id, decided_at: new Date().toISOString(), decision_reason: why })
      .where('id', '=', row.id)
      .where('status', '=', 'open')
      .execute();
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'proposal.withdraw', pageId: row.page_id, detail: { proposal: row.id } });
    return loadProposal(trx, p, row.id);
  });
  return presentProposal(p, result);
}
