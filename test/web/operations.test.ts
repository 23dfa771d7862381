import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seriousViolations } from '../support/axe.js';
import { chromiumPresent, launchChromium, screenshot } from '../support/browser.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, startTestServer, type TestServer } from '../support/server.js';
import { signedInPage, WEB_PASSWORD, webPerson, type WebPerson, browse, submit } from '../support/web.js';

/**
 * The owner's operations screens of the web app (issue 17, src/web/app/operations.ts): the
 * Admin index, lockdown (step-up first; agent keys die), elevations (step-up; the agent then
 * reads a secret page), the audit log (filters, paging, chain verification) and the lifecycle
 * job (every member sees the candidates, owners run it dry or apply it). Refusals come from the
 * core: a member who is not an owner gets its 403 page, a form without the session's token a
 * 403, bad input a 400 page with the form kept. Pages are aged by writing their timestamps in
 * the test database, as test/http/lifecycle.test.ts does (no API moves the clock).
 */

const DAY = 86_400_000;
type Person = WebPerson;
const person = webPerson;

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

let k = 0;
const uniq = (p: string) => `${p}${++k}${Date.now().toString(36)}`;

async function write(c: Client, path: string, sensitivity = 'internal'): Promise<string> {
  const res = await c.post('/api/v1/nodes', { path, content: `---\nsensitivity: ${sensitivity}\n---\n# ${path}\n\nText at ${sensitivity}.\n` });
  expect(res.status, res.text).toBe(201);
  return res.body.id as string;
}

/** A page in a folder set to auto-archive after 30 days, last written and read 40 days ago. */
async function stalePage(s: TestServer, owner: Client): Promise<{ id: string; path: string; folder: string }> {
  const folder = `eng/${uniq('old')}`;
  const path = `${folder}/stale.md`;
  const id = await write(owner, path);
  const set = await owner.put(`/api/v1/clusters/${folder}/lifecycle`, { auto_archive_days: 30 });
  expect(set.status, set.text).toBe(200);
  const at = new Date(Date.now() - 40 * DAY).toISOString();
  await s.ctx.store.db.updateTable('pages').set({ updated_at: at, last_touched_at: at }).where('id', '=', id).execute();
  return { id, path, folder };
}

const stepUp = async (c: Client) => expect((await c.post('/api/auth/stepup', { password: WEB_PASSWORD })).status).toBe(200);

/* -------------------------------------------------------------- plain HTTP */

describe.each(testEngines())('operations over HTTP (%s)', (engine) => {
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

  it('only owners get the Admin link and the owners screens; the others get the core 403 page', async () => {
    const ownerHome = await browse(s, owner.client, '/app');
    expect(ownerHome.text).toContain('href="/app/admin"');
    const index = await browse(s, owner.client, '/app/admin');
    expect(index.status).toBe(200);
    for (const href of ['/app/lockdown', '/app/elevations', '/app/audit', '/app/lifecycle']) expect(index.text).toContain(`href="${href}"`);
    for (const url of ['/app/lockdown', '/app/elevations', '/app/audit', '/app/audit/verify', '/app/lifecycle']) {
      expect((await browse(s, owner.client, url)).status, url).toBe(200);
    }

    for (const who of [editor, viewer]) {
      const home = await browse(s, who.client, '/app');
      expect(home.status).toBe(200);
      expect(home.text).not.toContain('href="/app/admin"');
      for (const url of ['/app/lockdown', '/app/elevations', '/app/audit', '/app/audit/verify']) {
        const r = await browse(s, who.client, url);
        expect(r.status, url).toBe(403);
        expect(r.text).toMatch(/Only a workspace owner|for a signed-in owner/);
        expect(r.text).not.toContain('action="/app/lockdown"');
      }
      // Their index names only the lifecycle.
      const idx = await browse(s, who.client, '/app/admin');
      expect(idx.status).toBe(200);
      expect(idx.text).toContain('href="/app/lifecycle"');
      expect(idx.text).not.toContain('href="/app/lockdown"');
    }
  });

  it('every member sees the lifecycle candidates with why; only owners get the run buttons', async () => {
    const stale = await stalePage(s, owner.client);
    for (const who of [owner, editor, viewer]) {
      const r = await browse(s, who.client, '/app/lifecycle');
      expect(r.status).toBe(200);
      expect(r.text).toContain(stale.path);
      expect(r.text).toContain(`${stale.folder}</span>: after 30 days`);
      expect(r.text).toMatch(/4\d\.\d* days|40 days/);
      expect(r.text.includes('action="/app/lifecycle/run"')).toBe(who === owner);
    }
    // A dry run by the owner lists it and changes nothing; the page stays active.
    const dry = await submit(s, owner.client, '/app/lifecycle/run', { csrf: owner.client.csrf!, mode: 'dry' });
    expect(dry.status).toBe(200);
    expect(dry.text).toContain('Dry run: an apply would archive');
    expect(dry.text).toContain(stale.path);
    // Apply without a step-up: to the step-up page and back here.
    const apply = await submit(s, owner.client, '/app/lifecycle/run', { csrf: owner.client.csrf!, mode: 'apply' });
    expect(apply.status).toBe(303);
    expect(apply.location).toBe('/app/stepup?next=%2Fapp%2Flifecycle');
    const row = await s.ctx.store.db.selectFrom('pages').select('state').where('id', '=', stale.id).executeTakeFirstOrThrow();
    expect(row.state).toBe('active');
    // Neither a bad mode nor a viewer's forged run does anything.
    const bad = await submit(s, owner.client, '/app/lifecycle/run', { csrf: owner.client.csrf!, mode: 'everything' });
    expect(bad.status).toBe(400);
    const forged = await submit(s, viewer.client, '/app/lifecycle/run', { csrf: viewer.client.csrf!, mode: 'dry' });
    expect(forged.status).toBe(403);
    expect(forged.text).toContain('Only a workspace owner may run the lifecycle job');
  });

  it('forms without the session token, and forms from members who are not owners, change nothing', async () => {
    const agent = await createAgentWithKey(owner.client, [{ action: 'read' }], { name: 'forged-bot' });
    for (const csrf of [undefined, 'not-the-token']) {
      const token: Record<string, string> = csrf ? { csrf } : {};
      expect((await submit(s, owner.client, '/app/lockdown', { ...token, confirm: 'yes' })).status).toBe(403);
      expect((await submit(s, owner.client, '/app/elevations', { ...token, agent_id: agent.id, minutes: '5', reason: 'x' })).status).toBe(403);
      expect((await submit(s, owner.client, '/app/lifecycle/run', { ...token, mode: 'dry' })).status).toBe(403);
    }
    const lock = await submit(s, editor.client, '/app/lockdown', { csrf: editor.client.csrf!, confirm: 'yes' });
    expect(lock.status).toBe(403);
    expect(lock.text).toContain('Only a workspace owner may do this');
    const lockUnticked = await submit(s, viewer.client, '/app/lockdown', { csrf: viewer.client.csrf! });
    expect(lockUnticked.status).toBe(403);
    const el = await submit(s, editor.client, '/app/elevations', { csrf: editor.client.csrf!, agent_id: agent.id, minutes: '5', reason: 'please' });
    expect(el.status).toBe(403);
    expect(el.text).toContain('Only a workspace owner may do this');

    // Nothing happened: the key works, no lockdown or elevation in the log.
    expect((await agent.client.get('/api/v1/me')).status).toBe(200);
    const log = await owner.client.get('/api/v1/audit?action=workspace.lockdown');
    expect(log.body.items).toEqual([]);
    expect((await owner.client.get('/api/v1/audit?action=agent.elevate')).body.items).toEqual([]);
  });

  it('bad elevation input is a 400 with the form kept; an unknown agent is a 404 page; garbage audit filters are a 400 page', async () => {
    const agent = await createAgentWithKey(owner.client, [{ action: 'read' }], { name: 'helper-bot' });
    const base = { csrf: owner.client.csrf!, agent_id: agent.id, reason: 'keep this reason' };
    for (const minutes of ['0', '481', 'abc', '1.5', '']) {
      const r = await submit(s, owner.client, '/app/elevations', { ...base, minutes });
      expect(r.status, minutes).toBe(400);
      expect(r.text).toContain('The time is a whole number of minutes from 1 to 480');
      expect(r.text).toContain('value="keep this reason"');
      expect(r.text).toContain(`<option value="${agent.id}" selected>helper-bot</option>`);
    }
    for (const reason of ['', '   ', 'x'.repeat(501)]) {
      const r = await submit(s, owner.client, '/app/elevations', { ...base, minutes: '30', reason });
      expect(r.status).toBe(400);
      expect(r.text).toContain('Give a reason');
      expect(r.text).toContain('value="30"');
    }
    const noAgent = await submit(s, owner.client, '/app/elevations', { ...base, agent_id: '', minutes: '30' });
    expect(noAgent.status).toBe(400);
    expect(noAgent.text).toContain('Choose an agent');

    // A good form without a step-up goes to the step-up page; after it, an unknown agent is the core's 404.
    const gate = await submit(s, owner.client, '/app/elevations', { ...base, minutes: '30' });
    expect(gate.status).toBe(303);
    expect(gate.location).toBe('/app/stepup?next=%2Fapp%2Felevations');
    await stepUp(owner.client);
    const unknown = await submit(s, owner.client, '/app/elevations', { ...base, agent_id: 'pr_nobody', minutes: '30' });
    expect(unknown.status).toBe(404);
    expect(unknown.text).toContain('Agent pr_nobody not found');
    expect(unknown.text).toContain('value="keep this reason"');
    // An agent without a read grant: the core's 409, said on the form.
    const searcher = await createAgentWithKey(owner.client, [{ action: 'search' }], { name: 'search-only' });
    const useless = await submit(s, owner.client, '/app/elevations', { ...base, agent_id: searcher.id, minutes: '30' });
    expect(useless.status).toBe(409);
    expect(useless.text).toContain('The elevation would change nothing');

    // Lockdown asks for the tick first (and nothing happens without it).
    const unticked = await submit(s, owner.client, '/app/lockdown', { csrf: owner.client.csrf! });
    expect(unticked.status).toBe(400);
    expect(unticked.text).toContain('Tick');
    expect((await agent.client.get('/api/v1/me')).status).toBe(200);

    const cursor = await browse(s, owner.client, '/app/audit?cursor=garbage!!&action=page.');
    expect(cursor.status).toBe(400);
    expect(cursor.text).toContain('cursor is not one this log returned');
    expect(cursor.text).toContain('value="page."');
    const forged = await browse(s, owner.client, `/app/audit?cursor=${Buffer.from('a1:99999999999999999').toString('base64url')}`);
    expect(forged.status).toBe(400);
    const action = await browse(s, owner.client, '/app/audit?action=DROP%20TABLE');
    expect(action.status).toBe(400);
    expect(action.text).toContain('These filters do not work');
    expect(action.text).toContain('value="DROP TABLE"');
    expect((await browse(s, owner.client, '/app/audit?limit=lots')).status).toBe(400);
    expect((await browse(s, owner.client, `/app/audit?node=${'n'.repeat(200)}`)).status).toBe(400);
    // The filters are the owner's: a viewer with bad filters still gets the 403, not a filter message.
    expect((await browse(s, viewer.client, '/app/audit?action=DROP%20TABLE')).status).toBe(403);
  });
});

/* ----------------------------------------------------------------- browser */

const haveChromium = chromiumPresent('the web app operations screens');
/** Browser journeys sign in, step up and run axe several times: slow on a busy two-core machine. */
const SLOW = 120_000;

describe.skipIf(!haveChromium).each(testEngines())('operations in a real browser (chromium, %s)', (engine) => {
  let s: TestServer;
  let browser: Browser;
  let owner: Person;
  let editor: Person;

  beforeAll(async () => {
    s = await startTestServer(engine);
    ({ owner, editor } = await team(s));
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  const signedIn = (email: string, viewport?: { width: number; height: number }) => signedInPage(browser, s.url, email, viewport);

  /** The step-up page: the password, then back where the action was. */
  async function confirmItIsMe(page: Page, back: string) {
    await page.waitForURL(`**/app/stepup?next=${encodeURIComponent(back)}`);
    await page.getByLabel('Your password').fill(WEB_PASSWORD);
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.waitForURL(`**${back}`);
  }

  it(
    'the owner locks the workspace down after a step-up; an agent key then gets 401',
    async () => {
      // A workspace of its own: the lockdown signs everyone else out of it.
      const lara = await person(s.url, 'Lara');
      const agent = await createAgentWithKey(lara.client, [{ action: 'read' }], { name: 'lara-bot' });
      expect((await agent.client.get('/api/v1/me')).status).toBe(200);
      expect((await lara.client.post('/api/v1/invites', { role: 'viewer' })).status).toBe(201);

      const { context, page, dialogs } = await signedIn(lara.email);
      await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Admin' }).click();
      await page.waitForURL('**/app/admin');
      const a11y: Record<string, string[]> = { workspace: await seriousViolations(page) };
      await page.getByRole('link', { name: 'Lockdown' }).click();
      await page.waitForURL('**/app/lockdown');
      const warning = (await page.locator('.lock-effects').textContent())!;
      expect(warning).toContain('Every agent key');
      expect(warning).toContain('1 agent');
      expect(warning).toContain('1 pending invite');
      expect(warning).toContain('Everyone else is signed out');
      await screenshot(page, 'app-lockdown');
      a11y.lockdown = await seriousViolations(page);

      await page.getByLabel('Yes, lock this workspace down now').check();
      await page.getByRole('button', { name: 'Lock down' }).click();
      await confirmItIsMe(page, '/app/lockdown');
      expect((await agent.client.get('/api/v1/me')).status).toBe(200);
      await page.getByLabel('Yes, lock this workspace down now').check();
      await page.getByRole('button', { name: 'Lock down' }).click();
      await page.getByRole('heading', { name: 'Workspace locked down' }).waitFor();
      const facts = (await page.locator('dl.facts').textContent())!;
      expect(facts).toMatch(/Invites revoked\s*1\b/);
      expect(facts).toMatch(/Sessions signed out\s*[1-9]/);
      a11y.done = await seriousViolations(page);

      // The key is dead over REST; the API session from before is out of this workspace; this browser stays in.
      expect((await agent.client.get('/api/v1/me')).status).toBe(401);
      expect((await lara.client.get('/api/v1/whoami')).status).toBe(401);
      expect((await page.goto('/app/admin'))?.status()).toBe(200);
      expect(a11y).toEqual({ workspace: [], lockdown: [], done: [] });
      expect(dialogs).toEqual([]);
      await context.close();
    },
    SLOW,
  );

  it(
    'the owner elevates an agent after a step-up; the agent then reads a secret page over REST',
    async () => {
      await stepUp(owner.client);
      const secret = await write(owner.client, `vault/${uniq('s')}.md`, 'secret');
      const agent = await createAgentWithKey(owner.client, [{ action: 'read', ceiling: 'confidential' }], { name: 'vault-reader' });
      expect((await agent.client.get(`/api/v1/nodes/${secret}`)).status).toBe(404);

      const { context, page } = await signedIn(owner.email);
      await page.goto('/app/elevations');
      expect(await page.getByText('No agent is elevated now.').isVisible()).toBe(true);
      const a11y: Record<string, string[]> = { form: await seriousViolations(page) };
      const fill = async () => {
        await page.getByLabel('Agent', { exact: true }).selectOption({ label: 'vault-reader' });
        await page.getByLabel(/For how long/).fill('15');
        await page.getByLabel(/Reason/).fill('incident 42: read the vault');
        await page.getByRole('button', { name: 'Elevate' }).click();
      };
      await fill();
      await confirmItIsMe(page, '/app/elevations');
      await fill();
      await page.getByRole('status').waitFor();
      expect(await page.getByRole('status').textContent()).toContain('vault-reader reads at secret until');
      const row = (await page.locator('table.elevations tbody tr').textContent())!;
      expect(row).toContain('vault-reader');
      expect(row).toContain('incident 42: read the vault');
      expect(row).toContain('Olga');
      a11y.done = await seriousViolations(page);

      const read = await agent.client.get(`/api/v1/nodes/${secret}`);
      expect(read.status, read.text).toBe(200);
      expect(read.body.content).toContain('Text at secret');
      expect(a11y).toEqual({ form: [], done: [] });
      await context.close();
    },
    SLOW,
  );

  it(
    'the audit log narrows by action and by person, pages to older entries, and verifies the chain intact',
    async () => {
      const written = [];
      for (let i = 0; i < 3; i++) written.push(await write(editor.client, `notes/${uniq('e')}.md`));
      const { context, page } = await signedIn(owner.email);
      await page.goto('/app/audit');
      const rows = page.locator('table.audit tbody tr');
      expect(await rows.count()).toBeGreaterThan(5);
      await screenshot(page, 'app-audit');
      const a11y: Record<string, string[]> = { audit: await seriousViolations(page) };

      const cells = (col: number) => page.locator(`table.audit tbody tr td:nth-child(${col})`).allTextContents();
      await page.getByLabel(/^Action/).fill('page.');
      await page.getByRole('button', { name: 'Filter' }).click();
      await page.waitForURL(/\/app\/audit\?.*action=page\./);
      const actions = await cells(4);
      expect(actions.length).toBeGreaterThanOrEqual(3);
      for (const a of actions) expect(a).toMatch(/^page\./);

      await page.getByLabel(/^Action/).fill('');
      await page.getByLabel('Who').selectOption({ label: 'Edna' });
      await page.getByRole('button', { name: 'Filter' }).click();
      await page.waitForURL(new RegExp(`principal=${editor.id}`));
      const who = await cells(3);
      expect(who.length).toBeGreaterThanOrEqual(3);
      for (const w of who) expect(w).toContain('Edna');
      // The pages she wrote are linked where the owner may read them.
      const links = await page.locator('table.audit tbody a').evaluateAll((as) => as.map((a) => a.getAttribute('href')));
      expect(links.filter((h) => h?.startsWith('/app/p/notes/')).length).toBeGreaterThanOrEqual(3);
      a11y.filtered = await seriousViolations(page);

      // Paging: three at a time; Older shows earlier entries only.
      await page.goto('/app/audit?limit=3');
      const first = (await cells(1)).map(Number);
      expect(first).toHaveLength(3);
      await page.getByRole('link', { name: 'Older' }).click();
      await page.waitForURL(/cursor=/);
      const older = (await cells(1)).map(Number);
      expect(older.length).toBeGreaterThan(0);
      expect(Math.max(...older)).toBeLessThan(Math.min(...first));
      expect(await page.getByRole('link', { name: 'Newest' }).count()).toBe(1);

      await page.getByRole('button', { name: 'Verify chain' }).click();
      await page.waitForURL(/\/app\/audit\/verify/);
      expect(await page.getByRole('status').textContent()).toMatch(/The chain is intact: all \d+ entries/);
      a11y.verify = await seriousViolations(page);
      expect(a11y).toEqual({ audit: [], filtered: [], verify: [] });
      await context.close();
    },
    SLOW,
  );

  it(
    'lifecycle: a dry run lists a stale candidate, apply (after a step-up) archives it in a commit',
    async () => {
      const stale = await stalePage(s, owner.client);
      const { context, page } = await signedIn(owner.email);
      await page.goto('/app/lifecycle');
      const candidates = page.getByRole('region', { name: 'Candidates', exact: true });
      expect(await candidates.textContent()).toContain(stale.path);
      const a11y: Record<string, string[]> = { lifecycle: await seriousViolations(page) };

      await page.getByRole('button', { name: 'Dry run' }).click();
      await page.getByRole('heading', { name: /^Dry run: an apply would archive/ }).waitFor();
      expect(await page.getByRole('region', { name: 'Would be archived', exact: true }).textContent()).toContain(stale.path);
      await screenshot(page, 'app-lifecycle');
      a11y.dry = await seriousViolations(page);

      await page.getByRole('button', { name: 'Apply' }).click();
      await confirmItIsMe(page, '/app/lifecycle');
      await page.getByRole('button', { name: 'Apply' }).click();
      await page.getByRole('heading', { name: /^Applied: \d+ pages? archived/ }).waitFor();
      expect(await page.getByRole('region', { name: 'Archived', exact: true }).textContent()).toContain(stale.path);
      const commit = (await page.locator('.outcome .mono').first().textContent())!;
      expect(commit).toMatch(/^[0-9a-f]{40}$/);
      a11y.applied = await seriousViolations(page);
      const row = await s.ctx.store.db.selectFrom('pages').select('state').where('id', '=', stale.id).executeTakeFirstOrThrow();
      expect(row).toMatchObject({ state: 'archived' });
      // No longer a candidate; the last run is this one.
      await page.goto('/app/lifecycle');
      expect(await page.locator('main').textContent()).not.toContain(stale.path);
      expect(await page.locator('dl.facts').textContent()).toContain(commit.slice(0, 10));
      expect(a11y).toEqual({ lifecycle: [], dry: [], applied: [] });
      await context.close();
    },
    SLOW,
  );

  it(
    'at phone width every operations screen fits',
    async () => {
      const { context, page } = await signedIn(owner.email, { width: 390, height: 844 });
      for (const url of ['/app/admin', '/app/lockdown', '/app/elevations', '/app/audit', '/app/lifecycle']) {
        expect((await page.goto(url))?.status(), url).toBe(200);
        expect(await page.evaluate(() => document.documentElement.scrollWidth), url).toBeLessThanOrEqual(390);
      }
      await context.close();
    },
    SLOW,
  );
});
