import type { FastifyReply, FastifyRequest } from 'fastify';
import { CSRF_COOKIE } from '../../auth/sessions.js';

/** What the web app's form handlers share: reading a field, the page's CSRF token, the step-up detour. */

/** A string field of a parsed form (or query); anything else (absent, repeated, not text) is undefined. */
export function field(body: unknown, name: string): string | undefined {
  const v = body && typeof body === 'object' ? (body as Record<string, unknown>)[name] : undefined;
  return typeof v === 'string' ? v : undefined;
}

/** The CSRF token a page embeds in its forms: the session's `svc_csrf` cookie (as `viewerOf` reads it, without its queries). */
export const csrfOf = (req: FastifyRequest): string => req.cookies[CSRF_COOKIE] ?? '';

/** To the step-up page, then back to `back` (an /app path). */
export function stepUpRedirect(reply: FastifyReply, back: string): FastifyReply {
  return reply
    .code(303)
    .header('location', `/app/stepup?next=${encodeURIComponent(back)}`)
    .send();
}
