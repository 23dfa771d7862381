import crypto from 'node:crypto';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { stateWithPageStatement } from '../../src/auth/resolve.js';
import { hashSecret } from '../../src/auth/secrets.js';
import type { RunningServer } from '../../src/server.js';
import { testEngines } from '../support/engines.js';
import { mcpCall } from '../support/mcp-call.js';
import {
  Client,
  createAgentWithKey,
  createReaderAgent,
  joinAs,
  onNode,
  signupHuman,
  startServerOn,
  startTestServer,
  type Res,
  type TestServer,
} from '../support/server.js';

/**
 * Attack session o, on two changes:
 *
 * 1. PostgreSQL keeps reads (src/store/read-cache.ts, store/db.ts othersCommits, auth/resolve.ts
 *    fromAgentKey / stateWithPage, core/pages/read.ts): agent-key rows and rendered pages kept per
 *    node, tagged with `pg_current_snapshot()`; GET /nodes/:id reads the page row in the statement
 *    that asks for the snapshot, before the key's workspace is known; a principal's snapshot
 *    pinned for 50 ms. Attacked with real HTTP on two nodes over one database: writes on B
 *    (edit, level raised and lowered, move, grant narrowed and widened, key revoked, page deleted,
 *    agent suspended, lockdown, elevation) raced by parallel readers on A (same key: the pin; by
 *    id, by path, `?section=`, `format=md`, MCP context_get and fetch), while another workspace
 *    writes on B all along; the time each write was acknowledged against each read's start. Long
 *    transactions holding an old xid (PostgreSQL), commits that only shrink the snapshot's
 *    in-progress list, `?at=` reads, deleted pages, other workspaces' page ids (answers and
 *    time), expiry and elevations ending with nothing committed.
 * 2. Touches flushed in one statement per 5,000 pages (core/touches.ts).
 * 3. Rate-limit leases up to 1,024 tokens (store/rate-limits.ts).
 * 4. Migration 026: PostgreSQL indexes stop words; scores of stop-word queries against text the
 *    caller cannot see, and hostile queries.
 *
 * FOUND, and fixed:
 * - PostgreSQL, GET /api/v1/nodes/:id: the page row was read (row_to_json, whole content) before
 *   the key was checked, whatever its workspace; a 1 MB page of another workspace answered 404
 *   (or 401 to a made-up key) in ~10 ms where a missing id answered in ~1.5 ms: its existence and
 *   size were measurable by any key, and by anyone with a made-up `ak_` key. Now read only when a
 *   key of that hash exists in the page's workspace (the old statement's rule).
 * - Rate-limit leases: "at most 1/16 of what is left" was 1/16 of what the bucket held at this
 *   node's previous take (up to 1 s old); when the other node spent most of it meanwhile, one lease
 *   took up to 1,024 tokens of a nearly empty bucket (1,025 of 1,100). Now a lease is taken only if
 *   the bucket holds 16 times it when the take lands.
 * FOUND outside the change, not fixed (docs/decisions.md): SQLite's contentless-delete FTS5 tables
 * keep a deleted section in their bm25 totals, so a page written and deleted again leaves other
 * pages' scores moved (text that was visible at that level only: no leak across levels).
 * Held: everything else here (see the passing tests).
 */

const PASSWORD = 'correct horse battery';
const HAS_PG = testEngines().includes('postgres');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const clock = () => performance.now();

const expectOk = (r: Res, status = 200) => expect(r.status, r.text.slice(0, 300)).toBe(status);

/** A page's text at version `v`: a marker in its first section and another in its `Part` section. */
const body = (v: number, level = 'internal', extra = '') =>
  `---\nsensitivity: ${level}\n---\n# Head\n\nver-${v}- text\n\n## Part\n\npart-${v}- words\n${extra}`;

type Kind = 'id' | 'path' | 'id-section' | 'path-section' | 'md' | 'mcp-get' | 'mcp-get-section' | 'mcp-fetch';

/**
 * What a caller observes reading the page one way: `dead` (401), `gone` (404, or an MCP error
 * naming no version), `v<n>` (the version whose marker it holds), or `odd:` anything else.
 */
async function observe(base: string, key: string, kind: Kind, page: { id: string; path: string }): Promise<string> {
  let status: number;
  let text: string;
  if (kind.startsWith('mcp')) {
    const r =
      kind === 'mcp-fetch'
        ? await mcpCall(base, key, 'fetch', { id: page.id })
        : await mcpCall(base, key, 'context_get', kind === 'mcp-get-section' ? { path: page.path, section: 'Part' } : { path: page.path });
    if (r.status === 401) return 'dead';
    status = r.isError ? 404 : 200;
    text = r.text;
    if (r.isError && !/not_found/.test(r.text)) return `odd:${r.text.slice(0, 200)}`;
  } else {
    const ref = kind === 'path' || kind === 'path-section' ? encodeURIComponent(page.path) : page.id;
    const q = kind.endsWith('section') ? '?section=Part' : kind === 'md' ? '?format=md' : '';
    const res = await fetch(`${base}/api/v1/nodes/${ref}${q}`, { headers: { authorization: `Bearer ${key}` } });
    status = res.status;
    text = await res.text();
  }
  if (status === 401) return 'dead';
  if (status === 404) return /ver-\d+-|part-\d+-/.test(text) ? `odd:404 with text ${text.slice(0, 200)}` : 'gone';
  if (status !== 200) return `odd:${status} ${text.slice(0, 200)}`;
  const sectionOnly = kind === 'id-section' || kind === 'path-section' || kind === 'mcp-get-section';
  const m = (sectionOnly ? /part-(\d+)-/ : /ver-(\d+)-/).exec(text);
  return m ? `v${m[1]}` : `odd:200 without a marker ${text.slice(0, 200)}`;
}

interface Obs {
  reader: string;
  kind: Kind;
  start: number;
  end: number;
  what: string;
}

interface Reader {
  name: string;
  base: string;
  key: string;
  kind: Kind;
  page: { id: string; path: string };
}

/**
 * Readers loop until told to stop; `write` runs after `beforeMs`, and reading goes on for
 * `afterMs` (past the 50 ms pin) once it is acknowledged. Every read that started after the
 * acknowledgement must observe `expected(reader)`.
 */
async function race(readers: Reader[], write: () => Promise<void>, expected: (r: Reader) => string, opts: { beforeMs?: number; afterMs?: number } = {}) {
  let stop = false;
  const obs: Obs[] = [];
  const loops = readers.map(async (r) => {
    while (!stop) {
      const start = clock();
      const what = await observe(r.base, r.key, r.kind, r.page);
      obs.push({ reader: r.name, kind: r.kind, start, end: clock(), what });
    }
  });
  await sleep(opts.beforeMs ?? 40);
  const sent = clock();
  await write();
  const ack = clock();
  await sleep(opts.afterMs ?? 120);
  stop = true;
  await Promise.all(loops);
  const after = obs.filter((o) => o.start > ack);
  const byName = new Map(readers.map((r) => [r.name, r]));
  const bad = after
    .filter((o) => o.what !== expected(byName.get(o.reader)!))
    .map((o) => ({ ...o, msAfterAck: +(o.start - ack).toFixed(2), expected: expected(byName.get(o.reader)!) }));
  // Every reader read at least once after the write, its first read right after it included.
  for (const r of readers) expect(after.filter((o) => o.reader === r.name).length, `${r.name} read after the write`).toBeGreaterThan(0);
  expect(obs.filter((o) => o.what.startsWith('odd:')).slice(0, 3)).toEqual([]);
  return { bad, obs, sent, ack, after };
}

describe.each(testEngines())('attack o: kept reads across two nodes (%s)', (engine) => {
  let a: TestServer;
  let b: RunningServer;
  let owner: Client;
  let ownerB: Client;
  let slug: string;
  let churnStop = false;
  let churn: Promise<void> = Promise.resolve();
  let churned = 0;
  let n = 0;
  const uniq = (p: string) => `${p}${++n}${Date.now().toString(36)}`;

  beforeAll(async () => {
    a = await startTestServer(engine);
    b = await startServerOn(a.ctx.config);
    const o = await signupHuman(a.url, 'Owner');
    owner = o.client;
    slug = o.workspace.slug;
    expectOk(await owner.post('/api/auth/stepup', { password: PASSWORD }));
    ownerB = onNode(b.url, owner);
    // Another workspace writes on node B all along: its commits move the snapshot between and
    // during every read below.
    const other = onNode(b.url, (await signupHuman(a.url, 'Churn')).client);
    churn = (async () => {
      while (!churnStop) {
        const r = await other.post('/api/v1/nodes', { path: `churn/${uniq('c')}.md`, content: `# C\n\nthe churn ${churned}\n` });
        if (r.status === 201) churned++;
        await sleep(5);
      }
    })();
  }, 60_000);
  afterAll(async () => {
    churnStop = true;
    await churn;
    await b?.close();
    await a?.stop();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const create = async (c: Client, path: string, content: string) => {
    const r = await c.post('/api/v1/nodes', { path, content });
    expectOk(r, 201);
    return r.body as { id: string; path: string; commit_sha: string; content_hash: string };
  };

  const readersFor = (key: string, page: { id: string; path: string }, kinds: Kind[], tag: string): Reader[] =>
    kinds.map((kind, i) => ({ name: `${tag}:${kind}:${i}`, base: a.url, key, kind, page: { ...page } }));

  it('every write on node B is what the very next read on node A answers, however it reads, with parallel readers sharing one key', async () => {
    const path = `race/${uniq('p')}.md`;
    const p = await create(owner, path, body(1));
    const agent = await createReaderAgent(owner, 'confidential');
    const k2 = await owner.post(`/api/v1/principals/${agent.id}/tokens`, { name: 'second' });
    expectOk(k2, 201);
    const key2: string = k2.body.key;
    const kindsK: Kind[] = ['id', 'id', 'path', 'id-section', 'mcp-get', 'path-section'];
    const kindsK2: Kind[] = ['md', 'mcp-fetch', 'mcp-get-section', 'id'];
    let page = { id: p.id, path };
    const all = () => [...readersFor(agent.key, page, kindsK, 'K'), ...readersFor(key2, page, kindsK2, 'K2')];
    const failures: Record<string, unknown[]> = {};
    const check = (what: string, r: { bad: unknown[] }) => {
      if (r.bad.length > 0) failures[what] = r.bad.slice(0, 5);
    };

    // Warm: both keys' rows and the page's renderings are kept on A.
    for (const r of all()) expect(await observe(r.base, r.key, r.kind, r.page), r.name).toBe('v1');

    check(
      'edited',
      await race(
        all(),
        async () => expectOk(await ownerB.put(`/api/v1/nodes/${p.id}`, { content: body(2) })),
        () => 'v2',
      ),
    );
    check(
      'raised above the ceiling',
      await race(
        all(),
        async () => expectOk(await ownerB.put(`/api/v1/nodes/${p.id}`, { content: body(3, 'secret') })),
        () => 'gone',
      ),
    );
    check(
      'lowered again',
      await race(
        all(),
        async () => expectOk(await ownerB.put(`/api/v1/nodes/${p.id}`, { content: body(4) })),
        () => 'v4',
      ),
    );
    const moved = `race/${uniq('moved')}.md`;
    check(
      'moved',
      await race(
        all(),
        async () => expectOk(await ownerB.post(`/api/v1/nodes/${p.id}/move`, { to: moved })),
        (r) => (r.kind === 'id' || r.kind === 'id-section' || r.kind === 'md' || r.kind === 'mcp-fetch' ? 'v4' : 'gone'),
      ),
    );
    // Another page takes the old path on B: path reads answer it at once, id reads the moved one.
    check(
      'path reused',
      await race(
        all(),
        async () => expectOk(await ownerB.post('/api/v1/nodes', { path, content: body(100) }), 201),
        (r) => (r.kind === 'id' || r.kind === 'id-section' || r.kind === 'md' || r.kind === 'mcp-fetch' ? 'v4' : 'v100'),
      ),
    );
    page = { id: p.id, path: moved };
    check(
      'a secret block added (same level)',
      await race(
        all(),
        async () => expectOk(await ownerB.put(`/api/v1/nodes/${p.id}`, { content: body(5, 'internal', '\n::: secret\nhidden-5- words\n:::\n') })),
        () => 'v5',
      ),
    );
    check(
      'grant narrowed',
      await race(
        all(),
        async () =>
          expectOk(
            await ownerB.put(`/api/v1/principals/${agent.id}/grants`, {
              grants: [
                { action: 'read', scope: 'elsewhere', ceiling: 'confidential' },
                { action: 'search', scope: '*', ceiling: 'confidential' },
              ],
            }),
          ),
        () => 'gone',
      ),
    );
    check(
      'grant widened again',
      await race(
        all(),
        async () =>
          expectOk(
            await ownerB.put(`/api/v1/principals/${agent.id}/grants`, {
              grants: [
                { action: 'read', scope: '*', ceiling: 'confidential' },
                { action: 'search', scope: '*', ceiling: 'confidential' },
              ],
            }),
          ),
        () => 'v5',
      ),
    );
    check(
      'second key revoked',
      await race(
        all(),
        async () => expectOk(await ownerB.delete(`/api/v1/principals/${agent.id}/tokens/${k2.body.id}`)),
        (r) => (r.key === key2 ? 'dead' : 'v5'),
      ),
    );
    check(
      'deleted',
      await race(
        readersFor(agent.key, page, kindsK, 'K'),
        async () => expectOk(await ownerB.delete(`/api/v1/nodes/${p.id}`)),
        () => 'gone',
      ),
    );
    // No stale secret text anywhere in what was answered.
    expect(churned, 'the other workspace wrote meanwhile').toBeGreaterThan(5);
    expect(failures).toEqual({});
  }, 60_000);

  it('a storm of edits on node B, with writes on node A too, under parallel readers on both nodes: no read answers a version older than one acknowledged before it began, or than one a finished read already answered', async () => {
    const p = await create(owner, `storm/${uniq('p')}.md`, body(1));
    const q = await create(owner, `storm/${uniq('q')}.md`, body(1));
    const agent = await createReaderAgent(owner, 'internal');
    const k2 = await owner.post(`/api/v1/principals/${agent.id}/tokens`, { name: 'second' });
    expectOk(k2, 201);
    const page = { id: p.id, path: p.path };
    const readers: Reader[] = [
      ...readersFor(agent.key, page, ['id', 'id', 'path', 'mcp-get', 'id-section'], 'KA'),
      ...readersFor(k2.body.key as string, page, ['md', 'path-section', 'mcp-fetch'], 'K2A'),
      ...(['id', 'path'] as Kind[]).map((kind, i) => ({ name: `KB:${kind}:${i}`, base: b.url, key: agent.key, kind, page })),
    ];
    let stop = false;
    const obs: Obs[] = [];
    const loops = readers.map(async (r) => {
      while (!stop) {
        const start = clock();
        const what = await observe(r.base, r.key, r.kind, r.page);
        obs.push({ reader: r.name, kind: r.kind, start, end: clock(), what });
      }
    });
    // Node A commits too (another page), so its own commits and B's interleave.
    let aWrites = 0;
    const onA = (async () => {
      for (let v = 2; !stop; v++) {
        expectOk(await owner.put(`/api/v1/nodes/${q.id}`, { content: body(v) }));
        aWrites++;
      }
    })();
    await sleep(30);
    const acks: [number, number][] = [];
    for (let v = 2; v <= 16; v++) {
      expectOk(await ownerB.put(`/api/v1/nodes/${p.id}`, { content: body(v) }));
      acks.push([v, clock()]);
      await sleep(Math.random() * 12);
    }
    await sleep(120);
    stop = true;
    await Promise.all([...loops, onA]);
    expect(obs.filter((o) => !/^v\d+$/.test(o.what)).slice(0, 3)).toEqual([]);
    const version = (o: Obs) => Number(o.what.slice(1));
    const stale: unknown[] = [];
    for (const o of obs) {
      const acked = Math.max(1, ...acks.filter(([, at]) => at < o.start).map(([v]) => v));
      if (version(o) < acked) stale.push({ ...o, acked, msAfterAck: +(o.start - acks.find(([v]) => v === acked)![1]).toFixed(2) });
    }
    // Monotonic across requests: a read that began after another ended answers no older version.
    const byEnd = [...obs].sort((x, y) => x.end - y.end);
    const byStart = [...obs].sort((x, y) => x.start - y.start);
    const backwards: unknown[] = [];
    let i = 0;
    let seen = 0;
    let seenBy: Obs | undefined;
    for (const o of byStart) {
      while (i < byEnd.length && byEnd[i]!.end < o.start) {
        if (version(byEnd[i]!) > seen) {
          seen = version(byEnd[i]!);
          seenBy = byEnd[i];
        }
        i++;
      }
      if (version(o) < seen) backwards.push({ read: o, earlier: seenBy });
    }
    expect(aWrites).toBeGreaterThan(2);
    expect(obs.length).toBeGreaterThan(100);
    expect(stale.slice(0, 5)).toEqual([]);
    expect(backwards.slice(0, 5)).toEqual([]);
  }, 60_000);

  it('a key made dead on node B (suspended agent, lockdown) is refused by every read on node A that starts after the acknowledgement', async () => {
    const p = await create(owner, `dead/${uniq('p')}.md`, body(1));
    const page = { id: p.id, path: p.path };
    // Suspended: its creator is removed from the workspace on B.
    const ed = await joinAs(owner, slug, 'editor');
    const made = await createAgentWithKey(ed.client, [
      { action: 'read', ceiling: 'internal' },
      { action: 'search', ceiling: 'internal' },
    ]);
    const kinds: Kind[] = ['id', 'id', 'path', 'mcp-get', 'id-section'];
    for (const r of readersFor(made.key, page, kinds, 'S')) expect(await observe(r.base, r.key, r.kind, r.page)).toBe('v1');
    const suspended = await race(
      readersFor(made.key, page, kinds, 'S'),
      async () => expectOk(await ownerB.delete(`/api/v1/workspaces/${slug}/members/${ed.id}`)),
      () => 'dead',
    );
    expect(suspended.bad).toEqual([]);

    // A demotion on B caps the agent at once: an editor's agent whose creator becomes a viewer
    // keeps read but falls to the viewer's ceiling (internal): a confidential page is gone for it.
    const ed2 = await joinAs(owner, slug, 'editor', 'Ed2');
    const capped = await createAgentWithKey(ed2.client, [{ action: 'read', ceiling: 'confidential' }], { ceiling: 'confidential' });
    const conf = await create(owner, `dead/${uniq('c')}.md`, body(7, 'confidential'));
    const confPage = { id: conf.id, path: conf.path };
    for (const r of readersFor(capped.key, confPage, ['id', 'path'], 'C')) expect(await observe(r.base, r.key, r.kind, r.page)).toBe('v7');
    const demoted = await race(
      readersFor(capped.key, confPage, ['id', 'id', 'path', 'mcp-get'], 'C'),
      async () => expectOk(await ownerB.patch(`/api/v1/workspaces/${slug}/members/${ed2.id}`, { role: 'viewer' })),
      () => 'gone',
    );
    expect(demoted.bad).toEqual([]);

    // Lockdown on B: every key of that workspace dead on A from the acknowledgement on.
    const lo = await signupHuman(a.url, 'Locker');
    expectOk(await lo.client.post('/api/auth/stepup', { password: PASSWORD }));
    const lp = await create(lo.client, `lock/${uniq('p')}.md`, body(1));
    const victim = await createReaderAgent(lo.client, 'internal');
    const lockPage = { id: lp.id, path: lp.path };
    for (const r of readersFor(victim.key, lockPage, ['id', 'path'], 'L')) expect(await observe(r.base, r.key, r.kind, r.page)).toBe('v1');
    const loB = onNode(b.url, lo.client);
    const locked = await race(
      readersFor(victim.key, lockPage, ['id', 'id', 'path', 'mcp-get', 'mcp-fetch'], 'L'),
      async () => expectOk(await loB.post(`/api/v1/workspaces/${lo.workspace.slug}/lockdown`, {})),
      () => 'dead',
    );
    expect(locked.bad).toEqual([]);
  }, 60_000);

  it('an elevation granted on node B opens a secret page on node A at once; when it runs out, or a key expires, with nothing committed, every read path refuses', async () => {
    const sec = await create(owner, `time/${uniq('s')}.md`, body(9, 'secret'));
    const page = { id: sec.id, path: sec.path };
    const agent = await createAgentWithKey(
      owner,
      [
        { action: 'read', ceiling: 'confidential' },
        { action: 'search', ceiling: 'confidential' },
      ],
      { key: { expires_in_days: 1 } },
    );
    const kinds: Kind[] = ['id', 'path', 'id-section', 'path-section', 'md', 'mcp-get', 'mcp-fetch', 'mcp-get-section'];
    for (const r of readersFor(agent.key, page, kinds, 'E')) expect(await observe(r.base, r.key, r.kind, r.page), r.name).toBe('gone');
    const opened = await race(
      readersFor(agent.key, page, ['id', 'path', 'mcp-get', 'id-section'], 'E'),
      async () => expectOk(await ownerB.post('/api/v1/elevations', { agent_id: agent.id, minutes: 1, reason: 'attack o' }), 201),
      () => 'v9',
    );
    expect(opened.bad).toEqual([]);
    // Kept on A now (read twice each way).
    for (let i = 0; i < 2; i++)
      for (const r of readersFor(agent.key, page, kinds, 'E')) expect(await observe(r.base, r.key, r.kind, r.page), r.name).toBe('v9');
    // 59 s later the key's last use is written (it was used at the start); the elevation still holds.
    const t0 = Date.now();
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(t0 + 59_000);
    for (const r of readersFor(agent.key, page, kinds, 'E')) expect(await observe(r.base, r.key, r.kind, r.page), `59 s: ${r.name}`).toBe('v9');
    await a.ctx.touches.flush();
    // Past the elevation's minute: nothing is written now (the key was used 2 s ago), yet no read opens the page.
    vi.setSystemTime(t0 + 61_500);
    for (const r of readersFor(agent.key, page, kinds, 'E')) expect(await observe(r.base, r.key, r.kind, r.page), `61 s: ${r.name}`).toBe('gone');
    // A day and more later, the key itself is dead everywhere.
    vi.setSystemTime(t0 + 86_400_000 + 120_000);
    for (const r of readersFor(agent.key, page, kinds, 'E')) expect(await observe(r.base, r.key, r.kind, r.page), `expired: ${r.name}`).toBe('dead');
    vi.setSystemTime(t0 + 86_400_000 + 121_000);
    for (const r of readersFor(agent.key, page, ['id', 'mcp-get'], 'E'))
      expect(await observe(r.base, r.key, r.kind, r.page), `expired again: ${r.name}`).toBe('dead');
  }, 60_000);

  it('`?at=` reads and deleted pages agree on both nodes right after each write', async () => {
    const agent = await createReaderAgent(owner, 'internal');
    const p = await create(owner, `at/${uniq('p')}.md`, body(1));
    const onA = agent.client;
    for (let i = 0; i < 2; i++) expect((await onA.get(`/api/v1/nodes/${p.id}`)).body.content).toContain('ver-1-');
    const e2 = await ownerB.put(`/api/v1/nodes/${p.id}`, { content: body(2) });
    expectOk(e2);
    // The new commit is readable at once on A, and the old one still answers the old text.
    const at2 = await onA.get(`/api/v1/nodes/${p.id}?at=${e2.body.commit_sha}`);
    expectOk(at2);
    expect(at2.body.content).toContain('ver-2-');
    const at1 = await onA.get(`/api/v1/nodes/${p.id}?at=${p.commit_sha}&section=Part`);
    expectOk(at1);
    expect(at1.body.section).toContain('part-1-');
    expect((await onA.get(`/api/v1/nodes/${p.id}`)).body.content).toContain('ver-2-');
    // Raised above the agent on B: `?at=` of any commit is refused (a version is judged by today's level too).
    const e3 = await ownerB.put(`/api/v1/nodes/${p.id}`, { content: body(3, 'confidential') });
    expectOk(e3);
    expect((await onA.get(`/api/v1/nodes/${p.id}?at=${e3.body.commit_sha}`)).status).toBe(404);
    expect((await onA.get(`/api/v1/nodes/${p.id}`)).status).toBe(404);
    expect((await onA.get(`/api/v1/nodes/${p.id}?at=${e2.body.commit_sha}`)).status).toBe(404);
    // Deleted on B: the live page is gone from A at once, by id, by path and over MCP; the
    // history before the deletion is still there; and a read of it answers what a missing id does.
    const q = await create(owner, `at/${uniq('q')}.md`, body(4));
    for (let i = 0; i < 2; i++) expect((await onA.get(`/api/v1/nodes/${encodeURIComponent(q.path)}`)).status).toBe(200);
    expectOk(await ownerB.delete(`/api/v1/nodes/${q.id}`));
    const gone = await onA.get(`/api/v1/nodes/${q.id}`);
    expect(gone.status).toBe(404);
    expect((await onA.get(`/api/v1/nodes/${encodeURIComponent(q.path)}`)).status).toBe(404);
    expect((await mcpCall(a.url, agent.key, 'context_get', { id: q.id })).text).toMatch(/not_found/);
    const missing = `pg_${'0'.repeat(26)}`;
    const none = await onA.get(`/api/v1/nodes/${missing}`);
    expect(none.status).toBe(404);
    expect(gone.text.replace(q.id, 'X')).toBe(none.text.replace(missing, 'X'));
    const hist = await onA.get(`/api/v1/nodes/${q.id}?at=${q.commit_sha}`);
    expectOk(hist);
    expect(hist.body.content).toContain('ver-4-');
  });

  it('a page of another workspace read by id with a valid, a revoked or a made-up key answers exactly as a missing id does', async () => {
    const stranger = await signupHuman(a.url, 'Stranger');
    expectOk(await stranger.client.post('/api/auth/stepup', { password: PASSWORD }));
    const theirs = await create(stranger.client, `theirs/${uniq('p')}.md`, '# Theirs\n\nforeign-secret words\n\n## Part\n\nforeign part\n');
    const deleted = await create(stranger.client, `theirs/${uniq('d')}.md`, '# Gone\n\nforeign-deleted words\n');
    expectOk(await stranger.client.delete(`/api/v1/nodes/${deleted.id}`));
    const agent = await createReaderAgent(owner, 'secret');
    const revoked = await createReaderAgent(owner, 'secret');
    expectOk(await owner.delete(`/api/v1/principals/${revoked.id}/tokens/${revoked.keyId}`));
    const missing = `pg_${'9'.repeat(26)}`;
    for (const node of [a.url, b.url]) {
      for (const [who, key] of [
        ['valid', agent.key],
        ['revoked', revoked.key],
        ['made up', `ak_${crypto.randomBytes(24).toString('hex')}`],
      ] as const) {
        for (const q of ['', '?section=Part', '?format=md', `?at=${theirs.commit_sha}`]) {
          const ask = (id: string) => new Client(node, key).get(`/api/v1/nodes/${id}${q}`);
          const base = await ask(missing);
          for (const id of [theirs.id, deleted.id]) {
            // Twice: the second may be served from what was kept.
            for (let i = 0; i < 2; i++) {
              const r = await ask(id);
              expect(r.status, `${who} ${q} ${id}`).toBe(base.status);
              expect(r.text.replaceAll(id, 'X'), `${who} ${q}`).toBe(base.text.replaceAll(missing, 'X'));
              expect(r.text).not.toMatch(/foreign/);
            }
          }
        }
      }
    }
    // The same over MCP.
    const m1 = await mcpCall(a.url, agent.key, 'fetch', { id: theirs.id });
    const m0 = await mcpCall(a.url, agent.key, 'fetch', { id: missing });
    expect(m1.text.replaceAll(theirs.id, 'X')).toBe(m0.text.replaceAll(missing, 'X'));
  });
});

/** Median of a list of numbers. */
function median(xs: number[]): number {
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.floor(s.length / 2)]!;
}

describe.runIf(HAS_PG)('attack o: snapshots, long transactions and the page read before the key (postgres)', () => {
  let a: TestServer;
  let b: RunningServer;
  let owner: Client;
  let ownerB: Client;
  let raw: pg.Client;
  let raw2: pg.Client;
  let n = 0;
  const uniq = (p: string) => `${p}${++n}${Date.now().toString(36)}`;

  beforeAll(async () => {
    a = await startTestServer('postgres');
    b = await startServerOn(a.ctx.config);
    const o = await signupHuman(a.url, 'PgOwner');
    owner = o.client;
    expectOk(await owner.post('/api/auth/stepup', { password: PASSWORD }));
    ownerB = onNode(b.url, owner);
    raw = new pg.Client({ connectionString: a.ctx.config.databaseUrl });
    raw2 = new pg.Client({ connectionString: a.ctx.config.databaseUrl });
    await raw.connect();
    await raw2.connect();
  }, 60_000);
  afterAll(async () => {
    await raw?.end().catch(() => undefined);
    await raw2?.end().catch(() => undefined);
    await b?.close();
    await a?.stop();
  });

  it('a transaction older than the kept snapshot commits (only the in-progress list shrinks): the next read sees it, under parallel readers', async () => {
    const p = await owner.post('/api/v1/nodes', { path: `long/${uniq('p')}.md`, content: body(1) });
    expectOk(p, 201);
    const page = { id: p.body.id as string, path: p.body.path as string };
    const agent = await createReaderAgent(owner, 'internal');
    const readers: Reader[] = (['id', 'id', 'path', 'mcp-get', 'id-section', 'path-section'] as Kind[]).map((kind, i) => ({
      name: `${kind}:${i}`,
      base: a.url,
      key: agent.key,
      kind,
      page,
    }));
    // An old transaction takes its xid first, then B commits an edit while it is open: every
    // snapshot now lists the old xid as in progress.
    await raw.query('begin');
    await raw.query('select pg_current_xact_id()');
    // A second long one, older still in the list, that will end without writing anything visible.
    await raw2.query('begin');
    await raw2.query('select pg_current_xact_id()');
    const e2 = await race(
      readers,
      async () => expectOk(await ownerB.put(`/api/v1/nodes/${page.id}`, { content: body(2) })),
      () => 'v2',
    );
    expect(e2.bad).toEqual([]);
    // The old transaction writes the page and commits: the snapshot's xmax need not move, only
    // its in-progress list shrinks. Readers on A must see it from the commit on.
    await raw.query(`update pages set content = replace(content, 'ver-2-', 'ver-3-') where id = $1`, [page.id]);
    const committed = await race(
      readers.filter((r) => !r.kind.endsWith('section')),
      async () => {
        await raw.query('commit');
      },
      () => 'v3',
    );
    expect(committed.bad).toEqual([]);
    // The other old one rolls back: nothing changes, and reads keep answering v3.
    const rolled = await race(
      readers.filter((r) => !r.kind.endsWith('section')),
      async () => {
        await raw2.query('rollback');
      },
      () => 'v3',
    );
    expect(rolled.bad).toEqual([]);
  }, 30_000);

  it('a long transaction that revokes a key, narrows a grant or raises a level and commits late: refused from its commit on', async () => {
    const p = await owner.post('/api/v1/nodes', { path: `long/${uniq('q')}.md`, content: body(1) });
    expectOk(p, 201);
    const page = { id: p.body.id as string, path: p.body.path as string };
    const agent = await createReaderAgent(owner, 'confidential');
    const readers = (kinds: Kind[]): Reader[] => kinds.map((kind, i) => ({ name: `${kind}:${i}`, base: a.url, key: agent.key, kind, page }));
    // Raise the page's level in an open transaction while B keeps committing other writes.
    await raw.query('begin');
    await raw.query(`update pages set sensitivity = 'secret' where id = $1`, [page.id]);
    for (let i = 0; i < 3; i++) expectOk(await ownerB.post('/api/v1/nodes', { path: `long/${uniq('x')}.md`, content: '# X\n\nother\n' }), 201);
    for (const r of readers(['id', 'path'])) expect(await observe(r.base, r.key, r.kind, r.page)).toBe('v1');
    const raised = await race(
      readers(['id', 'id', 'path', 'mcp-get']),
      async () => {
        await raw.query('commit');
      },
      () => 'gone',
    );
    expect(raised.bad).toEqual([]);
    await raw.query(`update pages set sensitivity = 'internal' where id = $1`, [page.id]);
    // The key revoked by a late-committing transaction.
    await raw.query('begin');
    await raw.query(`update agent_keys set revoked_at = $1 where id = $2`, [new Date().toISOString(), agent.keyId]);
    for (let i = 0; i < 2; i++) expectOk(await ownerB.post('/api/v1/nodes', { path: `long/${uniq('y')}.md`, content: '# Y\n\nother\n' }), 201);
    for (const r of readers(['id', 'path'])) expect(await observe(r.base, r.key, r.kind, r.page)).toBe('v1');
    const revoked = await race(
      readers(['id', 'id', 'path', 'mcp-get', 'mcp-fetch']),
      async () => {
        await raw.query('commit');
      },
      () => 'dead',
    );
    expect(revoked.bad).toEqual([]);
  }, 30_000);

  /** Medians (ms) of GET /nodes/:id with `key` for a large page of another workspace and for two missing ids, interleaved. */
  const timeForeignRead = async (key: string) => {
    const stranger = await signupHuman(a.url, 'Big');
    // About 1 MB that does not compress: what a foreign id costs if its row is read.
    const big = crypto
      .randomBytes(700 * 1024)
      .toString('base64')
      .replace(/(.{80})/g, '$1\n');
    const r = await stranger.client.post('/api/v1/nodes', { path: `big/${uniq('b')}.md`, content: `# Big\n\n${big}\n` });
    expectOk(r, 201);
    const bigId = r.body.id as string;
    const c = new Client(a.url, key);
    const time = async (id: string) => {
      const t = clock();
      const res = await c.get(`/api/v1/nodes/${id}`);
      const ms = clock() - t;
      expect([401, 404]).toContain(res.status);
      return ms;
    };
    const m1 = `pg_${crypto.randomBytes(13).toString('hex').slice(0, 26)}`;
    const m2 = `pg_${crypto.randomBytes(13).toString('hex').slice(0, 26)}`;
    const foreign: number[] = [];
    const missing: number[] = [];
    const missing2: number[] = [];
    for (let i = 0; i < 5; i++) await time(bigId);
    for (let i = 0; i < 30; i++) {
      foreign.push(await time(bigId));
      missing.push(await time(m1));
      missing2.push(await time(m2));
    }
    const t = { foreign: median(foreign), missing: median(missing), missing2: median(missing2) };
    // Reading the foreign row cost ~10 ms against ~1.5 for a missing id. The bound is generous
    // (a loaded CI machine measured 2.3 against 0.8 with the fix in place): a guard against the
    // row being read again, not a measurement of speed.
    return { ...t, noise: Math.max(2, 3 * Math.abs(t.missing - t.missing2), t.missing) };
  };

  it('GET by id of a large page of another workspace with a valid key takes no longer than a missing id', async () => {
    const agent = await createReaderAgent(owner, 'internal');
    const t = await timeForeignRead(agent.key);
    expect(t.foreign - t.missing, `medians (ms): ${JSON.stringify(t)}`).toBeLessThan(t.noise);
  }, 30_000);

  it('GET by id of a large page of any workspace with a made-up key (no account at all) takes no longer than a missing id', async () => {
    const t = await timeForeignRead(`ak_${crypto.randomBytes(24).toString('hex')}`);
    expect(t.foreign - t.missing, `medians (ms): ${JSON.stringify(t)}`).toBeLessThan(t.noise);
  }, 30_000);

  // The timing above is a coarse guard (CI once measured 2.2 ms against a bound of 2 with a join
  // that still read the foreign row whole). This one counts what the statement reads: a page of
  // another workspace costs the blocks a missing id costs, whatever plan the planner picks.
  it('the statement that reads the page ahead reads no block of a page of another workspace, under any join plan', async () => {
    const agent = await createReaderAgent(owner, 'internal');
    const stranger = await signupHuman(a.url, 'Toast');
    const big = crypto
      .randomBytes(700 * 1024)
      .toString('base64')
      .replace(/(.{80})/g, '$1\n');
    const r = await stranger.client.post('/api/v1/nodes', { path: `big/${uniq('t')}.md`, content: `# Big\n\n${big}\n` });
    expectOk(r, 201);
    const own = await owner.post('/api/v1/nodes', { path: `big/${uniq('o')}.md`, content: `# Own\n\n${big}\n` });
    expectOk(own, 201);
    const blocks = async (id: string, key: string, settings: string[]) => {
      const c = stateWithPageStatement(id, hashSecret(key), new Date().toISOString()).compile(a.ctx.store.db);
      await raw.query('begin');
      try {
        for (const s of settings) await raw.query(`set local ${s}`);
        const e = await raw.query<{ 'QUERY PLAN': [{ Plan: Record<string, number> }] }>(
          `explain (analyze, buffers, format json) ${c.sql}`,
          c.parameters as unknown[],
        );
        const plan = e.rows[0]!['QUERY PLAN'][0].Plan;
        return plan['Shared Hit Blocks']! + plan['Shared Read Blocks']!;
      } finally {
        await raw.query('rollback');
      }
    };
    const missing = `pg_${'q'.repeat(26)}`;
    const madeUp = `ak_${crypto.randomBytes(24).toString('hex')}`;
    for (const settings of [
      [],
      ['enable_nestloop = off'],
      ['enable_hashjoin = off', 'enable_mergejoin = off'],
      ['enable_seqscan = off', 'enable_bitmapscan = off'],
    ]) {
      for (const key of [agent.key, madeUp]) {
        const foreign = await blocks(r.body.id as string, key, settings);
        const none = await blocks(missing, key, settings);
        expect(foreign, `${settings.join(', ')}: ${foreign} blocks against ${none}`).toBeLessThanOrEqual(none + 4);
      }
      // The same statement does read the key's own page whole: the count above would see it.
      expect(await blocks(own.body.id as string, agent.key, settings)).toBeGreaterThan(50);
    }
  }, 30_000);
});

describe.each(testEngines())('attack o: touches flushed in one statement per 5,000 pages (%s)', (engine) => {
  let a: TestServer;
  let b: RunningServer;
  let owner: Client;
  let ownerB: Client;
  let n = 0;
  const uniq = (p: string) => `${p}${++n}${Date.now().toString(36)}`;

  beforeAll(async () => {
    a = await startTestServer(engine);
    b = await startServerOn(a.ctx.config);
    const o = await signupHuman(a.url, 'Toucher');
    owner = o.client;
    expectOk(await owner.post('/api/auth/stepup', { password: PASSWORD }));
    ownerB = onNode(b.url, owner);
  }, 60_000);
  afterAll(async () => {
    await b?.close();
    await a?.stop();
  });

  const rows = async (ids: string[]) =>
    new Map(
      (await a.ctx.store.db.selectFrom('pages').select(['id', 'last_touched_at', 'deleted_at']).where('id', 'in', ids).execute()).map(
        (r) => [r.id, r] as const,
      ),
    );

  it('reads on node A while node B deletes some of the pages: every flush succeeds, each page holds its last read, deleted pages stay deleted', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 24; i++) {
      const r = await owner.post('/api/v1/nodes', { path: `touch/${uniq('t')}.md`, content: `# T${i}\n\ntouch ${i}\n` });
      expectOk(r, 201);
      ids.push(r.body.id as string);
    }
    const agent = await createReaderAgent(owner, 'internal');
    const lastRead = new Map<string, string>();
    const doomed = new Set(ids.slice(16));
    let deleting = true;
    const deleter = (async () => {
      for (const id of doomed) {
        expectOk(await ownerB.delete(`/api/v1/nodes/${id}`));
        await sleep(3);
      }
      deleting = false;
    })();
    // Parallel readers on A over every page, round after round, while B deletes; flushes run in between.
    const readers = [0, 1, 2, 3].map(async (w) => {
      for (let round = 0; deleting || round < 3; round++) {
        for (const id of ids.filter((_, i) => i % 4 === w)) {
          const r = await agent.client.get(`/api/v1/nodes/${id}`);
          if (r.status === 200) {
            const at = r.body.last_touched_at as string;
            if (!lastRead.has(id) || lastRead.get(id)! < at) lastRead.set(id, at);
          } else expect(r.status).toBe(404);
        }
        if (round % 2 === 1) await a.ctx.touches.flush();
      }
    });
    await Promise.all([deleter, ...readers]);
    await a.ctx.touches.flush();
    await b.ctx.touches.flush();
    // Nothing left waiting: every flush was written (a failed one keeps its touches for the next round).
    for (const id of ids) expect(a.ctx.touches.peek(id), id).toBeUndefined();
    const db = await rows(ids);
    for (const id of ids) {
      const row = db.get(id)!;
      if (doomed.has(id)) {
        expect(row.deleted_at, id).not.toBeNull();
        expect((await agent.client.get(`/api/v1/nodes/${id}`)).status).toBe(404);
      } else {
        expect(row.deleted_at).toBeNull();
        expect(row.last_touched_at, id).toBe(lastRead.get(id));
      }
    }
  }, 30_000);

  it('one flush of more than 10,000 touches (three statements) writes every real page among them, whatever the other ids hold', async () => {
    const real: string[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await owner.post('/api/v1/nodes', { path: `bulk/${uniq('r')}.md`, content: `# R${i}\n\nreal ${i}\n` });
      expectOk(r, 201);
      real.push(r.body.id as string);
    }
    const bystander = await owner.post('/api/v1/nodes', { path: `bulk/${uniq('by')}.md`, content: '# By\n\nnot read\n' });
    expectOk(bystander, 201);
    const hostile = [
      "'",
      '"',
      '\\',
      '{a,b}',
      'NULL',
      'null',
      ',',
      ' ',
      '',
      'é',
      '😀',
      "'; drop table pages; --",
      '["x","y"]',
      '$[1]',
      '\u202e',
      bystander.body.id + ' ',
    ];
    const list: string[] = [];
    for (let i = 0; list.length < 12_003; i++) list.push(i < hostile.length ? hostile[i]! : `pg_${i.toString(36).padStart(26, '0')}`);
    // A real page first, at the last place of the first statement, the first of the second, and the very last.
    list.splice(0, 0, real[0]!);
    list.splice(4_999, 0, real[1]!);
    list.splice(5_000, 0, real[2]!);
    list.push(real[3]!);
    const base = Date.parse('2031-02-03T04:05:06.000Z');
    const at = (i: number) => new Date(base + i).toISOString();
    // Flush what reads left first, then only these touches are in the buffer.
    await a.ctx.touches.flush();
    list.forEach((id, i) => a.ctx.touches.touch(id, at(i)));
    await a.ctx.touches.flush();
    for (const id of real) expect(a.ctx.touches.peek(id)).toBeUndefined();
    const db = await rows([...real, bystander.body.id]);
    for (const id of real) expect(db.get(id)!.last_touched_at, id).toBe(at(list.indexOf(id)));
    expect(db.get(bystander.body.id)!.last_touched_at).toBeNull();
    // Node B answers the pages as they were.
    for (const id of real) expect((await ownerB.get(`/api/v1/nodes/${id}`)).status).toBe(200);
  }, 30_000);
});

describe.each(testEngines())('attack o: rate-limit leases on two nodes (%s)', (engine) => {
  let base: TestServer;
  let human: Client;

  beforeAll(async () => {
    base = await startTestServer(engine);
    human = (await signupHuman(base.url, 'Leaser')).client;
  }, 60_000);
  afterAll(async () => base?.stop());

  const limited = (burst: number) =>
    Promise.all(
      [0, 1].map(() =>
        startServerOn(base.ctx.config, {
          RATE_LIMITS: 'on',
          RATE_LIMIT_API_PER_MIN: '1',
          RATE_LIMIT_API_BURST: String(burst),
          RATE_LIMIT_LOGIN_PER_MIN: '1000',
          RATE_LIMIT_BUNDLE_PER_MIN: '1000',
        }),
      ),
    );

  /** Parallel callers on both nodes until both have been refused `enough` times in a row; counts what each node allowed. */
  async function hammer(key: string, nodes: RunningServer[], perNode: number, cap: number) {
    const allowed = [0, 0];
    let refusedInRow = 0;
    let total = 0;
    const loops = nodes.flatMap((node, ni) =>
      Array.from({ length: perNode }, async (_, li) => {
        const c = li % 3 === 2 ? null : new Client(node.url, key);
        while (refusedInRow < 60 && total < cap) {
          total++;
          const status = c ? (await c.get('/api/v1/me')).status : (await mcpCall(node.url, key, 'context_whoami', {})).status;
          if (status === 200) {
            allowed[ni]!++;
            refusedInRow = 0;
          } else {
            expect(status).toBe(429);
            refusedInRow++;
          }
        }
      }),
    );
    await Promise.all(loops);
    return { allowed, sum: allowed[0]! + allowed[1]!, total };
  }

  it('a small bucket (40) spent in parallel on two nodes, REST and MCP: never more than 40', async () => {
    const nodes = await limited(40);
    try {
      const agent = await createReaderAgent(human, 'internal');
      const r = await hammer(agent.key, nodes, 6, 400);
      expect(r.sum, JSON.stringify(r)).toBeLessThanOrEqual(41);
      expect(r.sum, JSON.stringify(r)).toBeGreaterThanOrEqual(36);
    } finally {
      await Promise.all(nodes.map((x) => x.close()));
    }
  }, 30_000);

  it('a large bucket (3,000) spent in parallel on two nodes: never more than 3,000, and nearly all of it', async () => {
    const nodes = await limited(3_000);
    try {
      const agent = await createReaderAgent(human, 'internal');
      const r = await hammer(agent.key, nodes, 6, 4_000);
      expect(r.sum, JSON.stringify(r)).toBeLessThanOrEqual(3_001);
      expect(r.sum, JSON.stringify(r)).toBeGreaterThanOrEqual(2_700);
    } finally {
      await Promise.all(nodes.map((x) => x.close()));
    }
  }, 60_000);

  it.runIf(engine === 'postgres')(
    'a lease takes at most 1/16 of what the bucket holds when it is taken, even when the other node spent most of it within the second',
    async () => {
      const nodes = await limited(20_000);
      const raw = new pg.Client({ connectionString: base.ctx.config.databaseUrl });
      await raw.connect();
      try {
        const agent = await createReaderAgent(human, 'internal');
        const onA = new Client(nodes[0]!.url, agent.key);
        const onB = new Client(nodes[1]!.url, agent.key);
        expect((await onA.get('/api/v1/me')).status).toBe(200);
        // Within the second, node B's callers spend all but 1,100 of the bucket (written as B's
        // statements would leave it: spending 18,899 requests here would take minutes).
        const upd = await raw.query(`update rate_limits set tokens = 1100 where bucket like $1`, [`api:%${agent.id}`]);
        expect(upd.rowCount).toBe(1);
        // One request on A now.
        expect((await onA.get('/api/v1/me')).status).toBe(200);
        // B's callers go on: what is left of the 1,099 should be theirs but for a lease of at most 1/16 (68).
        let okB = 0;
        for (let round = 0; round < 150; round++) {
          const got = await Promise.all(Array.from({ length: 8 }, () => onB.get('/api/v1/me')));
          okB += got.filter((g) => g.status === 200).length;
          if (got.every((g) => g.status === 429)) break;
        }
        const left = await raw.query<{ tokens: number }>(`select tokens from rate_limits where bucket like $1`, [`api:%${agent.id}`]);
        expect(okB, `node B allowed ${okB} of the 1,099 left (bucket now ${left.rows[0]?.tokens})`).toBeGreaterThanOrEqual(1_099 - 68 - 2);
      } finally {
        await raw.end();
        await Promise.all(nodes.map((x) => x.close()));
      }
    },
    60_000,
  );
});

/** Sections of one page, each under its own heading. */
const manySections = (title: string, count: number, words: (i: number) => string, level = 'internal') =>
  `---\nsensitivity: ${level}\n---\n# ${title}\n\n` + Array.from({ length: count }, (_, i) => `## part ${i}\n\n${words(i)}\n`).join('\n');
/** Filler words no query asks for: long sections. */
const filler = (count: number, seed = 'fill') => Array.from({ length: count }, (_, i) => `${seed}${i % 97}`).join(' ');

/** 32 of PostgreSQL's English stop words (none of them indexed before migration 026). */
const STOP32 = [
  'the',
  'of',
  'and',
  'to',
  'in',
  'is',
  'it',
  'that',
  'was',
  'for',
  'on',
  'are',
  'with',
  'as',
  'at',
  'be',
  'by',
  'this',
  'from',
  'or',
  'an',
  'have',
  'not',
  'but',
  'what',
  'all',
  'were',
  'when',
  'there',
  'between',
  'which',
  'after',
];
const STOP_TEXT = STOP32.join(' ');

describe.each(testEngines())('attack o: stop-word queries (%s)', (engine) => {
  const pgOnly = engine === 'postgres';
  let s: TestServer;
  let owner: Client;
  let internal: { key: string; client: Client };
  let conf: { key: string; client: Client };
  let narrow: { key: string; client: Client };
  let other: Client;
  let commit0 = '';

  const create = async (c: Client, path: string, content: string) => {
    const r = await c.post('/api/v1/nodes', { path, content });
    expect(r.status, r.text.slice(0, 300)).toBe(201);
    return r.body as { id: string; commit_sha: string };
  };
  const QUERIES = ['the', 'the cat', 'between', 'between with from', 'what is it that', 'the of and to in', STOP_TEXT, 'alpha the'];
  const search = async (c: Client, q: string) => {
    const r = await c.get(`/api/v1/search?${new URLSearchParams({ q, mode: 'fts', limit: '50' })}`);
    expect(r.status, `${q}: ${r.text.slice(0, 300)}`).toBe(200);
    return (r.body as { results: { path: string; section: string; score: number }[] }).results.map((h) => `${h.path} ${h.section} ${h.score}`);
  };
  const snap = async (c: Client) => {
    const out: Record<string, string[]> = {};
    for (const q of QUERIES) out[q] = await search(c, q);
    return out;
  };

  beforeAll(async () => {
    s = await startTestServer(engine);
    const signed = await signupHuman(s.url, 'Stop');
    owner = signed.client;
    expectOk(await owner.post('/api/auth/stepup', { password: PASSWORD }));
    internal = await createReaderAgent(owner, 'internal');
    conf = await createReaderAgent(owner, 'confidential');
    narrow = await createReaderAgent(owner, 'internal', 'ops');
    other = (await signupHuman(s.url, 'OtherStop')).client;
    // More visible sections holding `the` than PostgreSQL scores at once (its newest 1,000).
    await create(
      owner,
      'ops/common.md',
      manySections('Common', pgOnly ? 1100 : 40, (i) => `the alpha ${i}`),
    );
    await create(owner, 'ops/s1.md', '# Alpha\n\nThe cat is on the mat and the dog is in the house.\n');
    await create(
      owner,
      'ops/s2.md',
      `# Beta\n\nBetween the lines, with all of it, from here to there. ${filler(60)}\n\n## Later\n\nthe of and ${filler(20, 'late')}\n`,
    );
    await create(owner, 'dev/s3.md', `# Gamma\n\nwhat is it that was there between them ${filler(30)}\n`);
    await create(owner, 'ops/s4.md', '---\nsensitivity: public\n---\n# Delta\n\nit is what it is, and that was that.\n');
    await create(owner, 'ops/host.md', '# Host\n\nHost carries hidden blocks.\n');
    await create(owner, 'ops/mid.md', `# Mid\n\nbetween the mid words ${filler(14, 'mid')}.\n\nafter the block, more words.\n`);
    // `between`: a short section holding it once, longer ones twice; where the short one ranks
    // depends on the average length the caller is measured against.
    await create(owner, 'ops/pa.md', '# Pa\n\nbetween once.\n');
    for (const k of [6, 9, 12, 16, 20, 26, 34, 60]) await create(owner, `ops/pb${k}.md`, `# Pb\n\nbetween between ${filler(k, 'pv')}\n`);
    commit0 = (await create(owner, 'ops/last.md', '# Last\n\nnothing here.\n')).commit_sha;
  }, 120_000);
  afterAll(async () => s?.stop());

  it('text above the ceiling, in `::: secret` blocks, in another workspace or outside a scoped agent’s grants moves no stop-word score', async () => {
    // SQLite's bm25 still weighs a scoped agent's table by the workspace's other Spaces at the
    // levels it reads (docs/decisions.md, issue 11: "still open"): the scoped agent on PostgreSQL only.
    const callers: [string, Client][] = [
      ['internal', internal.client],
      ['confidential', conf.client],
      ...(pgOnly ? ([['narrow', narrow.client]] as [string, Client][]) : []),
    ];
    const before: Record<string, Record<string, string[]>> = {};
    for (const [name, c] of callers) before[name] = await snap(c);
    expect(before.internal!.the!.length).toBeGreaterThanOrEqual(2);
    if (pgOnly) expect(before.narrow!.between!.join()).not.toMatch(/dev\//);
    const steady = async (what: string, who = callers) => {
      for (const [name, c] of who) expect(await snap(c), `${name} after ${what}`).toEqual(before[name]);
    };
    const belowConf = callers.filter(([name]) => name !== 'confidential');
    const dense = (i: number, size: number) => `${STOP_TEXT} the the of between ${filler(size, 'h')} ${STOP_TEXT}`.repeat(i === 0 ? 1 : 2);

    // Confidential: above internal's ceiling, long and full of stop words.
    const confPage = await create(
      owner,
      'ops/conf-long.md',
      manySections('Conf', 30, (i) => dense(i, i === 0 ? 20_000 : 200), 'confidential'),
    );
    await steady('a long confidential page', belowConf);
    before.confidential = await snap(conf.client);
    // Secret: above everyone's.
    const secPage = await create(
      owner,
      'ops/sec-long.md',
      manySections('Sec', 30, (i) => dense(i, i === 0 ? 20_000 : 300), 'secret'),
    );
    await steady('a long secret page');
    // A `::: secret` block full of stop words in a visible page that matches none of them.
    expectOk(
      await owner.put(`/api/v1/nodes/${(await owner.get(`/api/v1/nodes/${encodeURIComponent('ops/host.md')}`)).body.id}`, {
        content: `# Host\n\nHost carries hidden blocks.\n\n::: secret\n## Hidden between the\n\n${dense(0, 20_000)}\n:::\n`,
      }),
    );
    await steady('a secret block in a visible page');
    // A `::: confidential` block in the middle of a matching section (no heading of its own): the
    // block cuts the section where it stands, which the caller sees (`[redacted]`); what the block
    // holds must move nothing. A one-word block first, then 20,000 stop words in its place.
    const mid = (await owner.get(`/api/v1/nodes/${encodeURIComponent('ops/mid.md')}`)).body.id as string;
    const withBlock = (inner: string) =>
      `# Mid\n\nbetween the mid words ${filler(14, 'mid')}.\n\n::: confidential\n${inner}\n:::\n\nafter the block, more words.\n`;
    expectOk(await owner.put(`/api/v1/nodes/${mid}`, { content: withBlock('tiny') }));
    for (const [name, c] of callers) before[name] = await snap(c);
    expectOk(await owner.put(`/api/v1/nodes/${mid}`, { content: withBlock(dense(0, 20_000)) }));
    await steady('a confidential block inside a matching section', belowConf);
    before.confidential = await snap(conf.client);
    // Another workspace: the same words, many sections, public.
    await create(
      other,
      'ops/s1.md',
      manySections('Other', 40, (i) => dense(i, i === 0 ? 20_000 : 300), 'public'),
    );
    await steady('another workspace');
    // Hidden pages archived, restored, moved, deleted.
    expectOk(await owner.post(`/api/v1/nodes/${confPage.id}/archive`, { reason: 'stale' }));
    expectOk(await owner.post(`/api/v1/nodes/${confPage.id}/restore`, {}));
    expectOk(await owner.post(`/api/v1/nodes/${confPage.id}/move`, { to: 'dev/conf-moved.md' }));
    expectOk(await owner.delete(`/api/v1/nodes/${secPage.id}`));
    await steady('hidden pages archived, restored, moved, deleted', belowConf);
    before.confidential = await snap(conf.client);

    // Outside the scoped agent's grants (dev/), in internal's sight.
    const internalBefore = before.internal!;
    const outside = await create(
      owner,
      'dev/outside.md',
      manySections('Outside', 30, (i) => dense(i, i === 0 ? 20_000 : 500)),
    );
    if (pgOnly) expect(await snap(narrow.client), 'narrow after a write outside its grants').toEqual(before.narrow);
    // The control: internal sees it, and its answers change.
    expect(await snap(internal.client)).not.toEqual(internalBefore);
    expectOk(await owner.delete(`/api/v1/nodes/${outside.id}`));
    // (SQLite keeps a deleted section in its bm25 totals: the last test below.)
    if (pgOnly) expect(await snap(internal.client)).toEqual(internalBefore);
    const baseline = await snap(internal.client);

    // Positive control: a visible long section with no stop word moves the average length, and
    // reorders `between` (so the checks above could fail). (On SQLite the deleted page above
    // already moved it for good; the control there was the write outside.)
    if (!pgOnly) return;
    const control = await create(owner, 'dev/long-visible.md', `# Long\n\n${filler(40_000, 'visible')}\n`);
    expect((await snap(internal.client)).between).not.toEqual(baseline.between);
    expectOk(await owner.delete(`/api/v1/nodes/${control.id}`));
  }, 120_000);

  it('hostile stop-word queries never fail: only stop words, 32 and more of them, mixed scripts, folded forms; REST and MCP, every caller, every mode, `at`', async () => {
    const letters = 'abcdefghijklmnopqrstuvwxyzæøåßþð'.split('').join(' ');
    const HOSTILE = [
      'the',
      'a',
      'THE Of AnD',
      STOP_TEXT,
      `${STOP_TEXT} ${STOP_TEXT} into about over again then once here`,
      'the '.repeat(999),
      'thé ôf ànd tô ín',
      'ｔｈｅ ｏｆ',
      '𝐭𝐡𝐞 𝐨𝐟',
      'the日本語 и the мир and العربية the',
      'the\u200bof\u200dand',
      'the\u0301 o\u0308f',
      'İs ıt the',
      'ǅthe',
      "don't won't it's the",
      'the-of-and',
      '²the ½of',
      '"the" AND NOT of OR NEAR(and) the* ^of -and :in',
      ': * " ( ) -',
      `${'a'.repeat(70)} the`,
      'the😀of 👍🏽and',
      'ß straße the',
      'ที่ the และ 한국어 the',
      '\u202ethe of',
      letters,
      'the\u0000of',
    ];
    const agentCallers: [string, string][] = [
      ['internal', internal.key],
      ['narrow', narrow.key],
      ['confidential', conf.key],
    ];
    const failures: string[] = [];
    for (const q of HOSTILE) {
      for (const mode of ['fts', 'hybrid']) {
        for (const [who, c] of [['owner', owner] as const, ...agentCallers.map(([w, k]) => [w, new Client(s.url, k)] as const)]) {
          const r = await c.get(`/api/v1/search?${new URLSearchParams({ q, mode, limit: '20' })}`);
          if (r.status !== 200) failures.push(`${who} ${mode} ${JSON.stringify(q.slice(0, 40))}: ${r.status} ${r.text.slice(0, 200)}`);
          else if (who !== 'owner' && who !== 'confidential' && /conf-long|sec-long/.test(r.text)) failures.push(`${who} ${mode} saw hidden: ${q}`);
        }
      }
      const at = await internal.client.get(`/api/v1/search?${new URLSearchParams({ q, mode: 'fts', at: commit0 })}`);
      if (at.status !== 200) failures.push(`at ${JSON.stringify(q.slice(0, 40))}: ${at.status} ${at.text.slice(0, 200)}`);
      for (const [who, key] of agentCallers) {
        for (const tool of ['context_search', 'search']) {
          const r = await mcpCall(s.url, key, tool, { query: q });
          if (r.status !== 200 || r.isError) failures.push(`${who} ${tool} ${JSON.stringify(q.slice(0, 40))}: ${r.status} ${r.text.slice(0, 200)}`);
        }
      }
    }
    expect(failures).toEqual([]);
  }, 120_000);
});
