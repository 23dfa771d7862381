import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { expectSingleLine } from '../support/lines.js';
import { ALL, Client, createAgentWithKey, signupHuman, startServerOn } from '../support/server.js';

/**
 * Issue 18: a PostgreSQL writer takes its workspace's lock and reads main's head and the audit
 * chain's tail in the same round trip (cv_lock_workspace, migration 018), then keeps them itself
 * for the rest of its transaction. Read from a snapshot older than the lock, a writer would build
 * on a head or an audit entry another writer had just replaced: its ref move would fail (409) or
 * its audit entry take a seq already used (500), and the lines would fork. Many writers on two
 * nodes of one database (one node on SQLite) create, update and delete at once: every request
 * succeeds, main is one unbroken line, and so is the audit chain.
 */
describe.each(testEngines())('writers of one workspace take turns (%s)', (engine) => {
  let tdb: TestDatabase;
  const nodes: RunningServer[] = [];
  let key: string;
  let workspaceId: string;

  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
    nodes.push(await startServerOn(tdb));
    if (engine === 'postgres') nodes.push(await startServerOn(tdb));
    const h = await signupHuman(nodes[0]!.url, 'Turns');
    // An agent: its deletes need no human step-up.
    key = (
      await createAgentWithKey(
        h.client,
        ALL.map((action) => ({ action })),
      )
    ).key;
    workspaceId = h.workspace.id;
  }, 60_000);
  afterAll(async () => {
    for (const n of nodes) await n.close();
    await tdb?.cleanup();
  });

  const on = (k: number) => {
    return new Client(nodes[k % nodes.length]!.url, key);
  };

  it('twelve writers create, update and delete at once: all succeed, main and the audit chain are single lines', async () => {
    const failures: string[] = [];
    let created = 0;
    const writer = async (k: number) => {
      const c = on(k);
      for (let i = 0; i < 6; i++) {
        const path = `turns/w${k}/p${i}.md`;
        const r = await c.post('/api/v1/nodes', { path, content: `# Writer ${k} page ${i}\n\nFirst words of ${k}-${i}.\n` });
        if (r.status !== 201) {
          failures.push(`create ${path}: ${r.status} ${r.text.slice(0, 200)}`);
          continue;
        }
        created++;
        const u = await c.put(
          `/api/v1/nodes/${r.body.id}`,
          { content: `# Writer ${k} page ${i}\n\nSecond words of ${k}-${i}.\n` },
          { 'if-match': r.headers.get('etag')! },
        );
        if (u.status !== 200) failures.push(`update ${path}: ${u.status} ${u.text.slice(0, 200)}`);
        if (i % 3 === 2) {
          const d = await c.delete(`/api/v1/nodes/${r.body.id}`);
          if (d.status !== 200 && d.status !== 204) failures.push(`delete ${path}: ${d.status} ${d.text.slice(0, 200)}`);
        }
      }
    };
    await Promise.all(Array.from({ length: 12 }, (_, k) => writer(k)));
    expect(failures).toEqual([]);
    expect(created).toBe(72);

    // 72 creates, 72 updates, 24 deletes (plus whatever the sign-up committed before them).
    const line = await expectSingleLine(nodes[0]!.ctx.store.db, workspaceId);
    expect(line.commits.length).toBeGreaterThanOrEqual(168);
    expect(line.auditEntries).toBeGreaterThanOrEqual(168);

    // What a reader sees agrees: 48 live pages, each with its second words.
    const list = await on(1).get('/api/v1/search?q=second+words&mode=fts&limit=50');
    expectStatus(list, 200);
    expect(list.body.results.filter((x: { path: string }) => x.path.startsWith('turns/'))).toHaveLength(48);
  }, 120_000);

  // On PostgreSQL the lock's own round trip answers whether the path is free (migration 028): read
  // from a snapshot older than the lock, the losers would reach the unique index (a 500) instead.
  it('eight writers on both nodes create the same path at once, three rounds with a delete between: one 201 a round, the rest 409 already_exists', async () => {
    for (let round = 0; round < 3; round++) {
      const path = 'turns/same/contested.md';
      const answers = await Promise.all(
        Array.from({ length: 8 }, (_, k) => on(k).post('/api/v1/nodes', { path, content: `# Contested\n\nRound ${round} writer ${k}.\n` })),
      );
      const created = answers.filter((r) => r.status === 201);
      expect(answers.map((r) => r.status).sort()).toEqual([201, 409, 409, 409, 409, 409, 409, 409]);
      for (const r of answers.filter((x) => x.status === 409)) expect(r.body.error.code).toBe('already_exists');
      const d = await on(round).delete(`/api/v1/nodes/${created[0]!.body.id}`);
      expect([200, 204]).toContain(d.status);
    }
    await expectSingleLine(nodes[0]!.ctx.store.db, workspaceId);
  }, 60_000);
});
