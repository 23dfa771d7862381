import type { ProposalRecord } from '../core/proposals/record.js';

/**
 * Proposals as each face shows them. One source: the proposal record core makes for the caller
 * (core/proposals/record.ts `presentProposal`: the content for humans only), which is the REST
 * answer of the `/proposals` routes as it is (`ProposalSchema`).
 */

/** A change the caller may only propose (REST 202 from a page route): `ProposedSchema`. */
export function proposedView(proposal: ProposalRecord | undefined) {
  return { proposed: true as const, proposal };
}

/** `context_propose`: the proposal's id, state and what it is based on. */
export function proposalToolView(pr: ProposalRecord) {
  return {
    proposal: { id: pr.id, status: pr.status, kind: pr.kind, path: pr.path, node_id: pr.node_id, base_hash: pr.base_hash, base_commit: pr.base_commit },
  };
}

/** An MCP change that became a proposal (context_archive without write): a success the agent can tell apart. */
export function proposedToolView(pr: ProposalRecord) {
  return { proposed: true as const, ...proposalToolView(pr) };
}
