import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EmbeddingsConfig } from '../../src/config.js';
import { IMPORT_LIMITS } from '../../src/core/import/limits.js';
import { vecToBytes } from '../../src/retrieval/embed-text.js';
import { RetrievalRuntime } from '../../src/retrieval/runtime.js';
import { openStore, type Store } from '../../src/store/db.js';
import { embeddingsServer, waitForVectors } from '../support/embeddings-server.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { exited, spawnService } from '../support/service-process.js';
import { Client, createAgentWithKey, onNode, signupHuman } from '../support/server.js';

/**
 * Issue 18: several nodes on one PostgreSQL. Two service processes share one database and
 * are driven in turn: what one writes the other reads at once, an inbox long-poll on one
 * wakes for a mention made on the other, a lockdown on one refuses a key on the other, the
 * vector index of one follows the other's writes, jobs (imports, embeddings) run once across
 * both, and a node killed (-9) under load loses no acknowledged write. Before that, the
 * vector index's change log read out of commit order, on two real connections.
 */

const HAS_PG = testEngines().includes('postgres');
const PASSWORD = 'correct horse battery';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const on = onNode;

describe.skipIf(!HAS_PG)('vector_log entries committed out of seq order (postgres)', () => {
  let tdb: TestDatabase;
  let store: Store;
  const conns: pg.Client[] = [];
  const config: EmbeddingsConfig = {
    provider: 'builtin',
    url: undefined,
    model: 'builtin',
    apiKey: undefined,
    dimensions: undefined,
    batch: 64,
    timeoutMs: 1000,
    maxRetries: 0,
  };

  beforeAll(async () => {
    tdb = await createTestDatabase('postgres');
    store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
    for (let i = 0; i < 3; i++) {
      const c = new pg.Client({ connectionString: tdb.databaseUrl });
      await c.connect();
      conns.push(c);
    }
  });
  afterAll(async () => {
    for (const c of conns) await c.end().catch(() => undefined);
    await store?.close();
    await tdb?.cleanup();
  });

  /** What an embedding round writes for one page, inside the caller's open transaction: its vector, then its log entry. */
  async function writeVector(c: pg.Client, rt: RetrievalRuntime, ws: string, page: string): Promise<number> {
    const vec = new Float32Array(rt.provider.dimensions).fill(0);
    vec[0] = 1;
    await c.query(`insert into section_vectors (page_id, ord, last_ord, workspace_id, model, text_hash, vec) values ($1, 0, 0, $2, $3, $4, $5)`, [
      page,
      ws,
      rt.key,
      `h-${page}`,
      vecToBytes(vec),
    ]);
    const r = await c.query<{ seq: string }>(`insert into vector_log (workspace_id, page_id, at) values ($1, $2, $3) returning seq`, [
      ws,
      page,
      new Date().toISOString(),
    ]);
    return Number(r.rows[0]!.seq);
  }

  it('a page whose transaction took the lower seq but committed later still reaches the index', async () => {
    const rt = new RetrievalRuntime(store, config);
    const [c1, c2, c3] = conns as [pg.Client, pg.Client, pg.Client];
    // Another workspace's entries interleave: the log's seqs are shared by all workspaces.
    await writeVector(c3, rt, 'ws-other', 'other-1');
    expect(await rt.matrix('ws-1')).toBeNull();

    await c1.query('begin');
    const s1 = await writeVector(c1, rt, 'ws-1', 'page-slow');
    await c2.query('begin');
    const s2 = await writeVector(c2, rt, 'ws-1', 'page-fast');
    await writeVector(c3, rt, 'ws-other', 'other-2');
    expect(s2).toBeGreaterThan(s1);
    await c2.query('commit');

    let m = await rt.matrix('ws-1');
    expect(m?.has('page-fast')).toBe(true);
    expect(m?.has('page-slow')).toBe(false);

    await c1.query('commit');
    m = await rt.matrix('ws-1');
    expect(m?.has('page-slow')).toBe(true);
    expect(m?.has('page-fast')).toBe(true);

    // A rolled-back entry leaves a seq that never shows: queries go on, later pages arrive.
    await c1.query('begin');
    await writeVector(c1, rt, 'ws-1', 'page-rolled-back');
    await c1.query('rollback');
    await writeVector(c2, rt, 'ws-1', 'page-after');
    m = await rt.matrix('ws-1');
    expect(m?.has('page-after')).toBe(true);
    expect(m?.has('page-rolled-back')).toBe(false);
  });

  it('a node starting while a lower seq is still uncommitted picks it up once it commits', async () => {
    const [c1, c2] = conns as [pg.Client, pg.Client];
    const probe = new RetrievalRuntime(store, config);
    await c1.query('begin');
    const s1 = await writeVector(c1, probe, 'ws-2', 'open-at-start');
    const s2 = await writeVector(c2, probe, 'ws-2', 'committed-at-start');
    expect(s2).toBeGreaterThan(s1);

    // This node's first look at the log happens now, with s1 still open.
    const rt = new RetrievalRuntime(store, config);
    let m = await rt.matrix('ws-2');
    expect(m?.has('committed-at-start')).toBe(true);
    expect(m?.has('open-at-start')).toBe(false);

    await c1.query('commit');
    m = await rt.matrix('ws-2');
    expect(m?.has('open-at-start')).toBe(true);
  });
});

describe.skipIf(!HAS_PG)('two nodes on one database (postgres)', () => {
  let tdb: TestDatabase;
  let dirB: string;
  let fake: Awaited<ReturnType<typeof embeddingsServer>>;
  let a: { child: ChildProcess; url: string };
  let b: { child: ChildProcess; url: string };
  let owner: Client; // a session made on A
  let ws: string;
  const figures: string[] = [];

  beforeAll(async () => {
    tdb = await createTestDatabase('postgres');
    dirB = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-node-b-'));
    // The OpenAI-compatible fake records every text it embeds: a page embedded by both nodes would show twice.
    fake = await embeddingsServer();
    const env = { DATABASE_URL: tdb.databaseUrl!, EMBEDDINGS: 'openai', EMBEDDINGS_URL: fake.url, EMBEDDINGS_MODEL: 'fake-hash-16', EMBEDDINGS_API_KEY: 'k' };
    // Started together on an empty database: their migrations take turns.
    [a, b] = await Promise.all([spawnService({ ...env, DATA_DIR: tdb.dataDir }), spawnService({ ...env, DATA_DIR: dirB })]);
    const h = await signupHuman(a.url, 'Nora');
    owner = h.client;
    ws = h.workspace.slug;
  }, 120_000);

  afterAll(async () => {
    for (const n of [a, b]) {
      if (!n) continue;
      n.child.kill('SIGKILL');
      await exited(n.child);
    }
    await fake?.close();
    await tdb?.cleanup();
    fs.rmSync(dirB, { recursive: true, force: true });
    if (figures.length > 0) console.log(`multi-node figures: ${figures.join('; ')}`);
  });

  it('a write on one node is read on the other at once, both ways, with the same session', async () => {
    const ownerB = on(b.url, owner);
    const onA = await owner.post('/api/v1/nodes', { path: 'eng/from-a.md', content: '# From A\n\nwritten on node A\n' });
    expectStatus(onA, 201);
    const read = await ownerB.get(`/api/v1/nodes/${onA.body.id}`);
    expectStatus(read, 200);
    expect(read.body.content).toBe('# From A\n\nwritten on node A\n');

    const onB = await ownerB.put(`/api/v1/nodes/${onA.body.id}`, { content: '# From A\n\nedited on node B\n' });
    expectStatus(onB, 200);
    const back = await owner.get(`/api/v1/nodes/${onA.body.id}`);
    expect(back.body.content).toBe('# From A\n\nedited on node B\n');
    expect((await owner.get(`/api/v1/nodes/${onA.body.id}/history`)).body.versions).toHaveLength(2);
  });

  it('an inbox long-poll on B wakes when a mention is posted on A', async () => {
    const agent = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'collab' }]);
    const page = await owner.post('/api/v1/nodes', { path: 'eng/inbox.md', content: '# Inbox\n\nmentions here\n' });
    expectStatus(page, 201);
    const pollB = new Client(b.url, agent.key);
    const t0 = Date.now();
    const poll = pollB.get('/api/v1/inbox?wait=25');
    // Let the poll reach B and start waiting before the mention exists.
    await sleep(500);
    const posted = Date.now();
    const m = await owner.post(`/api/v1/nodes/${page.body.id}/threads`, { body: 'across nodes', mentions: [agent.id] });
    expectStatus(m, 201);
    const res = await poll;
    const woke = Date.now();
    expectStatus(res, 200);
    expect(res.body.events.map((e: { payload: { message_id: string } }) => e.payload.message_id)).toEqual([m.body.id]);
    // Long before the 25 s wait ran out: the mention woke it.
    expect(woke - t0).toBeLessThan(10_000);
    figures.push(`inbox wake on B ${woke - posted} ms after the mention on A was posted`);
  });

  it('a lockdown on A refuses the agent key on B on its very next request', async () => {
    const agent = await createAgentWithKey(owner, [{ action: 'read' }]);
    const keyB = new Client(b.url, agent.key);
    expectStatus(await keyB.get('/api/v1/whoami'), 200);
    expectStatus(await owner.post('/api/auth/stepup', { password: PASSWORD }), 200);
    const lock = await owner.post(`/api/v1/workspaces/${ws}/lockdown`);
    expectStatus(lock, 200);
    expectStatus(await keyB.get('/api/v1/whoami'), 401);
    expectStatus(await new Client(a.url, agent.key).get('/api/v1/whoami'), 401);
    // The owner's own session goes on, on both nodes.
    expectStatus(await on(b.url, owner).get(`/api/v1/workspaces/${ws}/members`), 200);
  });

  it('vector search on B finds a page written on A', async () => {
    const ownerB = on(b.url, owner);
    const search = async (q: string) => {
      const r = await ownerB.get(`/api/v1/search?${new URLSearchParams({ q, mode: 'vector' }).toString()}`);
      expectStatus(r, 200);
      return (r.body.results as { path: string }[]).map((h) => h.path);
    };
    // B's matrix is loaded before the write, so the write reaches it through the change log.
    await search('anything at all');
    const w = await owner.post('/api/v1/nodes', { path: 'eng/pangolin.md', content: '# Pangolin\n\nThe pangolin rolls into keratin scales.\n' });
    expectStatus(w, 201);
    const t0 = Date.now();
    await waitForVectors(ownerB, 30_000);
    expect((await search('pangolin keratin scales'))[0]).toBe('eng/pangolin.md');
    figures.push(`page on A found by vector search on B ${Date.now() - t0} ms after the write`);
  });

  it('jobs run once: an import sent to A is applied once across both nodes, and every page is embedded by one node', async () => {
    const FILES = 2 * IMPORT_LIMITS.batchFiles + 100;
    const files = Array.from({ length: FILES }, (_, i) => ({ path: `d${i % 7}/p${i}.md`, content: `# Item ${i}\n\nwombat${i}z burrows here.\n` }));
    const t0 = Date.now();
    const res = await owner.post('/api/v1/import', { space: 'imp', files });
    expectStatus(res, 202);
    const ownerB = on(b.url, owner);
    let job = res.body;
    const until = Date.now() + 90_000;
    while (job.status !== 'done' && job.status !== 'failed' && Date.now() < until) {
      await sleep(200);
      job = (await ownerB.get(res.body.status_url)).body;
    }
    expect(job).toMatchObject({ status: 'done', total: FILES, done: FILES, created: FILES, updated: 0, unchanged: 0, error: null });
    expect(job.commits).toHaveLength(Math.ceil(FILES / IMPORT_LIMITS.batchFiles));
    expect(new Set(job.commits).size).toBe(job.commits.length);
    figures.push(`${FILES}-file import done in ${Date.now() - t0} ms`);

    // One import.batch audit entry per commit, one import.done: no batch ran twice.
    const audit = await ownerB.get('/api/v1/audit?action=import.&limit=500');
    const mine = audit.body.items.filter((i: { detail: { import?: string } }) => i.detail.import === job.id);
    expect(mine.filter((i: { action: string }) => i.action === 'import.done')).toHaveLength(1);
    expect(mine.filter((i: { action: string }) => i.action === 'import.batch')).toHaveLength(job.commits.length);
    for (const i of [0, IMPORT_LIMITS.batchFiles, FILES - 1]) {
      const page = await ownerB.get(`/api/v1/nodes/${encodeURIComponent(`imp/d${i % 7}/p${i}.md`)}`);
      expectStatus(page, 200);
      expect((await ownerB.get(`/api/v1/nodes/${page.body.id}/history`)).body.versions).toHaveLength(1);
    }

    // Both nodes' workers drained the embedding backlog; the provider saw each page's text once.
    await waitForVectors(ownerB, 90_000);
    figures.push(`${FILES} pages embedded ${Date.now() - t0} ms after the import began`);
    const seen = new Map<string, number>();
    for (const input of fake.inputs) for (const w of input.match(/wombat\d+z/g) ?? []) seen.set(w, (seen.get(w) ?? 0) + 1);
    expect(seen.size).toBe(FILES);
    const twice = [...seen].filter(([, n]) => n !== 1);
    expect(twice, 'pages embedded more than once').toEqual([]);
  }, 180_000);

  it('kill -9 of A while four clients write through A and B: every acknowledged write is there afterwards, B keeps serving', async () => {
    const acked: { path: string; content: string }[] = [];
    const refused: string[] = [];
    let killed = false;
    const writer = async (node: string, k: number) => {
      const c = on(node, owner);
      for (let i = 0; ; i++) {
        // Writers on A stop when A is gone; writers on B go on for ten more writes.
        if (killed) {
          if (node === a.url) return;
          const from = afterKill.get(k) ?? i;
          afterKill.set(k, from);
          if (i >= from + 10) return;
        }
        const p = { path: `load/c${k}/p${i}.md`, content: `# Load ${k} ${i}\n\nwritten through ${node === a.url ? 'A' : 'B'}\n` };
        try {
          const r = await c.post('/api/v1/nodes', p);
          if (r.status === 201) acked.push(p);
          else refused.push(`${r.status} ${r.text.slice(0, 200)}`);
        } catch {
          // The connection died with the node: not acknowledged, so nothing is owed.
          if (node === a.url) return;
          throw new Error('node B failed a request');
        }
      }
    };
    const afterKill = new Map<number, number>();
    const writers = [writer(a.url, 0), writer(a.url, 1), writer(b.url, 2), writer(b.url, 3)];
    // Kill A once it has acknowledged writes of its own, in the middle of the stream.
    const until = Date.now() + 60_000;
    while (acked.filter((p) => /through A/.test(p.content)).length < 20 && Date.now() < until) await sleep(20);
    a.child.kill('SIGKILL');
    killed = true;
    await exited(a.child);
    await Promise.all(writers);

    expect(refused).toEqual([]);
    const throughA = acked.filter((p) => /through A/.test(p.content)).length;
    expect(throughA).toBeGreaterThanOrEqual(20);
    expect(acked.length - throughA).toBeGreaterThan(20);
    figures.push(`kill -9 under load: ${throughA} writes acknowledged by A, ${acked.length - throughA} by B`);

    const ownerB = on(b.url, owner);
    for (const p of acked) {
      const r = await ownerB.get(`/api/v1/nodes/${encodeURIComponent(p.path)}`);
      expect(r.status, p.path).toBe(200);
      expect(r.body.content).toBe(p.content);
    }
    // B still writes and reads after its peer died.
    const after = await ownerB.post('/api/v1/nodes', { path: 'load/after.md', content: '# After\n\nB goes on\n' });
    expectStatus(after, 201);
    expectStatus(await ownerB.get(`/api/v1/nodes/${after.body.id}`), 200);
  }, 120_000);
});
