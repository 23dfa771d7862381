import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, joinAs, signupHuman } from '../support/server.js';
import { basic, commitAll, gitUrl, mintGitToken, rawGet, said, setupGitWorld, stepUp, writeFile, type GitResult, type GitWorld } from './support.js';

/** Issue 15: who may fetch and push, and how refusals look to git and to a raw HTTP client. */

/** A credential as git presents it (in the URL, or as an extra header) and as raw HTTP headers. */
interface Cred {
  about: string;
  /** Basic password embedded in the URL, if any. */
  password?: string;
  /** One header sent as is (Bearer, Cookie). */
  header?: [string, string];
  /** The workspace whose URL is used (default: the suite's workspace). */
  slug?: string;
}

const refs = (slug: string, service = 'git-upload-pack') => `/git/${slug}.git/info/refs?service=${service}`;

function rawHeaders(c: Cred): Record<string, string> {
  if (c.password !== undefined) return { authorization: basic(c.password) };
  if (c.header) return { [c.header[0]]: c.header[1] };
  return {};
}

function gitArgs(c: Cred): string[] {
  return c.header ? ['-c', `http.extraHeader=${c.header[0]}: ${c.header[1]}`] : [];
}

/** git failed on an authentication refusal (and did not hang asking for a password). */
function expectAuthRefused(r: GitResult): void {
  const out = said(r);
  expect(r.code, out).not.toBe(0);
  expect(out).toMatch(/Authentication failed|could not read Username|could not read Password|401/i);
}

describe.each(testEngines())('git credentials and rights (%s)', (engine) => {
  let w: GitWorld;
  /** A clone of the owner's, with one unpushed commit, to push with other credentials. */
  let pending: string;
  let pendingHead: string | null;
  const cred: Record<string, Cred> = {};
  let editorToken: string;
  let viewerToken: string;
  let foreignToken: string;
  let agentKey: string;

  beforeAll(async () => {
    w = await setupGitWorld(engine);
    await w.page('eng/auth/start.md', '# Start\n');

    const agent = await createAgentWithKey(w.owner, [{ action: 'read' }, { action: 'write' }, { action: 'admin' }]);
    agentKey = agent.key;

    const editor = await joinAs(w.owner, w.ws.slug, 'editor');
    editorToken = (await mintGitToken(editor.client)).token;
    const viewer = await joinAs(w.owner, w.ws.slug, 'viewer');
    viewerToken = (await mintGitToken(viewer.client)).token;

    const foreign = await signupHuman(w.s.url, 'Foreign');
    foreignToken = (await mintGitToken(foreign.client)).token;

    const revoked = await mintGitToken(w.owner, { name: 'to revoke' });
    const del = await w.owner.delete(`/api/v1/me/git-tokens/${revoked.id}`);
    expect(del.status, del.text).toBeLessThan(300);

    const expired = await mintGitToken(w.owner, { name: 'to expire', expires_in_days: 1 });
    // No API moves the clock: age the token in the database, as the other suites age keys.
    await w.s.ctx.store.db
      .updateTable('git_tokens')
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where('id', '=', expired.id)
      .execute();

    // Lockdown in a workspace of its own (it drops the other sessions of its members).
    const locked = await signupHuman(w.s.url, 'Locked');
    const doomed = await mintGitToken(locked.client);
    const before = await w.g.git(['ls-remote', gitUrl(w.s.url, locked.workspace.slug, doomed.token)]);
    expect(before.code, said(before)).toBe(0);
    await stepUp(locked.client);
    const lock = await locked.client.post(`/api/v1/workspaces/${locked.workspace.slug}/lockdown`);
    expect(lock.status, lock.text).toBe(200);

    const cookie = [...w.owner.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
    Object.assign(cred, {
      none: { about: 'no credentials' },
      wrong: { about: 'an unknown gt_ token', password: `gt_${'A'.repeat(43)}` },
      empty: { about: 'an empty password', password: '' },
      agentKey: { about: 'an agent key (ak_) as the password', password: agentKey },
      oauth: { about: 'an OAuth token (oa_) as the password', password: `oa_${'Q'.repeat(43)}` },
      bearer: { about: 'the git token as a Bearer header', header: ['Authorization', `Bearer ${w.token}`] },
      cookie: { about: "the owner's session cookie", header: ['Cookie', cookie] },
      revoked: { about: 'a revoked git token', password: revoked.token },
      expired: { about: 'an expired git token', password: expired.token },
      lockedOut: { about: 'a git token minted before a lockdown', password: doomed.token, slug: locked.workspace.slug },
      foreign: { about: "another workspace's git token", password: foreignToken },
    } satisfies Record<string, Cred>);

    pending = await w.clone();
    writeFile(pending, 'eng/auth/pushed.md', '# Must not land\n');
    await commitAll(w.g, pending, 'Pushed with a bad credential');
    pendingHead = await w.remoteHead();
  });
  afterAll(async () => w?.stop());

  const CASES = ['none', 'wrong', 'empty', 'agentKey', 'oauth', 'bearer', 'cookie', 'revoked', 'expired', 'lockedOut', 'foreign'];

  it('the owner token works with any user name', async () => {
    for (const user of ['x', 'git', 'someone@example.com']) {
      const r = await w.g.git(['ls-remote', gitUrl(w.s.url, w.ws.slug, w.token, user)]);
      expect(r.code, `${user}: ${said(r)}`).toBe(0);
      expect(r.stdout).toMatch(/\trefs\/heads\/main$/m);
    }
  });

  it.each(CASES)('%s: fetch is refused with 401 and a Basic challenge', async (name) => {
    const c = cred[name]!;
    const slug = c.slug ?? w.ws.slug;
    const r = await w.g.git([...gitArgs(c), 'ls-remote', gitUrl(w.s.url, slug, c.password)]);
    expectAuthRefused(r);
    expect(r.stdout).not.toMatch(/refs\/heads/);

    for (const service of ['git-upload-pack', 'git-receive-pack']) {
      const res = await rawGet(w.s.url, refs(slug, service), rawHeaders(c));
      expect(res.status, `${c.about} ${service}: ${res.text}`).toBe(401);
      expect(String(res.headers['www-authenticate'])).toMatch(/^Basic realm=/i);
      expect(String(res.headers['content-type'])).toMatch(/^text\/plain/);
      expect(res.text.trim().length).toBeGreaterThan(0);
    }
  });

  it.each(CASES)('%s: push is refused and nothing changes', async (name) => {
    const c = cred[name]!;
    if (c.slug) return; // the locked-out token's workspace is another one; its fetch case covers it
    const r = await w.g.git([...gitArgs(c), 'push', gitUrl(w.s.url, w.ws.slug, c.password), 'HEAD:main'], { cwd: pending });
    expectAuthRefused(r);
    expect(await w.remoteHead()).toBe(pendingHead);
    expect((await w.read('eng/auth/pushed.md')).status).toBe(404);
  });

  it("another workspace's token gets the same answer as an unknown workspace", async () => {
    const here = await rawGet(w.s.url, refs(w.ws.slug), { authorization: basic(foreignToken) });
    const nowhere = await rawGet(w.s.url, refs('no-such-workspace-anywhere'), { authorization: basic(foreignToken) });
    expect(here.status).toBe(401);
    // The message may echo the name the client asked for; apart from that, word for word the same.
    const echo = (text: string, slug: string) => text.split(`${slug}.git`).join('<repo>');
    expect([nowhere.status, nowhere.headers['www-authenticate'], echo(nowhere.text, 'no-such-workspace-anywhere')]).toEqual([
      here.status,
      here.headers['www-authenticate'],
      echo(here.text, w.ws.slug),
    ]);
    // And the owner's valid token on an unknown workspace: no hint that the name is free.
    const unknown = await rawGet(w.s.url, refs('no-such-workspace-anywhere'), { authorization: basic(w.token) });
    expect(unknown.status).toBe(401);
  });

  it.each([
    ['editor', () => editorToken],
    ['viewer', () => viewerToken],
  ])("an %s's own token: fetch and push are refused with 403 and a message git shows", async (role, token) => {
    const ls = await w.g.git(['ls-remote', gitUrl(w.s.url, w.ws.slug, token())]);
    expect(ls.code, said(ls)).not.toBe(0);
    expect(said(ls)).toMatch(/403/);
    expect(ls.stderr, `${role}: ${said(ls)}`).toMatch(/^remote: \S/m);
    const clone = await w.g.git(['clone', gitUrl(w.s.url, w.ws.slug, token()), w.g.path(role)]);
    expect(clone.code, said(clone)).not.toBe(0);

    const push = await w.g.git(['push', gitUrl(w.s.url, w.ws.slug, token()), 'HEAD:main'], { cwd: pending });
    expect(push.code, said(push)).not.toBe(0);
    expect(push.stderr, `${role}: ${said(push)}`).toMatch(/^remote: \S/m);
    expect(await w.remoteHead()).toBe(pendingHead);

    for (const service of ['git-upload-pack', 'git-receive-pack']) {
      const res = await rawGet(w.s.url, refs(w.ws.slug, service), { authorization: basic(token()) });
      expect(res.status, `${role} ${service}: ${res.text}`).toBe(403);
      expect(String(res.headers['content-type'])).toMatch(/^text\/plain/);
      expect(res.text.trim().length).toBeGreaterThan(0);
    }
  });

  it('a valid token answers the smart endpoints with their content types', async () => {
    const up = await rawGet(w.s.url, refs(w.ws.slug), { authorization: basic(w.token) });
    expect(up.status).toBe(200);
    expect(String(up.headers['content-type'])).toBe('application/x-git-upload-pack-advertisement');
    const rp = await rawGet(w.s.url, refs(w.ws.slug, 'git-receive-pack'), { authorization: basic(w.token) });
    expect(rp.status).toBe(200);
    expect(String(rp.headers['content-type'])).toBe('application/x-git-receive-pack-advertisement');
  });

  it('git tokens are listed with hints only, and revoking one is immediate', async () => {
    const t = await mintGitToken(w.owner, { name: 'laptop', expires_in_days: 30 });
    expect(t.token).toMatch(/^gt_/);
    expect(Math.abs(Date.parse(t.body.expires_at) - (Date.now() + 30 * 86_400_000))).toBeLessThan(120_000);
    const list = await w.owner.get('/api/v1/me/git-tokens');
    expect(list.status, list.text).toBe(200);
    expect(list.text).not.toContain(t.token);
    const items: any[] = list.body.tokens ?? list.body.items ?? list.body;
    const mine = items.find((x) => x.id === t.id);
    expect(mine).toMatchObject({ id: t.id, name: 'laptop', expires_at: t.body.expires_at });
    // A hint to recognise the token by (its last characters), never enough to use it.
    expect(mine.hint).toBe(t.body.hint);
    expect(t.token.endsWith(mine.hint.slice(-4))).toBe(true);
    expect(mine.hint.length).toBeLessThan(t.token.length / 2);

    expect((await w.g.git(['ls-remote', w.url(t.token)])).code).toBe(0);
    const del = await w.owner.delete(`/api/v1/me/git-tokens/${t.id}`);
    expect(del.status, del.text).toBeLessThan(300);
    expectAuthRefused(await w.g.git(['ls-remote', w.url(t.token)]));
    const again = await w.owner.get('/api/v1/me/git-tokens');
    const after: any[] = again.body.tokens ?? again.body.items ?? again.body;
    expect(after.some((x) => x.id === t.id && !x.revoked_at)).toBe(false);
  });

  it('a git token opens nothing outside /git: /api/v1 and /mcp answer 401', async () => {
    const bearer = new Client(w.s.url, w.token);
    expect((await bearer.get('/api/v1/whoami')).status).toBe(401);
    expect((await bearer.get('/api/v1/spaces')).status).toBe(401);
    const viaBasic = await rawGet(w.s.url, '/api/v1/whoami', { authorization: basic(w.token) });
    expect(viaBasic.status).toBe(401);
    const mcp = await fetch(`${w.s.url}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${w.token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(mcp.status).toBe(401);
    const mcpBasic = await fetch(`${w.s.url}/mcp`, {
      method: 'POST',
      headers: { authorization: basic(w.token), 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(mcpBasic.status).toBe(401);
  });

  it('the dumb protocol is not served: 404 even with a valid token', async () => {
    const auth = { authorization: basic(w.token) };
    const start = await w.read('eng/auth/start.md');
    const sha = String(start.body.commit_sha);
    for (const p of [
      'HEAD',
      'info/refs',
      'objects/info/packs',
      'objects/info/alternates',
      'config',
      'description',
      `objects/${sha.slice(0, 2)}/${sha.slice(2)}`,
      'refs/heads/main',
    ]) {
      const r = await rawGet(w.s.url, `/git/${w.ws.slug}.git/${p}`, auth);
      expect(r.status, `${p}: ${r.text.slice(0, 200)}`).toBe(404);
    }
  });

  it('path traversal in the URL is never 200 and never 500', async () => {
    const slug = w.ws.slug;
    const attempts = [
      '/git/../etc/passwd',
      '/git/../../../../etc/passwd',
      `/git/${slug}.git/../../etc/passwd`,
      `/git/${slug}.git/../../../../../../etc/passwd`,
      `/git/${slug}.git/%2e%2e/%2e%2e/etc/passwd`,
      `/git/${slug}.git/%2e%2e%2f%2e%2e%2fetc%2fpasswd`,
      `/git/%2e%2e%2f%2e%2e%2fetc%2fpasswd.git/info/refs?service=git-upload-pack`,
      `/git/..%2f${slug}.git/info/refs?service=git-upload-pack`,
      `/git/${slug}.git/info/refs/../../config`,
      `/git/${slug}.git/objects/../config`,
      `/git/${slug}.git/info/refs%00?service=git-upload-pack`,
      `/git/${slug}.git%2f..%2f..%2fconfig`,
      `/git/${slug}.git/info/refs?service=../../../etc/passwd`,
      `/git/${slug}.git/info/refs?service=git-upload-pack%00`,
      `/git/${slug}.git//info/refs?service=git-upload-pack&service=git-receive-pack`,
    ];
    const auths: Record<string, string>[] = [{}, { authorization: basic(w.token) }];
    for (const auth of auths) {
      for (const p of attempts) {
        const r = await rawGet(w.s.url, p, auth);
        const what = `${p} (${Object.keys(auth).length ? 'token' : 'anonymous'}): ${r.status} ${r.text.slice(0, 200)}`;
        expect(r.status, what).not.toBe(200);
        expect(r.status, what).toBeLessThan(500);
        expect(r.text, what).not.toMatch(/root:.*:0:0:|\[core\]/);
      }
    }
  });
});

describe.each(testEngines())('git rate limit (%s)', (engine) => {
  let w: GitWorld;
  beforeAll(async () => {
    w = await setupGitWorld(engine, { RATE_LIMITS: 'on', RATE_LIMIT_GIT_PER_MIN: '3' });
  });
  afterAll(async () => w?.stop());

  it('refuses git requests over the per-IP limit with 429', async () => {
    const results: GitResult[] = [];
    for (let i = 0; i < 8; i++) {
      const r = await w.g.git(['ls-remote', w.url()]);
      results.push(r);
      if (r.code !== 0) break;
    }
    expect(results[0]!.code, said(results[0]!)).toBe(0);
    const last = results[results.length - 1]!;
    expect(last.code, 'never limited').not.toBe(0);
    expect(said(last)).toMatch(/429/);
    const raw = await rawGet(w.s.url, refs(w.ws.slug), { authorization: basic(w.token) });
    expect(raw.status).toBe(429);
    expect(String(raw.headers['retry-after'])).toMatch(/^\d+$/);
    // Another credential from the same address is limited too: the limit is per IP.
    const other = await rawGet(w.s.url, refs(w.ws.slug), {});
    expect(other.status).toBe(429);
  });
});
