import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { updateDisplayName } from '../../core/accounts.js';
import type { CoreContext } from '../../core/context.js';
import { baseCeiling } from '../../policy/access.js';
import { caller } from '../auth.js';
import { errors, GrantSchema } from '../schemas.js';

const Grants = z.array(GrantSchema.extend({ ceiling: z.string() }));

export async function meRoutes(app: FastifyInstance, ctx: CoreContext): Promise<void> {
  const r = app.withTypeProvider<ZodTypeProvider>();

  r.get(
    '/api/v1/me',
    {
      schema: {
        tags: ['identity'],
        summary: 'You: humans get email, role and totp; agents get their grants',
        response: {
          200: z.object({
            id: z.string(),
            kind: z.enum(['human', 'agent']),
            name: z.string(),
            email: z.string().optional(),
            role: z.string().optional(),
            totp: z.boolean().optional(),
            grants: Grants.optional(),
            ceiling: z.string().optional(),
            workspace: z.object({ id: z.string(), slug: z.string() }),
          }),
          ...errors(401),
        },
      },
    },
    async (req) => {
      const p = caller(req);
      const workspace = { id: p.workspaceId, slug: p.workspaceSlug };
      if (p.kind === 'human') {
        const who = await ctx.store.db.selectFrom('principals').select(['email', 'totp_enabled_at']).where('id', '=', p.id).executeTakeFirstOrThrow();
        return { id: p.id, kind: p.kind, name: p.name, email: who.email ?? '', role: p.role ?? 'viewer', totp: who.totp_enabled_at !== null, workspace };
      }
      return { id: p.id, kind: p.kind, name: p.name, grants: p.grants, ceiling: p.agentCeiling ?? 'internal', workspace };
    },
  );

  r.patch(
    '/api/v1/me',
    {
      config: { auth: 'session' },
      schema: {
        tags: ['identity'],
        summary: 'Change your display name (1 to 100 characters)',
        body: z.strictObject({ name: z.string().trim().min(1).max(100) }),
        response: { 200: z.object({ id: z.string(), name: z.string() }), ...errors(400, 401, 403) },
      },
    },
    async (req) => updateDisplayName(ctx, caller(req), req.body.name),
  );

  r.get(
    '/api/v1/whoami',
    {
      schema: {
        tags: ['identity'],
        summary: 'Identity, workspace, role, how you authenticated, and grants',
        response: {
          200: z.object({
            id: z.string(),
            name: z.string(),
            kind: z.enum(['human', 'agent']),
            workspace: z.object({ id: z.string(), slug: z.string() }),
            role: z.string().nullable(),
            via: z.enum(['session', 'key']),
            ceiling: z.string(),
            grants: Grants,
          }),
          ...errors(401),
        },
      },
    },
    async (req) => {
      const p = caller(req);
      return {
        id: p.id,
        name: p.name,
        kind: p.kind,
        workspace: { id: p.workspaceId, slug: p.workspaceSlug },
        role: p.role,
        via: p.via,
        ceiling: baseCeiling(p),
        grants: p.kind === 'human' ? [] : p.grants,
      };
    },
  );
}
