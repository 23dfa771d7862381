import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { currentTotp } from '../../src/auth/totp.js';
import { seriousViolations } from '../support/axe.js';
import { chromiumPresent, launchChromium, openPage, screenshot, BROWSER_SUITE } from '../support/browser.js';
import { testEngines } from '../support/engines.js';
import { Client, startTestServer, type TestServer } from '../support/server.js';
import { freshEmail, signedInPage, WEB_PASSWORD, webPerson } from '../support/web.js';
import { MemoryProvider, newMcpClient, oauthTransport, REDIRECT } from '../oauth/support.js';

/**
 * Getting in (issue 17): the HTML sign-up page (GET/POST /signup: the same core `signup` as
 * POST /api/v1/auth/signup, SIGNUPS=invite refused as the API refuses, CSRF double submit, the
 * sign-up rate limit, TOTP enrolment when the service requires it), the sign-in, invite and
 * consent pages in the app's look, the applications connected over OAuth on /app/account
 * (Disconnect kills the token on /mcp), and the workspace switcher (the `svc_ws` cookie:
 * membership checked on every request, a lost membership falls back to the session's own
 * workspace, the REST API unaffected), with "Create workspace".
 */

const GATE_CSP = "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
const FORM = 'application/x-www-form-urlencoded';

/** Signs a human up through the JSON API; the client holds the session. */
const human = webPerson;

type Answer = { status: number; text: string; location: string | null; headers: Headers };

/** A request as a browser sends it (Accept: text/html, the jar's cookies, redirects not followed); the jar learns the answer's cookies. */
async function send(c: Client, method: 'GET' | 'POST', path: string, fields?: Record<string, string>): Promise<Answer> {
  const headers: Record<string, string> = { accept: 'text/html' };
  if (c.cookies.size > 0) headers.cookie = [...c.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  if (fields) headers['content-type'] = FORM;
  const res = await fetch(c.base + path, { method, headers, body: fields ? new URLSearchParams(fields).toString() : undefined, redirect: 'manual' });
  for (const sc of res.headers.getSetCookie()) {
    const [k, ...v] = sc.split(';')[0]!.split('=');
    const value = v.join('=');
    if (/expires=Thu, 01 Jan 1970/i.test(sc) || value === '') c.cookies.delete(k!.trim());
    else c.cookies.set(k!.trim(), value);
  }
  return { status: res.status, text: await res.text(), location: res.headers.get('location'), headers: res.headers };
}

const hiddenField = (page: string, name: string) => new RegExp(`<input type="hidden" name="${name}" value="([^"]*)">`).exec(page)?.[1];
const setCookie = (a: Answer, name: string) => a.headers.getSetCookie().find((c) => c.startsWith(`${name}=`));

/** Opens /signup in a fresh jar: the jar holds the pre-session CSRF cookie the form embeds. */
async function openSignup(base: string): Promise<{ c: Client; csrf: string; page: Answer }> {
  const c = new Client(base);
  const page = await send(c, 'GET', '/signup');
  expect(page.status, page.text.slice(0, 400)).toBe(200);
  const csrf = hiddenField(page.text, 'csrf')!;
  expect(csrf).toBe(c.cookies.get('svc_csrf'));
  return { c, csrf, page };
}

/** A real OAuth connection of an MCP client for `person` (the SDK's flow; consent through the endpoint's JSON form). */
async function connectApp(base: string, person: Client, name: string): Promise<{ token: string }> {
  const provider = new MemoryProvider({ client_name: name });
  await expect(newMcpClient().connect(oauthTransport(base, provider))).rejects.toBeInstanceOf(UnauthorizedError);
  const url = provider.authorizationUrl!;
  const page = await person.get(url.pathname + url.search, { accept: 'application/json' });
  expect(page.status, page.text).toBe(200);
  const res = await person.post('/oauth/authorize', { ...page.body.answer.fields, decision: 'approve' }, { accept: 'application/json' });
  expect(res.status, res.text).toBe(200);
  const back = new URL(res.body.redirect_to);
  await oauthTransport(base, provider).finishAuth(back.searchParams.get('code')!);
  return { token: provider.saved!.access_token };
}

/** What /mcp answers an MCP `initialize` with this bearer token. */
async function mcpStatus(base: string, token: string): Promise<number> {
  const res = await fetch(`${base}/mcp`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 't', version: '1' } },
    }),
  });
  await res.body?.cancel();
  return res.status;
}

async function write(c: Client, path: string, content: string): Promise<void> {
  const res = await c.post('/api/v1/nodes', { path, content, message: `add ${path}` });
  expect(res.status, res.text).toBe(201);
}

/** Bob's workspace, with a page, that Olga joins as an editor (Olga's own has another Space). */
async function twoWorkspaces(base: string) {
  const olga = await human(base, 'Olga');
  const bob = await human(base, 'Bob');
  await write(olga.client, 'alpha/index.md', '# Alpha\n\nOlga’s own notes.\n');
  await write(bob.client, 'bravo/index.md', '# Bravo\n\nBob’s team notes.\n');
  const inv = await bob.client.post('/api/v1/invites', { role: 'editor' });
  expect(inv.status, inv.text).toBe(201);
  const acc = await olga.client.post(`/api/v1/invites/${inv.body.token}/accept`);
  expect(acc.status, acc.text).toBe(200);
  return { olga, bob };
}

/* -------------------------------------------------------------- plain HTTP */

describe.each(testEngines())('getting in over HTTP (%s)', (engine) => {
  let s: TestServer;

  beforeAll(async () => {
    s = await startTestServer(engine);
  });
  afterAll(async () => s?.stop());

  it('sign-up: the page is a form in the app look; the account is created, signed in and sent to /app', async () => {
    const login = await send(new Client(s.url), 'GET', '/login');
    expect(login.text).toContain('href="/signup"');
    const { c, csrf, page } = await openSignup(s.url);
    expect(page.headers.get('content-security-policy')).toBe(GATE_CSP);
    expect(page.text).toContain('<link rel="stylesheet" href="/assets/app.css">');
    expect(page.text).toContain('class="brand"');
    expect(page.text).not.toMatch(/<script|style=/i);
    expect(page.text).toContain('<form method="post" action="/signup">');
    const email = freshEmail('Nora');
    const res = await send(c, 'POST', '/signup', { csrf, name: 'Nora', email, password: WEB_PASSWORD });
    expect(res.status, res.text.slice(0, 400)).toBe(303);
    expect(res.location).toBe('/app');
    expect(setCookie(res, 'svc_session')).toMatch(/HttpOnly/);
    const app = await send(c, 'GET', '/app');
    expect(app.status).toBe(200);
    expect(app.text).toContain('<span class="who-name">Nora</span>');
    const me = await c.get('/api/auth/me');
    expect(me.status, me.text).toBe(200);
    expect(me.body.user.email).toBe(email);
    // Signed in: /signup and /login lead on to the app.
    expect((await send(c, 'GET', '/signup')).location).toBe('/app');
    expect((await send(c, 'GET', '/login')).location).toBe('/app');
  });

  it('sign-up keeps a `next` (an OAuth request waiting for sign-in) and goes there after', async () => {
    const c = new Client(s.url);
    const page = await send(c, 'GET', `/signup?next=${encodeURIComponent('/oauth/authorize?x=1')}`);
    expect(hiddenField(page.text, 'next')).toBe('/oauth/authorize?x=1');
    const res = await send(c, 'POST', '/signup', {
      csrf: hiddenField(page.text, 'csrf')!,
      next: '/oauth/authorize?x=1',
      name: 'Nat',
      email: freshEmail('Nat'),
      password: WEB_PASSWORD,
    });
    expect(res.status).toBe(303);
    expect(res.location).toBe('/oauth/authorize?x=1');
    const evil = await send(new Client(s.url), 'GET', `/signup?next=${encodeURIComponent('//evil.example')}`);
    expect(hiddenField(evil.text, 'next')).toBeUndefined();
  });

  it('a forged sign-up (no svc_csrf cookie, or another token) is 403 and creates nobody', async () => {
    const email = freshEmail('Mallory');
    const bare = new Client(s.url);
    const forged = await send(bare, 'POST', '/signup', { csrf: 'f'.repeat(43), name: 'Mallory', email, password: WEB_PASSWORD });
    expect(forged.status).toBe(403);
    expect(forged.text).toContain('did not come from this site');
    expect(setCookie(forged, 'svc_session')).toBeUndefined();
    const { c } = await openSignup(s.url);
    const wrong = await send(c, 'POST', '/signup', { csrf: 'g'.repeat(43), name: 'Mallory', email, password: WEB_PASSWORD });
    expect(wrong.status).toBe(403);
    const none = await send(c, 'POST', '/signup', { name: 'Mallory', email, password: WEB_PASSWORD });
    expect(none.status).toBe(403);
    // Nobody was created: the address signs in to nothing, and is still free to sign up.
    expect((await new Client(s.url).post('/api/auth/login', { email, password: WEB_PASSWORD })).status).toBe(401);
  });

  it('bad input comes back as the form with a message and the typed name, never the password', async () => {
    const { c, csrf } = await openSignup(s.url);
    const secret = 'tangerine zebra 42';
    const badEmail = await send(c, 'POST', '/signup', { csrf, name: 'Pia <Ops>', email: 'not-an-email', password: secret });
    expect(badEmail.status).toBe(400);
    expect(badEmail.text).toContain('role="alert"');
    expect(badEmail.text).toContain('valid email address');
    expect(badEmail.text).toContain('value="Pia &lt;Ops&gt;"');
    expect(badEmail.text).not.toContain(secret);
    const email = freshEmail('Pia');
    const short = await send(c, 'POST', '/signup', { csrf, name: 'Pia', email, password: 'short1' });
    expect(short.status).toBe(400);
    expect(short.text).toMatch(/role="alert">[^<]*10/);
    expect(short.text).toContain('value="Pia"');
    expect(short.text).toContain(`value="${email}"`);
    expect(short.text).not.toContain('short1');
    expect(setCookie(short, 'svc_session')).toBeUndefined();
    // An address already taken: 409 with a way on.
    const taken = await human(s.url, 'Quinn');
    const again = await send(c, 'POST', '/signup', { csrf, name: 'Quinn', email: taken.email, password: WEB_PASSWORD });
    expect(again.status).toBe(409);
    expect(again.text).toContain('already exists');
    // Repeated fields and oversize input: 4xx pages, never a 500.
    const arr = await fetch(`${s.url}/signup`, {
      method: 'POST',
      headers: { accept: 'text/html', 'content-type': FORM, cookie: `svc_csrf=${csrf}` },
      body: `csrf=${csrf}&name=a&name=b&email=x%40example.com&password=${encodeURIComponent(WEB_PASSWORD)}`,
    });
    expect(arr.status).toBe(400);
    const big = await send(c, 'POST', '/signup', { csrf, name: 'n'.repeat(500), email, password: WEB_PASSWORD });
    expect(big.status).toBe(400);
  });

  it('connected applications: a real OAuth connection is listed on /app/account; Disconnect ends its token on /mcp', async () => {
    const ann = await human(s.url, 'Ann');
    const { token } = await connectApp(s.url, ann.client, 'Notes Agent (test)');
    expect(await mcpStatus(s.url, token)).toBe(200);
    const page = await send(ann.client, 'GET', '/app/account');
    expect(page.status).toBe(200);
    expect(page.text).toContain('Connected applications');
    expect(page.text).toContain('<strong>Notes Agent (test)</strong>');
    expect(page.text).toContain(`${s.url}/mcp`);
    expect(page.text).toContain(new URL(REDIRECT).host);
    const action = /action="(\/app\/account\/oauth-clients\/[^"]+\/revoke)"/.exec(page.text)?.[1];
    expect(action).toBeDefined();
    // Someone else's session cannot disconnect it (404, as DELETE /api/v1/me/oauth-clients/:id), nor a form without the token.
    const other = await human(s.url, 'Otto');
    expect((await send(other.client, 'POST', action!, { csrf: other.client.csrf! })).status).toBe(404);
    expect((await send(ann.client, 'POST', action!, { csrf: 'nope' })).status).toBe(403);
    expect(await mcpStatus(s.url, token)).toBe(200);
    const gone = await send(ann.client, 'POST', action!, { csrf: ann.client.csrf! });
    expect(gone.status).toBe(303);
    expect(gone.location).toBe('/app/account?notice=client_revoked');
    expect(await mcpStatus(s.url, token)).toBe(401);
    const after = await send(ann.client, 'GET', '/app/account?notice=client_revoked');
    expect(after.text).toContain('Application disconnected');
    expect(after.text).not.toContain('Notes Agent (test)');
    expect((await ann.client.get('/api/v1/me/oauth-clients')).body.clients).toEqual([]);
  });

  it('switcher: a person in two workspaces switches, sees the other Spaces; removed from it, the app is back in their own', async () => {
    const { olga, bob } = await twoWorkspaces(s.url);
    const home = await send(olga.client, 'GET', '/app');
    expect(home.text).toContain('href="/app/s/alpha"');
    expect(home.text).not.toContain('href="/app/s/bravo"');
    expect(home.text).toContain('action="/app/workspace"');
    expect(home.text).toContain(`<option value="${bob.workspace.id}">${bob.workspace.name} (editor)</option>`);
    // One workspace: no switcher.
    expect((await send(bob.client, 'GET', '/app')).text).not.toContain('action="/app/workspace"');

    // A forged switch (no form token) and a workspace she does not belong to change nothing.
    expect((await send(olga.client, 'POST', '/app/workspace', { csrf: 'x', workspace: bob.workspace.id })).status).toBe(403);
    const stranger = await human(s.url, 'Sid');
    const notHers = await send(olga.client, 'POST', '/app/workspace', { csrf: olga.client.csrf!, workspace: stranger.workspace.id });
    expect(notHers.status).toBe(404);
    expect(setCookie(notHers, 'svc_ws')).toBeUndefined();
    expect((await send(olga.client, 'POST', '/app/workspace', { csrf: olga.client.csrf!, workspace: '../x' })).status).toBe(400);

    const sw = await send(olga.client, 'POST', '/app/workspace', { csrf: olga.client.csrf!, workspace: bob.workspace.id });
    expect(sw.status).toBe(303);
    expect(sw.location).toBe('/app');
    const cookie = setCookie(sw, 'svc_ws')!;
    expect(cookie).toContain(`svc_ws=${bob.workspace.id}`);
    expect(cookie).toMatch(/Path=\/app/);
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Lax/);
    const there = await send(olga.client, 'GET', '/app');
    expect(there.text).toContain('href="/app/s/bravo"');
    expect(there.text).not.toContain('href="/app/s/alpha"');
    // The switcher names the workspace shown (its option selected).
    expect(there.text).toContain(`<option value="${bob.workspace.id}" selected>${bob.workspace.name}`);
    expect((await send(olga.client, 'GET', '/app/p/bravo/index.md')).status).toBe(200);
    // The account page (and every form) works in the chosen workspace.
    const account = await send(olga.client, 'GET', '/app/account');
    expect(account.text).toContain(`<dd>${bob.workspace.slug} · editor</dd>`);
    // The REST API is unaffected: the session's own workspace without X-Service-Workspace.
    const spaces = await olga.client.get('/api/v1/spaces');
    expect(spaces.body.spaces.map((x: { id: string }) => x.id)).toContain('alpha');
    expect(spaces.body.spaces.map((x: { id: string }) => x.id)).not.toContain('bravo');

    // Bob removes her: a form made for his workspace is refused (never applied to hers) …
    expect((await bob.client.post('/api/auth/stepup', { password: WEB_PASSWORD })).status).toBe(200);
    const removed = await bob.client.delete(`/api/v1/members/${olga.id}`);
    expect(removed.status, removed.text).toBe(200);
    const stale = await send(olga.client, 'POST', '/app/account/workspaces', { csrf: olga.client.csrf!, name: 'Made in the wrong place' });
    expect(stale.status).toBe(404);
    expect(stale.text).toContain('no longer a member');
    const mine = await olga.client.get('/api/v1/workspaces');
    expect(mine.body.workspaces.map((w: { name: string }) => w.name)).not.toContain('Made in the wrong place');
    // … and the app shows her own workspace again, clearing the choice: no error, no loop.
    olga.client.cookies.set('svc_ws', bob.workspace.id);
    const back = await send(olga.client, 'GET', '/app');
    expect(back.status).toBe(200);
    expect(back.text).toContain('href="/app/s/alpha"');
    expect(back.text).not.toContain('href="/app/s/bravo"');
    expect(setCookie(back, 'svc_ws')).toMatch(/^svc_ws=;/);
    expect(setCookie(back, 'svc_ws')).toMatch(/Path=\/app/);
    expect(olga.client.cookies.has('svc_ws')).toBe(false);
    expect((await send(olga.client, 'GET', '/app')).status).toBe(200);
    // A cookie that is not a workspace id at all is ignored and cleared.
    olga.client.cookies.set('svc_ws', 'garbage%20value');
    const junk = await send(olga.client, 'GET', '/app');
    expect(junk.status).toBe(200);
    expect(olga.client.cookies.has('svc_ws')).toBe(false);
  });

  it('switcher: a lockdown of the chosen workspace ends its access for older sessions; the app falls back to their own', async () => {
    const { olga, bob } = await twoWorkspaces(s.url);
    const sw = await send(olga.client, 'POST', '/app/workspace', { csrf: olga.client.csrf!, workspace: bob.workspace.id });
    expect(sw.status).toBe(303);
    expect((await send(olga.client, 'GET', '/app')).text).toContain('href="/app/s/bravo"');
    expect((await bob.client.post('/api/auth/stepup', { password: WEB_PASSWORD })).status).toBe(200);
    const lock = await bob.client.post(`/api/v1/workspaces/${bob.workspace.slug}/lockdown`);
    expect(lock.status, lock.text).toBe(200);
    // Her session predates the lockdown: Bob's workspace is closed to it, her own is not.
    const page = await send(olga.client, 'GET', '/app');
    expect(page.status).toBe(200);
    expect(page.text).toContain('href="/app/s/alpha"');
    expect(page.text).not.toContain('href="/app/s/bravo"');
    expect(olga.client.cookies.has('svc_ws')).toBe(false);
  });

  it('accepting an invite on its page picks the joined workspace for the app ("Continue to …")', async () => {
    const owner = await human(s.url, 'Uma');
    const guest = await human(s.url, 'Gus');
    const inv = await owner.client.post('/api/v1/invites', { role: 'viewer' });
    const path = new URL(inv.body.accept_url).pathname;
    const res = await send(guest.client, 'POST', path, { action: 'accept', csrf: guest.client.csrf! });
    expect(res.status).toBe(200);
    expect(res.text).toContain(`<a href="/app">Continue to ${owner.workspace.name}</a>`);
    expect(setCookie(res, 'svc_ws')).toMatch(new RegExp(`^svc_ws=${owner.workspace.id};.*Path=/app`));
    const app = await send(guest.client, 'GET', '/app');
    expect(app.text).toContain(`<option value="${owner.workspace.id}" selected>${owner.workspace.name}`);
  });

  it('create workspace on the account page: as POST /api/v1/workspaces, and the app then shows it', async () => {
    const rita = await human(s.url, 'Rita');
    const page = await send(rita.client, 'GET', '/app/account');
    expect(page.text).toContain('action="/app/account/workspaces"');
    const empty = await send(rita.client, 'POST', '/app/account/workspaces', { csrf: rita.client.csrf!, name: '   ' });
    expect(empty.status).toBe(400);
    expect(empty.text).toContain('Give the workspace a name.');
    const ctl = await send(rita.client, 'POST', '/app/account/workspaces', { csrf: rita.client.csrf!, name: 'Bad\u0007name' });
    expect(ctl.status).toBe(400);
    expect((await send(rita.client, 'POST', '/app/account/workspaces', { csrf: 'no', name: 'Forged' })).status).toBe(403);
    const made = await send(rita.client, 'POST', '/app/account/workspaces', { csrf: rita.client.csrf!, name: 'Research <lab>' });
    expect(made.status).toBe(303);
    expect(made.location).toBe('/app/account?notice=workspace_created');
    const list = await rita.client.get('/api/v1/workspaces');
    const created = list.body.workspaces.find((w: { name: string }) => w.name === 'Research <lab>');
    expect(created?.role).toBe('owner');
    expect(setCookie(made, 'svc_ws')).toContain(`svc_ws=${created.id}`);
    const now = await send(rita.client, 'GET', '/app/account?notice=workspace_created');
    expect(now.text).toContain('Workspace created');
    expect(now.text).toContain(`<dd>${created.slug} · owner</dd>`);
    expect(now.text).toContain('Research &lt;lab&gt; (owner)</option>');
  });
});

describe.each(testEngines())('sign-up by invite only, with the sign-up rate limit (%s)', (engine) => {
  let s: TestServer;

  beforeAll(async () => {
    s = await startTestServer(engine, { SIGNUPS: 'invite', RATE_LIMITS: 'on', RATE_LIMIT_LOGIN_PER_MIN: '4' });
  });
  afterAll(async () => s?.stop());

  it('the first account is open; after it the page says invite only and its POST is refused as the API refuses; the limit answers 429', async () => {
    // No account yet: the service bootstraps through the page (sign-up bucket: 1).
    const first = await openSignup(s.url);
    expect(first.page.text).toContain('action="/signup"');
    const made = await send(first.c, 'POST', '/signup', { csrf: first.csrf, name: 'Founder', email: freshEmail('Founder'), password: WEB_PASSWORD });
    expect(made.status, made.text.slice(0, 300)).toBe(303);

    const c = new Client(s.url);
    const login = await send(c, 'GET', '/login');
    expect(login.text).not.toContain('href="/signup"');
    expect(login.text).toContain('by invite');
    const page = await send(c, 'GET', '/signup');
    expect(page.status).toBe(200);
    expect(page.text).toContain('Sign-up is by invite only');
    expect(page.text).not.toContain('action="/signup"');
    // The page's POST with a good form token (bucket: 2): refused, nobody created.
    const email = freshEmail('Late');
    const refused = await send(c, 'POST', '/signup', { csrf: c.cookies.get('svc_csrf')!, name: 'Late', email, password: WEB_PASSWORD });
    expect(refused.status).toBe(403);
    expect(refused.text).toContain('invite');
    expect(setCookie(refused, 'svc_session')).toBeUndefined();
    const api = await new Client(s.url).post('/api/v1/auth/signup', { email, password: WEB_PASSWORD, name: 'Late' }); // bucket: 3
    expect(api.status).toBe(403);
    expect(api.body.code).toBe('invite_required');
    // The page shares the API's per-IP sign-up bucket (4 here): the next two meet it.
    await send(c, 'POST', '/signup', { csrf: 'x', name: 'x', email, password: WEB_PASSWORD });
    const limited = await send(c, 'POST', '/signup', { csrf: 'x', name: 'x', email, password: WEB_PASSWORD });
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  });
});

/* ---------------------------------------------------------------- browser */

const haveChromium = chromiumPresent('getting in');

async function noOverflow(page: Page): Promise<number> {
  return page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
}

/** A browser journey of several pages and round trips: room on a busy machine (not a timed assertion). */
const JOURNEY = { timeout: 90_000 };

// SQLite only, as the other browser suites: the plain HTTP suites above run on every engine.
describe.skipIf(!haveChromium)('getting in, in a real browser (chromium, sqlite)', BROWSER_SUITE, () => {
  let s: TestServer;
  let totpServer: TestServer;
  let browser: Browser;

  beforeAll(async () => {
    [s, totpServer] = await Promise.all([startTestServer('sqlite'), startTestServer('sqlite', { REQUIRE_TOTP: 'on' })]);
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
    await totpServer?.stop();
  });

  it('sign-up from the front door, TOTP enrolment with a QR code, then the app', JOURNEY, async () => {
    const { context, page, dialogs } = await openPage(browser, totpServer.url);
    await page.goto('/');
    await page.waitForURL((u) => u.pathname === '/login');
    expect(await seriousViolations(page)).toEqual([]);
    await page.getByRole('link', { name: 'Create an account' }).click();
    await page.waitForURL((u) => u.pathname === '/signup');
    expect(await seriousViolations(page)).toEqual([]);
    const email = freshEmail('Vera');
    await page.getByLabel('Your name').fill('Vera');
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(WEB_PASSWORD);
    await screenshot(page, 'app-signup');
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.getByRole('heading', { name: 'Set up two-step verification' }).waitFor();
    expect(await page.getByRole('img', { name: 'QR code of the setup link' }).isVisible()).toBe(true);
    expect(await seriousViolations(page)).toEqual([]);
    const key = (await page.locator('#key').textContent())!.trim();
    await page.getByLabel('Code', { exact: true }).fill(currentTotp(key));
    await page.getByRole('button', { name: 'Verify' }).click();
    await page.waitForURL((u) => u.pathname === '/app');
    expect(await page.locator('.who-name').textContent()).toBe('Vera');
    const me = await page.request.get('/api/v1/me');
    expect((await me.json()).totp).toBeTruthy();
    expect(dialogs).toEqual([]);
    await context.close();
  });

  it('the sign-up and sign-in pages fit a phone screen', async () => {
    const { context, page } = await openPage(browser, s.url, { width: 390, height: 844 });
    for (const url of ['/signup', '/login']) {
      await page.goto(url);
      expect(await noOverflow(page), url).toBeLessThanOrEqual(0);
    }
    await context.close();
  });

  it('the invite page is in the app look', async () => {
    const owner = await human(s.url, 'Ines');
    const inv = await owner.client.post('/api/v1/invites', { role: 'editor' });
    const { context, page } = await openPage(browser, s.url);
    const res = await page.goto(new URL(inv.body.accept_url).pathname);
    expect(res?.headers()['content-security-policy']).toBe(GATE_CSP);
    expect(await page.locator('link[rel="stylesheet"][href="/assets/app.css"]').count()).toBe(1);
    expect(await page.locator('header.topbar .brand').textContent()).toBe('Context Vault');
    // The app's stylesheet applies (the card has the app's card background and border).
    expect(await page.locator('.gate-card').evaluate((el) => getComputedStyle(el).borderRadius)).toBe('12px');
    expect(await seriousViolations(page)).toEqual([]);
    await context.close();
  });

  it('consent in the app look; Allow connects; the account page lists the application and Disconnect ends its token', JOURNEY, async () => {
    const paula = await human(s.url, 'Paula');
    const provider = new MemoryProvider({ client_name: 'Claude Desktop (test)' });
    await expect(newMcpClient().connect(oauthTransport(s.url, provider))).rejects.toBeInstanceOf(UnauthorizedError);
    const { context, page } = await signedInPage(browser, s.url, paula.email);
    let landed: URL | undefined;
    await page.route(`${REDIRECT}**`, async (route) => {
      landed = new URL(route.request().url());
      await route.fulfill({ status: 200, contentType: 'text/plain', body: 'You can close this window.' });
    });
    await page.goto(provider.authorizationUrl!.href);
    await expect.poll(() => page.getByRole('heading', { level: 1 }).textContent()).toBe('Connect Claude Desktop (test)?');
    expect(await page.locator('link[rel="stylesheet"][href="/assets/app.css"]').count()).toBe(1);
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, 'app-consent');
    await page.getByRole('button', { name: 'Allow' }).click();
    await expect.poll(() => landed?.searchParams.get('code') ?? null, { timeout: 15_000 }).toMatch(/^oac_/);
    await page.waitForURL((u) => u.href.startsWith(REDIRECT));
    await oauthTransport(s.url, provider).finishAuth(landed!.searchParams.get('code')!);
    const token = provider.saved!.access_token;
    expect(await mcpStatus(s.url, token)).toBe(200);

    await page.goto('/app/account');
    const row = page.locator('table.connections tbody tr', { hasText: 'Claude Desktop (test)' });
    expect(await row.count()).toBe(1);
    expect(await row.textContent()).toContain(`${s.url}/mcp`);
    expect(await seriousViolations(page)).toEqual([]);
    await row.getByRole('button', { name: /Disconnect/ }).click();
    await page.waitForURL('**/app/account?notice=client_revoked');
    expect(await page.getByRole('status').first().textContent()).toContain('Application disconnected');
    expect(await page.locator('table.connections').count()).toBe(0);
    expect(await mcpStatus(s.url, token)).toBe(401);
    await context.close();
  });

  it('the workspace switcher in the navigation: pick the other workspace, see its Spaces; create a workspace from the account page', JOURNEY, async () => {
    const { olga, bob } = await twoWorkspaces(s.url);
    const { context, page } = await signedInPage(browser, s.url, olga.email);
    expect(await page.getByRole('link', { name: 'alpha' }).count()).toBe(1);
    const nav = page.getByRole('navigation', { name: 'Main' });
    await nav.getByLabel('Workspace', { exact: true }).selectOption(bob.workspace.id);
    expect(await seriousViolations(page)).toEqual([]);
    await nav.getByRole('button', { name: 'Switch workspace' }).click();
    await page.waitForURL((u) => u.pathname === '/app');
    await page.getByRole('link', { name: 'bravo' }).waitFor();
    expect(await page.getByRole('link', { name: 'alpha' }).count()).toBe(0);
    expect(await nav.getByLabel('Workspace', { exact: true }).inputValue()).toBe(bob.workspace.id);
    const ws = (await context.cookies()).find((c) => c.name === 'svc_ws');
    expect(ws?.httpOnly).toBe(true);
    expect(ws?.path).toBe('/app');

    // The page scripts' REST calls follow the switch (X-Service-Workspace): quick-open finds Bob's page, not Olga's.
    await page.keyboard.press('Control+k');
    const dialog = page.getByRole('dialog', { name: 'Open a page' });
    await dialog.getByRole('combobox', { name: 'Page title' }).pressSequentially('notes');
    const found = dialog.getByRole('listbox', { name: 'Pages found' }).getByRole('option');
    await expect.poll(() => found.count()).toBe(1);
    expect(await found.locator('.qo-path').textContent()).toBe('bravo/index.md');
    await page.keyboard.press('Escape');

    await page.goto('/app/account');
    await page.getByLabel('Name', { exact: true }).fill('Side project');
    await page.getByRole('button', { name: 'Create workspace' }).click();
    await page.waitForURL('**/app/account?notice=workspace_created');
    expect(await page.locator('.facts').textContent()).toContain('side-project');
    expect(await nav.getByLabel('Workspace', { exact: true }).locator('option').allTextContents()).toEqual(
      expect.arrayContaining(['Side project (owner)', `${bob.workspace.name} (editor)`]),
    );
    expect(await seriousViolations(page)).toEqual([]);

    // Phone width: the navigation with its switcher still fits.
    await page.setViewportSize({ width: 390, height: 844 });
    for (const url of ['/app', '/app/account']) {
      await page.goto(url);
      expect(await noOverflow(page), url).toBeLessThanOrEqual(0);
    }
    await context.close();
  });
});
