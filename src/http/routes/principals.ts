import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import {
  adoptAgent,
  createAgent,
  deleteAgent,
  getAgent,
  getGrants,
  KEY_MAX_DAYS,
  listKeys,
  listPrincipals,
  mintKey,
  replaceGrants,
  revokeKey,
} from '../../core/principals.js';
import { caller } from '../shared/caller.js';
import { AgentSchema, GrantSchema, IdParams, KeySchema, Level, PrincipalSummarySchema, RecordId, RevokedSchema } from '../schemas.js';
import { errors, route, type RestApp } from '../shared/schemas.js';

const GrantsOut = z.object({ grants: z.array(z.object({ action: z.string(), scope: z.string(), ceiling: z.string() })) });

export async function principalRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  const tags = ['agents'];

  r.get(
    '/principals',
    route(tags, 'Humans and agents of the workspace (agents see id, name, kind only)', {
      response: { 200: z.object({ principals: z.array(PrincipalSummarySchema) }), ...errors(401) },
    }),
    async (req) => ({ principals: await listPrincipals(ctx, caller(req)) }),
  );

  r.post(
    '/principals',
    route(
      tags,
      'Create an agent; grants never exceed your role',
      {
        body: z.strictObject({
          name: z.string().trim().min(1).max(100),
          grants: z.array(GrantSchema).max(100).default([]),
          ceiling: Level.default('internal'),
        }),
        response: { 201: AgentSchema, ...errors(400, 401, 403) },
      },
      { auth: 'session' },
    ),
    async (req, reply) => reply.code(201).send(await createAgent(ctx, caller(req), req.body)),
  );

  r.get(
    '/principals/:id',
    { schema: { tags, summary: 'One agent', params: IdParams, response: { 200: z.union([AgentSchema, PrincipalSummarySchema]), ...errors(401, 404) } } },
    async (req) => getAgent(ctx, caller(req), req.params.id),
  );

  r.delete(
    '/principals/:id',
    route(
      tags,
      'Delete an agent (creator or owner); its keys die at once',
      {
        params: IdParams,
        response: { 200: z.object({ deleted: z.literal(true), id: z.string() }), ...errors(401, 403, 404) },
      },
      { auth: 'session' },
    ),
    async (req) => {
      await deleteAgent(ctx, caller(req), req.params.id);
      return { deleted: true as const, id: req.params.id };
    },
  );

  r.post(
    '/principals/:id/adopt',
    route(
      tags,
      'An owner takes custody of an agent: becomes its creator, caps its grants to their role, and ends a suspension',
      {
        params: IdParams,
        response: { 200: AgentSchema, ...errors(401, 403, 404) },
      },
      { auth: 'session' },
    ),
    async (req) => adoptAgent(ctx, caller(req), req.params.id),
  );

  r.get(
    '/principals/:id/grants',
    { schema: { tags, summary: "An agent's grants", params: IdParams, response: { 200: GrantsOut, ...errors(401, 403, 404) } } },
    async (req) => ({ grants: await getGrants(ctx, caller(req), req.params.id) }),
  );

  r.put(
    '/principals/:id/grants',
    route(
      tags,
      "Replace an agent's grants (creator or owner); never above your role ceiling",
      {
        params: IdParams,
        body: z.strictObject({ grants: z.array(GrantSchema).max(100) }),
        response: { 200: GrantsOut, ...errors(400, 401, 403, 404) },
      },
      { auth: 'session' },
    ),
    async (req) => ({ grants: await replaceGrants(ctx, caller(req), req.params.id, req.body.grants) }),
  );

  r.get(
    '/principals/:id/tokens',
    route(
      tags,
      "An agent's keys, hints only",
      {
        params: IdParams,
        response: { 200: z.object({ tokens: z.array(KeySchema) }), ...errors(401, 403, 404) },
      },
      { auth: 'session' },
    ),
    async (req) => ({ tokens: await listKeys(ctx, caller(req), req.params.id) }),
  );

  r.post(
    '/principals/:id/tokens',
    route(
      tags,
      'Mint an agent key; the secret is in this response only',
      {
        params: IdParams,
        body: z.strictObject({
          name: z.string().trim().min(1).max(100).default('key'),
          expires_in_days: z.number().int().min(1).max(KEY_MAX_DAYS).nullable().optional(),
          ip_pin: z.string().max(64).nullable().optional(),
          ceiling: Level.nullable().optional(),
        }),
        response: { 201: KeySchema.extend({ key: z.string().describe('ak_… — shown once') }), ...errors(400, 401, 403, 404) },
      },
      { auth: 'session' },
    ),
    async (req, reply) => reply.code(201).send(await mintKey(ctx, caller(req), req.params.id, req.body)),
  );

  r.delete(
    '/principals/:id/tokens/:tid',
    route(
      tags,
      'Revoke a key, effective immediately',
      {
        params: IdParams.extend({ tid: RecordId }),
        response: { 200: RevokedSchema, ...errors(401, 403, 404) },
      },
      { auth: 'session' },
    ),
    async (req) => {
      await revokeKey(ctx, caller(req), req.params.id, req.params.tid);
      return { revoked: true as const, id: req.params.tid };
    },
  );
}
