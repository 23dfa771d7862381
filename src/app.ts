import fastifyCookie from '@fastify/cookie';
import fastifySwagger from '@fastify/swagger';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { jsonSchemaTransform, serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import type { CoreContext } from './core/context.js';
import { notFound, ServiceError } from './core/errors.js';
import { authFace } from './http/auth-face.js';
import { trustProxyOption } from './http/client-ip.js';
import { healthFace } from './http/health-face.js';
import { registerHostCheck } from './http/hosts.js';
import { registerRateLimits } from './http/limits.js';
import { replySerializer, requestSerializer } from './http/log-redact.js';
import { registerMetrics } from './http/metrics.js';
import { openRateLimitStore } from './store/rate-limits.js';
import { restFace } from './http/rest-face.js';
import { decoratePrincipal } from './http/shared/caller.js';
import { errorBody, sendError, toServiceError, UNAVAILABLE_RETRY_S } from './http/shared/errors.js';
import { gitFace } from './git/face.js';
import { mcpFace } from './mcp/face.js';
import { oauthFace } from './oauth/face.js';
import { VERSION } from './version.js';
import { webFace } from './web/face.js';

/** Request bodies above this are refused before parsing; page content has its own 1 MiB limit. */
export const BODY_LIMIT = 3 * 1024 * 1024;

declare module 'fastify' {
  interface FastifyInstance {
    /** `METHOD /path` of every route, for the OpenAPI completeness test and operators. */
    routeList: string[];
    /** The core every face calls: decorated once on the root, read by each face when it is registered. */
    ctx: CoreContext;
    /** True once shutdown began (SIGTERM): /readyz says unavailable, every other request gets 503. */
    isDraining(): boolean;
  }
}

export interface AppOptions {
  logger?: boolean | { level: string; stream?: { write(line: string): void } };
}

/** A 503 body in the shape of the face `req` reached (docs/errors.md), for an answer replaced on its way out. */
function unavailableBody(req: FastifyRequest, reply: FastifyReply, message: string): string {
  const path = req.url.split('?')[0]!;
  if (path === '/mcp' || /^\/w\/[^/]+\/mcp$/.test(path)) {
    reply.type('application/json; charset=utf-8');
    return JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: `unavailable: ${message}` }, id: null });
  }
  if (path.startsWith('/git/')) {
    reply.type('text/plain; charset=utf-8');
    return `${message}\n`;
  }
  if (!path.startsWith('/api/') && /\btext\/html\b/i.test(req.headers.accept ?? '')) {
    reply.type('text/html; charset=utf-8');
    return '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Unavailable</title></head><body><main><h1>Unavailable</h1><p role="alert">This node cannot store changes safely right now. Please try again later.</p></main></body></html>';
  }
  reply.type('application/json; charset=utf-8');
  return JSON.stringify(errorBody(new ServiceError(503, 'unavailable', message)));
}

/** Builds the HTTP application from its faces; app.ts only wires. */
export async function buildApp(ctx: CoreContext, opts: AppOptions = {}): Promise<FastifyInstance> {
  const app = Fastify({
    // Secrets in URLs (invite tokens) never reach the request log; its end line names the caller.
    logger:
      opts.logger === false
        ? false
        : {
            level: ctx.config.logLevel,
            ...(typeof opts.logger === 'object' ? opts.logger : {}),
            serializers: { req: requestSerializer, res: replySerializer },
          },
    bodyLimit: BODY_LIMIT,
    // TRUST_PROXY: req.ip / host / protocol from the one proxy in front (see client-ip.ts).
    trustProxy: trustProxyOption(ctx.config.trustProxy),
    // Page paths travel URL-encoded in :id; keep params decoded but refuse nothing valid.
    routerOptions: { maxParamLength: 1000 },
    // A request that reaches a closing node gets the service's own 503 (below), not Fastify's body.
    return503OnClosing: false,
  });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);

  const routeList: string[] = [];
  app.decorate('routeList', routeList);
  app.addHook('onRoute', (r) => {
    for (const m of [r.method].flat()) if (m !== 'HEAD') routeList.push(`${m} ${r.url}`);
  });

  let closing = false;
  app.decorate('isDraining', () => closing);
  // A callback hook, not an async one: it runs on every request and usually has nothing to wait for.
  app.addHook('onRequest', (req, reply, done) => {
    // Every answer says what it is: no browser may sniff page markdown (or anything) into HTML.
    reply.header('X-Content-Type-Options', 'nosniff');
    // Draining (SIGTERM): a request that still reaches the node is refused in the service's
    // shape (JSON-RPC on /mcp), with Retry-After; a proxy or client sends it to another node.
    // /readyz answers itself: 503 in its own shape, which is what a load balancer reads.
    if (closing && req.routeOptions.url !== '/readyz') {
      reply.header('Retry-After', String(UNAVAILABLE_RETRY_S));
      done(new ServiceError(503, 'unavailable', 'This node is shutting down; try again (another node may answer)'));
      return;
    }
    // A node whose log could not be synced (wal-sync.ts) answers nothing but 503, likewise.
    const failed = ctx.store.syncFailure();
    if (failed && req.routeOptions.url !== '/readyz') {
      reply.header('Retry-After', String(UNAVAILABLE_RETRY_S));
      done(new ServiceError(503, 'unavailable', failed.message));
      return;
    }
    done();
  });
  app.addHook('preClose', async () => {
    closing = true;
  });
  // Group commit (SQLite): no answer leaves before every write committed ahead of it is on
  // disk, so a reader never sees, and acts on, a write that a power cut could still take back.
  // Writes wait in inTransaction already; this covers writes made outside one (sessions) and
  // reads that saw a commit still syncing. Nothing pending (the usual case): no wait at all.
  app.addHook('onSend', (req, reply, payload, done) => {
    if (!ctx.store.syncPending()) {
      done(null, payload);
      return;
    }
    ctx.store.durable().then(
      () => done(null, payload),
      (e: unknown) => {
        // An error answer holds no data: it goes as it is.
        if (reply.statusCode >= 400) {
          done(null, payload);
          return;
        }
        // The log could not be synced: what this answer says may not be on disk. It is replaced
        // here, not thrown (an error would come back through this hook), in its face's shape.
        if (payload && typeof (payload as { destroy?: unknown }).destroy === 'function') (payload as { destroy(): void }).destroy();
        const message = e instanceof Error ? e.message : 'The store cannot make writes durable';
        reply.removeHeader('content-length');
        reply.code(503).header('Retry-After', String(UNAVAILABLE_RETRY_S));
        done(null, unavailableBody(req, reply, message));
      },
    );
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
  app.decorate('ctx', ctx);
  decoratePrincipal(app);

  // Hooks of every URL, unknown ones included. Order matters: host check, then per-IP limits,
  // then (inside the faces) who is calling, then per-principal limits (preParsing). The limits
  // stay here, not in the faces: their buckets are keyed by URL so that unknown routes and faces
  // not built yet (git, OAuth) are counted too, and /mcp shares the /api/v1 bucket.
  registerHostCheck(app, ctx.config);
  registerRateLimits(app, ctx, {
    store: ctx.config.rateLimits.enabled
      ? openRateLimitStore({ dialect: ctx.store.dialect, dataDir: ctx.config.dataDir, databaseUrl: ctx.config.databaseUrl })
      : undefined,
  });

  // GET /metrics (when METRICS_TOKEN is set) and the hook that counts every request, unknown ones too.
  registerMetrics(app, ctx);

  // The faces, each an encapsulated plugin: its hooks, parsers and error handler stay inside it.
  // The order is the order of the OpenAPI document.
  await app.register(healthFace);
  await app.register(authFace);
  await app.register(restFace, { prefix: '/api/v1' });
  await app.register(webFace);
  await app.register(mcpFace);
  await app.register(oauthFace);
  await app.register(gitFace);
  return app;
}
