import type { FastifyInstance, FastifyRequest } from 'fastify';
import { authenticateAndPrefetch, type Authenticated } from '../../auth/resolve.js';
import { isPageId } from '../../retrieval/lookup.js';
import { CSRF_COOKIE, SESSION_COOKIE } from '../../auth/sessions.js';
import type { CoreContext } from '../../core/context.js';
import { forbidden, unauthorized } from '../../core/errors.js';
import type { Principal } from '../../policy/principal.js';

/**
 * Who may call a route: `public` (nobody checked), `session` (a signed-in human),
 * `pending` (a human session, even one still waiting for its second factor), or
 * `principal` (a human session or an agent key). Declared per route in `config.auth`; read by
 * the caller hook of the faces that add it (REST and /api/auth). The MCP and HTML faces resolve
 * their callers themselves and declare their routes `public` to this hook.
 */
export type RouteAuth = 'public' | 'session' | 'pending' | 'principal';

declare module 'fastify' {
  interface FastifyRequest {
    /** The caller, once a face's hook has resolved it (null on public and unknown routes). */
    principal: Principal | null;
    /** The page a `prefetch: 'page'` route reads, read with the caller's key (undefined: not read). */
    prefetchedPage: Authenticated['page'];
  }
  interface FastifyContextConfig {
    auth?: RouteAuth;
    /** `page`: the route reads the page `:id`; the caller's key may read it in the same statement. */
    prefetch?: 'page';
  }
}

const UNSAFE = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/** Declared once on the root instance: every face and the per-principal limits read `req.principal`. */
export function decoratePrincipal(app: FastifyInstance): void {
  app.decorateRequest('principal', null);
  app.decorateRequest('prefetchedPage', undefined);
}

/**
 * The caller hook of the JSON faces: resolves the session cookie (with its CSRF check on unsafe
 * methods) or the agent key on every non-public route of `face`, before the body is even parsed.
 * Routes default to `principal`. Add it before the face's routes.
 */
export function addCallerHook(face: FastifyInstance, ctx: CoreContext): void {
  face.addHook('onRequest', async (req) => {
    const mode = req.routeOptions.config.auth ?? 'principal';
    // An unknown route is 404 for everyone; asking for credentials first would mislead. (The
    // root's not-found handler answers those without this hook; the guard covers a face that
    // sets its own.)
    if (mode === 'public' || req.is404) return;
    const query = req.query as Record<string, unknown> | undefined;
    const params = req.params as Record<string, unknown> | undefined;
    const prefetch = req.routeOptions.config.prefetch === 'page' && typeof params?.id === 'string' && query?.at === undefined ? params.id : undefined;
    const { principal, page } = await authenticateAndPrefetch(ctx, {
      authorization: headerValue(req.headers.authorization),
      sessionToken: req.cookies[SESSION_COOKIE],
      csrfHeader: headerValue(req.headers['x-csrf-token']),
      csrfCookie: req.cookies[CSRF_COOKIE],
      unsafe: UNSAFE.has(req.method),
      ip: req.ip,
      workspace: headerValue(req.headers['x-service-workspace']) ?? (typeof query?.workspace === 'string' ? query.workspace : undefined),
      allowPending: mode === 'pending',
      prefetchPage: prefetch !== undefined && isPageId(prefetch) ? prefetch : undefined,
    });
    if ((mode === 'session' || mode === 'pending') && principal.via !== 'session')
      throw forbidden('This needs a signed-in human (web session)', 'session_required');
    req.principal = principal;
    req.prefetchedPage = page;
  });
}

/** The authenticated caller of a non-public route. */
export function caller(req: FastifyRequest): Principal {
  if (!req.principal) throw unauthorized();
  return req.principal;
}
