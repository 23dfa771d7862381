import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seriousViolations } from '../support/axe.js';
import { signedInPage, webPerson, type WebPerson, browse, submit } from '../support/web.js';
import { chromiumPresent, launchChromium, screenshot, BROWSER_SUITE } from '../support/browser.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, startTestServer, type TestServer } from '../support/server.js';

/**
 * Talking in the web app (issue 17, src/web/app/threads.ts, inbox.ts, assets/mentions.js,
 * assets/inbox.js): a page's discussion (messages, replies, kinds, @mentions), the loop
 * breaker's lock shown and lifted by an editor, the inbox with its unread count, Mark read and
 * Mark all read, and live updates: a mention appears in the other person's open inbox without
 * a reload. Plain HTTP checks run on every engine; the browser suite drives chromium.
 */

type Person = WebPerson;
const person = webPerson;

async function invite(owner: Client, base: string, name: string, role: 'editor' | 'viewer'): Promise<Person> {
  const inv = await owner.post('/api/v1/invites', { role });
  expect(inv.status, inv.text).toBe(201);
  return person(base, name, inv.body.token);
}

async function write(c: Client, pagePath: string, content: string): Promise<{ id: string }> {
  const res = await c.post('/api/v1/nodes', { path: pagePath, content, message: `add ${pagePath}` });
  expect(res.status, res.text).toBe(201);
  return res.body;
}

async function unread(c: Client): Promise<{ seq: number; kind: string; payload: Record<string, unknown> }[]> {
  const res = await c.get('/api/v1/inbox');
  expect(res.status, res.text).toBe(200);
  return res.body.events;
}

async function thread(c: Client, pageId: string) {
  const res = await c.get(`/api/v1/nodes/${pageId}/threads`);
  expect(res.status, res.text).toBe(200);
  return res.body as {
    locked: boolean;
    agent_hops: number;
    messages: { id: string; body: string; kind: string; author: { name: string }; reply_to: string | null; mentions: string[] }[];
  };
}

/** The navigation's unread count as the page shows it. */
const navCount = (page: string) => /Inbox <span class="count[^"]*" data-inbox-count="([^"]*)">/.exec(page)?.[1];

/** An owner, an editor and a viewer in the owner's workspace, and an agent that may read and talk. */
async function setup(s: TestServer, names = { owner: 'Alma', editor: 'Bruno', viewer: 'Vera' }) {
  const owner = await person(s.url, names.owner);
  const editor = await invite(owner.client, s.url, names.editor, 'editor');
  const viewer = await invite(owner.client, s.url, names.viewer, 'viewer');
  const agent = await createAgentWithKey(owner.client, [{ action: 'read' }, { action: 'collab' }], { name: 'relay-bot' });
  return { owner, editor, viewer, agent };
}

/* -------------------------------------------------------------- plain HTTP */

describe.each(testEngines())('discussion and inbox over HTTP (%s)', (engine) => {
  let s: TestServer;
  let w: Awaited<ReturnType<typeof setup>>;

  beforeAll(async () => {
    s = await startTestServer(engine);
    w = await setup(s);
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('a message with @name reaches the person mentioned; a reply reaches its author; the thread shows author, kind and nesting', async () => {
    const { owner, editor } = w;
    const page = await write(owner.client, 'team/plan.md', '# Plan\n\nShip it.\n');
    const view = await browse(s, owner.client, '/app/p/team/plan.md');
    expect(view.text).toContain('href="/app/t/team/plan.md"');

    const empty = await browse(s, owner.client, '/app/t/team/plan.md');
    expect(empty.status).toBe(200);
    expect(empty.text).toContain('No messages yet');
    expect(empty.text).toContain(`action="/app/threads/${page.id}/messages"`);

    const posted = await submit(s, owner.client, `/app/threads/${page.id}/messages`, {
      csrf: owner.client.csrf!,
      body: 'Can @Bruno check the <b>rollout</b>?\r\nThanks',
      kind: 'question',
    });
    expect(posted.status, posted.text).toBe(303);
    const first = (await thread(owner.client, page.id)).messages[0]!;
    expect(posted.location).toBe(`/app/t/team/plan.md#m-${first.id}`);
    expect(first.body).toBe('Can @Bruno check the <b>rollout</b>?\nThanks');
    expect(first.kind).toBe('question');
    expect(first.mentions).toEqual([editor.id]);
    const ev = (await unread(editor.client)).filter((e) => e.kind === 'mention');
    expect(ev).toHaveLength(1);
    expect(ev[0]!.payload.message_id).toBe(first.id);

    // The editor's navigation counts it; the inbox lists it with a link to the message.
    const inbox = await browse(s, editor.client, '/app/inbox');
    expect(inbox.status).toBe(200);
    expect(navCount(inbox.text)).toBe('1');
    expect(inbox.text).toContain('mentioned you in the discussion on');
    expect(inbox.text).toContain(`href="/app/t/${page.id}#m-${first.id}"`);
    expect(inbox.text).toContain('Can @Bruno check the &lt;b&gt;rollout&lt;/b&gt;?');

    // Reply (an answer): the question's author is told.
    const replied = await submit(s, editor.client, `/app/threads/${page.id}/messages`, {
      csrf: editor.client.csrf!,
      body: 'Checked, all good.',
      kind: 'answer',
      reply_to: first.id,
    });
    expect(replied.status, replied.text).toBe(303);
    const replies = (await unread(owner.client)).filter((e) => e.kind === 'reply');
    expect(replies).toHaveLength(1);
    expect(replies[0]!.payload.reply_to).toBe(first.id);

    const t = await browse(s, owner.client, `/app/t/${page.id}`);
    expect(t.status).toBe(200);
    expect(t.text).toContain('2 messages');
    expect(t.text).toMatch(/<span class="mention">@Bruno<\/span> check the &lt;b&gt;rollout&lt;\/b&gt;\?\nThanks/);
    expect(t.text).toMatch(/<ol class="replies" aria-label="Replies to Alma">[\s\S]*Checked, all good\.[\s\S]*<\/ol>/);
    expect(t.text).toContain('badge-kind-answer');
    expect(t.text).toContain('<span class="badge badge-new">new</span>');
    // Mark read: the new badge goes.
    const read = await submit(s, owner.client, `/app/threads/${page.id}/read`, { csrf: owner.client.csrf! });
    expect(read.status).toBe(303);
    expect(read.location).toBe('/app/t/team/plan.md?notice=read');
    expect((await browse(s, owner.client, '/app/t/team/plan.md')).text).not.toContain('badge-new');
  });

  it('a picked mention id goes with the form; an unknown one is refused with the text kept; CSRF missing or wrong is refused', async () => {
    const { owner, editor, viewer } = w;
    const page = await write(owner.client, 'team/ids.md', '# Ids\n');
    const ok = await submit(s, owner.client, `/app/threads/${page.id}/messages`, { csrf: owner.client.csrf!, body: 'fyi', mentions: [viewer.id, editor.id] });
    expect(ok.status, ok.text).toBe(303);
    expect((await thread(owner.client, page.id)).messages[0]!.mentions.sort()).toEqual([viewer.id, editor.id].sort());

    const bad = await submit(s, owner.client, `/app/threads/${page.id}/messages`, { csrf: owner.client.csrf!, body: 'keep this text', mentions: 'pr_nobody' });
    expect(bad.status).toBe(400);
    expect(bad.text).toContain('is not a principal id of this workspace');
    expect(bad.text).toContain('keep this text</textarea>');
    const blank = await submit(s, owner.client, `/app/threads/${page.id}/messages`, { csrf: owner.client.csrf!, body: '   ' });
    expect(blank.status).toBe(400);
    expect(blank.text).toContain('Write a message');

    for (const fields of [{ body: 'no token' }, { body: 'wrong token', csrf: 'nope' }] as Record<string, string>[]) {
      const r = await submit(s, owner.client, `/app/threads/${page.id}/messages`, fields);
      expect(r.status).toBe(403);
    }
    expect((await submit(s, editor.client, '/app/inbox/ack', { up_to: '1000' })).status).toBe(403);
    expect((await thread(owner.client, page.id)).messages).toHaveLength(1);
    expect((await unread(editor.client)).length).toBeGreaterThan(0);
  });

  it('four agent messages lock the thread: shown as locked, the editor unlocks it, a viewer posts but sees no Unlock', async () => {
    const { owner, editor, viewer, agent } = w;
    const page = await write(owner.client, 'team/bots.md', '# Bots\n');
    for (let i = 1; i <= 4; i++) {
      const r = await agent.client.post(`/api/v1/nodes/${page.id}/threads`, { body: `hop ${i}` });
      expect(r.status, r.text).toBe(201);
    }
    expect((await agent.client.post(`/api/v1/nodes/${page.id}/threads`, { body: 'hop 5' })).status).toBe(423);

    const asViewer = await browse(s, viewer.client, '/app/t/team/bots.md');
    expect(asViewer.status).toBe(200);
    expect(asViewer.text).toContain('Locked by the loop breaker');
    expect(asViewer.text).toContain('Only an editor or owner can unlock it.');
    expect(asViewer.text).not.toContain('/unlock"');
    // A viewer may post (every role holds collab), locked or not: people keep the conversation going.
    expect(asViewer.text).toContain(`action="/app/threads/${page.id}/messages"`);
    const vpost = await submit(s, viewer.client, `/app/threads/${page.id}/messages`, { csrf: viewer.client.csrf!, body: 'Bots, please stop.' });
    expect(vpost.status, vpost.text).toBe(303);
    // The viewer's forged unlock meets the core's refusal.
    const forged = await submit(s, viewer.client, `/app/threads/${page.id}/unlock`, { csrf: viewer.client.csrf! });
    expect(forged.status).toBe(403);
    expect(forged.text).toContain('Only an editor or owner may unlock a thread');
    expect((await thread(owner.client, page.id)).locked).toBe(true);

    // The editors and owners were told; the editor's page offers Unlock.
    expect((await unread(editor.client)).some((e) => e.kind === 'thread_locked' && e.payload.page_id === page.id)).toBe(true);
    const asEditor = await browse(s, editor.client, '/app/t/team/bots.md');
    expect(asEditor.text).toContain(`action="/app/threads/${page.id}/unlock"`);
    expect(asEditor.text).toContain('relay-bot <span class="badge badge-agent">agent</span>');
    const un = await submit(s, editor.client, `/app/threads/${page.id}/unlock`, { csrf: editor.client.csrf! });
    expect(un.status).toBe(303);
    expect(un.location).toBe('/app/t/team/bots.md?notice=unlocked');
    expect((await thread(owner.client, page.id)).locked).toBe(false);
    expect((await browse(s, editor.client, un.location!)).text).not.toContain('Locked by the loop breaker');
    expect((await agent.client.post(`/api/v1/nodes/${page.id}/threads`, { body: 'back again' })).status).toBe(201);
  });

  it("a confidential page's discussion does not exist for a viewer, nor its events; Mark read and Mark all read clear the count", async () => {
    const { owner, editor, viewer } = w;
    const conf = await write(owner.client, 'team/secret-plan.md', '---\nsensitivity: confidential\n---\n# Secret plan\n');
    const t = await browse(s, viewer.client, '/app/t/team/secret-plan.md');
    expect(t.status).toBe(404);
    expect(t.text).not.toContain('Secret plan');
    expect((await submit(s, viewer.client, `/app/threads/${conf.id}/messages`, { csrf: viewer.client.csrf!, body: 'hi' })).status).toBe(404);
    // A mention of the viewer there reaches nobody they could see.
    const m = await submit(s, owner.client, `/app/threads/${conf.id}/messages`, { csrf: owner.client.csrf!, body: '@Vera and @Bruno: the plan' });
    expect(m.status).toBe(303);
    expect((await browse(s, viewer.client, '/app/inbox')).text).not.toContain('secret-plan');
    expect((await browse(s, editor.client, '/app/inbox')).text).toContain('team/secret-plan.md');

    // The editor clears one event, then all of them.
    const before = await unread(editor.client);
    expect(before.length).toBeGreaterThan(1);
    const one = await submit(s, editor.client, '/app/inbox/ack', { csrf: editor.client.csrf!, seq: String(before[0]!.seq) });
    expect(one.status).toBe(303);
    expect(one.location).toBe('/app/inbox?notice=one');
    const after = await browse(s, editor.client, '/app/inbox');
    expect(navCount(after.text)).toBe(String(before.length - 1));
    const upTo = /name="up_to" value="(\d+)"/.exec(after.text)?.[1];
    expect(Number(upTo)).toBe(Math.max(...before.map((e) => e.seq)));
    const all = await submit(s, editor.client, '/app/inbox/ack', { csrf: editor.client.csrf!, up_to: upTo! });
    expect(all.location).toBe('/app/inbox?notice=all');
    const cleared = await browse(s, editor.client, '/app/inbox');
    expect(navCount(cleared.text)).toBe('0');
    expect(cleared.text).toContain('Nothing new.');
    expect(await unread(editor.client)).toEqual([]);
    const done = await browse(s, editor.client, '/app/inbox?show=done');
    expect(done.text).toContain('team/secret-plan.md');
    expect(done.text).not.toContain('/app/inbox/ack');
    // The list items inbox.js inserts: only what is unread after the seq.
    const items = await browse(s, owner.client, '/app/inbox/items?after=0');
    expect(items.status).toBe(200);
    expect(items.text.startsWith('<li class="event')).toBe(true);
    expect(items.text).not.toContain('<html');
    expect((await browse(s, owner.client, '/app/inbox/items?after=999999')).text).toBe('');
  });
});

/* ----------------------------------------------------------------- browser */

const haveChromium = chromiumPresent('the web app discussion and inbox');

describe.skipIf(!haveChromium)('discussion and inbox in a real browser (chromium, sqlite)', BROWSER_SUITE, () => {
  let s: TestServer;
  let browser: Browser;
  let w: Awaited<ReturnType<typeof setup>>;

  beforeAll(async () => {
    s = await startTestServer('sqlite');
    w = await setup(s, { owner: 'Alma', editor: 'Bruno', viewer: 'Vera' });
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  const signedIn = (email: string, viewport?: { width: number; height: number }) => signedInPage(browser, s.url, email, viewport);

  it('A mentions B through the autocomplete; B sees it arrive in the open inbox, follows it and replies; A sees the reply; Mark read clears the count', async () => {
    const { owner, editor } = w;
    const doc = await write(owner.client, 'team/launch.md', '# Launch\n\nWe launch on Monday.\n');
    const a11y: Record<string, string[]> = {};

    // B has the inbox open first.
    const b = await signedIn(editor.email);
    await b.page.goto('/app/inbox');
    const bNav = b.page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: /^Inbox/ });
    expect(await bNav.textContent()).toContain('Inbox (0)');
    await b.page.evaluate(() => ((window as unknown as { stayed: boolean }).stayed = true));

    // A opens the page, then its discussion, and mentions B by picking them from the list.
    const a = await signedIn(owner.email);
    await a.page.goto('/app/p/team/launch.md');
    await a.page.getByRole('link', { name: 'Open the discussion' }).click();
    await a.page.waitForURL('**/app/t/team/launch.md');
    const box = a.page.getByLabel('Message', { exact: true });
    await box.click();
    await box.pressSequentially('Is the launch ready, @');
    const list = a.page.getByRole('listbox', { name: 'People and agents to mention' });
    await list.waitFor();
    const names = await list.getByRole('option').allTextContents();
    expect(names).toContain('Bruno');
    expect(names.some((n) => n.startsWith('relay-bot'))).toBe(true);
    expect(names).not.toContain('Alma');
    await shot(a.page, 'app-thread-compose');
    await box.pressSequentially('Br');
    await expect.poll(() => list.getByRole('option').allTextContents()).toEqual(['Bruno']);
    expect(await list.getByRole('option', { name: 'Bruno' }).getAttribute('aria-selected')).toBe('true');
    expect(await box.getAttribute('aria-activedescendant')).toBe(await list.getByRole('option', { name: 'Bruno' }).getAttribute('id'));
    await a.page.keyboard.press('Enter');
    expect(await list.isHidden()).toBe(true);
    await box.pressSequentially('?');
    expect(await box.inputValue()).toBe('Is the launch ready, @Bruno ?');
    await a.page.getByLabel('Kind', { exact: true }).selectOption('question');
    await a.page.getByRole('button', { name: 'Post', exact: true }).click();
    await a.page.waitForURL(/\/app\/t\/team\/launch\.md#m-/);
    const msg = a.page.locator('article.msg').first();
    expect(await msg.locator('.msg-body').textContent()).toBe('Is the launch ready, @Bruno ?');
    expect(await msg.locator('.mention').textContent()).toBe('@Bruno');
    const posted = (await thread(owner.client, doc.id)).messages[0]!;
    expect(posted.mentions).toEqual([editor.id]);

    // B's inbox shows it without a reload, and the count follows.
    const item = b.page.locator('#inbox-unread li.event', { hasText: 'mentioned you' });
    await item.waitFor({ timeout: 15_000 });
    expect(await item.textContent()).toContain('Alma');
    expect(await item.textContent()).toContain('Is the launch ready, @Bruno ?');
    expect(await b.page.evaluate(() => (window as unknown as { stayed?: boolean }).stayed)).toBe(true);
    expect(await bNav.textContent()).toContain('Inbox (1)');
    expect(await b.page.locator('#inbox-summary').textContent()).toBe('1 unread event.');
    expect(await b.page.locator('#inbox-empty').isHidden()).toBe(true);
    await shot(b.page, 'app-inbox');
    a11y.inbox = await seriousViolations(b.page);

    // B follows it to the message and replies.
    await item.getByRole('link', { name: /Open the discussion/ }).click();
    await b.page.waitForURL(`**/app/t/${doc.id}#m-${posted.id}`);
    const target = b.page.locator(`#m-${posted.id}`);
    expect(await target.locator('.badge-new').count()).toBe(1);
    await target.locator('summary', { hasText: 'Reply' }).click();
    await target.getByLabel('Your reply').fill('Yes, all checks are green.');
    await target.getByRole('button', { name: 'Reply', exact: true }).click();
    await b.page.waitForURL(/#m-/);
    const reply = b.page.locator(`#m-${posted.id}`).locator('xpath=..').locator('ol.replies article.msg');
    expect(await reply.locator('.msg-body').textContent()).toBe('Yes, all checks are green.');
    await shot(b.page, 'app-thread');
    a11y.thread = await seriousViolations(b.page);

    // A's inbox shows the reply; Mark read clears the count.
    await a.page.goto('/app/inbox');
    const aItem = a.page.locator('#inbox-unread li.event', { hasText: 'replied to your message' });
    expect(await aItem.count()).toBe(1);
    expect(
      await a.page
        .getByRole('navigation', { name: 'Main' })
        .getByRole('link', { name: /^Inbox/ })
        .textContent(),
    ).toContain('Inbox (1)');
    await aItem.getByRole('button', { name: /^Mark read/ }).click();
    await a.page.waitForURL('**/app/inbox?notice=one');
    expect(
      await a.page
        .getByRole('navigation', { name: 'Main' })
        .getByRole('link', { name: /^Inbox/ })
        .textContent(),
    ).toContain('Inbox (0)');
    expect(await a.page.locator('#inbox-empty').isVisible()).toBe(true);

    // B clears everything at once.
    await b.page.goto('/app/inbox');
    await b.page.getByRole('button', { name: 'Mark all read' }).click();
    await b.page.waitForURL('**/app/inbox?notice=all');
    expect(await bNav.textContent()).toContain('Inbox (0)');
    await b.page.getByRole('link', { name: 'Marked read' }).click();
    await b.page.waitForURL('**/app/inbox?show=done');
    expect(await b.page.locator('li.event', { hasText: 'mentioned you' }).count()).toBe(1);

    expect(a11y).toEqual({ inbox: [], thread: [] });
    expect([...a.dialogs, ...b.dialogs]).toEqual([]);
    await a.context.close();
    await b.context.close();
  });

  it('a thread the agent locked shows as locked; the editor unlocks it in the browser; the viewer sees no Unlock', async () => {
    const { owner, editor, viewer, agent } = w;
    const doc = await write(owner.client, 'team/relay.md', '# Relay\n');
    for (let i = 1; i <= 4; i++) expect((await agent.client.post(`/api/v1/nodes/${doc.id}/threads`, { body: `Relaying message ${i}.` })).status).toBe(201);

    const v = await signedIn(viewer.email);
    await v.page.goto('/app/t/team/relay.md');
    const vLock = v.page.getByRole('region', { name: /Locked by the loop breaker/ });
    expect(await vLock.textContent()).toContain('Only an editor or owner can unlock it.');
    expect(await v.page.getByRole('button', { name: 'Unlock' }).count()).toBe(0);
    await v.context.close();

    const e = await signedIn(editor.email);
    await e.page.goto('/app/inbox');
    await e.page
      .locator('li.event', { hasText: 'was locked by the loop breaker' })
      .getByRole('link', { name: /Open the discussion/ })
      .click();
    await e.page.waitForURL(`**/app/t/${doc.id}`);
    const lock = e.page.getByRole('region', { name: /Locked by the loop breaker/ });
    expect(await lock.textContent()).toContain('Agents wrote 4 messages in a row');
    expect(await e.page.locator('article.msg-agent').count()).toBe(4);
    await shot(e.page, 'app-thread-locked');
    const locked = await seriousViolations(e.page);
    await lock.getByRole('button', { name: 'Unlock' }).click();
    await e.page.waitForURL('**/app/t/team/relay.md?notice=unlocked');
    expect(await e.page.getByRole('status').first().textContent()).toContain('Unlocked');
    expect(await e.page.getByRole('region', { name: /Locked by the loop breaker/ }).count()).toBe(0);
    expect((await thread(owner.client, doc.id)).locked).toBe(false);
    expect(locked).toEqual([]);
    await e.context.close();
  });

  it('at phone width the discussion and the inbox fit, and the mention list works from the keyboard', async () => {
    const { owner } = w;
    await write(owner.client, 'team/phone.md', '# Phone\n');
    const { context, page } = await signedIn(owner.email, { width: 390, height: 844 });
    await page.goto('/app/t/team/phone.md');
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    const box = page.getByLabel('Message', { exact: true });
    await box.focus();
    await page.keyboard.type('@');
    const list = page.getByRole('listbox', { name: 'People and agents to mention' });
    await list.waitFor();
    // Down moves the choice; Escape closes the list and keeps the text.
    const first = await box.getAttribute('aria-activedescendant');
    await page.keyboard.press('ArrowDown');
    expect(await box.getAttribute('aria-activedescendant')).not.toBe(first);
    await page.keyboard.press('Escape');
    expect(await list.isHidden()).toBe(true);
    expect(await box.inputValue()).toBe('@');
    await page.keyboard.type('Ver');
    await list.waitFor();
    await page.keyboard.press('Tab');
    expect(await box.inputValue()).toBe('@Vera ');
    await shot(page, 'app-thread-phone');
    await page.goto('/app/inbox');
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await shot(page, 'app-inbox-phone');
    await context.close();
  });
});

const shot = screenshot;
