import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { currentTotp } from '../../src/auth/totp.js';
import { PASSWORD, signup, type Human } from '../support/actors.js';
import { seriousViolations } from '../support/axe.js';
import { chromiumPresent, launchChromium, openPage, screenshot, BROWSER_SUITE } from '../support/browser.js';
import { testEngines } from '../support/engines.js';
import { Client, startTestServer, type TestServer } from '../support/server.js';

/**
 * The web app's writing pages (issue 17, src/web/app/edit.ts and stepup.ts): a new page, the
 * editor with its preview, a stale edit that merges or becomes a proposal, move, archive,
 * restore, delete behind the step-up prompt, what a viewer is shown and refused, CSRF, and an
 * axe-core check of the app's main screens. Plain HTTP checks run on every engine; the browser
 * suite drives Debian's chromium (SQLite).
 */

const enc = encodeURIComponent;

const RUNBOOK = `# Runbook

Step one: check the dashboards.

Step two: page the on-call.

Step three: write the incident note.
`;

async function write(c: Client, pagePath: string, content: string): Promise<string> {
  const res = await c.post('/api/v1/nodes', { path: pagePath, content, message: `add ${pagePath}` });
  expect(res.status, res.text).toBe(201);
  return res.body.id as string;
}

async function content(c: Client, pagePath: string): Promise<{ status: number; content?: string; state?: string; archived_reason?: string }> {
  const res = await c.get(`/api/v1/nodes/${enc(pagePath)}`);
  return { status: res.status, content: res.body?.content, state: res.body?.state, archived_reason: res.body?.archived_reason };
}

const cookieOf = (c: Client) => [...c.cookies].map(([k, v]) => `${k}=${v}`).join('; ');

/** A GET as a browser sends it, redirects not followed. */
function browse(s: TestServer, c: Client, url: string): Promise<Response> {
  return fetch(s.url + url, { headers: { accept: 'text/html', cookie: cookieOf(c) }, redirect: 'manual' });
}

/** A form POST as a browser sends it (the session's CSRF token in the `csrf` field unless told otherwise). */
function post(s: TestServer, c: Client, url: string, fields: Record<string, string>, opts: { csrf?: string | null } = {}): Promise<Response> {
  const body = new URLSearchParams(fields);
  const csrf = opts.csrf === undefined ? c.csrf : opts.csrf;
  if (csrf !== null && csrf !== undefined) body.set('csrf', csrf);
  return fetch(s.url + url, {
    method: 'POST',
    headers: { accept: 'text/html', cookie: cookieOf(c), 'content-type': 'application/x-www-form-urlencoded' },
    body: body.toString(),
    redirect: 'manual',
  });
}

/* -------------------------------------------------------------- plain HTTP */

describe.each(testEngines())('web app writing over HTTP (%s)', (engine) => {
  let s: TestServer;
  let owner: Human;
  let viewer: Human;

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = await signup(s.url, 'Olga');
    await write(owner.client, 'handbook/guide/runbook.md', RUNBOOK);
    const inv = await owner.client.post('/api/v1/invites', { role: 'viewer' });
    expect(inv.status, inv.text).toBe(201);
    viewer = await signup(s.url, 'Victor', inv.body.token);
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('an owner is offered New page, Edit and the actions; a viewer only proposing (an edit, archiving), and the actions and new-page addresses refuse them', async () => {
    const ownPage = await (await browse(s, owner.client, '/app/p/handbook/guide/runbook.md')).text();
    expect(ownPage).toContain('href="/app/e/handbook/guide/runbook.md"');
    expect(ownPage).toContain('<summary>Actions</summary>');
    expect(await (await browse(s, owner.client, '/app/s/handbook')).text()).toContain('href="/app/new?space=handbook"');
    expect(await (await browse(s, owner.client, '/app')).text()).toContain('href="/app/new"');

    const page = await browse(s, viewer.client, '/app/p/handbook/guide/runbook.md');
    expect(page.status).toBe(200);
    const text = await page.text();
    // A viewer may propose (ROLE_ACTIONS): the editor proposes, and archiving is one form that the core makes a proposal.
    expect(text).toContain('<a class="button" href="/app/e/handbook/guide/runbook.md">Propose an edit</a>');
    expect(text).toContain('<summary>Propose archiving</summary>');
    expect(text).not.toContain('<summary>Actions</summary>');
    expect(text).not.toContain('value="move"');
    expect(text).not.toContain('value="delete"');
    const proposing = await browse(s, viewer.client, '/app/e/handbook/guide/runbook.md');
    expect(proposing.status).toBe(200);
    expect(await proposing.text()).toContain('value="propose">Propose</button>');
    expect(await (await browse(s, viewer.client, '/app/s/handbook')).text()).not.toContain('/app/new');
    expect(await (await browse(s, viewer.client, '/app')).text()).not.toContain('/app/new');
    for (const url of ['/app/a/handbook/guide/runbook.md', '/app/new?space=handbook']) {
      const res = await browse(s, viewer.client, url);
      expect(res.status, url).toBe(403);
      expect(await res.text(), url).toContain('<h1>Not allowed</h1>');
    }
  });

  it("a viewer's forged POSTs (with a valid token) are refused by the core; an archive becomes a proposal, as over REST", async () => {
    const info = (await owner.client.get(`/api/v1/nodes/${enc('handbook/guide/runbook.md')}`)).body;
    const edit = await post(s, viewer.client, '/app/e/handbook/guide/runbook.md', {
      id: info.id,
      base_sha: info.commit_sha,
      content: '# Runbook\n\nVandalised.\n',
      action: 'save',
    });
    expect(edit.status).toBe(403);
    expect(await edit.text()).toContain('No write grant');
    const created = await post(s, viewer.client, '/app/new', { space: 'handbook', path: 'forged.md', content: '# Forged\n', action: 'save' });
    expect(created.status).toBe(403);
    const del = await post(s, viewer.client, '/app/a/handbook/guide/runbook.md', { id: info.id, do: 'delete', confirm: 'yes' });
    expect(del.status).toBe(403);
    const move = await post(s, viewer.client, '/app/a/handbook/guide/runbook.md', { id: info.id, do: 'move', to: 'handbook/moved.md' });
    expect(move.status).toBe(403);
    expect((await content(owner.client, 'handbook/guide/runbook.md')).content).toBe(RUNBOOK);
    expect((await content(owner.client, 'handbook/forged.md')).status).toBe(404);
    // Archiving without write is proposed (spec §3): the page stays active, the proposal waits.
    const archive = await post(s, viewer.client, '/app/a/handbook/guide/runbook.md', { id: info.id, do: 'archive', reason: 'stale' });
    expect(archive.status).toBe(202);
    const html = await archive.text();
    const id = /href="\/app\/proposals\/([^"]+)"/.exec(html)?.[1];
    expect(id).toBeTruthy();
    expect((await content(owner.client, 'handbook/guide/runbook.md')).state).toBe('active');
    const pr = await owner.client.get(`/api/v1/proposals/${id}`);
    expect(pr.status, pr.text).toBe(200);
    expect(pr.body.kind).toBe('archive');
    expect(pr.body.status).toBe('open');
  });

  it('every form POST without the session token (or with another) is refused and changes nothing', async () => {
    const info = (await owner.client.get(`/api/v1/nodes/${enc('handbook/guide/runbook.md')}`)).body;
    const cases: [string, Record<string, string>][] = [
      ['/app/new', { space: 'handbook', path: 'nocsrf.md', content: '# No\n', action: 'save' }],
      ['/app/e/handbook/guide/runbook.md', { id: info.id, base_sha: info.commit_sha, content: '# Changed\n', action: 'save' }],
      ['/app/a/handbook/guide/runbook.md', { id: info.id, do: 'archive', reason: 'manual' }],
      ['/app/a/handbook/guide/runbook.md', { id: info.id, do: 'move', to: 'handbook/elsewhere.md' }],
      ['/app/stepup', { password: PASSWORD, next: '/app' }],
    ];
    for (const [url, fields] of cases) {
      for (const csrf of [null, 'not-the-token']) {
        const res = await post(s, owner.client, url, fields, { csrf });
        expect(res.status, `${url} csrf=${csrf}`).toBe(403);
        expect(await res.text()).toContain('Something went wrong');
      }
    }
    const after = await content(owner.client, 'handbook/guide/runbook.md');
    expect(after.content).toBe(RUNBOOK);
    expect(after.state).toBe('active');
    expect((await content(owner.client, 'handbook/nocsrf.md')).status).toBe(404);
    expect((await content(owner.client, 'handbook/elsewhere.md')).status).toBe(404);
    // Signed out: the form's POST leads to the sign-in page.
    const out = await fetch(`${s.url}/app/new`, {
      method: 'POST',
      headers: { accept: 'text/html', 'content-type': 'application/x-www-form-urlencoded' },
      body: 'space=handbook&path=x.md&content=%23+X',
      redirect: 'manual',
    });
    expect(out.status).toBe(303);
    expect(out.headers.get('location')).toMatch(/^\/login\?next=/);
  });

  it('a new page: preview saves nothing; a taken path, an invalid path and a too large page re-show the form with the text kept', async () => {
    const text = '# Fresh page\n\nWith <b>markup</b> & an [[Runbook]] link.\n';
    const preview = await post(s, owner.client, '/app/new', { space: 'handbook', path: 'fresh', content: text, action: 'preview' });
    expect(preview.status).toBe(200);
    const ph = await preview.text();
    expect(ph).toContain('id="preview-h"');
    expect(ph).toContain('&lt;b&gt;markup&lt;/b&gt;');
    expect(ph).not.toContain('<b>markup</b>');
    expect((await content(owner.client, 'handbook/fresh.md')).status).toBe(404);

    const taken = await post(s, owner.client, '/app/new', { space: 'handbook', path: 'guide/runbook.md', content: text, action: 'save' });
    expect(taken.status).toBe(409);
    const th = await taken.text();
    expect(th).toContain('role="alert"');
    expect(th).toContain('With &lt;b&gt;markup&lt;/b&gt; &amp; an [[Runbook]] link.');
    expect(th).toContain('value="guide/runbook.md"');

    const bad = await post(s, owner.client, '/app/new', { space: 'handbook', path: 'bad//name.md', content: text, action: 'save' });
    expect(bad.status).toBe(400);
    expect(await bad.text()).toContain('With &lt;b&gt;markup&lt;/b&gt;');

    const big = `# Big\n\n${'x'.repeat(1024 * 1024)}\n`;
    const large = await post(s, owner.client, '/app/new', { space: 'handbook', path: 'big.md', content: big, action: 'save' });
    expect(large.status).toBe(413);
    const lh = await large.text();
    expect(lh).toContain('larger than');
    expect(lh).toContain('x'.repeat(1000));
    expect((await content(owner.client, 'handbook/big.md')).status).toBe(404);

    // The file name's .md may be left out; CRLF from the textarea is stored as LF.
    const ok = await post(s, owner.client, '/app/new', { space: 'handbook', path: 'fresh', content: text.replace(/\n/g, '\r\n'), action: 'save' });
    expect(ok.status).toBe(303);
    expect(ok.headers.get('location')).toBe('/app/p/handbook/fresh.md?notice=created');
    expect((await content(owner.client, 'handbook/fresh.md')).content).toBe(text);
  });

  it('redaction: an editor who cannot see a block is offered no Edit, gets the redacted text, and the core refuses the save; a page above their level is 404', async () => {
    const SECRETIVE = '# Vault notes\n\nThe public part.\n\n::: secret\nThe safe code is 4711.\n:::\n';
    await write(owner.client, 'handbook/vault-notes.md', SECRETIVE);
    await write(owner.client, 'handbook/top.md', '---\nsensitivity: secret\n---\n# Top\n\nOwners only.\n');
    const inv = await owner.client.post('/api/v1/invites', { role: 'editor' });
    const editor = await signup(s.url, 'Edna', inv.body.token);
    const view = await (await browse(s, editor.client, '/app/p/handbook/vault-notes.md')).text();
    expect(view).toContain('partly redacted');
    expect(view).not.toContain('/app/e/handbook/vault-notes.md');
    const form = await browse(s, editor.client, '/app/e/handbook/vault-notes.md');
    expect(form.status).toBe(200);
    const fh = await form.text();
    expect(fh).toContain('You cannot overwrite what you cannot see');
    expect(fh).toContain('[redacted]');
    expect(fh).not.toContain('4711');
    const base = /name="base_sha" value="([0-9a-f]+)"/.exec(fh)![1]!;
    const id = /name="id" value="([^"]+)"/.exec(fh)![1]!;
    const save = await post(s, editor.client, '/app/e/handbook/vault-notes.md', {
      id,
      base_sha: base,
      content: '# Vault notes\n\nThe public part, edited.\n\n::: secret\n[redacted]\n:::\n',
      action: 'save',
    });
    expect(save.status).toBe(403);
    const sh = await save.text();
    expect(sh).toContain('cannot overwrite what you cannot see');
    expect(sh).toContain('The public part, edited.');
    expect((await content(owner.client, 'handbook/vault-notes.md')).content).toBe(SECRETIVE);
    for (const url of ['/app/e/handbook/top.md', '/app/a/handbook/top.md']) {
      const res = await browse(s, editor.client, url);
      expect(res.status, url).toBe(404);
      expect(await res.text(), url).not.toContain('Owners only');
    }
  });

  it('with TOTP on, the step-up form asks for the code (not the password), then the delete goes through', async () => {
    const tess = await signup(s.url, 'Tess');
    const c = tess.client;
    // A second session, signed in before TOTP is turned on (so it has no step-up of its own).
    const fresh = new Client(s.url);
    expect((await fresh.post('/api/auth/login', { email: tess.email, password: PASSWORD })).body.status).toBe('ok');
    expect((await c.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
    const secret: string = (await c.post('/api/auth/totp/enroll', {})).body.secret;
    expect((await c.post('/api/auth/totp/enroll', { code: currentTotp(secret) })).status).toBe(200);
    const id = await write(c, 'notes/gone.md', '# Gone\n\nSoon.\n');
    const del = await post(s, fresh, '/app/a/notes/gone.md', { id, do: 'delete', confirm: 'yes' });
    expect(del.status).toBe(303);
    expect(del.headers.get('location')).toBe(`/app/stepup?next=${enc('/app/a/notes/gone.md?confirm=delete')}`);
    const form = await (await browse(s, fresh, del.headers.get('location')!)).text();
    expect(form).toMatch(/name="code"[^>]*autocomplete="one-time-code"/);
    expect(form).not.toContain('type="password"');
    const pw = await post(s, fresh, '/app/stepup', { password: PASSWORD, next: '/app/a/notes/gone.md?confirm=delete' });
    expect(pw.status).toBe(400);
    expect(await pw.text()).toContain('TOTP is enrolled');
    const later = currentTotp(secret, Date.now() + 30_000);
    const ok = await post(s, fresh, '/app/stepup', { code: later.replace(/(\d{3})/, '$1 '), next: '/app/a/notes/gone.md?confirm=delete' });
    expect(ok.status, await ok.clone().text()).toBe(303);
    expect(ok.headers.get('location')).toBe('/app/a/notes/gone.md?confirm=delete');
    const again = await post(s, fresh, '/app/a/notes/gone.md', { id, do: 'delete', confirm: 'yes' });
    expect(again.status).toBe(200);
    expect(await again.text()).toContain('Page deleted');
    expect((await content(c, 'notes/gone.md')).status).toBe(404);
  });

  it('the step-up form goes back only inside the app, and says what is wrong', async () => {
    const c = (await signup(s.url, 'Sam')).client;
    const form = await (await browse(s, c, `/app/stepup?next=${enc('//evil.example/x')}`)).text();
    expect(form).toContain('name="next" value="/app"');
    expect(form).toContain('type="password"');
    const wrong = await post(s, c, '/app/stepup', { password: 'not it', next: '/app/s/x' });
    expect(wrong.status).toBe(403);
    expect(await wrong.text()).toContain('The password is wrong');
    const away = await post(s, c, '/app/stepup', { password: PASSWORD, next: 'https://evil.example/' });
    expect(away.status).toBe(303);
    expect(away.headers.get('location')).toBe('/app');
    const back = await post(s, c, '/app/stepup', { password: PASSWORD, next: '/app/a/handbook/x.md?confirm=delete' });
    expect(back.status).toBe(303);
    expect(back.headers.get('location')).toBe('/app/a/handbook/x.md?confirm=delete');
  });
});

/* ----------------------------------------------------------------- browser */

const haveChromium = chromiumPresent('the web app (writing)');
const shot = screenshot;

describe.skipIf(!haveChromium)('web app writing in a real browser (chromium, sqlite)', BROWSER_SUITE, () => {
  let s: TestServer;
  let browser: Browser;
  let owner: Human;
  let viewer: Human;

  beforeAll(async () => {
    s = await startTestServer('sqlite');
    owner = await signup(s.url, 'Olga');
    await write(owner.client, 'handbook/index.md', '# Handbook\n\nHow this team works.\n');
    await write(owner.client, 'handbook/guide/deploy-notes.md', '# Deploy Notes\n\nDeploys go out every Tuesday.\n');
    const inv = await owner.client.post('/api/v1/invites', { role: 'viewer' });
    viewer = await signup(s.url, 'Victor', inv.body.token);
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  const newPage = (viewport?: { width: number; height: number }) => openPage(browser, s.url, viewport);

  async function signIn(page: Page, email: string): Promise<void> {
    await page.goto('/login?next=%2Fapp');
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL((u) => u.pathname === '/app');
  }

  const source = (page: Page) => page.locator('#content');

  it('creates a page in the browser: preview first (nothing saved), then create; edit, preview, save', async () => {
    const { context, page, dialogs } = await newPage();
    await signIn(page, owner.email);
    await page.goto('/app/s/handbook');
    await page.getByRole('link', { name: 'New page' }).click();
    await page.waitForURL('**/app/new?space=handbook');
    expect(await page.getByLabel('Space', { exact: true }).inputValue()).toBe('handbook');
    expect(await source(page).inputValue()).toMatch(/^# Title/);
    await page.getByLabel('Path inside the Space').fill('guide/runbook');
    await source(page).fill(RUNBOOK);
    await page.getByRole('button', { name: 'Preview' }).click();
    const preview = page.getByRole('region', { name: 'Preview (not saved)' });
    await expect.poll(() => preview.count()).toBe(1);
    expect(await preview.locator('.md').textContent()).toContain('Step two: page the on-call.');
    expect(await source(page).inputValue()).toBe(RUNBOOK);
    expect((await content(owner.client, 'handbook/guide/runbook.md')).status).toBe(404);
    await shot(page, 'app-new-page');
    await page.getByRole('button', { name: 'Create page' }).click();
    await page.waitForURL('**/app/p/handbook/guide/runbook.md?notice=created');
    expect(await page.getByRole('status').first().textContent()).toBe('Page created.');
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Runbook');
    expect((await content(owner.client, 'handbook/guide/runbook.md')).content).toBe(RUNBOOK);

    await page.getByRole('link', { name: 'Edit', exact: true }).click();
    await page.waitForURL('**/app/e/handbook/guide/runbook.md');
    expect(await source(page).inputValue()).toBe(RUNBOOK);
    const edited = RUNBOOK.replace('Step three: write the incident note.', 'Step three: write the incident note within a day.');
    await source(page).fill(edited);
    await page.getByRole('button', { name: 'Preview' }).click();
    await expect.poll(async () => page.locator('.preview .md').textContent()).toContain('within a day');
    expect((await content(owner.client, 'handbook/guide/runbook.md')).content).toBe(RUNBOOK);
    await shot(page, 'app-edit-preview');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.waitForURL('**/app/p/handbook/guide/runbook.md?notice=saved');
    expect(await page.locator('article .md').textContent()).toContain('write the incident note within a day.');
    expect((await content(owner.client, 'handbook/guide/runbook.md')).content).toBe(edited);
    expect(dialogs).toEqual([]);
    await context.close();
  });

  it('an edit while someone changed the page meanwhile: a change elsewhere merges (notice, both changes); a clash shows the proposal and the current text', async () => {
    const p = 'handbook/guide/merge-case.md';
    await write(owner.client, p, RUNBOOK);
    const { context, page } = await newPage();
    await signIn(page, owner.email);

    // Not clashing: REST changes step one while the browser edits step three.
    await page.goto(`/app/e/${p}`);
    const restOne = RUNBOOK.replace('Step one: check the dashboards.', 'Step one: check the dashboards and the alerts.');
    expect((await owner.client.put(`/api/v1/nodes/${enc(p)}`, { content: restOne })).status).toBe(200);
    await source(page).fill(RUNBOOK.replace('Step three: write the incident note.', 'Step three: write the note in the tracker.'));
    await page.getByRole('button', { name: 'Save' }).click();
    await page.waitForURL(`**/app/p/${p}?notice=merged`);
    expect(await page.getByRole('status').first().textContent()).toContain('merged with changes made meanwhile');
    const md = (await page.locator('article .md').textContent()) ?? '';
    expect(md).toContain('check the dashboards and the alerts');
    expect(md).toContain('write the note in the tracker');
    const merged = (await content(owner.client, p)).content!;
    expect(merged).toContain('and the alerts');
    expect(merged).toContain('in the tracker');

    // Clashing: both change step two.
    await page.goto(`/app/e/${p}`);
    const theirs = merged.replace('Step two: page the on-call.', 'Step two: page the on-call lead.');
    expect((await owner.client.put(`/api/v1/nodes/${enc(p)}`, { content: theirs })).status).toBe(200);
    await source(page).fill(merged.replace('Step two: page the on-call.', 'Step two: call the duty manager.'));
    const [res] = await Promise.all([page.waitForResponse((r) => r.request().method() === 'POST'), page.getByRole('button', { name: 'Save' }).click()]);
    expect(res.status()).toBe(409);
    await page.waitForLoadState();
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Your edit clashes with a change made meanwhile');
    const link = page.getByRole('alert').getByRole('link', { name: /^proposal / });
    const href = await link.getAttribute('href');
    expect(href).toMatch(/^\/app\/proposals\/[\w-]+$/);
    expect(
      await page
        .getByRole('region', { name: /The page now/ })
        .locator('pre')
        .textContent(),
    ).toContain('page the on-call lead.');
    expect(await page.getByRole('region', { name: 'Your version' }).locator('pre').textContent()).toContain('call the duty manager.');
    expect((await content(owner.client, p)).content).toBe(theirs);
    const pr = await owner.client.get(`/api/v1/proposals/${href!.split('/').pop()}`);
    expect(pr.status, pr.text).toBe(200);
    expect(pr.body.origin).toBe('conflict');
    expect(pr.body.status).toBe('open');
    await shot(page, 'app-edit-conflict');
    expect(await seriousViolations(page)).toEqual([]);
    await context.close();
  });

  it('moves, archives and restores a page from its Actions; deleting asks for the step-up, then the person confirms again', async () => {
    await write(owner.client, 'handbook/old/note.md', '# Note\n\nA note to move about.\n');
    const { context, page } = await newPage();
    await signIn(page, owner.email);
    await page.goto('/app/p/handbook/old/note.md');
    await page.getByText('Actions', { exact: true }).click();
    await shot(page, 'app-page-actions');
    await page.getByLabel('New path').fill('handbook/new/note.md');
    await page.getByRole('button', { name: 'Move page' }).click();
    await page.waitForURL('**/app/p/handbook/new/note.md?notice=moved');
    expect((await content(owner.client, 'handbook/old/note.md')).status).toBe(404);
    expect((await content(owner.client, 'handbook/new/note.md')).status).toBe(200);

    await page.getByText('Actions', { exact: true }).click();
    await page.getByLabel('Reason').selectOption('stale');
    await page.getByRole('button', { name: 'Archive page' }).click();
    await page.waitForURL('**/app/p/handbook/new/note.md?notice=archived');
    expect(await page.locator('.page-head .badge-state').textContent()).toBe('archived');
    let now = await content(owner.client, 'handbook/new/note.md');
    expect(now.state).toBe('archived');
    expect(now.archived_reason).toBe('stale');

    await page.getByText('Actions', { exact: true }).click();
    await page.getByRole('button', { name: 'Restore page' }).click();
    await page.waitForURL('**/app/p/handbook/new/note.md?notice=restored');
    expect((await content(owner.client, 'handbook/new/note.md')).state).toBe('active');

    await page.getByText('Actions', { exact: true }).click();
    await page.getByLabel('Yes, delete this page').check();
    await page.getByRole('button', { name: 'Delete page' }).click();
    await page.waitForURL('**/app/stepup?next=*');
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Confirm it is you');
    await shot(page, 'app-stepup');
    expect(await seriousViolations(page)).toEqual([]);
    await page.getByLabel('Your password').fill('not the password');
    await page.getByRole('button', { name: 'Confirm' }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toContain('The password is wrong');
    expect((await content(owner.client, 'handbook/new/note.md')).status).toBe(200);
    await page.getByLabel('Your password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.waitForURL('**/app/a/handbook/new/note.md?confirm=delete');
    expect(await page.getByRole('status').textContent()).toContain('delete the page again');
    expect((await content(owner.client, 'handbook/new/note.md')).status).toBe(200);
    await page.getByLabel('Yes, delete this page').check();
    await page.getByRole('button', { name: 'Delete page' }).click();
    await expect.poll(() => page.getByRole('heading', { level: 1 }).textContent()).toBe('Page deleted');
    now = await content(owner.client, 'handbook/new/note.md');
    expect(now.status).toBe(404);
    await context.close();
  });

  it('a move where more agents can read needs the step-up too; the new path is kept for the confirmation', async () => {
    const agent = await owner.client.post('/api/v1/principals', { name: 'pub-reader', grants: [{ action: 'read', scope: 'pub', ceiling: 'internal' }] });
    expect(agent.status, agent.text).toBe(201);
    await write(owner.client, 'handbook/private-note.md', '# Private note\n\nFor the team.\n');
    const { context, page } = await newPage();
    await signIn(page, owner.email);
    await page.goto('/app/a/handbook/private-note.md');
    await page.getByLabel('New path').fill('pub/private-note.md');
    await page.getByRole('button', { name: 'Move page' }).click();
    await page.waitForURL('**/app/stepup?next=*');
    expect((await content(owner.client, 'handbook/private-note.md')).status).toBe(200);
    await page.getByLabel('Your password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.waitForURL('**/app/a/handbook/private-note.md?confirm=move&to=*');
    expect(await page.getByLabel('New path').inputValue()).toBe('pub/private-note.md');
    await page.getByRole('button', { name: 'Move page' }).click();
    await page.waitForURL('**/app/p/pub/private-note.md?notice=moved');
    expect((await content(owner.client, 'pub/private-note.md')).status).toBe(200);
    await context.close();
  });

  it('a viewer sees no edit controls; the editor address is the proposing form', async () => {
    const { context, page } = await newPage();
    await signIn(page, viewer.email);
    expect(await page.getByRole('link', { name: 'New page' }).count()).toBe(0);
    await page.goto('/app/s/handbook');
    expect(await page.getByRole('link', { name: 'New page' }).count()).toBe(0);
    await page.goto('/app/p/handbook/guide/deploy-notes.md');
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Deploy Notes');
    expect(await page.getByRole('link', { name: 'Edit', exact: true }).count()).toBe(0);
    expect(await page.getByText('Actions', { exact: true }).count()).toBe(0);
    await page.getByRole('link', { name: 'Propose an edit' }).click();
    await page.waitForURL('**/app/e/handbook/guide/deploy-notes.md');
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Propose an edit: Deploy Notes');
    expect(await page.getByRole('button', { name: 'Save', exact: true }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Propose', exact: true }).count()).toBe(1);
    await context.close();
  });

  it('the new page and editor work at phone width', async () => {
    const { context, page } = await newPage({ width: 390, height: 844 });
    await signIn(page, owner.email);
    for (const url of [
      '/app/new?space=handbook',
      '/app/e/handbook/guide/deploy-notes.md',
      '/app/a/handbook/guide/deploy-notes.md',
      '/app/stepup?next=%2Fapp',
    ]) {
      await page.goto(url);
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      expect(overflow, url).toBeLessThanOrEqual(0);
    }
    await page.goto('/app/e/handbook/guide/deploy-notes.md');
    await shot(page, 'app-edit-phone');
    // Keyboard: the editor's fields and buttons are reached with Tab, in order, each visibly focused.
    await source(page).focus();
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('message');
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Save');
    expect(await page.evaluate(() => getComputedStyle(document.activeElement!).outlineStyle)).toBe('solid');
    await context.close();
  });

  it('axe-core finds no serious or critical violation on the main screens', async () => {
    await write(
      owner.client,
      'handbook/guide/start.md',
      '---\ntags: [onboarding]\n---\n# Getting started\n\nRead the [[Deploy Notes]].\n\n```sh\nnpm ci\n```\n',
    );
    const { context, page } = await newPage();
    await page.goto('/login');
    const found: Record<string, string[]> = {};
    found['/login'] = await seriousViolations(page);
    await signIn(page, owner.email);
    const screens = [
      '/app',
      '/app/s/handbook',
      '/app/p/handbook/guide/start.md',
      '/app/search?q=deploy',
      '/app/new?space=handbook',
      '/app/e/handbook/guide/start.md',
      '/app/a/handbook/guide/start.md',
      '/app/stepup?next=%2Fapp',
      '/app/nothing/here',
    ];
    for (const url of screens) {
      await page.goto(url);
      found[url] = await seriousViolations(page);
    }
    // The page view with its Actions open, and an editor showing a preview.
    await page.goto('/app/p/handbook/guide/start.md');
    await page.getByText('Actions', { exact: true }).click();
    found['page view, actions open'] = await seriousViolations(page);
    await page.goto('/app/e/handbook/guide/start.md');
    await page.getByRole('button', { name: 'Preview' }).click();
    await page.locator('.preview').waitFor();
    found['editor with preview'] = await seriousViolations(page);
    expect(Object.fromEntries(Object.entries(found).filter(([, v]) => v.length > 0))).toEqual({});
    // The check can fail: a field without a label is reported.
    await page.evaluate(() => document.querySelector('main')!.insertAdjacentHTML('beforeend', '<input type="text" name="unlabelled">'));
    expect((await seriousViolations(page)).join('\n')).toMatch(/critical label:/);
    await context.close();
  });
});
