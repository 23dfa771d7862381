import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IMPORT_LIMITS } from '../../src/core/import/limits.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { exited, spawnService } from '../support/service-process.js';
import { Client, signupHuman } from '../support/server.js';

/**
 * Issue 16: an import is a job that survives the process. A 3,000-file import is killed (-9)
 * between batches while it runs; after a restart its lease runs out (30 s), the service
 * takes it over and finishes it: every file imported exactly once, one commit per batch, the
 * audit chain intact. This waits for the real lease, so it takes about a minute per engine.
 */

const FILES = 3000;
const BATCH = IMPORT_LIMITS.batchFiles;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(testEngines())('import and kill -9 (%s)', (engine) => {
  let tdb: TestDatabase;
  let env: Record<string, string>;
  let svc: { child: ChildProcess; url: string } | undefined;

  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
    env = { DATA_DIR: tdb.dataDir, ...(tdb.databaseUrl ? { DATABASE_URL: tdb.databaseUrl } : {}) };
  });

  afterAll(async () => {
    if (svc) {
      svc.child.kill('SIGKILL');
      await exited(svc.child);
    }
    await tdb?.cleanup();
  });

  it('a 3,000-file import killed while it runs is finished after a restart, each file exactly once', async () => {
    expect(FILES).toBeGreaterThan(2 * BATCH);
    svc = await spawnService(env);
    const h = await signupHuman(svc.url, 'Crash');
    let owner = h.client;
    const expected = Array.from({ length: FILES }, (_, i) => `crash/d${i % 10}/p${i}.md`).sort();
    const files = Array.from({ length: FILES }, (_, i) => ({ path: `d${i % 10}/p${i}.md`, content: `# Page ${i}\n\nquoll${i}\n` }));
    const res = await owner.post('/api/v1/import', { space: 'crash', files });
    expectStatus(res, 202);
    const url = res.body.status_url as string;

    // Kill it once at least one batch is in and more remain.
    let atKill = 0;
    for (let i = 0; i < 3000; i++) {
      const cur = await owner.get(url);
      expectStatus(cur, 200);
      expect(cur.body.status, 'the import finished before it could be killed').not.toBe('done');
      if (cur.body.done >= BATCH) {
        atKill = cur.body.done;
        break;
      }
      await sleep(5);
    }
    expect(atKill).toBeGreaterThanOrEqual(BATCH);
    svc.child.kill('SIGKILL');
    await exited(svc.child);

    svc = await spawnService(env);
    // The session lives in the database: the same cookies work on the new process.
    owner = Object.assign(new Client(svc.url), { cookies: owner.cookies });
    const after = await owner.get(url);
    expectStatus(after, 200);
    // What was committed before the kill is kept; a batch in flight was rolled back whole.
    expect(after.body.done).toBeGreaterThanOrEqual(atKill);
    expect(after.body.done % BATCH === 0 || after.body.status === 'done').toBe(true);
    expect(after.body.commits).toHaveLength(Math.ceil(after.body.done / BATCH));

    // The dead node's lease runs out; the restarted service takes the job over.
    let job = after.body;
    const until = Date.now() + 200_000;
    while (job.status !== 'done' && job.status !== 'failed' && Date.now() < until) {
      await sleep(500);
      job = (await owner.get(url)).body;
    }
    expect(job).toMatchObject({ status: 'done', total: FILES, done: FILES, created: FILES, updated: 0, unchanged: 0, skipped_count: 0, error: null });
    expect(job.commits).toHaveLength(Math.ceil(FILES / BATCH));
    expect(new Set(job.commits).size).toBe(job.commits.length);

    // Every file is a page once: the tree holds exactly the files, the service counts no more
    // pages, and each page has one version.
    const tree = await owner.get('/api/v1/spaces/crash/tree?depth=10');
    expectStatus(tree, 200);
    const paths: string[] = [];
    const walk = (f: { pages: { path: string }[]; folders: unknown[] }) => {
      for (const p of f.pages) paths.push(p.path);
      for (const sub of f.folders) walk(sub as typeof f);
    };
    walk(tree.body.tree);
    expect(paths.sort()).toEqual(expected);
    expect((await owner.get('/healthz')).body.nodes).toBe(FILES);
    for (const i of [0, atKill - 1, atKill, Math.min(atKill + BATCH, FILES - 1), FILES - 1]) {
      const page = await owner.get(`/api/v1/nodes/${encodeURIComponent(`crash/d${i % 10}/p${i}.md`)}`);
      expectStatus(page, 200);
      expect(page.body.content).toBe(`# Page ${i}\n\nquoll${i}\n`);
      const history = await owner.get(`/api/v1/nodes/${page.body.id}/history`);
      expect(history.body.versions).toHaveLength(1);
      expect(job.commits).toContain(history.body.versions[0].commit_sha);
    }
    const found = await owner.get(`/api/v1/search?q=quoll${FILES - 1}&mode=fts`);
    expect(found.body.results.map((r: { path: string }) => r.path)).toEqual([`crash/d${(FILES - 1) % 10}/p${FILES - 1}.md`]);

    // One import.batch entry per commit, one import.done, and the chain verifies.
    const audit = await owner.get('/api/v1/audit?action=import.&limit=500');
    const mine = audit.body.items.filter((i: { detail: { import?: string } }) => i.detail.import === job.id);
    expect(mine.filter((i: { action: string }) => i.action === 'import.done')).toHaveLength(1);
    expect(
      mine
        .filter((i: { action: string }) => i.action === 'import.batch')
        .map((i: { detail: { commit: string } }) => i.detail.commit)
        .reverse(),
    ).toEqual(job.commits);
    const verify = await owner.get('/api/v1/audit/verify');
    expect(verify.body).toMatchObject({ ok: true, first_broken: null });
  }, 300_000);
});
