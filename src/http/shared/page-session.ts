import type { FastifyRequest } from 'fastify';
import { authenticate } from '../../auth/resolve.js';
import { CSRF_COOKIE, SESSION_COOKIE } from '../../auth/sessions.js';
import type { CoreContext } from '../../core/context.js';
import { isServiceError, unauthorized, type ServiceError } from '../../core/errors.js';
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

export async function resolvePageSession(ctx: CoreContext, req: FastifyRequest, o: PageSessionOptions): Promise<PageSession> {
  if (!req.cookies[SESSION_COOKIE]) return { ok: false, error: unauthorized() };
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
