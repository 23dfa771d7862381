import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seriousViolations } from '../support/axe.js';
import { signedInPage, webPerson, type WebPerson, browse, submit } from '../support/web.js';
import { chromiumPresent, launchChromium, screenshot, BROWSER_SUITE } from '../support/browser.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, startTestServer, type TestServer } from '../support/server.js';

/**
 * The web app's review and history screens (issue 17, src/web/app/review.ts, history.ts,
 * diff.ts): an agent with propose but not write proposes over REST; the owner reviews it in
 * the browser (the "Review (n)" count, the diff inline and side by side, accept) and the page,
 * its history and the agent's view of the outcome follow; rejections carry their reason; a
 * viewer sees no decide buttons and a forged POST is refused; history compares two versions;
 * a confidential page's history does not exist for a viewer.
 */

type Person = WebPerson;
const person = webPerson;

async function write(c: Client, pagePath: string, content: string): Promise<{ id: string; commit_sha: string }> {
  const res = await c.post('/api/v1/nodes', { path: pagePath, content, message: `add ${pagePath}` });
  expect(res.status, res.text).toBe(201);
  return res.body;
}

async function update(c: Client, id: string, content: string, message: string): Promise<string> {
  const res = await c.put(`/api/v1/nodes/${id}`, { content, message });
  expect(res.status, res.text).toBe(200);
  return res.body.commit_sha;
}

const NOTES = `# Team notes

Standup is at nine.
Retro is on Fridays.
Deploys need two reviews.
`;

const NOTES_PROPOSED = `# Team notes

Standup is at half past nine.
Retro is on Fridays.
Deploys need two reviews.
Pairing on Wednesdays.
`;

/** An owner, a viewer in the owner's workspace, and an agent that may read and propose but not write. */
async function setup(s: TestServer) {
  const owner = await person(s.url, 'Olga');
  const inv = await owner.client.post('/api/v1/invites', { role: 'viewer' });
  expect(inv.status, inv.text).toBe(201);
  const viewer = await person(s.url, 'Victor', inv.body.token);
  const agent = await createAgentWithKey(owner.client, [{ action: 'read' }, { action: 'search' }, { action: 'propose' }], { name: 'scribe-bot' });
  return { owner, viewer, agent };
}

async function propose(agent: Client, body: Record<string, unknown>): Promise<string> {
  const res = await agent.post('/api/v1/proposals', body);
  expect(res.status, res.text).toBe(201);
  return res.body.id;
}

/* -------------------------------------------------------------- plain HTTP */

describe.each(testEngines())('review and history over HTTP (%s)', (engine) => {
  let s: TestServer;
  let owner: Person;
  let viewer: Person;
  let agent: Client;

  beforeAll(async () => {
    s = await startTestServer(engine);
    const w = await setup(s);
    ({ owner, viewer } = w);
    agent = w.agent.client;
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('a viewer sees the proposal without decide buttons; their forged POST and a POST without the form token are refused', async () => {
    await write(owner.client, 'team/viewer-case.md', NOTES);
    const id = await propose(agent, { path: 'team/viewer-case.md', content: NOTES_PROPOSED, reason: 'Standup moved' });
    const seen = await browse(s, viewer.client, `/app/proposals/${id}`);
    expect(seen.status).toBe(200);
    expect(seen.text).toContain('Standup moved');
    expect(seen.text).not.toContain('/accept"');
    expect(seen.text).not.toContain('>Reject<');
    expect(seen.text).toContain('Waiting for an editor or owner to decide.');
    // The viewer's navigation has no review count; the owner's does.
    expect(seen.text).not.toContain('href="/app/proposals"><');
    expect((await browse(s, owner.client, '/app')).text).toMatch(/Review <span class="count count-some">\(\d+\)<\/span>/);

    const forged = await submit(s, viewer.client, `/app/proposals/${id}/accept`, { csrf: viewer.client.csrf! });
    expect(forged.status).toBe(403);
    expect(forged.text).toContain('Only an editor or owner');
    const forgedReject = await submit(s, viewer.client, `/app/proposals/${id}/reject`, { csrf: viewer.client.csrf!, reason: 'no' });
    expect(forgedReject.status).toBe(403);
    // The owner's own session, but the form token missing or wrong: refused before the core.
    expect((await submit(s, owner.client, `/app/proposals/${id}/accept`, {})).status).toBe(403);
    expect((await submit(s, owner.client, `/app/proposals/${id}/accept`, { csrf: 'not-the-token' })).status).toBe(403);
    const still = await owner.client.get(`/api/v1/proposals/${id}`);
    expect(still.body.status).toBe('open');
    expect((await owner.client.get(`/api/v1/nodes/${encodeURIComponent('team/viewer-case.md')}`)).body.content).toBe(NOTES);
  });

  it('a rejection needs a reason; the agent sees status rejected and the reason over REST', async () => {
    await write(owner.client, 'team/reject-case.md', NOTES);
    const id = await propose(agent, { path: 'team/reject-case.md', content: NOTES_PROPOSED });
    const empty = await submit(s, owner.client, `/app/proposals/${id}/reject`, { csrf: owner.client.csrf!, reason: '  ' });
    expect(empty.status).toBe(400);
    expect(empty.text).toContain('Give a reason for rejecting');
    const ok = await submit(s, owner.client, `/app/proposals/${id}/reject`, { csrf: owner.client.csrf!, reason: 'We keep standup at nine <b>sharp</b>' });
    expect(ok.status).toBe(303);
    expect(ok.location).toBe(`/app/proposals/${id}`);
    const mine = await agent.get(`/api/v1/proposals/${id}`);
    expect(mine.status).toBe(200);
    expect(mine.body.status).toBe('rejected');
    expect(mine.body.decision_reason).toBe('We keep standup at nine <b>sharp</b>');
    const page = await browse(s, owner.client, `/app/proposals/${id}`);
    expect(page.text).toContain('Rejected by');
    expect(page.text).toContain('We keep standup at nine &lt;b&gt;sharp&lt;/b&gt;');
    // Deciding twice: the core's answer, on the proposal's page.
    const again = await submit(s, owner.client, `/app/proposals/${id}/accept`, { csrf: owner.client.csrf! });
    expect(again.status).toBe(409);
    expect(again.text).toContain('The proposal is rejected');
  });

  it('a stale proposal whose change clashes shows the core conflict and stays open; accepting with edits applies them', async () => {
    const page = await write(owner.client, 'team/stale-case.md', NOTES);
    const id = await propose(agent, { path: 'team/stale-case.md', content: NOTES_PROPOSED });
    await update(owner.client, page.id, NOTES.replace('at nine', 'at ten'), 'standup later');
    const view = await browse(s, owner.client, `/app/proposals/${id}`);
    expect(view.text).toContain('The page has changed since the version this proposal was based on');
    const clash = await submit(s, owner.client, `/app/proposals/${id}/accept`, { csrf: owner.client.csrf! });
    expect(clash.status).toBe(409);
    expect(clash.text).toContain('the changes clash');
    expect(clash.text).toMatch(/<details class="edit-accept" open>/);
    expect((await owner.client.get(`/api/v1/proposals/${id}`)).body.status).toBe('open');
    const resolved = NOTES_PROPOSED.replace('at half past nine', 'at ten thirty');
    const ok = await submit(s, owner.client, `/app/proposals/${id}/accept`, { csrf: owner.client.csrf!, content: resolved.replace(/\n/g, '\r\n') });
    expect(ok.status).toBe(303);
    expect((await owner.client.get(`/api/v1/nodes/${encodeURIComponent('team/stale-case.md')}`)).body.content).toBe(resolved);
    const done = await browse(s, owner.client, `/app/proposals/${id}`);
    expect(done.text).toContain('Accepted by');
  });

  it('history lists the versions; comparing two shows the right added and removed lines, inline and side by side', async () => {
    const v1 = await write(owner.client, 'team/history-case.md', 'alpha\nbravo\ncharlie\n');
    const v2 = await update(owner.client, v1.id, 'alpha\nBRAVO\ncharlie\ndelta\n', 'second');
    const v3 = await update(owner.client, v1.id, 'alpha\nBRAVO\ncharlie\ndelta\necho\n', 'third');
    const h = await browse(s, owner.client, '/app/h/team/history-case.md');
    expect(h.status).toBe(200);
    for (const sha of [v1.commit_sha, v2, v3]) expect(h.text).toContain(`value="${sha}"`);
    expect(h.text).toContain('second');
    expect(h.text).toContain('Olga');
    const d = await browse(s, owner.client, `/app/diff/team/history-case.md?from=${v1.commit_sha}&to=${v2}`);
    expect(d.status).toBe(200);
    const ins = [...d.text.matchAll(/<ins><span class="visually-hidden">added: <\/span>([^<]*)<\/ins>/g)].map((m) => m[1]);
    const del = [...d.text.matchAll(/<del><span class="visually-hidden">removed: <\/span>([^<]*)<\/del>/g)].map((m) => m[1]);
    expect(ins).toEqual(['BRAVO', 'delta']);
    expect(del).toEqual(['bravo']);
    expect(d.text).toContain('+2 added');
    expect(d.text).not.toContain('echo');
    const split = await browse(s, owner.client, `/app/diff/team/history-case.md?from=${v1.commit_sha}&to=${v2}&view=split`);
    expect(split.text).toContain('class="diff diff-split"');
    expect([...split.text.matchAll(/<ins>/g)].length).toBe(2);
    // Reversed, the same lines change sides.
    const back = await browse(s, owner.client, `/app/diff/team/history-case.md?from=${v2}&to=${v1.commit_sha}`);
    expect([...back.text.matchAll(/<del><span class="visually-hidden">removed: <\/span>([^<]*)<\/del>/g)].map((m) => m[1])).toEqual(['BRAVO', 'delta']);
    // Long unchanged runs collapse to three lines of context around the change.
    const long = Array.from({ length: 20 }, (_, i) => `line ${i + 1}`);
    const l1 = await write(owner.client, 'team/long-case.md', long.join('\n') + '\n');
    const l2 = await update(owner.client, l1.id, long.map((l, i) => (i === 9 ? 'line ten, rewritten' : l)).join('\n') + '\n', 'one line');
    const ld = await browse(s, owner.client, `/app/diff/team/long-case.md?from=${l1.commit_sha}&to=${l2}`);
    expect([...ld.text.matchAll(/⋯ (\d+) unchanged lines/g)].map((m) => m[1])).toEqual(['6', '7']);
    expect(ld.text).toContain('>line 7<');
    expect(ld.text).not.toContain('>line 6<');
    expect(ld.text).toContain('>line 13<');
    expect(ld.text).not.toContain('>line 14<');
    // No versions chosen: a page asking for them, not an error.
    expect((await browse(s, owner.client, '/app/diff/team/history-case.md')).status).toBe(400);
  });

  it("a confidential page's history and diff are 404 to a viewer; a secret block is [redacted] in a diff for them", async () => {
    const conf = await write(owner.client, 'team/plans.md', '---\nsensitivity: confidential\n---\n# Plans\n\nBuy the competitor.\n');
    const c2 = await update(owner.client, conf.id, '---\nsensitivity: confidential\n---\n# Plans\n\nBuy the competitor soon.\n', 'soon');
    for (const url of ['/app/h/team/plans.md', `/app/diff/team/plans.md?from=${conf.commit_sha}&to=${c2}`]) {
      const r = await browse(s, viewer.client, url);
      expect(r.status, url).toBe(404);
      expect(r.text).not.toContain('competitor');
      expect(r.text).not.toContain('soon');
    }
    expect((await browse(s, owner.client, '/app/h/team/plans.md')).status).toBe(200);

    const open = await write(owner.client, 'team/mixed.md', '# Mixed\n\nPublic line.\n\n::: secret\nThe vault code is 7-7-7.\n:::\n');
    const o2 = await update(owner.client, open.id, '# Mixed\n\nPublic line, edited.\n\n::: secret\nThe vault code is 8-8-8.\n:::\n', 'edit');
    const vd = await browse(s, viewer.client, `/app/diff/team/mixed.md?from=${open.commit_sha}&to=${o2}`);
    expect(vd.status).toBe(200);
    expect(vd.text).toContain('Public line, edited.');
    expect(vd.text).not.toContain('7-7-7');
    expect(vd.text).not.toContain('8-8-8');
    expect(vd.text).toContain('shown as [redacted]');
    const od = await browse(s, owner.client, `/app/diff/team/mixed.md?from=${open.commit_sha}&to=${o2}`);
    expect(od.text).toContain('8-8-8');
  });
});

/* ----------------------------------------------------------------- browser */

const haveChromium = chromiumPresent('the web app review screens');
const shot = screenshot;

describe.skipIf(!haveChromium)('review and history in a real browser (chromium, sqlite)', BROWSER_SUITE, () => {
  let s: TestServer;
  let browser: Browser;
  let owner: Person;
  let agent: { id: string; client: Client };

  beforeAll(async () => {
    s = await startTestServer('sqlite');
    ({ owner, agent } = await setup(s));
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  const signedIn = (email: string, viewport?: { width: number; height: number }) => signedInPage(browser, s.url, email, viewport);

  async function outcomeA11y(page: Page, id: string, into: Record<string, string[]>): Promise<void> {
    await page.goto(`/app/proposals/${id}`);
    into.accepted = await seriousViolations(page);
  }

  it('the owner reviews the agent proposal: Review (1), the diff inline and side by side, accept; the page and its history follow', async () => {
    const created = await write(owner.client, 'team/notes.md', NOTES);
    const id = await propose(agent.client, { path: 'team/notes.md', content: NOTES_PROPOSED, reason: 'Standup moved; pairing added' });

    const { context, page, dialogs } = await signedIn(owner.email);
    const nav = page.getByRole('navigation', { name: 'Main' });
    const review = nav.getByRole('link', { name: /^Review/ });
    expect(await review.textContent()).toContain('Review (1)');
    await review.click();
    await page.waitForURL('**/app/proposals');
    const item = page.locator('.proposal-item');
    expect(await item.count()).toBe(1);
    expect(await item.textContent()).toContain('scribe-bot');
    expect(await item.textContent()).toContain('Standup moved; pairing added');
    expect(await item.textContent()).toMatch(/just now|min ago/);
    await shot(page, 'app-review-queue');
    const a11y: Record<string, string[]> = { queue: await seriousViolations(page) };

    await item.getByRole('link').click();
    await page.waitForURL(`**/app/proposals/${id}`);
    expect(await page.getByRole('heading', { level: 2, name: 'Changes against the current page' }).count()).toBe(1);
    const inline = page.locator('table.diff-inline');
    expect(await inline.locator('ins').allTextContents()).toEqual(['added: Standup is at half past nine.', 'added: Pairing on Wednesdays.']);
    expect(await inline.locator('del').allTextContents()).toEqual(['removed: Standup is at nine.']);
    expect(await inline.locator('tr.d-add td.sign').allTextContents()).toEqual(['+', '+']);
    await shot(page, 'app-review-proposal');
    a11y.proposal = await seriousViolations(page);

    await page.getByRole('navigation', { name: 'Diff view' }).getByRole('link', { name: 'Side by side' }).click();
    await page.waitForURL(`**/app/proposals/${id}?view=split`);
    const split = page.locator('table.diff-split');
    // The changed line sits on one row: removed on the left, added on the right.
    const row = split.locator('tr', { has: page.locator('del') });
    expect(await row.locator('del').textContent()).toBe('removed: Standup is at nine.');
    expect(await row.locator('ins').textContent()).toBe('added: Standup is at half past nine.');
    await shot(page, 'app-review-split');
    a11y.split = await seriousViolations(page);

    await page.getByRole('button', { name: 'Accept', exact: true }).click();
    await page.waitForURL(`**/app/proposals/${id}`);
    const outcome = page.getByRole('region', { name: 'Accepted' });
    expect(await outcome.textContent()).toMatch(/Applied as commit [0-9a-f]{10}, credited to the proposer/);
    expect(await page.getByRole('button', { name: 'Accept', exact: true }).count()).toBe(0);
    expect(await nav.getByRole('link', { name: /^Review/ }).textContent()).toContain('Review (0)');

    await outcome.getByRole('link', { name: 'Open the page' }).click();
    await page.waitForURL('**/app/p/team/notes.md');
    expect(await page.locator('article .md').textContent()).toContain('Pairing on Wednesdays.');
    await page.locator('.page-foot').getByRole('link', { name: 'History' }).click();
    await page.waitForURL('**/app/h/team/notes.md');
    const rows = page.locator('table.versions tbody tr');
    expect(await rows.count()).toBe(2);
    expect(await rows.nth(0).textContent()).toContain('scribe-bot');
    expect(await rows.nth(0).textContent()).toContain(`Accept proposal ${id}`);
    expect(await rows.nth(1).textContent()).toContain('Olga');
    await shot(page, 'app-history');
    a11y.history = await seriousViolations(page);

    // The compare form: defaults are the newest two; side by side is one choice away.
    await page.getByLabel('View').selectOption('split');
    await page.getByRole('button', { name: 'Compare' }).click();
    await page.waitForURL(
      (u) => u.pathname === '/app/diff/team/notes.md' && u.searchParams.get('from') === created.commit_sha && u.searchParams.get('view') === 'split',
    );
    expect(await page.locator('table.diff-split ins').allTextContents()).toEqual(['added: Standup is at half past nine.', 'added: Pairing on Wednesdays.']);
    await shot(page, 'app-diff');
    a11y.diff = await seriousViolations(page);
    await outcomeA11y(page, id, a11y);
    // axe-core: no serious or critical violation on any of these screens.
    expect(a11y).toEqual({ queue: [], proposal: [], split: [], history: [], diff: [], accepted: [] });
    expect(dialogs).toEqual([]);
    await context.close();

    // The agent sees the outcome over REST.
    const mine = await agent.client.get(`/api/v1/proposals/${id}`);
    expect(mine.body.status).toBe('accepted');
    expect(mine.body.result_commit).toMatch(/^[0-9a-f]{40}$/);
  });

  it('at phone width the proposal page fits, and the decide forms work from the keyboard', async () => {
    await write(owner.client, 'team/phone.md', NOTES);
    const id = await propose(agent.client, { path: 'team/phone.md', content: NOTES_PROPOSED, reason: 'phone' });
    const { context, page } = await signedIn(owner.email, { width: 390, height: 844 });
    await page.goto(`/app/proposals/${id}`);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await shot(page, 'app-review-phone');
    await page.getByLabel('Reason for rejecting').focus();
    await page.keyboard.type('Not now');
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Reject');
    await page.keyboard.press('Enter');
    await page.waitForURL(`**/app/proposals/${id}`);
    expect(await page.getByRole('region', { name: 'Rejected' }).textContent()).toContain('Not now');
    await context.close();
  });
});
