import type { Browser, Page } from 'playwright-core';
import { webPerson, type WebPerson } from '../support/web.js';
import { chromiumPresent, launchChromium, openPage, screenshot, BROWSER_SUITE } from '../support/browser.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { Client, startTestServer, type TestServer } from '../support/server.js';

/**
 * The web app's first slice (issue 17, src/web/app): getting in, the Spaces, a Space's tree, a
 * page rendered from markdown with its links, backlinks and redactions, search, sign-out.
 * Plain HTTP checks run on every engine; the browser suite drives Debian's chromium through
 * playwright-core as a person would (SQLite only: the pages call the same core functions the
 * engine suites cover).
 */

const PASSWORD = 'correct horse battery';
const APP_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
type Person = WebPerson;
const person = webPerson;

async function write(c: Client, pagePath: string, content: string): Promise<void> {
  const res = await c.post('/api/v1/nodes', { path: pagePath, content, message: `add ${pagePath}` });
  expect(res.status, res.text).toBe(201);
}

const START = `---
title: Getting started
tags: [onboarding, ops]
---
# Getting started

Read the [[Deploy Notes]] before your first release, and the [rollback steps](rollback.md#undo).

## Checklist

- clone the repository
- run the tests
- ask for a review

\`\`\`sh
npm ci && npm start
\`\`\`

::: secret
The staging password is tangerine-42.
:::

A link to [[No Such Page]] and to [an external site](https://example.com/docs).
`;

const DEPLOY = `# Deploy Notes

Deploys go out from the zanzibar pipeline every Tuesday.
`;

const ROLLBACK = `# Rollback

## Undo

Revert the release commit.
`;

const PLANS = `---
sensitivity: confidential
---
# Acquisition plans

Only editors and owners read this.
`;

const XSS = `# Hostile page

<script>alert(1)</script>

[click me](javascript:alert(1))

<img src=x onerror=alert(1)>

[[<img src=x onerror=alert(2)>]]
`;

/** Pages of the test workspace: a folder with linked pages, a confidential one, a hostile one. */
async function seed(c: Client): Promise<void> {
  await write(c, 'handbook/index.md', '# Handbook\n\nHow this team works: onboarding, deploys and rollbacks.\n');
  await write(c, 'handbook/guide/start.md', START);
  await write(c, 'handbook/guide/deploy-notes.md', DEPLOY);
  await write(c, 'handbook/guide/rollback.md', ROLLBACK);
  await write(c, 'handbook/plans.md', PLANS);
  await write(c, 'lab/hostile.md', XSS);
}

/** A GET as a browser sends it, redirects not followed. */
async function browse(s: TestServer, c: Client | null, url: string): Promise<Response> {
  const headers: Record<string, string> = { accept: 'text/html' };
  if (c) headers.cookie = [...c.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  return fetch(s.url + url, { headers, redirect: 'manual' });
}

/* -------------------------------------------------------------- plain HTTP */

describe.each(testEngines())('web app over HTTP (%s)', (engine) => {
  let s: TestServer;
  let owner: Person;
  let viewer: Person;

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = await person(s.url, 'Olga');
    await seed(owner.client);
    const inv = await owner.client.post('/api/v1/invites', { role: 'viewer' });
    expect(inv.status, inv.text).toBe(201);
    viewer = await person(s.url, 'Victor', inv.body.token);
    expect(viewer.slug).toBe(owner.slug);
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('/ leads a signed-out person to sign in (which then leads to /app), a signed-in one to /app', async () => {
    const out = await browse(s, null, '/');
    expect(out.status).toBe(303);
    expect(out.headers.get('location')).toBe('/login');
    const login = await browse(s, null, '/login?next=%2Fapp');
    expect(await login.text()).toContain('name="next" value="/app"');
    const inside = await browse(s, owner.client, '/');
    expect(inside.status).toBe(303);
    expect(inside.headers.get('location')).toBe('/app');
  });

  it('every /app address sends a signed-out person to sign in with the address as next', async () => {
    for (const url of ['/app', '/app/s/handbook', '/app/p/handbook/guide/start.md', '/app/search?q=deploy&mode=fts', '/app/nothing/here']) {
      const res = await browse(s, null, url);
      expect(res.status, url).toBe(303);
      expect(res.headers.get('location'), url).toBe(`/login?next=${encodeURIComponent(url)}`);
    }
  });

  it('app pages carry the strict headers; the login page keeps its own (the stylesheet, no script)', async () => {
    for (const url of ['/app', '/app/s/handbook', '/app/p/handbook/guide/start.md', '/app/search?q=zanzibar', '/app/p/handbook/missing.md']) {
      const res = await browse(s, owner.client, url);
      expect([200, 404], url).toContain(res.status);
      expect(res.headers.get('content-security-policy'), url).toBe(APP_CSP);
      expect(res.headers.get('x-frame-options')).toBe('DENY');
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('referrer-policy')).toBe('no-referrer');
      expect(res.headers.get('cache-control')).toBe('no-store');
      expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    }
    const login = await browse(s, null, '/login');
    expect(login.headers.get('content-security-policy')).toContain("style-src 'self'");
    expect(login.headers.get('content-security-policy')).not.toContain('unsafe-inline');
    expect(login.headers.get('content-security-policy')).not.toContain('script-src');
    const js = await browse(s, null, '/assets/app.js');
    expect(js.status).toBe(200);
    expect(js.headers.get('content-type')).toMatch(/^text\/javascript/);
    expect(await js.text()).toContain("addEventListener('keydown'");
    expect((await browse(s, null, '/assets/app.css')).headers.get('content-type')).toMatch(/^text\/css/);
    expect((await browse(s, null, '/assets/nothing.js')).status).toBe(404);
  });

  it('a confidential page is 404 to a viewer, readable by the owner; a secret block is [redacted] to the viewer', async () => {
    const hidden = await browse(s, viewer.client, '/app/p/handbook/plans.md');
    expect(hidden.status).toBe(404);
    const text = await hidden.text();
    expect(text).toContain('<h1>Not found</h1>');
    expect(text).not.toContain('Acquisition');
    const shown = await browse(s, owner.client, '/app/p/handbook/plans.md');
    expect(shown.status).toBe(200);
    expect(await shown.text()).toContain('Acquisition plans');
    // The viewer's tree and search do not name it either.
    expect(await (await browse(s, viewer.client, '/app/s/handbook')).text()).not.toContain('Acquisition');
    expect(await (await browse(s, viewer.client, '/app/search?q=acquisition&mode=fts')).text()).not.toContain('plans.md');
    const start = await (await browse(s, viewer.client, '/app/p/handbook/guide/start.md')).text();
    expect(start).not.toContain('tangerine');
    expect(start).toContain('class="redacted"');
    expect(await (await browse(s, owner.client, '/app/p/handbook/guide/start.md')).text()).toContain('tangerine-42');
  });

  it("a page whose name is not ASCII opens from its link in the tree; an unknown page is the app's 404 page", async () => {
    await write(owner.client, 'handbook/café-menu.md', '# Café menu\n\nCoffee.\n');
    const tree = await (await browse(s, owner.client, '/app/s/handbook')).text();
    const href = /href="(\/app\/p\/handbook\/caf[^"]*)"/.exec(tree)?.[1];
    expect(href).toBe('/app/p/handbook/caf%C3%A9-menu.md');
    const page = await browse(s, owner.client, href!);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('<h1>Café menu</h1>');
    const missing = await browse(s, owner.client, '/app/p/handbook/nothing-here.md');
    expect(missing.status).toBe(404);
    const text = await missing.text();
    expect(text).toContain('<h1>Not found</h1>');
    expect(text).toContain('href="/assets/app.css"');
    expect((await browse(s, owner.client, '/app/no/such/screen')).status).toBe(404);
  });

  it('sign-out needs the form token, ends the session and clears the cookies', async () => {
    const c = (await person(s.url, 'Sam')).client;
    const cookie = [...c.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
    const post = (csrf: string) =>
      fetch(`${s.url}/app/logout`, {
        method: 'POST',
        headers: { cookie, accept: 'text/html', 'content-type': 'application/x-www-form-urlencoded' },
        body: `csrf=${encodeURIComponent(csrf)}`,
        redirect: 'manual',
      });
    const forged = await post('not-the-token');
    expect(forged.status).toBe(403);
    expect((await browse(s, c, '/app')).status).toBe(200);
    const ok = await post(c.csrf!);
    expect(ok.status).toBe(303);
    expect(ok.headers.get('location')).toBe('/login');
    expect(ok.headers.getSetCookie().join('\n')).toMatch(/svc_session=;/);
    expect((await browse(s, c, '/app')).status).toBe(303);
    expect((await c.get('/api/auth/me')).status).toBe(401);
  });
});

/* ----------------------------------------------------------------- browser */

const haveChromium = chromiumPresent('the web app');

const shot = screenshot;

describe.skipIf(!haveChromium)('web app in a real browser (chromium, sqlite)', BROWSER_SUITE, () => {
  let s: TestServer;
  let browser: Browser;
  let owner: Person;
  let viewer: Person;

  beforeAll(async () => {
    s = await startTestServer('sqlite');
    owner = await person(s.url, 'Olga');
    await seed(owner.client);
    const inv = await owner.client.post('/api/v1/invites', { role: 'viewer' });
    viewer = await person(s.url, 'Victor', inv.body.token);
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  const newPage = (viewport?: { width: number; height: number }) => openPage(browser, s.url, viewport);

  /** On /login: fills the form and submits it. */
  async function submitLogin(page: Page, email: string): Promise<void> {
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
  }

  async function signIn(page: Page, email: string): Promise<void> {
    await page.goto('/');
    await page.waitForURL((u) => u.pathname === '/login');
    await submitLogin(page, email);
    await page.waitForURL((u) => u.pathname === '/app');
  }

  it('from / through the login form to the Spaces, a Space, a page; a wiki link leads on and the backlink leads back', async () => {
    const { context, page, dialogs } = await newPage();
    await signIn(page, owner.email);
    await expect.poll(() => page.getByRole('heading', { level: 1 }).textContent()).toBe('Spaces');
    const nav = page.getByRole('navigation', { name: 'Main' });
    expect(await nav.textContent()).toContain('Olga');
    expect(await nav.getByRole('button', { name: 'Sign out' }).count()).toBe(1);
    const handbook = page.locator('.card', { hasText: 'handbook' });
    expect(await handbook.textContent()).toContain('How this team works');
    await shot(page, 'app-spaces');

    await page.getByRole('link', { name: 'handbook' }).click();
    await page.waitForURL('**/app/s/handbook');
    const tree = page.locator('.tree');
    expect(await tree.textContent()).toContain('guide/');
    expect(await tree.getByRole('link').allTextContents()).toEqual(
      expect.arrayContaining(['Getting started', 'Deploy Notes', 'Rollback', 'Acquisition plans']),
    );
    await shot(page, 'app-space');

    await tree.getByRole('link', { name: 'Getting started' }).click();
    await page.waitForURL('**/app/p/handbook/guide/start.md');
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Getting started');
    const md = page.locator('article .md');
    // Rendered markdown: a heading, a list, a code block with its language.
    expect(await md.getByRole('heading', { name: 'Checklist' }).count()).toBe(1);
    expect(await md.locator('ul > li').allTextContents()).toEqual(['clone the repository', 'run the tests', 'ask for a review']);
    expect(await md.locator('pre > code.language-sh').textContent()).toBe('npm ci && npm start\n');
    // The title is not repeated, the level and tags are shown, the secret block (owner) is framed.
    expect(await md.locator('h1').count()).toBe(0);
    expect(await page.locator('.page-head .badge-sensitivity').textContent()).toBe('internal');
    expect(await page.locator('.page-head .badge-tag').allTextContents()).toEqual(['onboarding', 'ops']);
    expect(await md.locator('.sblock-secret').textContent()).toContain('tangerine-42');
    // Links: a page that does not exist is plain text, an external link is marked and isolated.
    expect(await md.locator('.missing-link').textContent()).toBe('No Such Page');
    expect(await md.getByRole('link', { name: 'No Such Page' }).count()).toBe(0);
    expect(await md.getByRole('link', { name: 'an external site' }).getAttribute('rel')).toBe('noopener noreferrer');
    expect(await md.getByRole('link', { name: 'rollback steps' }).getAttribute('href')).toBe('/app/p/handbook/guide/rollback.md#undo');
    expect(await page.locator('.page-foot').textContent()).toMatch(/last commit [0-9a-f]{10}/);
    await shot(page, 'app-page');

    await md.getByRole('link', { name: 'Deploy Notes' }).click();
    await page.waitForURL('**/app/p/handbook/guide/deploy-notes.md');
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Deploy Notes');
    const backlinks = page.getByRole('region', { name: 'Backlinks' });
    expect(await backlinks.getByRole('link').allTextContents()).toEqual(['Getting started']);
    await backlinks.getByRole('link', { name: 'Getting started' }).click();
    await page.waitForURL('**/app/p/handbook/guide/start.md');

    await md.getByRole('link', { name: 'rollback steps' }).click();
    await page.waitForURL('**/app/p/handbook/guide/rollback.md#undo');
    expect(dialogs).toEqual([]);
    await context.close();
  });

  it('/ focuses the search box; a search shows snippets and its result opens the page', async () => {
    const { context, page } = await newPage();
    await signIn(page, owner.email);
    await page.locator('h1').click();
    await page.keyboard.press('/');
    await expect.poll(() => page.evaluate(() => document.activeElement?.id)).toBe('q');
    await page.keyboard.type('zanzibar');
    await page.keyboard.press('Enter');
    await page.waitForURL('**/app/search?q=zanzibar');
    const results = page.locator('.results > li');
    await expect.poll(() => results.count()).toBe(1);
    expect(await results.locator('mark').first().textContent()).toBe('zanzibar');
    expect(await results.textContent()).toContain('pipeline every Tuesday');
    // The mode is kept and can be changed.
    await page.locator('#search-mode').selectOption('fts');
    await page.getByRole('button', { name: 'Search' }).click();
    await page.waitForURL('**/app/search?q=zanzibar&mode=fts');
    await shot(page, 'app-search');
    await page.locator('.results').getByRole('link', { name: 'Deploy Notes' }).click();
    await page.waitForURL('**/app/p/handbook/guide/deploy-notes.md');
    await context.close();
  });

  it('a viewer gets the not-found page for a confidential page the owner reads, and sees the secret block as redacted', async () => {
    const v = await newPage();
    await signIn(v.page, viewer.email);
    const res = await v.page.goto('/app/p/handbook/plans.md');
    expect(res!.status()).toBe(404);
    expect(await v.page.getByRole('heading', { level: 1 }).textContent()).toBe('Not found');
    expect(await v.page.getByRole('navigation', { name: 'Main' }).count()).toBe(1);
    expect(await v.page.content()).not.toContain('Acquisition');
    await v.page.goto('/app/p/handbook/guide/start.md');
    const redacted = v.page.locator('article .md .redacted');
    expect(await redacted.count()).toBe(1);
    expect(await redacted.textContent()).toBe('[redacted]');
    expect(await v.page.locator('.badge-redacted').textContent()).toBe('partly redacted');
    expect(await v.page.content()).not.toContain('tangerine');
    await v.context.close();

    const o = await newPage();
    await signIn(o.page, owner.email);
    const ok = await o.page.goto('/app/p/handbook/plans.md');
    expect(ok!.status()).toBe(200);
    expect(await o.page.getByRole('heading', { level: 1 }).textContent()).toBe('Acquisition plans');
    expect(await o.page.locator('.page-head .badge-sensitivity').textContent()).toBe('confidential');
    await o.context.close();
  });

  it('a hostile page renders its script, javascript: link and onerror image as text only', async () => {
    const { context, page, dialogs } = await newPage();
    await signIn(page, owner.email);
    const res = await page.goto('/app/p/lab/hostile.md');
    expect(res!.status()).toBe(200);
    expect(res!.headers()['content-security-policy']).toBe(APP_CSP);
    const md = page.locator('article .md');
    expect(await md.locator('script, img, iframe, [onerror]').count()).toBe(0);
    expect(await page.locator('a[href^="javascript:" i]').count()).toBe(0);
    const text = (await md.textContent()) ?? '';
    expect(text).toContain('<script>alert(1)</script>');
    expect(text).toContain('<img src=x onerror=alert(1)>');
    expect(text).toContain('[click me](javascript:alert(1))');
    // Scripts on the whole page: only the app's own modules, none inline and none from the page.
    const scripts = await page.locator('script').evaluateAll((els) => els.map((e) => ({ src: e.getAttribute('src'), inline: e.textContent ?? '' })));
    expect(scripts.map((x) => x.src)).toContain('/assets/app.js');
    for (const x of scripts) {
      expect(x.src ?? '').toMatch(/^\/assets\/[a-z-]+\.js$/);
      expect(x.inline.trim()).toBe('');
    }
    await page.waitForTimeout(300);
    expect(dialogs).toEqual([]);
    await context.close();
  });

  it('signed out, a page address leads through the login form back to that page; sign out ends it', async () => {
    const { context, page } = await newPage();
    await page.goto('/app/p/handbook/guide/rollback.md');
    await page.waitForURL('**/login?next=%2Fapp%2Fp%2Fhandbook%2Fguide%2Frollback.md');
    await submitLogin(page, owner.email);
    await page.waitForURL('**/app/p/handbook/guide/rollback.md');
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Rollback');
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL((u) => u.pathname === '/login');
    await page.goto('/app');
    await page.waitForURL('**/login?next=%2Fapp');
    await context.close();
  });

  it('works at phone width: nothing wider than the screen', async () => {
    const { context, page } = await newPage({ width: 390, height: 844 });
    await signIn(page, owner.email);
    for (const url of ['/app', '/app/s/handbook', '/app/p/handbook/guide/start.md', '/app/search?q=deploy']) {
      await page.goto(url);
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      expect(overflow, url).toBeLessThanOrEqual(0);
    }
    await page.goto('/app/p/handbook/guide/start.md');
    await shot(page, 'app-page-phone');
    await context.close();
  });
});
