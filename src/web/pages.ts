import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { authenticate } from '../auth/resolve.js';
import { newSecret, safeEqual } from '../auth/secrets.js';
import { activateSession, CSRF_COOKIE, openSession, SESSION_COOKIE, type NewSession } from '../auth/sessions.js';
import { beginLogin, hasAnyHuman, signup } from '../core/accounts.js';
import type { CoreContext } from '../core/context.js';
import { isServiceError } from '../core/errors.js';
import { currentWorkspaceName } from '../core/identity.js';
import { acceptInvite, describeInvite } from '../core/invites.js';
import { enrollTotp, verifyLoginCode } from '../core/second-factor.js';
import { resolvePageSession } from '../http/shared/page-session.js';
import { setSessionCookies } from '../http/shared/session-cookies.js';
import type { Principal } from '../policy/principal.js';
import { html, messageBody, sendPage, type SafeHtml } from '../http/shared/html.js';
import { qrSvg } from './app/account.js';
import { setWorkspaceCookie } from './app/workspaces.js';

/**
 * The pages of the HTML face (face.ts): GET / (to the web app or the sign-in), GET/POST /login,
 * POST /login/totp, GET/POST /signup, GET/POST /invite/:token.
 *
 * CSRF: an HTML form cannot send the X-CSRF-Token header, so these pages resolve the session
 * themselves (the JSON faces' caller hook is not in this face; the routes say `auth: 'public'`)
 * and carry the token as the hidden form field `csrf` instead:
 *  - before a session exists (login, sign-up, invite sign-up) it is a double submit of the
 *    `svc_csrf` cookie, which GET /login, GET /signup and the invite page set (or reuse) and embed;
 *  - with a session (TOTP step, invite accept) the field goes to `authenticate()` as the
 *    header would, so it must equal the session's own token and the `svc_csrf` cookie.
 * Faces are thin: every decision is made by the core functions these handlers call.
 */

const TOKEN_RE = /^[A-Za-z0-9_-]{20,200}$/;
const INVITE_TOKEN_RE = /^[A-Za-z0-9_-]{1,200}$/;
const Csrf = z.string().min(1).max(200);
/** Room for an OAuth authorization request coming back after sign-in (its `state` alone may be 2000). */
const Next = z.string().max(8192).optional();

const LoginForm = z.object({
  email: z.string().trim().min(1).max(254),
  password: z.string().min(1).max(1024),
  csrf: Csrf,
  next: Next,
});
const CodeForm = z.object({ code: z.string().max(64), csrf: Csrf, next: Next });
const AcceptForm = z.object({ action: z.literal('accept'), csrf: Csrf });
const SignupForm = z.object({
  action: z.literal('signup'),
  csrf: Csrf,
  name: z.string().trim().min(1).max(100),
  email: z.email().max(254),
  password: z.string().min(1).max(1024),
});
/** The sign-up page's form: the invite form's fields without `action`, and where to go after. */
const OwnSignupForm = SignupForm.omit({ action: true }).extend({ next: Next });

/**
 * `next` is honoured only as a path on this site: one leading `/`, never `//` or `/\`
 * (browsers read both as another host), no control characters, and still on this origin
 * after URL parsing. The answer is the normalised, percent-encoded form (safe in Location).
 */
export function safeNext(raw: unknown): string | undefined {
  if (typeof raw !== 'string' || raw.length === 0 || raw.length > 8192) return undefined;
  if (!raw.startsWith('/') || raw.startsWith('//') || raw.includes('\\')) return undefined;
  if (/[\u0000-\u0020\u007f]/.test(raw)) return undefined;
  const base = 'http://next.invalid';
  let u: URL;
  try {
    u = new URL(raw, base);
  } catch {
    return undefined;
  }
  if (u.origin !== base) return undefined;
  const out = u.pathname + u.search + u.hash;
  // "/.//evil" normalises to "//evil": a protocol-relative URL once in Location.
  return out.startsWith('//') ? undefined : out;
}

function field(body: unknown, name: string): unknown {
  return body && typeof body === 'object' ? (body as Record<string, unknown>)[name] : undefined;
}

const withNext = (path: string, next: string | undefined) => (next ? `${path}?next=${encodeURIComponent(next)}` : path);

/* ------------------------------------------------------------------ views */

function alert(message: string | undefined): SafeHtml {
  return html`${message ? html`<p class="alert" role="alert">${message}</p>` : ''}`;
}

function hidden(name: string, value: string | undefined): SafeHtml {
  return html`${value !== undefined ? html`<input type="hidden" name="${name}" value="${value}">` : ''}`;
}

interface LoginView {
  csrf: string;
  next?: string | undefined;
  email?: string | undefined;
  error?: string | undefined;
  signedIn?: { name: string; workspace: string } | undefined;
  /** Whether a newcomer may create an account here (the page links to /signup), else invite only. */
  signupOpen?: boolean | undefined;
}

function loginBody(v: LoginView): SafeHtml {
  const signed = v.signedIn
    ? html`<p class="notice notice-ok" role="status">Signed in as <strong>${v.signedIn.name}</strong> (workspace <strong>${v.signedIn.workspace}</strong>).</p>
${v.next ? html`<p><a href="${v.next}">Continue</a></p>` : ''}
<hr>
<h2>Sign in as someone else</h2>`
    : html`<h1>Sign in</h1>`;
  const newcomer =
    v.signupOpen === undefined
      ? ''
      : v.signupOpen
        ? html`<p class="muted gate-other">New here? <a href="${withNext('/signup', v.next)}">Create an account</a></p>`
        : html`<p class="muted gate-other">New here? Accounts on this service are by invite: ask a workspace owner for an invite link.</p>`;
  return html`${v.signedIn ? html`<h1>You are signed in</h1>` : ''}
${signed}
${alert(v.error)}
<form method="post" action="/login">
${hidden('csrf', v.csrf)}${hidden('next', v.next)}
<label for="email">Email</label>
<input id="email" name="email" type="email" autocomplete="username" required maxlength="254" value="${v.email ?? ''}"${v.signedIn ? '' : html` autofocus`}>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required maxlength="1024">
<button type="submit">Sign in</button>
</form>
${newcomer}`;
}

interface SignupPageView {
  csrf: string;
  next?: string | undefined;
  name?: string | undefined;
  email?: string | undefined;
  error?: string | undefined;
}

function signupBody(v: SignupPageView): SafeHtml {
  return html`<h1>Create an account</h1>
<p class="muted">Your account gets its own workspace; others can invite you to theirs.</p>
${alert(v.error)}
<form method="post" action="/signup">
${hidden('csrf', v.csrf)}${hidden('next', v.next)}
<label for="name">Your name</label>
<input id="name" name="name" type="text" autocomplete="name" required maxlength="100" value="${v.name ?? ''}"${v.error ? '' : html` autofocus`}>
<label for="email">Email</label>
<input id="email" name="email" type="email" autocomplete="email" required maxlength="254" value="${v.email ?? ''}">
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="new-password" required minlength="10" maxlength="1024" aria-describedby="pwhelp">
<p id="pwhelp" class="muted">At least 10 characters; a few words make a good one.</p>
<button type="submit">Create account</button>
</form>
<p class="muted gate-other">Already have an account? <a href="${withNext('/login', v.next)}">Sign in</a></p>`;
}

function inviteOnlyBody(next: string | undefined): SafeHtml {
  return html`<h1>Sign-up is by invite only</h1>
<p role="alert">New accounts on this service need an invite. Ask a workspace owner for an invite link; it leads to a page where you create your account.</p>
<p><a href="${withNext('/login', next)}">Sign in</a> if you already have an account.</p>`;
}

function codeBody(v: {
  csrf: string;
  next?: string | undefined;
  error?: string | undefined;
  enrol?: { uri: string; secret: string; qr: SafeHtml | null } | 'again';
}): SafeHtml {
  const intro =
    v.enrol === undefined
      ? html`<h1>Two-step verification</h1>
<p>Enter the 6-digit code from your authenticator app.</p>`
      : v.enrol === 'again'
        ? html`<h1>Set up two-step verification</h1>
<p>Enter the 6-digit code your authenticator app shows for Context Vault. If you have not added the key yet, <a href="${withNext('/login', v.next)}">sign in again</a> to get a new one.</p>`
        : html`<h1>Set up two-step verification</h1>
<p>This service requires a second factor. Scan this code with your authenticator app (or type the key in by hand), then enter the 6-digit code it shows.</p>
${v.enrol.qr ? html`<div class="qr-wrap">${v.enrol.qr}</div>` : ''}
<p class="label">Setup link</p>
<code id="uri" class="secret">${v.enrol.uri}</code>
<p class="label">Key (to type in by hand)</p>
<code id="key" class="secret">${v.enrol.secret}</code>`;
  return html`${intro}
${alert(v.error)}
<form method="post" action="/login/totp">
${hidden('csrf', v.csrf)}${hidden('next', v.next)}
<label for="code">Code</label>
<input id="code" name="code" class="code" type="text" inputmode="numeric" pattern="[0-9]{6}" maxlength="6" autocomplete="one-time-code" required autofocus>
<button type="submit">Verify</button>
</form>
<p class="muted"><a href="${withNext('/login', v.next)}">Start over</a></p>`;
}

const ROLE_TEXT: Record<string, string> = { owner: 'an owner', editor: 'an editor', viewer: 'a viewer' };

/* --------------------------------------------------------------- sessions */

/**
 * The signed-in human and a CSRF token their forms may embed: the `svc_csrf` cookie, checked
 * against the session (as a header would be). A session whose cookie no longer matches is
 * reported as `stale` (sign in again) rather than given a form that would fail.
 */
async function signedIn(ctx: CoreContext, req: FastifyRequest): Promise<{ p: Principal; csrf: string } | 'stale' | null> {
  const cookie = req.cookies[CSRF_COOKIE];
  const r = await resolvePageSession(ctx, req, { csrf: cookie ?? '', unsafe: true });
  if (r.ok) return { p: r.p, csrf: cookie! };
  return r.error.code === 'csrf_failed' ? 'stale' : null;
}

function cookieSecure(ctx: CoreContext): boolean {
  return ctx.config.publicUrl.startsWith('https://');
}

/**
 * The pre-session CSRF token for the login and sign-up forms: the `svc_csrf` cookie when the
 * browser has a well-formed one (a signed-in browser keeps its session's token, so its other
 * tabs go on working), else a fresh random one set now.
 */
function formToken(ctx: CoreContext, req: FastifyRequest, reply: FastifyReply): string {
  const have = req.cookies[CSRF_COOKIE];
  if (have && TOKEN_RE.test(have)) return have;
  const token = newSecret('');
  reply.setCookie(CSRF_COOKIE, token, { httpOnly: false, sameSite: 'lax', path: '/', secure: cookieSecure(ctx) });
  return token;
}

/** Double submit before a session exists: the hidden field equals the `svc_csrf` cookie. */
function preSessionCsrfOk(req: FastifyRequest, submitted: string): boolean {
  const cookie = req.cookies[CSRF_COOKIE];
  return Boolean(cookie && submitted && safeEqual(cookie, submitted));
}

const CSRF_MESSAGE = 'This form has expired or did not come from this site. Please try again.';

/* ----------------------------------------------------------------- routes */

/** The page routes; face.ts parses their form bodies, sets their headers and renders their errors. */
export async function pageRoutes(web: FastifyInstance, ctx: CoreContext): Promise<void> {
  const opts = { config: { auth: 'public' as const }, schema: { hide: true } };

  async function loginPage(req: FastifyRequest, reply: FastifyReply, status: number, v: Omit<LoginView, 'csrf' | 'signedIn'> & { csrf?: string }) {
    const who = await signedIn(ctx, req);
    let signedInView: LoginView['signedIn'];
    if (who && who !== 'stale') {
      signedInView = { name: who.p.name, workspace: await currentWorkspaceName(ctx, who.p) };
    }
    const csrf = v.csrf ?? formToken(ctx, req, reply);
    return sendPage(reply, status, 'Sign in', loginBody({ ...v, csrf, signedIn: signedInView, signupOpen: await signupOpen() }));
  }

  /** After the last login (or sign-up) step: the full-lifetime cookies are set; go to `next` or the web app. */
  function finish(reply: FastifyReply, next: string | undefined) {
    return reply
      .code(303)
      .header('location', next ?? '/app')
      .send();
  }

  /** Whether a newcomer may sign up without an invite: SIGNUPS=open, or no account exists yet (the first one bootstraps an invite-only service). */
  async function signupOpen(): Promise<boolean> {
    return ctx.config.signups === 'open' || !(await hasAnyHuman(ctx));
  }

  /** The site's front door: the web app for a signed-in person, else the sign-in page (which offers sign-up where it is open). */
  web.get('/', opts, async (req, reply) => {
    const who = await resolvePageSession(ctx, req, { unsafe: false });
    return reply
      .code(303)
      .header('location', who.ok ? '/app' : '/login')
      .send();
  });

  web.get('/login', opts, async (req, reply) => {
    const next = safeNext(field(req.query, 'next'));
    // Signed in and going nowhere in particular: the app is where they want to be.
    if (!next) {
      const who = await signedIn(ctx, req);
      if (who && who !== 'stale') return finish(reply, undefined);
    }
    return loginPage(req, reply, 200, { next });
  });

  web.post('/login', opts, async (req, reply) => {
    const next = safeNext(field(req.body, 'next'));
    const form = LoginForm.safeParse(req.body);
    if (!form.success) {
      const email = field(req.body, 'email');
      return loginPage(req, reply, 400, {
        next,
        email: typeof email === 'string' && email.length <= 254 ? email : undefined,
        error: 'Enter your email address and your password.',
      });
    }
    if (!preSessionCsrfOk(req, form.data.csrf)) return loginPage(req, reply, 403, { next, email: form.data.email, error: CSRF_MESSAGE });
    let login: Awaited<ReturnType<typeof beginLogin>>;
    try {
      login = await beginLogin(ctx, form.data.email, form.data.password, req.ip);
    } catch (err) {
      if (isServiceError(err) && err.status === 401) {
        // One message for an unknown email and a wrong password.
        return loginPage(req, reply, 401, { next, email: form.data.email, csrf: form.data.csrf, error: 'The email address or password is not right.' });
      }
      throw err;
    }
    const s = await openSession(ctx, login.principalId, login.workspace.id, login.pendingKind);
    setSessionCookies(ctx, reply, s);
    if (login.pendingKind === 'totp') return sendPage(reply, 200, 'Two-step verification', codeBody({ csrf: s.csrf, next }));
    if (login.pendingKind === 'totp_enroll') return enrolPage(req, reply, s, next);
    return finish(reply, next);
  });

  /** REQUIRE_TOTP=on and no TOTP yet: a fresh secret, shown once, and the code form. */
  async function enrolPage(req: FastifyRequest, reply: FastifyReply, s: NewSession, next: string | undefined) {
    // The session was opened by this request: its token is not in the request's cookies yet.
    const p = await authenticate(ctx, {
      authorization: undefined,
      sessionToken: s.token,
      csrfHeader: undefined,
      csrfCookie: undefined,
      unsafe: false,
      ip: req.ip,
      workspace: undefined,
      allowPending: true,
    });
    const e = await enrollTotp(ctx, p, undefined);
    if (e.enabled) return finish(reply, next);
    const qr = await qrSvg(e.otpauth_uri);
    return sendPage(reply, 200, 'Set up two-step verification', codeBody({ csrf: s.csrf, next, enrol: { uri: e.otpauth_uri, secret: e.secret, qr } }));
  }

  web.post('/login/totp', opts, async (req, reply) => {
    const next = safeNext(field(req.body, 'next'));
    const form = CodeForm.safeParse(req.body);
    if (!form.success) {
      return sendPage(
        reply,
        400,
        'Incomplete form',
        messageBody('Incomplete form', 'Enter the 6-digit code and try again.', [{ href: withNext('/login', next), text: 'Start over' }]),
      );
    }
    const { csrf } = form.data;
    const code = form.data.code.replace(/\s+/g, '');
    const startOver = [{ href: withNext('/login', next), text: 'Sign in again' }];
    // Which step is the session waiting for? The auth layer tells by refusing a pending session.
    const first = await resolvePageSession(ctx, req, { csrf, unsafe: true });
    if (first.ok) return finish(reply, next); // already signed in (the form was sent twice)
    const kind = first.error.code === 'totp_required' ? 'totp' : first.error.code === 'totp_enroll_required' ? 'enrol' : null;
    if (!kind) {
      if (first.error.code === 'csrf_failed') return sendPage(reply, 403, 'Form expired', messageBody('Form expired', CSRF_MESSAGE, startOver));
      return sendPage(reply, 401, 'Sign-in expired', messageBody('Sign-in expired', 'Your sign-in has expired. Please sign in again.', startOver));
    }
    const second = await resolvePageSession(ctx, req, { csrf, unsafe: true, allowPending: true });
    if (!second.ok) {
      if (second.error.code === 'csrf_failed') return sendPage(reply, 403, 'Form expired', messageBody('Form expired', CSRF_MESSAGE, startOver));
      return sendPage(reply, 401, 'Sign-in expired', messageBody('Sign-in expired', 'Your sign-in has expired. Please sign in again.', startOver));
    }
    const p = second.p;
    try {
      if (kind === 'totp') await verifyLoginCode(ctx, p.id, p.sessionId!, code, req.ip);
      else await enrollTotp(ctx, p, code);
    } catch (err) {
      if (isServiceError(err) && err.code === 'invalid_code') {
        const error = 'That code is not right, or it was already used. Wait for the next code and try again.';
        return sendPage(reply, 401, 'Two-step verification', codeBody({ csrf, next, error, ...(kind === 'enrol' ? { enrol: 'again' as const } : {}) }));
      }
      throw err;
    }
    const expiresAt = await activateSession(ctx, p.sessionId!);
    setSessionCookies(ctx, reply, { id: p.sessionId!, token: req.cookies[SESSION_COOKIE]!, csrf, expiresAt });
    return finish(reply, next);
  });

  /* ------------------------------------------------------------ sign-up */

  async function signupPage(req: FastifyRequest, reply: FastifyReply, status: number, v: Omit<SignupPageView, 'csrf'> & { csrf?: string }) {
    if (!(await signupOpen())) return sendPage(reply, status === 200 ? 200 : 403, 'Sign-up is by invite only', inviteOnlyBody(v.next));
    const csrf = v.csrf ?? formToken(ctx, req, reply);
    return sendPage(reply, status, 'Create an account', signupBody({ ...v, csrf }));
  }

  web.get('/signup', opts, async (req, reply) => {
    const next = safeNext(field(req.query, 'next'));
    const who = await signedIn(ctx, req);
    if (who && who !== 'stale') return finish(reply, next);
    return signupPage(req, reply, 200, { next });
  });

  /** The same core `signup` as POST /api/v1/auth/signup (and the same per-IP sign-up limit: src/http/limits.ts). */
  web.post('/signup', opts, async (req, reply) => {
    const next = safeNext(field(req.body, 'next'));
    const name = field(req.body, 'name');
    const email = field(req.body, 'email');
    // What was typed comes back into the form; the password never does.
    const keep = {
      next,
      name: typeof name === 'string' && name.length <= 100 ? name : undefined,
      email: typeof email === 'string' && email.length <= 254 ? email : undefined,
    };
    const csrf = field(req.body, 'csrf');
    if (typeof csrf !== 'string' || !preSessionCsrfOk(req, csrf)) return signupPage(req, reply, 403, { ...keep, error: CSRF_MESSAGE });
    const form = OwnSignupForm.safeParse(req.body);
    if (!form.success) return signupPage(req, reply, 400, { ...keep, csrf, error: 'Enter your name, a valid email address and a password.' });
    let result: Awaited<ReturnType<typeof signup>>;
    try {
      result = await signup(ctx, { email: form.data.email, password: form.data.password, name: form.data.name });
    } catch (err) {
      if (!isServiceError(err)) throw err;
      if (err.code === 'invite_required') return sendPage(reply, 403, 'Sign-up is by invite only', inviteOnlyBody(next));
      if (err.status >= 500) throw err;
      const error = err.code === 'email_taken' ? 'An account with this email address already exists: sign in instead.' : err.message;
      return signupPage(req, reply, err.status, { ...keep, csrf, error });
    }
    // As the API's sign-up: a service that requires TOTP opens the session pending its enrolment.
    const pending = ctx.config.requireTotp ? ('totp_enroll' as const) : null;
    const s = await openSession(ctx, result.principalId, result.workspace.id, pending);
    setSessionCookies(ctx, reply, s);
    if (pending) return enrolPage(req, reply, s, next);
    return finish(reply, next);
  });

  /* ------------------------------------------------------------ invites */

  const INVITE_DEAD: Record<string, { status: number; title: string; message: string }> = {
    invite_not_found: {
      status: 404,
      title: 'Invite not found',
      message: 'This invite link is not valid. Check that you copied the whole link, or ask for a new invite.',
    },
    accepted: {
      status: 409,
      title: 'Invite already used',
      message: 'This invite has already been used. Ask the workspace owner for a new one if you still need access.',
    },
    revoked: { status: 410, title: 'Invite withdrawn', message: 'This invite was withdrawn by the workspace owner.' },
    expired: { status: 410, title: 'Invite expired', message: 'This invite has expired. Ask the workspace owner for a new one.' },
  };
  INVITE_DEAD.invite_used = INVITE_DEAD.accepted!;
  INVITE_DEAD.invite_revoked = INVITE_DEAD.revoked!;
  INVITE_DEAD.invite_expired = INVITE_DEAD.expired!;

  function deadInvite(reply: FastifyReply, key: string) {
    const d = INVITE_DEAD[key] ?? INVITE_DEAD.invite_not_found!;
    return sendPage(reply, d.status, d.title, messageBody(d.title, d.message, [{ href: '/login', text: 'Sign in' }]));
  }

  interface SignupView {
    name?: string | undefined;
    email?: string | undefined;
    error?: string | undefined;
  }

  async function invitePage(req: FastifyRequest, reply: FastifyReply, token: string, status: number, signupView: SignupView = {}, acceptError?: string) {
    let inv: Awaited<ReturnType<typeof describeInvite>>;
    try {
      inv = await describeInvite(ctx, token);
    } catch (err) {
      if (isServiceError(err) && err.code === 'invite_not_found') return deadInvite(reply, err.code);
      throw err;
    }
    if (inv.state !== 'pending') return deadInvite(reply, inv.state);
    const here = `/invite/${encodeURIComponent(token)}`;
    const who = await signedIn(ctx, req);
    const head = html`<h1>Join ${inv.workspace.name}</h1>
<p>You are invited to join the workspace <strong>${inv.workspace.name}</strong> as <strong>${ROLE_TEXT[inv.role] ?? inv.role}</strong>.</p>
<p class="muted">The invite is valid until ${new Date(inv.expires_at).toUTCString()}.${inv.email ? ' It is meant for one email address: use the account it was sent to.' : ''}</p>`;
    let rest: SafeHtml;
    if (who && who !== 'stale') {
      rest = html`${alert(acceptError)}
<p>Signed in as <strong>${who.p.name}</strong>.</p>
<form method="post" action="${here}">
${hidden('csrf', who.csrf)}${hidden('action', 'accept')}
<button type="submit">Accept and join ${inv.workspace.name}</button>
</form>
<p class="muted">Not you? <a href="${withNext('/login', here)}">Sign in with another account</a>.</p>`;
    } else {
      const csrf = formToken(ctx, req, reply);
      rest = html`<p><a href="${withNext('/login', here)}">Sign in to accept</a>${who === 'stale' ? ' (your sign-in needs to be renewed)' : ''}.</p>
<hr>
<h2>New here? Create an account</h2>
${alert(signupView.error)}
<form method="post" action="${here}">
${hidden('csrf', csrf)}${hidden('action', 'signup')}
<label for="name">Your name</label>
<input id="name" name="name" type="text" autocomplete="name" required maxlength="100" value="${signupView.name ?? ''}">
<label for="email">Email</label>
<input id="email" name="email" type="email" autocomplete="email" required maxlength="254" value="${signupView.email ?? ''}">
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="new-password" required minlength="10" maxlength="1024" aria-describedby="pwhelp">
<p id="pwhelp" class="muted">At least 10 characters; a few words make a good one.</p>
<button type="submit">Create account and join</button>
</form>
<p class="muted">The account also gets its own workspace. Apps can sign up through the API instead: <code>POST /api/v1/auth/signup</code> with <code>invite_token</code> set to the token in this page's address.</p>`;
    }
    return sendPage(reply, status, `Join ${inv.workspace.name}`, html`${head}${rest}`);
  }

  function joinedPage(reply: FastifyReply, w: { name: string }, role: string, welcome?: string) {
    return sendPage(
      reply,
      200,
      'Invite accepted',
      html`<h1>Welcome to ${w.name}</h1>
<p class="notice notice-ok" role="status">${welcome ? html`${welcome} ` : ''}You joined <strong>${w.name}</strong> as <strong>${ROLE_TEXT[role] ?? role}</strong>.</p>
<p><a href="/app">Continue to ${w.name}</a></p>`,
    );
  }

  const inviteToken = (req: FastifyRequest): string | null => {
    const t = field(req.params, 'token');
    return typeof t === 'string' && INVITE_TOKEN_RE.test(t) ? t : null;
  };

  web.get('/invite/:token', opts, async (req, reply) => {
    const token = inviteToken(req);
    if (!token) return deadInvite(reply, 'invite_not_found');
    return invitePage(req, reply, token, 200);
  });

  web.post('/invite/:token', opts, async (req, reply) => {
    const token = inviteToken(req);
    if (!token) return deadInvite(reply, 'invite_not_found');
    const here = `/invite/${encodeURIComponent(token)}`;
    const action = field(req.body, 'action');

    if (action === 'signup') {
      const form = SignupForm.safeParse(req.body);
      const name = field(req.body, 'name');
      const email = field(req.body, 'email');
      const keep = {
        name: typeof name === 'string' && name.length <= 100 ? name : undefined,
        email: typeof email === 'string' && email.length <= 254 ? email : undefined,
      };
      if (!form.success) return invitePage(req, reply, token, 400, { ...keep, error: 'Enter your name, a valid email address and a password.' });
      if (!preSessionCsrfOk(req, form.data.csrf)) return invitePage(req, reply, token, 403, { ...keep, error: CSRF_MESSAGE });
      let result: Awaited<ReturnType<typeof signup>>;
      try {
        result = await signup(ctx, { email: form.data.email, password: form.data.password, name: form.data.name, invite_token: token });
      } catch (err) {
        if (!isServiceError(err)) throw err;
        if (INVITE_DEAD[err.code]) return deadInvite(reply, err.code);
        const error = err.code === 'email_taken' ? 'An account with this email address already exists: sign in to accept instead.' : err.message;
        return invitePage(req, reply, token, err.status, { ...keep, error });
      }
      const pending = ctx.config.requireTotp ? ('totp_enroll' as const) : null;
      const s = await openSession(ctx, result.principalId, result.workspace.id, pending);
      setSessionCookies(ctx, reply, s);
      if (pending) return enrolPage(req, reply, s, undefined);
      return joinedPage(reply, result.workspace, result.invitedRole ?? 'viewer', `Your account is ready, ${form.data.name}.`);
    }

    const form = AcceptForm.safeParse(req.body);
    if (!form.success)
      return sendPage(
        reply,
        400,
        'Incomplete form',
        messageBody('Incomplete form', 'The form was incomplete. Open the invite again and use its button.', [{ href: here, text: 'Back to the invite' }]),
      );
    const who = await resolvePageSession(ctx, req, { csrf: form.data.csrf, unsafe: true });
    if (!who.ok) {
      if (who.error.code === 'csrf_failed')
        return sendPage(reply, 403, 'Form expired', messageBody('Form expired', CSRF_MESSAGE, [{ href: here, text: 'Back to the invite' }]));
      return sendPage(
        reply,
        401,
        'Sign in first',
        messageBody('Sign in first', 'Sign in to accept this invite.', [{ href: withNext('/login', here), text: 'Sign in' }]),
      );
    }
    try {
      const joined = await acceptInvite(ctx, who.p, token);
      // "Continue" opens the workspace just joined (the app's workspace choice, workspaces.ts).
      setWorkspaceCookie(ctx, reply, joined.workspace.id);
      return joinedPage(reply, joined.workspace, joined.role);
    } catch (err) {
      if (!isServiceError(err)) throw err;
      if (INVITE_DEAD[err.code]) return deadInvite(reply, err.code);
      const message =
        err.code === 'already_member'
          ? 'You are already a member of this workspace.'
          : err.code === 'invite_email_mismatch'
            ? 'This invite was sent to another email address. Sign in with that account to accept it.'
            : err.message;
      return sendPage(
        reply,
        err.status,
        'Cannot accept the invite',
        messageBody('Cannot accept the invite', message, [{ href: withNext('/login', here), text: 'Sign in with another account' }]),
      );
    }
  });
}
