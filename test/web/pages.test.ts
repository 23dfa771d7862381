import { freshEmail, webPerson, type WebPerson } from '../support/web.js';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { chromiumPresent, launchChromium, BROWSER_SUITE } from '../support/browser.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { currentTotp } from '../../src/auth/totp.js';
import { testEngines } from '../support/engines.js';
import { Client, startTestServer, type Res, type TestServer } from '../support/server.js';

/**
 * The HTML pages (src/web): GET/POST /login, POST /login/totp, GET/POST /invite/:token.
 * Plain HTTP checks run on every engine; the browser suite drives Debian's chromium through
 * playwright-core as a person would, on SQLite only (the pages call the same core functions
 * the engine suites already cover; the browser adds nothing engine-specific).
 */

const PASSWORD = 'correct horse battery';
// The app's stylesheet and nothing else: no script, no inline style (issue 17: the pages share the app's look).
const CSP = "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/** Signs a human up through the JSON API; the client holds the session. */
const human = webPerson;
type Human = WebPerson;

/** Turns TOTP on through the JSON API; answers the secret. The current step is used up. */
async function enrolTotp(c: Client): Promise<string> {
  // Enrolling from a signed-in session needs a step-up (issue 11).
  expect((await c.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
  const start = await c.post('/api/auth/totp/enroll', {});
  expect(start.status, start.text).toBe(200);
  const secret: string = start.body.secret;
  const done = await c.post('/api/auth/totp/enroll', { code: currentTotp(secret) });
  expect(done.status, done.text).toBe(200);
  return secret;
}

async function invite(owner: Client, ws?: string): Promise<{ id: string; token: string; path: string }> {
  const res = await owner.post(ws ? `/api/v1/workspaces/${ws}/invites` : '/api/v1/invites', { role: 'editor' });
  expect(res.status, res.text).toBe(201);
  return { id: res.body.id, token: res.body.token, path: new URL(res.body.accept_url).pathname };
}

/**
 * A raw request as a browser form would send it: Accept: text/html, the client's cookies, no X-CSRF-Token header
 * (a form cannot send one), and redirects NOT followed (Client follows them and would lose the
 * 303's Set-Cookie). The client's cookie jar is updated from the answer.
 */
async function send(c: Client, method: string, path: string, body?: string, contentType?: string): Promise<Res<string>> {
  // What a browser sends with a form post; without it, pre-handler errors answer JSON.
  const headers: Record<string, string> = { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' };
  if (c.cookies.size > 0) headers.cookie = [...c.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  if (contentType) headers['content-type'] = contentType;
  const res = await fetch(c.base + path, { method, headers, body, redirect: 'manual' });
  for (const sc of res.headers.getSetCookie()) {
    const [k, ...v] = sc.split(';')[0]!.split('=');
    const value = v.join('=');
    if (/expires=Thu, 01 Jan 1970/i.test(sc) || value === '') c.cookies.delete(k!.trim());
    else c.cookies.set(k!.trim(), value);
  }
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text, text };
}

const FORM = 'application/x-www-form-urlencoded';

function postForm(c: Client, path: string, fields: Record<string, string | string[]>): Promise<Res<string>> {
  const body = new URLSearchParams();
  for (const [k, v] of Object.entries(fields)) for (const x of [v].flat()) body.append(k, x);
  return send(c, 'POST', path, body.toString(), FORM);
}

function hiddenField(page: string, name: string): string | undefined {
  const m = new RegExp(`<input type="hidden" name="${name}" value="([^"]*)">`).exec(page);
  return m?.[1];
}

function setCookieNames(res: Res): string[] {
  return res.headers.getSetCookie().map((c) => c.split('=')[0]!.trim());
}

function expectPage(res: Res, status: number): void {
  expect(res.status, `${res.status} ${res.text.slice(0, 600)}`).toBe(status);
  expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
  expect(res.headers.get('content-security-policy')).toBe(CSP);
  expect(res.headers.get('x-frame-options')).toBe('DENY');
  expect(res.headers.get('referrer-policy')).toBe('no-referrer');
  expect(res.headers.get('cache-control')).toBe('no-store');
  expect(res.text).toMatch(/^<!doctype html>/);
  expect(res.text).not.toMatch(/<script/i);
}

/** GET /login with a fresh client; answers the client (holding the pre-session svc_csrf) and the form token. */
async function openLogin(base: string, query = ''): Promise<{ c: Client; csrf: string; page: Res<string> }> {
  const c = new Client(base);
  const page = await c.get(`/login${query}`);
  expectPage(page, 200);
  const csrf = hiddenField(page.text, 'csrf')!;
  expect(csrf).toMatch(/^[A-Za-z0-9_-]{20,}$/);
  expect(c.cookies.get('svc_csrf')).toBe(csrf);
  return { c, csrf, page };
}

async function formLogin(base: string, email: string, password = PASSWORD, extra: Record<string, string> = {}) {
  const { c, csrf } = await openLogin(base);
  const res = await postForm(c, '/login', { email, password, csrf, ...extra });
  return { c, res };
}

describe.each(testEngines())('HTML pages over plain HTTP (%s)', (engine) => {
  let s: TestServer;
  let ann: Human;

  beforeAll(async () => {
    s = await startTestServer(engine);
    ann = await human(s.url, 'Ann');
  });
  afterAll(async () => s?.stop());

  it('GET /login is a form with a pre-session CSRF token (cookie = hidden field) and the security headers', async () => {
    const { page } = await openLogin(s.url);
    expect(page.text).toContain('<form method="post" action="/login">');
    expect(page.text).toMatch(/name="email" type="email" autocomplete="username" required/);
    expect(page.text).toMatch(/name="password" type="password" autocomplete="current-password" required/);
    expect(page.text).toContain('<label for="email">');
    expect(page.headers.getSetCookie().join('\n')).toMatch(/svc_csrf=[^;]+; Path=\/; SameSite=Lax/);
    expect(page.headers.get('x-content-type-options')).toBe('nosniff');
    // HEAD works too (no body, same headers).
    const head = await fetch(`${s.url}/login`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-security-policy')).toBe(CSP);
  });

  it("POST /login signs in: 303 to /app, session cookie set, the session's own CSRF token replaces the form one", async () => {
    const { c, csrf } = await openLogin(s.url);
    const res = await postForm(c, '/login', { email: ann.email.toUpperCase(), password: PASSWORD, csrf });
    expect(res.status, res.text).toBe(303);
    expect(res.headers.get('location')).toBe('/app');
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(res.headers.get('referrer-policy')).toBe('no-referrer');
    expect(setCookieNames(res)).toEqual(expect.arrayContaining(['svc_session', 'svc_csrf']));
    expect(res.headers.getSetCookie().find((x) => x.startsWith('svc_session='))).toMatch(/HttpOnly/);
    expect(c.cookies.get('svc_csrf')).not.toBe(csrf);
    const me = await c.get('/api/auth/me');
    expect(me.status, me.text).toBe(200);
    expect(me.body.user.email).toBe(ann.email);
    // The JSON API's double submit works with the new cookie (the Client echoes it as the header).
    expect((await c.patch('/api/v1/me', { name: 'Ann' })).status).toBe(200);
    // Signed in, /login without a `next` goes to the app (issue 17)…
    const again = await send(c, 'GET', '/login');
    expect(again.status).toBe(303);
    expect(again.headers.get('location')).toBe('/app');
    // …and with one, the page names the user and keeps the session's token (no new svc_csrf).
    const page = await send(c, 'GET', '/login?next=%2Fapp');
    expectPage(page, 200);
    expect(page.text).toContain('Signed in as <strong>Ann</strong>');
    expect(hiddenField(page.text, 'csrf')).toBe(c.cookies.get('svc_csrf'));
    expect(setCookieNames(page)).not.toContain('svc_csrf');
  });

  it('wrong password and unknown email answer the same 401 page, without a session', async () => {
    const wrong = await formLogin(s.url, ann.email, 'not the password at all');
    expectPage(wrong.res, 401);
    expect(wrong.res.text).toContain('The email address or password is not right.');
    expect(setCookieNames(wrong.res)).not.toContain('svc_session');
    // The form comes back with the email kept and the same token, ready for another try.
    expect(wrong.res.text).toContain(`value="${ann.email}"`);
    expect(hiddenField(wrong.res.text, 'csrf')).toBe(wrong.c.cookies.get('svc_csrf'));
    const unknown = await formLogin(s.url, 'nobody@example.com');
    expectPage(unknown.res, 401);
    const strip = (t: string) => t.replace(/value="[^"]*"/g, '');
    expect(strip(unknown.res.text)).toBe(strip(wrong.res.text));
  });

  it('CSRF: a token that differs from the svc_csrf cookie, or no cookie at all, is 403 and signs nobody in', async () => {
    const { c } = await openLogin(s.url);
    const res = await postForm(c, '/login', { email: ann.email, password: PASSWORD, csrf: 'x'.repeat(43) });
    expectPage(res, 403);
    expect(res.text).toContain('did not come from this site');
    expect(setCookieNames(res)).not.toContain('svc_session');
    const bare = new Client(s.url);
    const res2 = await postForm(bare, '/login', { email: ann.email, password: PASSWORD, csrf: 'y'.repeat(43) });
    expectPage(res2, 403);
    expect(setCookieNames(res2)).not.toContain('svc_session');
    expect(bare.cookies.has('svc_session')).toBe(false);
  });

  it('bad form input is a 400 (or 413/415) page, never a 500', async () => {
    const { c, csrf } = await openLogin(s.url);
    const cases: [Record<string, string | string[]>, number][] = [
      [{}, 400],
      [{ csrf }, 400],
      [{ email: ann.email, csrf }, 400],
      [{ password: PASSWORD, csrf }, 400],
      [{ email: ann.email, password: PASSWORD }, 400],
      [{ email: [ann.email, 'b@example.com'], password: PASSWORD, csrf }, 400],
      [{ email: ann.email, password: 'p'.repeat(5000), csrf }, 400],
      [{ email: `${'e'.repeat(300)}@example.com`, password: PASSWORD, csrf }, 400],
      [{ email: ann.email, password: PASSWORD, csrf: 'c'.repeat(5000) }, 400],
    ];
    for (const [fields, status] of cases) {
      const res = await postForm(c, '/login', fields);
      expectPage(res, status);
      expect(setCookieNames(res)).not.toContain('svc_session');
    }
    const huge = await send(c, 'POST', '/login', `email=${'a'.repeat(100_000)}`, FORM);
    expectPage(huge, 413);
    // Without Accept: text/html a framework-level refusal is the JSON error body.
    const raw = await fetch(`${s.url}/login`, { method: 'POST', headers: { 'content-type': FORM }, body: `email=${'a'.repeat(100_000)}` });
    expect(raw.status).toBe(413);
    expect(await raw.json()).toMatchObject({ code: 'payload_too_large' });
    expectPage(await send(c, 'POST', '/login', 'hello', 'text/plain'), 400);
    expectPage(await send(c, 'POST', '/login', '<a/>', 'application/xml'), 415);
    expectPage(await send(c, 'POST', '/login', 'x', 'multipart/form-data; boundary=x'), 415);
    const empty = await send(c, 'POST', '/login');
    expectPage(empty, 400);
    const badJson = await send(c, 'POST', '/login', '{', 'application/json');
    expectPage(badJson, 400);
    const badEncoding = await send(c, 'POST', '/login', 'email=%E0%A4%A&password=%&csrf=%zz', FORM);
    expect(badEncoding.status).toBeLessThan(500);
    for (const path of ['/login/totp', '/invite/iv_nothing']) {
      for (const body of ['', 'code=1', 'action=accept', 'action=signup&name=x', 'action[]=x&code=1&code=2']) {
        const res = await send(c, 'POST', path, body, FORM);
        expect(res.status, `${path} ${body}: ${res.text.slice(0, 200)}`).toBeGreaterThanOrEqual(400);
        expect(res.status, `${path} ${body}`).toBeLessThan(500);
        expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
      }
    }
    // The form parser is scoped to the pages: the JSON API still refuses form bodies.
    const apiForm = await send(new Client(s.url), 'POST', '/api/auth/login', `email=${encodeURIComponent(ann.email)}&password=x`, FORM);
    expect(apiForm.status).toBe(415);
    const longToken = await c.get(`/invite/${'a'.repeat(900)}`);
    expectPage(longToken, 404);
  });

  it('next: a relative path is carried through and followed; other sites and tricks are ignored', async () => {
    const good = await openLogin(s.url, `?next=${encodeURIComponent('/invite/abc?x=1')}`);
    expect(hiddenField(good.page.text, 'next')).toBe('/invite/abc?x=1');
    for (const bad of ['https://evil.example', '//evil', '/\\evil', '/.//evil', '\\\\evil', 'javascript:alert(1)', '/\t/evil', 'evil', '']) {
      const { page } = await openLogin(s.url, `?next=${encodeURIComponent(bad)}`);
      expect(hiddenField(page.text, 'next'), bad).toBeUndefined();
      expect(page.text).not.toContain('evil');
    }
    const ok = await formLogin(s.url, ann.email, PASSWORD, { next: '/invite/abc?x=1' });
    expect(ok.res.status).toBe(303);
    expect(ok.res.headers.get('location')).toBe('/invite/abc?x=1');
    const unicode = await formLogin(s.url, ann.email, PASSWORD, { next: '/wiki/café' });
    expect(unicode.res.headers.get('location')).toBe('/wiki/caf%C3%A9');
    for (const bad of ['https://evil.example/x', '//evil', '/.//evil', '/\\evil']) {
      const { res } = await formLogin(s.url, ann.email, PASSWORD, { next: bad });
      expect(res.status, bad).toBe(303);
      expect(res.headers.get('location'), bad).toBe('/app');
    }
  });

  it('with TOTP: password gives the code form on a pending session; a wrong code is 401, the right one signs in', async () => {
    const bob = await human(s.url, 'Bob');
    const secret = await enrolTotp(bob.client);
    const { c, res } = await formLogin(s.url, bob.email, PASSWORD, { next: '/somewhere' });
    expectPage(res, 200);
    expect(res.text).toContain('action="/login/totp"');
    expect(res.text).toMatch(/name="code"[^>]*autocomplete="one-time-code"/);
    expect(hiddenField(res.text, 'next')).toBe('/somewhere');
    const csrf = hiddenField(res.text, 'csrf')!;
    expect(csrf).toBe(c.cookies.get('svc_csrf'));
    // The pending session can do nothing else.
    expect((await c.get('/api/auth/me')).body.code).toBe('totp_required');
    const next = currentTotp(secret, Date.now() + 30_000);
    const wrongCode = next === '000000' ? '111111' : '000000';
    const wrong = await postForm(c, '/login/totp', { code: wrongCode, csrf, next: '/somewhere' });
    expectPage(wrong, 401);
    expect(wrong.text).toContain('That code is not right');
    // The form field must carry the session's token: a forged one is refused.
    const forged = await postForm(c, '/login/totp', { code: next, csrf: 'z'.repeat(43), next: '/somewhere' });
    expectPage(forged, 403);
    const ok = await postForm(c, '/login/totp', { code: next, csrf, next: '/somewhere' });
    expect(ok.status, ok.text).toBe(303);
    expect(ok.headers.get('location')).toBe('/somewhere');
    expect((await c.get('/api/auth/me')).status).toBe(200);
    // No session at all: a clear 401 page pointing back to the sign-in form.
    const stranger = await postForm(new Client(s.url), '/login/totp', { code: '123456', csrf });
    expectPage(stranger, 401);
    expect(stranger.text).toContain('href="/login"');
  });

  it('invite pages: pending shows workspace and role; unknown 404, used 409, revoked 410, expired 410', async () => {
    const inv = await invite(ann.client);
    const anon = new Client(s.url);
    const page = await anon.get(inv.path);
    expectPage(page, 200);
    expect(page.text).toContain(`<strong>${ann.workspace.name}</strong> as <strong>an editor</strong>`);
    expect(page.text).toContain(`href="/login?next=${encodeURIComponent(inv.path)}"`);
    expect(page.text).toContain('invite_token');

    expectPage(await anon.get('/invite/iv_doesnotexist'), 404);
    const revoked = await invite(ann.client);
    expect((await ann.client.delete(`/api/v1/invites/${revoked.id}`)).status).toBe(200);
    const r = await anon.get(revoked.path);
    expectPage(r, 410);
    expect(r.text).toContain('withdrawn');
    const expired = await invite(ann.client);
    await s.ctx.store.db
      .updateTable('invites')
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where('id', '=', expired.id)
      .execute();
    const e = await anon.get(expired.path);
    expectPage(e, 410);
    expect(e.text).toContain('expired');

    // Accept over HTTP: signed in, the form carries the session's CSRF token.
    const cat = await human(s.url, 'Cat');
    const landing = await cat.client.get(inv.path);
    expectPage(landing, 200);
    const csrf = hiddenField(landing.text, 'csrf')!;
    expect(csrf).toBe(cat.client.cookies.get('svc_csrf'));
    expectPage(await postForm(cat.client, inv.path, { action: 'accept', csrf: 'q'.repeat(43) }), 403);
    expectPage(await postForm(anon, inv.path, { action: 'accept', csrf }), 401);
    const accepted = await postForm(cat.client, inv.path, { action: 'accept', csrf });
    expectPage(accepted, 200);
    expect(accepted.text).toContain(`You joined <strong>${ann.workspace.name}</strong> as <strong>an editor</strong>`);
    const ws = await cat.client.get('/api/v1/workspaces');
    expect(ws.body.workspaces.find((w: any) => w.id === ann.workspace.id)?.role).toBe('editor');
    // Now used: the landing page and a second accept say so.
    expectPage(await anon.get(inv.path), 409);
    expectPage(await postForm(cat.client, inv.path, { action: 'accept', csrf }), 409);
  });

  it('sign-up with the invite form creates the account, joins the workspace and signs in', async () => {
    const inv = await invite(ann.client);
    const c = new Client(s.url);
    const landing = await c.get(inv.path);
    const csrf = hiddenField(landing.text, 'csrf')!;
    const email = freshEmail('dan');
    const weak = await postForm(c, inv.path, { action: 'signup', csrf, name: 'Dan', email, password: 'password1' });
    expectPage(weak, 400);
    expect(weak.text).toContain('role="alert"');
    expect(weak.text).toContain(`value="${email}"`);
    expectPage(await postForm(c, inv.path, { action: 'signup', csrf: 'w'.repeat(43), name: 'Dan', email, password: PASSWORD }), 403);
    const res = await postForm(c, inv.path, { action: 'signup', csrf, name: 'Dan', email, password: PASSWORD });
    expectPage(res, 200);
    expect(res.text).toContain(`You joined <strong>${ann.workspace.name}</strong>`);
    const me = await c.get('/api/auth/me');
    expect(me.status).toBe(200);
    expect(me.body.workspaces.find((w: any) => w.id === ann.workspace.id)?.role).toBe('editor');
  });

  it('escapes every interpolated value (workspace and user names)', async () => {
    const evilWs = await ann.client.post('/api/v1/workspaces', { name: '<script>alert(1)</script>' });
    expect(evilWs.status, evilWs.text).toBe(201);
    const inv = await invite(ann.client, evilWs.body.slug ?? evilWs.body.id);
    const page = await new Client(s.url).get(inv.path);
    expectPage(page, 200);
    expect(page.text).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(page.text).not.toContain('<script>alert(1)</script>');
    const tom = await human(s.url, `Tom & "Jerry" 'O'Brien`);
    const accepted = await postForm(tom.client, inv.path, { action: 'accept', csrf: tom.client.cookies.get('svc_csrf')! });
    expectPage(accepted, 200);
    expect(accepted.text).toContain('Welcome to &lt;script&gt;alert(1)&lt;/script&gt;');
    const signedIn = await tom.client.get('/login?next=%2Fapp');
    expect(signedIn.text).toContain('Signed in as <strong>Tom &amp; &quot;Jerry&quot; &#39;O&#39;Brien</strong>');
    // A value echoed back into a form attribute cannot break out of it.
    const { c, csrf } = await openLogin(s.url);
    const echoed = await postForm(c, '/login', { email: '"><script>x</script>', password: 'whatever-long-enough', csrf });
    expectPage(echoed, 401);
    expect(echoed.text).toContain('value="&quot;&gt;&lt;script&gt;x&lt;/script&gt;"');
  });
});

describe.each(testEngines())('HTML pages with REQUIRE_TOTP=on and rate limits (%s)', (engine) => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer(engine, { REQUIRE_TOTP: 'on', RATE_LIMITS: 'on', RATE_LIMIT_LOGIN_PER_MIN: '4' });
  });
  afterAll(async () => s?.stop());

  it('an account without TOTP gets the enrolment page (otpauth URI) and finishes sign-in with a code; the limit answers a 429 page', async () => {
    const eve = await human(s.url, 'Eve');
    const { c, res } = await formLogin(s.url, eve.email);
    expectPage(res, 200);
    expect(res.text).toContain('Set up two-step verification');
    const uri = /<code id="uri" class="secret">([^<]+)<\/code>/.exec(res.text)?.[1];
    expect(uri).toMatch(/^otpauth:\/\/totp\//);
    const secret = /<code id="key" class="secret">([A-Z2-7]+)<\/code>/.exec(res.text)![1]!;
    const csrf = hiddenField(res.text, 'csrf')!;
    expect((await c.get('/api/auth/me')).body.code).toBe('totp_enroll_required');
    const ok = await postForm(c, '/login/totp', { code: currentTotp(secret), csrf });
    expect(ok.status, ok.text).toBe(303);
    expect((await c.get('/api/auth/me')).status).toBe(200);
    expect((await c.get('/api/v1/me')).body.totp).toBeTruthy();
    // Three POSTs so far (login, totp, and below) share the per-IP login bucket of 4.
    let last: Res | undefined;
    for (let i = 0; i < 4; i++) last = (await formLogin(s.url, eve.email, 'wrong password here')).res;
    expectPage(last!, 429);
    expect(Number(last!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(last!.text).toContain('Too many requests');
    // A client that does not ask for HTML gets the service's JSON error body.
    const json = await new Client(s.url).post('/login', { email: eve.email, password: PASSWORD });
    expect(json.status).toBe(429);
    expect(json.body.code).toBe('rate_limited');
  });
});

/* ---------------------------------------------------------------- browser */

const haveChromium = chromiumPresent('the HTML pages');

/** CV_SCREENSHOTS=1 writes /tmp/cv-<name>.png to look at the pages during development. */
async function shot(page: Page, name: string): Promise<void> {
  if (process.env.CV_SCREENSHOTS === '1') await page.screenshot({ path: `/tmp/cv-${name}.png`, fullPage: true });
}

// SQLite only: the browser adds nothing engine-specific; the plain HTTP suite above runs on both.
describe.skipIf(!haveChromium)('HTML pages in a real browser (chromium, sqlite)', BROWSER_SUITE, () => {
  let s: TestServer;
  let browser: Browser;
  let ann: Human;

  beforeAll(async () => {
    s = await startTestServer('sqlite');
    ann = await human(s.url, 'Ann');
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  async function newPage(): Promise<{ context: BrowserContext; page: Page }> {
    const context = await browser.newContext({ baseURL: s.url });
    return { context, page: await context.newPage() };
  }

  async function signIn(page: Page, email: string, password = PASSWORD): Promise<void> {
    await page.goto('/login');
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(password);
    await page.getByRole('button', { name: 'Sign in' }).click();
  }

  it('signs in with email and password: the session cookie is set and /api/auth/me knows the user', async () => {
    const { context, page } = await newPage();
    await page.goto('/login');
    await shot(page, 'login');
    await signIn(page, ann.email);
    // Signed in without a `next`: the web app.
    await page.waitForURL((u) => u.pathname === '/app');
    expect(await page.locator('.who-name').textContent()).toBe('Ann');
    const cookies = await context.cookies();
    const session = cookies.find((c) => c.name === 'svc_session');
    expect(session?.httpOnly).toBe(true);
    expect(session?.sameSite).toBe('Lax');
    const me = await page.request.get('/api/auth/me');
    expect(me.status()).toBe(200);
    expect((await me.json()).user.email).toBe(ann.email);
    await context.close();
  });

  it('a wrong password shows an error and sets no session', async () => {
    const { context, page } = await newPage();
    await signIn(page, ann.email, 'this is not the password');
    await expect.poll(() => page.getByRole('alert').textContent()).toContain('The email address or password is not right.');
    expect((await context.cookies()).some((c) => c.name === 'svc_session')).toBe(false);
    // The email is kept for the next try.
    expect(await page.getByLabel('Email').inputValue()).toBe(ann.email);
    await context.close();
  });

  it('with TOTP enrolled: the code form appears, a wrong code shows an error, the right one signs in', async () => {
    const bob = await human(s.url, 'Bob');
    const secret = await enrolTotp(bob.client);
    const { context, page } = await newPage();
    await signIn(page, bob.email);
    await page.getByRole('heading', { name: 'Two-step verification' }).waitFor();
    const code = page.getByLabel('Code');
    expect(await code.getAttribute('autocomplete')).toBe('one-time-code');
    await shot(page, 'totp');
    expect((await page.request.get('/api/auth/me')).status()).toBe(401);
    const next = currentTotp(secret, Date.now() + 30_000);
    await code.fill(next === '000000' ? '111111' : '000000');
    await page.getByRole('button', { name: 'Verify' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toContain('That code is not right');
    await page.getByLabel('Code').fill(next);
    await page.getByRole('button', { name: 'Verify' }).click();
    await page.waitForURL((u) => u.pathname === '/app');
    expect(await page.locator('.who-name').textContent()).toBe('Bob');
    const me = await page.request.get('/api/auth/me');
    expect(me.status()).toBe(200);
    expect((await me.json()).user.email).toBe(bob.email);
    await context.close();
  });

  it('invite: a signed-in second user sees workspace and role, accepts, and becomes an editor', async () => {
    const inv = await invite(ann.client);
    const cat = await human(s.url, 'Cat');
    const { context, page } = await newPage();
    // Not signed in: the page offers sign-in with next= back to the invite.
    await page.goto(inv.path);
    await page.getByRole('link', { name: 'Sign in to accept' }).click();
    await page.waitForURL((u) => u.pathname === '/login' && u.searchParams.get('next') === inv.path);
    await page.getByLabel('Email').fill(cat.email);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL((u) => u.pathname === inv.path);
    const body = await page.locator('main').textContent();
    expect(body).toContain(`You are invited to join the workspace ${ann.workspace.name} as an editor`);
    expect(body).toContain('Signed in as Cat');
    await shot(page, 'invite');
    await page.getByRole('button', { name: /Accept and join/ }).click();
    await page.getByRole('heading', { name: `Welcome to ${ann.workspace.name}` }).waitFor();
    expect(await page.getByRole('status').textContent()).toContain(`You joined ${ann.workspace.name} as an editor`);
    const ws = await page.request.get('/api/v1/workspaces');
    expect(ws.status()).toBe(200);
    const mine = (await ws.json()).workspaces.find((w: any) => w.id === ann.workspace.id);
    expect(mine?.role).toBe('editor');
    await context.close();
  });

  it('invite: a newcomer signs up with the form on the invite page', async () => {
    const inv = await invite(ann.client);
    const { context, page } = await newPage();
    await page.goto(inv.path);
    const email = freshEmail('dora');
    await page.getByLabel('Your name').fill('Dora');
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Create account and join' }).click();
    await page.getByRole('heading', { name: `Welcome to ${ann.workspace.name}` }).waitFor();
    const me = await page.request.get('/api/auth/me');
    expect((await me.json()).user.email).toBe(email);
    await context.close();
  });

  it('unknown and revoked invites show their message with the right status', async () => {
    const { context, page } = await newPage();
    const unknown = await page.goto('/invite/iv_unknown_token');
    expect(unknown?.status()).toBe(404);
    expect(await page.getByRole('alert').textContent()).toContain('This invite link is not valid');
    const inv = await invite(ann.client);
    expect((await ann.client.delete(`/api/v1/invites/${inv.id}`)).status).toBe(200);
    const revoked = await page.goto(inv.path);
    expect(revoked?.status()).toBe(410);
    expect(await page.getByRole('alert').textContent()).toContain('withdrawn');
    await context.close();
  });
});
