import { z } from 'zod';

/**
 * The inputs of proposals, shared by REST (`POST /proposals`, `/proposals/:id/reject`) and the
 * MCP tool `context_propose`. The two faces name the page differently (REST `path`/`node_id`,
 * MCP `path`/`id`) and take a different base (REST a full 40-hex sha, MCP a prefix): they share
 * the reason and its limit.
 */

export const PROPOSAL_REASON_MAX_CHARS = 2000;
/** Why the proposer proposes, or why a reviewer rejects. */
export const ProposalReason = z.string().max(PROPOSAL_REASON_MAX_CHARS);
