import type { FastifyInstance } from 'fastify';
import { auditRoutes } from './routes/audit.js';
import { changeRoutes } from './routes/changes.js';
import { editRoutes } from './routes/edits.js';
import { folderRoutes } from './routes/folders.js';
import { inboxRoutes } from './routes/inbox.js';
import { lifecycleRoutes } from './routes/lifecycle.js';
import { importRoutes } from './routes/import.js';
import { logRoutes } from './routes/log.js';
import { meRoutes } from './routes/me.js';
import { nodeRoutes } from './routes/nodes.js';
import { oauthClientRoutes } from './routes/oauth-clients.js';
import { principalRoutes } from './routes/principals.js';
import { proposalRoutes } from './routes/proposals.js';
import { retrievalRoutes } from './routes/retrieval.js';
import { securityRoutes } from './routes/security.js';
import { spaceRoutes } from './routes/spaces.js';
import { threadRoutes } from './routes/threads.js';
import { watchRoutes } from './routes/watches.js';
import { workspaceRoutes } from './routes/workspaces.js';
import { addCallerHook } from './shared/caller.js';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';

/**
 * The REST face (spec §4): JSON under /api/v1, registered by app.ts with `{ prefix: '/api/v1' }`;
 * every route path here and in routes/ is relative to it. It owns its caller hook (session cookie
 * plus CSRF on unsafe methods, or an agent key, per route's `config.auth`). Host check, rate
 * limits, nosniff and the JSON error and 404 answers come from the root (app.ts): they apply to
 * unknown URLs under /api/v1 too. Route groups are added in the order the OpenAPI document lists
 * them.
 */
export async function restFace(face: FastifyInstance): Promise<void> {
  const ctx = face.ctx;
  addCallerHook(face, ctx);
  const r = face.withTypeProvider<ZodTypeProvider>();

  await meRoutes(r, ctx);
  await principalRoutes(r, ctx);
  await securityRoutes(r, ctx);
  await oauthClientRoutes(r, ctx);
  await spaceRoutes(r, ctx);
  await folderRoutes(r, ctx);
  await nodeRoutes(r, ctx);
  await retrievalRoutes(r, ctx);
  await proposalRoutes(r, ctx);
  await changeRoutes(r, ctx);
  await editRoutes(r, ctx);
  await threadRoutes(r, ctx);
  await inboxRoutes(r, ctx);
  await watchRoutes(r, ctx);
  await workspaceRoutes(r, ctx);
  await auditRoutes(r, ctx);
  await lifecycleRoutes(r, ctx);
  await logRoutes(r, ctx);
  await importRoutes(r, ctx);

  // The document covers every face (it is read when asked, so routes registered later are in it).
  face.get('/openapi.json', { config: { auth: 'public' }, schema: { hide: true } }, async () => face.swagger());
}
