import { z } from 'zod';
import { PageRef } from '../../core/pages/input.js';
import { ProposalReason } from '../../core/proposals/input.js';
import { listProposals, PROPOSAL_STATUSES, withdrawProposal } from '../../core/proposals/service.js';
import { getThread } from '../../core/threads.js';
import { threadAfter } from '../../core/thread-input.js';
import { proposalStatusView } from '../../presenters/extended.js';
import { tool, type ToolDef } from './define.js';

/**
 * The extended toolset's collaboration calls (issue 13, beyond the spec): a thread's messages,
 * the caller's own proposals, and withdrawing one. Same core functions as REST
 * (GET /nodes/:id/threads, GET /proposals, POST /proposals/:id/withdraw).
 */

export const EXTENDED_COLLAB_TOOLS: ToolDef[] = [
  tool({
    name: 'collab_thread',
    description: "A page's thread: messages in order (after a seq, to page on), whether it is locked, and your unread count.",
    schema: z.strictObject({
      node: PageRef.describe('Page id or path'),
      after: threadAfter(z.number()).describe('Only messages with a greater seq (next_after of the previous call)'),
      limit: z.number().int().min(1).max(500).default(50),
    }),
    grants: ['read'],
    readOnly: true,
    run: async (a, { ctx, p }) => getThread(ctx, p, a.node, { after: a.after, limit: a.limit }),
  }),
  tool({
    name: 'context_proposals',
    description: 'Your own proposals, newest first, with their status (open, accepted, rejected, superseded) and outcome. A withdrawn one is rejected by you.',
    schema: z.strictObject({
      status: z.enum(PROPOSAL_STATUSES).optional(),
      limit: z.number().int().min(1).max(200).default(20),
      cursor: z.string().min(1).max(200).optional().describe('next_cursor of the previous call'),
    }),
    grants: ['propose', 'write'],
    readOnly: true,
    run: async (a, { ctx, p }) => {
      const r = await listProposals(ctx, p, { status: a.status, limit: a.limit, cursor: a.cursor, mine: true });
      return { proposals: r.proposals.map(proposalStatusView), next_cursor: r.next_cursor };
    },
  }),
  tool({
    name: 'context_withdraw',
    description: 'Withdraw one of your own open proposals (it is then rejected, by you, and no longer waits for review).',
    schema: z.strictObject({ id: z.string().min(1).max(100).describe('Proposal id (pp_…)'), reason: ProposalReason.optional() }),
    grants: ['propose', 'write'],
    readOnly: false,
    run: async (a, { ctx, p }) => proposalStatusView(await withdrawProposal(ctx, p, a.id, a.reason)),
  }),
];
