import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { isServiceError } from '../../core/errors.js';
import { describeCaller } from '../../core/identity.js';
import { stepUp } from '../../core/second-factor.js';
import { html, type SafeHtml } from '../../http/shared/html.js';
import type { Principal } from '../../policy/principal.js';
import { safeNext } from '../pages.js';
import { sendAppPage } from './layout.js';
import type { AppKit } from './routes.js';
import { field } from './forms.js';

/**
 * The step-up prompt of the web app (issue 17): an action the core refused with 403
 * step_up_required (deleting a page, moving it where more agents read it, …) sends the person
 * here with `next` = the action's page. The form asks what POST /api/auth/stepup asks — the TOTP
 * code when the account has TOTP, else the password — and calls the same core function
 * (`stepUp`: five minutes, wrong answers counted against the account's back-off). Then 303 back
 * to `next`, where the person confirms the action again.
 */

/** `next` stays inside the web app: a path under /app (safeNext refuses other hosts). */
function appNext(raw: unknown): string {
  const n = safeNext(raw);
  return n && (n === '/app' || n.startsWith('/app/')) ? n : '/app';
}

function stepUpBody(totp: boolean, next: string, csrf: string, error: string | null): SafeHtml {
  const input = totp
    ? html`<label for="code">Code from your authenticator app</label>
<input id="code" name="code" type="text" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9 ]{6,8}" maxlength="16" required autofocus${error ? html` aria-describedby="form-error"` : ''}>`
    : html`<label for="password">Your password</label>
<input id="password" name="password" type="password" autocomplete="current-password" maxlength="1024" required autofocus${error ? html` aria-describedby="form-error"` : ''}>`;
  return html`<div class="narrow">
<h1>Confirm it is you</h1>
<p>This action needs a recent confirmation. ${totp ? 'Enter the current code from your authenticator app.' : 'Enter your password.'} It lasts five minutes; then you confirm the action again.</p>
${error ? html`<p class="alert" role="alert" id="form-error">${error}</p>` : ''}
<form class="stepup" method="post" action="/app/stepup">
<input type="hidden" name="csrf" value="${csrf}">
<input type="hidden" name="next" value="${next}">
${input}
<div class="buttons">
<button type="submit">Confirm</button>
<a href="${next}">Cancel</a>
</div>
</form>
</div>`;
}

export async function stepUpRoutes(app: FastifyInstance, kit: AppKit): Promise<void> {
  const { ctx } = kit;

  async function show(req: FastifyRequest, reply: FastifyReply, p: Principal, status: number, next: string, error: string | null) {
    const viewer = await kit.viewerOf(p, req);
    const totp = (await describeCaller(ctx, p, { account: true })).account?.totp ?? false;
    return sendAppPage(reply, status, viewer, { title: 'Confirm it is you', body: stepUpBody(totp, next, viewer.csrf, error) });
  }

  app.get('/stepup', kit.opts, async (req, reply) => show(req, reply, req.principal!, 200, appNext(field(req.query, 'next')), null));

  app.post('/stepup', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const next = appNext(field(req.body, 'next'));
    const code = field(req.body, 'code');
    const password = field(req.body, 'password');
    if ((code?.length ?? 0) > 64 || (password?.length ?? 0) > 1024) return show(req, reply, p, 400, next, 'The code or password is too long.');
    try {
      await stepUp(ctx, p, { code: code?.replace(/\s+/g, '') || undefined, password: password || undefined }, req.ip);
    } catch (err) {
      // A wrong answer (403), a missing one (400) or the account's back-off (429): the form says so.
      if (isServiceError(err) && err.status !== 401 && err.status < 500 && err.code !== 'csrf_failed')
        return show(req, reply, p, err.status, next, err.message);
      throw err;
    }
    return reply.code(303).header('location', next).send();
  });
}
