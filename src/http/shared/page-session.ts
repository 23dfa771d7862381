import type { FastifyRequest } from 'fastify';
import { authenticate } from '../../auth/resolve.js';
import { CSRF_COOKIE, SESSION_COOKIE } from '../../auth/sessions.js';
import type { CoreContext } from '../../core/context.js';
import { forbidden, isServiceError, unauthorized, type ServiceError } from '../../core/errors.js';
import type { Principal } from '../../policy/principal.js';

/**
 * The session behind an HTML page (the web face's pages, the OAuth consent page). A form cannot
 * send the X-CSRF-Token header, so its hidden `csrf` field goes to `authenticate()` as the header
 * would: it must equal the session's own token and the `svc_csrf` cookie.
 */
export interface PageSessionOptions {
  /** The form's `csrf` field (checked when `unsafe`). */
  csrf?: string | undefined;
  unsafe: boolean;
  /** A session still waiting for its second factor counts (the TOTP step). */
  allowPending?: boolean;
  /** The workspace to act in (id or slug); the session's own when absent. */
  workspace?: string | undefined;
}

export type PageSession = { ok: true; p: Principal } | { ok: false; error: ServiceError };

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/**
 * A form posted from another site (defence in depth behind the token and SameSite=Lax): the
 * browser says so in Sec-Fetch-Site, or in Origin when it names a real origin other than this
 * one. Origin "null" proves nothing (a form of this site sends it under Referrer-Policy:
 * no-referrer), so the token decides then. Only unsafe methods: a link from elsewhere still opens a page.
 */
function fromAnotherSite(ctx: CoreContext, req: FastifyRequest): boolean {
  if (req.method === 'GET' || req.method === 'HEAD') return false;
  const site = headerValue(req.headers['sec-fetch-site']);
  if (site === 'cross-site' || site === 'same-site') return true;
  const origin = headerValue(req.headers.origin);
  if (!origin || origin === 'null') return false;
  try {
    const host = new URL(origin).host;
    return host !== req.host.toLowerCase() && host !== new URL(ctx.config.publicUrl).host;
  } catch {
    return true;
  }
}

export async function resolvePageSession(ctx: CoreContext, req: FastifyRequest, o: PageSessionOptions): Promise<PageSession> {
  if (!req.cookies[SESSION_COOKIE]) return { ok: false, error: unauthorized() };
  if (o.unsafe && fromAnotherSite(ctx, req)) {
    return { ok: false, error: forbidden('This form was sent from another site; go back to this site and send it again', 'csrf_failed') };
  }
  try {
    const p = await authenticate(ctx, {
      // Only the session cookie counts here: HTML forms never carry agent keys.
      authorization: undefined,
      sessionToken: req.cookies[SESSION_COOKIE],
      csrfHeader: o.csrf,
      csrfCookie: req.cookies[CSRF_COOKIE],
      unsafe: o.unsafe,
      ip: req.ip,
      workspace: o.workspace,
      allowPending: o.allowPending ?? false,
    });
    // The request log line names who it was (by id), as on every face.
    req.principal = p;
    return { ok: true, p };
  } catch (err) {
    if (isServiceError(err)) return { ok: false, error: err };
    throw err;
  }
}
