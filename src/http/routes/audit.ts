import { z } from 'zod';
import { listAudit, verifyAudit } from '../../core/audit.js';
import { AuditQueryInput } from '../../core/audit-input.js';
import type { CoreContext } from '../../core/context.js';
import { auditPageView, auditVerifyView } from '../../presenters/audit.js';
import { Timestamp } from '../schemas.js';
import { caller } from '../shared/caller.js';
import { errors, route, type RestApp } from '../shared/schemas.js';

const AuditEntrySchema = z.object({
  seq: z.number().int().describe('Position in the workspace chain, from 1'),
  at: Timestamp,
  actor: z
    .object({ id: z.string(), kind: z.enum(['human', 'agent']).nullable(), name: z.string().nullable() })
    .nullable()
    .describe('Who acted; null for the service itself'),
  action: z.string().describe('What happened, e.g. page.update, agent.key.mint, workspace.lockdown'),
  target: z
    .object({ node_id: z.string().nullable(), path: z.string().nullable() })
    .nullable()
    .describe('The page and/or path the entry is about, when it is about one'),
  detail: z.record(z.string(), z.unknown()),
  prev_hash: z.string().describe('hash of the previous entry (64 zeros for the first)'),
  hash: z.string().describe('sha256 over prev_hash and this entry'),
});

const BrokenLinkSchema = z.object({ seq: z.number().int(), at: Timestamp, action: z.string() });

/** The hash-chained audit log (spec: GET /api/v1/audit, "S own"), and a walk that checks the chain. */
export async function auditRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  const tags = ['operations'];

  r.get(
    '/audit',
    route(
      tags,
      'Owner: the workspace audit log, newest first; filter by principal, action (exact or a prefix such as page.) and node',
      {
        querystring: AuditQueryInput,
        response: { 200: z.object({ items: z.array(AuditEntrySchema), next_cursor: z.string().nullable() }), ...errors(400, 401, 403) },
      },
      { auth: 'session' },
    ),
    async (req) => auditPageView(await listAudit(ctx, caller(req), req.query)),
  );

  r.get(
    '/audit/verify',
    route(
      tags,
      'Owner: walk the whole chain and name the first entry whose hashes do not follow from its predecessor',
      {
        response: {
          200: z.object({ ok: z.boolean(), entries: z.number().int(), first_broken: BrokenLinkSchema.nullable().describe('null when the chain is intact') }),
          ...errors(401, 403),
        },
      },
      { auth: 'session' },
    ),
    async (req) => auditVerifyView(await verifyAudit(ctx, caller(req))),
  );
}
