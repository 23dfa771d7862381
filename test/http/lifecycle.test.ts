import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { expectError, expectStatus } from '../support/expect.js';
import { Client, createAgentWithKey, joinAs, signupHuman, startServerOn, startTestServer, type TestServer } from '../support/server.js';

/**
 * The lifecycle job (issue 16): `GET /api/v1/lifecycle/candidates` and `POST /api/v1/lifecycle/run`,
 * and the scheduled run. Pages are aged by writing their timestamps in the test database (the
 * service has no other way to make time pass); the scheduler is driven through its `tick` with a
 * clock of the test's choosing. Content is checked through the API or the page rows, never by
 * reading a page over HTTP after aging it (a read is a touch and would make it fresh again).
 */

const PASSWORD = 'correct horse battery';
const DAY = 86_400_000;

describe.each(testEngines())('lifecycle job (%s)', (engine) => {
  let s: TestServer;
  let owner: { id: string; client: Client; workspace: { id: string; slug: string } };
  let owner2: { id: string; client: Client };
  let editor: { id: string; client: Client };
  let viewer: { id: string; client: Client };
  let k = 0;
  const uniq = (p: string) => `${p}${++k}${Date.now().toString(36)}`;

  const create = async (path: string, opts: { sensitivity?: string; body?: string } = {}) => {
    const res = await owner.client.post('/api/v1/nodes', {
      path,
      content: `---\nsensitivity: ${opts.sensitivity ?? 'internal'}\n---\n# ${path}\n\n${opts.body ?? `Body of ${path}.`}\n`,
    });
    expectStatus(res, 201);
    return res.body.id as string;
  };
  /** Makes pages look last written and last read `days` ago. */
  const age = async (ids: string[], days: number, opts: { touched?: boolean } = {}) => {
    const at = new Date(Date.now() - days * DAY).toISOString();
    await s.ctx.store.db
      .updateTable('pages')
      .set({ updated_at: at, last_touched_at: opts.touched === false ? null : at })
      .where('id', 'in', ids)
      .execute();
    return at;
  };
  const row = (id: string) => s.ctx.store.db.selectFrom('pages').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const commits = async () => (await s.ctx.store.db.selectFrom('commits').select('sha').where('workspace_id', '=', owner.workspace.id).execute()).length;
  const setLifecycle = async (folder: string, body: Record<string, unknown>) =>
    expectStatus(await owner.client.put(`/api/v1/clusters/${folder}/lifecycle`, body), 200);
  const candidates = async (c: Client, under?: string) => {
    const res = await c.get('/api/v1/lifecycle/candidates');
    expectStatus(res, 200);
    const all = res.body.candidates as { id: string; path: string; why: Record<string, unknown> }[];
    return { ...res.body, candidates: under ? all.filter((x) => x.path.startsWith(`${under}/`)) : all };
  };
  const stepUp = async (c: Client) => expectStatus(await c.post('/api/auth/stepup', { password: PASSWORD }), 200);

  /** A folder `eng/<name>` set to 30 days (half-life 10): two stale pages, a stale one in a sub-folder, a fresh one. */
  const staleFolder = async () => {
    const folder = `eng/${uniq('old')}`;
    const a = await create(`${folder}/a.md`);
    const b = await create(`${folder}/b.md`);
    const d = await create(`${folder}/sub/d.md`);
    const fresh = await create(`${folder}/fresh.md`);
    await setLifecycle(folder, { auto_archive_days: 30, half_life_days: 10 });
    const at = await age([a, b, d], 40);
    return { folder, stale: [a, b, d], fresh, at };
  };

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = await signupHuman(s.url, 'Olga');
    owner2 = await joinAs(owner.client, owner.workspace.slug, 'owner', 'Otto');
    editor = await joinAs(owner.client, owner.workspace.slug, 'editor');
    viewer = await joinAs(owner.client, owner.workspace.slug, 'viewer');
  }, 60_000);
  afterAll(async () => s?.stop());

  it('lists the candidates with why: last touch, age, half-life score, the folder and its setting; only pages the caller may read', async () => {
    const f = await staleFolder();
    // Never read since written: the write's time is its age.
    const unread = await create(`${f.folder}/unread.md`);
    await age([unread], 35, { touched: false });
    const secret = await create(`${f.folder}/secret.md`, { sensitivity: 'confidential' });
    await age([secret], 50);
    // A folder without a setting: old pages there are no candidates.
    const other = await create(`eng/${uniq('plain')}/e.md`);
    await age([other], 400);
    // Recently read, long ago written: not stale.
    const read = await create(`${f.folder}/read.md`);
    await age([read], 90);
    await s.ctx.store.db.updateTable('pages').set({ last_touched_at: new Date().toISOString() }).where('id', '=', read).execute();

    const report = await candidates(owner.client, f.folder);
    expect(report.mode).toBe('dry');
    expect(typeof report.next_run_at).toBe('string');
    const ids = report.candidates.map((c: { id: string }) => c.id);
    expect(new Set(ids)).toEqual(new Set([secret, ...f.stale, unread]));
    // Oldest first.
    expect(ids[0]).toBe(secret);
    expect(ids[ids.length - 1]).toBe(unread);
    expect(ids).not.toContain(f.fresh);
    expect(ids).not.toContain(read);

    const a = report.candidates.find((c: { id: string }) => c.id === f.stale[0])!;
    expect(a.why).toMatchObject({ last_touched_at: f.at, updated_at: f.at, folder: f.folder, auto_archive_days: 30, half_life_days: 10 });
    expect(a.why.age_days).toBeGreaterThanOrEqual(40);
    expect(a.why.age_days).toBeLessThan(40.1);
    expect(a.why.half_life_score).toBeCloseTo(0.5 ** 4, 3);
    // The sub-folder page follows its parent's setting.
    expect(report.candidates.find((c: { id: string }) => c.id === f.stale[2])!.why).toMatchObject({ folder: f.folder, auto_archive_days: 30 });
    expect(report.candidates.find((c: { id: string }) => c.id === unread)!.why).toMatchObject({ last_touched_at: null });

    // A viewer (ceiling internal) does not see the confidential page; nor does an agent reading elsewhere.
    const seen = (await candidates(viewer.client, f.folder)).candidates.map((c: { id: string }) => c.id);
    expect(new Set(seen)).toEqual(new Set([...f.stale, unread]));
    const elsewhere = await createAgentWithKey(owner.client, [{ action: 'read', scope: 'ops' }]);
    expect((await candidates(elsewhere.client, f.folder)).candidates).toEqual([]);
    const reader = await createAgentWithKey(owner.client, [{ action: 'read', scope: 'eng' }], { ceiling: 'internal' });
    expect(new Set((await candidates(reader.client, f.folder)).candidates.map((c: { id: string }) => c.id))).toEqual(new Set([...f.stale, unread]));
    // A sub-folder's own setting wins over its parent's.
    await setLifecycle(`${f.folder}/sub`, { auto_archive_days: 60 });
    expect((await candidates(owner.client, f.folder)).candidates.map((c: { id: string }) => c.id)).not.toContain(f.stale[2]);
    await setLifecycle(`${f.folder}/sub`, { auto_archive_days: null });
    // Clean up for the other tests: these pages are archived by hand.
    await stepUp(owner.client);
    expectStatus(await owner.client.post(`/api/v1/clusters/${f.folder}/archive`, { reason: 'manual' }), 200);
  });

  it('a dry run lists what would be archived and changes nothing', async () => {
    const f = await staleFolder();
    const before = await commits();
    const res = await owner.client.post('/api/v1/lifecycle/run', { mode: 'dry' });
    expectStatus(res, 200);
    expect(res.body).toMatchObject({ mode: 'dry', archived: 0, commit_sha: null, remaining: 0 });
    const listed = res.body.pages.map((p: { id: string }) => p.id);
    expect(listed).toEqual(expect.arrayContaining(f.stale));
    expect(listed).not.toContain(f.fresh);
    expect(await commits()).toBe(before);
    for (const id of f.stale) expect((await row(id)).state).toBe('active');
    // Still candidates, and the dry run is not recorded as a run.
    expect((await candidates(owner.client, f.folder)).candidates).toHaveLength(3);
    const runs = await s.ctx.store.db
      .selectFrom('lifecycle_runs')
      .select('slot')
      .where('workspace_id', '=', owner.workspace.id)
      .where('trigger', '=', 'manual')
      .execute();
    expect(runs).toEqual([]);
    await stepUp(owner.client);
    expectStatus(await owner.client.post(`/api/v1/clusters/${f.folder}/archive`, { reason: 'manual' }), 200);
  });

  it('refuses runs by editors, viewers and agents, an apply without step-up, and bad bodies', async () => {
    expectError(await editor.client.post('/api/v1/lifecycle/run', { mode: 'dry' }), 403, 'forbidden');
    expectError(await viewer.client.post('/api/v1/lifecycle/run', { mode: 'dry' }), 403, 'forbidden');
    const agent = await createAgentWithKey(owner.client, [{ action: 'admin' }, { action: 'write' }, { action: 'read' }]);
    expectError(await agent.client.post('/api/v1/lifecycle/run', { mode: 'dry' }), 403, 'session_required');
    const fresh = await signupHuman(s.url, 'Nina');
    fresh.client.workspace = owner.workspace.slug;
    expect((await fresh.client.post('/api/v1/lifecycle/run', { mode: 'dry' })).status).toBe(404);

    // The second owner never stepped up.
    expectError(await owner2.client.post('/api/v1/lifecycle/run', { mode: 'apply' }), 403, 'step_up_required');

    expectError(await owner.client.post('/api/v1/lifecycle/run', {}), 400, 'invalid_request');
    expectError(await owner.client.post('/api/v1/lifecycle/run', { mode: 'wet' }), 400, 'invalid_request');
    expectError(await owner.client.post('/api/v1/lifecycle/run', { mode: 'dry', extra: 1 }), 400, 'invalid_request');
    const bad = await owner.client.request('POST', '/api/v1/lifecycle/run', { body: '{"mode": ', headers: { 'content-type': 'application/json' } });
    expectError(bad, 400, 'invalid_json');
  });

  it('an apply archives exactly the candidates with reason stale in one commit and puts a digest in every owner inbox', async () => {
    const f = await staleFolder();
    await stepUp(owner.client);
    const dry = await owner.client.post('/api/v1/lifecycle/run', { mode: 'dry' });
    const expected = dry.body.pages.map((p: { id: string }) => p.id).sort();
    expect(expected).toEqual(expect.arrayContaining(f.stale));
    const before = await commits();

    const res = await owner.client.post('/api/v1/lifecycle/run', { mode: 'apply' });
    expectStatus(res, 200);
    expect(res.body).toMatchObject({ mode: 'apply', archived: expected.length, remaining: 0 });
    expect(res.body.pages.map((p: { id: string }) => p.id).sort()).toEqual(expected);
    const commit = res.body.commit_sha as string;
    expect(commit).toMatch(/^[0-9a-f]{40}$/);
    expect(await commits()).toBe(before + 1);
    for (const id of f.stale) {
      const r = await row(id);
      expect(r).toMatchObject({ state: 'archived', commit_sha: commit });
      expect(JSON.parse(r.frontmatter)).toMatchObject({ state: 'archived', archived_reason: 'stale' });
    }
    expect(await row(f.fresh)).toMatchObject({ state: 'active' });
    const history = await owner.client.get(`/api/v1/nodes/${f.stale[0]}/history`);
    expect(history.body.versions[0]).toMatchObject({
      action: 'archive',
      commit_sha: commit,
      message: `Lifecycle: archive ${expected.length} stale page${expected.length === 1 ? '' : 's'}`,
    });

    for (const o of [owner, owner2]) {
      const inbox = await o.client.get('/api/v1/inbox?state=all&limit=100');
      expectStatus(inbox, 200);
      const digests = inbox.body.events.filter(
        (e: { kind: string; payload: { commit_sha?: string } }) => e.kind === 'lifecycle_digest' && e.payload.commit_sha === commit,
      );
      expect(digests).toHaveLength(1);
      expect(digests[0].payload).toMatchObject({ trigger: 'manual', archived: expected.length, more: 0 });
      expect(digests[0].payload.pages.map((p: { id: string }) => p.id).sort()).toEqual(expected);
    }
    // Editors get none.
    const editorInbox = await editor.client.get('/api/v1/inbox?state=all&limit=100');
    expect(editorInbox.body.events.filter((e: { kind: string }) => e.kind === 'lifecycle_digest')).toEqual([]);

    const report = await candidates(owner.client, f.folder);
    expect(report.candidates).toEqual([]);
    expect(report.last_run).toMatchObject({ trigger: 'manual', mode: 'apply', archived: expected.length, commit_sha: commit });
    expect(typeof report.last_run.digest_event.seq).toBe('number');
    // The audit log names the run.
    const audit = await owner.client.get('/api/v1/audit?action=lifecycle.run&limit=1');
    expect(audit.body.items[0]).toMatchObject({
      action: 'lifecycle.run',
      actor: { id: owner.id },
      detail: { trigger: 'manual', archived: expected.length, commit },
    });
  });

  it('a bundle read counts as a touch: a page an agent pulls through a bundle is no longer stale', async () => {
    const folder = `eng/${uniq('bundled')}`;
    const word = `zorblax${k}`;
    const id = await create(`${folder}/pulled.md`, { body: `The ${word} procedure explained.` });
    const other = await create(`${folder}/other.md`);
    await setLifecycle(folder, { auto_archive_days: 30 });
    await age([id, other], 45);
    expect((await candidates(owner.client, folder)).candidates.map((c: { id: string }) => c.id).sort()).toEqual([id, other].sort());
    const agent = await createAgentWithKey(owner.client, [{ action: 'read', scope: 'eng' }]);
    const b = await agent.client.post('/api/v1/bundle', { intent: word, scope: folder });
    expectStatus(b, 200);
    expect(b.body.sections.map((x: { id: string }) => x.id)).toContain(id);
    const left = (await candidates(owner.client, folder)).candidates.map((c: { id: string }) => c.id);
    expect(left).not.toContain(id);
    // Flushed, the touch is the page's last_touched_at.
    await s.ctx.touches.flush();
    expect(Date.parse((await row(id)).last_touched_at!)).toBeGreaterThan(Date.now() - DAY);
    await stepUp(owner.client);
    expectStatus(await owner.client.post(`/api/v1/clusters/${folder}/archive`, { reason: 'manual' }), 200);
  });
});

/**
 * The scheduled run: once per workspace per slot, even when several nodes look at the same time.
 * PostgreSQL: two servers on one database; SQLite (one node by design): two looks at once on one.
 */
describe.each(testEngines())('scheduled lifecycle run (%s)', (engine) => {
  let tdb: TestDatabase;
  let nodes: RunningServer[] = [];

  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
    // A slot of a year: the looks the timers make by themselves stay in today's slot, which the test leaves alone.
    const env = { LIFECYCLE_MODE: 'apply', LIFECYCLE_INTERVAL_S: String(365 * 86400) };
    nodes = [await startServerOn(tdb, env)];
    if (engine === 'postgres') nodes.push(await startServerOn(tdb, env));
  }, 60_000);
  afterAll(async () => {
    for (const n of nodes) await n.close();
    await tdb?.cleanup();
  });

  it('archives the stale pages once, as the service, and sends the digest once', async () => {
    const [n1] = nodes;
    const owner = await signupHuman(n1!.url, 'Sched');
    const ids: string[] = [];
    for (const name of ['a', 'b', 'c']) {
      const res = await owner.client.post('/api/v1/nodes', { path: `eng/stale/${name}.md`, content: `# ${name}\n\nText ${name}.\n` });
      expectStatus(res, 201);
      ids.push(res.body.id);
    }
    expectStatus(await owner.client.put('/api/v1/clusters/eng/stale/lifecycle', { auto_archive_days: 30 }), 200);
    const report = await owner.client.get('/api/v1/lifecycle/candidates');
    expect(report.body).toMatchObject({ mode: 'apply', candidates: [] });

    // Two years on: the pages are stale, and the slot is a new one.
    const later = new Date(Date.now() + 2 * 365 * DAY);
    const looks =
      engine === 'postgres' ? [nodes[0]!.lifecycle.tick(later), nodes[1]!.lifecycle.tick(later)] : [n1!.lifecycle.tick(later), n1!.lifecycle.tick(later)];
    const runs = (await Promise.all(looks)).flat().filter((r) => r.workspaceId === owner.workspace.id);
    expect(runs).toHaveLength(1);
    expect(runs[0]!.result).toMatchObject({ mode: 'apply', archived: 3 });
    // A later look in the same slot does nothing.
    expect((await n1!.lifecycle.tick(new Date(later.getTime() + 1000))).filter((r) => r.workspaceId === owner.workspace.id)).toEqual([]);

    const db = n1!.ctx.store.db;
    const versions = await db
      .selectFrom('page_versions')
      .select(['page_id', 'principal_id'])
      .where('page_id', 'in', ids)
      .where('action', '=', 'archive')
      .execute();
    expect(versions).toHaveLength(3);
    expect(new Set(versions.map((v) => v.principal_id))).toEqual(new Set(['lifecycle']));
    const pages = await db.selectFrom('pages').select(['state', 'commit_sha', 'frontmatter']).where('id', 'in', ids).execute();
    expect(new Set(pages.map((p) => p.commit_sha)).size).toBe(1);
    for (const p of pages) expect(JSON.parse(p.frontmatter)).toMatchObject({ state: 'archived', archived_reason: 'stale', archived_at: later.toISOString() });
    const slots = await db
      .selectFrom('lifecycle_runs')
      .select(['slot', 'trigger', 'archived'])
      .where('workspace_id', '=', owner.workspace.id)
      .where('archived', '>', 0)
      .execute();
    expect(slots).toEqual([expect.objectContaining({ trigger: 'scheduled', archived: 3 })]);

    const inbox = await owner.client.get('/api/v1/inbox?state=all');
    const digests = inbox.body.events.filter((e: { kind: string }) => e.kind === 'lifecycle_digest');
    expect(digests).toHaveLength(1);
    expect(digests[0].payload).toMatchObject({ trigger: 'scheduled', archived: 3 });
    const after = await owner.client.get('/api/v1/lifecycle/candidates');
    expect(after.body.last_run).toMatchObject({ trigger: 'scheduled', mode: 'apply', archived: 3, digest_event: { seq: digests[0].seq } });
  });
});
