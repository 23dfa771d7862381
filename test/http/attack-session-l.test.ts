import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clearTreeCache } from '../../src/store/git/cache.js';
import { ObjectStore } from '../../src/store/git/object-store.js';
import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { call, connectMcp } from '../mcp/support.js';
import { testEngines } from '../support/engines.js';
import { Client as ClientCtor, createAgentWithKey, startServerOn, type Client, type Res } from '../support/server.js';
import { commitAll, enc, gitUrl, PASSWORD, said, setupGitWorld, writeFile, type GitWorld } from '../git/support.js';

/**
 * Attack session l, on two fresh changes:
 *
 * 1. SQLite group commit (src/store/wal-sync.ts, db.ts withStatementCache, tx.ts inTransaction,
 *    the onSend hook in app.ts): no answer may leave while a write it follows is not on disk,
 *    and once a sync fails nothing is acknowledged again on any face.
 * 2. git tree splicing (src/store/git/codec.ts mergeEntries / findEntry / encodeSorted /
 *    parseTree, tree-paths.ts rewriteTree, tree-deltas.ts encodeTreeDelta's fast path): every
 *    tree a commit builds must be the one git builds, in git's order, and its stored delta must
 *    rebuild it.
 *
 * Held (passing tests): with the disk's fdatasync held, no answer left for REST page writes
 * (create, update, patch, append, move, archive, restore, delete), folder archive, import, log,
 * threads, inbox ack, watches, MCP context_write / collab_post / context_archive, key mint and
 * revocation (REST and the web form), grants, agent delete, sign-up, login, step-up, git-token
 * mint and revoke, session revoke, logout, web sign-in, the web new-page form, proposal accept
 * (REST and web), OAuth client registration (a write outside any transaction) and git push; nor
 * for reads that saw a syncing commit (REST, MCP, git ls-remote, /healthz, REST and MCP inbox
 * long-polls woken by the commit). After a failed sync: no face acknowledged anything (REST, MCP,
 * web, git push, sign-up, login, OAuth registration), reads and /readyz answered 503, nothing hung,
 * no 500, and a restarted node served again. Trees: tricky git-order names, file↔folder swaps,
 * a 1,200-page folder written by 16 writers at once and past the delta chain's limit, pushes
 * into it, renames, moves, deletes and reverts: every intermediate commit's tree equals the
 * model, fsck --strict passes, every delta rebuilds cold, and a fresh cache export clones the same.
 *
 * FOUND, and fixed in the same session (the tests named `found:` failed before the fix):
 * - after a failed sync the onSend hook answers every face in the REST JSON shape: /mcp gets no
 *   JSON-RPC error body, /git no text/plain, the sign-in page no HTML (docs/errors.md);
 * - a background import that meets a failed sync is marked `failed` for good and a restarted node
 *   does not resume it;
 * - a push whose import committed but whose sync failed is told "nothing was changed", and the
 *   restarted node serves that push;
 * - (older code, met on the way) an import with one name over 255 UTF-8 bytes fails whole
 *   instead of skipping that file; a move between x.md and x.md/… is refused as `invalid_path`.
 */

const gitBlobSha = (content: string) => {
  const body = Buffer.from(content, 'utf8');
  return createHash('sha1').update(`blob ${body.length}\0`).update(body).digest('hex');
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `git ls-tree -r -z <rev>`: path → blob sha (no quoting of non-ASCII names). */
async function lsTree(w: GitWorld, dir: string, rev = 'HEAD'): Promise<Map<string, string>> {
  const out = await w.g.ok(['ls-tree', '-r', '-z', '--full-tree', rev], { cwd: dir });
  const m = new Map<string, string>();
  for (const rec of out.split('\0').filter(Boolean)) {
    const tab = rec.indexOf('\t');
    const [mode, type, sha] = rec.slice(0, tab).split(' ');
    expect(mode, rec).toBe('100644');
    expect(type, rec).toBe('blob');
    m.set(rec.slice(tab + 1), sha!);
  }
  return m;
}

/** The live pages of a workspace, as the database holds them. */
async function dbPages(w: GitWorld, workspaceId = w.ws.id): Promise<string[]> {
  const rows = await w.s.ctx.store.db.selectFrom('pages').select('path').where('workspace_id', '=', workspaceId).where('deleted_at', 'is', null).execute();
  return rows.map((r) => r.path).sort();
}

const sorted = (xs: Iterable<string>) => [...xs].sort();

describe.each(testEngines())('attack l: tree splicing through real writes (%s)', (engine) => {
  let w: GitWorld;
  let agent: Client;
  /** A working copy kept across tests and fetched into. */
  let dir: string;

  beforeAll(async () => {
    w = await setupGitWorld(engine);
    agent = (await createAgentWithKey(w.owner, [{ action: 'read' }, { action: 'write' }, { action: 'admin' }, { action: 'propose' }])).client;
    await w.page('base/start.md', '# Start\n');
    dir = await w.clone();
  }, 60_000);
  afterAll(async () => w?.stop());

  /** Fetches main into the kept working copy and checks it out. */
  async function fetchMain(): Promise<string> {
    await w.g.ok(['fetch', '-q', 'origin'], { cwd: dir });
    await w.g.ok(['reset', '-q', '--hard', 'origin/main'], { cwd: dir });
    return (await w.g.ok(['rev-parse', 'HEAD'], { cwd: dir })).trim();
  }

  /** fsck --strict, and the tree at HEAD holds exactly the live pages, with REST's content. */
  async function treeIsSound(opts: { restSample?: number } = {}): Promise<Map<string, string>> {
    const headSha = await fetchMain();
    const fsck = await w.g.git(['fsck', '--strict', '--no-dangling', '--full'], { cwd: dir });
    expect(fsck.code, said(fsck)).toBe(0);
    expect(said(fsck)).not.toMatch(/error|warning|treeNotSorted|duplicate/i);
    const tree = await lsTree(w, dir);
    expect(sorted(tree.keys())).toEqual(await dbPages(w));
    const refs = await w.s.ctx.store.db
      .selectFrom('git_refs')
      .select('sha')
      .where('workspace_id', '=', w.ws.id)
      .where('name', '=', 'refs/heads/main')
      .executeTakeFirst();
    expect(refs?.sha).toBe(headSha);
    const paths = [...tree.keys()];
    const step = opts.restSample ? Math.max(1, Math.floor(paths.length / opts.restSample)) : 1;
    for (let i = 0; i < paths.length; i += step) {
      const p = paths[i]!;
      const r = await agent.get(`/api/v1/nodes/${enc(p)}`);
      expect(r.status, `${p}: ${r.text.slice(0, 200)}`).toBe(200);
      expect(gitBlobSha(r.body.content), p).toBe(tree.get(p));
      expect(fs.readFileSync(path.join(dir, p), 'utf8'), p).toBe(r.body.content);
    }
    return tree;
  }

  /** Every commit recorded in `snapshots` holds exactly that model (paths and blob shas). */
  async function commitsMatch(snapshots: { sha: string; model: Map<string, string>; what: string }[], cwd = dir): Promise<void> {
    for (const snap of snapshots) {
      const t = await lsTree(w, cwd, snap.sha);
      const want = new Map([...snap.model].map(([p, c]) => [p, gitBlobSha(c)]));
      expect(sorted(t.keys()), snap.what).toEqual(sorted(want.keys()));
      for (const [p, sha] of want) expect(t.get(p), `${snap.what}: ${p}`).toBe(sha);
    }
  }

  it('names that sort tricky in git order, in one folder: every intermediate tree is the one git expects', async () => {
    const model = new Map<string, string>([['base/start.md', '# Start\n']]);
    const snapshots: { sha: string; model: Map<string, string>; what: string }[] = [];
    const files = [
      'a.md',
      'a-b.md',
      'a_b.md',
      'a.b.md',
      'A.md',
      'Z.md',
      '0.md',
      '9.md',
      '10.md',
      'a0.md',
      'ab.md',
      'a.md.md',
      'ä.md',
      'é.md',
      'ß.md',
      'Ω.md',
      '中文.md',
      'ﬁ.md',
      '_x.md',
      'aa.md',
      'a-.md',
    ];
    const folders = ['a/x.md', 'a-b/y.md', 'a.b/z.md', 'a0/w.md', 'ä/q.md', 'A/q.md', 'a_/v.md', 'ab.md.d/u.md'];
    const all = [...files, ...folders];
    // A fixed shuffle: not in any sorted order.
    const order = all
      .map((p, i) => ({ p, k: (i * 7919) % 31 }))
      .sort((x, y) => x.k - y.k)
      .map((x) => x.p);
    for (const rel of order) {
      const p = `odd/mix/${rel}`;
      const content = `# ${rel}\n\nBody of ${rel}.\n`;
      const r = await agent.post('/api/v1/nodes', { path: p, content });
      expect(r.status, `${p}: ${r.text}`).toBe(201);
      model.set(p, content);
      snapshots.push({ sha: r.body.commit_sha, model: new Map(model), what: `create ${p}` });
    }
    const id = async (p: string) => (await agent.get(`/api/v1/nodes/${enc(p)}`)).body.id as string;
    const move = async (from: string, to: string) => {
      const r = await agent.post(`/api/v1/nodes/${await id(from)}/move`, { to });
      expect(r.status, `move ${from} → ${to}: ${r.text}`).toBe(200);
      model.set(to, model.get(from)!);
      model.delete(from);
      snapshots.push({ sha: r.body.commit_sha, model: new Map(model), what: `move ${from} → ${to}` });
    };
    const del = async (p: string) => {
      const r = await agent.delete(`/api/v1/nodes/${await id(p)}`);
      expect(r.status, `delete ${p}: ${r.text}`).toBe(200);
      model.delete(p);
      snapshots.push({ sha: r.body.commit_sha, model: new Map(model), what: `delete ${p}` });
    };
    const put = async (p: string, content: string) => {
      const r = await agent.put(`/api/v1/nodes/${await id(p)}`, { content });
      expect(r.status, `put ${p}: ${r.text}`).toBe(200);
      model.set(p, content);
      snapshots.push({ sha: r.body.commit_sha, model: new Map(model), what: `put ${p}` });
    };
    const create = async (p: string, content: string) => {
      const r = await agent.post('/api/v1/nodes', { path: p, content });
      expect(r.status, `create ${p}: ${r.text}`).toBe(201);
      model.set(p, content);
      snapshots.push({ sha: r.body.commit_sha, model: new Map(model), what: `create ${p}` });
    };
    await move('odd/mix/a-b.md', 'odd/mix/a/a-b.md'); // into a folder whose name prefixes it
    await move('odd/mix/a/x.md', 'odd/other/x.md'); // out of it (folder a keeps one page)
    await move('odd/mix/a/a-b.md', 'odd/mix/a-b.md'); // back: folder a disappears
    await del('odd/mix/a.b/z.md'); // the last page of a folder: the folder disappears
    await create('odd/mix/a.b/z.md', '# z again\n'); // recreated
    await put('odd/mix/a.md', '# a, edited\n');
    await put('odd/mix/ä.md', '# ä, edited\n');
    await move('odd/mix/中文.md', 'odd/mix/中文/中文.md');
    await move('odd/mix/A.md', 'odd/mix/a/A.md'); // folder a again, under a new name
    await del('odd/mix/ä/q.md');
    await move('odd/other/x.md', 'odd/mix/ä/x.md'); // the folder ä comes back
    await move('odd/mix/Z.md', 'odd/mix/z.md'); // a rename by case only
    await move('odd/mix/9.md', 'odd/mix/a.md.d.md'); // far in git order, same folder
    await del('odd/mix/0.md');
    await create('odd/mix/0/0.md', '# zero folder\n');

    await treeIsSound();
    await commitsMatch(snapshots);
  });

  it('file ↔ folder collisions are refused cleanly (no 500), change nothing, and the freed name can be reused', async () => {
    const head = async () => (await w.s.ctx.store.db.selectFrom('git_refs').select('sha').where('workspace_id', '=', w.ws.id).executeTakeFirst())?.sha;
    const x = await agent.post('/api/v1/nodes', { path: 'odd/coll/x.md', content: '# x\n' });
    expect(x.status).toBe(201);
    const g = await agent.post('/api/v1/nodes', { path: 'odd/coll/f.md/g.md', content: '# g\n' });
    expect(g.status).toBe(201);
    const before = await head();
    const refused = async (r: Res, what: string) => {
      expect([400, 409], `${what}: ${r.status} ${r.text}`).toContain(r.status);
      expect(typeof r.body?.error?.code, what).toBe('string');
      expect(await head(), what).toBe(before);
    };
    // A page under a page's name, and a page where a folder is.
    await refused(await agent.post('/api/v1/nodes', { path: 'odd/coll/x.md/y.md', content: '# y\n' }), 'create under a page');
    await refused(await agent.post('/api/v1/nodes', { path: 'odd/coll/f.md', content: '# f\n' }), 'create over a folder');
    await refused(await agent.post(`/api/v1/nodes/${x.body.id}/move`, { to: 'odd/coll/f.md' }), 'move onto a folder');
    await refused(await agent.post(`/api/v1/nodes/${g.body.id}/move`, { to: 'odd/coll/x.md/g.md' }), 'move under a page');
    await refused(
      await agent.post('/api/v1/proposals', { path: 'odd/coll/x.md/z.md', content: '# z\n' }).then(async (p) => {
        // A proposal may be taken; accepting it must then be refused the same way.
        if (p.status !== 201) return p;
        return w.owner.post(`/api/v1/proposals/${p.body.id}/accept`);
      }),
      'a proposal under a page, accepted',
    );
    expect(await dbPages(w)).not.toContain('odd/coll/x.md/y.md');

    // Freed: the folder's last page goes, then a page takes its name (and the other way round).
    expect((await agent.delete(`/api/v1/nodes/${g.body.id}`)).status).toBe(200);
    expect((await agent.post('/api/v1/nodes', { path: 'odd/coll/f.md', content: '# f is a page now\n' })).status).toBe(201);
    expect((await agent.delete(`/api/v1/nodes/${x.body.id}`)).status).toBe(200);
    expect((await agent.post('/api/v1/nodes', { path: 'odd/coll/x.md/y.md', content: '# y under x.md\n' })).status).toBe(201);
    // Case differs: two names to git (and to this service, or it refuses: either way a sound tree).
    const upper = await agent.post('/api/v1/nodes', { path: 'odd/coll/X.md', content: '# X\n' });
    expect([201, 409], upper.text).toContain(upper.status);
    await treeIsSound();
  });

  // FOUND (tree-paths.ts buildChangeTree, older than the two changes): a move whose old path is a
  // folder of its new path, or the other way round, is refused as 400 `invalid_path` "… is both a
  // file and a folder in one change set", though both paths are valid, the result is a valid tree,
  // and a git push makes the very same change (next test).
  it('found: a page moves into a folder named after it (x.md → x.md/x.md) and back out (y.md/y.md → y.md)', async () => {
    const x = await agent.post('/api/v1/nodes', { path: 'odd/self/x.md', content: '# x\n' });
    expect(x.status).toBe(201);
    const m1 = await agent.post(`/api/v1/nodes/${x.body.id}/move`, { to: 'odd/self/x.md/x.md' });
    expect(m1.status, m1.text).toBe(200);
    const y = await agent.post('/api/v1/nodes', { path: 'odd/self/y.md/y.md', content: '# y\n' });
    expect(y.status).toBe(201);
    const m2 = await agent.post(`/api/v1/nodes/${y.body.id}/move`, { to: 'odd/self/y.md' });
    expect(m2.status, m2.text).toBe(200);
    await treeIsSound();
  });

  it('a git push turns a file into a folder (and back) in one commit; REST writes continue on the pushed trees', async () => {
    await fetchMain();
    writeFile(dir, 'odd/push/p.md', '# p\n');
    writeFile(dir, 'odd/push/q/one.md', '# one\n');
    await commitAll(w.g, dir, 'p file, q folder');
    let r = await w.g.git(['push', '-q', 'origin', 'main'], { cwd: dir });
    expect(r.code, said(r)).toBe(0);
    fs.rmSync(path.join(dir, 'odd/push/p.md'));
    writeFile(dir, 'odd/push/p.md/inner.md', '# inner\n');
    fs.rmSync(path.join(dir, 'odd/push/q'), { recursive: true });
    writeFile(dir, 'odd/push/q.md', '# q is a page now\n');
    writeFile(dir, 'odd/push/q/two.md', '# two\n');
    await commitAll(w.g, dir, 'swap');
    r = await w.g.git(['push', '-q', 'origin', 'main'], { cwd: dir });
    expect(r.code, said(r)).toBe(0);
    // REST writes beside, into and around the pushed trees.
    for (const p of ['odd/push/p.md/zz.md', 'odd/push/p-.md', 'odd/push/q/a.md', 'odd/push/p0.md']) {
      const c = await agent.post('/api/v1/nodes', { path: p, content: `# ${p}\n` });
      expect(c.status, `${p}: ${c.text}`).toBe(201);
    }
    const one = await agent.get(`/api/v1/nodes/${enc('odd/push/p.md/inner.md')}`);
    expect((await agent.post(`/api/v1/nodes/${one.body.id}/move`, { to: 'odd/push/q/inner.md' })).status).toBe(200);
    await treeIsSound();
  });

  it('trees that come back: a page created, deleted and created again, moved there and back, edited and reverted; every version rebuilds cold', async () => {
    const model = new Map<string, string>();
    for (const p of await dbPages(w)) model.set(p, (await agent.get(`/api/v1/nodes/${enc(p)}`)).body.content);
    const snapshots: { sha: string; model: Map<string, string>; what: string }[] = [];
    const rec = (sha: string, what: string) => snapshots.push({ sha, model: new Map(model), what });
    for (let i = 0; i < 8; i++) {
      const c = await agent.post('/api/v1/nodes', { path: `back/f/n${i}.md`, content: `# n${i}\n` });
      expect(c.status).toBe(201);
      model.set(`back/f/n${i}.md`, `# n${i}\n`);
      rec(c.body.commit_sha, `create n${i}`);
    }
    for (let round = 0; round < 3; round++) {
      const c = await agent.post('/api/v1/nodes', { path: 'back/f/x.md', content: '# x\n' });
      expect(c.status, c.text).toBe(201);
      model.set('back/f/x.md', '# x\n');
      rec(c.body.commit_sha, `create x ${round}`);
      const m1 = await agent.post(`/api/v1/nodes/${c.body.id}/move`, { to: 'back/g/x.md' });
      expect(m1.status, m1.text).toBe(200);
      model.delete('back/f/x.md');
      model.set('back/g/x.md', '# x\n');
      rec(m1.body.commit_sha, `move x out ${round}`);
      const m2 = await agent.post(`/api/v1/nodes/${c.body.id}/move`, { to: 'back/f/x.md' });
      expect(m2.status, m2.text).toBe(200);
      model.delete('back/g/x.md');
      model.set('back/f/x.md', '# x\n');
      rec(m2.body.commit_sha, `move x back ${round}`);
      const u1 = await agent.put(`/api/v1/nodes/${c.body.id}`, { content: '# x, changed\n' });
      model.set('back/f/x.md', '# x, changed\n');
      rec(u1.body.commit_sha, `edit x ${round}`);
      const u2 = await agent.put(`/api/v1/nodes/${c.body.id}`, { content: '# x\n' });
      model.set('back/f/x.md', '# x\n');
      rec(u2.body.commit_sha, `revert x ${round}`);
      const d = await agent.delete(`/api/v1/nodes/${c.body.id}`);
      expect(d.status, d.text).toBe(200);
      model.delete('back/f/x.md');
      rec(d.body.commit_sha, `delete x ${round}`);
    }
    clearTreeCache();
    const trees = await w.s.ctx.store.db.selectFrom('git_objects').select('sha').where('workspace_id', '=', w.ws.id).where('type', '=', 'tree').execute();
    for (const t of trees) {
      clearTreeCache();
      expect(await new ObjectStore(w.s.ctx.store.db, w.ws.id).getTree(t.sha), t.sha).not.toBeNull();
    }
    await treeIsSound();
    await commitsMatch(snapshots);
  });

  it('a folder of 1,200 pages: pushed whole, then 16 writers at once, 90 writes past the delta chain, moves and deletes; every tree rebuilds from the database', async () => {
    await fetchMain();
    const model = new Map<string, string>();
    for (const p of await dbPages(w)) model.set(p, fs.readFileSync(path.join(dir, p), 'utf8'));
    const N = 1200;
    for (let i = 0; i < N; i++) {
      const p = `big/f/p${String(i).padStart(4, '0')}.md`;
      const c = `# Page ${i}\n\nBig folder page ${i}.\n`;
      writeFile(dir, p, c);
      model.set(p, c);
    }
    // Neighbours in git order of what REST writes later: p.md, p-1.md, p/ (a folder), P.md, ü.md.
    for (const [p, c] of [
      ['big/f/p.md', '# p\n'],
      ['big/f/p-1.md', '# p-1\n'],
      ['big/f/p/inner.md', '# inner\n'],
      ['big/f/P.md', '# P\n'],
      ['big/f/ü0001.md', '# ü\n'],
    ] as const) {
      writeFile(dir, p, c);
      model.set(p, c);
    }
    await commitAll(w.g, dir, 'big folder');
    const r = await w.g.git(['push', '-q', 'origin', 'main'], { cwd: dir });
    expect(r.code, said(r)).toBe(0);
    expect(sorted(model.keys())).toEqual(await dbPages(w));

    // 16 writers at once into the big folder: new names interleaved with the pushed ones.
    const news = Array.from({ length: 16 }, (_, i) => `big/f/p${String(i * 75).padStart(4, '0')}a.md`);
    const created = await Promise.all(news.map((p) => agent.post('/api/v1/nodes', { path: p, content: `# ${p}\n` })));
    expect(created.map((x) => x.status)).toEqual(Array(16).fill(201));
    for (const p of news) model.set(p, `# ${p}\n`);
    // 16 updates at once of pushed pages.
    const upd = Array.from({ length: 16 }, (_, i) => `big/f/p${String(i * 71 + 3).padStart(4, '0')}.md`);
    const updated = await Promise.all(upd.map(async (p) => agent.put(`/api/v1/nodes/${enc(p)}`, { content: `# ${p}\n\nupdated at once\n` })));
    expect(updated.map((x) => `${x.status} ${x.status === 200 ? '' : x.text}`)).toEqual(Array(16).fill('200 '));
    for (const p of upd) model.set(p, `# ${p}\n\nupdated at once\n`);
    // 8 creates of one path at once: exactly one lands.
    const same = await Promise.all(Array.from({ length: 8 }, (_, i) => agent.post('/api/v1/nodes', { path: 'big/f/p0600b.md', content: `# same ${i}\n` })));
    expect(same.filter((x) => x.status === 201)).toHaveLength(1);
    expect(same.filter((x) => x.status >= 500)).toHaveLength(0);
    model.set('big/f/p0600b.md', same.find((x) => x.status === 201)!.body.content);

    // Sequential writes, each a commit of a known tree.
    const snapshots: { sha: string; model: Map<string, string>; what: string }[] = [];
    const rec = (sha: string, what: string) => snapshots.push({ sha, model: new Map(model), what });
    for (let i = 0; i < 90; i++) {
      const p = `big/f/p${String((i * 17) % N).padStart(4, '0')}.md`;
      const content = `# ${p}\n\nsequential ${i}\n`;
      const u = await agent.put(`/api/v1/nodes/${enc(p)}`, { content });
      expect(u.status, u.text).toBe(200);
      model.set(p, content);
      rec(u.body.commit_sha, `put ${i} ${p}`);
    }
    for (const [from, to] of [
      ['big/f/p0001.md', 'big/g/p0001.md'],
      ['big/f/p.md', 'big/f/p/p.md'],
      ['big/f/p/inner.md', 'big/g/inner.md'],
      ['big/f/P.md', 'big/P.md'],
      ['big/f/p1199.md', 'big/f/p1199/x.md'],
      ['big/g/p0001.md', 'big/f/p0001.md'],
      // Renames inside the folder: one merge removes and adds, far apart in git order.
      ['big/f/p0002.md', 'big/f/a0002.md'],
      ['big/f/p0004.md', 'big/f/zz.md'],
      ['big/f/p0005.md', 'big/f/P0005.md'],
      ['big/f/p0006.md', 'big/f/p0006-.md'],
    ] as const) {
      const m = await agent.post(`/api/v1/nodes/${enc(from)}/move`, { to });
      expect(m.status, `${from} → ${to}: ${m.text}`).toBe(200);
      model.set(to, model.get(from)!);
      model.delete(from);
      rec(m.body.commit_sha, `move ${from} → ${to}`);
    }
    for (const p of ['big/f/p0000.md', 'big/f/p/p.md', 'big/f/ü0001.md', 'big/g/inner.md']) {
      const d = await agent.delete(`/api/v1/nodes/${enc(p)}`);
      expect(d.status, `${p}: ${d.text}`).toBe(200);
      model.delete(p);
      rec(d.body.commit_sha, `delete ${p}`);
    }

    // Cold reads: every version rebuilt from the stored deltas, not from the process's cache.
    clearTreeCache();
    for (let k = 0; k < snapshots.length; k += 7) {
      const snap = snapshots[k]!;
      const wrote = /^(?:put \d+|move \S+ →) (\S+)$/.exec(snap.what)?.[1];
      const probes = [...snap.model.keys()].filter((p) => p.startsWith('big/') && model.has(p)).filter((_, i) => i % 301 === k % 301);
      if (wrote && model.has(wrote)) probes.push(wrote);
      for (const p of probes) {
        const atRead = await agent.get(`/api/v1/nodes/${enc(p)}?at=${snap.sha}`);
        expect(atRead.status, `${p} at ${snap.what}: ${atRead.text.slice(0, 200)}`).toBe(200);
        expect(atRead.body.content, `${p} at ${snap.what}`).toBe(snap.model.get(p));
      }
    }
    // History and a diff of a page written many times in the big folder.
    const hist = await agent.get(`/api/v1/nodes/${enc('big/f/p0017.md')}/history?limit=200`);
    expect(hist.status, hist.text).toBe(200);
    const versions = hist.body.versions as { commit_sha: string }[];
    expect(versions.length).toBeGreaterThanOrEqual(2);
    const diff = await w.owner.get(`/api/v1/nodes/${hist.body.id}/diff?from=${versions.at(-1)!.commit_sha}&to=${versions[0]!.commit_sha}`);
    expect(diff.status, diff.text).toBe(200);
    expect(diff.body.from_content).toBe('# Page 17\n\nBig folder page 17.\n');
    expect(diff.body.to_content).toBe(model.get('big/f/p0017.md'));

    // Every tree object of the workspace rebuilds to its own id from the database alone.
    clearTreeCache();
    const trees = await w.s.ctx.store.db
      .selectFrom('git_objects')
      .select(['sha', 'depth'])
      .where('workspace_id', '=', w.ws.id)
      .where('type', '=', 'tree')
      .execute();
    // The chain reached its limit (MAX_DELTA_DEPTH 64) and was re-based on its full copy after it.
    expect(Math.max(...trees.map((t) => Number(t.depth)))).toBe(64);
    // Each delta tree rebuilt on its own (every third one, and the deepest), from a cold cache.
    const deltas = trees.filter((t) => Number(t.depth) > 0);
    for (const t of deltas.filter((x, i) => i % 3 === 0 || Number(x.depth) >= 60)) {
      clearTreeCache();
      const got = await new ObjectStore(w.s.ctx.store.db, w.ws.id).getTree(t.sha);
      expect(got, t.sha).not.toBeNull();
    }

    // A fresh cache repository (exported from the database, deltas rebuilt) clones the same history.
    clearTreeCache();
    fs.rmSync(path.join(w.s.ctx.config.git.cacheDir, `${w.ws.id}.git`), { recursive: true, force: true });
    const fresh = await w.clone();
    const fsck = await w.g.git(['fsck', '--strict', '--no-dangling', '--full'], { cwd: fresh });
    expect(fsck.code, said(fsck)).toBe(0);
    expect(sorted((await lsTree(w, fresh)).keys())).toEqual(sorted(model.keys()));
    await commitsMatch(snapshots, fresh);
    const mainRef = await w.s.ctx.store.db
      .selectFrom('git_refs')
      .select('sha')
      .where('workspace_id', '=', w.ws.id)
      .where('name', '=', 'refs/heads/main')
      .executeTakeFirst();
    expect((await w.g.ok(['rev-parse', 'HEAD'], { cwd: fresh })).trim()).toBe(mainRef?.sha);

    // A push touching the big folder on top of all that, then REST writes into it.
    await fetchMain();
    for (const p of ['big/f/p0100.md', 'big/f/p0200.md', 'big/f/p0017.md']) {
      writeFile(dir, p, `# ${p}\n\npushed edit\n`);
      model.set(p, `# ${p}\n\npushed edit\n`);
    }
    for (const p of ['big/f/p0300.md', 'big/f/p0301.md']) {
      fs.rmSync(path.join(dir, p));
      model.delete(p);
    }
    for (const p of ['big/f/p0300-b.md', 'big/f/p0300/x.md']) {
      writeFile(dir, p, `# ${p}\n`);
      model.set(p, `# ${p}\n`);
    }
    await commitAll(w.g, dir, 'touch the big folder');
    const r2 = await w.g.git(['push', '-q', 'origin', 'main'], { cwd: dir });
    expect(r2.code, said(r2)).toBe(0);
    clearTreeCache();
    for (const p of ['big/f/p0300.md', 'big/f/p0300/y.md', 'big/f/p0301-.md']) {
      const c = await agent.post('/api/v1/nodes', { path: p, content: `# ${p} by REST\n` });
      expect(c.status, `${p}: ${c.text}`).toBe(201);
      model.set(p, `# ${p} by REST\n`);
    }
    const tree = await treeIsSound({ restSample: 40 });
    expect(sorted(tree.keys())).toEqual(sorted(model.keys()));
    for (const [p, c] of model) expect(tree.get(p), p).toBe(gitBlobSha(c));
  }, 120_000);
});

describe.each(testEngines())('attack l: hostile input around the tree writer (%s)', (engine) => {
  let w: GitWorld;
  let agent: Client;
  let mcp: McpClient;
  let dir: string;
  const headNow = async () =>
    (await w.s.ctx.store.db.selectFrom('git_refs').select('sha').where('workspace_id', '=', w.ws.id).where('name', '=', 'refs/heads/main').executeTakeFirst())
      ?.sha;

  beforeAll(async () => {
    w = await setupGitWorld(engine);
    const a = await createAgentWithKey(w.owner, [{ action: 'read' }, { action: 'write' }, { action: 'admin' }]);
    agent = a.client;
    mcp = await connectMcp(w.s.url, a.key);
    await w.page('h/base.md', '# Base\n');
    dir = await w.clone();
  }, 60_000);
  afterAll(async () => {
    await mcp?.close().catch(() => undefined);
    await w?.stop();
  });

  it('names over 255 bytes of UTF-8 (under 100 characters): refused as 400 on every way in, or stored and readable — never a 500 or a page that cannot be read', async () => {
    const long = `${'中'.repeat(90)}.md`; // 93 characters, 273 bytes
    const longFolder = '中'.repeat(90); // a folder segment of 270 bytes
    expect(Buffer.byteLength(long)).toBeGreaterThan(255);
    const c1 = await agent.post('/api/v1/nodes', { path: `h/${long}`, content: '# long\n' });
    expect(c1.status, c1.text).toBe(400);
    expect(c1.body.error.code).toBe('invalid_path');
    const c2 = await agent.post('/api/v1/nodes', { path: `h/${longFolder}/x.md`, content: '# long\n' });
    expect(c2.status, c2.text).toBe(400);
    const base = await agent.get(`/api/v1/nodes/${enc('h/base.md')}`);
    const mv = await agent.post(`/api/v1/nodes/${base.body.id}/move`, { to: `h/${long}` });
    expect(mv.status, mv.text).toBe(400);
    const m = await call(mcp, 'context_write', { path: `h/${long}`, content: '# long\n' });
    expect(m.isError).toBe(true);
    expect(m.text).toMatch(/^invalid_path: /);
    const imp = await w.owner.post('/api/v1/import', {
      space: 'h',
      files: [
        { path: long, content: '# long\n' },
        { path: 'ok.md', content: '# ok\n' },
      ],
    });
    expect(imp.status, imp.text).toBeLessThan(500);
    expect(await dbPages(w)).not.toContain(`h/${long}`);

    // Through git: a tree written by hand (no file system holds such a name).
    await w.g.ok(['fetch', '-q', 'origin'], { cwd: dir });
    await w.g.ok(['reset', '-q', '--hard', 'origin/main'], { cwd: dir });
    const blob = (await w.g.ok(['hash-object', '-w', '--stdin'], { cwd: dir, input: '# long by git\n' })).trim();
    const sub = (await w.g.ok(['mktree'], { cwd: dir, input: `100644 blob ${blob}\t${long}\n` })).trim();
    const rootLines = (await w.g.ok(['ls-tree', 'HEAD'], { cwd: dir })).split('\n').filter((l) => l && !l.endsWith('\tlng'));
    const root = (await w.g.ok(['mktree'], { cwd: dir, input: `${[...rootLines, `040000 tree ${sub}\tlng`].join('\n')}\n` })).trim();
    const commit = (await w.g.ok(['commit-tree', root, '-p', 'HEAD', '-m', 'long name'], { cwd: dir })).trim();
    const headBeforePush = await headNow();
    const pushed = await w.g.git(['push', 'origin', `${commit}:refs/heads/main`], { cwd: dir });
    const pages = await dbPages(w);
    if (pushed.code === 0) {
      // Taken: then it is a page like any other, readable and writable.
      expect(pages).toContain(`lng/${long}`);
      const r = await agent.get(`/api/v1/nodes/${enc(`lng/${long}`)}`);
      expect(r.status, r.text).toBe(200);
      const u = await agent.put(`/api/v1/nodes/${r.body.id}`, { content: '# long, edited\n' });
      expect(u.status, u.text).toBe(200);
    } else {
      expect(said(pushed)).toMatch(/remote: /);
      expect(await headNow()).toBe(headBeforePush);
      expect(pages).not.toContain(`lng/${long}`);
    }
  });

  // FOUND (not from the two changes; met on the way): page paths allow 100 characters a segment
  // (docs/api.md "Limits"), but the tree writer refuses a name over 255 bytes of UTF-8
  // (codec.ts validateName). REST, MCP and git answer that as a clean 400 / refusal, but an
  // import does not skip the file as it skips other bad names (docs/api.md "Import": "Skipped,
  // with the reason"): the whole batch fails and nothing of it is imported, good files included.
  it('found: an import holding one name over 255 bytes skips that file and imports the rest', async () => {
    const long = `${'語'.repeat(90)}.md`;
    const imp = await w.owner.post('/api/v1/import', {
      space: 'h',
      files: [
        { path: 'imp/good-1.md', content: '# good 1\n' },
        { path: `imp/${long}`, content: '# long\n' },
        { path: 'imp/good-2.md', content: '# good 2\n' },
      ],
    });
    expect(imp.status, imp.text).toBe(200);
    expect(imp.body.status, JSON.stringify(imp.body).slice(0, 400)).toBe('done');
    expect(imp.body.created).toBe(2);
    expect(imp.body.skipped.map((x: { path: string }) => x.path).join('\n')).toContain(long);
    const pages = await dbPages(w);
    expect(pages).toContain('h/imp/good-1.md');
    expect(pages).toContain('h/imp/good-2.md');
  });

  it('oversize bodies: 413 before anything is written', async () => {
    const before = await headNow();
    const big = await agent.post('/api/v1/nodes', { path: 'h/big.md', content: `# Big\n${'x'.repeat(3 * 1024 * 1024 + 10)}` });
    expect(big.status).toBe(413);
    const page = await agent.post('/api/v1/nodes', { path: 'h/big.md', content: `# Big\n${'é'.repeat(512 * 1024)}` }); // 1 MiB + 6 bytes
    expect(page.status, page.text.slice(0, 200)).toBe(413);
    expect(page.body.error.code).toBe('payload_too_large');
    const nested = await agent.post('/api/v1/nodes', { path: `h/${Array.from({ length: 11 }, (_, i) => `d${i}`).join('/')}/deep.md`, content: '# deep\n' });
    expect(nested.status, nested.text).toBe(400);
    expect(await headNow()).toBe(before);
  });

  it('replays: the same create, update, move and delete sent twice make one commit each', async () => {
    const c = await agent.post('/api/v1/nodes', { path: 'h/rep/a.md', content: '# A\n' });
    expect(c.status).toBe(201);
    const c2 = await agent.post('/api/v1/nodes', { path: 'h/rep/a.md', content: '# A\n' });
    expect(c2.status, c2.text).toBe(409);
    const u1 = await agent.put(`/api/v1/nodes/${c.body.id}`, { content: '# A2\n', base_sha: c.body.commit_sha });
    expect(u1.status).toBe(200);
    const u2 = await agent.put(`/api/v1/nodes/${c.body.id}`, { content: '# A2\n', base_sha: c.body.commit_sha });
    expect(u2.status, u2.text).toBeLessThan(500);
    expect(u2.body.changed ?? false, u2.text).toBe(false);
    expect(await headNow()).toBe(u1.body.commit_sha);
    const m1 = await agent.post(`/api/v1/nodes/${c.body.id}/move`, { to: 'h/rep2/a.md' });
    expect(m1.status).toBe(200);
    const m2 = await agent.post(`/api/v1/nodes/${c.body.id}/move`, { to: 'h/rep2/a.md' });
    expect(m2.status, m2.text).toBeLessThan(500);
    expect(await headNow()).toBe(m1.body.commit_sha);
    const d1 = await agent.delete(`/api/v1/nodes/${c.body.id}`);
    expect(d1.status).toBe(200);
    const d2 = await agent.delete(`/api/v1/nodes/${c.body.id}`);
    expect(d2.status).toBe(404);
    expect(await headNow()).toBe(d1.body.commit_sha);
    const hist = await w.s.ctx.store.db.selectFrom('page_versions').select('commit_sha').where('page_id', '=', c.body.id).execute();
    expect(hist).toHaveLength(4);
  });

  it('a storm of 16 writers on one small folder: pages appear, move between folders, and the last page of a folder goes; every answer is a success or a clean refusal, and the tree is what the pages say', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push((await agent.post('/api/v1/nodes', { path: `h/st/a/p${i}.md`, content: `# p${i}\n` })).body.id);
    const ops: (() => Promise<Res>)[] = [];
    for (let i = 0; i < 6; i++) {
      ops.push(() => agent.post(`/api/v1/nodes/${ids[i]}/move`, { to: `h/st/${i % 2 ? 'b' : 'a-b'}/p${i}.md` }));
      ops.push(() => agent.put(`/api/v1/nodes/${ids[i]}`, { content: `# p${i} edited\n` }));
    }
    ops.push(() => agent.delete(`/api/v1/nodes/${ids[0]}`));
    ops.push(() => agent.post('/api/v1/nodes', { path: 'h/st/a.md', content: '# a file beside folder a\n' }));
    ops.push(() => agent.post('/api/v1/nodes', { path: 'h/st/b.md/c.md', content: '# b.md is a folder\n' }));
    ops.push(() => agent.post('/api/v1/nodes', { path: 'h/st/a/p0.md', content: '# p0 recreated\n' }));
    const out = await Promise.all(ops.map((f) => f()));
    for (const r of out) {
      expect(r.status, r.text).toBeLessThan(500);
      if (r.status >= 400) expect([404, 409], r.text).toContain(r.status);
    }
    await w.g.ok(['fetch', '-q', 'origin'], { cwd: dir });
    await w.g.ok(['reset', '-q', '--hard', 'origin/main'], { cwd: dir });
    const fsck = await w.g.git(['fsck', '--strict', '--no-dangling', '--full'], { cwd: dir });
    expect(fsck.code, said(fsck)).toBe(0);
    const tree = await lsTree(w, dir);
    expect(sorted(tree.keys())).toEqual(await dbPages(w));
    for (const p of [...tree.keys()].filter((x) => x.startsWith('h/st/'))) {
      const r = await agent.get(`/api/v1/nodes/${enc(p)}`);
      expect(gitBlobSha(r.body.content), p).toBe(tree.get(p));
    }
  });
});

/* ------------------------------------------------------------------ group commit (SQLite) */

type SyncCallback = (err: NodeJS.ErrnoException | null) => void;
const realFdatasync = fs.fdatasync;
const eio = () => Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO', errno: -5, syscall: 'fdatasync' });

/** Holds, passes or fails the disk syncs of this process (the server runs in it). */
class Disk {
  mode: 'pass' | 'hold' | 'fail' = 'pass';
  held: { go: () => void; fail: () => void }[] = [];
  install(): void {
    (fs as { fdatasync: unknown }).fdatasync = (fd: number, cb: SyncCallback) => {
      if (this.mode === 'fail') {
        setImmediate(() => cb(eio()));
        return;
      }
      if (this.mode === 'hold') this.held.push({ go: () => realFdatasync(fd, cb), fail: () => cb(eio()) });
      else realFdatasync(fd, cb);
    };
  }
  uninstall(): void {
    (fs as { fdatasync: unknown }).fdatasync = realFdatasync;
    this.release();
  }
  /** Lets the held syncs reach the disk, and passes later ones. */
  release(): void {
    this.mode = 'pass';
    const go = this.held;
    this.held = [];
    for (const h of go) h.go();
  }
  /** Fails the held syncs (the disk said EIO), and every later one. */
  failHeld(): void {
    this.mode = 'fail';
    const go = this.held;
    this.held = [];
    for (const h of go) h.fail();
  }
}

async function until(what: string, cond: () => Promise<boolean> | boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting: ${what}`);
    await sleep(10);
  }
}

/** Audit entries of an action, in any workspace. */
async function auditCount(w: GitWorld, action: string): Promise<number> {
  const r = await w.s.ctx.store.db
    .selectFrom('audit_log')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('action', '=', action)
    .executeTakeFirst();
  return Number(r?.n ?? 0);
}

/** A web form POST as a browser sends it (no redirect followed); `cookies` from a Client. */
async function form(
  base: string,
  c: Client,
  url: string,
  fields: Record<string, string>,
  signal?: AbortSignal,
): Promise<{ status: number; text: string; location: string | null }> {
  const res = await fetch(base + url, {
    method: 'POST',
    headers: { accept: 'text/html', cookie: [...c.cookies].map(([k, v]) => `${k}=${v}`).join('; '), 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(fields).toString(),
    redirect: 'manual',
    ...(signal ? { signal } : {}),
  });
  return { status: res.status, text: await res.text(), location: res.headers.get('location') };
}

describe('attack l: group commit — no write is answered before its sync (sqlite)', () => {
  let w: GitWorld;
  const disk = new Disk();
  let agentId: string;
  let agent: Client;
  let proposer: Client;
  let mcp: McpClient;
  let dir: string;

  beforeAll(async () => {
    w = await setupGitWorld('sqlite');
    const a = await createAgentWithKey(w.owner, [{ action: 'read' }, { action: 'write' }, { action: 'admin' }, { action: 'collab' }, { action: 'propose' }]);
    agentId = a.id;
    agent = a.client;
    proposer = (await createAgentWithKey(w.owner, [{ action: 'read' }, { action: 'propose' }], { name: 'proposer' })).client;
    mcp = await connectMcp(w.s.url, a.key);
    await w.page('gc/base.md', '# Base\n');
    dir = await w.clone();
    disk.install();
  }, 60_000);
  afterAll(async () => {
    disk.uninstall();
    await mcp?.close().catch(() => undefined);
    await w?.stop();
  });

  /**
   * Starts a request with the disk's syncs held, waits until its write is committed (the
   * database has it) and a sync is held, and checks that no answer came; then lets the disk go
   * and returns the answer.
   */
  async function waitsForSync<T>(what: string, start: () => Promise<T>, committed: () => Promise<boolean>): Promise<T> {
    disk.mode = 'hold';
    let outcome: { value?: T; error?: unknown } | null = null;
    const p = start().then(
      (value) => {
        outcome = { value };
        return value;
      },
      (error: unknown) => {
        outcome = { error };
        throw error;
      },
    );
    p.catch(() => undefined);
    try {
      // Syncs held before the write commits belong to earlier commits (a background one, a
      // token's last use): they are let go, or the request could wait behind them for ever.
      // Taken before asking whether the write committed, so none of them can be the write's own.
      const end = Date.now() + 10_000;
      while (outcome === null) {
        const earlier = disk.held.splice(0);
        if (await committed()) {
          disk.held.unshift(...earlier);
          if (disk.held.length > 0) break;
        } else for (const h of earlier) h.go();
        if (Date.now() > end) throw new Error(`timed out waiting: ${what} to commit`);
        await sleep(10);
      }
      await sleep(250);
      expect(outcome, `${what} was answered while its commit was not on disk: ${JSON.stringify(outcome)?.slice(0, 300)}`).toBeNull();
    } finally {
      disk.release();
    }
    return p;
  }
  const audited = async (action: string) => {
    const before = await auditCount(w, action);
    return async () => (await auditCount(w, action)) > before;
  };
  const pageId = async (p: string) => (await agent.get(`/api/v1/nodes/${enc(p)}`)).body.id as string;

  it('REST page writes: create, update, move, archive, restore, delete', async () => {
    let r = await waitsForSync('create', () => agent.post('/api/v1/nodes', { path: 'gc/one.md', content: '# One\n' }), await audited('page.create'));
    expect(r.status, r.text).toBe(201);
    const id = r.body.id as string;
    r = await waitsForSync('update', () => agent.put(`/api/v1/nodes/${id}`, { content: '# One, edited\n' }), await audited('page.update'));
    expect(r.status, r.text).toBe(200);
    r = await waitsForSync('patch', () => agent.patch(`/api/v1/nodes/${id}`, { frontmatter: { tags: ['gc'] } }), await audited('page.update'));
    expect(r.status, r.text).toBe(200);
    r = await waitsForSync('append', () => agent.post(`/api/v1/nodes/${id}/append`, { text: 'Appended.' }), await audited('page.update'));
    expect(r.status, r.text).toBe(200);
    r = await waitsForSync('move', () => agent.post(`/api/v1/nodes/${id}/move`, { to: 'gc/moved/one.md' }), await audited('page.move'));
    expect(r.status, r.text).toBe(200);
    r = await waitsForSync('archive', () => agent.post(`/api/v1/nodes/${id}/archive`, {}), await audited('page.archive'));
    expect(r.status, r.text).toBe(200);
    r = await waitsForSync('restore', () => agent.post(`/api/v1/nodes/${id}/restore`, {}), await audited('page.restore'));
    expect(r.status, r.text).toBe(200);
    const read = await agent.get(`/api/v1/nodes/${enc('gc/moved/one.md')}`);
    expect(read.body.content).toContain('# One, edited');
    expect(read.body.content).toContain('Appended.');
    r = await waitsForSync('delete', () => agent.delete(`/api/v1/nodes/${id}`), await audited('page.delete'));
    expect(r.status, r.text).toBe(200);
    expect((await agent.get(`/api/v1/nodes/${id}`)).status).toBe(404);
  });

  it('folder archive, import, log, threads, inbox ack, watches', async () => {
    await agent.post('/api/v1/nodes', { path: 'gc/folder/a.md', content: '# A\n' });
    let r = await waitsForSync('folder archive', () => agent.post('/api/v1/clusters/gc/folder/archive', {}), await audited('page.archive'));
    expect(r.status, r.text).toBe(200);
    r = await waitsForSync(
      'import',
      () => w.owner.post('/api/v1/import', { space: 'gc', files: [{ path: 'imp/x.md', content: '# X\n' }] }),
      // The accepted job is committed first (the request then runs it): that commit must wait.
      async () => (await w.s.ctx.store.db.selectFrom('import_jobs').select('id').executeTakeFirst()) !== undefined,
    );
    expect(r.status, r.text).toBe(200);
    r = await waitsForSync(
      'log',
      () => agent.post('/api/v1/log', { scope: 'gc', entry: 'a log line' }),
      async () => (await dbPages(w)).includes('gc/log.md'),
    );
    expect(r.status, r.text).toBe(201);
    const base = await pageId('gc/base.md');
    r = await waitsForSync(
      'thread post',
      () => w.owner.post(`/api/v1/nodes/${base}/threads`, { body: `hello @agent`, mentions: [agentId] }),
      await audited('thread.post'),
    );
    expect(r.status, r.text).toBe(201);
    const inbox = await agent.get('/api/v1/inbox');
    expect(inbox.body.events.length).toBeGreaterThan(0);
    const doneBefore = async () =>
      Number(
        (
          await w.s.ctx.store.db
            .selectFrom('inbox_events')
            .select((eb) => eb.fn.countAll<number>().as('n'))
            .where('state', '=', 'done')
            .executeTakeFirst()
        )?.n,
      );
    const d0 = await doneBefore();
    r = await waitsForSync(
      'inbox ack',
      () => agent.post('/api/v1/inbox/ack', { up_to: inbox.body.next_after }),
      async () => (await doneBefore()) > d0,
    );
    expect(r.status, r.text).toBe(200);
    r = await waitsForSync('watch', () => agent.put('/api/v1/watches', { path: 'gc' }), await audited('watch.create'));
    expect(r.status, r.text).toBe(200);
  });

  it('MCP write tools', async () => {
    const before = await audited('page.create');
    const out = await waitsForSync('MCP context_write', () => call(mcp, 'context_write', { path: 'gc/mcp.md', content: '# MCP\n' }), before);
    expect(out.isError, out.text).toBe(false);
    const post = await waitsForSync('MCP collab_post', () => call(mcp, 'collab_post', { node: 'gc/mcp.md', body: 'from mcp' }), await audited('thread.post'));
    expect(post.isError, post.text).toBe(false);
    const mcpId = await pageId('gc/mcp.md');
    const arch = await waitsForSync('MCP context_archive', () => call(mcp, 'context_archive', { id: mcpId }), await audited('page.archive'));
    expect(arch.isError, arch.text).toBe(false);
    expect((await agent.get(`/api/v1/nodes/${enc('gc/mcp.md')}`)).body.state).toBe('archived');
  });

  it('keys: minting, and revoking over REST and the web form (an acknowledged revocation is on disk)', async () => {
    const victim = await createAgentWithKey(w.owner, [{ action: 'read' }], { name: 'victim' });
    let r = await waitsForSync('key mint', () => w.owner.post(`/api/v1/principals/${victim.id}/tokens`, { name: 'second' }), await audited('agent.key.mint'));
    expect(r.status, r.text).toBe(201);
    const second = r.body as { id: string; key: string };
    r = await waitsForSync('key revoke', () => w.owner.delete(`/api/v1/principals/${victim.id}/tokens/${victim.keyId}`), await audited('agent.key.revoke'));
    expect(r.status, r.text).toBe(200);
    expect((await victim.client.get('/api/v1/whoami')).status).toBe(401);
    const webRevoke = await waitsForSync(
      'web key revoke',
      () => form(w.s.url, w.owner, `/app/agents/${victim.id}/keys/${second.id}/revoke`, { csrf: w.owner.csrf! }),
      await audited('agent.key.revoke'),
    );
    expect(webRevoke.status, webRevoke.text.slice(0, 300)).toBe(303);
    const k2 = await fetch(`${w.s.url}/api/v1/whoami`, { headers: { authorization: `Bearer ${second.key}` } });
    expect(k2.status).toBe(401);
    r = await waitsForSync(
      'grants',
      () => w.owner.put(`/api/v1/principals/${victim.id}/grants`, { grants: [{ action: 'read', scope: 'gc', ceiling: 'internal' }] }),
      await audited('agent.grants'),
    );
    expect(r.status, r.text).toBe(200);
    r = await waitsForSync('agent delete', () => w.owner.delete(`/api/v1/principals/${victim.id}`), await audited('agent.delete'));
    expect(r.status, r.text).toBe(200);
  });

  it('accounts and sessions: sign-up, login, step-up, git tokens, session revoke, logout, web sign-in', async () => {
    const email = `gc-${Date.now()}@example.com`;
    const c = new ClientCtor(w.s.url);
    let r = await waitsForSync('signup', () => c.post('/api/v1/auth/signup', { email, password: PASSWORD, name: 'Gc' }), await audited('account.signup'));
    expect(r.status, r.text).toBe(201);
    const c2 = new ClientCtor(w.s.url);
    r = await waitsForSync('login', () => c2.post('/api/auth/login', { email, password: PASSWORD }), await audited('auth.session.open'));
    expect(r.status, r.text).toBe(200);
    expect((await c2.get('/api/auth/me')).status).toBe(200);
    r = await waitsForSync('step-up', () => c2.post('/api/auth/stepup', { password: PASSWORD }), await audited('auth.stepup'));
    expect(r.status, r.text).toBe(200);
    r = await waitsForSync('git token mint', () => c2.post('/api/v1/me/git-tokens', { name: 'gc' }), await audited('git_token.mint'));
    expect(r.status, r.text).toBe(201);
    const gt = r.body as { id: string; token: string };
    r = await waitsForSync('git token revoke', () => c2.delete(`/api/v1/me/git-tokens/${gt.id}`), await audited('git_token.revoke'));
    expect(r.status, r.text).toBe(200);
    const ls = await w.g.git(['ls-remote', gitUrl(w.s.url, (await c2.get('/api/auth/me')).body.workspace.slug, gt.token)]);
    expect(ls.code).not.toBe(0);
    // The first session (sign-up's) is ended from the second.
    const sessions = (await c2.get('/api/auth/sessions')).body.sessions as { id: string; current: boolean }[];
    const other = sessions.find((x) => !x.current)!;
    r = await waitsForSync('session revoke', () => c2.delete(`/api/auth/sessions/${other.id}`), await audited('auth.session.revoke'));
    expect(r.status, r.text).toBe(200);
    expect((await c.get('/api/auth/me')).status).toBe(401);
    r = await waitsForSync('logout', () => c2.post('/api/auth/logout'), await audited('auth.logout'));
    expect(r.status, r.text).toBe(200);
    expect((await c2.get('/api/auth/me')).status).toBe(401);
    // The web sign-in form.
    const b = new ClientCtor(w.s.url);
    await b.get('/login', { accept: 'text/html' });
    const csrf = b.cookies.get('svc_csrf')!;
    expect(csrf).toBeTruthy();
    const web = await waitsForSync('web login', () => form(w.s.url, b, '/login', { email, password: PASSWORD, csrf }), await audited('auth.session.open'));
    expect(web.status, web.text.slice(0, 300)).toBe(303);
  });

  it('web writes and proposals: new page form, proposal accepted over REST and over the web form', async () => {
    const web = await waitsForSync(
      'web new page',
      () =>
        form(w.s.url, w.owner, '/app/new', { csrf: w.owner.csrf!, space: 'gc', path: 'web/new.md', content: '# From the web\n', message: '', action: 'save' }),
      await audited('page.create'),
    );
    expect(web.status, web.text.slice(0, 300)).toBe(303);
    expect((await agent.get(`/api/v1/nodes/${enc('gc/web/new.md')}`)).body.content).toBe('# From the web\n');
    const p1 = await proposer.post('/api/v1/proposals', { path: 'gc/prop-1.md', content: '# Proposed 1\n' });
    expect(p1.status, p1.text).toBe(201);
    const acc = await waitsForSync('proposal accept', () => w.owner.post(`/api/v1/proposals/${p1.body.id}/accept`), await audited('proposal.accept'));
    expect(acc.status, acc.text).toBe(200);
    expect(acc.body.status).toBe('accepted');
    const p2 = await proposer.post('/api/v1/proposals', { path: 'gc/prop-2.md', content: '# Proposed 2\n' });
    const webAcc = await waitsForSync(
      'web proposal accept',
      () => form(w.s.url, w.owner, `/app/proposals/${p2.body.id}/accept`, { csrf: w.owner.csrf! }),
      await audited('proposal.accept'),
    );
    expect(webAcc.status, webAcc.text.slice(0, 300)).toBe(303);
    expect((await agent.get(`/api/v1/nodes/${enc('gc/prop-2.md')}`)).body.content).toBe('# Proposed 2\n');
  });

  it('OAuth client registration (a write made outside any transaction)', async () => {
    const count = async () =>
      Number(
        (
          await w.s.ctx.store.db
            .selectFrom('oauth_clients')
            .select((eb) => eb.fn.countAll<number>().as('n'))
            .executeTakeFirst()
        )?.n,
      );
    const n0 = await count();
    const r = await waitsForSync(
      'oauth register',
      () =>
        fetch(`${w.s.url}/oauth/register`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            redirect_uris: ['http://127.0.0.1:9/cb'],
            token_endpoint_auth_method: 'none',
            grant_types: ['authorization_code'],
            client_name: 'gc',
          }),
        }).then(async (x) => ({ status: x.status, text: await x.text() })),
      async () => (await count()) > n0,
    );
    expect(r.status, r.text).toBe(201);
  });

  it('git push: git is not told "ok" before the pushed commits are on disk', async () => {
    await w.g.ok(['fetch', '-q', 'origin'], { cwd: dir });
    await w.g.ok(['reset', '-q', '--hard', 'origin/main'], { cwd: dir });
    writeFile(dir, 'gc/pushed.md', '# Pushed\n');
    const sha = await commitAll(w.g, dir, 'pushed while the disk is slow');
    const r = await waitsForSync('git push', () => w.g.git(['push', 'origin', 'main'], { cwd: dir }), await audited('git.push'));
    expect(r.code, said(r)).toBe(0);
    expect(await w.remoteHead()).toBe(sha);
    expect((await agent.get(`/api/v1/nodes/${enc('gc/pushed.md')}`)).body.commit_sha).toBe(sha);
  });

  it('reads that saw a commit still syncing wait too: REST, MCP, git fetch, and an inbox long-poll woken by the commit', async () => {
    // Parked before the write: the commit wakes it (afterCommit runs before the sync).
    const since = (await agent.get('/api/v1/inbox?state=all')).body.next_after as number;
    const answered: string[] = [];
    const poll = agent.get(`/api/v1/inbox?state=all&after=${since}&wait=10`).then((x) => (answered.push('long-poll'), x));
    const mcpPoll = call(mcp, 'collab_inbox', { after: since, wait_s: 10 }).then((x) => (answered.push('mcp long-poll'), x));
    await sleep(300);
    // Looked up before the hold: a read answers only once every commit before it is synced, and
    // a background commit (the embedding worker's) pending then would hold this lookup too.
    const base = await pageId('gc/base.md');
    disk.mode = 'hold';
    const mention = w.owner.post(`/api/v1/nodes/${base}/threads`, { body: 'look @agent', mentions: [agentId] });
    const write = agent.post('/api/v1/nodes', { path: 'gc/seen.md', content: '# Seen\n' });
    await until('commits', async () => (await dbPages(w)).includes('gc/seen.md') && disk.held.length > 0);
    const reads = [
      agent.get(`/api/v1/nodes/${enc('gc/seen.md')}`).then((x) => (answered.push('rest'), x)),
      call(mcp, 'context_get', { path: 'gc/seen.md' }).then((x) => (answered.push('mcp'), x)),
      w.g.git(['ls-remote', w.url(), 'refs/heads/main']).then((x) => (answered.push('git'), x)),
      fetch(`${w.s.url}/healthz`).then((x) => (answered.push('healthz'), x)),
    ];
    await sleep(400);
    expect(answered).toEqual([]);
    disk.release();
    expect((await write).status).toBe(201);
    expect((await mention).status).toBe(201);
    const [rest, m, g] = (await Promise.all(reads)) as [Res, Awaited<ReturnType<typeof call>>, Awaited<ReturnType<typeof w.g.git>>];
    expect(rest.body.content).toBe('# Seen\n');
    expect(m.isError).toBe(false);
    expect(g.code).toBe(0);
    const polled = await poll;
    expect(polled.status, polled.text).toBe(200);
    expect(polled.body.events.map((e: { kind: string }) => e.kind)).toContain('mention');
    const mp = await mcpPoll;
    expect(mp.isError, mp.text).toBe(false);
    expect(mp.text).toContain('mention');
  });
});

describe('attack l: group commit — once a sync fails, nothing is acknowledged on any face (sqlite)', () => {
  let w: GitWorld;
  const disk = new Disk();
  let agent: Client;
  let agentKey: string;
  let mcp: McpClient;
  let dir: string;
  let victim: { id: string; keyId: string; client: Client };
  /** A key nobody revokes before the failure. */
  let victim2: { id: string; keyId: string; client: Client };
  let proposalId: string;

  beforeAll(async () => {
    w = await setupGitWorld('sqlite');
    const a = await createAgentWithKey(w.owner, [{ action: 'read' }, { action: 'write' }, { action: 'admin' }, { action: 'collab' }]);
    agent = a.client;
    agentKey = a.key;
    victim = await createAgentWithKey(w.owner, [{ action: 'read' }], { name: 'victim' });
    victim2 = await createAgentWithKey(w.owner, [{ action: 'read' }], { name: 'victim2' });
    const proposer = (await createAgentWithKey(w.owner, [{ action: 'read' }, { action: 'propose' }], { name: 'proposer' })).client;
    mcp = await connectMcp(w.s.url, a.key);
    await w.page('fail/base.md', '# Base\n');
    const prop = await proposer.post('/api/v1/proposals', { path: 'fail/proposed.md', content: '# Proposed\n' });
    expect(prop.status, prop.text).toBe(201);
    proposalId = prop.body.id;
    dir = await w.clone();
    disk.install();
  }, 60_000);
  afterAll(async () => {
    disk.uninstall();
    await mcp?.close().catch(() => undefined);
    await w?.stop();
  });

  /** Settles within `ms` or says it hung. */
  const within = <T>(what: string, p: Promise<T>, ms = 15_000): Promise<T> =>
    Promise.race([p, sleep(ms).then(() => Promise.reject(new Error(`${what} hung for ${ms} ms`)))]);
  const headNow = async () =>
    (await w.s.ctx.store.db.selectFrom('git_refs').select('sha').where('workspace_id', '=', w.ws.id).where('name', '=', 'refs/heads/main').executeTakeFirst())
      ?.sha;
  /** Makes sure a sync has failed (when a test runs alone), then lets the disk work again. */
  const ensureFailed = async () => {
    let failed = false;
    try {
      w.s.ctx.store.assertWritable();
    } catch {
      failed = true;
    }
    if (!failed) {
      disk.mode = 'fail';
      expect((await agent.post('/api/v1/nodes', { path: 'fail/trigger.md', content: '# T\n' })).status).toBe(503);
    }
    disk.mode = 'pass';
  };
  const gitOk = (r: { code: number; stderr: string; stdout: string }) => r.code === 0 || /^\s+[0-9a-f]+\.\.[0-9a-f]+\s+main -> main\s*$/m.test(said(r));

  it('a sync that fails under writers of every face waiting for it: none of them is acknowledged, none hangs, no 500', async () => {
    writeFile(dir, 'fail/pushed.md', '# Pushed\n');
    await commitAll(w.g, dir, 'pushed as the disk fails');
    const poll = within('inbox long-poll', agent.get('/api/v1/inbox?wait=2'));
    await sleep(100);
    disk.mode = 'hold';
    const rest = Array.from({ length: 4 }, (_, i) => within(`create ${i}`, agent.post('/api/v1/nodes', { path: `fail/w${i}.md`, content: `# W${i}\n` })));
    const viaMcp = within(
      'mcp write',
      call(mcp, 'context_write', { path: 'fail/mcp.md', content: '# MCP\n' }).then(
        (x) => ({ ok: !x.isError, text: x.text }),
        (e: Error) => ({ ok: false, text: e.message }),
      ),
    );
    const revoke = within('revoke', w.owner.delete(`/api/v1/principals/${victim.id}/tokens/${victim.keyId}`));
    const web = within(
      'web new',
      form(w.s.url, w.owner, '/app/new', { csrf: w.owner.csrf!, space: 'fail', path: 'web.md', content: '# Web\n', message: '', action: 'save' }),
    );
    const push = within('git push', w.g.git(['push', 'origin', 'main'], { cwd: dir }));
    const signup = within(
      'signup',
      new ClientCtor(w.s.url).post('/api/v1/auth/signup', { email: `fail-${Date.now()}@example.com`, password: PASSWORD, name: 'F' }),
    );
    await until('writes to wait for the held sync', async () => disk.held.length > 0 && (await auditCount(w, 'page.create')) >= 2);
    await sleep(500);
    disk.failHeld();

    for (const r of await Promise.all(rest)) {
      expect(r.status, r.text).toBe(503);
      expect(r.body.error.code).toBe('unavailable');
      expect(r.headers.get('retry-after')).toBeTruthy();
    }
    const m = await viaMcp;
    expect(m.ok, m.text).toBe(false);
    expect((await revoke).status).toBe(503);
    expect((await web).status).toBe(503);
    const pushed = await push;
    expect(gitOk(pushed), said(pushed)).toBe(false);
    expect((await signup).status).toBe(503);
    const polled = await poll;
    expect(polled.status, polled.text).toBe(503);
  });

  it('afterwards, with the disk healthy again, every face still refuses: writes change nothing, reads answer 503, no 500', async () => {
    await ensureFailed();
    const head0 = await headNow();
    const statusOf = async (what: string, p: Promise<{ status: number }>) => {
      const r = await within(what, p);
      expect(r.status, what).not.toBe(500);
      return r.status;
    };
    // REST
    expect(await statusOf('create', agent.post('/api/v1/nodes', { path: 'fail/after.md', content: '# After\n' }))).toBe(503);
    expect(await statusOf('read', agent.get(`/api/v1/nodes/${enc('fail/base.md')}`))).toBe(503);
    expect(await statusOf('search', agent.get('/api/v1/search?q=base'))).toBe(503);
    expect(await statusOf('revoke', w.owner.delete(`/api/v1/principals/${victim2.id}/tokens/${victim2.keyId}`))).toBe(503);
    expect(await statusOf('accept', w.owner.post(`/api/v1/proposals/${proposalId}/accept`))).toBe(503);
    expect(await statusOf('login', new ClientCtor(w.s.url).post('/api/auth/login', { email: 'nobody@example.com', password: PASSWORD }))).toBe(503);
    const email = `after-${Date.now()}@example.com`;
    expect(await statusOf('signup', new ClientCtor(w.s.url).post('/api/v1/auth/signup', { email, password: PASSWORD, name: 'After' }))).toBe(503);
    expect(await statusOf('readyz', fetch(`${w.s.url}/readyz`))).toBe(503);
    expect(await statusOf('healthz', fetch(`${w.s.url}/healthz`))).toBe(503);
    expect(
      await statusOf(
        'oauth register',
        fetch(`${w.s.url}/oauth/register`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            redirect_uris: ['http://127.0.0.1:9/cb'],
            token_endpoint_auth_method: 'none',
            grant_types: ['authorization_code'],
            client_name: 'after',
          }),
        }),
      ),
    ).toBe(503);
    // MCP
    const m = await within(
      'mcp',
      call(mcp, 'context_write', { path: 'fail/mcp-after.md', content: '# M\n' }).then(
        (x) => !x.isError,
        () => false,
      ),
    );
    expect(m).toBe(false);
    // Web
    expect(
      (
        await within(
          'web new',
          form(w.s.url, w.owner, '/app/new', { csrf: w.owner.csrf!, space: 'fail', path: 'web-after.md', content: '# W\n', message: '', action: 'save' }),
        )
      ).status,
    ).toBe(503);
    expect(
      (
        await within(
          'web page',
          fetch(`${w.s.url}/app`, { headers: { accept: 'text/html', cookie: [...w.owner.cookies].map(([k, v]) => `${k}=${v}`).join('; ') } }),
        )
      ).status,
    ).toBe(503);
    // git
    writeFile(dir, 'fail/pushed-2.md', '# Pushed 2\n');
    await commitAll(w.g, dir, 'after the failure');
    const pushed = await within('git push', w.g.git(['push', 'origin', 'main'], { cwd: dir }));
    expect(gitOk(pushed), said(pushed)).toBe(false);
    const ls = await within('ls-remote', w.g.git(['ls-remote', w.url()]));
    expect(ls.code, said(ls)).not.toBe(0);

    // Nothing of it was written.
    expect(await headNow()).toBe(head0);
    const pages = await dbPages(w);
    for (const p of ['fail/after.md', 'fail/mcp-after.md', 'fail/web-after.md', 'fail/pushed-2.md', 'fail/proposed.md']) expect(pages).not.toContain(p);
    const key = await w.s.ctx.store.db.selectFrom('agent_keys').select('revoked_at').where('id', '=', victim2.keyId).executeTakeFirst();
    expect(key?.revoked_at ?? null).toBeNull();
    expect(await w.s.ctx.store.db.selectFrom('principals').select('id').where('email', '=', email).executeTakeFirst()).toBeUndefined();
  });

  // FOUND: the onSend hook (app.ts) answers a failed sync in the REST shape on every face. On /mcp
  // docs/errors.md ("MCP") says errors of the HTTP exchange are JSON-RPC error bodies (503
  // `unavailable` → code -32000), as draining answers them; a JSON-RPC client gets a body it
  // cannot read as a response.
  it('found: /mcp answers a failed sync as a JSON-RPC error body (docs/errors.md, "MCP")', async () => {
    await ensureFailed();
    const res = await within(
      'mcp',
      fetch(`${w.s.url}/mcp`, {
        method: 'POST',
        headers: { authorization: `Bearer ${agentKey}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/list', params: {} }),
      }),
    );
    expect(res.status).toBe(503);
    const body = (await res.json()) as { jsonrpc?: string; error?: { code?: number; message?: string } };
    expect(body.jsonrpc, JSON.stringify(body)).toBe('2.0');
    expect(body.error?.code).toBe(-32000);
    expect(body.error?.message).toMatch(/^unavailable: /);
  });

  // FOUND: the same hook answers git with JSON; docs/errors.md ("Git") says /git answers errors as
  // text/plain, which git prints to its user as `remote:` lines.
  it('found: /git answers a failed sync as text/plain (docs/errors.md, "Git")', async () => {
    await ensureFailed();
    const res = await within(
      'git info/refs',
      fetch(`${w.s.url}/git/${w.ws.slug}.git/info/refs?service=git-upload-pack`, {
        headers: { authorization: `Basic ${Buffer.from(`x:${w.token}`).toString('base64')}` },
      }),
    );
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type') ?? '').toMatch(/^text\/plain/);
  });

  // FOUND: and the sign-in page with JSON; docs/errors.md ("HTML pages") says GET/POST /login
  // answer HTML pages, not the JSON body, and errors raised outside a handler answer an HTML page
  // to a request that accepts text/html. A person at the sign-in form reads raw JSON.
  it('found: the sign-in page answers a failed sync as an HTML page (docs/errors.md, "HTML pages")', async () => {
    await ensureFailed();
    const res = await within('GET /login', fetch(`${w.s.url}/login`, { headers: { accept: 'text/html' } }));
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type') ?? '').toMatch(/^text\/html/);
  });

  it('the node restarted on the same files serves again: everything acknowledged is there, and the tree is what the pages say', async () => {
    await ensureFailed();
    await within('close', w.s.close());
    const s2 = await startServerOn({ dataDir: w.s.ctx.config.dataDir, databaseUrl: undefined });
    try {
      const a2 = new ClientCtor(s2.url, agentKey);
      const base = await a2.get(`/api/v1/nodes/${enc('fail/base.md')}`);
      expect(base.status, base.text).toBe(200);
      expect(base.body.content).toBe('# Base\n');
      const made = await a2.post('/api/v1/nodes', { path: 'fail/restarted.md', content: '# Restarted\n' });
      expect(made.status, made.text).toBe(201);
      expect((await fetch(`${s2.url}/readyz`)).status).toBe(200);
      // Whatever of the unacknowledged writes survived, the tree and the pages agree.
      const fresh = w.g.path('restarted');
      await w.g.ok(['clone', '-q', gitUrl(s2.url, w.ws.slug, w.token), fresh]);
      const fsck = await w.g.git(['fsck', '--strict', '--no-dangling', '--full'], { cwd: fresh });
      expect(fsck.code, said(fsck)).toBe(0);
      const rows = await s2.ctx.store.db.selectFrom('pages').select('path').where('workspace_id', '=', w.ws.id).where('deleted_at', 'is', null).execute();
      expect(sorted((await lsTree(w, fresh)).keys())).toEqual(sorted(rows.map((r) => r.path)));
    } finally {
      await s2.close();
    }
  });
});

/**
 * FOUND: a background import (202) that meets a failed sync is marked `failed` for good ("The
 * import stopped on an internal error…"): the runner takes the sync failure for an error of the
 * import and records it with a write made outside inTransaction (so not refused), and a
 * restarted node does not take the job up again. docs/api.md ("Import") and server.ts say imports
 * accepted before a crash or restart are finished; a lost database connection on PostgreSQL
 * leaves the job running (its lease runs out and it resumes), but a sync failure on SQLite ends it.
 */
describe('attack l: group commit — a background import across a failed sync (sqlite)', () => {
  let w: GitWorld;
  const disk = new Disk();
  beforeAll(async () => {
    w = await setupGitWorld('sqlite');
    disk.install();
  }, 60_000);
  afterAll(async () => {
    disk.uninstall();
    await w?.stop().catch(() => undefined);
  });

  it('found: an accepted background import resumes on the restarted node and finishes', async () => {
    const files = Array.from({ length: 1200 }, (_, i) => ({ path: `bulk/p${i}.md`, content: `# P${i}\n` }));
    disk.mode = 'hold';
    const posted = w.owner.post('/api/v1/import', { space: 'imp', files });
    await until(
      'the job to be accepted',
      async () => disk.held.length > 0 && (await w.s.ctx.store.db.selectFrom('import_jobs').select('id').executeTakeFirst()) !== undefined,
    );
    // Only the acceptance reaches the disk; the first batch's sync is held, then fails. Held
    // syncs are let go until the acceptance is answered (a background commit's sync, held first,
    // would otherwise leave the acceptance waiting on the next one).
    let answered = false;
    const settle = () => {
      answered = true;
    };
    void posted.then(settle, settle);
    while (!answered) {
      for (const h of disk.held.splice(0)) h.go();
      await sleep(10);
    }
    const accepted = await posted;
    expect(accepted.status, accepted.text).toBe(202);
    const id = accepted.body.id as string;
    await until('a batch to commit', async () => disk.held.length > 0 && (await dbPages(w)).some((p) => p.startsWith('imp/bulk/')));
    disk.failHeld();
    await sleep(500);
    disk.mode = 'pass';

    await w.s.close();
    const s2 = await startServerOn({ dataDir: w.s.ctx.config.dataDir, databaseUrl: undefined });
    try {
      const owner2 = new ClientCtor(s2.url);
      for (const [k, v] of w.owner.cookies) owner2.cookies.set(k, v);
      let job: Res = await owner2.get(`/api/v1/import/${id}`);
      // The failed node could not give its lease back (it writes nothing after a failed sync):
      // the restarted node takes the job over when the lease runs out (30 s, jobs.ts LEASE_MS).
      const end = Date.now() + 45_000;
      while (job.body?.status !== 'done' && job.body?.status !== 'failed' && Date.now() < end) {
        await sleep(200);
        job = await owner2.get(`/api/v1/import/${id}`);
      }
      expect(job.status, job.text).toBe(200);
      expect(job.body.status, JSON.stringify(job.body).slice(0, 400)).toBe('done');
      const rows = await s2.ctx.store.db.selectFrom('pages').select('path').where('workspace_id', '=', w.ws.id).where('path', 'like', 'imp/bulk/%').execute();
      expect(rows).toHaveLength(1200);
    } finally {
      await s2.close();
    }
  }, 90_000);
});

/**
 * FOUND: a push whose import committed but whose sync then failed is refused with "The service
 * failed to import this push; nothing was changed." (hook-channel.ts, for any error that is not a
 * ServiceError). The commit is in the database; a restarted node serves it as main. The REST
 * answer to the same situation says what is true (503: the write could not be made durable).
 */
describe('attack l: group commit — a git push across a failed sync (sqlite)', () => {
  let w: GitWorld;
  const disk = new Disk();
  beforeAll(async () => {
    w = await setupGitWorld('sqlite');
    await w.page('gp/base.md', '# Base\n');
    disk.install();
  }, 60_000);
  afterAll(async () => {
    disk.uninstall();
    await w?.stop().catch(() => undefined);
  });

  it('found: git is not told "nothing was changed" about a push that the restarted node then serves', async () => {
    const dir = await w.clone();
    writeFile(dir, 'gp/pushed.md', '# Pushed\n');
    const sha = await commitAll(w.g, dir, 'pushed as the disk fails');
    disk.mode = 'hold';
    const push = w.g.git(['push', 'origin', 'main'], { cwd: dir });
    await until('the push to commit', async () => disk.held.length > 0 && (await auditCount(w, 'git.push')) > 0);
    disk.failHeld();
    const r = await push;
    expect(r.code, said(r)).not.toBe(0);
    disk.mode = 'pass';
    await w.s.close();
    const s2 = await startServerOn({ dataDir: w.s.ctx.config.dataDir, databaseUrl: undefined });
    try {
      const ls = await w.g.ok(['ls-remote', gitUrl(s2.url, w.ws.slug, w.token), 'refs/heads/main']);
      const served = ls.split('\t')[0];
      if (served === sha) expect(said(r), 'the push is in after all').not.toMatch(/nothing was changed/i);
    } finally {
      await s2.close();
    }
  });
});
