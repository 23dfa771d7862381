import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { connectMcp, ok } from '../mcp/support.js';
import { createAgentWithKey, signupHuman } from '../support/server.js';
import { enc, gitUrl, head, log, mintGitToken, setupGitWorld, stepUp, type GitWorld } from './support.js';

/** Issue 15: clone and fetch a workspace's history with the real git CLI. */
describe.each(testEngines())('git clone and fetch (%s)', (engine) => {
  let w: GitWorld;
  beforeAll(async () => {
    w = await setupGitWorld(engine);
  });
  afterAll(async () => w?.stop());

  it('clones an empty workspace: git succeeds, and the clone has no commits and no files', async () => {
    // A workspace of its own, so the order of the tests does not matter.
    const h = await signupHuman(w.s.url, 'Empty');
    const t = await mintGitToken(h.client);
    const dir = w.g.path('empty');
    const r = await w.g.git(['clone', gitUrl(w.s.url, h.workspace.slug, t.token), dir]);
    expect(r.code, r.stderr).toBe(0);
    expect(fs.existsSync(path.join(dir, '.git'))).toBe(true);
    expect(fs.readdirSync(dir).filter((f) => f !== '.git')).toEqual([]);
    expect((await w.g.git(['rev-parse', '--verify', '-q', 'HEAD'], { cwd: dir })).code).not.toBe(0);
    // The branch to commit on is main, the one branch a push may update (not the server's git default).
    expect((await w.g.ok(['symbolic-ref', '--short', 'HEAD'], { cwd: dir })).trim()).toBe('main');
    expect((await w.g.ok(['ls-remote', gitUrl(w.s.url, h.workspace.slug, t.token)])).trim()).not.toMatch(/refs\/heads\/main/);
  });

  it('clones a workspace with pages: fsck --strict passes, files equal REST content, HEAD is the last write', async () => {
    const a = await w.page('eng/clone/alpha.md', '---\ntitle: Alpha\ntags: [ops]\n---\n# Alpha\n\nFirst page.\n');
    const b = await w.page('hr/people/bravo.md', '# Bravo\n\nSecond page.\n');
    // The owner's clone carries secret pages verbatim: fetch needs workspace-wide secret read.
    const sec = await w.page('eng/clone/secret.md', '---\nsensitivity: secret\n---\n# Vault\n\nThe combination is 1234.\n');
    const u = await w.owner.put(`/api/v1/nodes/${a.id}`, { content: '---\ntitle: Alpha\ntags: [ops]\n---\n# Alpha\n\nFirst page, revised.\n' });
    expect(u.status).toBe(200);

    const dir = await w.clone();
    await w.g.ok(['fsck', '--strict', '--no-dangling'], { cwd: dir });
    expect(await head(w.g, dir)).toBe(u.body.commit_sha);
    expect(await head(w.g, dir, 'HEAD@{upstream}')).toBe(u.body.commit_sha);
    expect((await w.g.ok(['symbolic-ref', '--short', 'HEAD'], { cwd: dir })).trim()).toBe('main');
    const files = (await w.g.ok(['ls-files'], { cwd: dir })).split('\n').filter(Boolean).sort();
    expect(files).toEqual(['eng/clone/alpha.md', 'eng/clone/secret.md', 'hr/people/bravo.md']);
    for (const p of [a, b, sec]) {
      const rest = await w.read(p.id);
      expect(fs.readFileSync(path.join(dir, rest.body.path), 'utf8'), rest.body.path).toBe(rest.body.content);
    }
    // Every commit the workspace made is in the clone, newest first, as REST numbered them.
    expect((await log(w.g, dir)).slice(0, 4)).toEqual([u.body.commit_sha, sec.commit_sha, b.commit_sha, a.commit_sha]);
  });

  it('pull after REST writes shows them with identical commit ids', async () => {
    await w.page('eng/pull/before.md', '# Before\n');
    const dir = await w.clone();
    const before = await head(w.g, dir);
    const c = await w.page('eng/pull/charlie.md', '# Charlie\n');
    const u = await w.owner.put(`/api/v1/nodes/${c.id}`, { content: '# Charlie\n\nEdited.\n' });
    const mv = await w.owner.post(`/api/v1/nodes/${c.id}/move`, { to: 'eng/pull/moved/charlie.md' });
    expect(mv.status).toBe(200);
    const d = await w.page('eng/pull/delta.md', '# Delta\n');
    await stepUp(w.owner);
    const del = await w.owner.delete(`/api/v1/nodes/${d.id}`);
    expect(del.status).toBe(200);

    await w.g.ok(['pull', '-q', '--ff-only'], { cwd: dir });
    expect(await head(w.g, dir)).toBe(del.body.commit_sha);
    expect(await log(w.g, dir, undefined, [`${before}..HEAD`])).toEqual([
      del.body.commit_sha,
      d.commit_sha,
      mv.body.commit_sha,
      u.body.commit_sha,
      c.commit_sha,
    ]);
    expect(fs.readFileSync(path.join(dir, 'eng/pull/moved/charlie.md'), 'utf8')).toBe('# Charlie\n\nEdited.\n');
    expect(fs.existsSync(path.join(dir, 'eng/pull/charlie.md'))).toBe(false);
    expect(fs.existsSync(path.join(dir, 'eng/pull/delta.md'))).toBe(false);
    await w.g.ok(['fsck', '--strict', '--no-dangling'], { cwd: dir });
  });

  it('a write through MCP appears on the next fetch with the same commit id', async () => {
    await w.page('eng/mcp/before.md', '# Before\n');
    const dir = await w.clone();
    const agent = await createAgentWithKey(w.owner, [{ action: 'read' }, { action: 'write' }]);
    const mcp = await connectMcp(w.s.url, agent.key);
    try {
      const written = await ok(mcp, 'context_write', { path: 'eng/mcp/written.md', content: '# From an agent\n' });
      const rest = await w.read(written.id);
      await w.g.ok(['pull', '-q', '--ff-only'], { cwd: dir });
      expect(await head(w.g, dir)).toBe(rest.body.commit_sha);
      expect(fs.readFileSync(path.join(dir, 'eng/mcp/written.md'), 'utf8')).toBe('# From an agent\n');
      expect(await log(w.g, dir, 'eng/mcp/written.md')).toEqual(await w.history(written.id));
    } finally {
      await mcp.close();
    }
  });

  it("a page's git log equals its REST history, commit for commit", async () => {
    const e = await w.page('eng/hist/echo.md', '# Echo\n\none\n');
    await w.owner.put(`/api/v1/nodes/${e.id}`, { content: '# Echo\n\ntwo\n' });
    await w.page('eng/hist/other.md', '# Other page, in between\n');
    await w.owner.put(`/api/v1/nodes/${e.id}`, { content: '# Echo\n\nthree\n' });
    const f = await w.page('eng/hist/foxtrot.md', '# Foxtrot\n\nA page that moves, with words enough to be itself.\n');
    await w.owner.put(`/api/v1/nodes/${f.id}`, { content: '# Foxtrot\n\nA page that moves, with words enough to be itself, edited.\n' });
    expect((await w.owner.post(`/api/v1/nodes/${f.id}/move`, { to: 'eng/hist/moved/foxtrot.md' })).status).toBe(200);
    const gone = await w.page('eng/hist/golf.md', '# Golf\n');
    await stepUp(w.owner);
    expect((await w.owner.delete(`/api/v1/nodes/${gone.id}`)).status).toBe(200);

    const dir = await w.clone();
    const restE = await w.history(e.id);
    expect(restE).toHaveLength(3);
    expect(await log(w.g, dir, 'eng/hist/echo.md')).toEqual(restE);
    // A moved page: git follows the rename (same content at the new path).
    const restF = await w.history(f.id);
    expect(restF).toHaveLength(3);
    expect(await log(w.g, dir, 'eng/hist/moved/foxtrot.md', ['--follow'])).toEqual(restF);
    // A deleted page: its history ends in the delete commit on both faces.
    const restG = await w.history(gone.id);
    expect(restG).toHaveLength(2);
    expect(await log(w.g, dir, 'eng/hist/golf.md')).toEqual(restG);
  });

  it.each([
    ['0', false],
    ['2', true],
  ])('speaks protocol version %s', async (version, v2) => {
    const p = await w.page(`eng/proto/v${version}.md`, `# Protocol ${version}\n`);
    const trace = { GIT_TRACE_PACKET: '1' };
    const ls = await w.g.git(['-c', `protocol.version=${version}`, 'ls-remote', w.url(), 'refs/heads/main'], { env: trace });
    expect(ls.code, ls.stderr).toBe(0);
    expect(ls.stdout).toContain(`${p.commit_sha}\trefs/heads/main`);
    // The packet trace shows which protocol the server answered in.
    if (v2) expect(ls.stderr).toMatch(/git< version 2/);
    else expect(ls.stderr).not.toMatch(/git< version 2/);

    const dir = await w.clone({ args: ['-c', `protocol.version=${version}`] });
    expect(await head(w.g, dir)).toBe(p.commit_sha);
    await w.g.ok(['fsck', '--strict', '--no-dangling'], { cwd: dir });
    const next = await w.page(`eng/proto/v${version}-next.md`, '# Next\n');
    await w.g.ok(['-c', `protocol.version=${version}`, 'fetch', '-q'], { cwd: dir });
    expect(await head(w.g, dir, 'origin/main')).toBe(next.commit_sha);
  });

  it('a shallow clone, then --unshallow, brings the older commits', async () => {
    const old = await w.page('eng/shallow/juliet.md', '# Juliet\n');
    const latest = await w.owner.put(`/api/v1/nodes/${enc(old.id)}`, { content: '# Juliet\n\nLater.\n' });
    const dir = w.g.path('shallow');
    await w.g.ok(['clone', '-q', '--depth', '1', w.url(), dir]);
    expect(await log(w.g, dir)).toEqual([latest.body.commit_sha]);
    await w.g.ok(['fetch', '-q', '--unshallow'], { cwd: dir });
    await w.g.ok(['cat-file', '-e', `${old.commit_sha}^{commit}`], { cwd: dir });
    await w.g.ok(['fsck', '--strict', '--no-dangling'], { cwd: dir });
  });

  it('the cache under DATA_DIR/git-cache is only a cache: deleting it loses nothing', async () => {
    await w.page('eng/cache/before.md', '# Before\n');
    const dir = await w.clone();
    const cache = path.join(w.s.ctx.config.dataDir, 'git-cache');
    expect(fs.existsSync(cache), `no cache at ${cache}`).toBe(true);
    fs.rmSync(cache, { recursive: true, force: true });

    // Fetch after the loss, with nothing new: the same head.
    const same = await w.g.git(['fetch'], { cwd: dir });
    expect(same.code, same.stderr).toBe(0);
    expect(await head(w.g, dir, 'origin/main')).toBe(await head(w.g, dir));

    // A REST write, the cache deleted again, then fetch and a fresh clone: both show the write.
    const h = await w.page('eng/cache/hotel.md', '# Hotel\n');
    fs.rmSync(cache, { recursive: true, force: true });
    await w.g.ok(['pull', '-q', '--ff-only'], { cwd: dir });
    expect(await head(w.g, dir)).toBe(h.commit_sha);
    await w.g.ok(['fsck', '--strict', '--no-dangling'], { cwd: dir });
    fs.rmSync(cache, { recursive: true, force: true });
    const fresh = await w.clone();
    expect(await head(w.g, fresh)).toBe(h.commit_sha);
    await w.g.ok(['fsck', '--strict', '--no-dangling'], { cwd: fresh });
    expect(await log(w.g, fresh)).toEqual(await log(w.g, dir));
  });
});

describe.each(testEngines())('git cache location (%s)', (engine) => {
  let w: GitWorld;
  let cacheDir: string;
  beforeAll(async () => {
    cacheDir = fs.mkdtempSync(path.join(fs.realpathSync(process.env.TMPDIR ?? '/tmp'), 'cv-gitcache-'));
    w = await setupGitWorld(engine, { GIT_CACHE_DIR: cacheDir });
  });
  afterAll(async () => {
    await w?.stop();
    fs.rmSync(cacheDir, { recursive: true, force: true });
  });

  it('GIT_CACHE_DIR moves the cache out of DATA_DIR', async () => {
    const p = await w.page('eng/loc/india.md', '# India\n');
    const dir = await w.clone();
    expect(await head(w.g, dir)).toBe(p.commit_sha);
    expect(fs.readdirSync(cacheDir).length).toBeGreaterThan(0);
    expect(fs.existsSync(path.join(w.s.ctx.config.dataDir, 'git-cache'))).toBe(false);
  });
});
