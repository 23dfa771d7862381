import type { FastifyInstance, FastifyReply } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { closeSession, CSRF_COOKIE, openSession, SESSION_COOKIE, type NewSession } from '../../auth/sessions.js';
import { checkCredentials, signup } from '../../core/accounts.js';
import type { CoreContext } from '../../core/context.js';
import { workspacesOf } from '../../core/workspaces.js';
import { caller } from '../auth.js';
import { errors } from '../schemas.js';

const SignupBody = z.strictObject({
  email: z.email().max(254),
  password: z.string().max(1024),
  name: z.string().trim().min(1).max(100),
  invite_token: z.string().max(200).optional(),
});

const LoginBody = z.strictObject({ email: z.string().max(254), password: z.string().max(1024) });

const SessionResult = z.object({
  principal: z.object({ id: z.string(), name: z.string(), email: z.string() }),
  workspace: z.object({ id: z.string(), slug: z.string(), name: z.string() }),
  csrf_token: z.string().describe('Echo it in X-CSRF-Token on every unsafe request (also set as the svc_csrf cookie)'),
});

/** Sets the HttpOnly session cookie and the readable CSRF cookie. */
function setSessionCookies(ctx: CoreContext, reply: FastifyReply, s: NewSession): void {
  const secure = ctx.config.publicUrl.startsWith('https://');
  reply.setCookie(SESSION_COOKIE, s.token, { httpOnly: true, sameSite: 'lax', path: '/', secure, expires: s.expiresAt });
  reply.setCookie(CSRF_COOKIE, s.csrf, { httpOnly: false, sameSite: 'lax', path: '/', secure, expires: s.expiresAt });
}

export async function authRoutes(app: FastifyInstance, ctx: CoreContext): Promise<void> {
  const r = app.withTypeProvider<ZodTypeProvider>();

  for (const url of ['/api/v1/auth/signup', '/auth/signup', '/api/auth/signup']) {
    r.post(
      url,
      {
        config: { auth: 'public' },
        schema: {
          tags: ['auth'],
          summary: 'Create an account and its own workspace (you are its owner); signs you in',
          hide: url !== '/api/v1/auth/signup',
          body: SignupBody,
          response: { 201: SessionResult, ...errors(400, 403, 409) },
        },
      },
      async (req, reply) => {
        const { principalId, workspace } = await signup(ctx, req.body);
        const s = await openSession(ctx, principalId, workspace.id);
        setSessionCookies(ctx, reply, s);
        return reply.code(201).send({
          principal: { id: principalId, name: req.body.name, email: req.body.email.trim().toLowerCase() },
          workspace: { id: workspace.id, slug: workspace.slug, name: workspace.name },
          csrf_token: s.csrf,
        });
      },
    );
  }

  r.post(
    '/api/auth/login',
    {
      config: { auth: 'public' },
      schema: { tags: ['auth'], summary: 'Sign in with email and password', body: LoginBody, response: { 200: SessionResult, ...errors(400, 401) } },
    },
    async (req, reply) => {
      const principalId = await checkCredentials(ctx, req.body.email, req.body.password);
      const wss = await workspacesOf(ctx.store.db, principalId);
      const who = await ctx.store.db.selectFrom('principals').select(['name', 'email']).where('id', '=', principalId).executeTakeFirstOrThrow();
      const ws = wss[0]!;
      const s = await openSession(ctx, principalId, ws.id);
      setSessionCookies(ctx, reply, s);
      return { principal: { id: principalId, name: who.name, email: who.email ?? '' }, workspace: { id: ws.id, slug: ws.slug, name: ws.name }, csrf_token: s.csrf };
    },
  );

  r.post(
    '/api/auth/logout',
    { config: { auth: 'session' }, schema: { tags: ['auth'], summary: 'End this session and clear its cookies', response: { 200: z.object({ ok: z.literal(true) }), ...errors(401, 403) } } },
    async (req, reply) => {
      await closeSession(ctx, caller(req).sessionId!);
      reply.clearCookie(SESSION_COOKIE, { path: '/' });
      reply.clearCookie(CSRF_COOKIE, { path: '/' });
      return { ok: true as const };
    },
  );

  r.get(
    '/api/auth/me',
    {
      config: { auth: 'session' },
      schema: {
        tags: ['auth'],
        summary: 'The signed-in user, their workspaces and the current one',
        response: {
          200: z.object({
            user: z.object({ id: z.string(), name: z.string(), email: z.string() }),
            workspaces: z.array(z.object({ id: z.string(), slug: z.string(), name: z.string(), role: z.string() })),
            workspace: z.object({ id: z.string(), slug: z.string(), role: z.string() }),
          }),
          ...errors(401, 403),
        },
      },
    },
    async (req) => {
      const p = caller(req);
      const who = await ctx.store.db.selectFrom('principals').select(['name', 'email']).where('id', '=', p.id).executeTakeFirstOrThrow();
      return {
        user: { id: p.id, name: who.name, email: who.email ?? '' },
        workspaces: await workspacesOf(ctx.store.db, p.id),
        workspace: { id: p.workspaceId, slug: p.workspaceSlug, role: p.role ?? 'viewer' },
      };
    },
  );
}
