import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import QRCode from 'qrcode';
import { CSRF_COOKIE, listSessions, revokeOwnSession, SESSION_COOKIE, type SessionRecord } from '../../auth/sessions.js';
import { listConnections, revokeConnection, type Connection } from '../../auth/oauth/tokens.js';
import { isServiceError, notFound } from '../../core/errors.js';
import { describeCaller } from '../../core/identity.js';
import { createWorkspaceFor, listWorkspaces, type WorkspaceView } from '../../core/workspaces.js';
import { enrollTotp } from '../../core/second-factor.js';
import { GIT_TOKEN_MAX_DAYS, listGitTokens, mintGitToken, revokeGitToken, type GitTokenListing } from '../../core/security.js';
import { html, SafeHtml } from '../../http/shared/html.js';
import type { Principal } from '../../policy/principal.js';
import { sendAppPage, when } from './layout.js';
import type { AppKit } from './routes.js';
import { setWorkspaceCookie } from './workspaces.js';
import { field, csrfOf } from './forms.js';

/**
 * The web app's own-security screen (issue 17), /app/account: the person's sessions (the
 * current one marked; revoke another), git tokens (mint after a step-up, shown once with a clone
 * command line; revoke) and TOTP enrolment (a QR code of the core's otpauth URI, rendered as SVG
 * on the server, the key as text, and a code to turn it on), the applications connected over
 * OAuth in this workspace (disconnect), and the person's workspaces (open one, create one). Each
 * calls the function behind the REST route: listSessions / revokeOwnSession (/api/auth/sessions),
 * listGitTokens / mintGitToken / revokeGitToken (/api/v1/me/git-tokens), enrollTotp
 * (/api/auth/totp/enroll), listConnections / revokeConnection (/api/v1/me/oauth-clients),
 * listWorkspaces / createWorkspaceFor (/api/v1/workspaces).
 */

const NOTICES: Record<string, string> = {
  session_revoked: 'Session ended: that browser is signed out.',
  token_revoked: 'Git token revoked: it stops working at once.',
  totp_on: 'Two-step verification is on. Sign-ins now ask for a code from your authenticator app.',
  client_revoked: 'Application disconnected: its tokens stop working at once.',
  workspace_created: 'Workspace created; the app now shows it. The workspace menu in the navigation switches back.',
};

/** As the REST route's workspace name (src/http/routes/workspaces.ts): 1 to 100 characters, no control characters. */
const WORKSPACE_NAME_RE = /^[^\u0000-\u001f\u007f]{1,100}$/;

/**
 * The QR code of an otpauth URI as inline SVG markup. Only the library's own output goes into the
 * page: one <svg> element of <path>s, with no script, no event attribute and no external reference
 * (anything else is refused, and the person still has the key as text).
 */
export async function qrSvg(uri: string): Promise<SafeHtml | null> {
  const svg = await QRCode.toString(uri, { type: 'svg', margin: 2, errorCorrectionLevel: 'M' });
  const shape =
    /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg" viewBox="0 0 \d+ \d+" shape-rendering="crispEdges">(<path (fill|stroke)="#[0-9a-f]{6}" d="[MmHhVvZz0-9 .-]+"\/>)+<\/svg>\s*$/;
  if (!shape.test(svg)) return null;
  return new SafeHtml(svg.trim().replace('<svg ', '<svg role="img" aria-label="QR code of the setup link" class="qr" '));
}

function cloneCommand(publicUrl: string, token: string, slug: string): string {
  const u = new URL(publicUrl);
  return `git clone ${u.protocol}//x:${token}@${u.host}${u.pathname.replace(/\/+$/, '')}/git/${slug}.git`;
}

function sessionsPart(sessions: SessionRecord[], csrf: string): SafeHtml {
  return html`<section aria-labelledby="sessions-h">
<h2 id="sessions-h">Sessions</h2>
<p class="muted">Browsers signed in to your account. End any you do not recognise.</p>
<div class="table-wrap" tabindex="0" role="region" aria-label="Your sessions">
<table class="sessions">
<thead><tr><th scope="col">Signed in</th><th scope="col">Last active</th><th scope="col">Expires</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
<tbody>
${sessions.map(
  (s) => html`<tr${s.current ? html` class="current"` : ''}>
<td>${when(s.created_at)}${s.current ? html` <span class="badge badge-current">this browser</span>` : ''}${s.pending ? html` <span class="muted">(second step pending)</span>` : ''}</td>
<td>${when(s.last_seen_at)}</td>
<td>${when(s.expires_at)}</td>
<td>${
    s.current
      ? html`<span class="muted">Use Sign out</span>`
      : html`<form method="post" action="/app/account/sessions/${encodeURIComponent(s.id)}/revoke">
<input type="hidden" name="csrf" value="${csrf}">
<button type="submit" class="danger">End session<span class="visually-hidden"> signed in ${s.created_at}</span></button>
</form>`
  }</td>
</tr>`,
)}
</tbody>
</table>
</div>
</section>`;
}

function tokenState(t: GitTokenListing): SafeHtml {
  if (t.revoked_at) return html`<span class="badge badge-key-revoked">revoked</span>`;
  if (Date.parse(t.expires_at) <= Date.now()) return html`<span class="badge badge-key-expired">expired</span>`;
  return html`<span class="badge badge-key-active">active</span>`;
}

function gitPart(tokens: GitTokenListing[], csrf: string, error: string | null): SafeHtml {
  return html`<section aria-labelledby="git-h">
<h2 id="git-h">Git tokens</h2>
<p class="muted">A git token is the password for cloning and pushing this workspace over HTTP (<span class="mono">/git</span> only). Minting one asks you to confirm it is you.</p>
${
  tokens.length
    ? html`<div class="table-wrap" tabindex="0" role="region" aria-label="Your git tokens">
<table class="tokens">
<thead><tr><th scope="col">Token</th><th scope="col">Name</th><th scope="col">State</th><th scope="col">Expires</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
<tbody>
${tokens.map(
  (t) => html`<tr>
<td class="mono">${t.hint}</td><td>${t.name}</td><td>${tokenState(t)}</td><td>${when(t.expires_at)}</td>
<td>${
    t.revoked_at
      ? ''
      : html`<form method="post" action="/app/account/git-tokens/${encodeURIComponent(t.id)}/revoke">
<input type="hidden" name="csrf" value="${csrf}">
<button type="submit" class="danger">Revoke<span class="visually-hidden"> git token ${t.hint}</span></button>
</form>`
  }</td>
</tr>`,
)}
</tbody>
</table>
</div>`
    : html`<p class="muted">No git tokens yet.</p>`
}
<div class="admin-form">
<h3 id="git-new">Mint a git token</h3>
${error ? html`<p class="alert" role="alert">${error}</p>` : ''}
<form method="post" action="/app/account/git-tokens" class="stack" aria-labelledby="git-new">
<input type="hidden" name="csrf" value="${csrf}">
<div class="field-row">
<div class="field grow"><label for="git-name">Token name</label>
<input id="git-name" name="name" type="text" maxlength="100" value="git" required></div>
<div class="field"><label for="git-days">Valid for (days)</label>
<input id="git-days" name="expires_in_days" type="number" min="1" max="${GIT_TOKEN_MAX_DAYS}" value="${GIT_TOKEN_MAX_DAYS}" required></div>
</div>
<div class="buttons"><button type="submit">Mint git token</button></div>
</form>
</div>
</section>`;
}

function totpPart(on: boolean, csrf: string): SafeHtml {
  return html`<section aria-labelledby="totp-h">
<h2 id="totp-h">Two-step verification</h2>
${
  on
    ? html`<p><span class="badge badge-key-active">on</span> Signing in asks for a code from your authenticator app; so does confirming sensitive actions.</p>`
    : html`<p><span class="badge badge-key-revoked">off</span> Add an authenticator app (a TOTP app such as Aegis, Google Authenticator or 1Password) so a stolen password alone cannot sign in.</p>
<form method="post" action="/app/account/totp">
<input type="hidden" name="csrf" value="${csrf}">
<button type="submit">Set up two-step verification</button>
</form>`
}
</section>`;
}

function connectionsPart(connections: Connection[], csrf: string): SafeHtml {
  return html`<section aria-labelledby="oauth-h">
<h2 id="oauth-h">Connected applications</h2>
<p class="muted">Applications (MCP clients) you allowed, over OAuth, to act as you in this workspace. Disconnecting one stops every token it holds at once.</p>
${
  connections.length
    ? html`<div class="table-wrap" tabindex="0" role="region" aria-label="Your connected applications">
<table class="connections">
<thead><tr><th scope="col">Application</th><th scope="col">From</th><th scope="col">Endpoint</th><th scope="col">Connected</th><th scope="col">Last used</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
<tbody>
${connections.map(
  (c) => html`<tr>
<td><strong>${c.client_name}</strong></td>
<td>${c.client_from ? html`<span class="mono">${c.client_from}</span>` : html`<span class="muted">returns to</span> <span class="mono">${c.redirect_hosts.join(', ')}</span>`}</td>
<td class="mono">${c.resource}</td>
<td>${when(c.created_at)}</td>
<td>${c.last_used_at ? when(c.last_used_at) : html`<span class="muted">never</span>`}</td>
<td><form method="post" action="/app/account/oauth-clients/${encodeURIComponent(c.id)}/revoke">
<input type="hidden" name="csrf" value="${csrf}">
<button type="submit" class="danger">Disconnect<span class="visually-hidden"> ${c.client_name}</span></button>
</form></td>
</tr>`,
)}
</tbody>
</table>
</div>`
    : html`<p class="muted">No application is connected to this workspace.</p>`
}
</section>`;
}

function workspacesPart(list: WorkspaceView[], csrf: string, form: { error: string; name: string } | null): SafeHtml {
  return html`<section aria-labelledby="ws-h">
<h2 id="ws-h">Workspaces</h2>
<p class="muted">The workspaces you belong to. The app shows one at a time; the REST API and MCP use the workspace your client names.</p>
<div class="table-wrap" tabindex="0" role="region" aria-label="Your workspaces">
<table class="workspaces">
<thead><tr><th scope="col">Workspace</th><th scope="col">Your role</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
<tbody>
${list.map(
  (w) => html`<tr${w.current ? html` class="current"` : ''}>
<td>${w.name} <span class="muted mono">${w.slug}</span></td>
<td>${w.role ?? ''}</td>
<td>${
    w.current
      ? html`<span class="badge badge-current">shown now</span>`
      : html`<form method="post" action="/app/workspace">
<input type="hidden" name="csrf" value="${csrf}">
<input type="hidden" name="workspace" value="${w.id}">
<button type="submit" class="secondary">Open<span class="visually-hidden"> ${w.name}</span></button>
</form>`
  }</td>
</tr>`,
)}
</tbody>
</table>
</div>
<div class="admin-form ws-new">
<h3 id="ws-new">Create a workspace</h3>
${form ? html`<p class="alert" role="alert" id="ws-error">${form.error}</p>` : ''}
<form method="post" action="/app/account/workspaces" class="stack" aria-labelledby="ws-new">
<input type="hidden" name="csrf" value="${csrf}">
<label for="ws-name">Name</label>
<input id="ws-name" name="name" type="text" maxlength="100" required value="${form?.name ?? ''}"${form ? html` aria-describedby="ws-error"` : ''}>
<div class="buttons"><button type="submit">Create workspace</button></div>
</form>
</div>
</section>`;
}

export async function accountRoutes(app: FastifyInstance, kit: AppKit): Promise<void> {
  const { ctx } = kit;

  async function send(reply: FastifyReply, req: FastifyRequest, p: Principal, status: number, title: string, body: SafeHtml) {
    return sendAppPage(reply, status, await kit.viewerOf(p, req), { title, body, current: 'account' });
  }

  async function accountPage(
    req: FastifyRequest,
    reply: FastifyReply,
    p: Principal,
    status: number,
    gitError: string | null,
    wsForm: { error: string; name: string } | null = null,
  ) {
    const [sessions, tokens, me, connections, workspaces] = await Promise.all([
      listSessions(ctx, p.id, p.sessionId),
      listGitTokens(ctx, p),
      describeCaller(ctx, p, { account: true }),
      listConnections(ctx, p),
      listWorkspaces(ctx, p),
    ]);
    const csrf = csrfOf(req);
    const n = field(req.query, 'notice');
    const note = n && NOTICES[n] ? html`<p class="notice notice-ok" role="status">${NOTICES[n]}</p>` : '';
    const body = html`<h1>Account</h1>
${note}
<dl class="facts">
<dt>Name</dt><dd>${me.name}</dd>
<dt>Email</dt><dd>${me.account?.email ?? ''}</dd>
<dt>Workspace</dt><dd>${p.workspaceSlug}${p.role ? html` · ${p.role}` : ''}</dd>
</dl>
${totpPart(me.account?.totp ?? false, csrf)}
${sessionsPart(sessions, csrf)}
${gitPart(tokens, csrf, gitError)}
${connectionsPart(connections, csrf)}
${workspacesPart(workspaces, csrf, wsForm)}`;
    return send(reply, req, p, status, 'Account', body);
  }

  app.get('/account', kit.opts, async (req, reply) => accountPage(req, reply, req.principal!, 200, null));

  app.post('/account/sessions/:id/revoke', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const id = (req.params as { id: string }).id;
    if (!(await revokeOwnSession(ctx, p.id, id))) throw notFound(`Session ${id} not found`);
    if (id === p.sessionId) {
      reply.clearCookie(SESSION_COOKIE, { path: '/' });
      reply.clearCookie(CSRF_COOKIE, { path: '/' });
      return reply.code(303).header('location', '/login').send();
    }
    return reply.code(303).header('location', '/app/account?notice=session_revoked').send();
  });

  app.post('/account/git-tokens', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const name = (field(req.body, 'name') ?? '').trim() || 'git';
    const days = Number(field(req.body, 'expires_in_days') ?? GIT_TOKEN_MAX_DAYS);
    if (name.length > 100) return accountPage(req, reply, p, 400, 'The token name is at most 100 characters.');
    if (!Number.isInteger(days) || days < 1 || days > GIT_TOKEN_MAX_DAYS)
      return accountPage(req, reply, p, 400, `A git token is valid for 1 to ${GIT_TOKEN_MAX_DAYS} days.`);
    let t;
    try {
      t = await mintGitToken(ctx, p, { name, expires_in_days: days });
    } catch (err) {
      if (isServiceError(err) && err.code === 'step_up_required') {
        return reply
          .code(303)
          .header('location', `/app/stepup?next=${encodeURIComponent('/app/account#git-h')}`)
          .send();
      }
      throw err;
    }
    const clone = cloneCommand(ctx.config.publicUrl, t.token, p.workspaceSlug);
    return send(
      reply,
      req,
      p,
      201,
      'Git token',
      html`<nav class="crumbs" aria-label="Breadcrumb"><a href="/app/account">Account</a> / <span aria-current="page">New git token</span></nav>
<h1>Git token</h1>
<div class="once" role="status">
<p><strong>Copy this token now: it is shown only this once.</strong> Only a hint (<span class="mono">${t.hint}</span>) is kept. It is valid until ${when(t.expires_at)}.</p>
<pre class="copyable secret-text" id="new-token" tabindex="0" aria-label="The new git token"><code>${t.token}</code></pre>
<button type="button" class="copy" data-copy="new-token" hidden>Copy token</button>
</div>
<h2 id="clone-h">Clone the workspace</h2>
<p class="muted">The token is the password; the user name can be anything. Keep the command out of shared shell histories.</p>
<pre class="copyable" id="clone" tabindex="0" aria-labelledby="clone-h"><code>${clone}</code></pre>
<button type="button" class="secondary copy" data-copy="clone" hidden>Copy command</button>
<p><a href="/app/account">Back to your account</a></p>`,
    );
  });

  /** Disconnect an application: as DELETE /api/v1/me/oauth-clients/:id (the person's own, in this workspace). */
  app.post('/account/oauth-clients/:id/revoke', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    await revokeConnection(ctx, p, (req.params as { id: string }).id);
    return reply.code(303).header('location', '/app/account?notice=client_revoked').send();
  });

  /** Create a workspace (as POST /api/v1/workspaces); the app then shows it. */
  app.post('/account/workspaces', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const raw = field(req.body, 'name') ?? '';
    const name = raw.trim();
    if (!WORKSPACE_NAME_RE.test(name)) {
      const error = name ? 'A workspace name is at most 100 characters, without control characters.' : 'Give the workspace a name.';
      return accountPage(req, reply, p, 400, null, { error, name: raw.slice(0, 100) });
    }
    const ws = await createWorkspaceFor(ctx, p, name);
    setWorkspaceCookie(ctx, reply, ws.id);
    return reply.code(303).header('location', '/app/account?notice=workspace_created').send();
  });

  app.post('/account/git-tokens/:id/revoke', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    await revokeGitToken(ctx, p, (req.params as { id: string }).id);
    return reply.code(303).header('location', '/app/account?notice=token_revoked').send();
  });

  /** Step 1: a fresh secret (not active yet), as a QR code and as text, and the code form. */
  app.post('/account/totp', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    let e;
    try {
      e = await enrollTotp(ctx, p, undefined);
    } catch (err) {
      if (isServiceError(err) && err.code === 'step_up_required') return reply.code(303).header('location', '/app/stepup?next=%2Fapp%2Faccount').send();
      throw err;
    }
    if (e.enabled) return reply.code(303).header('location', '/app/account').send();
    const qr = await qrSvg(e.otpauth_uri);
    const csrf = csrfOf(req);
    return send(reply, req, p, 200, 'Set up two-step verification', totpSetupBody(qr, e.otpauth_uri, e.secret, csrf, null));
  });

  /** Step 2: the code the app shows turns it on. */
  app.post('/account/totp/verify', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const code = (field(req.body, 'code') ?? '').replace(/\s+/g, '');
    const csrf = csrfOf(req);
    if (!/^\d{6,8}$/.test(code))
      return send(reply, req, p, 400, 'Set up two-step verification', totpSetupBody(null, null, null, csrf, 'Enter the 6-digit code.'));
    try {
      await enrollTotp(ctx, p, code);
    } catch (err) {
      if (isServiceError(err) && err.code === 'step_up_required') return reply.code(303).header('location', '/app/stepup?next=%2Fapp%2Faccount').send();
      if (isServiceError(err) && (err.code === 'invalid_code' || err.code === 'totp_not_started')) {
        return send(
          reply,
          req,
          p,
          400,
          'Set up two-step verification',
          totpSetupBody(null, null, null, csrf, 'That code is not right, or it was already used. Wait for the next code and try again.'),
        );
      }
      throw err;
    }
    return reply.code(303).header('location', '/app/account?notice=totp_on').send();
  });
}

function totpSetupBody(qr: SafeHtml | null, uri: string | null, secret: string | null, csrf: string, error: string | null): SafeHtml {
  return html`<nav class="crumbs" aria-label="Breadcrumb"><a href="/app/account">Account</a> / <span aria-current="page">Two-step verification</span></nav>
<div class="narrow">
<h1>Set up two-step verification</h1>
${
  uri && secret
    ? html`<p>Scan this code with your authenticator app, or type the key in by hand. Then enter the 6-digit code the app shows.</p>
${qr ? html`<div class="qr-wrap">${qr}</div>` : ''}
<p class="label" id="totp-key-h">Key</p>
<pre class="copyable" id="totp-key" tabindex="0" aria-labelledby="totp-key-h"><code>${secret}</code></pre>
<details><summary>Setup link</summary><pre class="copyable" id="totp-uri" tabindex="0" aria-label="Setup link"><code>${uri}</code></pre></details>`
    : html`<p>Enter the 6-digit code your authenticator app shows for Context Vault. To start over with a new key, go back to <a href="/app/account">your account</a>.</p>`
}
${error ? html`<p class="alert" role="alert" id="totp-error">${error}</p>` : ''}
<form method="post" action="/app/account/totp/verify" class="stepup">
<input type="hidden" name="csrf" value="${csrf}">
<label for="totp-code">Code from the app</label>
<input id="totp-code" name="code" type="text" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9 ]{6,8}" maxlength="16" required${error ? html` aria-describedby="totp-error"` : ''}>
<div class="buttons"><button type="submit">Turn on</button><a href="/app/account">Cancel</a></div>
</form>
</div>`;
}
