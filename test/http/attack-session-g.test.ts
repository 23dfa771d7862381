import type { ChildProcess } from 'node:child_process';
import { sql } from 'kysely';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server.js';
import type { Dialect } from '../../src/store/db.js';
import { GitHome, gitUrl, mintGitToken } from '../git/support.js';
import { PASSWORD } from '../support/actors.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { expectSingleLine } from '../support/lines.js';
import { exited, spawnService } from '../support/service-process.js';
import { ALL, Client, createAgentWithKey, joinAs, onNode, signupHuman, startServerOn } from '../support/server.js';

/**
 * Attack session g, on the commits 305be5f..HEAD (issue 18, PostgreSQL round trips):
 * the page read in the statement that checks an agent key (prefetch), the workspace lock that
 * also reads main and the audit tail (cv_lock_workspace), the process-wide caches of stored
 * objects (storedKinds) and of Space/folder rows (ensurePlace), the index of fresh pages, and
 * the block-wise diacritics folding of migration 017 (cv_fold). Real servers, real HTTP.
 *
 * FINDING, fixed (the first two suites): ObjectStore's process-wide cache of stored objects
 * (`storedKinds`, object-store.ts) remembered the *deferred* row's delta depth for every object
 * a write flushed, even when `on conflict do nothing` kept an older row of the same sha with
 * another base and depth. A tree that comes back to an earlier content (a folder archived, then
 * restored) is recomputed from its current predecessor: often a full copy, depth 0, while the
 * stored row is a delta at depth k. The next write in that folder deltas against it at depth 1
 * (from the cache), so the stored chain no longer descends: every process without the base tree
 * in its in-memory tree cache (another node, the same node after a restart) refused the tree as
 * corrupt (page writes in the folder 500, `git clone` failed). The cache now learns only the
 * rows an insert returned as written, or rows read back.
 */

const HAS_PG = testEngines().includes('postgres');
const enc = encodeURIComponent;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const on = onNode;

/**
 * The object-cache finding, step by step, through any nodes: `first` writes the folder page by
 * page (its tree a delta chain) and archives it (every entry changes: a full copy); `second`, a
 * process that never saw the first tree, restores the folder (the first tree again, recomputed
 * as a full copy) and writes one more page there; `third`, a fresh process, writes there too.
 */
async function chainScenario(
  nodes: { first: () => Promise<string>; second: () => Promise<string>; third: () => Promise<string> },
  key: { make: (url: string) => Promise<string> },
  inspect: () => Promise<{ db: import('../../src/store/db.js').Executor; wsId: string }>,
): Promise<{ problems: string[]; cloneUrl: string }> {
  const problems: string[] = [];
  const first = await nodes.first();
  const k = await key.make(first);
  const onFirst = new Client(first, k);
  for (let i = 0; i < 14; i++) {
    const r = await onFirst.post('/api/v1/nodes', { path: `chain/f/p${i}.md`, content: `---\ntitle: P${i}\n---\n# P${i}\n\nWords ${i}.\n` });
    expectStatus(r, 201);
  }
  expectStatus(await onFirst.post('/api/v1/clusters/chain/f/archive', {}), 200);
  const second = await nodes.second();
  const onSecond = new Client(second, k);
  expectStatus(await onSecond.post('/api/v1/clusters/chain/f/restore', {}), 200);
  expectStatus(await onSecond.post('/api/v1/nodes', { path: 'chain/f/new.md', content: '---\ntitle: New\n---\n# New\n\nFresh.\n' }), 201);

  // The stored rows: each delta must sit on a base of lower depth (ObjectStore.getTree's rule).
  const { db, wsId } = await inspect();
  const rows = (
    await sql<{ sha: string; base_sha: string; depth: number; base_depth: number | null }>`
      select o.sha, o.base_sha, o.depth, b.depth as base_depth from git_objects o
      left join git_objects b on b.workspace_id = o.workspace_id and b.sha = o.base_sha
      where o.workspace_id = ${wsId} and o.base_sha is not null`.execute(db)
  ).rows;
  for (const r of rows) {
    if (r.base_depth === null) problems.push(`tree ${r.sha}: delta base ${r.base_sha} missing`);
    else if (Number(r.base_depth) >= Number(r.depth)) problems.push(`tree ${r.sha} (depth ${r.depth}) is a delta on ${r.base_sha} of depth ${r.base_depth}`);
  }

  const third = await nodes.third();
  const more = await new Client(third, k).post('/api/v1/nodes', { path: 'chain/f/more.md', content: '---\ntitle: More\n---\n# More\n\nAgain.\n' });
  if (more.status !== 201) problems.push(`a write in the folder on a fresh node: ${more.status} ${more.text.slice(0, 120)}`);
  return { problems, cloneUrl: third };
}

describe.skipIf(!HAS_PG)('attack g FINDING: object-kind cache across nodes (postgres)', () => {
  let tdb: TestDatabase;
  let a: RunningServer;
  const spawned: ChildProcess[] = [];
  const dirs: string[] = [];
  let owner: Client;
  let wsSlug: string;
  let wsId: string;
  const g = new GitHome();

  const spawnNode = async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-atk-g-'));
    dirs.push(dir);
    const n = await spawnService({ DATABASE_URL: tdb.databaseUrl!, DATA_DIR: dir });
    spawned.push(n.child);
    return n.url;
  };

  beforeAll(async () => {
    tdb = await createTestDatabase('postgres');
    a = await startServerOn(tdb);
    const h = await signupHuman(a.url, 'Chain');
    owner = h.client;
    wsSlug = h.workspace.slug;
    wsId = h.workspace.id;
  }, 60_000);
  afterAll(async () => {
    for (const c of spawned) {
      c.kill('SIGKILL');
      await exited(c);
    }
    await a?.close();
    await tdb?.cleanup();
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
    g.cleanup();
  });

  // FAILS at HEAD (passes at 491f4df): see the file's header. Severity high: on a multi-node
  // deployment (or one node across a restart) an archive on one node and a restore on another
  // leave a tree delta on a base of higher depth; from then on every fresh process answers 500
  // to writes in that folder and cannot serve the repository over git (clone fails).
  it('a folder archived on node A, restored and written on node B: every node can still write there and clone', async () => {
    const { problems, cloneUrl } = await chainScenario(
      { first: async () => a.url, second: spawnNode, third: spawnNode },
      {
        make: async () =>
          (
            await createAgentWithKey(
              owner,
              ALL.map((action) => ({ action })),
            )
          ).key,
      },
      async () => ({ db: a.ctx.store.db, wsId }),
    );
    const t = await mintGitToken(owner);
    const clone = await g.git(['clone', '-q', gitUrl(cloneUrl, wsSlug, t.token), g.path('clone')]);
    if (clone.code !== 0) problems.push(`git clone through a fresh node: ${clone.stderr.trim().slice(0, 200)}`);
    expect(problems).toEqual([]);
  }, 180_000);
});

describe('attack g FINDING: object-kind cache across a restart (sqlite, one node)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-atk-g-sq-'));
  let current: ChildProcess | undefined;
  let human: Client | undefined;
  let wsId = '';

  /** Stops the running process (if any) and starts a new one on the same data directory: a restart. */
  const restart = async () => {
    if (current) {
      current.kill('SIGTERM');
      await exited(current);
    }
    const n = await spawnService({ DATA_DIR: dir });
    current = n.child;
    return n.url;
  };
  afterAll(async () => {
    if (current) {
      current.kill('SIGKILL');
      await exited(current);
    }
    fs.rmSync(dir, { recursive: true, force: true });
  });

  // FAILS at HEAD, the same finding on a single SQLite node: a restart between the archive and
  // the restore is enough (the cache is empty after it, and the restore's full copy of the old
  // tree is remembered at depth 0).
  it('archive, restart, restore and write, restart: the node can still write in the folder', async () => {
    let db: import('kysely').Kysely<any> | undefined;
    const { problems } = await chainScenario(
      { first: restart, second: restart, third: restart },
      {
        make: async (url) => {
          const h = await signupHuman(url, 'Solo');
          human = h.client;
          wsId = h.workspace.id;
          return (
            await createAgentWithKey(
              h.client,
              ALL.map((action) => ({ action })),
            )
          ).key;
        },
      },
      async () => {
        const { default: Database } = await import('better-sqlite3');
        const { Kysely, SqliteDialect } = await import('kysely');
        const file = fs.readdirSync(dir).find((f) => f.endsWith('.db') || f.endsWith('.sqlite'))!;
        db = new Kysely<any>({ dialect: new SqliteDialect({ database: new Database(path.join(dir, file), { readonly: true }) }) });
        return { db, wsId };
      },
    );
    await db?.destroy();
    expect(human).toBeDefined();
    expect(problems).toEqual([]);
  }, 180_000);
});

describe.each(testEngines())('attack g: the page read with the key (%s)', (engine: Dialect) => {
  let tdb: TestDatabase;
  const nodes: RunningServer[] = [];
  let owner: Client;
  let ownerB: Client;
  let slug: string;
  let wsId: string;
  let full: Client; // agent: everything up to secret
  let conf: Client; // agent: read up to confidential
  let scoped: Client; // agent: read in open/pub only
  let foreign: Client; // agent of another workspace, all grants
  let otherSlug: string;
  let otherWsId: string;
  const ids: Record<string, string> = {};
  const url = (k: number) => nodes[k % nodes.length]!.url;

  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
    nodes.push(await startServerOn(tdb));
    if (engine === 'postgres') nodes.push(await startServerOn(tdb));
    const h = await signupHuman(url(0), 'Reader');
    owner = h.client;
    slug = h.workspace.slug;
    wsId = h.workspace.id;
    expectStatus(await owner.post('/api/auth/stepup', { password: PASSWORD }), 200);
    ownerB = on(url(1), owner);
    full = (
      await createAgentWithKey(
        owner,
        ALL.map((action) => ({ action, ceiling: 'secret' })),
        { ceiling: 'secret', key: { ceiling: 'secret' } },
      )
    ).client;
    conf = (await createAgentWithKey(owner, [{ action: 'read' }, { action: 'search' }], { ceiling: 'confidential' })).client;
    scoped = (await createAgentWithKey(owner, [{ action: 'read', scope: 'open/pub', ceiling: 'secret' }], { ceiling: 'secret', key: { ceiling: 'secret' } }))
      .client;
    const o = await signupHuman(url(0), 'Stranger');
    otherSlug = o.workspace.slug;
    otherWsId = o.workspace.id;
    foreign = (
      await createAgentWithKey(
        o.client,
        ALL.map((action) => ({ action })),
      )
    ).client;
    const pages: [string, string, string][] = [
      ['pub', 'open/pub/a.md', '---\ntitle: A\n---\n# A\n\nPublic words.\n\n## Inner\n\nInner words.\n'],
      ['pubx', 'open/pubx/b.md', '# B\n\nSibling prefix words.\n'],
      ['priv', 'open/priv/c.md', '# C\n\nOut of scope words.\n'],
      ['mixed', 'open/pub/mixed.md', '# Mixed\n\nOpen text.\n\n::: secret\n## Hidden heading\n\nSecret line\n:::\n\nEnd.\n'],
      ['secret', 'open/pub/secret.md', '---\nsensitivity: secret\n---\n# Secret\n\nCrown jewels.\n'],
      ['conf', 'open/pub/conf.md', '---\nsensitivity: confidential\n---\n# Conf\n\nConfidential words.\n'],
      ['archived', 'open/pub/old.md', '# Old\n\nArchived words.\n'],
      ['deleted', 'open/pub/gone.md', '# Gone\n\nDeleted words.\n'],
      ['mover', 'open/pub/mover.md', '# Mover\n\nMoving words.\n'],
    ];
    for (const [k, p, content] of pages) {
      const r = await owner.post('/api/v1/nodes', { path: p, content });
      expectStatus(r, 201);
      ids[k] = r.body.id;
    }
    expectStatus(await owner.post(`/api/v1/nodes/${ids.archived}/archive`, {}), 200);
    const del = await owner.delete(`/api/v1/nodes/${ids.deleted}`);
    expect([200, 204]).toContain(del.status);
    const theirs = await foreign.post('/api/v1/nodes', { path: 'open/pub/theirs.md', content: '# Theirs\n\nNot yours.\n' });
    expectStatus(theirs, 201);
    ids.theirs = theirs.body.id;
  }, 90_000);
  afterAll(async () => {
    for (const n of nodes) await n.close();
    await tdb?.cleanup();
  });

  const LEAK = /Sibling prefix|Out of scope|Secret line|Hidden heading|Crown jewels|Confidential words|Not yours|Deleted words/;
  const expect404 = (r: { status: number; text: string }, what: string) => {
    expect(r.status, `${what}: ${r.text.slice(0, 200)}`).toBe(404);
    expect(r.text, what).not.toMatch(LEAK);
  };
  const keyOn = (c: Client, k: number) => new Client(url(k), c.bearer);

  it('a folder-scoped read grant: by id, only the pages inside its folder (json, md, section, HEAD, both nodes)', async () => {
    for (let k = 0; k < nodes.length; k++) {
      const c = keyOn(scoped, k);
      expectStatus(await c.get(`/api/v1/nodes/${ids.pub}`), 200);
      for (const hidden of ['pubx', 'priv', 'theirs', 'deleted']) {
        const id = ids[hidden]!;
        expect404(await c.get(`/api/v1/nodes/${id}`), `${hidden} json`);
        expect404(await c.get(`/api/v1/nodes/${id}?format=md`), `${hidden} md`);
        expect404(await c.get(`/api/v1/nodes/${id}?section=B`), `${hidden} section`);
        expect404(await c.get(`/api/v1/nodes/${id}?format=md&section=Inner`), `${hidden} md section`);
        const head = await c.request('HEAD', `/api/v1/nodes/${id}`);
        expect(head.status, `${hidden} HEAD`).toBe(404);
      }
    }
  });

  it('a page moved out of the grant’s folder is 404 at once, on the other node too', async () => {
    expectStatus(await keyOn(scoped, 1).get(`/api/v1/nodes/${ids.mover}`), 200);
    expectStatus(await owner.post(`/api/v1/nodes/${ids.mover}/move`, { to: 'open/priv/mover.md' }), 200);
    expect404(await keyOn(scoped, 1).get(`/api/v1/nodes/${ids.mover}`), 'moved out, node 1');
    expect404(await keyOn(scoped, 0).get(`/api/v1/nodes/${ids.mover}`), 'moved out, node 0');
    expectStatus(await ownerB.post(`/api/v1/nodes/${ids.mover}/move`, { to: 'open/pub/mover.md' }), 200);
    expectStatus(await keyOn(scoped, 0).get(`/api/v1/nodes/${ids.mover}`), 200);
  });

  it('ceilings and blocks: the same redaction by id as by path, in json, md and sections', async () => {
    expect404(await conf.get(`/api/v1/nodes/${ids.secret}`), 'secret page, conf key');
    expect404(await conf.get(`/api/v1/nodes/${ids.secret}?format=md`), 'secret page md');
    const byId = await conf.get(`/api/v1/nodes/${ids.mixed}`);
    const byPath = await conf.get(`/api/v1/nodes/${enc('open/pub/mixed.md')}`);
    expectStatus(byId, 200);
    expect({ ...byId.body, last_touched_at: null }).toEqual({ ...byPath.body, last_touched_at: null });
    expect(byId.text).not.toMatch(/Secret line|Hidden heading/);
    expect((await conf.get(`/api/v1/nodes/${ids.mixed}?format=md`)).text).not.toMatch(/Secret line|Hidden heading/);
    // (The 404 names the section asked for: ask by a prefix, and the full heading must not show.)
    const sec = await conf.get(`/api/v1/nodes/${ids.mixed}?section=Hidden`);
    expect(sec.status).toBe(404);
    expect(sec.text).not.toMatch(/Secret line|Hidden heading/);
    // The scoped key inside its folder: by id exactly what it reads by path (both engines agree
    // that a secret block stays hidden from an agent without an elevation).
    const scopedById = await scoped.get(`/api/v1/nodes/${ids.mixed}`);
    expectStatus(scopedById, 200);
    expect(scopedById.body.content).toBe((await scoped.get(`/api/v1/nodes/${enc('open/pub/mixed.md')}`)).body.content);
    // An archived page is read as by path (archived, not hidden).
    const old = await conf.get(`/api/v1/nodes/${ids.archived}`);
    expectStatus(old, 200);
    expect(old.body.state).toBe('archived');
  });

  it('the workspace header or ?workspace= naming another workspace never reads its page, nor yours', async () => {
    for (const ws of [otherSlug, otherWsId, 'no-such-ws']) {
      for (const id of [ids.theirs!, ids.pub!]) {
        const viaHeader = await full.get(`/api/v1/nodes/${id}`, { 'x-service-workspace': ws });
        expect(viaHeader.status, `${ws} ${id} header`).toBe(404);
        expect(viaHeader.text).not.toMatch(/Not yours|Public words/);
        const viaQuery = await full.get(`/api/v1/nodes/${id}?workspace=${enc(ws)}`);
        expect(viaQuery.status, `${ws} ${id} query`).toBe(404);
        expect(viaQuery.text).not.toMatch(/Not yours|Public words/);
      }
    }
    // The other workspace's key naming ours: the same.
    const cross = await foreign.get(`/api/v1/nodes/${ids.pub}`, { 'x-service-workspace': slug });
    expect(cross.status).toBe(404);
    expect(cross.text).not.toContain('Public words');
    expectStatus(await full.get(`/api/v1/nodes/${ids.pub}`, { 'x-service-workspace': slug }), 200);
    expectStatus(await full.get(`/api/v1/nodes/${ids.pub}?workspace=${wsId}`), 200);
  });

  it('ids that look like page ids: other case, spaces, percent-encoding, slashes: never another page, never 500', async () => {
    const id = ids.secret!;
    const variants = [
      id.toUpperCase(),
      `PG_${id.slice(3)}`,
      `${id}%20`,
      `%20${id}`,
      `${id}%00`,
      `%70g_${id.slice(3)}`,
      `${id.slice(0, -1)}${id.slice(-1).toUpperCase()}`,
      `%2F${id}`,
      `${id}.md`,
      `${id}%0A`,
      `${id}?at=`,
      `${id}?at=${'0'.repeat(40)}`,
      `${id}?at=HEAD`,
      `${id}?at[]=x`,
      `${id}?at=${id}`,
    ];
    for (const v of variants) {
      const r = await conf.get(`/api/v1/nodes/${v}`);
      expect([400, 404], `${v}: ${r.status} ${r.text.slice(0, 160)}`).toContain(r.status);
      expect(r.text).not.toContain('Crown jewels');
    }
    // The encoded form of a readable id reads that page (it is the same id), and only it.
    const p = await full.get(`/api/v1/nodes/%70g_${ids.pub!.slice(3)}`);
    expect([200, 404]).toContain(p.status);
    if (p.status === 200) expect(p.body.id).toBe(ids.pub);
  });

  it('at= reads of a page now hidden from the key: 404 (no prefetch on that path)', async () => {
    // A page made confidential: its old internal version is still not readable by a key whose
    // grant the page has left (ceiling is judged on the version, scope on the path).
    const r = await owner.post('/api/v1/nodes', { path: 'open/priv/was-pub.md', content: '# Was\n\nOnce visible.\n' });
    expectStatus(r, 201);
    expect404(await scoped.get(`/api/v1/nodes/${r.body.id}?at=${r.body.commit_sha}`), 'at= out of scope');
    expect404(await conf.get(`/api/v1/nodes/${ids.secret}?at=${r.body.commit_sha}`), 'at= above ceiling');
  });

  it('dead keys read nothing with valid page ids, at once on the other node: revoked, pinned elsewhere, suspended, locked down', async () => {
    // Revoked on node 0, tried on node 1.
    const rev = await createAgentWithKey(owner, [{ action: 'read' }]);
    expectStatus(await keyOn(rev.client, 1).get(`/api/v1/nodes/${ids.pub}`), 200);
    expectStatus(await owner.delete(`/api/v1/principals/${rev.id}/tokens/${rev.keyId}`), 200);
    const r1 = await keyOn(rev.client, 1).get(`/api/v1/nodes/${ids.pub}`);
    expect(r1.status).toBe(401);
    expect(r1.text).not.toContain('Public words');

    // Pinned to another address.
    const pinned = await createAgentWithKey(owner, [{ action: 'read' }], { key: { ip_pin: '10.9.8.7' } });
    const r2 = await keyOn(pinned.client, 1).get(`/api/v1/nodes/${ids.pub}`);
    expect(r2.status).toBe(401);
    expect(r2.text).not.toContain('Public words');

    // Suspended: its creator is removed from the workspace (on node 1), read on node 0.
    const ed = await joinAs(owner, slug, 'editor');
    const made = await createAgentWithKey(ed.client, [{ action: 'read', ceiling: 'internal' }]);
    expectStatus(await keyOn(made.client, 0).get(`/api/v1/nodes/${ids.pub}`), 200);
    expectStatus(await ownerB.delete(`/api/v1/workspaces/${slug}/members/${ed.id}`), 200);
    const r3 = await keyOn(made.client, 0).get(`/api/v1/nodes/${ids.pub}`);
    expect(r3.status).toBe(401);
    expect(r3.text).not.toContain('Public words');

    // Lockdown on node 1, read on node 0 at once and then again (no cached page or principal).
    const victim = await createAgentWithKey(owner, [{ action: 'read' }]);
    expectStatus(await keyOn(victim.client, 0).get(`/api/v1/nodes/${ids.pub}`), 200);
    expectStatus(await ownerB.post('/api/auth/stepup', { password: PASSWORD }), 200);
    expectStatus(await ownerB.post(`/api/v1/workspaces/${slug}/lockdown`), 200);
    for (let k = 0; k < 4; k++) {
      const r = await keyOn(victim.client, k).get(`/api/v1/nodes/${ids.pub}${k % 2 ? '?format=md' : ''}`);
      expect(r.status, `after lockdown, try ${k}`).toBe(401);
      expect(r.text).not.toContain('Public words');
    }
    // Keys made after the lockdown work (the epoch moved on, nothing else).
    const fresh = await createAgentWithKey(owner, [{ action: 'read' }]);
    expectStatus(await keyOn(fresh.client, 1).get(`/api/v1/nodes/${ids.pub}`), 200);
  });
});

describe.each(testEngines())('attack g: writers on two nodes, rolled-back writes, the caches (%s)', (engine: Dialect) => {
  let tdb: TestDatabase;
  const nodes: RunningServer[] = [];
  let owner: Client;
  let key: string;
  let wsId: string;
  let slug: string;
  const g = new GitHome();

  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
    nodes.push(await startServerOn(tdb));
    if (engine === 'postgres') nodes.push(await startServerOn(tdb));
    const h = await signupHuman(nodes[0]!.url, 'Writers');
    owner = h.client;
    wsId = h.workspace.id;
    slug = h.workspace.slug;
    key = (
      await createAgentWithKey(
        owner,
        ALL.map((action) => ({ action })),
      )
    ).key;
  }, 60_000);
  afterAll(async () => {
    for (const n of nodes) await n.close();
    await tdb?.cleanup();
    g.cleanup();
  });

  const node = (k: number) => new Client(nodes[k % nodes.length]!.url, key);

  /** Commits form one line ending at main, the audit chain holds, and git clones and fscks the repository. */
  async function expectIntact(): Promise<void> {
    const { commits } = await expectSingleLine(nodes[0]!.ctx.store.db, wsId);
    // Every commit's tree, read by a store with no cache of this workspace's trees... as far as
    // a process allows: the git face serves them all, and git checks every object.
    const t = await mintGitToken(owner);
    const dir = g.path('clone');
    const clone = await g.git(['clone', '-q', gitUrl(nodes[nodes.length - 1]!.url, slug, t.token), dir]);
    expect(clone.code, clone.stderr).toBe(0);
    const fsck = await g.git(['fsck', '--full', '--strict'], { cwd: dir });
    expect(fsck.code, fsck.stderr).toBe(0);
    const count = await g.git(['rev-list', '--count', 'HEAD'], { cwd: dir });
    expect(Number(count.stdout.trim())).toBe(commits.length);
  }

  it('creates, updates (stale If-Match too), moves, deletes, proposals accepted, on two nodes at once: no 500, one line', async () => {
    const unexpected: string[] = [];
    const seen = (what: string, r: { status: number; text: string }, ok: number[]) => {
      if (!ok.includes(r.status)) unexpected.push(`${what}: ${r.status} ${r.text.slice(0, 160)}`);
    };
    const shared = await node(0).post('/api/v1/nodes', { path: 'race/shared.md', content: '# Shared\n\nv0\n' });
    expectStatus(shared, 201);
    const staleTag = shared.headers.get('etag')!;
    const worker = async (w: number) => {
      const c = node(w);
      for (let i = 0; i < 5; i++) {
        // A new folder per writer and step: the Space/folder cache is filled from both nodes.
        const p = `race/w${w}/s${i}/p.md`;
        const r = await c.post('/api/v1/nodes', { path: p, content: `# W${w} ${i}\n\nCrème brûlée ${w}-${i}.\n` });
        seen(`create ${p}`, r, [201]);
        if (r.status !== 201) continue;
        seen(
          `update ${p}`,
          await c.put(`/api/v1/nodes/${r.body.id}`, { content: `# W${w} ${i}\n\nSecond ${w}-${i}.\n` }, { 'if-match': r.headers.get('etag')! }),
          [200],
        );
        // Everyone updates the shared page with the first tag: one may win, the rest get 409.
        seen(
          'stale update of shared',
          await c.put(`/api/v1/nodes/${shared.body.id}`, { content: `# Shared\n\nby ${w}-${i}\n` }, { 'if-match': staleTag }),
          [200, 409, 412],
        );
        if (i % 2 === 0) seen(`move ${p}`, await c.post(`/api/v1/nodes/${r.body.id}/move`, { to: `race/moved/w${w}-${i}.md` }), [200]);
        if (i === 3) {
          const d = await c.delete(`/api/v1/nodes/${r.body.id}`);
          seen(`delete ${p}`, d, [200, 204]);
        }
        if (i === 4) {
          const pr = await c.post('/api/v1/proposals', { node_id: r.body.id, content: `# W${w} ${i}\n\nProposed ${w}.\n`, reason: 'race' });
          seen('propose', pr, [201]);
          // Accepting is for signed-in humans: the owner, on the other node.
          if (pr.status === 201) seen('accept', await on(nodes[(w + 1) % nodes.length]!.url, owner).post(`/api/v1/proposals/${pr.body.id}/accept`), [200]);
        }
        // Two writers create the same path: one 201, the other 409.
        seen('same path', await c.post('/api/v1/nodes', { path: `race/same/${i}.md`, content: `# Same ${i}\n\nby ${w}\n` }), [201, 409]);
      }
    };
    await Promise.all(Array.from({ length: 8 }, (_, w) => worker(w)));
    expect(unexpected).toEqual([]);
    await expectIntact();
  }, 180_000);

  it('rolled-back writes (file/folder clash after the blobs were made, a stale If-Match, a bad body) leave nothing half-known', async () => {
    const c = node(0);
    const base = await c.post('/api/v1/nodes', { path: 'rb/x.md', content: '# X\n\nFirst.\n' });
    expectStatus(base, 201);
    for (let k = 0; k < 3; k++) {
      // A page under a path that is a file: refused once the tree is built.
      const clash = await node(k).post('/api/v1/nodes', { path: `rb/x.md/y${k}.md`, content: `# Y${k}\n\nNever.\n` });
      expect([400, 409], clash.text).toContain(clash.status);
      // The same blob again, in a new folder, where it is allowed: its objects must be written.
      const ok = await node(k + 1).post('/api/v1/nodes', { path: `rb/n${k}/y${k}.md`, content: `# Y${k}\n\nNever.\n` });
      expectStatus(ok, 201);
      // A stale If-Match whose change conflicts with what landed since: 409, rolled back.
      const stale = await node(k).put(`/api/v1/nodes/${base.body.id}`, { content: `# X\n\nLost ${k}.\n` }, { 'if-match': base.headers.get('etag')! });
      if (k > 0) expect([409, 412], stale.text).toContain(stale.status);
      else expect([200, 409, 412], stale.text).toContain(stale.status);
      // The lost content then written for real, on the other node.
      const cur = await node(k + 1).get(`/api/v1/nodes/${base.body.id}`);
      if (cur.body.content !== `# X\n\nLost ${k}.\n`)
        expectStatus(await node(k + 1).put(`/api/v1/nodes/${base.body.id}`, { content: `# X\n\nLost ${k}.\n` }, { 'if-match': cur.headers.get('etag')! }), 200);
      const bad = await node(k).post('/api/v1/nodes', { path: `rb/bad${k}/z.md`, content: `---\nsensitivity: ultra\n---\n# Z\n` });
      expect(bad.status, bad.text).toBeLessThan(500);
      // The folder of the refused write gets its row with the next write there.
      expectStatus(await node(k + 1).post('/api/v1/nodes', { path: `rb/bad${k}/z.md`, content: '# Z\n\nNow.\n' }), 201);
      expectStatus(await on(nodes[(k + 1) % nodes.length]!.url, owner).put(`/api/v1/clusters/rb/bad${k}/lifecycle`, { half_life_days: 30 }), 200);
    }
    // Every page's blob is readable at its version.
    const db = nodes[0]!.ctx.store.db;
    const versions = await db
      .selectFrom('page_versions')
      .select(['page_id', 'commit_sha'])
      .where('workspace_id', '=', wsId)
      .where('blob_sha', 'is not', null)
      .execute();
    for (const v of versions.slice(-30)) {
      const r = await node(1).get(`/api/v1/nodes/${v.page_id}?at=${v.commit_sha}`);
      expect([200, 404], `${v.page_id}@${v.commit_sha}: ${r.text.slice(0, 120)}`).toContain(r.status);
    }
    await expectIntact();
  }, 120_000);

  it('a page created, deleted and created again at the same content (trees that come back), on one node: still clones', async () => {
    // The same process throughout: the first entry of a tree in the cache is its true one.
    const c = node(0);
    for (let i = 0; i < 12; i++) expectStatus(await c.post('/api/v1/nodes', { path: `loop/f/p${i}.md`, content: `# P${i}\n\nLoop ${i}.\n` }), 201);
    for (let round = 0; round < 3; round++) {
      const r = await c.post('/api/v1/nodes', { path: 'loop/f/temp.md', content: '# Temp\n\nSame bytes.\n' });
      expectStatus(r, 201);
      const d = await c.delete(`/api/v1/nodes/${r.body.id}`);
      expect([200, 204]).toContain(d.status);
    }
    expectStatus(await c.post('/api/v1/nodes', { path: 'loop/f/last.md', content: '# Last\n' }), 201);
    await expectIntact();
  }, 120_000);
});

describe.each(testEngines())('attack g: diacritics and scripts in search after migration 017 (%s)', (engine: Dialect) => {
  let tdb: TestDatabase;
  let s: RunningServer;
  let c: Client;

  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
    s = await startServerOn(tdb);
    const h = await signupHuman(s.url, 'Fold');
    c = (
      await createAgentWithKey(
        h.client,
        ALL.map((action) => ({ action })),
      )
    ).client;
    const filler = 'plain ascii filler words repeated '.repeat(3000);
    const pages: [string, string][] = [
      ['fold/creme.md', '# Crème brûlée\n\nLa crème brûlée de Zoë à Besançon.\n'],
      ['fold/viet.md', '# Việt Nam\n\nPhở bò ở Hà Nội, Đà Nẵng.\n'],
      ['fold/mixed.md', '# Mixed scripts\n\nÓscar visits Москва and 東京 with Ørsted and Ōsaka and Łódź.\n'],
      ['fold/long.md', `# Long\n\n${filler}\n\nAt the very end: Šibenik and Ærøskøbing and Ğdansk.\n`],
      ['fold/latinext.md', '# Extended\n\nȘtefan and Ţara and Ǉubljana and ḂḃḞḟ Ẁales.\n'],
    ];
    for (const [p, content] of pages) expectStatus(await c.post('/api/v1/nodes', { path: p, content }), 201);
  }, 60_000);
  afterAll(async () => {
    await s?.close();
    await tdb?.cleanup();
  });

  const paths = async (q: string) => {
    const r = await c.get(`/api/v1/search?q=${enc(q)}&mode=fts&limit=20`);
    expect(r.status, `${q}: ${r.text.slice(0, 200)}`).toBe(200);
    return r.body.results.map((x: { path: string }) => x.path) as string[];
  };

  it.each([
    ['creme', 'fold/creme.md'],
    ['crème', 'fold/creme.md'],
    ['CRÈME', 'fold/creme.md'],
    ['brulee', 'fold/creme.md'],
    ['besancon', 'fold/creme.md'],
    ['zoe', 'fold/creme.md'],
    ['viet', 'fold/viet.md'],
    ['pho', 'fold/viet.md'],
    ['Phở', 'fold/viet.md'],
    ['noi', 'fold/viet.md'],
    ['oscar', 'fold/mixed.md'],
    ['osaka', 'fold/mixed.md'],
    ['Москва', 'fold/mixed.md'],
    ['sibenik', 'fold/long.md'],
    ['gdansk', 'fold/long.md'],
    ['stefan', 'fold/latinext.md'],
    ['wales', 'fold/latinext.md'],
  ])('%s finds %s', async (q, want) => {
    expect(await paths(q)).toContain(want);
  });

  it('a rewrite into another script, then back: found by the new words only, then the old', async () => {
    const r = await c.get(`/api/v1/nodes/${enc('fold/creme.md')}`);
    expectStatus(await c.put(`/api/v1/nodes/${r.body.id}`, { content: '# Crème\n\nΚρέμα καραμελέ.\n' }, { 'if-match': r.headers.get('etag')! }), 200);
    expect(await paths('brulee')).not.toContain('fold/creme.md');
    expect(await paths('creme')).toContain('fold/creme.md');
    const r2 = await c.get(`/api/v1/nodes/${enc('fold/creme.md')}`);
    expectStatus(await c.put(`/api/v1/nodes/${r.body.id}`, { content: '# Crème brûlée\n\nÀ nouveau brûlée.\n' }, { 'if-match': r2.headers.get('etag')! }), 200);
    expect(await paths('brulee')).toContain('fold/creme.md');
    await sleep(1);
  });
});
