import fastifyFormbody from '@fastify/formbody';
import type { FastifyInstance } from 'fastify';
import { sendError, toServiceError } from '../http/shared/errors.js';
import { messageBody, sendPage, setPageHeaders } from '../http/shared/html.js';
import { assetRoutes } from './app/assets.js';
import { appRoutes } from './app/routes.js';
import { pageRoutes } from './pages.js';

/** Form bodies above this are refused (413); every field has its own, smaller cap (400). */
export const FORM_BODY_LIMIT = 64 * 1024;

/**
 * The server-rendered HTML face: /, /login, /login/totp, /signup, /invite/:token, the web app under /app
 * (src/web/app) and its files under /assets, registered by app.ts
 * without a prefix (the pages live at the root). It owns the form-body parser, the page security
 * headers and an error handler that answers a browser with a page. Host check and rate limits
 * (the login and sign-up buckets) come from the root; CSRF is checked in the handlers (pages.ts).
 */
export async function webFace(face: FastifyInstance): Promise<void> {
  const ctx = face.ctx;
  // Form bodies are parsed only in this face (fastify-plugin scopes the parser to it).
  await face.register(fastifyFormbody, { bodyLimit: FORM_BODY_LIMIT });
  face.addHook('onRequest', async (_req, reply) => setPageHeaders(reply));
  // Whatever goes wrong before a handler (bad body, rate limit, host check, a bug) answers a
  // page to a browser (Accept: text/html) and the usual JSON error body to anything else.
  face.setErrorHandler((err, req, reply) => {
    const e = toServiceError(err, req);
    if (!/\btext\/html\b/i.test(req.headers.accept ?? '')) {
      setPageHeaders(reply);
      return sendError(reply, e);
    }
    const message =
      e.status >= 500
        ? 'Something went wrong on our side. It has been logged; please try again.'
        : e.code === 'invalid_request' || e.code === 'invalid_json'
          ? 'The form was incomplete or malformed. Go back, fill in every field and try again.'
          : e.message;
    return sendPage(reply, e.status, 'Something went wrong', messageBody('Something went wrong', message, [{ href: '/login', text: 'Sign in' }]));
  });

  await pageRoutes(face, ctx);
  // The web app (issue 17): its static files, and its pages under /app with their own headers,
  // sign-in redirect, and not-found and error pages in the app's look.
  await assetRoutes(face);
  await face.register(async (app) => appRoutes(app, ctx), { prefix: '/app' });
}
