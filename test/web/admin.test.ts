import * as OTPAuth from 'otpauth';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seriousViolations } from '../support/axe.js';
import { freshEmail, signedInPage, webPerson, type WebPerson, browse, submit } from '../support/web.js';
import { chromiumPresent, launchChromium, openPage, screenshot, BROWSER_SUITE } from '../support/browser.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, startTestServer, type TestServer } from '../support/server.js';
import { GitHome } from '../git/support.js';

/**
 * The web app's administering and account screens (issue 17, src/web/app/admin.ts, account.ts):
 * agents (create with grants and a ceiling, a key shown once with a Copy button and MCP client
 * configurations, the key works and dies on revoke), members and invites (owner only; others
 * read the member list, as GET /api/v1/members answers them), own sessions (revoking one signs
 * that browser out), git tokens (after a step-up; the real git CLI uses one, then is refused),
 * TOTP enrolment (a QR code, verify with a code, then sign-in asks for one), CSRF on every form.
 */

const PASSWORD = 'correct horse battery';
type Person = WebPerson;
const person = webPerson;

/** A second session of the same account (another browser). */
async function signIn(base: string, email: string): Promise<Client> {
  const c = new Client(base);
  const res = await c.post('/api/auth/login', { email, password: PASSWORD });
  expect(res.status, res.text).toBe(200);
  return c;
}

const totpCode = (secret: string) => new OTPAuth.TOTP({ secret: OTPAuth.Secret.fromBase32(secret), digits: 6, period: 30 }).generate();

/** An owner, and an editor and a viewer in the owner's workspace. */
async function team(s: TestServer) {
  const owner = await person(s.url, 'Olga');
  const join = async (name: string, role: string) => {
    const inv = await owner.client.post('/api/v1/invites', { role });
    expect(inv.status, inv.text).toBe(201);
    return person(s.url, name, inv.body.token);
  };
  return { owner, editor: await join('Edna', 'editor'), viewer: await join('Victor', 'viewer') };
}

/* -------------------------------------------------------------- plain HTTP */

describe.each(testEngines())('administering over HTTP (%s)', (engine) => {
  let s: TestServer;
  let owner: Person;
  let editor: Person;
  let viewer: Person;

  beforeAll(async () => {
    s = await startTestServer(engine);
    ({ owner, editor, viewer } = await team(s));
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('every member gets the navigation entries; only the owner gets role controls and invites; forged posts meet the core', async () => {
    const ownerNav = await browse(s, owner.client, '/app');
    for (const href of ['/app/agents', '/app/members', '/app/account']) expect(ownerNav.text).toContain(`href="${href}"`);

    const asViewer = await browse(s, viewer.client, '/app/members');
    expect(asViewer.status).toBe(200);
    expect(asViewer.text).toContain('Olga');
    expect(asViewer.text).toContain('Edna');
    expect(asViewer.text).not.toContain('/role"');
    expect(asViewer.text).not.toContain('action="/app/invites"');
    expect(asViewer.text).toContain('Only owners change roles');

    // A viewer's forged role change and invite: the core refuses (403 page), nothing changes.
    const forged = await submit(s, viewer.client, `/app/members/${viewer.id}/role`, { csrf: viewer.client.csrf!, role: 'owner' });
    expect(forged.status).toBe(403);
    expect(forged.text).toContain('Only a workspace owner may change roles');
    const forgedInvite = await submit(s, editor.client, '/app/invites', { csrf: editor.client.csrf!, role: 'owner', expires_in_days: '7' });
    expect(forgedInvite.status).toBe(403);
    expect(forgedInvite.text).not.toContain('/invite/iv_');
    const members = await owner.client.get('/api/v1/members');
    expect(members.body.members.find((m: { id: string }) => m.id === viewer.id).role).toBe('viewer');

    // The owner's agent: its page and keys are its creator's or an owner's; an editor gets a 403 page.
    const agent = await createAgentWithKey(owner.client, [{ action: 'read', ceiling: 'internal' }], { name: 'owner-bot', ceiling: 'internal' });
    const list = await browse(s, editor.client, '/app/agents');
    expect(list.status).toBe(200);
    expect(list.text).toContain('owner-bot');
    expect(list.text).not.toContain(`href="/app/agents/${agent.id}"`);
    const page = await browse(s, editor.client, `/app/agents/${agent.id}`);
    expect(page.status).toBe(403);
    expect(page.text).toContain('Only the agent&#39;s creator or a workspace owner may manage it');
    const revoke = await submit(s, editor.client, `/app/agents/${agent.id}/keys/${agent.keyId}/revoke`, { csrf: editor.client.csrf! });
    expect(revoke.status).toBe(403);
    const mint = await submit(s, viewer.client, `/app/agents/${agent.id}/keys`, { csrf: viewer.client.csrf!, name: 'stolen' });
    expect(mint.status).toBe(403);
    expect(mint.text).not.toContain('ak_');
    expect((await agent.client.get('/api/v1/me')).status).toBe(200);

    // A viewer may make their own agent, but never above their role (the core's rule, as on REST).
    const above = await submit(s, viewer.client, '/app/agents', {
      csrf: viewer.client.csrf!,
      name: 'too-high',
      ceiling: 'internal',
      g0_action: 'write',
      g0_scope: '*',
      g0_ceiling: 'internal',
    });
    expect(above.status).toBe(403);
    expect(above.text).toContain('grants never exceed your role');
    expect(above.text).toContain('value="too-high"');
  });

  it('forms without the session token are refused and change nothing', async () => {
    const before = (await owner.client.get('/api/v1/principals')).body.principals.length;
    for (const csrf of [undefined, 'not-the-token']) {
      const fields: Record<string, string> = { name: 'csrf-bot', ceiling: 'internal', g0_action: 'read', g0_scope: '*', g0_ceiling: 'internal' };
      if (csrf) fields.csrf = csrf;
      const r = await submit(s, owner.client, '/app/agents', fields);
      expect(r.status).toBe(403);
      const inv = await submit(s, owner.client, '/app/invites', { ...(csrf ? { csrf } : {}), role: 'viewer', expires_in_days: '7' });
      expect(inv.status).toBe(403);
      expect(inv.text).not.toContain('/invite/iv_');
    }
    expect((await owner.client.get('/api/v1/principals')).body.principals.length).toBe(before);
  });

  it('the owner invites a viewer (the accept URL shown once) and changes a role; the invite can be revoked', async () => {
    const r = await submit(s, owner.client, '/app/invites', { csrf: owner.client.csrf!, role: 'viewer', expires_in_days: '3', email: '' });
    expect(r.status).toBe(201);
    const url = /<code>(http:\/\/[^<]+\/invite\/(iv_[^<]+))<\/code>/.exec(r.text);
    expect(url, r.text).not.toBeNull();
    expect(url![1]!.startsWith(`${s.url}/invite/`)).toBe(true);
    const list = await browse(s, owner.client, '/app/members');
    expect(list.text).not.toContain(url![2]!);
    const invites = (await owner.client.get('/api/v1/invites')).body.invites as { id: string; role: string; state: string }[];
    const made = invites.at(-1)!;
    expect(made).toMatchObject({ role: 'viewer', state: 'pending' });
    // The link works: a new person joins as a viewer.
    const newcomer = await person(s.url, 'Nina', url![2]!);
    expect(newcomer.slug).toBe(owner.slug);

    const promote = await submit(s, owner.client, `/app/members/${viewer.id}/role`, { csrf: owner.client.csrf!, role: 'editor' });
    expect(promote.status).toBe(303);
    expect(promote.location).toBe('/app/members?notice=role');
    const after = await owner.client.get('/api/v1/members');
    expect(after.body.members.find((m: { id: string }) => m.id === viewer.id).role).toBe('editor');
    await submit(s, owner.client, `/app/members/${viewer.id}/role`, { csrf: owner.client.csrf!, role: 'viewer' });

    // The last owner cannot be demoted: the core's conflict, on the page.
    const last = await submit(s, owner.client, `/app/members/${owner.id}/role`, { csrf: owner.client.csrf!, role: 'viewer' });
    expect(last.status).toBe(409);
    expect(last.text).toContain('The last owner cannot be demoted');

    const second = await submit(s, owner.client, '/app/invites', { csrf: owner.client.csrf!, role: 'editor', expires_in_days: '1' });
    const token = /\/invite\/(iv_[^<]+)<\/code>/.exec(second.text)![1]!;
    const id = ((await owner.client.get('/api/v1/invites')).body.invites as { id: string }[]).at(-1)!.id;
    const rev = await submit(s, owner.client, `/app/invites/${id}/revoke`, { csrf: owner.client.csrf! });
    expect(rev.status).toBe(303);
    const late = new Client(s.url);
    const su = await late.post('/api/v1/auth/signup', { email: freshEmail('late'), password: PASSWORD, name: 'Late', invite_token: token });
    expect(su.status).not.toBe(201);
  });

  it('deleting an agent asks for a tick, then its keys stop working at once', async () => {
    const agent = await createAgentWithKey(editor.client, [{ action: 'read', ceiling: 'internal' }], { name: 'short-lived', ceiling: 'internal' });
    // The editor made it: they manage it (the core's creator rule), and see its keys.
    const page = await browse(s, editor.client, `/app/agents/${agent.id}`);
    expect(page.status).toBe(200);
    expect(page.text).toContain('table class="keys"');
    const unticked = await submit(s, editor.client, `/app/agents/${agent.id}/delete`, { csrf: editor.client.csrf! });
    expect(unticked.status).toBe(400);
    expect((await agent.client.get('/api/v1/me')).status).toBe(200);
    const done = await submit(s, editor.client, `/app/agents/${agent.id}/delete`, { csrf: editor.client.csrf!, confirm: 'yes' });
    expect(done.status).toBe(303);
    expect(done.location).toBe('/app/agents?notice=deleted');
    expect((await agent.client.get('/api/v1/me')).status).toBe(401);
    expect((await browse(s, editor.client, '/app/agents')).text).not.toContain('short-lived');
  });

  it('sessions: the current one is marked; ending another signs that browser out', async () => {
    const other = await signIn(s.url, editor.email);
    const page = await browse(s, editor.client, '/app/account');
    expect(page.status).toBe(200);
    expect(page.text).toContain('this browser');
    const ids = [...page.text.matchAll(/action="\/app\/account\/sessions\/([^/]+)\/revoke"/g)].map((m) => m[1]!);
    expect(ids.length).toBeGreaterThanOrEqual(1);
    const otherSessions = (await other.get('/api/auth/sessions')).body.sessions as { id: string; current: boolean }[];
    const otherId = otherSessions.find((x) => x.current)!.id;
    expect(ids).toContain(otherId);
    expect((await browse(s, other, '/app')).status).toBe(200);
    const r = await submit(s, editor.client, `/app/account/sessions/${otherId}/revoke`, { csrf: editor.client.csrf! });
    expect(r.status).toBe(303);
    const gone = await browse(s, other, '/app/account');
    expect(gone.status).toBe(303);
    expect(gone.location).toMatch(/^\/login\?next=/);
    expect((await browse(s, editor.client, '/app/account')).status).toBe(200);
    // Someone else's session is not found, and ends nothing.
    const mine = (await owner.client.get('/api/auth/sessions')).body.sessions[0].id as string;
    expect((await submit(s, editor.client, `/app/account/sessions/${mine}/revoke`, { csrf: editor.client.csrf! })).status).toBe(404);
    expect((await browse(s, owner.client, '/app/account')).status).toBe(200);
  });

  it('TOTP: step-up first, then a QR code and the key; a code turns it on and sign-in asks for one', async () => {
    const p = await person(s.url, 'Tess');
    const first = await submit(s, p.client, '/app/account/totp', { csrf: p.client.csrf! });
    expect(first.status).toBe(303);
    expect(first.location).toBe('/app/stepup?next=%2Fapp%2Faccount');
    const up = await submit(s, p.client, '/app/stepup', { csrf: p.client.csrf!, next: '/app/account', password: PASSWORD });
    expect(up.status).toBe(303);
    const setup = await submit(s, p.client, '/app/account/totp', { csrf: p.client.csrf! });
    expect(setup.status).toBe(200);
    expect(setup.text).toMatch(/<svg role="img" aria-label="QR code of the setup link" class="qr" xmlns="http:\/\/www\.w3\.org\/2000\/svg"[^>]*><path /);
    const svg = /<svg[\s\S]*?<\/svg>/.exec(setup.text)![0];
    expect(svg).not.toMatch(/<script|\son\w+=|href=/i);
    const secret = /id="totp-key"[^>]*><code>([A-Z2-7]+)<\/code>/.exec(setup.text)![1]!;
    expect(setup.text).toContain(`secret=${secret}`);
    const wrong = await submit(s, p.client, '/app/account/totp/verify', { csrf: p.client.csrf!, code: '000000' === totpCode(secret) ? '111111' : '000000' });
    expect(wrong.status).toBe(400);
    expect(wrong.text).toContain('That code is not right');
    const ok = await submit(s, p.client, '/app/account/totp/verify', { csrf: p.client.csrf!, code: totpCode(secret) });
    expect(ok.status).toBe(303);
    expect(ok.location).toBe('/app/account?notice=totp_on');
    expect((await browse(s, p.client, '/app/account?notice=totp_on')).text).toContain('Two-step verification is on');
    expect((await p.client.get('/api/v1/me')).body.totp).toBe(true);
    const login = await new Client(s.url).post('/api/auth/login', { email: p.email, password: PASSWORD });
    expect(login.body.status).toBe('totp_required');
  });
});

/* ---------------------------------------------------------------- git token */

describe('git tokens from the account page (sqlite, the real git CLI)', () => {
  let s: TestServer;
  let g: GitHome;

  beforeAll(async () => {
    s = await startTestServer('sqlite');
    g = new GitHome();
  });
  afterAll(async () => {
    g?.cleanup();
    await s?.stop();
  });

  it('mint after a step-up, shown once with a clone command that git accepts; revoked, git is refused', async () => {
    const p = await person(s.url, 'Gita');
    expect((await p.client.post('/api/v1/nodes', { path: 'eng/readme.md', content: '# Readme\n\nHello.\n' })).status).toBe(201);
    const gate = await submit(s, p.client, '/app/account/git-tokens', { csrf: p.client.csrf!, name: 'laptop', expires_in_days: '30' });
    expect(gate.status).toBe(303);
    expect(gate.location).toMatch(/^\/app\/stepup\?next=/);
    expect((await submit(s, p.client, '/app/stepup', { csrf: p.client.csrf!, next: '/app/account', password: PASSWORD })).status).toBe(303);
    const minted = await submit(s, p.client, '/app/account/git-tokens', { csrf: p.client.csrf!, name: 'laptop', expires_in_days: '30' });
    expect(minted.status).toBe(201);
    const token = /id="new-token"[^>]*><code>(gt_[^<]+)<\/code>/.exec(minted.text)![1]!;
    const clone = /id="clone"[^>]*><code>git clone ([^<]+)<\/code>/.exec(minted.text)![1]!;
    expect(clone).toBe(`${s.url.replace('://', `://x:${token}@`)}/git/${p.slug}.git`);

    const ls = await g.git(['ls-remote', clone]);
    expect(ls.code, ls.stderr).toBe(0);
    expect(ls.stdout).toMatch(/^[0-9a-f]{40}\trefs\/heads\/main$/m);

    const account = await browse(s, p.client, '/app/account');
    expect(account.text).not.toContain(token);
    expect(account.text).toContain('laptop');
    const id = /action="\/app\/account\/git-tokens\/([^/]+)\/revoke"/.exec(account.text)![1]!;
    expect((await submit(s, p.client, `/app/account/git-tokens/${id}/revoke`, { csrf: p.client.csrf! })).status).toBe(303);
    const refused = await g.git(['ls-remote', clone]);
    expect(refused.code).not.toBe(0);
  });
});

/* ----------------------------------------------------------------- browser */

const haveChromium = chromiumPresent('the web app administering screens');

describe.skipIf(!haveChromium)('administering in a real browser (chromium, sqlite)', BROWSER_SUITE, () => {
  let s: TestServer;
  let browser: Browser;
  let owner: Person;
  let viewer: Person;

  beforeAll(async () => {
    s = await startTestServer('sqlite');
    ({ owner, viewer } = await team(s));
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  const signedIn = (email: string, viewport?: { width: number; height: number }) => signedInPage(browser, s.url, email, viewport);

  it('the owner creates an agent with a read grant and an internal ceiling, mints a key shown once, and revokes it', async () => {
    const { context, page, dialogs } = await signedIn(owner.email);
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: s.url });
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Agents' }).click();
    await page.waitForURL('**/app/agents');
    const a11y: Record<string, string[]> = { agents: await seriousViolations(page) };

    await page.getByLabel('Name', { exact: true }).fill('docs-reader');
    await page.getByLabel('Ceiling', { exact: true }).selectOption('internal');
    await page.getByLabel('Action 1').selectOption('read');
    await page.getByLabel('Scope 1').fill('*');
    await page.getByLabel('Up to 1').selectOption('internal');
    await page.getByRole('button', { name: 'Create agent' }).click();
    await page.waitForURL(/\/app\/agents\/[^/?]+\?notice=created$/);
    const agentId = new URL(page.url()).pathname.split('/').at(-1)!;
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('docs-reader');
    expect(await page.locator('.grant-list').textContent()).toMatch(/read on \* up to internal/);
    await screenshot(page, 'app-agent');
    a11y.agent = await seriousViolations(page);

    await page.getByLabel('Key name').fill('laptop');
    await page.getByRole('button', { name: 'Mint key' }).click();
    await page.waitForURL(`**/app/agents/${agentId}/keys`);
    const key = (await page.locator('#new-key').textContent())!.trim();
    expect(key).toMatch(/^ak_/);
    const copy = page.getByRole('button', { name: 'Copy key' });
    expect(await copy.isVisible()).toBe(true);
    await copy.click();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(key);
    expect(await page.locator('#cfg-claude').textContent()).toBe(
      `claude mcp add --transport http docs-reader ${s.url}/mcp --header "Authorization: Bearer ${key}"`,
    );
    const cfg = JSON.parse((await page.locator('#cfg-json').textContent())!);
    expect(cfg.mcpServers['docs-reader']).toEqual({ type: 'http', url: `${s.url}/mcp`, headers: { Authorization: `Bearer ${key}` } });
    await screenshot(page, 'app-agent-key');
    a11y.key = await seriousViolations(page);

    // The key works: it is the agent.
    const me = await new Client(s.url, key).get('/api/v1/me');
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ id: agentId, kind: 'agent', name: 'docs-reader' });

    // Shown once: the agent's page (and the list) carry only its hint.
    await page.goto(`/app/agents/${agentId}`);
    expect(await page.content()).not.toContain(key);
    const row = page.locator('table.keys tbody tr');
    expect(await row.count()).toBe(1);
    expect(await row.textContent()).toContain('laptop');
    expect(await row.textContent()).toContain('active');
    await page.goto('/app/agents');
    expect(await page.content()).not.toContain(key);
    expect(await page.locator('.agent-item', { hasText: 'docs-reader' }).textContent()).toContain('read on * up to internal');
    await screenshot(page, 'app-agents');

    await page.goto(`/app/agents/${agentId}`);
    await page
      .locator('table.keys')
      .getByRole('button', { name: /^Revoke/ })
      .click();
    await page.waitForURL(`**/app/agents/${agentId}?notice=revoked`);
    expect(await page.locator('table.keys tbody tr').textContent()).toContain('revoked');
    expect((await new Client(s.url, key).get('/api/v1/me')).status).toBe(401);

    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Members' }).click();
    await page.waitForURL('**/app/members');
    await page.getByLabel('Role', { exact: true }).selectOption('viewer');
    await page.getByRole('button', { name: 'Create invite link' }).click();
    await page.waitForURL('**/app/invites');
    expect(await page.locator('#invite-url').textContent()).toMatch(new RegExp(`^${s.url}/invite/iv_`));
    await page.getByRole('link', { name: 'Back to the members' }).click();
    await page.getByLabel('Role of Victor').selectOption('editor');
    await page.getByRole('button', { name: 'Change role of Victor' }).click();
    await page.waitForURL('**/app/members?notice=role');
    expect(await page.getByLabel('Role of Victor').inputValue()).toBe('editor');
    await screenshot(page, 'app-members');
    a11y.members = await seriousViolations(page);
    await page.getByLabel('Role of Victor').selectOption('viewer');
    await page.getByRole('button', { name: 'Change role of Victor' }).click();
    await page.waitForURL('**/app/members?notice=role');

    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Account' }).click();
    await page.waitForURL('**/app/account');
    expect(await page.locator('table.sessions').textContent()).toContain('this browser');
    await screenshot(page, 'app-account');
    a11y.account = await seriousViolations(page);

    expect(a11y).toEqual({ agents: [], agent: [], key: [], members: [], account: [] });
    expect(dialogs).toEqual([]);
    await context.close();
  });

  it('TOTP enrolment in the browser: step-up, QR code, verify; at phone width the screens fit', async () => {
    const p = await person(s.url, 'Pia');
    const { context, page } = await signedIn(p.email, { width: 390, height: 844 });
    await page.goto('/app/account');
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await screenshot(page, 'app-account-phone');
    await page.getByRole('button', { name: 'Set up two-step verification' }).click();
    await page.waitForURL('**/app/stepup?next=%2Fapp%2Faccount');
    await page.getByLabel('Your password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.waitForURL('**/app/account');
    await page.getByRole('button', { name: 'Set up two-step verification' }).click();
    await page.waitForURL('**/app/account/totp');
    expect(await page.getByRole('img', { name: 'QR code of the setup link' }).isVisible()).toBe(true);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await screenshot(page, 'app-totp-setup');
    expect(await seriousViolations(page)).toEqual([]);
    const secret = (await page.locator('#totp-key').textContent())!.trim();
    await page.getByLabel('Code from the app').fill(totpCode(secret));
    await page.getByRole('button', { name: 'Turn on' }).click();
    await page.waitForURL('**/app/account?notice=totp_on');
    expect(await page.getByRole('status').textContent()).toContain('Two-step verification is on');
    await context.close();

    // Sign-in now asks for the code.
    const { context: c2, page: p2 } = await openPage(browser, s.url);
    await p2.goto('/login?next=%2Fapp');
    await p2.getByLabel('Email').fill(p.email);
    await p2.getByLabel('Password').fill(PASSWORD);
    await p2.getByRole('button', { name: 'Sign in' }).click();
    expect(await p2.getByRole('heading', { name: 'Two-step verification' }).isVisible()).toBe(true);
    await c2.close();
  });

  it('a viewer reads the members without controls; the agent pages of others are a 403 page', async () => {
    const agent = await createAgentWithKey(owner.client, [{ action: 'read', ceiling: 'internal' }], { name: 'not-yours', ceiling: 'internal' });
    const { context, page } = await signedIn(viewer.email);
    const nav = page.getByRole('navigation', { name: 'Main' });
    expect(await nav.getByRole('link', { name: 'Members' }).count()).toBe(1);
    await nav.getByRole('link', { name: 'Members' }).click();
    await page.waitForURL('**/app/members');
    // No role select in the page (the navigation's workspace switcher is one: the viewer is in two workspaces).
    expect(await page.locator('main').getByRole('combobox').count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Create invite link' }).count()).toBe(0);
    const res = await page.goto(`/app/agents/${agent.id}`);
    expect(res?.status()).toBe(403);
    expect(await page.getByRole('alert').textContent()).toContain("Only the agent's creator or a workspace owner");
    await context.close();
  });
});
