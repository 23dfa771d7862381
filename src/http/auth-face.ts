import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { activateSession, closeSession, CSRF_COOKIE, listSessions, openSession, revokeOwnSession, SESSION_COOKIE } from '../auth/sessions.js';
import { beginLogin, signup } from '../core/accounts.js';
import { notFound } from '../core/errors.js';
import { enrollTotp, stepUp, verifyLoginCode } from '../core/second-factor.js';
import type { CoreContext } from '../core/context.js';
import { describeCaller, signedInAs } from '../core/identity.js';
import { sessionUserView } from '../presenters/identity.js';
import { IdParams, RevokedSchema, Timestamp } from './schemas.js';
import { addCallerHook, caller } from './shared/caller.js';
import { errors, optionalBody, route } from './shared/schemas.js';
import { setSessionCookies } from './shared/session-cookies.js';

const SignupBody = z.strictObject({
  email: z.email().max(254),
  password: z.string().max(1024),
  name: z.string().trim().min(1).max(100),
  invite_token: z.string().max(200).optional(),
});

const LoginBody = z.strictObject({ email: z.string().max(254), password: z.string().max(1024) });

const LoginResult = z.object({
  status: z.enum(['ok', 'totp_required', 'totp_enroll_required']).describe('ok: signed in; otherwise the session is pending until the second step'),
  principal: z.object({ id: z.string(), name: z.string(), email: z.string() }),
  workspace: z.object({ id: z.string(), slug: z.string(), name: z.string() }),
  csrf_token: z.string(),
});

/**
 * The sign-in face: accounts and sessions under /api/auth (spec §4 "Auth and sessions"). The spec
 * also names sign-up at /api/v1/auth/signup (the documented one) and /auth/signup; those share no
 * prefix with /api/auth, so app.ts registers this face at the root and the face gives each group
 * its own prefix. Like the REST face it owns a caller hook (session cookie plus CSRF on unsafe
 * methods, or an agent key). Host check and rate limits (the login and sign-up buckets, keyed by
 * these paths) come from the root.
 */
export async function authFace(face: FastifyInstance): Promise<void> {
  const ctx = face.ctx;
  addCallerHook(face, ctx);
  for (const prefix of SIGNUP_PREFIXES) {
    await face.register(async (scope) => signupRoute(scope, ctx, { documented: prefix === '/api/v1/auth' }), { prefix });
  }
  await face.register(async (scope) => sessionRoutes(scope, ctx), { prefix: '/api/auth' });
}

/** Where sign-up answers; only the first is in the OpenAPI document. */
const SIGNUP_PREFIXES = ['/api/v1/auth', '/auth', '/api/auth'] as const;

async function signupRoute(app: FastifyInstance, ctx: CoreContext, opts: { documented: boolean }): Promise<void> {
  const r = app.withTypeProvider<ZodTypeProvider>();

  r.post(
    '/signup',
    route(
      ['auth'],
      'Create an account and its own workspace (you are its owner); signs you in',
      {
        hide: !opts.documented,
        body: SignupBody,
        response: { 201: LoginResult, ...errors(400, 403, 409, 429) },
      },
      { auth: 'public' },
    ),
    async (req, reply) => {
      const { principalId, workspace } = await signup(ctx, req.body);
      const pending = ctx.config.requireTotp ? ('totp_enroll' as const) : null;
      const s = await openSession(ctx, principalId, workspace.id, pending);
      setSessionCookies(ctx, reply, s);
      return reply.code(201).send({
        status: pending ? ('totp_enroll_required' as const) : ('ok' as const),
        principal: { id: principalId, name: req.body.name, email: req.body.email.trim().toLowerCase() },
        workspace: { id: workspace.id, slug: workspace.slug, name: workspace.name },
        csrf_token: s.csrf,
      });
    },
  );
}

async function sessionRoutes(app: FastifyInstance, ctx: CoreContext): Promise<void> {
  const r = app.withTypeProvider<ZodTypeProvider>();

  r.post(
    '/login',
    route(
      ['auth'],
      'Sign in with email and password; may answer totp_required or totp_enroll_required',
      {
        body: LoginBody,
        response: { 200: LoginResult, ...errors(400, 401, 429) },
      },
      { auth: 'public' },
    ),
    async (req, reply) => {
      const login = await beginLogin(ctx, req.body.email, req.body.password, req.ip);
      const s = await openSession(ctx, login.principalId, login.workspace.id, login.pendingKind);
      setSessionCookies(ctx, reply, s);
      return {
        status: login.pending ?? ('ok' as const),
        principal: login.principal,
        workspace: { id: login.workspace.id, slug: login.workspace.slug, name: login.workspace.name },
        csrf_token: s.csrf,
      };
    },
  );

  r.post(
    '/totp/verify',
    route(
      ['auth'],
      'Second login step: a TOTP code turns the pending session into an active one',
      {
        body: z.strictObject({ code: z.string().max(16) }),
        response: { 200: LoginResult, ...errors(400, 401, 403, 409, 429) },
      },
      { auth: 'pending' },
    ),
    async (req, reply) => {
      const p = caller(req);
      await verifyLoginCode(ctx, p.id, p.sessionId!, req.body.code, req.ip);
      const expiresAt = await activateSession(ctx, p.sessionId!);
      // Re-issue the cookies with the full lifetime now that the session is active.
      const token = req.cookies[SESSION_COOKIE]!;
      const csrf = req.cookies[CSRF_COOKIE] ?? '';
      setSessionCookies(ctx, reply, { id: p.sessionId!, token, csrf, expiresAt });
      const { principal, workspace } = await signedInAs(ctx, p);
      return { status: 'ok' as const, principal, workspace, csrf_token: csrf };
    },
  );

  r.post(
    '/totp/enroll',
    route(
      ['auth'],
      'Without a code: a new secret and its otpauth:// URI. With a code: confirm and enable TOTP',
      {
        body: optionalBody(z.strictObject({ code: z.string().max(16).optional() })),
        response: {
          200: z.object({ enabled: z.boolean(), otpauth_uri: z.string().optional(), secret: z.string().optional() }),
          ...errors(400, 401, 403, 409),
        },
      },
      { auth: 'pending' },
    ),
    async (req, reply) => {
      const p = caller(req);
      const result = await enrollTotp(ctx, p, req.body.code);
      if (result.enabled && p.sessionId) {
        // A session that was pending on enrolment is active now: give it the full lifetime.
        const expiresAt = await activateSession(ctx, p.sessionId);
        setSessionCookies(ctx, reply, { id: p.sessionId, token: req.cookies[SESSION_COOKIE]!, csrf: req.cookies[CSRF_COOKIE] ?? '', expiresAt });
      }
      return result;
    },
  );

  r.post(
    '/stepup',
    route(
      ['auth'],
      'Step up for 5 minutes with a TOTP code, or the password when TOTP is not enrolled',
      {
        body: z.strictObject({ code: z.string().max(16).optional(), password: z.string().max(1024).optional() }),
        response: { 200: z.object({ step_up_until: z.string() }), ...errors(400, 401, 403, 429) },
      },
      { auth: 'session' },
    ),
    async (req) => ({ step_up_until: (await stepUp(ctx, caller(req), req.body, req.ip)).until }),
  );

  r.get(
    '/sessions',
    route(
      ['auth'],
      'Your active sessions',
      {
        response: {
          200: z.object({
            sessions: z.array(
              z.object({
                id: z.string(),
                created_at: Timestamp,
                last_seen_at: Timestamp,
                expires_at: Timestamp,
                pending: z.boolean(),
                current: z.boolean(),
              }),
            ),
          }),
          ...errors(401, 403),
        },
      },
      { auth: 'session' },
    ),
    async (req) => {
      const p = caller(req);
      return { sessions: await listSessions(ctx, p.id, p.sessionId) };
    },
  );

  r.delete(
    '/sessions/:id',
    route(
      ['auth'],
      'End one of your own sessions',
      {
        params: IdParams,
        response: { 200: RevokedSchema, ...errors(401, 403, 404) },
      },
      { auth: 'session' },
    ),
    async (req) => {
      if (!(await revokeOwnSession(ctx, caller(req).id, req.params.id))) throw notFound(`Session ${req.params.id} not found`);
      return { revoked: true as const, id: req.params.id };
    },
  );

  r.post(
    '/logout',
    route(
      ['auth'],
      'End this session and clear its cookies',
      { response: { 200: z.object({ ok: z.literal(true) }), ...errors(401, 403) } },
      { auth: 'pending' },
    ),
    async (req, reply) => {
      await closeSession(ctx, caller(req).sessionId!);
      reply.clearCookie(SESSION_COOKIE, { path: '/' });
      reply.clearCookie(CSRF_COOKIE, { path: '/' });
      return { ok: true as const };
    },
  );

  r.get(
    '/me',
    route(
      ['auth'],
      'The signed-in user, their workspaces and the current one',
      {
        response: {
          200: z.object({
            user: z.object({ id: z.string(), name: z.string(), email: z.string() }),
            workspaces: z.array(z.object({ id: z.string(), slug: z.string(), name: z.string(), role: z.string() })),
            workspace: z.object({ id: z.string(), slug: z.string(), role: z.string() }),
          }),
          ...errors(401, 403),
        },
      },
      { auth: 'session' },
    ),
    async (req) => sessionUserView(await describeCaller(ctx, caller(req), { account: true })),
  );
}
