import { z } from 'zod';
import { listConnections, revokeConnection } from '../../auth/oauth/tokens.js';
import type { CoreContext } from '../../core/context.js';
import { caller } from '../shared/caller.js';
import { errors, route, type RestApp } from '../shared/schemas.js';
import { Timestamp } from '../schemas.js';

const ConnectionSchema = z.object({
  id: z.string().describe('The connection (one consent); DELETE it to disconnect'),
  client_id: z.string(),
  client_name: z.string(),
  client_from: z.string().nullable().describe("For a client identified by its metadata document URL: that URL's host, which is what vouches for it"),
  redirect_hosts: z.array(z.string()),
  resource: z.string().describe('The MCP endpoint its tokens are bound to'),
  created_at: Timestamp,
  last_used_at: Timestamp.nullable(),
});

/** The applications a person connected over OAuth (issue 14), in the current workspace. */
export async function oauthClientRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  const session = { config: { auth: 'session' as const } };

  r.get(
    '/me/oauth-clients',
    route(
      ['identity'],
      'Applications you connected over OAuth in this workspace',
      {
        response: { 200: z.object({ clients: z.array(ConnectionSchema) }), ...errors(401, 403) },
      },
      session.config,
    ),
    async (req) => ({ clients: await listConnections(ctx, caller(req)) }),
  );

  r.delete(
    '/me/oauth-clients/:id',
    route(
      ['identity'],
      'Disconnect an application: every token of that connection stops working at once',
      {
        params: z.object({ id: z.string().min(1).max(100) }),
        response: { 200: z.object({ id: z.string(), revoked: z.literal(true) }), ...errors(401, 403, 404) },
      },
      session.config,
    ),
    async (req) => {
      await revokeConnection(ctx, caller(req), req.params.id);
      return { id: req.params.id, revoked: true as const };
    },
  );
}
