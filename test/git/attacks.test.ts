import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { joinAs, signupHuman } from '../support/server.js';
import {
  basic,
  commitAll,
  enc,
  gitUrl,
  head,
  mintGitToken,
  said,
  setupGitWorld,
  stepUp,
  writeFile,
  type GitHome,
  type GitResult,
  type GitWorld,
} from './support.js';

/**
 * Issue 15, the attacker's view of the git face: reading what one should not, writing what one
 * should not, and abusing the smart-HTTP protocol itself. Every refusal is followed by the same
 * checks a victim would make: main did not move (ls-remote), REST shows nothing new, the cache
 * repository holds no ref to (and no object of) the refused commit, and a fresh clone passes
 * `git fsck --strict`.
 */

const MAX_MB = 1;

// ---------- raw HTTP ----------

interface RawAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

interface RawRequest {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  body?: Buffer;
  /** Send the body in chunks (no Content-Length). */
  chunked?: boolean;
}

/** One HTTP request whose path and headers go out exactly as written; never hangs the suite. */
function raw(base: string, r: RawRequest): Promise<RawAnswer> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...(r.headers ?? {}) };
    if (r.body && !r.chunked) headers['content-length'] = String(r.body.length);
    const req = http.request({ host: u.hostname, port: u.port, method: r.method ?? 'GET', path: r.path, headers }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (d: Buffer) => parts.push(d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts) }));
      res.on('error', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts) }));
    });
    req.setTimeout(60_000, () => req.destroy(new Error(`no answer to ${r.method ?? 'GET'} ${r.path}`)));
    req.on('error', reject);
    if (r.body && r.chunked) {
      // Several writes without Content-Length: Node sends Transfer-Encoding: chunked.
      for (let i = 0; i < r.body.length; i += 16 * 1024) req.write(r.body.subarray(i, i + 16 * 1024));
      req.end();
    } else req.end(r.body);
  });
}

/** A git pkt-line. */
function pkt(s: string | Buffer): Buffer {
  const b = typeof s === 'string' ? Buffer.from(s, 'utf8') : s;
  return Buffer.concat([Buffer.from((b.length + 4).toString(16).padStart(4, '0'), 'latin1'), b]);
}
const FLUSH = Buffer.from('0000', 'latin1');

// ---------- git, with binary stdin and stdout ----------

function gitBuf(g: GitHome, args: string[], opts: { cwd: string; input?: Buffer }): Promise<{ code: number; stdout: Buffer; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('git', args, { cwd: opts.cwd, env: g.env(), stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? 1, stdout: Buffer.concat(out), stderr });
    });
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.input ?? Buffer.alloc(0));
  });
}

/**
 * git with a hard bound: git runs its HTTP transport in a child (git-remote-http) that outlives a
 * SIGKILL of git itself, so the whole process group is killed, and the answer comes on exit.
 */
function gitBounded(g: GitHome, args: string[], opts: { cwd?: string; timeoutMs: number }): Promise<GitResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('git', args, { cwd: opts.cwd ?? g.root, env: g.env(), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
    }, opts.timeoutMs);
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // the group is gone
      }
      resolve({ code: code ?? 128, stdout, stderr: signal ? `${stderr}\n[killed by ${signal}: no answer within ${opts.timeoutMs} ms]` : stderr });
    });
  });
}

/** Writes an object exactly as given (`--literally`: git's own checks skipped, as an attacker would). */
async function putObject(g: GitHome, dir: string, type: string, body: Buffer): Promise<string> {
  const r = await gitBuf(g, ['hash-object', '-t', type, '--literally', '-w', '--stdin'], { cwd: dir, input: body });
  expect(r.code, r.stderr).toBe(0);
  return r.stdout.toString('latin1').trim();
}

interface TreeItem {
  mode: string;
  name: string;
  sha: string;
}

function treeBody(items: TreeItem[]): Buffer {
  return Buffer.concat(items.map((e) => Buffer.concat([Buffer.from(`${e.mode} ${e.name}\0`, 'utf8'), Buffer.from(e.sha, 'hex')])));
}

/** git's tree order: names as bytes, a directory as if its name ended with '/'. */
function gitOrder(items: TreeItem[]): TreeItem[] {
  const key = (e: TreeItem) => Buffer.from(e.mode === '40000' ? `${e.name}/` : e.name, 'utf8');
  return [...items].sort((a, b) => Buffer.compare(key(a), key(b)));
}

interface CraftFile {
  path: string;
  mode?: string;
  /** The file's content; or `sha` for an entry pointing at any object (a submodule's commit). */
  data?: string | Buffer;
  sha?: string;
}

/**
 * Builds a commit on top of HEAD by hand: HEAD's files plus `files`, trees written literally
 * (any name git itself would refuse to stage), and points main at it. `raw` replaces the whole
 * root tree's entries (duplicates and all).
 */
async function craftCommit(
  g: GitHome,
  dir: string,
  files: CraftFile[],
  opts: { message?: string; author?: string; rootExtra?: TreeItem[] } = {},
): Promise<string> {
  const parent = await head(g, dir);
  const listing = await gitBuf(g, ['ls-tree', '-r', '-z', 'HEAD'], { cwd: dir });
  type Node = { files: Map<string, TreeItem>; dirs: Map<string, Node> };
  const root: Node = { files: new Map(), dirs: new Map() };
  const place = (p: string, item: Omit<TreeItem, 'name'>) => {
    const segs = p.split('/');
    let n = root;
    for (const s of segs.slice(0, -1)) {
      let next = n.dirs.get(s);
      if (!next) n.dirs.set(s, (next = { files: new Map(), dirs: new Map() }));
      n = next;
    }
    const name = segs[segs.length - 1]!;
    n.files.set(name, { ...item, name });
  };
  for (const rec of listing.stdout.toString('utf8').split('\0').filter(Boolean)) {
    const [meta, p] = [rec.slice(0, rec.indexOf('\t')), rec.slice(rec.indexOf('\t') + 1)];
    const [mode, , sha] = meta.split(' ');
    place(p, { mode: mode!, sha: sha! });
  }
  for (const f of files) {
    const sha = f.sha ?? (await putObject(g, dir, 'blob', Buffer.isBuffer(f.data) ? f.data : Buffer.from(f.data ?? '', 'utf8')));
    place(f.path, { mode: f.mode ?? '100644', sha });
  }
  const write = async (n: Node, extra: TreeItem[] = []): Promise<string> => {
    const items: TreeItem[] = [...n.files.values()];
    for (const [name, sub] of n.dirs) items.push({ mode: '40000', name, sha: await write(sub) });
    return putObject(g, dir, 'tree', treeBody([...gitOrder(items), ...extra]));
  };
  const tree = await write(root, opts.rootExtra);
  const who = opts.author ?? 'Mallory <mallory@example.com> 1700000000 +0000';
  const commit = `tree ${tree}\nparent ${parent}\nauthor ${who}\ncommitter Mallory <mallory@example.com> 1700000000 +0000\n\n${opts.message ?? 'crafted'}\n`;
  const sha = await putObject(g, dir, 'commit', Buffer.from(commit, 'utf8'));
  await g.ok(['update-ref', 'refs/heads/main', sha], { cwd: dir });
  return sha;
}

/** The body git sends to git-receive-pack to move main from `old` to `next` (a pack of what is new). */
async function receivePackBody(g: GitHome, dir: string, old: string, next: string, packArgs: string[] = []): Promise<Buffer> {
  const pack = await gitBuf(g, ['-c', 'pack.compression=0', 'pack-objects', '--stdout', '--revs', '-q', ...packArgs], {
    cwd: dir,
    input: Buffer.from(`${next}\n^${old}\n`),
  });
  expect(pack.code, pack.stderr).toBe(0);
  return Buffer.concat([pkt(`${old} ${next} refs/heads/main\0 report-status\n`), FLUSH, pack.stdout]);
}

// ---------- the suite ----------

describe.each(testEngines())('git face attacks (%s)', (engine) => {
  let w: GitWorld;
  /** The cache repository git http-backend serves for the suite's workspace. */
  let cacheDir: string;
  let startId: string;

  beforeAll(async () => {
    w = await setupGitWorld(engine, { GIT_PUSH_MAX_MB: String(MAX_MB) });
    startId = (await w.page('eng/base/start.md', '# Start\n\nThe first page.\n')).id;
    cacheDir = path.join(w.s.ctx.config.git.cacheDir, `${w.ws.id}.git`);
  });
  afterAll(async () => w?.stop());

  const auth = () => ({ authorization: basic(w.token) });
  const page = (title: string) => `# ${title}\n\nBody.\n`;
  const push = (dir: string, ...args: string[]) => w.g.git(['push', ...args], { cwd: dir });
  const cacheGit = (args: string[]) => w.g.git(['--git-dir', cacheDir, ...args]);

  /** What the refs of the cache repository are (only main, at the database's head). */
  async function cacheRefs(): Promise<string> {
    return (await cacheGit(['for-each-ref', '--format=%(refname) %(objectname)'])).stdout.trim();
  }

  /**
   * A refused push changed nothing: git failed, main is where it was, the refused commit is
   * neither a ref nor an object in the cache, and none of `absent` exists over REST.
   */
  async function expectNothingChanged(r: GitResult, before: string | null, refusedSha: string | null, absent: string[] = []): Promise<void> {
    expect(r.code, said(r)).not.toBe(0);
    expect(await w.remoteHead()).toBe(before);
    expect(await cacheRefs()).toBe(`refs/heads/main ${before}`);
    if (refusedSha) {
      const has = await cacheGit(['cat-file', '-e', refusedSha]);
      expect(has.code, `the refused commit ${refusedSha} is in the cache`).not.toBe(0);
    }
    for (const p of absent) expect((await w.read(p)).status, p).toBe(404);
  }

  /** Every file of the clone's HEAD is the REST page at that path, byte for byte. */
  async function expectRestEqualsTree(dir: string): Promise<void> {
    const files = (await w.g.ok(['ls-files'], { cwd: dir })).split('\n').filter(Boolean);
    for (const f of files) {
      const r = await w.owner.get(`/api/v1/nodes/${enc(f)}?format=md`);
      expect(r.status, `${f}: ${r.text}`).toBe(200);
      expect(r.text, f).toBe(fs.readFileSync(path.join(dir, f), 'utf8'));
    }
  }

  async function freshCloneIsSound(): Promise<string> {
    const dir = await w.clone();
    await w.g.ok(['fsck', '--strict', '--no-dangling'], { cwd: dir });
    return dir;
  }

  describe('reading what one should not', () => {
    it("another workspace's owner: their token on our URL and ours on theirs are 401; our commits cannot be fetched by id through theirs", async () => {
      const other = await signupHuman(w.s.url, 'Other');
      const theirs = await mintGitToken(other.client);
      const r1 = await w.g.git(['ls-remote', gitUrl(w.s.url, w.ws.slug, theirs.token)]);
      expect(r1.code, said(r1)).not.toBe(0);
      expect(said(r1)).not.toMatch(/refs\/heads/);
      const r2 = await w.g.git(['ls-remote', gitUrl(w.s.url, other.workspace.slug, w.token)]);
      expect(r2.code, said(r2)).not.toBe(0);

      // Their own repository (empty) does not hand out our objects when asked by id.
      await other.client.post('/api/v1/nodes', { path: 'ops/theirs/page.md', content: '# Theirs\n' });
      const ours = await w.read('eng/base/start.md');
      const dir = w.g.path('theirs');
      await w.g.ok(['clone', '-q', gitUrl(w.s.url, other.workspace.slug, theirs.token), dir]);
      for (const v of ['0', '2']) {
        const f = await w.g.git(['-c', `protocol.version=${v}`, 'fetch', 'origin', String(ours.body.commit_sha)], { cwd: dir });
        expect(f.code, `v${v}: ${said(f)}`).not.toBe(0);
      }
      expect((await w.g.git(['cat-file', '-e', String(ours.body.commit_sha)], { cwd: dir })).code).not.toBe(0);

      // Raw POSTs straight to the services (no info/refs first) are refused the same way.
      for (const service of ['git-upload-pack', 'git-receive-pack']) {
        const a = await raw(w.s.url, {
          method: 'POST',
          path: `/git/${w.ws.slug}.git/${service}`,
          headers: { authorization: basic(theirs.token), 'content-type': `application/x-${service}-request`, 'git-protocol': 'version=2' },
          body: Buffer.concat([pkt('command=ls-refs\n'), FLUSH]),
        });
        expect(a.status, `${service}: ${a.body.toString()}`).toBe(401);
        expect(String(a.headers['www-authenticate'])).toMatch(/^Basic /);
      }
    });

    it('POSTs straight to the services with every wrong credential are 401 and show no refs', async () => {
      const agent = await w.owner.post('/api/v1/principals', {
        name: 'spy',
        ceiling: 'confidential',
        grants: [{ action: 'read', scope: '*', ceiling: 'confidential' }],
      });
      const key = await w.owner.post(`/api/v1/principals/${agent.body.id}/tokens`, { name: 'k' });
      expect(key.status, key.text).toBe(201);
      const cookie = [...w.owner.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
      const creds: Record<string, Record<string, string>> = {
        'agent key as Basic password': { authorization: basic(String(key.body.key)) },
        'agent key as Bearer': { authorization: `Bearer ${key.body.key}` },
        'git token as Bearer': { authorization: `Bearer ${w.token}` },
        'git token as Basic user name': { authorization: `Basic ${Buffer.from(`${w.token}:`).toString('base64')}` },
        'git token without a colon': { authorization: `Basic ${Buffer.from(w.token).toString('base64')}` },
        'session cookie': { cookie },
        'oauth-looking token': { authorization: basic(`oa_${'x'.repeat(43)}`) },
        'gt_ prefix only': { authorization: basic('gt_') },
        'token with a trailing space': { authorization: basic(`${w.token} `) },
        'token in upper case': { authorization: basic(w.token.toUpperCase()) },
        'Basic with garbage base64': { authorization: 'Basic !!!not-base64***' },
        'Basic twice': { authorization: `Basic ${basic(w.token)}` },
      };
      for (const [about, h] of Object.entries(creds)) {
        for (const service of ['git-upload-pack', 'git-receive-pack']) {
          const a = await raw(w.s.url, {
            method: 'POST',
            path: `/git/${w.ws.slug}.git/${service}`,
            headers: { ...h, 'content-type': `application/x-${service}-request`, 'git-protocol': 'version=2' },
            body: Buffer.concat([pkt('command=ls-refs\n'), FLUSH]),
          });
          expect(a.status, `${about} ${service}: ${a.body.toString()}`).toBe(401);
          expect(a.body.toString()).not.toMatch(/refs\/heads/);
        }
      }
    });

    it("an editor's token: a POST straight to git-upload-pack (skipping info/refs) is 403 and shows no refs", async () => {
      const editor = await joinAs(w.owner, w.ws.slug, 'editor', 'Ed');
      const t = await mintGitToken(editor.client);
      const a = await raw(w.s.url, {
        method: 'POST',
        path: `/git/${w.ws.slug}.git/git-upload-pack`,
        headers: { authorization: basic(t.token), 'content-type': 'application/x-git-upload-pack-request', 'git-protocol': 'version=2' },
        body: Buffer.concat([pkt('command=ls-refs\n'), FLUSH]),
      });
      expect(a.status, a.body.toString()).toBe(403);
      expect(a.body.toString()).not.toMatch(/refs\/heads|[0-9a-f]{40}/);
    });

    it.each(['revoked', 'expired', 'locked down'] as const)('a token %s between info/refs and the POST is refused at the POST', async (how) => {
      // Its own workspace for the lockdown case (lockdown ends every session of the workspace).
      const h = await signupHuman(w.s.url, 'Mid');
      await h.client.post('/api/v1/nodes', { path: 'eng/mid/page.md', content: '# Mid\n' });
      const t = await mintGitToken(h.client);
      const slug = h.workspace.slug;
      const hdr = { authorization: basic(t.token) };
      const refs = await raw(w.s.url, { path: `/git/${slug}.git/info/refs?service=git-upload-pack`, headers: hdr });
      expect(refs.status).toBe(200);
      const pushRefs = await raw(w.s.url, { path: `/git/${slug}.git/info/refs?service=git-receive-pack`, headers: hdr });
      expect(pushRefs.status).toBe(200);

      if (how === 'revoked') expect((await h.client.delete(`/api/v1/me/git-tokens/${t.id}`)).status).toBeLessThan(300);
      if (how === 'expired') {
        await w.s.ctx.store.db
          .updateTable('git_tokens')
          .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
          .where('id', '=', t.id)
          .execute();
      }
      if (how === 'locked down') {
        await stepUp(h.client);
        expect((await h.client.post(`/api/v1/workspaces/${slug}/lockdown`)).status).toBe(200);
      }

      const fetchPost = await raw(w.s.url, {
        method: 'POST',
        path: `/git/${slug}.git/git-upload-pack`,
        headers: { ...hdr, 'content-type': 'application/x-git-upload-pack-request', 'git-protocol': 'version=2' },
        body: Buffer.concat([pkt('command=ls-refs\n'), FLUSH]),
      });
      expect(fetchPost.status, fetchPost.body.toString()).toBe(401);
      const pushPost = await raw(w.s.url, {
        method: 'POST',
        path: `/git/${slug}.git/git-receive-pack`,
        headers: { ...hdr, 'content-type': 'application/x-git-receive-pack-request' },
        body: FLUSH,
      });
      expect(pushPost.status, pushPost.body.toString()).toBe(401);
    });

    it('an unknown slug, a malformed slug and a foreign one answer alike (401, same challenge)', async () => {
      const foreign = await signupHuman(w.s.url, 'Stranger');
      const ref = (slug: string) => raw(w.s.url, { path: `/git/${slug}.git/info/refs?service=git-upload-pack`, headers: auth() });
      const known = await ref(foreign.workspace.slug);
      for (const slug of ['no-such-ws', 'x'.repeat(150), 'a..b', '-dash', 'UPPER', w.ws.id]) {
        const a = await ref(slug);
        expect(a.status, `${slug}: ${a.body.toString()}`).toBe(known.status);
        expect(a.headers['www-authenticate']).toBe(known.headers['www-authenticate']);
      }
    });
  });

  describe('writing what one should not', () => {
    it('an owner demoted to editor between clone and push: the push is refused and nothing changes', async () => {
      const co = await joinAs(w.owner, w.ws.slug, 'owner', 'CoOwner');
      const t = await mintGitToken(co.client);
      const dir = w.g.path('demoted');
      await w.g.ok(['clone', '-q', gitUrl(w.s.url, w.ws.slug, t.token), dir]);
      writeFile(dir, 'eng/demoted/page.md', '# Should not land\n');
      const sha = await commitAll(w.g, dir, 'After demotion');
      const before = await w.remoteHead();
      await stepUp(w.owner);
      const demote = await w.owner.patch(`/api/v1/workspaces/${w.ws.slug}/members/${co.id}`, { role: 'editor' });
      expect(demote.status, demote.text).toBe(200);
      const r = await push(dir);
      expect(said(r)).toMatch(/^remote: \S/m);
      await expectNothingChanged(r, before, sha, ['eng/demoted/page.md']);
    });

    describe('crafted objects that git itself (receive.fsckObjects) or the hook must refuse', () => {
      /** One clone for every case: each starts again from the server's main. */
      let dir: string;
      let before: string | null;
      const refusedShas: string[] = [];
      beforeAll(async () => {
        dir = await w.clone();
        before = await w.remoteHead();
      });

      const blob = (text: string) => putObject(w.g, dir, 'blob', Buffer.from(text));
      const CASES: [string, () => Promise<string>][] = [
        ['.git/config', () => craftCommit(w.g, dir, [{ path: '.git/config', data: '[core]\n\tfsmonitor = touch /tmp/cv-pwned\n' }])],
        ['eng/.git/x.md', () => craftCommit(w.g, dir, [{ path: 'eng/.git/x.md', data: page('Dot git') }])],
        ['eng/.GIT/x.md (case)', () => craftCommit(w.g, dir, [{ path: 'eng/.GIT/x.md', data: page('Dot git') }])],
        ['eng/git~1/x.md (8.3 name)', () => craftCommit(w.g, dir, [{ path: 'eng/git~1/x.md', data: page('Short name') }])],
        ['eng/.git\u200c/x.md (HFS-ignorable)', () => craftCommit(w.g, dir, [{ path: 'eng/.git\u200c/x.md', data: page('HFS') }])],
        ['eng/../x.md', () => craftCommit(w.g, dir, [{ path: 'eng/../x.md', data: page('Up') }])],
        ['eng/./x.md', () => craftCommit(w.g, dir, [{ path: 'eng/./x.md', data: page('Here') }])],
        ['eng//x.md (an empty name)', () => craftCommit(w.g, dir, [{ path: 'eng//x.md', data: page('Empty') }])],
        [
          'a tree entry whose name holds a slash',
          async () => {
            const t = await putObject(w.g, dir, 'tree', treeBody([{ mode: '100644', name: 'a/b.md', sha: await blob(page('Slash')) }]));
            return craftCommit(w.g, dir, [], { rootExtra: [{ mode: '40000', name: 'zz', sha: t }] });
          },
        ],
        [
          'a tree with duplicate entries',
          async () => {
            const t = await putObject(
              w.g,
              dir,
              'tree',
              treeBody([
                { mode: '100644', name: 'dup.md', sha: await blob(page('One')) },
                { mode: '100644', name: 'dup.md', sha: await blob(page('Two')) },
              ]),
            );
            return craftCommit(w.g, dir, [], { rootExtra: [{ mode: '40000', name: 'zz', sha: t }] });
          },
        ],
        [
          'a second copy of a folder (entries out of order)',
          async () => {
            const inner = await putObject(w.g, dir, 'tree', treeBody([{ mode: '100644', name: 'start.md', sha: await blob(page('Shadow')) }]));
            const base = await putObject(w.g, dir, 'tree', treeBody([{ mode: '40000', name: 'base', sha: inner }]));
            // A second `eng` after the real one: readers disagree on which one counts.
            return craftCommit(w.g, dir, [], { rootExtra: [{ mode: '40000', name: 'eng', sha: base }] });
          },
        ],
        [
          'a malformed author line',
          () => craftCommit(w.g, dir, [{ path: 'eng/author/one.md', data: page('Author') }], { author: 'Mallory <m@example.com 1700000000 +0000' }),
        ],
        [
          'an author without a date',
          () => craftCommit(w.g, dir, [{ path: 'eng/author/two.md', data: page('Author') }], { author: 'Mallory <m@example.com> notatime +0000' }),
        ],
        [
          'a .gitmodules with a hostile url',
          () =>
            craftCommit(w.g, dir, [
              { path: '.gitmodules', data: '[submodule "x"]\n\tpath = eng/x\n\turl = --upload-pack=touch$IFS/tmp/cv-pwned\n' },
              { path: 'eng/x', mode: '160000', sha: '1'.repeat(40) },
            ]),
        ],
      ];

      it.each(CASES)('%s', async (_about, make) => {
        await w.g.ok(['fetch', '-q', 'origin'], { cwd: dir });
        await w.g.ok(['reset', '-q', '--hard', 'origin/main'], { cwd: dir });
        const sha = await make();
        refusedShas.push(sha);
        const r = await push(dir, 'origin', 'main');
        expect(r.code, said(r)).not.toBe(0);
        expect(said(r)).toMatch(/remote:|error:|rejected/);
      });

      it('none of them left a trace: main, the cache refs and objects, REST', async () => {
        await expectNothingChanged({ code: 1, stdout: '', stderr: '' }, before, null, ['eng/author/one.md', 'eng/author/two.md', 'zz/dup.md']);
        for (const sha of refusedShas) expect((await cacheGit(['cat-file', '-e', sha])).code, sha).not.toBe(0);
        expect((await w.read('eng/base/start.md')).body.content).toBe('# Start\n\nThe first page.\n');
        expect(fs.existsSync('/tmp/cv-pwned')).toBe(false);
      });
    });

    it('one push with seventeen files that cannot be pages: refused as a whole, every one named', async () => {
      const before = await w.remoteHead();
      const dir = await w.clone();
      // Each name carries a marker (nNN) so it can be found in git's output whatever is escaped.
      const files: [string, string | Buffer][] = [
        ['eng/names/tab\tn01.md', page('Tab')],
        ['eng/names/ctl\u0001n02.md', page('Control')],
        ['eng/names/nl\nn03.md', page('Newline')],
        ['eng/names/back\\n04.md', page('Backslash')],
        ['eng/names\\..\\..\\n05.md', page('Backslash path')],
        ['eng/names/del\u007fn06.md', page('DEL')],
        [`${Array.from({ length: 12 }, (_, i) => `d${i}`).join('/')}/deepn07.md`, page('Deep')],
        [`eng/${Array.from({ length: 6 }, () => 'p'.repeat(95)).join('/')}/longn08.md`, page('Long path')],
        ['eng/names/readmen09.txt', 'not markdown\n'],
        ['eng/names/..n10.md', page('Dots')],
        ['eng/%2e%2en11/x.md', page('Percent')],
        ['eng/names/.hiddenn12.md', page('Hidden')],
        ['eng/.gitmodules', '[submodule "n13"]\n\tpath = n13\n\turl = https://example.com/n13.git\n'],
        ['eng/names/binn14.md', Buffer.from([0x23, 0x20, 0xff, 0xfe, 0x0a])],
        ['eng/names/fmn15.md', '---\nsensitivity: [unclosed\n---\n# FM\n'],
        ['.n16.md', page('Root')],
      ];
      for (const [p, data] of files) writeFile(dir, p, data);
      await commitAll(w.g, dir, 'Bad names');
      // Two more only a crafted tree can hold: a name over 255 bytes and a submodule.
      const sha = await craftCommit(w.g, dir, [
        { path: `eng/names/${'n'.repeat(250)}n17.md`, data: page('Long name') },
        { path: 'eng/names/subn18', mode: '160000', sha: await head(w.g, dir) },
      ]);
      const r = await push(dir, 'origin', 'main');
      const remote = said(r)
        .split('\n')
        .filter((l) => l.startsWith('remote:'))
        .join('\n');
      const missing = Array.from({ length: 18 }, (_, i) => `n${String(i + 1).padStart(2, '0')}`).filter((m) => !remote.includes(m));
      // n13 (a .gitmodules file) may be refused by git's fsck before the hook lists names.
      if (!remote.includes('n13') && said(r).includes('gitmodules')) missing.splice(missing.indexOf('n13'), 1);
      expect(missing, said(r)).toEqual([]);
      await expectNothingChanged(r, before, sha, ['eng/names/readmen09.txt', 'eng/names/fmn15.md']);
    });

    it('Eng/x.md next to eng/x.md: git does what REST does with the same two paths', async () => {
      await w.page('eng/case/rest.md', page('Lower'));
      const viaRest = await w.owner.post('/api/v1/nodes', { path: 'Eng/case/rest.md', content: page('Upper') });
      await w.page('eng/case/git.md', page('Lower'));
      const before = await w.remoteHead();
      const dir = await w.clone();
      writeFile(dir, 'Eng/case/git.md', page('Upper'));
      const sha = await commitAll(w.g, dir, 'Case twin');
      const r = await push(dir);
      if (viaRest.status === 201) {
        expect(r.code, said(r)).toBe(0);
        const lower = await w.read('eng/case/git.md');
        const upper = await w.read('Eng/case/git.md');
        expect([lower.status, upper.status]).toEqual([200, 200]);
        expect(upper.body.id).not.toBe(lower.body.id);
        expect(upper.body.commit_sha).toBe(sha);
      } else {
        await expectNothingChanged(r, before, sha, ['Eng/case/git.md']);
      }
    });

    it('an 8 MiB blob of zeros (a tiny pack) is refused by its size', async () => {
      const before = await w.remoteHead();
      const dir = await w.clone();
      writeFile(dir, 'eng/zeros/bomb.md', Buffer.alloc(8 * 1024 * 1024));
      const sha = await commitAll(w.g, dir, 'Zeros');
      const r = await push(dir, 'origin', 'main');
      expect(said(r)).toMatch(/bomb\.md.*larger than/);
      await expectNothingChanged(r, before, sha, ['eng/zeros/bomb.md']);
    });

    it('tags (lightweight and annotated) pushed alongside main: the whole push is refused', async () => {
      const dir = await w.clone();
      writeFile(dir, 'eng/tagged/page.md', page('Tagged'));
      const sha = await commitAll(w.g, dir, 'Tagged');
      await w.g.ok(['tag', 'light'], { cwd: dir });
      await w.g.ok(['tag', '-a', 'heavy', '-m', 'annotated'], { cwd: dir });
      const before = await w.remoteHead();
      await expectNothingChanged(await push(dir, 'origin', 'main', '--tags'), before, sha, ['eng/tagged/page.md']);
      await expectNothingChanged(await push(dir, '--follow-tags', 'origin', 'main'), before, sha, ['eng/tagged/page.md']);
      expect(await w.g.ok(['ls-remote', w.url()])).not.toMatch(/refs\/tags/);
    });

    it('main and another branch in one push: nothing lands', async () => {
      const dir = await w.clone();
      writeFile(dir, 'eng/twobranch/page.md', page('Two branches'));
      const sha = await commitAll(w.g, dir, 'Two branches');
      const before = await w.remoteHead();
      const r = await push(dir, 'origin', 'main', 'main:refs/heads/other');
      await expectNothingChanged(r, before, sha, ['eng/twobranch/page.md']);
      expect(await w.g.ok(['ls-remote', w.url()])).not.toMatch(/refs\/heads\/other/);
    });

    it('git push --mirror is refused and leaves only main', async () => {
      const dir = await w.clone();
      writeFile(dir, 'eng/mirror/page.md', page('Mirror'));
      const sha = await commitAll(w.g, dir, 'Mirror');
      await w.g.ok(['tag', 'm1'], { cwd: dir });
      await w.g.ok(['branch', 'side'], { cwd: dir });
      const before = await w.remoteHead();
      await expectNothingChanged(await push(dir, '--mirror', 'origin'), before, sha, ['eng/mirror/page.md']);
      const refs = (await w.g.ok(['ls-remote', w.url()])).split('\n').filter(Boolean);
      expect(refs.map((l) => l.split('\t')[1])).toEqual(['HEAD', 'refs/heads/main']);
    });

    it('deleting main, and pushing to other refs (a branch, HEAD, notes) are refused', async () => {
      const dir = await w.clone();
      const before = await w.remoteHead();
      await expectNothingChanged(await push(dir, 'origin', ':main'), before, null);
      await expectNothingChanged(await push(dir, 'origin', 'main:refs/heads/other'), before, null);
      await expectNothingChanged(await push(dir, 'origin', 'main:HEAD'), before, null);
      await expectNothingChanged(await push(dir, 'origin', 'main:refs/notes/commits'), before, null);
    });

    it('an unrelated history forced over main is refused', async () => {
      const dir = await w.clone();
      await w.g.ok(['checkout', '-q', '--orphan', 'alien'], { cwd: dir });
      await w.g.ok(['rm', '-rq', '--cached', '.'], { cwd: dir });
      fs.rmSync(path.join(dir, 'eng'), { recursive: true, force: true });
      writeFile(dir, 'eng/alien/page.md', page('Alien'));
      const sha = await commitAll(w.g, dir, 'Alien root');
      const before = await w.remoteHead();
      await expectNothingChanged(await push(dir, '--force', 'origin', 'alien:main'), before, sha, ['eng/alien/page.md']);
      expect((await w.read(startId)).status).toBe(200);
    });

    it('an unrelated history that merges main in (a fast-forward, main as second parent) lands as its tree', async () => {
      const dir = await w.clone();
      await w.g.ok(['checkout', '-q', '--orphan', 'alien'], { cwd: dir });
      await w.g.ok(['rm', '-rq', '--cached', '.'], { cwd: dir });
      fs.rmSync(path.join(dir, 'eng'), { recursive: true, force: true });
      writeFile(dir, 'eng/alien2/page.md', page('Alien two'));
      await commitAll(w.g, dir, 'Alien root two');
      await w.g.ok(['merge', '-q', '--allow-unrelated-histories', '-m', 'Bring main in', 'main'], { cwd: dir });
      const sha = await head(w.g, dir);
      const r = await push(dir, 'origin', 'alien:main');
      expect(r.code, said(r)).toBe(0);
      expect(await w.remoteHead()).toBe(sha);
      expect((await w.read('eng/base/start.md')).body.id).toBe(startId);
      const fresh = await freshCloneIsSound();
      expect(await head(w.g, fresh)).toBe(sha);
      await expectRestEqualsTree(fresh);
    });

    it('a merge bringing a side line (edit, add, and a move on main): REST shows the merged content and keeps ids', async () => {
      const a = await w.page('eng/merge/alpha.md', page('Alpha'));
      const b = await w.page('eng/merge/bravo.md', '# Bravo\n\nMoving.\n');
      const dir = await w.clone();
      await w.g.ok(['checkout', '-q', '-b', 'side'], { cwd: dir });
      writeFile(dir, 'eng/merge/alpha.md', '# Alpha\n\nEdited on the side line.\n');
      writeFile(dir, 'eng/merge/side.md', page('Side'));
      await commitAll(w.g, dir, 'Side line');
      await w.g.ok(['checkout', '-q', 'main'], { cwd: dir });
      fs.mkdirSync(path.join(dir, 'ops/merge'), { recursive: true });
      await w.g.ok(['mv', 'eng/merge/bravo.md', 'ops/merge/bravo.md'], { cwd: dir });
      await commitAll(w.g, dir, 'Move bravo on main');
      await w.g.ok(['merge', '-q', '--no-ff', '-m', 'Merge side', 'side'], { cwd: dir });
      const sha = await head(w.g, dir);
      const r = await push(dir, 'origin', 'main');
      expect(r.code, said(r)).toBe(0);
      expect(await w.remoteHead()).toBe(sha);
      expect((await w.read('eng/merge/alpha.md')).body).toMatchObject({ id: a.id, content: '# Alpha\n\nEdited on the side line.\n' });
      expect((await w.read('ops/merge/bravo.md')).body.id).toBe(b.id);
      expect((await w.read('eng/merge/bravo.md')).status).toBe(404);
      expect((await w.read('eng/merge/side.md')).status).toBe(200);
      await expectRestEqualsTree(await freshCloneIsSound());
    });

    // Regression for finding #2 of /tmp/briefs/gitattack.findings.md (fixed in src/): the side line's delete is applied, then the merge
    // re-creates the page under a new id; its history, threads and links stay with the old id.
    it('a side line deletes a page that main edited; the merge keeps the page: it keeps its id', async () => {
      const p = await w.page('eng/keep/charlie.md', page('Charlie'));
      const dir = await w.clone();
      await w.g.ok(['checkout', '-q', '-b', 'side'], { cwd: dir });
      await w.g.ok(['rm', '-q', 'eng/keep/charlie.md'], { cwd: dir });
      await commitAll(w.g, dir, 'Side drops charlie');
      await w.g.ok(['checkout', '-q', 'main'], { cwd: dir });
      writeFile(dir, 'eng/keep/charlie.md', '# Charlie\n\nEdited on main, kept by the merge.\n');
      const edited = await commitAll(w.g, dir, 'Main edits charlie');
      const m = await w.g.git(['merge', '-q', '-m', 'Merge side, keep charlie', 'side'], { cwd: dir });
      expect(m.code).not.toBe(0); // modify/delete conflict: resolved by keeping main's version
      await w.g.ok(['add', 'eng/keep/charlie.md'], { cwd: dir });
      await w.g.ok(['commit', '-q', '--no-edit'], { cwd: dir });
      const r = await push(dir, 'origin', 'main');
      expect(r.code, said(r)).toBe(0);
      const now = await w.read('eng/keep/charlie.md');
      expect(now.body.content).toBe('# Charlie\n\nEdited on main, kept by the merge.\n');
      expect(now.body.id, 'the page was deleted and re-created under a new id').toBe(p.id);
      expect((await w.history(p.id)).slice(-2)).toEqual([edited, p.commit_sha]);
    });

    it('a bad file that a later commit of the same push removes: refused (history keeps every commit)', async () => {
      const dir = await w.clone();
      writeFile(dir, 'eng/transient/bad.txt', 'not a page\n');
      await commitAll(w.g, dir, 'Add bad');
      await w.g.ok(['rm', '-q', 'eng/transient/bad.txt'], { cwd: dir });
      writeFile(dir, 'eng/transient/good.md', page('Good'));
      const sha = await commitAll(w.g, dir, 'Remove bad');
      const before = await w.remoteHead();
      const r = await push(dir, 'origin', 'main');
      expect(said(r)).toMatch(/bad\.txt/);
      await expectNothingChanged(r, before, sha, ['eng/transient/good.md']);
    });
  });

  describe('protocol abuse', () => {
    const rp = (body: Buffer, headers: Record<string, string> = {}) =>
      raw(w.s.url, {
        method: 'POST',
        path: `/git/${w.ws.slug}.git/git-receive-pack`,
        headers: { ...auth(), 'content-type': 'application/x-git-receive-pack-request', ...headers },
        body,
      });

    /** After an abuse: main did not move, and an ordinary push still lands (no stuck turn). */
    async function stillServes(before: string | null): Promise<void> {
      expect(await w.remoteHead()).toBe(before);
      expect(await cacheRefs()).toBe(`refs/heads/main ${before}`);
      const dir = await w.clone();
      writeFile(dir, `eng/alive/p${Date.now()}${Math.floor(Math.random() * 1e6)}.md`, page('Alive'));
      const sha = await commitAll(w.g, dir, 'Still alive');
      const r = await gitBounded(w.g, ['push', 'origin', 'main'], { cwd: dir, timeoutMs: 60_000 });
      expect(r.code, said(r)).toBe(0);
      expect(await w.remoteHead()).toBe(sha);
    }

    it('garbage bodies to git-receive-pack and git-upload-pack: no 5xx, nothing changes', async () => {
      const before = await w.remoteHead();
      const junk = [Buffer.from('garbage'), Buffer.from('zzzz'), Buffer.from('ffff' + 'x'.repeat(100)), Buffer.alloc(4096, 0xff), Buffer.alloc(0)];
      for (const body of junk) {
        const a = await rp(body);
        expect(a.status, a.body.toString()).toBeLessThan(500);
        const b = await raw(w.s.url, {
          method: 'POST',
          path: `/git/${w.ws.slug}.git/git-upload-pack`,
          headers: { ...auth(), 'content-type': 'application/x-git-upload-pack-request' },
          body,
        });
        expect(b.status, b.body.toString()).toBeLessThan(500);
      }
      // A command naming main but followed by a pack that is not one.
      const a = await rp(
        Buffer.concat([pkt(`${before} ${'1'.repeat(40)} refs/heads/main\0 report-status\n`), FLUSH, Buffer.from('PACK\0\0\0\x02\0\0\0\x05garbage')]),
      );
      expect(a.status).toBeLessThan(500);
      await stillServes(before);
    });

    it('a wrong content type is refused', async () => {
      const a = await rp(FLUSH, { 'content-type': 'application/json' });
      expect(a.status).toBeGreaterThanOrEqual(400);
      expect(a.status).toBeLessThan(500);
    });

    it('gzip bombs (Content-Encoding: gzip) to both services: answered, nothing changes, next push works', async () => {
      const before = await w.remoteHead();
      const zeros = zlib.gzipSync(Buffer.alloc(256 * 1024 * 1024), { level: 9 });
      const xs = zlib.gzipSync(Buffer.alloc(256 * 1024 * 1024, 'x'), { level: 9 });
      expect(zeros.length).toBeLessThan(MAX_MB * 1024 * 1024);
      for (const body of [zeros, xs]) {
        const a = await rp(body, { 'content-encoding': 'gzip' });
        expect(a.status, a.body.toString().slice(0, 200)).toBeLessThan(500);
        const b = await raw(w.s.url, {
          method: 'POST',
          path: `/git/${w.ws.slug}.git/git-upload-pack`,
          headers: { ...auth(), 'content-type': 'application/x-git-upload-pack-request', 'content-encoding': 'gzip' },
          body,
        });
        expect(b.status, b.body.toString().slice(0, 200)).toBeLessThan(500);
      }
      await stillServes(before);
    });

    it(`a push over GIT_PUSH_MAX_MB (${MAX_MB}) through git fails and changes nothing; the next push works`, async () => {
      const before = await w.remoteHead();
      const dir = await w.clone();
      // Random text does not compress: the pack is over the limit.
      // Base64 of random bytes packs to about 3/4 of its size: four such pages are well over 1 MB.
      for (const n of ['a', 'b', 'c', 'd']) writeFile(dir, `eng/huge/${n}.md`, `# ${n}\n\n${randomText(700 * 1024)}\n`);
      const sha = await commitAll(w.g, dir, 'Too big');
      const r = await w.g.git(['push', 'origin', 'main'], { cwd: dir });
      await expectNothingChanged(r, before, sha, ['eng/huge/a.md', 'eng/huge/d.md']);
      await stillServes(before === null ? null : await w.remoteHead());
    });

    // Regression for finding #4 of /tmp/briefs/gitattack.findings.md (fixed in src/): http-backend has answered 200 before the body is read,
    // so the documented 413 never reaches the client; git reports a pack error instead.
    it(`a raw POST over GIT_PUSH_MAX_MB (${MAX_MB}) is answered 413, as docs/api.md says`, async () => {
      const before = await w.remoteHead();
      const big = Buffer.concat([pkt(`${before} ${'1'.repeat(40)} refs/heads/main\0 report-status\n`), FLUSH, Buffer.alloc(2 * 1024 * 1024, 0x41)]);
      const a = await rp(big).catch((e: Error) => ({ status: -1, headers: {}, body: Buffer.from(e.message) }));
      expect(a.status, a.body.toString()).toBe(413);
    });

    // Regression for finding #5 of /tmp/briefs/gitattack.findings.md (fixed in src/): the limit counts the bytes on the wire; a gzip body
    // is inflated by http-backend without any limit.
    it(`a gzip-encoded push whose decoded body is over GIT_PUSH_MAX_MB (${MAX_MB}) is refused`, async () => {
      const before = await w.remoteHead();
      const dir = await w.clone();
      // Two pages just under 1 MiB each, packed without compression or deltas (a crafted client may), then gzipped.
      for (const n of [1, 2]) writeFile(dir, `eng/inflate/p${n}.md`, `# P${n}\n\n${'a'.repeat(900 * 1024)}\n`);
      const sha = await commitAll(w.g, dir, 'Inflates past the limit');
      const body = await receivePackBody(w.g, dir, before!, sha, ['--window=0']);
      expect(body.length).toBeGreaterThan(1.5 * MAX_MB * 1024 * 1024);
      const gz = zlib.gzipSync(body);
      expect(gz.length).toBeLessThan(MAX_MB * 1024 * 1024);
      const a = await rp(gz, { 'content-encoding': 'gzip' });
      expect(await w.remoteHead(), `a ${body.length}-byte push landed through a ${gz.length}-byte gzip body: ${a.body.toString('latin1').slice(0, 300)}`).toBe(
        before,
      );
    });

    it('a Git-Protocol header with shell metacharacters is ignored (v0 is served, nothing runs)', async () => {
      const marker = path.join(w.g.root, 'pwned');
      for (const value of [
        `version=2; touch ${marker}`,
        `version=2$(touch ${marker})`,
        `version=2\`touch ${marker}\``,
        'version=2 && id',
        'version=2:'.repeat(500),
      ]) {
        const a = await raw(w.s.url, { path: `/git/${w.ws.slug}.git/info/refs?service=git-upload-pack`, headers: { ...auth(), 'git-protocol': value } });
        expect(a.status).toBe(200);
        // A v0 advertisement lists refs; v2 would list capabilities only.
        expect(a.body.toString('latin1')).toMatch(/refs\/heads\/main/);
      }
      expect(fs.existsSync(marker)).toBe(false);
    });

    it('huge headers are refused without 5xx and the server keeps serving', async () => {
      const refused = { status: 431, headers: {}, body: Buffer.alloc(0) };
      const hugeAuth = await raw(w.s.url, {
        path: `/git/${w.ws.slug}.git/info/refs?service=git-upload-pack`,
        headers: { authorization: `Basic ${'A'.repeat(200_000)}` },
      }).catch(() => refused);
      expect(hugeAuth.status).toBeGreaterThanOrEqual(400);
      expect(hugeAuth.status).toBeLessThan(500);
      const many: Record<string, string> = { ...auth() };
      for (let i = 0; i < 2000; i++) many[`x-h${i}`] = 'v';
      const manyHeaders = await raw(w.s.url, { path: `/git/${w.ws.slug}.git/info/refs?service=git-upload-pack`, headers: many }).catch(() => refused);
      expect(manyHeaders.status).toBeLessThan(500);
      const ok = await raw(w.s.url, { path: `/git/${w.ws.slug}.git/info/refs?service=git-upload-pack`, headers: auth() });
      expect(ok.status).toBe(200);
    });

    it('dumb-protocol paths, other methods, traversal and odd query strings never leak the repository', async () => {
      const slug = w.ws.slug;
      const sha = String((await w.read('eng/base/start.md')).body.commit_sha);
      const cases: { method: string; path: string; body?: Buffer }[] = [
        { method: 'GET', path: `/git/${slug}.git/HEAD` },
        { method: 'GET', path: `/git/${slug}.git/objects/info/packs` },
        { method: 'GET', path: `/git/${slug}.git/info/refs` },
        { method: 'GET', path: `/git/${slug}.git/objects/${sha.slice(0, 2)}/${sha.slice(2)}` },
        { method: 'GET', path: `/git/${slug}.git/hooks/pre-receive` },
        { method: 'GET', path: `/git/${slug}.git/hooks/pre-receive.mjs` },
        { method: 'GET', path: `/git/${slug}.git/info/refs?service=git-upload-archive` },
        { method: 'GET', path: `/git/${slug}.git/info/refs?service=git-upload-pack&service=git-upload-pack` },
        { method: 'GET', path: `/git/${slug}.git/git-upload-pack` },
        { method: 'POST', path: `/git/${slug}.git/info/refs?service=git-upload-pack`, body: FLUSH },
        { method: 'POST', path: `/git/${slug}.git/git-upload-archive`, body: FLUSH },
        { method: 'PUT', path: `/git/${slug}.git/git-receive-pack`, body: FLUSH },
        { method: 'DELETE', path: `/git/${slug}.git/info/refs?service=git-upload-pack` },
        { method: 'PATCH', path: `/git/${slug}.git/git-receive-pack`, body: FLUSH },
        { method: 'OPTIONS', path: `/git/${slug}.git/info/refs?service=git-upload-pack` },
        { method: 'PROPFIND', path: `/git/${slug}.git/` },
        { method: 'GET', path: `/git/${slug}.git/../${w.ws.id}.git/info/refs?service=git-upload-pack` },
        { method: 'POST', path: `/git/${slug}.git/%2e%2e/${w.ws.id}.git/git-upload-pack`, body: FLUSH },
        { method: 'GET', path: `/git/${slug}.git/info/refs/..%2f..%2fconfig?service=git-upload-pack` },
        { method: 'GET', path: `/git/${slug}.git/info/refs?service=git-upload-pack%0aX-Injected:%20yes` },
        { method: 'GET', path: `/git//${slug}.git/info/refs?service=git-upload-pack` },
      ];
      for (const c of cases) {
        for (const h of [auth(), {}]) {
          const a = await raw(w.s.url, { method: c.method, path: c.path, headers: h, ...(c.body ? { body: c.body } : {}) });
          const what = `${c.method} ${c.path} (${Object.keys(h).length ? 'token' : 'anonymous'}): ${a.status} ${a.body.toString('latin1').slice(0, 200)}`;
          expect(a.status, what).toBeGreaterThanOrEqual(400);
          expect(a.status, what).toBeLessThan(500);
          expect(a.body.toString('latin1'), what).not.toMatch(/\[core\]|CV_HOOK|#!\/bin\/sh|[0-9a-f]{40} refs\//);
          expect(a.headers['x-injected'], what).toBeUndefined();
        }
      }
    });

    it('HEAD on info/refs answers without a body; extra query parameters are ignored', async () => {
      const h = await raw(w.s.url, { method: 'HEAD', path: `/git/${w.ws.slug}.git/info/refs?service=git-upload-pack`, headers: auth() });
      expect(h.status).toBeLessThan(500);
      expect(h.body.length).toBe(0);
      const anon = await raw(w.s.url, { method: 'HEAD', path: `/git/${w.ws.slug}.git/info/refs?service=git-upload-pack` });
      expect(anon.status).toBe(401);
      const extra = await raw(w.s.url, { path: `/git/${w.ws.slug}.git/info/refs?foo=bar&service=git-upload-pack&GIT_DIR=/etc&x=%00`, headers: auth() });
      expect(extra.status).toBe(200);
      expect(extra.body.toString('latin1')).toMatch(/refs\/heads\/main/);
    });
  });

  it('after all of it: a fresh clone passes fsck --strict, REST equals the tree, and the cache holds only main', async () => {
    const dir = await freshCloneIsSound();
    await expectRestEqualsTree(dir);
    expect(await cacheRefs()).toBe(`refs/heads/main ${await w.remoteHead()}`);
  });
});

/**
 * Uploads that never finish. Each test wedges its own server on purpose (a finding), so each has
 * its own; the git processes it leaves behind are killed by id afterwards.
 */
describe.each(testEngines())('git face: uploads that never finish (%s)', (engine) => {
  /** Kills, by id, what the server spawned for this world and left running. */
  function killStrays(cacheRoot: string): void {
    for (const pid of backendsOf(cacheRoot)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }

  async function withWorld(fn: (w: GitWorld) => Promise<void>): Promise<void> {
    const w = await setupGitWorld(engine);
    await w.page('eng/base/start.md', '# Start\n');
    try {
      await fn(w);
    } finally {
      killStrays(w.s.ctx.config.git.cacheDir);
      await w.stop();
    }
  }

  /** The git processes the server runs for this world's cache (found by its unique GIT_PROJECT_ROOT). */
  function backendsOf(cacheRoot: string): number[] {
    const pids: number[] = [];
    for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
      try {
        if (fs.readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(`GIT_PROJECT_ROOT=${cacheRoot}`)) pids.push(Number(pid));
      } catch {
        // gone meanwhile
      }
    }
    return pids;
  }

  /**
   * Starts a push upload and sends half of it; resolves once the server runs git for it (the
   * answer's headers wait for git's first output, which waits for the whole body).
   */
  async function startUpload(w: GitWorld, body: Buffer, withLength: boolean): Promise<{ hangUp(): void }> {
    const u = new URL(w.s.url);
    const headers: Record<string, string> = { authorization: basic(w.token), 'content-type': 'application/x-git-receive-pack-request' };
    if (withLength) headers['content-length'] = String(body.length);
    const req = http.request({ host: u.hostname, port: u.port, method: 'POST', path: `/git/${w.ws.slug}.git/git-receive-pack`, headers });
    req.on('error', () => undefined);
    req.on('response', (res) => res.resume());
    req.write(body.subarray(0, Math.floor(body.length / 2)));
    // Wait for git receive-pack itself: by then http-backend is copying the body to it.
    const receiving = () =>
      backendsOf(w.s.ctx.config.git.cacheDir).some((pid) => {
        try {
          return fs.readFileSync(`/proc/${pid}/cmdline`, 'latin1').includes('receive-pack');
        } catch {
          return false;
        }
      });
    for (let i = 0; i < 400 && !receiving(); i++) await new Promise((r) => setTimeout(r, 50));
    expect(receiving(), 'git receive-pack never started for the upload').toBe(true);
    return { hangUp: () => req.destroy() };
  }

  async function pushBody(w: GitWorld): Promise<Buffer> {
    const before = (await w.remoteHead())!;
    const dir = await w.clone();
    writeFile(dir, 'eng/hangup/page.md', `# Hang up\n\n${randomText(200 * 1024)}\n`);
    const sha = await commitAll(w.g, dir, 'Hang up');
    return receivePackBody(w.g, dir, before, sha);
  }

  /**
   * An ordinary push after the abuse lands (bounded: a wedged workspace makes git time out; the
   * bound is generous because CI runs the git suites of both engines side by side on 2 cores).
   */
  async function nextPushLands(w: GitWorld): Promise<void> {
    const dir = w.g.path('after');
    const c = await gitBounded(w.g, ['clone', '-q', w.url(), dir], { timeoutMs: 30_000 });
    expect(c.code, `the clone after a hang-up: ${said(c)}`).toBe(0);
    writeFile(dir, 'eng/alive/after.md', '# Alive\n');
    const sha = await commitAll(w.g, dir, 'After the hang-up');
    const r = await gitBounded(w.g, ['push', 'origin', 'main'], { cwd: dir, timeoutMs: 30_000 });
    expect(r.code, `the push after a hang-up: ${said(r)}`).toBe(0);
    let ls = await gitBounded(w.g, ['ls-remote', w.url(), 'refs/heads/main'], { timeoutMs: 30_000 });
    // Under heavy CI load an ls-remote right after such a push has listed no refs at all (exit 0)
    // for a few hundred ms, twice in a row, while the cache and the database both held the pushed
    // main and a later ls-remote listed it. Not understood yet (an open bug in the session notes:
    // the git face may answer an empty listing for a moment after a push). What this test proves
    // is that the push landed and nothing is stuck: a few more looks within 3 s, then the full
    // picture if it is still wrong.
    for (let i = 0; i < 10 && ls.code === 0 && ls.stdout.trim() === ''; i++) {
      await new Promise((r) => setTimeout(r, 300));
      ls = await gitBounded(w.g, ['ls-remote', w.url(), 'refs/heads/main'], { timeoutMs: 30_000 });
    }
    if (ls.stdout.split('\t')[0] !== sha) {
      // Seen once under heavy CI load (empty answer, exit code unknown): say everything there is to see.
      const cache = path.join(w.s.ctx.config.git.cacheDir, `${w.ws.id}.git`);
      const refs = await gitBounded(w.g, ['--git-dir', cache, 'show-ref'], { timeoutMs: 30_000 });
      const again = await gitBounded(w.g, ['ls-remote', w.url(), 'refs/heads/main'], { timeoutMs: 30_000 });
      const head = await w.remoteHead();
      expect.fail(
        `ls-remote after the push: exit ${ls.code}: ${said(ls)}; the cache's refs: ${said(refs)}; the database's main: ${head}; ls-remote again: ${said(again)}`,
      );
    }
  }

  it('a client that hangs up mid-upload (chunked) leaves no stuck turn: the next push lands', { timeout: 120_000 }, async () => {
    await withWorld(async (w) => {
      const up = await startUpload(w, await pushBody(w), false);
      up.hangUp();
      expect((await w.read('eng/hangup/page.md')).status).toBe(404);
      await nextPushLands(w);
    });
  });

  // Regression for finding #1 of /tmp/briefs/gitattack.findings.md (fixed in src/): with a Content-Length, git http-backend (2.39) spins on
  // EOF and is never killed; the push's turn is never released and the workspace's git face hangs.
  it('a client that hangs up mid-upload (Content-Length) leaves no stuck turn: the next push lands', { timeout: 120_000 }, async () => {
    await withWorld(async (w) => {
      const up = await startUpload(w, await pushBody(w), true);
      up.hangUp();
      expect((await w.read('eng/hangup/page.md')).status).toBe(404);
      await nextPushLands(w);
    });
  });

  // Regression for finding #3 of /tmp/briefs/gitattack.findings.md (fixed in src/): an open, silent upload holds the workspace's turn (up to
  // 30 minutes): every fetch and push of the workspace waits behind it.
  it('a stalled upload (connection open, client silent) does not block fetches of the workspace', { timeout: 120_000 }, async () => {
    await withWorld(async (w) => {
      const up = await startUpload(w, await pushBody(w), false);
      try {
        const r = await gitBounded(w.g, ['ls-remote', w.url(), 'refs/heads/main'], { timeoutMs: 15_000 });
        expect(r.code, `ls-remote while another push stalls: ${said(r)}`).toBe(0);
      } finally {
        up.hangUp();
      }
    });
  });
});

/** Text that does not compress (base64 of random bytes). */
function randomText(n: number): string {
  let s = '';
  while (s.length < n) s += Buffer.from(Array.from({ length: 3072 }, () => Math.floor(Math.random() * 256))).toString('base64');
  return s.slice(0, n);
}
