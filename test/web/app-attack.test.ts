import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromiumPresent, launchChromium } from '../support/browser.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, startTestServer, type TestServer } from '../support/server.js';
import { signedInPage, webPerson, WEB_PASSWORD, type WebPerson } from '../support/web.js';
import { currentTotp } from '../../src/auth/totp.js';

/**
 * The web app (issue 17) attacked with real requests, as an attacker would send them: open
 * redirects through every return address, hidden pages (above a viewer's level, or in another
 * workspace) probed through every screen that names a page, redacted blocks looked for in every
 * view that shows a version, shown-once secrets looked for after the answer that showed them,
 * the security headers on every kind of answer, HTML injected through every text a person
 * controls, malformed and oversize form bodies, method confusion, stolen or stale sessions and
 * cross-site form posts. Each test says what a user (or the attacker) would observe.
 */

const APP_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

type Person = WebPerson;

interface Answer {
  status: number;
  headers: Headers;
  text: string;
  location: string | null;
}

const cookieOf = (c: Client | null) => (c ? [...c.cookies].map(([k, v]) => `${k}=${v}`).join('; ') : '');

/** A request as a browser sends it (Accept: text/html, the person's cookies), redirects not followed. */
async function raw(
  s: TestServer,
  method: string,
  url: string,
  o: { c?: Client | null; body?: string | Buffer; type?: string; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { accept: 'text/html,application/xhtml+xml,*/*;q=0.8', ...(o.headers ?? {}) };
  const cookie = cookieOf(o.c ?? null);
  if (cookie && headers.cookie === undefined) headers.cookie = cookie;
  if (o.type) headers['content-type'] = o.type;
  const body = o.body === undefined ? undefined : typeof o.body === 'string' ? o.body : new Uint8Array(o.body);
  const res = await fetch(s.url + url, { method, headers, body, redirect: 'manual' });
  return { status: res.status, headers: res.headers, text: await res.text(), location: res.headers.get('location') };
}

const browse = (s: TestServer, c: Client | null, url: string, headers?: Record<string, string>) => raw(s, 'GET', url, { c, headers });

/** A form POST as a browser sends it; a field given as an array is repeated. */
function submit(s: TestServer, c: Client | null, url: string, fields: Record<string, string | string[]>, headers?: Record<string, string>) {
  const body = new URLSearchParams();
  for (const [k, v] of Object.entries(fields)) for (const x of [v].flat()) body.append(k, x);
  return raw(s, 'POST', url, { c, body: body.toString(), type: 'application/x-www-form-urlencoded', headers });
}

async function write(c: Client, path: string, content: string, message?: string): Promise<{ id: string; sha: string }> {
  const res = await c.post('/api/v1/nodes', { path, content, message: message ?? `add ${path}` });
  expect(res.status, res.text).toBe(201);
  return { id: res.body.id, sha: res.body.commit_sha };
}

async function update(c: Client, path: string, content: string, message = `edit ${path}`): Promise<string> {
  const cur = await c.get(`/api/v1/nodes/${encodeURIComponent(path)}`);
  expect(cur.status, cur.text).toBe(200);
  const res = await c.put(`/api/v1/nodes/${cur.body.id}`, { content, base_sha: cur.body.commit_sha, message });
  expect(res.status, res.text).toBe(200);
  return res.body.commit_sha as string;
}

/** A 404 page's text with the address it names taken out: hidden and missing must then read the same. */
const normalised = (text: string, ...names: string[]) => names.reduce((t, n) => t.split(n).join('X'), text);

const TAG = /<([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[^\s"'>/=]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'>]+))?)*)\s*\/?>/g;
const ATTR = /\s+([^\s"'>/=]+)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s"'>]+))?/g;

const unentity = (v: string) =>
  v
    .replace(/^["']|["']$/g, '')
    .replace(/&#(\d+);/g, (_, n: string) => String.fromCharCode(Number(n)))
    .replace(/&#x([0-9a-f]+);/gi, (_, n: string) => String.fromCharCode(parseInt(n, 16)))
    .replace(/&quot;/g, '"')
    .replace(/&amp;/g, '&');

/**
 * Every way a page could carry markup an attacker wrote, read off the real tags of the answer
 * (text is escaped, so `<` opens only tags the server meant): no event-handler attribute, no
 * script but the app's own modules, no frame or plugin, no script URL in a link, source or form.
 */
function expectNoInjectedMarkup(text: string, where: string): void {
  for (const m of text.matchAll(TAG)) {
    const tag = m[1]!.toLowerCase();
    expect(['iframe', 'object', 'embed', 'base', 'frame', 'applet'], `${where}: ${m[0]}`).not.toContain(tag);
    if (tag === 'script') expect(m[0], where).toMatch(/^<script type="module" src="\/assets\/[a-z-]+\.js">$/);
    for (const a of (m[2] ?? '').matchAll(ATTR)) {
      const name = a[1]!.toLowerCase();
      expect(name.startsWith('on'), `${where}: ${m[0]}`).toBe(false);
      if (['href', 'src', 'action', 'formaction', 'xlink:href', 'srcset'].includes(name)) {
        const value = unentity(a[2] ?? '').replace(/[\u0000-\u0020]/g, '');
        expect(value, `${where}: ${m[0]}`).not.toMatch(/^(javascript|vbscript|data:text|file):/i);
      }
    }
  }
  // Nothing that looks like a tag an attacker wrote survives unescaped.
  expect(text, where).not.toMatch(/<(script|img|svg)[^>]*\balert\(/i);
}

/** Where a redirect leads, as the browser resolves it: it must stay on this site. */
function expectSameSite(s: TestServer, location: string | null, where: string): void {
  if (location === null) return;
  expect(location, where).not.toMatch(/[\r\n]/);
  expect(location.startsWith('/') && !location.startsWith('//') && !location.startsWith('/\\'), `${where}: ${location}`).toBe(true);
  expect(new URL(location, s.url).origin, where).toBe(new URL(s.url).origin);
}

/** Return addresses that must never lead off the site (or into a header). */
const EVIL_NEXT = [
  '//evil.example/x',
  '///evil.example/x',
  '/\\evil.example/x',
  '/\\/evil.example',
  '\\\\evil.example',
  'https://evil.example/x',
  'http:evil.example',
  'javascript:alert(1)',
  '/.//evil.example',
  '/app/../..//evil.example',
  '/app/%2e%2e/%2e%2e//evil.example',
  '/\t/evil.example',
  '/app\r\nSet-Cookie: pwned=1',
  '%2F%2Fevil.example',
  ' //evil.example',
  '/%5Cevil.example',
];

/* ------------------------------------------------------------------ world */

const OPEN = (word: string, extra = '') => `---
title: Open notes
tags: [ops, shared-tag]
---
# Open notes

Everyone reads this paragraph about the harbour.

::: secret
The vault word is ${word}.
:::

See [[Acquisition plans]] and [[No such page]] and [the plans](plans.md).
${extra}`;

const PLANS = `---
title: Acquisition plans
sensitivity: confidential
tags: [ops, shared-tag]
---
# Acquisition plans

The codename is zeppelin. See [[Open notes]].
`;

interface World {
  owner: Person;
  editor: Person;
  viewer: Person;
  outsider: Person;
  open: { id: string; shas: string[] };
  plans: { id: string };
  top: { id: string };
  shifting: { id: string; shas: string[] };
  foreign: { id: string };
}

async function setup(s: TestServer): Promise<World> {
  const owner = await webPerson(s.url, 'Olga');
  const join = async (name: string, role: 'editor' | 'viewer') => {
    const inv = await owner.client.post('/api/v1/invites', { role });
    expect(inv.status, inv.text).toBe(201);
    return webPerson(s.url, name, inv.body.token);
  };
  const editor = await join('Emil', 'editor');
  const viewer = await join('Vera', 'viewer');
  const outsider = await webPerson(s.url, 'Xena');
  const o = owner.client;
  const open1 = await write(o, 'handbook/open.md', OPEN('tangerine'));
  const open2 = await update(o, 'handbook/open.md', OPEN('mandarin', '\nA second public paragraph.\n'));
  const plans = await write(o, 'handbook/plans.md', PLANS);
  const top = await write(o, 'handbook/top.md', '---\nsensitivity: secret\n---\n# Top\n\nOwners only: obsidian.\n');
  // A page that was confidential for one version, in between two internal ones.
  const sh1 = await write(o, 'handbook/shifting.md', '# Shifting\n\nFirst, for everyone.\n');
  const sh2 = await update(o, 'handbook/shifting.md', '---\nsensitivity: confidential\n---\n# Shifting\n\nBriefly confidential: quagmire.\n', 'hush quagmire');
  const sh3 = await update(o, 'handbook/shifting.md', '# Shifting\n\nFor everyone again.\n');
  const foreign = await write(outsider.client, 'elsewhere/private.md', '# Private\n\nOutsider only: wolfram.\n');
  return {
    owner,
    editor,
    viewer,
    outsider,
    open: { id: open1.id, shas: [open1.sha, open2] },
    plans: { id: plans.id },
    top: { id: top.id },
    shifting: { id: sh1.id, shas: [sh1.sha, sh2, sh3] },
    foreign: { id: foreign.id },
  };
}

/* ------------------------------------------------------------- plain HTTP */

describe.each(testEngines())('attacking the web app (%s)', (engine) => {
  let s: TestServer;
  let w: World;

  beforeAll(async () => {
    s = await startTestServer(engine);
    w = await setup(s);
  });
  afterAll(async () => {
    await s?.stop();
  });

  /* ---------------------------------------------------- open redirects */

  it('/login never offers or follows a return address off the site', async () => {
    for (const evil of EVIL_NEXT) {
      const page = await browse(s, null, `/login?next=${encodeURIComponent(evil)}`);
      expect(page.status, evil).toBe(200);
      const kept = /name="next" value="([^"]*)"/.exec(page.text)?.[1];
      if (kept !== undefined) expectSameSite(s, kept.replace(/&amp;/g, '&'), `login form next for ${JSON.stringify(evil)}`);
    }
    // Signing in with each: the 303 stays here.
    for (const evil of EVIL_NEXT) {
      const c = new Client(s.url);
      await raw(s, 'GET', '/login', { c }).then((r) => {
        for (const sc of r.headers.getSetCookie()) {
          const [k, ...v] = sc.split(';')[0]!.split('=');
          c.cookies.set(k!, v.join('='));
        }
      });
      const r = await submit(s, c, '/login', { email: w.viewer.email, password: WEB_PASSWORD, csrf: c.csrf!, next: evil });
      expect(r.status, evil).toBe(303);
      expectSameSite(s, r.location, `login 303 for ${JSON.stringify(evil)}`);
    }
    // A signed-in visitor's "Continue" link is the same sanitised address.
    for (const evil of EVIL_NEXT.slice(0, 8)) {
      const page = await browse(s, w.viewer.client, `/login?next=${encodeURIComponent(evil)}`);
      for (const m of page.text.matchAll(/<a href="([^"]*)">Continue<\/a>/g)) expectSameSite(s, m[1]!.replace(/&amp;/g, '&'), evil);
    }
  });

  it('/app/stepup keeps its return address inside /app (form, Cancel link and the 303 after confirming)', async () => {
    for (const evil of [...EVIL_NEXT, '/login', '/api/v1/me', '/appx', '/app/../api/v1/me']) {
      const page = await browse(s, w.viewer.client, `/app/stepup?next=${encodeURIComponent(evil)}`);
      expect(page.status, evil).toBe(200);
      const next = /name="next" value="([^"]*)"/.exec(page.text)![1]!;
      expect(next === '/app' || next.startsWith('/app/'), `${evil} → ${next}`).toBe(true);
      const cancel = /<a href="([^"]*)">Cancel<\/a>/.exec(page.text)![1]!;
      expect(cancel, evil).toBe(next);
    }
    for (const evil of ['//evil.example', '/\\evil.example', 'https://evil.example', '/app/../..//evil.example', '/login']) {
      const r = await submit(s, w.editor.client, '/app/stepup', { csrf: w.editor.client.csrf!, next: evil, password: WEB_PASSWORD });
      expect(r.status, evil).toBe(303);
      expectSameSite(s, r.location, evil);
      expect(r.location === '/app' || r.location!.startsWith('/app/'), `${evil} → ${r.location}`).toBe(true);
    }
  });

  it('the sign-in redirect of a signed-out visit names only a path of this site', async () => {
    for (const url of ['/app//evil.example', '/app/p//evil.example/x.md', '/app/%2F%2Fevil.example', '/app/search?q=%0d%0aSet-Cookie:x=1']) {
      const r = await browse(s, null, url);
      expect(r.status, url).toBe(303);
      expect(r.location, url).toMatch(/^\/login\?next=/);
      expect(r.headers.get('set-cookie') ?? '', url).not.toContain('x=1');
      // Signing in with that next lands on this site.
      const next = decodeURIComponent(r.location!.slice('/login?next='.length));
      const c = new Client(s.url);
      const lp = await raw(s, 'GET', '/login', { c });
      for (const sc of lp.headers.getSetCookie()) {
        const [k, ...v] = sc.split(';')[0]!.split('=');
        c.cookies.set(k!, v.join('='));
      }
      const done = await submit(s, c, '/login', { email: w.viewer.email, password: WEB_PASSWORD, csrf: c.csrf!, next });
      expect(done.status, url).toBe(303);
      expectSameSite(s, done.location, url);
    }
  });

  /* ------------------------------------------------------- hidden pages */

  it('a confidential page is the same 404 as a missing one on every screen that names a page', async () => {
    const v = w.viewer.client;
    const hidden = 'handbook/plans.md';
    const missing = 'handbook/plons.md';
    for (const screen of ['p', 'h', 't', 'e', 'a']) {
      const a = await browse(s, v, `/app/${screen}/${hidden}`);
      const b = await browse(s, v, `/app/${screen}/${missing}`);
      expect(a.status, screen).toBe(404);
      expect(b.status, screen).toBe(404);
      expect(normalised(a.text, hidden), screen).toBe(normalised(b.text, missing));
      expect(a.text, screen).not.toContain('zeppelin');
      expect(a.text, screen).not.toContain('Acquisition');
    }
    // By id: the page's id and an id that never existed answer alike.
    const fakeId = `${w.plans.id.slice(0, -4)}ZZZZ`;
    for (const screen of ['p', 'h', 't']) {
      const a = await browse(s, v, `/app/${screen}/${w.plans.id}`);
      const b = await browse(s, v, `/app/${screen}/${fakeId}`);
      expect(a.status, screen).toBe(404);
      expect(b.status, screen).toBe(404);
      expect(normalised(a.text, w.plans.id), screen).toBe(normalised(b.text, fakeId));
    }
    // A diff at a real commit of the hidden page.
    const shaOfPlans = (await w.owner.client.get(`/api/v1/nodes/${w.plans.id}`)).body.commit_sha as string;
    const d1 = await browse(s, v, `/app/diff/${hidden}?to=${shaOfPlans}`);
    const d2 = await browse(s, v, `/app/diff/${missing}?to=${shaOfPlans}`);
    expect(d1.status).toBe(404);
    expect(d2.status).toBe(404);
    expect(normalised(d1.text, hidden)).toBe(normalised(d2.text, missing));
    // Forms aimed at it: the same 404, and nothing posted.
    for (const action of ['messages', 'read', 'unlock']) {
      const a = await submit(s, v, `/app/threads/${w.plans.id}/${action}`, { csrf: v.csrf!, body: 'probe', kind: 'comment' });
      const b = await submit(s, v, `/app/threads/${fakeId}/${action}`, { csrf: v.csrf!, body: 'probe', kind: 'comment' });
      expect(a.status, action).toBe(b.status);
      expect([403, 404], action).toContain(a.status);
      expect(normalised(a.text, w.plans.id), action).toBe(normalised(b.text, fakeId));
    }
    // A preview written by the viewer links only to pages the viewer may open.
    const pv = await submit(s, v, '/app/e/handbook/open.md', {
      csrf: v.csrf!,
      id: w.open.id,
      content: '# Probe\n\n[[Acquisition plans]] [p](plans.md) [t](top.md) [[Top]]\n',
      action: 'preview',
    });
    expect(pv.status).toBeLessThan(500);
    expect(pv.text).not.toMatch(/href="[^"]*(plans|top)\.md"/);
    const ed = w.editor.client;
    const topA = await submit(s, ed, `/app/e/handbook/top.md`, { csrf: ed.csrf!, id: w.top.id, content: '# x\n', action: 'preview' });
    const topB = await submit(s, ed, `/app/e/handbook/tap.md`, { csrf: ed.csrf!, id: fakeId, content: '# x\n', action: 'preview' });
    expect(topA.status).toBe(404);
    expect(topB.status).toBe(404);
    const actA = await submit(s, ed, `/app/a/handbook/top.md`, { csrf: ed.csrf!, id: w.top.id, do: 'archive', reason: 'manual' });
    expect(actA.status).toBe(404);
    expect((await w.owner.client.get(`/api/v1/nodes/${w.top.id}`)).body.state).toBe('active');
    const thread = await w.owner.client.get(`/api/v1/nodes/${w.plans.id}/threads`);
    expect(JSON.stringify(thread.body)).not.toContain('probe');
  });

  it('search, backlinks, related lists and links never name a page above the reader', async () => {
    const v = w.viewer.client;
    for (const q of ['zeppelin', 'obsidian', 'quagmire', 'tangerine', 'mandarin']) {
      for (const mode of ['hybrid', 'fts']) {
        const r = await browse(s, v, `/app/search?q=${q}&mode=${mode}`);
        expect(r.status, q).toBe(200);
        expect(r.text, q).toContain('No page matches.');
        expect(r.text, q).not.toContain('plans.md');
        expect(r.text, q).not.toContain('top.md');
      }
    }
    // A public word next to the hidden block: the snippet shows no hidden text.
    const near = await browse(s, v, '/app/search?q=harbour&mode=fts');
    expect(near.text).toContain('open.md');
    expect(near.text).not.toMatch(/tangerine|mandarin|vault word/);
    const page = await browse(s, v, '/app/p/handbook/open.md');
    expect(page.status).toBe(200);
    expect(page.text).not.toMatch(/href="[^"]*(plans|top)\.md"|Acquisition plans<\/a>|zeppelin|obsidian/);
    expect(page.text).not.toMatch(/tangerine|mandarin|vault word/);
    // The wiki link to the hidden page and the one to no page look the same.
    const missingTitles = [...page.text.matchAll(/<span class="missing-link" title="([^"]*)">([^<]*)<\/span>/g)].map((m) => [m[1], m[2]]);
    expect(missingTitles).toContainEqual(['No page &quot;Acquisition plans&quot; that you can open', 'Acquisition plans']);
    expect(missingTitles).toContainEqual(['No page &quot;No such page&quot; that you can open', 'No such page']);
    // The owner does see the backlink and the neighbour: the lists are working, only filtered.
    const ownerView = await browse(s, w.owner.client, '/app/p/handbook/open.md');
    expect(ownerView.text).toContain('/app/p/handbook/plans.md');
    // Another workspace's member: nothing of this one, by path or by id.
    const x = w.outsider.client;
    for (const url of ['/app/p/handbook/open.md', `/app/p/${w.open.id}`, `/app/t/${w.open.id}`, `/app/h/${w.open.id}`, '/app/s/handbook']) {
      const r = await browse(s, x, url);
      expect(r.status, url).toBe(404);
      expect(r.text, url).not.toContain('harbour');
    }
    const ownersAgent = await createAgentWithKey(w.owner.client, [{ action: 'read', ceiling: 'internal' }], { name: 'not-yours', ceiling: 'internal' });
    const theirAgent = await browse(s, x, `/app/agents/${ownersAgent.id}`);
    const noAgent = await browse(s, x, `/app/agents/${ownersAgent.id.slice(0, -4)}ZZZZ`);
    expect(theirAgent.status).toBe(404);
    expect(normalised(theirAgent.text, ownersAgent.id)).toBe(normalised(noAgent.text, `${ownersAgent.id.slice(0, -4)}ZZZZ`));
    expect((await browse(s, x, '/app/agents')).text).not.toContain('not-yours');
    const revoke = await submit(s, x, `/app/agents/${ownersAgent.id}/keys/${ownersAgent.keyId}/revoke`, { csrf: x.csrf! });
    expect(revoke.status).toBe(404);
    expect((await ownersAgent.client.get('/api/v1/me')).status).toBe(200);
    const xs = await browse(s, x, '/app/search?q=harbour&mode=fts');
    expect(xs.text).toContain('No page matches.');
    const own = await browse(s, w.owner.client, '/app/search?q=wolfram&mode=fts');
    expect(own.text).toContain('No page matches.');
    expect((await browse(s, w.owner.client, `/app/p/${w.foreign.id}`)).status).toBe(404);
  });

  it('history and diffs leave out a version above the reader, and its commit message', async () => {
    const v = w.viewer.client;
    const [v1, v2, v3] = w.shifting.shas;
    const h = await browse(s, v, '/app/h/handbook/shifting.md');
    expect(h.status).toBe(200);
    expect(h.text).toContain(v1!.slice(0, 10));
    expect(h.text).toContain(v3!.slice(0, 10));
    expect(h.text).not.toContain(v2!.slice(0, 10));
    expect(h.text).not.toContain('quagmire');
    for (const url of [
      `/app/diff/handbook/shifting.md?to=${v2}`,
      `/app/diff/handbook/shifting.md?from=${v2}&to=${v3}`,
      `/app/diff/handbook/shifting.md?from=${v1}&to=${v2}&view=split`,
      `/app/diff/handbook/shifting.md?from=${v2!.slice(0, 7)}&to=${v3}`,
    ]) {
      const r = await browse(s, v, url);
      expect(r.status, url).toBe(404);
      expect(r.text, url).not.toContain('quagmire');
    }
    const ok = await browse(s, v, `/app/diff/handbook/shifting.md?from=${v1}&to=${v3}`);
    expect(ok.status).toBe(200);
    expect(ok.text).not.toContain('quagmire');
    // The owner sees the middle version: the filter is the reader's level, not a broken diff.
    expect((await browse(s, w.owner.client, `/app/diff/handbook/shifting.md?from=${v1}&to=${v2}`)).text).toContain('quagmire');
  });

  it('a redacted block stays redacted in the page, the history diff (both views), the editor and its preview', async () => {
    const [a, b] = w.open.shas;
    for (const c of [w.viewer.client, w.editor.client]) {
      for (const url of [
        '/app/p/handbook/open.md',
        `/app/diff/handbook/open.md?from=${a}&to=${b}`,
        `/app/diff/handbook/open.md?from=${a}&to=${b}&view=split`,
        `/app/diff/handbook/open.md?to=${a}`,
        '/app/h/handbook/open.md',
      ]) {
        const r = await browse(s, c, url);
        expect(r.status, url).toBe(200);
        expect(r.text, url).not.toMatch(/tangerine|mandarin|vault word/);
      }
    }
    const diff = await browse(s, w.viewer.client, `/app/diff/handbook/open.md?from=${a}&to=${b}`);
    expect(diff.text).toContain('[redacted]');
    expect(diff.text).toContain('second public paragraph');
    // The editor (confidential) may write the page but not see the secret block: the editor shows it redacted.
    const ed = w.editor.client;
    const edit = await browse(s, ed, '/app/e/handbook/open.md');
    expect(edit.status).toBe(200);
    expect(edit.text).toContain('[redacted]');
    expect(edit.text).not.toMatch(/tangerine|mandarin|vault word/);
    const preview = await submit(s, ed, '/app/e/handbook/open.md', {
      csrf: ed.csrf!,
      id: w.open.id,
      base_sha: b!,
      content: OPEN('[redacted]'),
      action: 'preview',
    });
    expect(preview.status).toBe(200);
    expect(preview.text).not.toMatch(/tangerine|mandarin/);
    // Saving the redacted text over the block is refused; the block survives.
    const save = await submit(s, ed, '/app/e/handbook/open.md', { csrf: ed.csrf!, id: w.open.id, base_sha: b!, content: OPEN('[redacted]'), action: 'save' });
    expect(save.status).toBeGreaterThanOrEqual(400);
    expect(save.status).toBeLessThan(500);
    expect((await w.owner.client.get(`/api/v1/nodes/${encodeURIComponent('handbook/open.md')}`)).body.content).toContain('mandarin');
  });

  it('a proposal touching a hidden block or page is not listed, not shown and not decidable below its level', async () => {
    const reviewCount = async () => /Review <span class="count[^"]*">\((\d+\+?)\)/.exec((await browse(s, w.editor.client, '/app')).text)?.[1];
    const countBefore = await reviewCount();
    expect(countBefore).toMatch(/^\d+\+?$/);
    const prop = await w.owner.client.post('/api/v1/proposals', { node_id: w.open.id, content: OPEN('persimmon'), reason: 'rotate the word' });
    expect(prop.status, prop.text).toBe(201);
    const id = prop.body.id as string;
    const fake = `${id.slice(0, -4)}ZZZZ`;
    for (const c of [w.editor.client, w.viewer.client, w.outsider.client]) {
      const list = await browse(s, c, '/app/proposals?status=all');
      expect(list.status).toBe(200);
      expect(list.text).not.toContain(id);
      const one = await browse(s, c, `/app/proposals/${id}`);
      const none = await browse(s, c, `/app/proposals/${fake}`);
      expect(one.status).toBe(404);
      expect(normalised(one.text, id)).toBe(normalised(none.text, fake));
      expect(one.text).not.toMatch(/persimmon|mandarin/);
      const acc = await submit(s, c, `/app/proposals/${id}/accept`, { csrf: c.csrf! });
      expect(acc.status).toBe(404);
      const rej = await submit(s, c, `/app/proposals/${id}/reject`, { csrf: c.csrf!, reason: 'no' });
      expect(rej.status).toBe(404);
    }
    expect((await w.owner.client.get(`/api/v1/proposals/${id}`)).body.status).toBe('open');
    // Not even counted: the editor's "Review (n)" is what it was.
    expect(await reviewCount()).toBe(countBefore);
    // The owner's queue shows it (the filter is the reader's level).
    expect((await browse(s, w.owner.client, `/app/proposals/${id}`)).text).toContain('persimmon');
  });

  it('the inbox leaves out events about a page once it is above the reader', async () => {
    const v = w.viewer.client;
    const page = await write(w.owner.client, 'handbook/watched.md', '# Watched\n\nPlain.\n');
    const watch = await v.put('/api/v1/watches', { node_id: page.id });
    expect(watch.status, watch.text).toBe(200);
    await update(w.owner.client, 'handbook/watched.md', '---\nsensitivity: confidential\n---\n# Hushed title\n\nNow confidential: basilisk.\n');
    const inbox = await browse(s, v, '/app/inbox');
    expect(inbox.status).toBe(200);
    expect(inbox.text).not.toMatch(/basilisk|Hushed title|watched\.md/);
    const items = await browse(s, v, '/app/inbox/items?after=0');
    expect(items.text).not.toMatch(/basilisk|Hushed title|watched\.md/);
    const done = await browse(s, v, '/app/inbox?show=done');
    expect(done.text).not.toMatch(/basilisk|Hushed title|watched\.md/);
    // Mentioned in the discussion of a page above their level: nothing reaches the viewer.
    const unreadBefore = /data-inbox-count="([^"]*)"/.exec((await browse(s, v, '/app')).text)?.[1];
    expect(unreadBefore).toMatch(/^\d+\+?$/);
    const ed = w.editor.client;
    const mention = await submit(s, ed, `/app/threads/${w.plans.id}/messages`, {
      csrf: ed.csrf!,
      body: 'Psst @Vera, the codename is zeppelin',
      kind: 'comment',
    });
    expect(mention.status).toBeLessThan(500);
    const after = await browse(s, v, '/app/inbox');
    expect(after.text).not.toMatch(/zeppelin|plans\.md|Acquisition/);
    expect(/data-inbox-count="([^"]*)"/.exec(after.text)?.[1]).toBe(unreadBefore);
    expect((await browse(s, v, '/app/inbox/items?after=0')).text).not.toMatch(/zeppelin|plans\.md/);
  });

  /* ---------------------------------------------------- shown-once secrets */

  it('agent keys, invite links and git tokens are shown once, never cached, never again', async () => {
    const o = w.owner.client;
    const agent = await createAgentWithKey(o, [{ action: 'read', ceiling: 'internal' }], { name: 'once-bot', ceiling: 'internal' });
    const mint = await submit(s, o, `/app/agents/${agent.id}/keys`, { csrf: o.csrf!, name: 'shown-once' });
    expect(mint.status).toBe(201);
    expect(mint.headers.get('cache-control')).toBe('no-store');
    const key = /<code>(ak_[^<]+)<\/code>/.exec(mint.text)![1]!;
    for (const url of [`/app/agents/${agent.id}`, '/app/agents', `/app/agents/${agent.id}?notice=created`]) {
      expect((await browse(s, o, url)).text, url).not.toContain(key);
    }
    const inv = await submit(s, o, '/app/invites', { csrf: o.csrf!, role: 'viewer', expires_in_days: '1' });
    expect(inv.status).toBe(201);
    expect(inv.headers.get('cache-control')).toBe('no-store');
    expect(inv.location).toBeNull();
    const token = /\/invite\/(iv_[^<]+)<\/code>/.exec(inv.text)![1]!;
    expect((await browse(s, o, '/app/members')).text).not.toContain(token);
    // The invite page itself (its token is in the URL) is never cached and sends no referrer.
    const invitePage = await browse(s, null, `/invite/${token}`);
    expect(invitePage.headers.get('cache-control')).toBe('no-store');
    expect(invitePage.headers.get('referrer-policy')).toBe('no-referrer');

    expect((await submit(s, o, '/app/stepup', { csrf: o.csrf!, next: '/app/account', password: WEB_PASSWORD })).status).toBe(303);
    const git = await submit(s, o, '/app/account/git-tokens', { csrf: o.csrf!, name: 'once', expires_in_days: '1' });
    expect(git.status).toBe(201);
    expect(git.headers.get('cache-control')).toBe('no-store');
    const gt = /<code>(gt_[^<]+)<\/code>/.exec(git.text)![1]!;
    expect((await browse(s, o, '/app/account')).text).not.toContain(gt);
    // TOTP setup: the secret page is not cached either.
    const totp = await submit(s, o, '/app/account/totp', { csrf: o.csrf! });
    expect(totp.status).toBe(200);
    expect(totp.headers.get('cache-control')).toBe('no-store');
  });

  /* ------------------------------------------------------------- headers */

  it('every kind of app answer carries the CSP and the security headers', async () => {
    const o = w.owner.client;
    const cases: [string, Promise<Answer>][] = [
      ['page', browse(s, o, '/app')],
      ['404', browse(s, o, '/app/p/handbook/nothing.md')],
      ['unknown route', browse(s, o, '/app/no/such/screen')],
      ['403 page', browse(s, w.viewer.client, '/app/e/handbook/open.md')],
      ['400 search', browse(s, o, `/app/search?q=${'a'.repeat(5000)}`)],
      ['400 diff', browse(s, o, '/app/diff/handbook/open.md?to=zz')],
      ['signed out 303', browse(s, null, '/app/agents')],
      ['csrf 403', submit(s, o, '/app/agents', { name: 'x' })],
      ['logout csrf 403', submit(s, o, '/app/logout', { csrf: 'nope' })],
      ['413', submit(s, o, '/app/agents', { csrf: o.csrf!, name: 'x'.repeat(70 * 1024) })],
      ['415', raw(s, 'POST', '/app/agents', { c: o, body: 'csrf=x', type: 'text/plain' })],
      ['inbox items', browse(s, o, '/app/inbox/items?after=0')],
      ['inbox items 400', browse(s, o, '/app/inbox/items?after=x')],
      ['stepup', browse(s, o, '/app/stepup?next=/app')],
    ];
    for (const [what, p] of cases) {
      const r = await p;
      expect(r.status, what).toBeLessThan(500);
      expect(r.headers.get('content-security-policy'), what).toBe(APP_CSP);
      expect(r.headers.get('x-frame-options'), what).toBe('DENY');
      expect(r.headers.get('x-content-type-options'), what).toBe('nosniff');
      expect(r.headers.get('referrer-policy'), what).toBe('no-referrer');
      expect(r.headers.get('cache-control'), what).toBe('no-store');
    }
    for (const url of ['/login', '/invite/iv_nothing', '/login?next=//evil']) {
      const r = await browse(s, null, url);
      expect(r.headers.get('content-security-policy'), url).toContain("default-src 'none'");
      expect(r.headers.get('content-security-policy'), url).toContain("frame-ancestors 'none'");
      expect(r.headers.get('x-frame-options'), url).toBe('DENY');
      expect(r.headers.get('cache-control'), url).toBe('no-store');
    }
  });

  it('/assets serves only its own files, typed, with nosniff; no traversal', async () => {
    for (const url of ['/assets/app.js', '/assets/app.css']) {
      const r = await browse(s, null, url);
      expect(r.status, url).toBe(200);
      expect(r.headers.get('x-content-type-options'), url).toBe('nosniff');
      expect(r.headers.get('content-type'), url).toMatch(/^text\/(javascript|css); charset=utf-8$/);
    }
    for (const url of [
      '/assets/..%2Fapp%2Froutes.ts',
      '/assets/..%2f..%2fpackage.json',
      '/assets/%2e%2e%2f%2e%2e%2fpackage.json',
      '/assets/../../package.json',
      '/assets/app.js%00.css',
      '/assets/',
      '/assets/face.ts',
      '/assets/app.JS',
      '/assets/%E0%A4%A',
    ]) {
      const r = await browse(s, null, url);
      expect([400, 404], url).toContain(r.status);
      expect(r.text, url).not.toContain('import ');
      expect(r.text, url).not.toContain('"dependencies"');
    }
  });

  /* ----------------------------------------------------------- injection */

  it('HTML written by an attacker (names, titles, tags, messages, thread text, queries, addresses) stays text everywhere', async () => {
    const inv = await w.owner.client.post('/api/v1/invites', { role: 'editor' });
    // Names may not hold < or > (the core refuses them), so the attack is on the attribute quotes.
    const evil = await webPerson(s.url, `Eve" onmouseover="alert(1)' &amp;`, inv.body.token);
    const e = evil.client;
    const hostile = `---
title: "<script>alert('title')</script><img src=x onerror=alert(2)>"
tags: ["\\"><svg onload=alert(3)>", "x' onmouseover='alert(4)"]
---
# Hostile

<script>alert(5)</script>
<img src=x onerror=alert(6)>
<iframe src="javascript:alert(7)"></iframe>

[a](javascript:alert(8)) [b](JaVaScRiPt:alert(9)) [c](java&#x09;script:alert(10)) [d](  javascript:alert(11))
[e](vbscript:msgbox(12)) [f](data:text/html;base64,PHNjcmlwdD5hbGVydCgxMyk8L3NjcmlwdD4=) ![g](javascript:alert(14))
<javascript:alert(15)> javascript:alert(16)
[h][ref] [i](https://ok.example "\\" onmouseover=alert(17) x=\\"")

[ref]: javascript:alert(18)

[[<img src=x onerror=alert(19)>]] [[x" onmouseover="alert(20)|label]] [[Open notes|<svg onload=alert(21)>]]

::: <img src=x onerror=alert(22)>
boxed
:::

\`\`\`"><script>alert(23)</script>
code
\`\`\`
`;
    const page = await write(e, 'lab/hostile.md', hostile, `<script>alert('message')</script>`);
    const msg = await e.post(`/api/v1/nodes/${page.id}/threads`, { body: `<img src=x onerror=alert(24)> hello @Olga`, kind: 'comment' });
    expect(msg.status, msg.text).toBe(201);
    const ag = await e.post('/api/v1/principals', {
      name: 'Bot" onfocus="alert(25)',
      ceiling: 'internal',
      grants: [{ action: 'read', scope: '*', ceiling: 'internal' }],
    });
    expect(ag.status, ag.text).toBe(201);
    const prop = await e.post('/api/v1/proposals', {
      node_id: w.shifting.id,
      content: '# Shifting\n\n<img src=x onerror=alert(26)>\n',
      reason: '<script>alert(27)</script>',
    });
    expect(prop.status, prop.text).toBe(201);
    const o = w.owner.client;
    const q = encodeURIComponent(`"><script>alert(28)</script><img src=x onerror=alert(29)>`);
    const urls = [
      '/app',
      '/app/s/lab',
      '/app/p/lab/hostile.md',
      '/app/h/lab/hostile.md',
      `/app/diff/lab/hostile.md?to=${page.sha}`,
      `/app/diff/lab/hostile.md?to=${page.sha}&view=split`,
      '/app/t/lab/hostile.md',
      `/app/e/lab/hostile.md`,
      `/app/a/lab/hostile.md?confirm=${q}&to=${q}`,
      `/app/search?q=${q}`,
      `/app/search?q=Hostile&mode=${q}`,
      '/app/search?q=alert&mode=fts',
      '/app/members',
      '/app/agents',
      `/app/agents/${ag.body.id}`,
      '/app/proposals',
      `/app/proposals/${prop.body.id}`,
      `/app/proposals/${prop.body.id}?view=split`,
      '/app/inbox',
      '/app/inbox/items?after=0',
      `/app/p/lab/${q}.md`,
      `/app/p/${q}`,
      `/app/t/${q}`,
      `/app/h/lab/${q}`,
      `/app/s/${q}`,
      `/app/stepup?next=${q}`,
      `/app/new?space=${q}&folder=${q}`,
      `/app/${q}`,
      `/app/proposals/${q}`,
      `/app/agents/${q}`,
      `/login?next=${q}`,
      `/invite/${q}`,
    ];
    for (const url of urls) {
      const r = await browse(s, o, url);
      expect(r.status, url).toBeLessThan(500);
      expectNoInjectedMarkup(r.text, url);
    }
    // The evil person's own view (their name is in the navigation of every page).
    for (const url of ['/app', '/app/account', '/app/p/lab/hostile.md']) {
      const r = await browse(s, e, url);
      expect(r.status, url).toBe(200);
      expectNoInjectedMarkup(r.text, url);
      expect(r.text, url).toContain('Eve&quot; onmouseover=&quot;alert(1)&#39; &amp;amp;');
    }
    // A preview of hostile markdown, and a form echoing hostile fields back.
    const pv = await submit(s, e, '/app/new', { csrf: e.csrf!, space: q, path: q, content: hostile, message: q, action: 'preview' });
    expect(pv.status).toBeLessThan(500);
    expectNoInjectedMarkup(pv.text, 'preview');
    const bad = await submit(s, e, '/app/agents', {
      csrf: e.csrf!,
      name: `<script>alert(30)</script>`,
      ceiling: 'internal',
      g0_action: 'write',
      g0_scope: q,
      g0_ceiling: q,
    });
    expect(bad.status).toBeLessThan(500);
    expectNoInjectedMarkup(bad.text, 'agent form');
    const post = await submit(s, e, `/app/threads/${page.id}/messages`, {
      csrf: e.csrf!,
      body: `<script>alert(31)</script> @nobody-${q}`,
      kind: q,
      reply_to: q,
    });
    expect(post.status).toBeLessThan(500);
    expectNoInjectedMarkup(post.text, 'thread form');
    // External links open without handing the page to the other site (no window.opener, no referrer).
    const links = [...(await browse(s, o, '/app/p/lab/hostile.md')).text.matchAll(/<a\s[^>]*href="https?:\/\/[^"]*"[^>]*>/g)].map((m) => m[0]);
    expect(links.length).toBeGreaterThan(0);
    for (const a of links) expect(a).toMatch(/rel="noopener noreferrer"/);
    // The rendered page: every link, as the browser resolves it, goes to a web address (the script URLs are not links at all).
    const view = await browse(s, o, '/app/p/lab/hostile.md');
    for (const m of view.text.matchAll(/\s(?:href|src)="([^"]*)"/g)) {
      const u = new URL(unentity(m[1]!), `${s.url}/app/p/lab/hostile.md`);
      expect(['http:', 'https:', 'mailto:'], m[0]).toContain(u.protocol);
    }
  });

  it('a workspace named like markup stays text in the switcher, the invite page and the sign-in page', async () => {
    const evilName = `"><script>alert('ws')</script><img src=x onerror=alert(1)>`;
    const founder = await webPerson(s.url, 'Founder');
    const made = await founder.client.post('/api/v1/workspaces', { name: evilName });
    if (made.status !== 201) {
      // The name is refused outright: nothing to render.
      expect(made.status, made.text).toBe(400);
      return;
    }
    const ws = made.body as { id: string; slug: string };
    const inv = await founder.client.post(`/api/v1/workspaces/${ws.id}/invites`, { role: 'viewer' });
    expect(inv.status, inv.text).toBe(201);
    const token = inv.body.token as string;
    // The founder's own pages carry the name in the switcher; a newcomer sees it on the invite page.
    for (const url of ['/app', '/app/account', `/invite/${token}`, '/login?next=/app']) {
      const r = await browse(s, founder.client, url);
      expect(r.status, url).toBeLessThan(500);
      expectNoInjectedMarkup(r.text, url);
    }
    const fresh = await browse(s, null, `/invite/${token}`);
    expect(fresh.status).toBe(200);
    expectNoInjectedMarkup(fresh.text, 'invite page, signed out');
    expect(fresh.text).toContain('&lt;script&gt;');
    // Switched into it: the navigation names it.
    const sw = await submit(s, founder.client, '/app/workspace', { csrf: founder.client.csrf!, workspace: ws.id });
    expect(sw.status).toBe(303);
    const cookie = `${cookieOf(founder.client)}; ${(sw.headers.getSetCookie().find((c) => c.startsWith('svc_ws=')) ?? '').split(';')[0]}`;
    for (const url of ['/app', '/app/members', '/app/admin', '/app/search?q=x']) {
      const r = await browse(s, null, url, { cookie });
      expect(r.status, url).toBeLessThan(500);
      expectNoInjectedMarkup(r.text, url);
    }
  });

  /* ------------------------------------------- malformed and oversize input */

  it('oversize, wrongly typed and malformed form bodies are 4xx pages, never 500, and change nothing', async () => {
    const o = w.owner.client;
    const before = (await o.get('/api/v1/principals')).body.principals.length;
    const agentForm = (extra: Record<string, string> = {}) =>
      new URLSearchParams({
        csrf: o.csrf!,
        name: 'body-bot',
        ceiling: 'internal',
        g0_action: 'read',
        g0_scope: '*',
        g0_ceiling: 'internal',
        ...extra,
      }).toString();
    const cases: [string, Promise<Answer>, number[]][] = [
      ['huge field', submit(s, o, '/app/agents', { csrf: o.csrf!, name: 'x'.repeat(200 * 1024) }), [413]],
      [
        'huge editor body',
        raw(s, 'POST', '/app/e/handbook/open.md', { c: o, body: `csrf=${o.csrf}&content=${'x'.repeat(3_300_000)}`, type: 'application/x-www-form-urlencoded' }),
        [413],
      ],
      ['text/plain', raw(s, 'POST', '/app/agents', { c: o, body: agentForm(), type: 'text/plain' }), [403, 415]],
      [
        'multipart',
        raw(s, 'POST', '/app/agents', {
          c: o,
          body: '--b\r\nContent-Disposition: form-data; name="csrf"\r\n\r\nx\r\n--b--\r\n',
          type: 'multipart/form-data; boundary=b',
        }),
        [403, 415],
      ],
      ['no content type', raw(s, 'POST', '/app/agents', { c: o, body: agentForm() }), [400, 403, 415]],
      ['broken JSON', raw(s, 'POST', '/app/agents', { c: o, body: '{"csrf":', type: 'application/json' }), [400, 415]],
      [
        'bad percent-encoding',
        raw(s, 'POST', '/app/agents', { c: o, body: `csrf=${o.csrf}&name=%E0%A4%A&ceiling=%`, type: 'application/x-www-form-urlencoded' }),
        [400, 403],
      ],
      [
        'csrf twice',
        submit(s, o, '/app/agents', {
          csrf: [o.csrf!, o.csrf!],
          name: 'twice-bot',
          ceiling: 'internal',
          g0_action: 'read',
          g0_scope: '*',
          g0_ceiling: 'internal',
        }),
        [403],
      ],
      [
        'name twice',
        submit(s, o, '/app/agents', { csrf: o.csrf!, name: ['a-bot', 'b-bot'], ceiling: 'internal', g0_action: 'read', g0_scope: '*', g0_ceiling: 'internal' }),
        [400],
      ],
      ['stepup code array', submit(s, o, '/app/stepup', { csrf: o.csrf!, next: '/app', code: ['1', '2'], password: ['a', 'b'] }), [400]],
      ['inbox ack array', submit(s, o, '/app/inbox/ack', { csrf: o.csrf!, seq: ['1', '2'] }), [303, 400]],
      ['role array', submit(s, o, `/app/members/${w.viewer.id}/role`, { csrf: o.csrf!, role: ['owner', 'editor'] }), [400]],
      [
        'thread fields arrays',
        submit(s, o, `/app/threads/${w.open.id}/messages`, { csrf: o.csrf!, body: ['a', 'b'], kind: ['x', 'y'], reply_to: ['1', '2'] }),
        [400],
      ],
      ['reject reason array', submit(s, o, '/app/proposals/pr_nothing/reject', { csrf: o.csrf!, reason: ['a', 'b'] }), [400, 404]],
    ];
    for (const [what, p, allowed] of cases) {
      const r = await p;
      expect(allowed, `${what}: ${r.status} ${r.text.slice(0, 300)}`).toContain(r.status);
      if (r.status !== 303) expect(r.headers.get('content-type') ?? '', what).toMatch(/^text\/html/);
    }
    const after = (await o.get('/api/v1/principals')).body.principals as { name: string }[];
    expect(after.length).toBe(before);
    expect((await o.get('/api/v1/members')).body.members.find((m: { id: string }) => m.id === w.viewer.id).role).toBe('viewer');
  });

  it('a JSON body is not a form: the form routes of the app refuse it (415) and act on nothing', async () => {
    // A person of their own: the sign-out below must not end the session the other tests use.
    const o = (await webPerson(s.url, 'Jason')).client;
    const before = (await o.get('/api/v1/principals')).body.principals.length;
    const json = (body: unknown) => raw(s, 'POST', '/app/agents', { c: o, body: JSON.stringify(body), type: 'application/json' });
    const fields = { csrf: o.csrf, name: 'json-bot', ceiling: 'internal', g0_action: 'read', g0_scope: '*', g0_ceiling: 'internal' };
    for (const [what, r] of [
      ['JSON form', await json(fields)],
      ['JSON odd types', await json({ ...fields, name: { a: 1 }, ceiling: ['x'], g0_action: 7 })],
      ['JSON sign-out', await raw(s, 'POST', '/app/logout', { c: o, body: JSON.stringify({ csrf: o.csrf }), type: 'application/json' })],
    ] as const) {
      expect(r.status, `${what}: ${r.status} ${r.location ?? ''}`).toBe(415);
    }
    expect((await o.get('/api/v1/principals')).body.principals.length).toBe(before);
    expect((await browse(s, o, '/app')).status).toBe(200);
  });

  it('an editor form with its text missing or repeated is refused, never saved as an empty page', async () => {
    const ed = w.editor.client;
    const p = await write(w.owner.client, 'handbook/keep.md', '# Keep\n\nThis text must survive.\n');
    for (const content of [undefined, ['# One\n', '# Two\n']]) {
      const fields: Record<string, string | string[]> = { csrf: ed.csrf!, id: p.id, base_sha: p.sha, message: 'attack', action: 'save' };
      if (content) fields.content = content;
      const r = await submit(s, ed, '/app/e/handbook/keep.md', fields);
      expect(r.status, JSON.stringify(content)).toBe(400);
    }
    const now = await w.owner.client.get(`/api/v1/nodes/${encodeURIComponent('handbook/keep.md')}`);
    expect(now.body.content).toContain('This text must survive.');
    expect(now.body.commit_sha).toBe(p.sha);
  });

  it('NUL bytes, broken percent-encoding and very long addresses are 4xx, never 500', async () => {
    const o = w.owner.client;
    const gets = [
      '/app/p/handbook/a%00b.md',
      '/app/p/%00',
      '/app/h/handbook/%00.md',
      '/app/t/%00',
      '/app/e/handbook/%00.md',
      '/app/a/handbook/%00.md',
      '/app/s/%00',
      `/app/diff/handbook/open.md?to=${w.open.shas[1]}&from=%00`,
      '/app/search?q=a%00b',
      '/app/search?q=a%00b&mode=fts',
      '/app/proposals/%00',
      '/app/agents/%00',
      '/app/new?space=%00&folder=%00',
      '/app/p/%E0%A4%A',
      '/app/p/%',
      '/app/search?q=%E0%A4%A',
      '/app/search?q=%',
      '/login?next=%',
      '/login?next=%00',
      '/app/stepup?next=%00',
      '/invite/%00',
      `/app/p/${'a/'.repeat(2000)}x.md`,
      `/app/s/${'s'.repeat(5000)}`,
      `/app/t/${'t'.repeat(5000)}`,
      `/app/proposals/${'p'.repeat(5000)}`,
      `/app/inbox/items?after=${'9'.repeat(400)}`,
      '/app/inbox/items?after=-1',
      '/app/h/handbook/open.md?before=%00',
    ];
    // Every failure listed at once (one 500 tends to have siblings).
    const failures: string[] = [];
    for (const url of gets) {
      const r = await browse(s, o, url);
      if (r.status >= 500) failures.push(`GET ${url.slice(0, 120)} → ${r.status}`);
    }
    const posts: [string, Record<string, string>][] = [
      ['/app/new', { csrf: o.csrf!, space: 'lab', path: 'nul\u0000.md', content: '# N\n\nx\u0000y\n', action: 'save' }],
      ['/app/new', { csrf: o.csrf!, space: 'lab', path: 'nul.md', content: '# N\n\nx\u0000y\n', action: 'save' }],
      ['/app/new', { csrf: o.csrf!, space: 'lab', path: 'nul.md', content: '# N\n\nx\u0000y\n', action: 'preview' }],
      [`/app/threads/${w.open.id}/messages`, { csrf: o.csrf!, body: 'nul \u0000 byte', kind: 'comment' }],
      ['/app/agents', { csrf: o.csrf!, name: 'nul\u0000bot', ceiling: 'internal', g0_action: 'read', g0_scope: 'lab\u0000', g0_ceiling: 'internal' }],
      ['/app/invites', { csrf: o.csrf!, role: 'viewer', expires_in_days: '1', email: 'a\u0000@example.com' }],
      ['/app/stepup', { csrf: o.csrf!, next: '/app', password: 'x\u0000y' }],
      ['/app/a/handbook/open.md', { csrf: o.csrf!, id: w.open.id, do: 'move', to: 'handbook/\u0000.md' }],
      ['/app/account/git-tokens', { csrf: o.csrf!, name: 'nul\u0000', expires_in_days: '1' }],
      ['/app/proposals/pr_x%00/reject', { csrf: o.csrf!, reason: 'nul\u0000' }],
      ['/login', { csrf: 'x', email: 'a\u0000@example.com', password: 'x\u0000' }],
    ];
    for (const [url, fields] of posts) {
      const r = await submit(s, o, url, fields);
      if (r.status >= 500) failures.push(`POST ${url} ${JSON.stringify(fields).slice(0, 160)} → ${r.status}`);
    }
    // The same guard answers the JSON API (the error mapping is shared).
    for (const [what, r] of [
      ['REST read', await o.get('/api/v1/nodes/a%00b')],
      ['REST thread', await o.post(`/api/v1/nodes/${w.open.id}/threads`, { body: 'nul \u0000', kind: 'comment' })],
    ] as const) {
      if (r.status >= 500) failures.push(`${what} → ${r.status}`);
    }
    expect(failures).toEqual([]);
    // Cookies an attacker crafted: no session, never a 500.
    for (const cookie of ['svc_session=%00', `svc_session=${'x'.repeat(3000)}`, 'svc_session=ak_fake; svc_csrf=%E0%A4%A', 'svc_session="unterminated']) {
      const r = await browse(s, null, '/app', { cookie });
      expect(r.status, cookie).toBe(303);
    }
  });

  /* ----------------------------------------------------- method confusion */

  it('GET on a POST route changes nothing; HEAD answers headers only; other methods are refused', async () => {
    const c = w.editor.client;
    const tries = [
      `/app/logout?csrf=${c.csrf}`,
      `/app/agents/x/delete?csrf=${c.csrf}&confirm=yes`,
      `/app/inbox/ack?csrf=${c.csrf}&up_to=999999`,
      `/app/threads/${w.open.id}/messages?csrf=${c.csrf}&body=via-get`,
      `/app/proposals/x/accept?csrf=${c.csrf}`,
      `/app/account/totp?csrf=${c.csrf}`,
      `/app/invites?csrf=${c.csrf}&role=owner`,
    ];
    for (const url of tries) {
      const r = await browse(s, c, url);
      expect([404, 405], url).toContain(r.status);
    }
    expect((await browse(s, c, '/app')).status).toBe(200);
    const thread = await w.owner.client.get(`/api/v1/nodes/${w.open.id}/threads`);
    expect(JSON.stringify(thread.body)).not.toContain('via-get');

    const head = await raw(s, 'HEAD', '/app', { c });
    expect(head.status).toBe(200);
    expect(head.text).toBe('');
    expect(head.headers.get('content-security-policy')).toBe(APP_CSP);
    const headOut = await raw(s, 'HEAD', '/app/p/handbook/open.md');
    expect(headOut.status).toBe(303);
    const headHidden = await raw(s, 'HEAD', '/app/p/handbook/plans.md', { c: w.viewer.client });
    expect(headHidden.status).toBe(404);
    for (const method of ['PUT', 'DELETE', 'PATCH', 'OPTIONS']) {
      const r = await raw(s, method, '/app/p/handbook/open.md', {
        c,
        body: method === 'OPTIONS' ? undefined : `csrf=${c.csrf}`,
        type: method === 'OPTIONS' ? undefined : 'application/x-www-form-urlencoded',
      });
      expect([303, 404, 405], method).toContain(r.status);
    }
    // A method override header is not a way around it.
    const override = await raw(s, 'GET', `/app/logout?csrf=${c.csrf}`, { c, headers: { 'x-http-method-override': 'POST' } });
    expect([404, 405]).toContain(override.status);
    expect((await browse(s, c, '/app')).status).toBe(200);
  });

  /* ------------------------------------------------------------ sessions */

  it('stale, stolen-looking and half-finished sessions get nowhere', async () => {
    const o = w.owner.client;
    const count = async () => (await o.get('/api/v1/principals')).body.principals.length as number;
    const before = await count();
    const agentForm = (csrf: string) => ({ csrf, name: 'sess-bot', ceiling: 'internal', g0_action: 'read', g0_scope: '*', g0_ceiling: 'internal' });

    // Signed out: the old cookies open nothing and post nothing.
    const gone = await webPerson(s.url, 'Gone');
    const oldCookies = new Client(s.url);
    for (const [k, v] of gone.client.cookies) oldCookies.cookies.set(k, v);
    expect((await submit(s, gone.client, '/app/logout', { csrf: gone.client.csrf! })).status).toBe(303);
    expect((await browse(s, oldCookies, '/app')).status).toBe(303);
    const late = await submit(s, oldCookies, '/app/agents', agentForm(oldCookies.csrf!));
    expect(late.status).toBe(303);
    expect(late.location).toMatch(/^\/login/);

    // An agent key: not in Authorization, not as the session cookie.
    const agent = await createAgentWithKey(o, [{ action: 'read', ceiling: 'internal' }], { name: 'key-bot', ceiling: 'internal' });
    const afterAgent = await count();
    for (const headers of [{ authorization: `Bearer ${agent.key}` }, { cookie: `svc_session=${agent.key}; svc_csrf=x` }] as Record<string, string>[]) {
      const g = await browse(s, null, '/app', headers);
      expect(g.status).toBe(303);
      const p = await submit(s, null, '/app/agents', agentForm('x'), headers);
      expect(p.status).toBe(303);
      expect(p.location).toMatch(/^\/login/);
    }
    // With a real session cookie, a key in Authorization changes nothing about who acts.
    const withKey = await browse(s, w.viewer.client, '/app/members', { authorization: `Bearer ${agent.key}` });
    expect(withKey.status).toBe(200);
    expect(withKey.text).not.toContain('action="/app/invites"');

    // A session still waiting for its TOTP code.
    const t = await webPerson(s.url, 'Tobi');
    expect((await t.client.post('/api/auth/stepup', { password: WEB_PASSWORD })).status).toBe(200);
    const secret = (await t.client.post('/api/auth/totp/enroll', {})).body.secret as string;
    expect((await t.client.post('/api/auth/totp/enroll', { code: currentTotp(secret) })).status).toBe(200);
    const pending = new Client(s.url);
    const login = await pending.post('/api/auth/login', { email: t.email, password: WEB_PASSWORD });
    expect(login.status, login.text).toBe(200);
    for (const url of ['/app', '/app/account', '/app/agents', '/app/stepup?next=/app']) {
      const r = await browse(s, pending, url);
      expect(r.status, url).toBe(303);
      expect(r.location, url).toMatch(/^\/login/);
    }
    const pendingPost = await submit(s, pending, '/app/agents', agentForm(pending.csrf!));
    expect([303, 401, 403]).toContain(pendingPost.status);
    expect(pendingPost.location ?? '').not.toMatch(/^\/app\/agents\//);
    const stepPending = await submit(s, pending, '/app/stepup', { csrf: pending.csrf!, next: '/app', password: WEB_PASSWORD });
    expect(stepPending.location ?? '').not.toBe('/app');

    // A member removed from the workspace: their open session reads nothing of it any more.
    const inv = await o.post('/api/v1/invites', { role: 'editor' });
    const leaver = await webPerson(s.url, 'Leaver', inv.body.token);
    expect((await browse(s, leaver.client, '/app/p/handbook/open.md')).status).toBe(200);
    expect((await o.delete(`/api/v1/members/${leaver.id}`)).status).toBeLessThan(300);
    const afterRemoval = await browse(s, leaver.client, '/app/p/handbook/open.md');
    expect(afterRemoval.status).toBe(404);
    expect(afterRemoval.text).not.toContain('harbour');
    const leaverPost = await submit(s, leaver.client, `/app/threads/${w.open.id}/messages`, {
      csrf: leaver.client.csrf!,
      body: 'still here?',
      kind: 'comment',
    });
    expect([403, 404]).toContain(leaverPost.status);

    // A valid session with another session's token (the attacker's own), in the field and the cookie.
    const attacker = w.viewer.client;
    const victimSession = o.cookies.get('svc_session')!;
    for (const csrf of [attacker.csrf!, '', 'x'.repeat(43)]) {
      const r = await submit(s, null, '/app/agents', agentForm(csrf), { cookie: `svc_session=${victimSession}; svc_csrf=${csrf}` });
      expect(r.status, csrf).toBe(403);
    }
    expect(await count()).toBe(afterAgent);
    expect(afterAgent).toBe(before + 1);
  });

  it('the workspace switch cannot be pointed at a workspace the person is not in', async () => {
    const v = w.viewer.client;
    const foreignWs = (await w.outsider.client.get('/api/v1/me')).body.workspace.id as string;
    const r = await submit(s, v, '/app/workspace', { csrf: v.csrf!, workspace: foreignWs });
    expect(r.status).toBe(404);
    expect(r.headers.get('set-cookie') ?? '').not.toContain(foreignWs);
    for (const bad of ['', 'ws_', '../x', `${foreignWs}; path=/`, 'x'.repeat(300)]) {
      const b = await submit(s, v, '/app/workspace', { csrf: v.csrf!, workspace: bad });
      expect([400, 404], bad).toContain(b.status);
    }
    // The cookie forged by hand: the app falls back to the person's own workspace and clears it.
    for (const ws of [foreignWs, 'garbage', '%00']) {
      const cookie = `${cookieOf(v)}; svc_ws=${ws}`;
      const home = await browse(s, null, '/app', { cookie });
      expect(home.status, ws).toBe(200);
      expect(home.text, ws).toContain('title="Workspace Olga · viewer"');
      expect(home.text, ws).not.toContain('elsewhere');
      const page = await browse(s, null, '/app/p/elsewhere/private.md', { cookie });
      expect(page.status, ws).toBe(404);
      expect(page.text, ws).not.toContain('wolfram');
      const post = await submit(s, null, `/app/threads/${w.foreign.id}/messages`, { csrf: v.csrf!, body: 'into their workspace', kind: 'comment' }, { cookie });
      expect([403, 404], ws).toContain(post.status);
    }
    const theirs = await w.outsider.client.get(`/api/v1/nodes/${w.foreign.id}/threads`);
    expect(JSON.stringify(theirs.body)).not.toContain('into their workspace');
  });

  it('cross-site form posts are refused even when they carry the token', async () => {
    const o = w.owner.client;
    const before = (await o.get('/api/v1/principals')).body.principals.length;
    const fields = { csrf: o.csrf!, name: 'xsite-bot', ceiling: 'internal', g0_action: 'read', g0_scope: '*', g0_ceiling: 'internal' };
    for (const headers of [
      { 'sec-fetch-site': 'cross-site', origin: 'https://evil.example' },
      { 'sec-fetch-site': 'cross-site' },
      { origin: 'https://evil.example' },
      { origin: 'https://evil.example', referer: 'https://evil.example/attack.html' },
    ] as Record<string, string>[]) {
      const r = await submit(s, o, '/app/agents', fields, headers);
      expect(r.status, JSON.stringify(headers)).toBe(403);
      const out = await submit(s, o, '/app/logout', { csrf: o.csrf! }, headers);
      expect(out.status, JSON.stringify(headers)).toBe(403);
    }
    expect((await browse(s, o, '/app')).status).toBe(200);
    expect((await o.get('/api/v1/principals')).body.principals.length).toBe(before);
    // The same form from this site (as a browser sends it, Origin "null" under no-referrer) works.
    const sameSite: Record<string, string>[] = [
      { 'sec-fetch-site': 'same-origin', origin: 'null' },
      { 'sec-fetch-site': 'same-origin', origin: new URL(s.url).origin },
      {},
    ];
    for (const headers of sameSite) {
      const r = await submit(s, o, '/app/stepup', { csrf: o.csrf!, next: '/app', password: WEB_PASSWORD }, headers);
      expect(r.status, JSON.stringify(headers)).toBe(303);
    }
    // The cookies themselves stay home: SameSite=Lax (a cross-site POST carries none), the session one out of scripts' reach.
    const c = new Client(s.url);
    const lp = await raw(s, 'GET', '/login', { c });
    const pre = lp.headers.getSetCookie().find((x) => x.startsWith('svc_csrf='))!;
    c.cookies.set('svc_csrf', pre.split(';')[0]!.slice('svc_csrf='.length));
    const signIn = await submit(s, c, '/login', { email: w.viewer.email, password: WEB_PASSWORD, csrf: c.csrf! });
    const set = signIn.headers.getSetCookie();
    const session = set.find((x) => x.startsWith('svc_session='))!;
    expect(session).toMatch(/;\s*HttpOnly/i);
    expect(session).toMatch(/;\s*SameSite=Lax/i);
    expect(session).toMatch(/;\s*Path=\//i);
    expect(set.find((x) => x.startsWith('svc_csrf='))).toMatch(/;\s*SameSite=Lax/i);
    // Reading pages from a link on another site still works (a GET changes nothing).
    expect((await browse(s, o, '/app', { 'sec-fetch-site': 'cross-site' })).status).toBe(200);
  });
});

/* ---------------------------------------------------- every route, blindly */

/** A route of the app with its parameters filled in (`:x` → a well-formed id that names nothing, `*` → a page path). */
function fill(route: string): string {
  return route.replace(/:[a-z_]+/gi, 'zz_nothing').replace('*', 'handbook/absent.md');
}

const HOSTILE = `"><script>alert(1)</script><img src=x onerror=alert(2)>`;
const QUERY_NAMES = [
  'q',
  'next',
  'notice',
  'view',
  'status',
  'show',
  'before',
  'to',
  'from',
  'after',
  'confirm',
  'space',
  'folder',
  'mode',
  'cursor',
  'action',
  'principal',
  'workspace',
  'kind',
  'limit',
];

describe.each(testEngines())('every /app route attacked blindly (%s)', (engine) => {
  let s: TestServer;
  let routes: { method: string; url: string }[];

  beforeAll(async () => {
    s = await startTestServer(engine);
    routes = [...new Set(s.app.routeList)]
      .map((r) => {
        const [method, url] = r.split(' ');
        return { method: method!, url: url! };
      })
      .filter((r) => (r.method === 'GET' || r.method === 'POST') && /^\/app(\/|$)/.test(r.url));
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('hostile, repeated and NUL-laden query strings: never a 500, always the headers, never injected markup, never a redirect off the site', async () => {
    const p = await webPerson(s.url, 'Sweep');
    expect(routes.filter((r) => r.method === 'GET').length).toBeGreaterThan(15);
    const variants = [
      QUERY_NAMES.map((n) => `${n}=${encodeURIComponent(HOSTILE)}`).join('&'),
      QUERY_NAMES.map((n) => `${n}=a&${n}=b`).join('&'),
      QUERY_NAMES.map((n) => `${n}=%00`).join('&'),
      QUERY_NAMES.map((n) => `${n}=${encodeURIComponent('//evil.example')}`).join('&'),
      QUERY_NAMES.map((n) => `${n}[x]=1`).join('&'),
    ];
    for (const r of routes.filter((x) => x.method === 'GET')) {
      for (const q of variants) {
        const url = `${fill(r.url)}?${q}`;
        const a = await browse(s, p.client, url);
        expect(a.status, `${url}: ${a.text.slice(0, 300)}`).toBeLessThan(500);
        expect(a.headers.get('content-security-policy'), url).toBe(APP_CSP);
        expect(a.headers.get('cache-control'), url).toBe('no-store');
        expectNoInjectedMarkup(a.text, url);
        expectSameSite(s, a.location, url);
      }
    }
  });

  it('every form route refuses a missing token, another site, and a stranger; hostile fields are never a 500', async () => {
    const p = await webPerson(s.url, 'Poster');
    const posts = routes.filter((r) => r.method === 'POST');
    expect(posts.length).toBeGreaterThan(15);
    // Sign-out last: it ends the session the others use.
    posts.sort((a, b) => Number(a.url === '/app/logout') - Number(b.url === '/app/logout'));
    const fields = Object.fromEntries(
      [
        'name',
        'content',
        'body',
        'reason',
        'role',
        'email',
        'to',
        'do',
        'seq',
        'up_to',
        'code',
        'password',
        'next',
        'workspace',
        'ceiling',
        'id',
        'base_sha',
      ].map((n) => [n, HOSTILE]),
    );
    for (const r of posts) {
      const url = fill(r.url);
      if (r.url === '/app/logout') {
        // Before signing out: whatever the hostile forms stored (a workspace name, a token name…) shows as text.
        for (const page of ['/app', '/app/account', '/app/agents', '/app/members', '/app/admin', '/app/inbox']) {
          const a = await browse(s, p.client, page);
          expect(a.status, page).toBeLessThan(500);
          expectNoInjectedMarkup(a.text, `${page} after the hostile forms`);
        }
      }
      // Signed out: to sign in (or a 400 for a form too malformed to be worth it), never acted on.
      const none = await submit(s, null, url, { csrf: 'x' });
      expect([303, 400], `${url} signed out`).toContain(none.status);
      if (none.status === 303) expect(none.location, url).toMatch(/^\/login/);
      // No token, or the right token from another site: refused (a 400 when the form is malformed before that).
      const noToken = await submit(s, p.client, url, fields);
      expect([400, 403], `${url} without token: ${noToken.text.slice(0, 200)}`).toContain(noToken.status);
      const crossSite = await submit(s, p.client, url, { csrf: p.client.csrf! }, { 'sec-fetch-site': 'cross-site', origin: 'https://evil.example' });
      expect([400, 403], `${url} cross-site`).toContain(crossSite.status);
      for (const a of [noToken, crossSite]) {
        expect(a.headers.get('content-security-policy'), url).toBe(APP_CSP);
        expectNoInjectedMarkup(a.text, url);
      }
      const hostile = await submit(s, p.client, url, { ...fields, csrf: p.client.csrf! });
      expect(hostile.status, `${url} hostile: ${hostile.text.slice(0, 300)}`).toBeLessThan(500);
      expect(hostile.headers.get('content-security-policy'), url).toBe(APP_CSP);
      expectNoInjectedMarkup(hostile.text, url);
      expectSameSite(s, hostile.location, url);
    }
  });
});

/* ---------------------------------------------------------------- browser */

describe.skipIf(!chromiumPresent('app-attack'))('attacking the web app in a browser', () => {
  let s: TestServer;
  let browser: Browser;
  let owner: Person;

  beforeAll(async () => {
    s = await startTestServer('sqlite');
    browser = await launchChromium();
    owner = await webPerson(s.url, 'Olga');
  });
  afterAll(async () => {
    await browser?.close();
    await s?.stop();
  });

  it('a key shown once is gone after leaving the page and coming back with the Back button', async () => {
    const agent = await createAgentWithKey(owner.client, [{ action: 'read', ceiling: 'internal' }], { name: 'back-bot', ceiling: 'internal' });
    const { context, page } = await signedInPage(browser, s.url, owner.email);
    try {
      await page.goto(`/app/agents/${agent.id}`);
      await page.getByLabel('Key name').fill('back-key');
      await page.getByRole('button', { name: 'Mint key' }).click();
      const key = ((await page.locator('#new-key').textContent()) ?? '').trim();
      expect(key).toMatch(/^ak_/);
      await page.getByRole('link', { name: 'Back to back-bot' }).click();
      await page.waitForURL((u) => u.pathname === `/app/agents/${agent.id}`);
      expect(await page.content()).not.toContain(key);
      // Back: the answer was no-store, so the browser does not show it again from its cache; it
      // offers to send the form once more instead (ERR_CACHE_MISS, "Confirm Form Resubmission").
      const back = await page.goBack().then(
        () => null,
        (e: unknown) => String(e),
      );
      if (back === null) expect(await page.content()).not.toContain(key);
      else expect(back).toContain('ERR_CACHE_MISS');
    } finally {
      await context.close();
    }
  });
});
