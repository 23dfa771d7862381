import fs from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { call } from '../mcp/support.js';
import { Client, startTestServer, type TestServer } from '../support/server.js';
import { MemoryProvider, newMcpClient, oauthTransport, REDIRECT } from './support.js';

/**
 * The consent page in a real browser (Debian's chromium through playwright-core): a person sent
 * by an MCP client signs in on /login, comes back to the consent page, reads who asks for what,
 * and answers with the form (no JavaScript needed). SQLite only: test/oauth/flow.test.ts covers
 * the engines.
 */

const CHROMIUM = '/usr/bin/chromium';
const haveChromium = fs.existsSync(CHROMIUM);
if (!haveChromium) {
  if (process.env.CI) throw new Error(`${CHROMIUM} is missing: CI requires Debian's chromium for the browser tests (.ci/run installs it)`);
  console.warn(`\n!!! ${CHROMIUM} not found: the BROWSER tests of the OAuth consent page are SKIPPED on this machine (apt-get install chromium) !!!\n`);
}

const PASSWORD = 'correct horse battery';
/** The browser's round trips (form post, 302, the intercepted redirect) take longer than expect.poll's default second. */
const WAIT = { timeout: 15_000 };

describe.skipIf(!haveChromium)('OAuth consent page in a real browser (chromium, sqlite)', () => {
  let s: TestServer;
  let browser: Browser;
  let email: string;
  let owner: Client;
  let slug: string;

  beforeAll(async () => {
    s = await startTestServer('sqlite');
    owner = new Client(s.url);
    email = `paula-${process.pid}-${Date.now()}@example.com`;
    const res = await owner.post('/api/v1/auth/signup', { email, password: PASSWORD, name: 'Paula' });
    expect(res.status).toBe(201);
    slug = res.body.workspace.slug;
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
    });
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  /** Opens the authorization URL in a fresh browser and signs in on the way; answers the page at consent. */
  async function toConsent(url: URL, who = email) {
    const context = await browser.newContext({ javaScriptEnabled: false });
    const page = await context.newPage();
    let landed: URL | undefined;
    // The client's redirect URI: nothing listens there, the browser's request is enough.
    await page.route(`${REDIRECT}**`, async (route) => {
      landed = new URL(route.request().url());
      await route.fulfill({ status: 200, contentType: 'text/plain', body: 'You can close this window.' });
    });
    await page.goto(url.href);
    expect(new URL(page.url()).pathname).toBe('/login');
    await page.getByLabel('Email').fill(who);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL('**/oauth/authorize?**');
    return { context, page, landed: () => landed };
  }

  it('sign in, read the request, allow: the MCP client gets its token and works as the person', async () => {
    const provider = new MemoryProvider({ client_name: 'Claude Desktop (test)' });
    await expect(newMcpClient().connect(oauthTransport(s.url, provider))).rejects.toBeInstanceOf(UnauthorizedError);
    const { context, page, landed } = await toConsent(provider.authorizationUrl!);
    await expect.poll(() => page.getByRole('heading', { level: 1 }).textContent()).toBe('Connect Claude Desktop (test)?');
    const text = (await page.locator('main').textContent()) ?? '';
    expect(text).toContain('127.0.0.1:53682');
    expect(text).toContain(`${s.url}/mcp`);
    expect(text).toContain('owner');
    await page.getByRole('button', { name: 'Allow' }).click();
    await expect.poll(() => landed(), WAIT).toBeDefined();
    await expect.poll(() => landed()?.searchParams.get('code') ?? null).toMatch(/^oac_/);
    expect(landed()!.searchParams.get('state')).toBe('state-123');
    await oauthTransport(s.url, provider).finishAuth(landed()!.searchParams.get('code')!);
    const mcp = newMcpClient();
    await mcp.connect(oauthTransport(s.url, provider));
    const me = await call(mcp, 'context_whoami');
    expect(me.json).toMatchObject({ name: 'Paula', kind: 'human', role: 'owner' });
    await mcp.close();
    await context.close();
  });

  it('deny: the client hears access_denied and no token exists', async () => {
    const provider = new MemoryProvider();
    await expect(newMcpClient().connect(oauthTransport(s.url, provider))).rejects.toBeInstanceOf(UnauthorizedError);
    const { context, page, landed } = await toConsent(provider.authorizationUrl!);
    await page.getByRole('button', { name: 'Deny' }).click();
    await expect.poll(() => landed(), WAIT).toBeDefined();
    await expect.poll(() => landed()?.searchParams.get('error') ?? null).toBe('access_denied');
    expect(landed()!.searchParams.get('code')).toBeNull();
    await context.close();
  });

  it('a viewer reads why and can only go back', async () => {
    const viewerEmail = `vivian-${process.pid}-${Date.now()}@example.com`;
    const inv = await owner.post(`/api/v1/workspaces/${slug}/invites`, { role: 'viewer' });
    const v = new Client(s.url);
    expect((await v.post('/api/v1/auth/signup', { email: viewerEmail, password: PASSWORD, name: 'Vivian' })).status).toBe(201);
    expect((await v.post(`/api/v1/invites/${inv.body.token}/accept`)).status).toBe(200);
    const provider = new MemoryProvider();
    await expect(newMcpClient().connect(oauthTransport(s.url, provider, `/w/${slug}/mcp`))).rejects.toBeInstanceOf(UnauthorizedError);
    const { context, page, landed } = await toConsent(provider.authorizationUrl!, viewerEmail);
    await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/only owners and editors/i);
    expect(await page.getByRole('button', { name: 'Allow' }).count()).toBe(0);
    await page.getByRole('button', { name: 'Go back to the application' }).click();
    await expect.poll(() => landed(), WAIT).toBeDefined();
    await expect.poll(() => landed()?.searchParams.get('error') ?? null).toBe('access_denied');
    await context.close();
  });

  it('a person in two workspaces picks which one the connection is for', async () => {
    // Edwina has her own workspace (from sign-up) and joins Paula's as an editor.
    const edEmail = `edwin-${process.pid}-${Date.now()}@example.com`;
    const e = new Client(s.url);
    expect((await e.post('/api/v1/auth/signup', { email: edEmail, password: PASSWORD, name: 'Edwina' })).status).toBe(201);
    const inv = await owner.post(`/api/v1/workspaces/${slug}/invites`, { role: 'editor' });
    expect((await e.post(`/api/v1/invites/${inv.body.token}/accept`)).status).toBe(200);
    const provider = new MemoryProvider();
    await expect(newMcpClient().connect(oauthTransport(s.url, provider))).rejects.toBeInstanceOf(UnauthorizedError);
    const { context, page, landed } = await toConsent(provider.authorizationUrl!, edEmail);
    const select = page.getByLabel('Workspace');
    expect(await select.locator('option').count()).toBe(2);
    await select.selectOption(slug);
    await page.getByRole('button', { name: 'Allow' }).click();
    await expect.poll(() => landed(), WAIT).toBeDefined();
    await expect.poll(() => landed()?.searchParams.get('code') ?? null).toMatch(/^oac_/);
    await oauthTransport(s.url, provider).finishAuth(landed()!.searchParams.get('code')!);
    const mcp = newMcpClient();
    await mcp.connect(oauthTransport(s.url, provider));
    expect((await call(mcp, 'context_whoami')).json).toMatchObject({ role: 'editor', workspace: { slug } });
    await mcp.close();
    await context.close();
  });
});
