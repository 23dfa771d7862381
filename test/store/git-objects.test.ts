import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { inflateSync } from 'node:zlib';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/core/errors.js';
import type { Executor, Store } from '../../src/store/db.js';
import { clearTreeCache } from '../../src/store/git/cache.js';
import {
  EMPTY_BLOB_SHA,
  EMPTY_TREE_SHA,
  encodeCommit,
  encodeTree,
  hashObject,
  parseCommit,
  parseTree,
  validateName,
  type CommitData,
  type TreeEntry,
} from '../../src/store/git/codec.js';
import { exportToBareRepo } from '../../src/store/git/export.js';
import { ObjectStore } from '../../src/store/git/object-store.js';
import { MAX_DELTA_DEPTH } from '../../src/store/git/tree-deltas.js';
import { commitFiles } from '../../src/core/pages/commit.js';
import { inTransaction } from '../../src/store/tx.js';
import { applyChanges, listTree, readPath } from '../../src/store/git/tree-paths.js';
import { openTestStore, testEngines } from '../support/engines.js';

// Keep the user's and the system's git configuration out of the checks.
const gitEnv = { ...process.env, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null' };
const tmpDirs: string[] = [];

function tmpDir(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-git-'));
  tmpDirs.push(d);
  return d;
}

function git(dir: string, args: string[], input?: string | Buffer): string {
  return execFileSync('git', [`--git-dir=${dir}`, ...args], { env: gitEnv, input, encoding: 'utf8', maxBuffer: 256 << 20 });
}

function gitOk(dir: string, args: string[]): boolean {
  return spawnSync('git', [`--git-dir=${dir}`, ...args], { env: gitEnv, stdio: 'ignore' }).status === 0;
}

function fsck(dir: string): void {
  const r = spawnSync('git', [`--git-dir=${dir}`, 'fsck', '--strict', '--no-dangling', '--full'], { env: gitEnv, encoding: 'utf8' });
  expect(r.stderr + r.stdout).toBe('');
  expect(r.status).toBe(0);
}

function emptyRepo(): string {
  const dir = tmpDir();
  execFileSync('git', ['init', '--bare', '--quiet', dir], { env: gitEnv });
  return dir;
}

afterAll(() => {
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

const T0 = 1_700_000_000;
const ident = (t: number) => ({ name: 'Ada Lovelace', email: 'ada@example.com', timestamp: t, tzOffset: '+0000' });
const blobSha = (content: string) => hashObject('blob', Buffer.from(content, 'utf8'));
const file = (name: string, sha: string): TreeEntry => ({ mode: '100644', name, sha });
const dir = (name: string, sha: string): TreeEntry => ({ mode: '40000', name, sha });

function expectServiceError(fn: () => unknown, status: number, code?: string): void {
  let err: unknown;
  try {
    fn();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(ServiceError);
  expect((err as ServiceError).status).toBe(status);
  if (code) expect((err as ServiceError).code).toBe(code);
}

describe('git encoding (pure)', () => {
  it('hashes objects exactly as git does', () => {
    expect(hashObject('blob', Buffer.alloc(0))).toBe(EMPTY_BLOB_SHA);
    expect(EMPTY_BLOB_SHA).toBe('e69de29bb2d1d6434b8b29ae775ad8c2e48c5391');
    expect(hashObject('blob', Buffer.from('hello\n'))).toBe('ce013625030ba8dba906f756967f9e9ca394464a');
    expect(hashObject('tree', encodeTree([]))).toBe(EMPTY_TREE_SHA);
    expect(EMPTY_TREE_SHA).toBe('4b825dc642cb6eb9a060e54bf8d69288fbee4904');
    const bytes = Buffer.from(Array.from({ length: 3000 }, (_, i) => (i * 7919) % 256));
    const repo = emptyRepo();
    expect(git(repo, ['hash-object', '--stdin'], bytes).trim()).toBe(hashObject('blob', bytes));
  });

  it('sorts tree entries as git does (directories as if named with a trailing slash, UTF-8 byte order)', () => {
    const a = blobSha('a');
    const b = blobSha('b');
    const entries: TreeEntry[] = [
      file('a.md', a),
      dir('a', EMPTY_TREE_SHA),
      file('a-b', b),
      file('b', a),
      file('\u{1F600}.md', a), // astral: after U+FF21 in UTF-8, before it in UTF-16
      file('\uFF21.md', b),
      file('\u00e9.md', a),
      dir('a0', EMPTY_TREE_SHA),
    ];
    const body = encodeTree(entries);
    expect(parseTree(body).map((e) => e.name)).toEqual(['a-b', 'a.md', 'a', 'a0', 'b', '\u00e9.md', '\uFF21.md', '\u{1F600}.md']);
    expect(parseTree(body)).toEqual(expect.arrayContaining(entries));
    // git's own tree builder must agree byte for byte.
    const repo = emptyRepo();
    const input = entries.map((e) => `${e.mode === '40000' ? '040000 tree' : '100644 blob'} ${e.sha}\t${e.name}\n`).join('');
    expect(git(repo, ['mktree', '--missing'], input).trim()).toBe(hashObject('tree', body));
  });

  it('rejects names git would refuse', () => {
    for (const name of ['', '.', '..', 'a/b', 'a\0b', 'a\nb', '.git', '.GIT', '.git. ', 'git~1', '.g\u200cit', 'x'.repeat(256)]) {
      expectServiceError(() => validateName(name), 400, 'invalid_path');
      expectServiceError(() => encodeTree([file(name, EMPTY_BLOB_SHA)]), 400);
    }
    expectServiceError(() => encodeTree([file('a', EMPTY_BLOB_SHA), dir('a', EMPTY_TREE_SHA)]), 400);
    expectServiceError(() => encodeTree([file('a', EMPTY_BLOB_SHA), file('b', EMPTY_BLOB_SHA), file('a', EMPTY_TREE_SHA)]), 400);
    expectServiceError(() => encodeTree([dir('x', EMPTY_TREE_SHA), file('x-1', EMPTY_BLOB_SHA), file('x', EMPTY_BLOB_SHA)]), 400);
    // Trees read from outside (a push) are held to the same rules, and must be UTF-8.
    const sha = Buffer.from(EMPTY_BLOB_SHA, 'hex');
    expectServiceError(() => parseTree(Buffer.concat([Buffer.from('100644 .git\0'), sha])), 400);
    expectServiceError(() => parseTree(Buffer.concat([Buffer.from('100644 caf'), Buffer.from([0xe9, 0]), sha])), 400);
    expectServiceError(() => parseTree(Buffer.concat([Buffer.from('100755 run.sh\0'), sha])), 400);
    expectServiceError(() => parseTree(Buffer.from('100644 truncated\0abc')), 400);
    expectServiceError(() => encodeTree([file('a', 'not-a-sha')]), 400);
    expect(() => validateName('.gitignore')).not.toThrow();
    expect(() => validateName('page.md')).not.toThrow();
  });

  it('encodes commits exactly as git commit-tree does', () => {
    const repo = emptyRepo();
    const env = {
      ...gitEnv,
      GIT_AUTHOR_NAME: 'Ada Lovelace',
      GIT_AUTHOR_EMAIL: 'ada@example.com',
      GIT_AUTHOR_DATE: `${T0} +0000`,
      GIT_COMMITTER_NAME: 'Bot',
      GIT_COMMITTER_EMAIL: 'bot@example.com',
      GIT_COMMITTER_DATE: `${T0 + 5} -0230`,
    };
    const run = (args: string[]) => execFileSync('git', [`--git-dir=${repo}`, ...args], { env, encoding: 'utf8' }).trim();
    const first = run(['commit-tree', EMPTY_TREE_SHA, '-m', 'First line\n\nBody text']);
    const second = run(['commit-tree', EMPTY_TREE_SHA, '-p', first, '-m', 'Second']);
    const base: Omit<CommitData, 'parents' | 'message'> = {
      tree: EMPTY_TREE_SHA,
      author: ident(T0),
      committer: { name: 'Bot', email: 'bot@example.com', timestamp: T0 + 5, tzOffset: '-0230' },
    };
    const c1: CommitData = { ...base, parents: [], message: 'First line\n\nBody text' };
    expect(hashObject('commit', encodeCommit(c1))).toBe(first);
    const c2: CommitData = { ...base, parents: [first], message: 'Second\n' };
    expect(hashObject('commit', encodeCommit(c2))).toBe(second);
    expect(parseCommit(encodeCommit(c2))).toEqual(c2);
    expect(parseCommit(encodeCommit(c1)).message).toBe('First line\n\nBody text\n');
  });

  it('sanitizes identities and rejects malformed times', () => {
    const c: CommitData = {
      tree: EMPTY_TREE_SHA,
      parents: [],
      author: { name: 'Eve <evil@x.org>\ncommitter Mallory', email: 'e<v>e@x.org\n', timestamp: T0, tzOffset: '+0100' },
      committer: { name: '<>', email: '', timestamp: T0, tzOffset: '+0000' },
      message: 'msg\0hidden',
    };
    const body = encodeCommit(c);
    const text = body.toString('utf8');
    expect(text.match(/^author /gm)).toHaveLength(1);
    expect(text.match(/^committer /gm)).toHaveLength(1);
    const parsed = parseCommit(body);
    expect(parsed.author).toEqual({ name: 'Eve evil@x.orgcommitter Mallory', email: 'eve@x.org', timestamp: T0, tzOffset: '+0100' });
    expect(parsed.committer.name).toBe('unknown');
    expect(parsed.message).toBe('msghidden\n');
    // git's own object checks accept it.
    const repo = emptyRepo();
    expect(git(repo, ['hash-object', '-t', 'commit', '--stdin'], body).trim()).toBe(hashObject('commit', body));
    expectServiceError(() => encodeCommit({ ...c, author: { ...c.author, timestamp: -1 } }), 400);
    expectServiceError(() => encodeCommit({ ...c, author: { ...c.author, timestamp: 1.5 } }), 400);
    expectServiceError(() => encodeCommit({ ...c, author: { ...c.author, tzOffset: 'UTC' } }), 400);
    expectServiceError(() => encodeCommit({ ...c, parents: ['abc'] }), 400);
  });
});

describe.each(testEngines())('git object store on %s', (engine) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  let wsCount = 0;

  beforeAll(async () => {
    ({ store, cleanup } = await openTestStore(engine));
  });
  afterAll(async () => {
    await cleanup?.();
  });

  async function newWorkspace(): Promise<string> {
    const id = `ws_${engine}_${++wsCount}`;
    await store.db.insertInto('workspaces').values({ id, slug: id, name: id, token_epoch: 0, created_at: new Date().toISOString() }).execute();
    return id;
  }

  /** One page-style commit (deferred writes, as commitFiles does): blobs, trees, commit and the ref move, in one transaction. */
  async function commit(ws: string, files: Record<string, string | null>, message: string, t: number) {
    return store.db.transaction().execute(async (trx) => {
      const objects = new ObjectStore(trx, ws, { deferWrites: true });
      const head = await objects.getRef('refs/heads/main');
      const parentTree = head ? (await objects.getCommit(head))!.tree : null;
      const changes = [];
      for (const [p, content] of Object.entries(files)) {
        changes.push({ path: p, blobSha: content === null ? null : await objects.putBlob(content) });
      }
      const tree = await applyChanges(objects, parentTree, changes);
      const sha = await objects.putCommit({ tree, parents: head ? [head] : [], author: ident(t), committer: ident(t), message });
      await objects.casRef('refs/heads/main', head, sha);
      return { commit: sha, tree };
    });
  }

  async function dataBytes(ws: string): Promise<number> {
    const r = await sql<{ n: number | string | null }>`select sum(length(data)) as n from git_objects where workspace_id = ${ws}`.execute(store.db);
    return Number(r.rows[0]?.n ?? 0);
  }

  async function subtreeSha(objects: ObjectStore, root: string, segments: string[]): Promise<string> {
    let sha = root;
    for (const s of segments) {
      const entry = (await objects.getTree(sha))!.find((e) => e.name === s);
      expect(entry?.mode).toBe('40000');
      sha = entry!.sha;
    }
    return sha;
  }

  it('stores deflated, content-addressed objects and reads them back', async () => {
    const ws = await newWorkspace();
    const objects = new ObjectStore(store.db, ws);
    const sha = await objects.putBlob('hello\n');
    expect(sha).toBe('ce013625030ba8dba906f756967f9e9ca394464a');
    expect(await objects.putBlob(Buffer.from('hello\n'))).toBe(sha);
    expect(await objects.putBlob('')).toBe(EMPTY_BLOB_SHA);
    const rows = await store.db.selectFrom('git_objects').selectAll().where('workspace_id', '=', ws).where('sha', '=', sha).execute();
    expect(rows).toHaveLength(1);
    expect(inflateSync(rows[0]!.data).toString()).toBe('hello\n');
    expect(rows[0]!.type).toBe('blob');
    expect((await objects.getBlob(sha))?.toString()).toBe('hello\n');
    expect(await objects.getObject(sha)).toEqual({ type: 'blob', body: Buffer.from('hello\n') });

    const tree = await objects.putTree([file('hello.txt', sha)]);
    expect(await objects.getTree(tree)).toEqual([file('hello.txt', sha)]);
    expect(await objects.putTree([])).toBe(EMPTY_TREE_SHA);
    expect(await objects.getTree(EMPTY_TREE_SHA)).toEqual([]);

    // Wrong type or unknown sha reads as absent; another workspace does not see these objects.
    expect(await objects.getTree(sha)).toBeNull();
    expect(await objects.getBlob(tree)).toBeNull();
    expect(await objects.getCommit(sha)).toBeNull();
    expect(await objects.getObject('0'.repeat(40))).toBeNull();
    const other = new ObjectStore(store.db, await newWorkspace());
    expect(await other.getObject(sha)).toBeNull();
    expect(await other.getTree(tree)).toBeNull();

    // A raw tree from outside must be canonical.
    const good = encodeTree([file('b', sha), file('a', sha)]);
    expect(await objects.putObject('tree', good)).toBe(hashObject('tree', good));
    const swapped = Buffer.concat([good.subarray(good.length / 2), good.subarray(0, good.length / 2)]);
    await expect(objects.putObject('tree', swapped)).rejects.toMatchObject({ status: 400 });
    // A commit must point at stored objects.
    await expect(objects.putCommit({ tree: '1'.repeat(40), parents: [], author: ident(T0), committer: ident(T0), message: 'x' })).rejects.toMatchObject({
      status: 400,
    });
  });

  it('deferred writes: reads of the store see them at once, the table only when the ref moves, in one go past 1,000 objects', async () => {
    const ws = await newWorkspace();
    const rows = async (db: Executor) =>
      Number((await sql<{ n: number | string }>`select count(*) as n from git_objects where workspace_id = ${ws}`.execute(db)).rows[0]!.n);
    const files = Array.from({ length: 1_200 }, (_, i) => ({ path: `s/f${i % 7}/p${i}.md`, content: `page ${i}\n` }));
    const head = await store.db.transaction().execute(async (trx) => {
      const objects = new ObjectStore(trx, ws, { deferWrites: true });
      const changes = [];
      for (const f of files) changes.push({ path: f.path, blobSha: await objects.putBlob(f.content) });
      const tree = await applyChanges(objects, null, changes);
      const sha = await objects.putCommit({ tree, parents: [], author: ident(T0), committer: ident(T0), message: 'many' });
      expect(await rows(trx)).toBe(0);
      expect(await objects.hasObject(sha)).toBe(true);
      expect((await objects.getCommit(sha))?.tree).toBe(tree);
      expect((await objects.getBlob(changes[5]!.blobSha))?.toString()).toBe('page 5\n');
      await objects.casRef('refs/heads/main', null, sha);
      // 1,200 blobs, 7 folders, s/, the root and the commit.
      expect(await rows(trx)).toBe(1_200 + 7 + 2 + 1);
      return sha;
    });
    const objects = new ObjectStore(store.db, ws);
    expect(await objects.getRef('refs/heads/main')).toBe(head);
    expect(await readPath(objects, (await objects.getCommit(head))!.tree, 's/f3/p3.md')).toBe(hashObject('blob', Buffer.from('page 3\n')));

    // A transaction that fails before its ref moves leaves nothing behind.
    const ws2 = await newWorkspace();
    await expect(
      store.db.transaction().execute(async (trx) => {
        const o = new ObjectStore(trx, ws2, { deferWrites: true });
        await o.putBlob('lost');
        throw new Error('failed before the ref moved');
      }),
    ).rejects.toThrow('failed before the ref moved');
    expect(await new ObjectStore(store.db, ws2).hasObject(hashObject('blob', Buffer.from('lost')))).toBe(false);
  });

  it('compare-and-swaps refs', async () => {
    const ws = await newWorkspace();
    const a = await commit(ws, { 's/f/a.md': 'a' }, 'a', T0);
    const b = await commit(ws, { 's/f/b.md': 'b' }, 'b', T0 + 1);
    const objects = new ObjectStore(store.db, ws);
    expect(await objects.getRef('refs/heads/main')).toBe(b.commit);
    const c = await objects.putCommit({ tree: a.tree, parents: [b.commit], author: ident(T0 + 2), committer: ident(T0 + 2), message: 'c' });

    // A stale expectation fails with `conflict` and leaves the ref alone.
    await expect(objects.casRef('refs/heads/main', a.commit, c)).rejects.toMatchObject({ status: 409, code: 'conflict' });
    await expect(objects.casRef('refs/heads/main', null, c)).rejects.toMatchObject({ status: 409, code: 'conflict' });
    expect(await objects.getRef('refs/heads/main')).toBe(b.commit);
    // A ref never points at something that is not a stored commit.
    await expect(objects.casRef('refs/heads/main', b.commit, a.tree)).rejects.toMatchObject({ status: 400 });
    await expect(objects.casRef('refs/heads/../x', b.commit, c)).rejects.toMatchObject({ status: 400 });
    expect(await objects.getRef('refs/heads/main')).toBe(b.commit);

    await objects.casRef('refs/heads/main', b.commit, c);
    expect(await objects.getRef('refs/heads/main')).toBe(c);
    expect(await objects.getRef('refs/heads/other')).toBeNull();
    await objects.casRef('refs/heads/other', null, a.commit);
    expect(await objects.getRef('refs/heads/other')).toBe(a.commit);
  });

  it('applies path changes and produces a history the real git CLI accepts', async () => {
    const ws = await newWorkspace();
    const steps: Array<{ files: Record<string, string | null>; message: string }> = [
      {
        message: 'create',
        files: {
          'eng/guides/setup.md': '# Setup\n',
          'eng/guides/deep/nested.md': '# Nested\n',
          'eng/readme.md': '# Eng\n',
          'ops/runbook.md': '# Runbook\n',
        },
      },
      {
        message: 'update and add names that sort around a folder',
        files: {
          'eng/guides/setup.md': '# Setup v2\n',
          'eng/guides/a.md': 'a.md\n',
          'eng/guides/a-b': 'a-b\n',
          'eng/guides/a/x.md': 'a/x\n',
        },
      },
      { message: 'delete a file', files: { 'eng/readme.md': null } },
      { message: 'delete the last file of a folder', files: { 'eng/guides/deep/nested.md': null } },
      { message: 'delete the last file of a space', files: { 'ops/runbook.md': null } },
      { message: 'delete a missing file (no change)', files: { 'nope/x.md': null } },
      {
        message: 'empty the repository',
        files: { 'eng/guides/setup.md': null, 'eng/guides/a.md': null, 'eng/guides/a-b': null, 'eng/guides/a/x.md': null },
      },
      { message: 'start again', files: { 'new/space/page.md': '# New\n' } },
    ];

    const state = new Map<string, string>();
    const allPaths = new Set<string>();
    const history: Array<{ commit: string; tree: string; state: Map<string, string> }> = [];
    for (const [i, step] of steps.entries()) {
      const r = await commit(ws, step.files, step.message, T0 + i * 60);
      for (const [p, content] of Object.entries(step.files)) {
        allPaths.add(p);
        if (content === null) state.delete(p);
        else state.set(p, content);
      }
      history.push({ ...r, state: new Map(state) });
    }

    const objects = new ObjectStore(store.db, ws);
    // Emptied folders and spaces vanish; an empty repository is the empty tree.
    const afterFolder = (await objects.getTree(await subtreeSha(objects, history[3]!.tree, ['eng', 'guides'])))!.map((e) => e.name);
    expect(afterFolder).not.toContain('deep');
    expect((await objects.getTree(history[4]!.tree))!.map((e) => e.name)).toEqual(['eng']);
    expect(history[5]!.tree).toBe(history[4]!.tree);
    expect(history[6]!.tree).toBe(EMPTY_TREE_SHA);

    for (const h of history) {
      const expected = [...h.state.entries()].map(([p, c]) => ({ path: p, sha: blobSha(c) }));
      expect(new Set((await listTree(objects, h.tree)).map((e) => `${e.path} ${e.sha}`))).toEqual(new Set(expected.map((e) => `${e.path} ${e.sha}`)));
      for (const p of allPaths) {
        const content = h.state.get(p);
        expect(await readPath(objects, h.tree, p)).toBe(content === undefined ? null : blobSha(content));
      }
    }
    expect(await readPath(objects, history[1]!.tree, 'eng/guides')).toBeNull();

    // Rebuild every tree from the database, not from the cache.
    clearTreeCache();
    const repo = path.join(tmpDir(), 'ws.git');
    const first = await exportToBareRepo(store.db, ws, repo);
    const rowCount = await store.db
      .selectFrom('git_objects')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('workspace_id', '=', ws)
      .executeTakeFirstOrThrow();
    expect(first.objects).toBe(Number(rowCount.n));
    fsck(repo);

    expect(git(repo, ['log', '--format=%H', 'main']).trim().split('\n')).toEqual(history.map((h) => h.commit).reverse());
    expect(fs.readFileSync(path.join(repo, 'HEAD'), 'utf8')).toBe('ref: refs/heads/main\n');
    for (const h of history) {
      expect(git(repo, ['rev-parse', `${h.commit}^{tree}`]).trim()).toBe(h.tree);
      for (const p of allPaths) {
        const content = h.state.get(p);
        if (content === undefined) expect(gitOk(repo, ['cat-file', '-e', `${h.commit}:${p}`])).toBe(false);
        else expect(git(repo, ['show', `${h.commit}:${p}`])).toBe(content);
      }
      const lsTree = git(repo, ['ls-tree', '-r', '-z', h.commit])
        .split('\0')
        .filter(Boolean)
        .map((line) => {
          const [meta, p] = line.split('\t');
          return { path: p!, sha: meta!.split(' ')[2]! };
        });
      expect(lsTree).toEqual(await listTree(objects, h.tree));
    }

    // Idempotent: nothing to write the second time; only the new objects after another commit.
    expect(await exportToBareRepo(store.db, ws, repo)).toEqual({ objects: 0 });
    const next = await commit(ws, { 'new/space/page.md': '# New v2\n' }, 'edit', T0 + 10_000);
    // blob + three trees + commit
    expect(await exportToBareRepo(store.db, ws, repo)).toEqual({ objects: 5 });
    expect(git(repo, ['rev-parse', 'main']).trim()).toBe(next.commit);
    fsck(repo);
  }, 120_000);

  it('keeps a commit into a 2,000-page folder small and the exported repository valid', async () => {
    const ws = await newWorkspace();
    const pagePath = (i: number) => `big/pages/page-${String(i).padStart(4, '0')}-a-typical-title.md`;
    const contents = new Map<string, string>();
    const initial: Record<string, string> = {};
    for (let i = 0; i < 2000; i++) {
      initial[pagePath(i)] = `# Page ${i}\n\nBody of page ${i}.\n`;
      contents.set(pagePath(i), initial[pagePath(i)]!);
    }
    const c0 = await commit(ws, initial, 'import 2,000 pages', T0);
    const objects = new ObjectStore(store.db, ws);
    const folder0 = await subtreeSha(objects, c0.tree, ['big', 'pages']);
    const fullTreeBytes = encodeTree((await objects.getTree(folder0))!).length;
    expect(fullTreeBytes).toBeGreaterThan(90_000);

    const perCommit: number[] = [];
    const folderDepths: number[] = [];
    let last = c0;
    for (let k = 1; k <= 50; k++) {
      const p = pagePath((k * 37) % 2000);
      const content = `# Page updated ${k}\n\nNew body ${k}.\n`;
      contents.set(p, content);
      const before = await dataBytes(ws);
      last = await commit(ws, { [p]: content }, `update ${k}`, T0 + k);
      perCommit.push((await dataBytes(ws)) - before);
      const folder = await subtreeSha(objects, last.tree, ['big', 'pages']);
      const row = await store.db
        .selectFrom('git_objects')
        .select(['depth', 'base_sha'])
        .where('workspace_id', '=', ws)
        .where('sha', '=', folder)
        .executeTakeFirstOrThrow();
      folderDepths.push(Number(row.depth));
      expect(row.base_sha).not.toBeNull();
    }
    console.log(
      `[${engine}] 2,000-page folder: full tree ${fullTreeBytes} B; bytes added per single-page commit: ` +
        `min ${Math.min(...perCommit)}, max ${Math.max(...perCommit)}, mean ${Math.round(perCommit.reduce((a, b) => a + b, 0) / perCommit.length)}`,
    );
    for (const bytes of perCommit) expect(bytes).toBeLessThan(4096);
    expect(folderDepths).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));

    // The delta chain rebuilds the exact tree from the database alone.
    clearTreeCache();
    const listed = await listTree(objects, last.tree);
    expect(listed).toHaveLength(2000);
    expect(new Map(listed.map((e) => [e.path, e.sha]))).toEqual(new Map([...contents].map(([p, c]) => [p, blobSha(c)])));

    clearTreeCache();
    const repo = path.join(tmpDir(), 'big.git');
    await exportToBareRepo(store.db, ws, repo);
    fsck(repo);
    expect(git(repo, ['ls-tree', '-r', '--name-only', 'main']).trim().split('\n')).toHaveLength(2000);
    const changed = pagePath((50 * 37) % 2000);
    expect(git(repo, ['show', `main:${changed}`])).toBe(contents.get(changed));
    expect(git(repo, ['log', '--format=%H', 'main']).trim().split('\n')).toHaveLength(51);
  }, 300_000);

  it('bounds delta chains and rebuilds every version after a full copy', async () => {
    const ws = await newWorkspace();
    const initial: Record<string, string> = {};
    for (let i = 0; i < 40; i++) initial[`s/f/p${i}.md`] = `p${i}`;
    const c0 = await commit(ws, initial, 'init', T0);
    const objects = new ObjectStore(store.db, ws);
    const versions: Array<{ sha: string; entries: readonly TreeEntry[] }> = [];
    const depths: number[] = [];
    const updates = MAX_DELTA_DEPTH + 6;
    let last = c0;
    for (let k = 1; k <= updates; k++) {
      // Updates, additions and removals, so the rebuilt versions exercise every part of a delta.
      const files: Record<string, string | null> = { [`s/f/p${k % 40}.md`]: `v${k}` };
      if (k % 10 === 0) files[`s/f/new${k}.md`] = 'n';
      if (k % 10 === 5 && k > 10) files[`s/f/new${k - 5}.md`] = null;
      last = await commit(ws, files, `u${k}`, T0 + k);
      const folder = await subtreeSha(objects, last.tree, ['s', 'f']);
      versions.push({ sha: folder, entries: (await objects.getTree(folder))! });
      const row = await store.db.selectFrom('git_objects').select('depth').where('workspace_id', '=', ws).where('sha', '=', folder).executeTakeFirstOrThrow();
      depths.push(Number(row.depth));
    }
    expect(depths).toEqual([...Array.from({ length: MAX_DELTA_DEPTH }, (_, i) => i + 1), ...Array.from({ length: updates - MAX_DELTA_DEPTH }, (_, i) => i)]);
    // Small trees (the root and the space here) are cheaper whole: never stored as deltas.
    const root = await store.db
      .selectFrom('git_objects')
      .select(['base_sha'])
      .where('workspace_id', '=', ws)
      .where('sha', '=', last.tree)
      .executeTakeFirstOrThrow();
    expect(root.base_sha).toBeNull();

    expect(versions.at(-1)!.entries.map((e) => e.name)).not.toContain('new60.md');
    expect(versions.at(-1)!.entries.map((e) => e.name)).toContain('new70.md');
    clearTreeCache();
    for (const v of versions) {
      const rebuilt = await objects.getTree(v.sha);
      expect(rebuilt).toEqual(v.entries);
      expect(hashObject('tree', encodeTree(rebuilt!))).toBe(v.sha);
    }
  }, 120_000);

  it('re-bases a chain at the depth bound on its full copy when few entries changed', async () => {
    const ws = await newWorkspace();
    const initial: Record<string, string> = {};
    for (let i = 0; i < 300; i++) initial[`s/f/page-${i}.md`] = `p${i}`;
    const c0 = await commit(ws, initial, 'init', T0);
    const objects = new ObjectStore(store.db, ws);
    const full = await subtreeSha(objects, c0.tree, ['s', 'f']);
    const versions: Array<{ sha: string; entries: readonly TreeEntry[] }> = [];
    const rows: Array<{ depth: number; base: string | null; bytes: number }> = [];
    const updates = MAX_DELTA_DEPTH * 2 + 3;
    for (let k = 1; k <= updates; k++) {
      // A few hot pages edited over and over: the typical pattern.
      const last = await commit(ws, { [`s/f/page-${k % 5}.md`]: `v${k}` }, `u${k}`, T0 + k);
      const folder = await subtreeSha(objects, last.tree, ['s', 'f']);
      versions.push({ sha: folder, entries: (await objects.getTree(folder))! });
      const row = await store.db
        .selectFrom('git_objects')
        .select(['depth', 'base_sha', (eb) => sql<number>`length(${eb.ref('data')})`.as('bytes')])
        .where('workspace_id', '=', ws)
        .where('sha', '=', folder)
        .executeTakeFirstOrThrow();
      rows.push({ depth: Number(row.depth), base: row.base_sha, bytes: Number(row.bytes) });
    }
    const expectedDepths = Array.from({ length: updates }, (_, i) => (i % MAX_DELTA_DEPTH) + 1);
    expect(rows.map((r) => r.depth)).toEqual(expectedDepths);
    // Every chain restarts on the one full copy instead of writing another.
    expect(rows[MAX_DELTA_DEPTH]!.base).toBe(full);
    expect(rows[2 * MAX_DELTA_DEPTH]!.base).toBe(full);
    expect(Math.max(...rows.map((r) => r.bytes))).toBeLessThan(400);
    const fullCopies = await store.db
      .selectFrom('git_objects')
      .select('sha')
      .where('workspace_id', '=', ws)
      .where('base_sha', 'is', null)
      .where('type', '=', 'tree')
      .execute();
    expect(fullCopies.map((r) => r.sha)).toContain(full);

    clearTreeCache();
    for (const v of versions) expect(await objects.getTree(v.sha)).toEqual(v.entries);
    clearTreeCache();
    const repo = path.join(tmpDir(), 'rebase.git');
    await exportToBareRepo(store.db, ws, repo);
    fsck(repo);
  }, 120_000);

  // The full copy a chain starts from is remembered once the commits of its deltas are durable
  // (inTransaction): the re-base every MAX_DELTA_DEPTH versions then walks nothing while the
  // workspace's writers wait (issue 18; the walk took 10–17 ms on tables whose statistics lagged).
  it('page commits re-base at the depth bound on the remembered full copy, without walking the chain', async () => {
    const ws = await newWorkspace();
    let walks = 0;
    const counting = store.db.withPlugin({
      transformQuery: (args) => {
        const node = args.node as { kind: string; sqlFragments?: readonly string[] };
        if (node.kind === 'RawNode' && node.sqlFragments!.some((f) => f.includes('with recursive chain'))) walks++;
        return args.node;
      },
      transformResult: async (args) => args.result,
    });
    const tx = Object.create(store, { db: { value: counting } }) as Store;
    const author = { id: 'pr_chain', name: 'Chain' };
    const initial = Array.from({ length: 300 }, (_, i) => ({ path: `s/f/page-${i}.md`, content: `p${i}` }));
    await inTransaction(tx, ws, (trx) => commitFiles(trx, ws, author, initial, 'init', new Date(T0 * 1000)));
    const updates = MAX_DELTA_DEPTH * 2 + 3;
    const folders: string[] = [];
    const objects = new ObjectStore(store.db, ws);
    for (let k = 1; k <= updates; k++) {
      const c = await inTransaction(tx, ws, (trx) =>
        commitFiles(trx, ws, author, [{ path: `s/f/page-${k % 5}.md`, content: `v${k}` }], `u${k}`, new Date((T0 + k) * 1000)),
      );
      folders.push(await subtreeSha(objects, (await objects.getCommit(c.sha))!.tree, ['s', 'f']));
    }
    const rows = await store.db
      .selectFrom('git_objects')
      .select(['sha', 'depth', 'base_sha'])
      .where('workspace_id', '=', ws)
      .where('sha', 'in', folders)
      .execute();
    const bySha = new Map(rows.map((r) => [r.sha, r]));
    expect(folders.map((f) => Number(bySha.get(f)!.depth))).toEqual(Array.from({ length: updates }, (_, i) => (i % MAX_DELTA_DEPTH) + 1));
    const full = bySha.get(folders[0]!)!.base_sha;
    expect(bySha.get(folders[MAX_DELTA_DEPTH]!)!.base_sha).toBe(full);
    expect(bySha.get(folders[2 * MAX_DELTA_DEPTH]!)!.base_sha).toBe(full);
    expect(walks).toBe(0);
    clearTreeCache();
    const repo = path.join(tmpDir(), 'remembered.git');
    await exportToBareRepo(store.db, ws, repo);
    fsck(repo);
  }, 120_000);

  it('a chain at the depth bound with a delta missing in its middle: the next write is refused as corrupt, nothing moves', async () => {
    const ws = await newWorkspace();
    const initial: Record<string, string> = {};
    for (let i = 0; i < 300; i++) initial[`s/f/page-${i}.md`] = `p${i}`;
    const c0 = await commit(ws, initial, 'init', T0);
    const objects = new ObjectStore(store.db, ws);
    let last = c0;
    let middle = '';
    for (let k = 1; k <= MAX_DELTA_DEPTH; k++) {
      last = await commit(ws, { [`s/f/page-${k % 5}.md`]: `v${k}` }, `u${k}`, T0 + k);
      if (k === MAX_DELTA_DEPTH / 2) middle = await subtreeSha(objects, last.tree, ['s', 'f']);
    }
    await store.db.deleteFrom('git_objects').where('workspace_id', '=', ws).where('sha', '=', middle).execute();
    // The tip is cached; re-basing it walks the chain down to its full copy and meets the hole.
    await expect(commit(ws, { 's/f/page-1.md': 'after' }, 'next', T0 + 1000)).rejects.toThrow(`delta base ${middle} is missing`);
    expect(await objects.getRef('refs/heads/main')).toBe(last.commit);
  }, 120_000);

  it('rejects paths that clash with folders or files', async () => {
    const ws = await newWorkspace();
    await commit(ws, { 's/f/a.md': 'a' }, 'init', T0);
    await expect(commit(ws, { 's/f': 'x' }, 'file over folder', T0 + 1)).rejects.toMatchObject({ status: 409 });
    await expect(commit(ws, { 's/f/a.md/b.md': 'x' }, 'folder under file', T0 + 1)).rejects.toMatchObject({ status: 409 });
    await expect(commit(ws, { 's//a.md': 'x' }, 'empty segment', T0 + 1)).rejects.toMatchObject({ status: 400 });
    await expect(commit(ws, { 's/.git/a.md': 'x' }, 'dot git', T0 + 1)).rejects.toMatchObject({ status: 400 });
    await expect(commit(ws, { 's/x': 'x', 's/x/y.md': 'y' }, 'both', T0 + 1)).rejects.toMatchObject({ status: 400 });
    const objects = new ObjectStore(store.db, ws);
    const head = (await objects.getCommit((await objects.getRef('refs/heads/main'))!))!;
    expect(await listTree(objects, head.tree)).toEqual([{ path: 's/f/a.md', sha: blobSha('a') }]);
  });
});
