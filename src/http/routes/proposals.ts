import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { BODY_PATH_MAX_CHARS } from '../../core/pages/input.js';
import { PROPOSAL_REASON_MAX_CHARS, ProposalReason } from '../../core/proposals/input.js';
import {
  acceptProposal,
  createProposal,
  getProposal,
  listProposals,
  PROPOSAL_STATUSES,
  rejectProposal,
  withdrawProposal,
} from '../../core/proposals/service.js';
import { caller } from '../shared/caller.js';
import { IdParams, ProposalSchema } from '../schemas.js';
import { errors, optionalBody, route, type RestApp } from '../shared/schemas.js';

export async function proposalRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  const tags = ['proposals'];

  r.get(
    '/proposals',
    route(tags, 'Proposals you can see, newest first', {
      querystring: z.object({
        status: z.enum(PROPOSAL_STATUSES).optional(),
        limit: z.coerce.number().int().min(1).max(200).default(50),
        cursor: z.string().min(1).max(200).optional().describe('next_cursor of the previous page'),
      }),
      response: {
        200: z.object({
          proposals: z.array(ProposalSchema),
          next_cursor: z.string().nullable().describe('Pass as cursor for the next page; null on the last'),
        }),
        ...errors(400, 401),
      },
    }),
    async (req) => listProposals(ctx, caller(req), req.query),
  );

  r.post(
    '/proposals',
    route(tags, 'Propose a change for human review (propose grant): an edit of a page, or a new page at a free path', {
      body: z
        .strictObject({
          path: z.string().max(BODY_PATH_MAX_CHARS).optional(),
          node_id: z.string().max(100).optional(),
          content: z.string(),
          reason: ProposalReason.optional(),
          base_sha: z
            .string()
            .regex(/^[0-9a-fA-F]{40}$/, 'a 40-hex content_hash or commit_sha')
            .optional()
            .describe('The content_hash or commit_sha of the version you read; accepting merges from it. Without it, the page as it is now'),
        })
        .refine((b) => b.path !== undefined || b.node_id !== undefined, { message: 'Name the page: path or node_id' }),
      response: { 201: ProposalSchema, ...errors(400, 401, 403, 404, 413) },
    }),
    async (req, reply) => reply.code(201).send(await createProposal(ctx, caller(req), req.body)),
  );

  r.get(
    '/proposals/:id',
    route(tags, 'One proposal; the proposed content is shown to humans only', {
      params: IdParams,
      response: { 200: ProposalSchema, ...errors(401, 404) },
    }),
    async (req) => getProposal(ctx, caller(req), req.params.id),
  );

  r.post(
    '/proposals/:id/accept',
    route(
      tags,
      'Accept (editor or owner): applied as a commit credited to the proposer, optionally with edited content',
      {
        params: IdParams,
        body: optionalBody(z.strictObject({ content: z.string().optional() })),
        response: { 200: ProposalSchema, ...errors(400, 401, 403, 404, 409) },
      },
      { auth: 'session' },
    ),
    async (req) => acceptProposal(ctx, caller(req), req.params.id, req.body),
  );

  r.post(
    '/proposals/:id/reject',
    route(
      tags,
      'Reject with a reason (editor or owner)',
      {
        params: IdParams,
        body: z.strictObject({ reason: z.string().trim().min(1).max(PROPOSAL_REASON_MAX_CHARS) }),
        response: { 200: ProposalSchema, ...errors(400, 401, 403, 404, 409) },
      },
      { auth: 'session' },
    ),
    async (req) => rejectProposal(ctx, caller(req), req.params.id, req.body.reason),
  );

  r.post(
    '/proposals/:id/withdraw',
    route(tags, 'Withdraw your own open proposal (beyond the spec: it becomes rejected, decided by you, reason "Withdrawn by its author")', {
      params: IdParams,
      body: optionalBody(z.strictObject({ reason: ProposalReason.optional() })),
      response: { 200: ProposalSchema, ...errors(400, 401, 403, 404, 409) },
    }),
    async (req) => withdrawProposal(ctx, caller(req), req.params.id, req.body.reason),
  );
}
