import { z } from 'zod';
import { updateDisplayName } from '../../core/accounts.js';
import type { CoreContext } from '../../core/context.js';
import { describeCaller } from '../../core/identity.js';
import { meView, whoamiView } from '../../presenters/identity.js';
import { caller } from '../shared/caller.js';
import { GrantSchema } from '../schemas.js';
import { errors, route, type RestApp } from '../shared/schemas.js';

const Grants = z.array(GrantSchema.extend({ ceiling: z.string() }));

export async function meRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  r.get(
    '/me',
    route(['identity'], 'You: humans get email, role and totp; agents get their grants', {
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
    }),
    async (req) => meView(await describeCaller(ctx, caller(req), { account: true })),
  );

  r.patch(
    '/me',
    route(
      ['identity'],
      'Change your display name (1 to 100 characters)',
      {
        body: z.strictObject({ name: z.string().trim().min(1).max(100) }),
        response: { 200: z.object({ id: z.string(), name: z.string() }), ...errors(400, 401, 403) },
      },
      { auth: 'session' },
    ),
    async (req) => updateDisplayName(ctx, caller(req), req.body.name),
  );

  r.get(
    '/whoami',
    route(['identity'], 'Identity, workspace, role, how you authenticated, and grants', {
      response: {
        200: z.object({
          id: z.string(),
          name: z.string(),
          kind: z.enum(['human', 'agent']),
          workspace: z.object({ id: z.string(), slug: z.string() }),
          role: z.string().nullable(),
          via: z.enum(['session', 'key', 'oauth', 'git']),
          ceiling: z.string(),
          grants: Grants,
        }),
        ...errors(401),
      },
    }),
    async (req) => whoamiView(await describeCaller(ctx, caller(req))),
  );
}
