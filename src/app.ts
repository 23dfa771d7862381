import fastifyCookie from '@fastify/cookie';
import fastifySwagger from '@fastify/swagger';
import { requestSerializer } from './http/log-redact.js';
import Fastify, { type FastifyInstance } from 'fastify';
import { jsonSchemaTransform, serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import type { CoreContext } from './core/context.js';
import { notFound } from './core/errors.js';
import { registerAuth } from './http/auth.js';
import { trustProxyOption } from './http/client-ip.js';
import { registerHostCheck } from './http/hosts.js';
import { registerRateLimits } from './http/limits.js';
import { sendError, toServiceError } from './http/errors.js';
import { authRoutes } from './http/routes/auth.js';
import { healthRoutes } from './http/routes/health.js';
import { inboxRoutes } from './http/routes/inbox.js';
import { meRoutes } from './http/routes/me.js';
import { nodeRoutes } from './http/routes/nodes.js';
import { principalRoutes } from './http/routes/principals.js';
import { proposalRoutes } from './http/routes/proposals.js';
import { retrievalRoutes } from './http/routes/retrieval.js';
import { securityRoutes } from './http/routes/security.js';
import { spaceRoutes } from './http/routes/spaces.js';
import { threadRoutes } from './http/routes/threads.js';
import { workspaceRoutes } from './http/routes/workspaces.js';
import { mcpRoutes } from './mcp/index.js';
import { VERSION } from './version.js';
import { webPages } from './web/pages.js';

/** Request bodies above this are refused before parsing; page content has its own 1 MiB limit. */
export const BODY_LIMIT = 3 * 1024 * 1024;

declare module 'fastify' {
  interface FastifyInstance {
    /** `METHOD /path` of every route, for the OpenAPI completeness test and operators. */
    routeList: string[];
  }
}

export interface AppOptions {
  logger?: boolean | { level: string; stream?: { write(line: string): void } };
}

/** Builds the HTTP application from its faces; app.ts only wires. */
export async function buildApp(ctx: CoreContext, opts: AppOptions = {}): Promise<FastifyInstance> {
  const app = Fastify({
    // Secrets in URLs (invite tokens) never reach the request log.
    logger: opts.logger === false ? false : { level: ctx.config.logLevel, ...(typeof opts.logger === 'object' ? opts.logger : {}), serializers: { req: requestSerializer } },
    bodyLimit: BODY_LIMIT,
    // TRUST_PROXY: req.ip / host / protocol from the one proxy in front (see client-ip.ts).
    trustProxy: trustProxyOption(ctx.config.trustProxy),
    // Page paths travel URL-encoded in :id; keep params decoded but refuse nothing valid.
    routerOptions: { maxParamLength: 1000 },
  });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);

  const routeList: string[] = [];
  app.decorate('routeList', routeList);
  app.addHook('onRoute', (r) => {
    for (const m of [r.method].flat()) if (m !== 'HEAD') routeList.push(`${m} ${r.url}`);
  });

  // Every answer says what it is: no browser may sniff page markdown (or anything) into HTML.
  app.addHook('onRequest', async (_req, reply) => {
    reply.header('X-Content-Type-Options', 'nosniff');
  });

  app.setErrorHandler((err, req, reply) => sendError(reply, toServiceError(err, req)));
  app.setNotFoundHandler((req, reply) => sendError(reply, notFound(`No route ${req.method} ${req.url.split('?')[0]}`)));

  await app.register(fastifyCookie);
  await app.register(fastifySwagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Context Vault', version: VERSION, description: 'Versioned markdown pages shared by humans and agents.' },
      servers: [{ url: ctx.config.publicUrl }],
      components: {
        securitySchemes: {
          agentKey: { type: 'http', scheme: 'bearer', description: 'Agent key ak_…' },
          session: { type: 'apiKey', in: 'cookie', name: 'svc_session', description: 'Web session; unsafe methods also need X-CSRF-Token' },
        },
      },
      security: [{ agentKey: [] }, { session: [] }],
    },
    transform: jsonSchemaTransform,
  });
  // Order matters: host check, then per-IP limits, then who is calling (per-principal limits follow it).
  registerHostCheck(app, ctx.config);
  registerRateLimits(app, ctx);
  registerAuth(app, ctx);

  await healthRoutes(app, ctx);
  await authRoutes(app, ctx);
  await meRoutes(app, ctx);
  await principalRoutes(app, ctx);
  await securityRoutes(app, ctx);
  await spaceRoutes(app, ctx);
  await nodeRoutes(app, ctx);
  await retrievalRoutes(app, ctx);
  await proposalRoutes(app, ctx);
  await threadRoutes(app, ctx);
  await inboxRoutes(app, ctx);
  await workspaceRoutes(app, ctx);
  await webPages(app, ctx);
  await mcpRoutes(app, ctx);

  app.get('/api/v1/openapi.json', { config: { auth: 'public' }, schema: { hide: true } }, async () => app.swagger());
  return app;
}
