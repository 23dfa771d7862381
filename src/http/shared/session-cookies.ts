import type { FastifyReply } from 'fastify';
import { CSRF_COOKIE, SESSION_COOKIE, type NewSession } from '../../auth/sessions.js';
import type { CoreContext } from '../../core/context.js';

/** Sets the HttpOnly session cookie and the readable CSRF cookie (the JSON sign-in routes and the HTML login both do). */
export function setSessionCookies(ctx: CoreContext, reply: FastifyReply, s: NewSession): void {
  const secure = ctx.config.publicUrl.startsWith('https://');
  reply.setCookie(SESSION_COOKIE, s.token, { httpOnly: true, sameSite: 'lax', path: '/', secure, expires: s.expiresAt });
  reply.setCookie(CSRF_COOKIE, s.csrf, { httpOnly: false, sameSite: 'lax', path: '/', secure, expires: s.expiresAt });
}
