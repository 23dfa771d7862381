import type { Transaction } from 'kysely';
import { canSeeProposal, seesProposalContent } from '../../policy/proposals.js';
import { ROLE_CEILING } from '../../policy/access.js';
import type { Principal, Role } from '../../policy/principal.js';
import { atOrBelow, isLevel, rank, type Level } from '../../policy/sensitivity.js';
import type { DB, ProposalsTable } from '../../store/schema.js';
import { appendAudit } from '../audit.js';
import type { CoreContext } from '../context.js';
import { ulid } from 'ulid';
import { pushEvents, type NewEvent } from '../inbox-events.js';
import { liveMembers } from '../principal-loader.js';

/** The proposal record REST and MCP return. `content` is null for agents (humans only). */
export interface ProposalRecord extends Pick<
  ProposalsTable,
  | 'id'
  | 'status'
  | 'kind'
  | 'origin'
  | 'path'
  | 'content'
  | 'base_hash'
  | 'base_commit'
  | 'reason'
  | 'created_at'
  | 'decided_by'
  | 'decided_at'
  | 'decision_reason'
  | 'result_commit'
  | 'superseded_by'
> {
  target: { node_id: string | null; path: string };
  node_id: string | null;
  params: Record<string, unknown>;
  proposer: string;
}

export function presentProposal(p: Principal, row: ProposalsTable): ProposalRecord {
  return {
    id: row.id,
    status: row.status,
    kind: row.kind,
    origin: row.origin,
    target: { node_id: row.page_id, path: row.path },
    node_id: row.page_id,
    path: row.path,
    content: seesProposalContent(p) ? row.content : null,
    base_hash: row.base_hash,
    base_commit: row.base_commit,
    params: JSON.parse(row.params) as Record<string, unknown>,
    reason: row.reason,
    proposer: row.proposer_id,
    created_at: row.created_at,
    decided_by: row.decided_by,
    decided_at: row.decided_at,
    decision_reason: row.decision_reason,
    result_commit: row.result_commit,
    superseded_by: row.superseded_by,
  };
}

export function proposalFacts(row: Pick<ProposalsTable, 'path' | 'sensitivity' | 'origin' | 'proposer_id'>) {
  return { path: row.path, sensitivity: row.sensitivity, origin: row.origin, proposerId: row.proposer_id };
}

/** The highest of the given levels (unknown values count as secret: fail closed). */
export function highest(...levels: (string | null | undefined)[]): Level {
  let out: Level = 'public';
  for (const l of levels) {
    if (l === null || l === undefined) continue;
    const v: Level = isLevel(l) ? l : 'secret';
    if (rank(v) > rank(out)) out = v;
  }
  return out;
}

export interface NewProposal {
  kind: ProposalsTable['kind'];
  origin: ProposalsTable['origin'];
  pageId: string | null;
  path: string;
  content: string | null;
  baseHash: string | null;
  baseCommit: string | null;
  params?: Record<string, unknown>;
  reason: string;
  sensitivity: Level;
}

/**
 * Stores a proposal inside the caller's transaction, supersedes the proposer's older open
 * proposals for the same target, and tells the workspace's editors and owners who can see
 * it (a `proposal` event). Every outcome that "becomes a proposal" goes through here.
 */
export async function insertProposal(ctx: CoreContext, trx: Transaction<DB>, p: Principal, np: NewProposal): Promise<ProposalsTable> {
  const now = new Date();
  const row: ProposalsTable = {
    id: `pp_${ulid().toLowerCase()}`,
    workspace_id: p.workspaceId,
    status: 'open',
    kind: np.kind,
    origin: np.origin,
    page_id: np.pageId,
    path: np.path,
    content: np.content,
    base_hash: np.baseHash,
    base_commit: np.baseCommit,
    params: JSON.stringify(np.params ?? {}),
    reason: np.reason,
    sensitivity: np.sensitivity,
    proposer_id: p.id,
    created_at: now.toISOString(),
    decided_by: null,
    decided_at: null,
    decision_reason: null,
    result_commit: null,
    superseded_by: null,
  };
  // A newer proposal by the same principal for the same page replaces the older ones.
  let older = trx
    .updateTable('proposals')
    .set({ status: 'superseded', superseded_by: row.id, decided_at: row.created_at })
    .where('workspace_id', '=', p.workspaceId)
    .where('proposer_id', '=', p.id)
    .where('status', '=', 'open');
  older = np.pageId ? older.where('page_id', '=', np.pageId) : older.where('page_id', 'is', null).where('path', '=', np.path);
  await older.execute();
  await trx.insertInto('proposals').values(row).execute();
  await appendAudit(trx, p.workspaceId, {
    principalId: p.id,
    action: 'proposal.create',
    pageId: np.pageId,
    detail: { proposal: row.id, kind: np.kind, origin: np.origin, path: np.path },
  });

  const deciders = await liveMembers(trx, p.workspaceId)
    .select(['members.principal_id', 'members.role'])
    .where('members.role', 'in', ['owner', 'editor'])
    .execute();
  const events: NewEvent[] = deciders
    .filter((d) => d.principal_id !== p.id && atOrBelow(np.sensitivity, ROLE_CEILING[d.role as Role]))
    .map((d) => ({
      principalId: d.principal_id,
      kind: 'proposal' as const,
      pageId: np.pageId,
      proposalId: row.id,
      payload: {
        proposal_id: row.id,
        event: 'created',
        kind: np.kind,
        origin: np.origin,
        path: np.path,
        proposer: { id: p.id, name: p.name, kind: p.kind },
        reason: np.reason,
      },
    }));
  await pushEvents(ctx, trx, p.workspaceId, events, now);
  return row;
}

/** Supersedes every open proposal on a page (the page was deleted). */
export async function supersedeForPage(trx: Transaction<DB>, workspaceId: string, pageId: string, at: string): Promise<void> {
  await trx
    .updateTable('proposals')
    .set({ status: 'superseded', decided_at: at, decision_reason: 'page deleted' })
    .where('workspace_id', '=', workspaceId)
    .where('page_id', '=', pageId)
    .where('status', '=', 'open')
    .execute();
}

export { canSeeProposal };
