import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seriousViolations } from '../support/axe.js';
import { signedInPage, webPerson, type WebPerson, cookieOf, browse, submit } from '../support/web.js';
import { chromiumPresent, launchChromium, screenshot, BROWSER_SUITE } from '../support/browser.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, startTestServer, type TestServer } from '../support/server.js';

/**
 * Reading and reviewing polish of the web app (issue 17): code blocks highlighted on the server
 * (a `<script>` in one stays text), the proposal queue paged with the core's cursor (a garbage
 * cursor is a 400 page), a viewer proposing to archive a page or to edit it (the owner accepts in
 * the queue and the page changes), the navigation's "Inbox (n)" kept live on every page, and the
 * Ctrl+K quick-open reaching a page by keyboard. Plain HTTP on every engine; the browser suite
 * drives chromium.
 */

async function write(c: Client, pagePath: string, content: string): Promise<{ id: string; commit_sha: string }> {
  const res = await c.post('/api/v1/nodes', { path: pagePath, content, message: `add ${pagePath}` });
  expect(res.status, res.text).toBe(201);
  return res.body;
}

const CODE_PAGE = `# Build notes

How the client starts:

\`\`\`ts
// start the client
const client: Client = new Client('<script>alert(1)</script>');
export async function start(port = 8080) {
  return client.listen(port);
}
\`\`\`

The page it serves:

\`\`\`html
<script>alert("pwned")</script>
<p class="hello">Hi &amp; welcome</p>
\`\`\`

Unknown and no language stay plain:

\`\`\`nosuchlang
<b>bold?</b>
\`\`\`

\`\`\`
<i>plain</i>
\`\`\`
`;

/** An owner, a viewer and an editor in the owner's workspace, and an agent that may read and propose but not write. */
async function setup(s: TestServer) {
  const owner = await webPerson(s.url, 'Oona');
  const invite = async (role: string) => {
    const inv = await owner.client.post('/api/v1/invites', { role });
    expect(inv.status, inv.text).toBe(201);
    return inv.body.token as string;
  };
  const viewer = await webPerson(s.url, 'Viggo', await invite('viewer'));
  const editor = await webPerson(s.url, 'Edda', await invite('editor'));
  const agent = await createAgentWithKey(owner.client, [{ action: 'read' }, { action: 'search' }, { action: 'propose' }], { name: 'queue-bot' });
  return { owner, viewer, editor, agent };
}

/* -------------------------------------------------------------- plain HTTP */

describe.each(testEngines())('reading and reviewing over HTTP (%s)', (engine) => {
  let s: TestServer;
  let owner: WebPerson;
  let viewer: WebPerson;
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

  it('code blocks are highlighted on the server; a <script> inside one stays text; unknown languages stay plain', async () => {
    await write(owner.client, 'eng/build.md', CODE_PAGE);
    const r = await browse(s, viewer.client, '/app/p/eng/build.md');
    expect(r.status).toBe(200);
    // TypeScript: keywords, strings, comments in spans.
    expect(r.text).toContain('<code class="language-ts">');
    expect(r.text).toContain('<span class="hljs-keyword">const</span>');
    expect(r.text).toContain('<span class="hljs-comment">// start the client</span>');
    expect(r.text).toMatch(/<span class="hljs-string">&#x27;&lt;script&gt;alert\(1\)&lt;\/script&gt;&#x27;<\/span>/);
    expect(r.text).toContain('<span class="hljs-number">8080</span>');
    // HTML: the tags are highlighted text, never markup.
    expect(r.text).toContain('<code class="language-html">');
    expect(r.text).toContain('<span class="hljs-tag">&lt;<span class="hljs-name">script</span>&gt;</span>');
    expect(r.text).toContain('&amp;amp;');
    // No script element but the app's own /assets modules.
    expect([...r.text.matchAll(/<script\b[^>]*>/g)].map((m) => m[0]).every((t) => /src="\/assets\/[a-z-]+\.js"/.test(t))).toBe(true);
    expect(r.text).not.toContain('<script>alert');
    expect(r.text).not.toContain('<b>bold?</b>');
    // Unknown language and none: plain escaped text without spans.
    expect(r.text).toContain('<code class="language-nosuchlang">&lt;b&gt;bold?&lt;/b&gt;\n</code>');
    expect(r.text).toContain('<pre tabindex="0"><code>&lt;i&gt;plain&lt;/i&gt;\n</code></pre>');
    // The editor's preview highlights the same way.
    const pv = await submit(s, owner.client, '/app/e/eng/build.md', {
      csrf: owner.client.csrf!,
      content: '# Build notes\n\n```json\n{"a": 1}\n```\n',
      base_sha: 'a'.repeat(40),
      action: 'preview',
    });
    expect(pv.status).toBe(200);
    expect(pv.text).toContain('<span class="hljs-attr">&quot;a&quot;</span>');
  });

  it('the proposal queue pages with "Older proposals"; a garbage or overlong cursor is a 400 page', async () => {
    // 101 open proposals (new pages at free paths): one more than a page of the queue.
    for (let i = 0; i < 101; i++) {
      const res = await agent.post('/api/v1/proposals', {
        path: `drafts/idea-${String(i).padStart(3, '0')}.md`,
        content: `# Idea ${i}\n`,
        reason: `idea ${i}`,
      });
      expect(res.status, res.text).toBe(201);
    }
    const first = await browse(s, owner.client, '/app/proposals');
    expect(first.status).toBe(200);
    const count = (t: string) => [...t.matchAll(/<li class="proposal-item">/g)].length;
    expect(count(first.text)).toBe(100);
    expect(first.text).toContain('idea-100.md'); // newest first
    expect(first.text).not.toContain('idea-000.md');
    const older = /<a href="(\/app\/proposals\?cursor=[^"]+)" rel="next">Older proposals<\/a>/.exec(first.text);
    expect(older, 'an Older link').not.toBeNull();
    const second = await browse(s, owner.client, older![1]!.replace(/&amp;/g, '&'));
    expect(second.status).toBe(200);
    expect(count(second.text)).toBe(1);
    expect(second.text).toContain('idea-000.md');
    expect(second.text).toContain('<a href="/app/proposals">Newest</a>');
    expect(second.text).not.toContain('Older proposals');
    // The same page of the list over REST: the app walks the core's cursor.
    const rest = await owner.client.get('/api/v1/proposals?status=open&limit=100');
    expect(rest.body.next_cursor).not.toBeNull();
    // Status filters keep their paging.
    const all = await browse(s, owner.client, '/app/proposals?status=all');
    expect(all.text).toMatch(/href="\/app\/proposals\?status=all&amp;cursor=[^"]+" rel="next"/);

    for (const bad of ['garbage!!', 'cHBfZm9v', 'x'.repeat(300)]) {
      const r = await browse(s, owner.client, `/app/proposals?cursor=${encodeURIComponent(bad)}`);
      expect(r.status, bad).toBe(400);
      expect(r.text).toContain('This link to a later part of the list is not valid');
      expect(r.text).toContain('<a href="/app/proposals">Back to the newest proposals</a>');
    }
  });

  it('a viewer proposes archiving a page; the owner sees it in the queue and accepting archives the page', async () => {
    const doc = await write(owner.client, 'team/old-runbook.md', '# Old runbook\n\nRestart the box by hand.\n');
    const page = await browse(s, viewer.client, '/app/p/team/old-runbook.md');
    expect(page.text).toContain('<summary>Propose archiving</summary>');
    expect(page.text).toContain('>Propose an edit</a>');
    expect(page.text).not.toContain('>Edit</a>');
    expect(page.text).not.toContain('value="delete"');
    // A bad kind of reason is refused on the proposing form (the viewer's, not the editor's).
    const bad = await submit(s, viewer.client, '/app/a/team/old-runbook.md', {
      csrf: viewer.client.csrf!,
      id: doc.id,
      do: 'archive',
      reason: 'boredom',
      message: 'x',
    });
    expect(bad.status).toBe(400);
    expect(bad.text).toContain('The reason is one of');
    expect(bad.text).toContain('Propose archiving');
    expect(bad.text).not.toContain('value="delete"');

    const posted = await submit(s, viewer.client, '/app/a/team/old-runbook.md', {
      csrf: viewer.client.csrf!,
      id: doc.id,
      do: 'archive',
      reason: 'superseded',
      message: 'Replaced by the <new> runbook',
    });
    expect(posted.status).toBe(202);
    expect(posted.text).toContain('Your archive became a proposal');
    const id = /href="\/app\/proposals\/(pp_[0-9a-z]+)"/.exec(posted.text)![1]!;
    // Nothing changed yet.
    expect((await owner.client.get(`/api/v1/nodes/${doc.id}`)).body.state).toBe('active');

    const queue = await browse(s, owner.client, '/app/proposals');
    expect(queue.text).toContain(`href="/app/proposals/${id}"`);
    expect(queue.text).toContain('Replaced by the &lt;new&gt; runbook');
    const shown = await browse(s, owner.client, `/app/proposals/${id}`);
    expect(shown.text).toContain('Archives <span class="mono">team/old-runbook.md</span> (reason: superseded)');
    expect(shown.text).toContain('Viggo');
    const accepted = await submit(s, owner.client, `/app/proposals/${id}/accept`, { csrf: owner.client.csrf! });
    expect(accepted.status).toBe(303);
    const after = await owner.client.get(`/api/v1/nodes/${doc.id}`);
    expect(after.body.state).toBe('archived');
    expect(after.body.archived_reason).toBe('superseded');
    // An archived page offers the viewer no second archive proposal.
    expect((await browse(s, viewer.client, '/app/p/team/old-runbook.md')).text).not.toContain('Propose archiving');
  });

  it('a viewer proposes an edit with the editor; the owner accepts it and the page changes; a page above their level is not there', async () => {
    const doc = await write(owner.client, 'team/faq.md', '# FAQ\n\nAsk in the channel.\n');
    const form = await browse(s, viewer.client, '/app/e/team/faq.md');
    expect(form.status).toBe(200);
    expect(form.text).toContain('Propose an edit: <span class="title-ref">FAQ</span>');
    expect(form.text).toContain('value="propose">Propose</button>');
    expect(form.text).not.toContain('value="save"');
    // Nothing to review: the same text is refused by the core, the form keeps it.
    const same = await submit(s, viewer.client, '/app/e/team/faq.md', {
      csrf: viewer.client.csrf!,
      id: doc.id,
      base_sha: doc.commit_sha,
      content: '# FAQ\r\n\r\nAsk in the channel.\r\n',
      message: '',
      action: 'propose',
    });
    expect(same.status).toBe(409);
    expect(same.text).toContain('nothing to review');
    const proposed = await submit(s, viewer.client, '/app/e/team/faq.md', {
      csrf: viewer.client.csrf!,
      id: doc.id,
      base_sha: doc.commit_sha,
      content: '# FAQ\r\n\r\nAsk in the #help channel.\r\n',
      message: 'The channel was renamed',
      action: 'propose',
    });
    expect(proposed.status).toBe(202);
    expect(proposed.text).toContain('Your edit became a proposal');
    const id = /href="\/app\/proposals\/(pp_[0-9a-z]+)"/.exec(proposed.text)![1]!;
    const rest = await owner.client.get(`/api/v1/proposals/${id}`);
    expect(rest.body).toMatchObject({ kind: 'edit', origin: 'propose', reason: 'The channel was renamed', content: '# FAQ\n\nAsk in the #help channel.\n' });
    // Saving as a viewer is still refused by the core (the form cannot make it a write).
    const forged = await submit(s, viewer.client, '/app/e/team/faq.md', {
      csrf: viewer.client.csrf!,
      id: doc.id,
      base_sha: doc.commit_sha,
      content: '# FAQ\n\nForged.\n',
      action: 'save',
    });
    expect(forged.status).toBe(403);
    expect((await submit(s, owner.client, `/app/proposals/${id}/accept`, { csrf: owner.client.csrf! })).status).toBe(303);
    expect((await owner.client.get(`/api/v1/nodes/${doc.id}`)).body.content).toBe('# FAQ\n\nAsk in the #help channel.\n');

    // A confidential page is not there for the viewer at all.
    await write(owner.client, 'team/salaries.md', '---\nsensitivity: confidential\n---\n# Salaries\n');
    expect((await browse(s, viewer.client, '/app/e/team/salaries.md')).status).toBe(404);
    const arch = await submit(s, viewer.client, '/app/a/team/salaries.md', { csrf: viewer.client.csrf!, do: 'archive', reason: 'manual', message: 'x' });
    expect(arch.status).toBe(404);
  });

  it('/app/inbox/count answers the unread count and the seq to wait after', async () => {
    const doc = await write(owner.client, 'team/count.md', '# Count\n');
    const before = await fetch(`${s.url}/app/inbox/count`, { headers: { accept: 'application/json', cookie: cookieOf(viewer.client) } });
    expect(before.status).toBe(200);
    const b = (await before.json()) as { count: number; capped: boolean; after: number };
    expect(b.capped).toBe(false);
    expect((await owner.client.post(`/api/v1/nodes/${doc.id}/threads`, { body: 'ping @Viggo', mentions: [viewer.id] })).status).toBe(201);
    const now = (await (
      await fetch(`${s.url}/app/inbox/count`, { headers: { accept: 'application/json', cookie: cookieOf(viewer.client) } })
    ).json()) as typeof b;
    expect(now.count).toBe(b.count + 1);
    expect(now.after).toBeGreaterThan(b.after);
    // Signed out: the login page, as for every /app address.
    const anon = await fetch(`${s.url}/app/inbox/count`, { redirect: 'manual' });
    expect(anon.status).toBe(303);
  });
});

/* ----------------------------------------------------------------- browser */

const haveChromium = chromiumPresent('the web app reading polish');

describe.skipIf(!haveChromium)('reading and reviewing in a real browser (chromium, sqlite)', BROWSER_SUITE, () => {
  let s: TestServer;
  let browser: Browser;
  let w: Awaited<ReturnType<typeof setup>>;

  beforeAll(async () => {
    s = await startTestServer('sqlite');
    w = await setup(s);
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  it('a page with code: highlighted, the <script> inert, no serious axe violation', async () => {
    await write(w.owner.client, 'eng/code.md', CODE_PAGE);
    const { page, context, dialogs } = await signedInPage(browser, s.url, w.viewer.email);
    await page.goto('/app/p/eng/code.md');
    const ts = page.locator('pre code.language-ts');
    expect(await ts.locator('.hljs-keyword').first().textContent()).toBe('const');
    expect(await ts.textContent()).toContain("new Client('<script>alert(1)</script>')");
    expect(await page.locator('pre code.language-html').textContent()).toContain('<script>alert("pwned")</script>');
    // The highlighted spans have their own colours (not the text colour of the page).
    const colours = await ts.evaluate((el) => ({
      keyword: getComputedStyle(el.querySelector('.hljs-keyword')!).color,
      string: getComputedStyle(el.querySelector('.hljs-string')!).color,
      plain: getComputedStyle(el).color,
    }));
    expect(new Set(Object.values(colours)).size).toBe(3);
    expect(dialogs).toEqual([]);
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, 'app-page-code');
    await context.close();
  });

  it("the viewer's proposing controls (archive form open, the proposing editor) and the code page at phone width have no serious axe violation", async () => {
    await write(w.owner.client, 'eng/code-2.md', CODE_PAGE);
    const { page, context } = await signedInPage(browser, s.url, w.viewer.email);
    await page.goto('/app/p/eng/code-2.md');
    const found: Record<string, string[]> = {};
    await page.locator('summary', { hasText: 'Propose archiving' }).click();
    await page.getByLabel('Why (shown to the reviewer)').waitFor();
    found['propose archiving open'] = await seriousViolations(page);
    await page.getByRole('link', { name: 'Propose an edit' }).click();
    await page.waitForURL('**/app/e/eng/code-2.md');
    found['propose an edit'] = await seriousViolations(page);
    await screenshot(page, 'app-propose-edit');
    // The same session at phone width.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto('/app/p/eng/code-2.md');
    found['code page at phone width'] = await seriousViolations(page);
    await context.close();
    expect(Object.fromEntries(Object.entries(found).filter(([, v]) => v.length > 0))).toEqual({});
  });

  it('the navigation count changes without a reload when someone mentions the person over REST', async () => {
    const doc = await write(w.owner.client, 'team/live.md', '# Live\n');
    const { page, context } = await signedInPage(browser, s.url, w.editor.email);
    // The script's long-poll is waiting before the event is made (its first request sets the point to wait from).
    const counted = page.waitForResponse((r) => new URL(r.url()).pathname === '/app/inbox/count');
    const polling = page.waitForRequest((r) => new URL(r.url()).pathname === '/api/v1/inbox');
    await page.goto('/app');
    await counted;
    await polling;
    const nav = page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: /^Inbox/ });
    const start = Number(/Inbox \((\d+)\)/.exec((await nav.textContent()) ?? '')![1]);
    await page.evaluate(() => ((window as unknown as { stayed: boolean }).stayed = true));
    expect((await w.owner.client.post(`/api/v1/nodes/${doc.id}/threads`, { body: 'Look at this @Edda', mentions: [w.editor.id] })).status).toBe(201);
    await expect.poll(() => nav.textContent(), { timeout: 15_000 }).toContain(`Inbox (${start + 1})`);
    expect(await nav.locator('.count').getAttribute('class')).toContain('count-some');
    expect(await page.evaluate(() => (window as unknown as { stayed?: boolean }).stayed)).toBe(true);
    await context.close();
  });

  it('Ctrl+K opens quick-open; typing finds the page, arrow keys choose and Enter opens it; "/" still focuses the search box', async () => {
    await write(w.owner.client, 'team/onboarding.md', '# Onboarding checklist\n\nLaptop, accounts, buddy.\n');
    await write(w.owner.client, 'team/offboarding.md', '# Offboarding checklist\n\nReturn the laptop.\n');
    const { page, context, dialogs } = await signedInPage(browser, s.url, w.viewer.email);
    await page.goto('/app');
    await page.keyboard.press('/');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('q');
    await page.keyboard.press('Escape');

    await page.keyboard.press('Control+k');
    const dialog = page.getByRole('dialog', { name: 'Open a page' });
    await dialog.waitFor();
    const box = dialog.getByRole('combobox', { name: 'Page title' });
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('qo-input');
    await box.pressSequentially('checklist');
    const options = dialog.getByRole('listbox', { name: 'Pages found' }).getByRole('option');
    await expect.poll(() => options.count()).toBe(2);
    expect(await options.nth(0).getAttribute('aria-selected')).toBe('true');
    expect(await box.getAttribute('aria-activedescendant')).toBe(await options.nth(0).getAttribute('id'));
    expect(await seriousViolations(page)).toEqual([]);
    await screenshot(page, 'app-quick-open');
    await page.keyboard.press('ArrowDown');
    expect(await options.nth(1).getAttribute('aria-selected')).toBe('true');
    const chosen = (await options.nth(1).locator('.qo-path').textContent())!;
    await page.keyboard.press('Enter');
    await page.waitForURL(`**/app/p/${chosen}`);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toMatch(/boarding checklist/);

    // Escape closes it; with nothing chosen, Enter goes to the full search page.
    await page.keyboard.press('Control+k');
    await dialog.waitFor();
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'hidden' });
    await page.keyboard.press('Control+k');
    await box.fill('zzzznothing');
    await expect.poll(() => dialog.getByRole('status').textContent()).toContain('No page matches');
    await page.keyboard.press('Enter');
    await page.waitForURL('**/app/search?q=zzzznothing');

    // At phone width the dialog fits the screen.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.keyboard.press('Control+k');
    await box.fill('checklist');
    await expect.poll(() => options.count()).toBe(2);
    const box2 = await dialog.boundingBox();
    expect(box2!.x).toBeGreaterThanOrEqual(0);
    expect(box2!.x + box2!.width).toBeLessThanOrEqual(390);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    expect(dialogs).toEqual([]);
    await context.close();
  });
});
