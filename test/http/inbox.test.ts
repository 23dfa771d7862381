import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listInbox } from '../../src/core/inbox.js';
import { loadPrincipal } from '../../src/core/principal-loader.js';
import type { RunningServer } from '../../src/server.js';
import { testEngines } from '../support/engines.js';
import { expectError, expectStatus } from '../support/expect.js';
import { Client, createAgentWithKey, signupHuman, startServerOn, startTestServer, type TestServer } from '../support/server.js';

/**
 * The inbox over real HTTP: seqs per principal, state filters, paging, ack by up_to and by
 * seqs, visibility judged at read time, long-poll woken at once by a new event (and across
 * nodes on PostgreSQL), an empty answer when the wait runs out, and bad input.
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A second node of the same deployment (the same DATABASE_URL). */
const secondNode = (first: TestServer): Promise<RunningServer> => startServerOn(first.ctx.config);

describe.each(testEngines())('inbox (%s)', (engine) => {
  let s: TestServer;
  let owner: { id: string; client: Client; workspace: { id: string; slug: string } };
  let page: { id: string; path: string };
  let k = 0;

  const newPage = async (sensitivity = 'internal', space = 'eng') => {
    const path = `${space}/inbox/p${++k}-${Date.now()}.md`;
    const res = await owner.client.post('/api/v1/nodes', { path, content: `---\nsensitivity: ${sensitivity}\n---\n# P\n` });
    expectStatus(res, 201);
    return { id: res.body.id as string, path };
  };
  const agent = (name = `agent${++k}`, grants = [{ action: 'read' }, { action: 'collab' }]) => createAgentWithKey(owner.client, grants, { name });
  /** The owner mentions `who` on the page; answers the message id. */
  const mention = async (who: string, on = page.id, by = owner.client, body = 'ping'): Promise<string> => {
    const res = await by.post(`/api/v1/nodes/${on}/threads`, { body, mentions: [who] });
    expectStatus(res, 201);
    return res.body.id;
  };
  const list = async (c: Client, query = '') => {
    const res = await c.get(`/api/v1/inbox${query ? `?${query}` : ''}`);
    expectStatus(res, 200);
    return res.body as { events: any[]; next_after: number };
  };

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = await signupHuman(s.url, 'Olga');
    page = await newPage();
  });
  afterAll(async () => s?.stop());

  it('seqs grow strictly per principal; each principal sees only their own events', async () => {
    const a = await agent();
    const b = await agent();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      ids.push(await mention(a.id));
      if (i % 2 === 0) await mention(b.id);
    }
    const got = await list(a.client, 'state=all');
    expect(got.events.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(got.events.map((e) => e.payload.message_id)).toEqual(ids);
    expect(got.next_after).toBe(5);
    expect(got.events.every((e) => e.kind === 'mention' && e.state === 'unread' && typeof e.created_at === 'string')).toBe(true);
    expect((await list(b.client, 'state=all')).events.map((e) => e.seq)).toEqual([1, 2, 3]);
    // A human's inbox works the same; the owner has none of these.
    expect((await list(owner.client, 'state=all')).events.filter((e) => ids.includes(e.payload.message_id))).toHaveLength(0);
  });

  it('concurrent posts mentioning one principal give it seqs 1..n without gaps or repeats', async () => {
    const a = await agent();
    const pages = await Promise.all(Array.from({ length: 4 }, () => newPage()));
    const ids = await Promise.all(Array.from({ length: 12 }, (_, i) => mention(a.id, pages[i % 4]!.id)));
    const got = await list(a.client, 'state=all&limit=100');
    expect(got.events.map((e) => e.seq)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    expect(new Set(got.events.map((e) => e.payload.message_id))).toEqual(new Set(ids));
  });

  it('pages with after and limit; REST listing does not mark events read', async () => {
    const a = await agent();
    for (let i = 0; i < 5; i++) await mention(a.id);
    const first = await list(a.client, 'limit=2');
    expect(first.events.map((e) => e.seq)).toEqual([1, 2]);
    expect(first.next_after).toBe(2);
    const second = await list(a.client, `limit=2&after=${first.next_after}`);
    expect(second.events.map((e) => e.seq)).toEqual([3, 4]);
    const rest = await list(a.client, `after=${second.next_after}`);
    expect(rest.events.map((e) => e.seq)).toEqual([5]);
    const none = await list(a.client, 'after=5');
    expect(none).toEqual({ events: [], next_after: 5 });
    // A REST client peeks: everything is still unread.
    expect((await list(a.client)).events.map((e) => e.state)).toEqual(['unread', 'unread', 'unread', 'unread', 'unread']);
  });

  it('state filters: unread (default), read, done, all; listInbox with markRead (the MCP face) marks what it returns read', async () => {
    const a = await agent();
    for (let i = 0; i < 5; i++) await mention(a.id);
    const p = await loadPrincipal(s.ctx.store.db, owner.workspace.id, a.id);
    expect(p).not.toBeNull();
    const marked = await listInbox(s.ctx, p!, { limit: 2, markRead: true });
    expect(marked.events.map((e) => [e.seq, e.state])).toEqual([
      [1, 'unread'],
      [2, 'unread'],
    ]);
    expectStatus(await a.client.post('/api/v1/inbox/ack', { seqs: [2, 4] }), 200);
    const by = async (state: string) => (await list(a.client, `state=${state}`)).events.map((e) => e.seq);
    expect(await by('unread')).toEqual([3, 5]);
    expect(await by('read')).toEqual([1]);
    expect(await by('done')).toEqual([2, 4]);
    expect(await by('all')).toEqual([1, 2, 3, 4, 5]);
    expect((await list(a.client)).events.map((e) => e.seq)).toEqual([3, 5]);
    expect((await list(a.client, 'state=all')).events.map((e) => e.state)).toEqual(['read', 'done', 'unread', 'done', 'unread']);
  });

  it('ack by up_to and by seqs marks events done and counts only those that changed', async () => {
    const a = await agent();
    for (let i = 0; i < 6; i++) await mention(a.id);
    const upTo = await a.client.post('/api/v1/inbox/ack', { up_to: 3 });
    expectStatus(upTo, 200);
    expect(upTo.body).toEqual({ done: 3 });
    expect((await list(a.client)).events.map((e) => e.seq)).toEqual([4, 5, 6]);
    expect((await a.client.post('/api/v1/inbox/ack', { up_to: 3 })).body).toEqual({ done: 0 });
    expect((await a.client.post('/api/v1/inbox/ack', { seqs: [5, 5, 999] })).body).toEqual({ done: 1 });
    expect((await list(a.client)).events.map((e) => e.seq)).toEqual([4, 6]);
    expect((await a.client.post('/api/v1/inbox/ack', { seqs: [] })).body).toEqual({ done: 0 });
    // A session acks its own inbox (with CSRF), never another's.
    await mention(owner.id, page.id, a.client);
    const mine = await list(owner.client, 'state=unread');
    expect(mine.events.length).toBeGreaterThan(0);
    const ack = await owner.client.post('/api/v1/inbox/ack', { up_to: mine.next_after });
    expect(ack.body.done).toBe(mine.events.length);
    expect((await list(owner.client)).events).toEqual([]);
    expect((await list(a.client)).events.map((e) => e.seq)).toEqual([4, 6]);
    expectError(await owner.client.request('POST', '/api/v1/inbox/ack', { json: { up_to: 1 }, csrf: false }), 403, 'csrf_failed');
  });

  it('leaves out events about pages the caller can no longer see (checked at read time)', async () => {
    const a = await agent('Viz', [{ action: 'read' }, { action: 'collab' }]);
    const low = await createAgentWithKey(owner.client, [{ action: 'read' }], { name: 'Lowly', ceiling: 'internal' });
    const q = await newPage();
    await mention(a.id, page.id);
    await mention(a.id, q.id);
    await mention(low.id, q.id);
    expect((await list(a.client)).events.map((e) => e.page_id)).toEqual([page.id, q.id]);
    expect((await list(low.client)).events.map((e) => e.page_id)).toEqual([q.id]);
    // Narrow Viz's grants to another Space: both events disappear for it, and come back with the grant.
    expectStatus(await owner.client.put(`/api/v1/principals/${a.id}/grants`, { grants: [{ action: 'read', scope: 'ops', ceiling: 'internal' }] }), 200);
    const hidden = await list(a.client);
    expect(hidden.events).toEqual([]);
    expect(hidden.next_after).toBe(2);
    expectStatus(await owner.client.put(`/api/v1/principals/${a.id}/grants`, { grants: [{ action: 'read', scope: 'eng', ceiling: 'internal' }] }), 200);
    expect((await list(a.client)).events).toHaveLength(2);
    // Raise the page above Lowly's ceiling: its event is gone.
    expectStatus(await owner.client.put(`/api/v1/nodes/${q.id}`, { content: '---\nsensitivity: confidential\n---\n# P\n' }), 200);
    expect((await list(low.client, 'state=all')).events).toEqual([]);
    expect((await list(a.client)).events.map((e) => e.page_id)).toEqual([page.id]);
  });

  it('a long-poll answers as soon as an event arrives, long before its wait ends', async () => {
    const a = await agent();
    const t0 = Date.now();
    const poll = a.client.get('/api/v1/inbox?wait=10');
    await sleep(300);
    const id = await mention(a.id, page.id, owner.client, 'wake up');
    const res = await poll;
    const elapsed = Date.now() - t0;
    expectStatus(res, 200);
    expect(res.body.events.map((e: any) => e.payload.message_id)).toEqual([id]);
    expect(res.body.next_after).toBe(1);
    expect(elapsed).toBeGreaterThanOrEqual(250);
    expect(elapsed).toBeLessThan(3000);
    // An event for someone else does not answer this poll; one for the caller does.
    const b = await agent();
    const t1 = Date.now();
    const poll2 = a.client.get('/api/v1/inbox?wait=10&after=1');
    await sleep(200);
    await mention(b.id);
    await sleep(300);
    await mention(a.id);
    const res2 = await poll2;
    expect(res2.body.events.map((e: any) => e.seq)).toEqual([2]);
    expect(Date.now() - t1).toBeGreaterThanOrEqual(450);
    expect(Date.now() - t1).toBeLessThan(3000);
  });

  it('a long-poll with something already there answers at once; with nothing it answers empty when the wait runs out', async () => {
    const a = await agent();
    await mention(a.id);
    const t0 = Date.now();
    const now = await list(a.client, 'wait=10');
    expect(now.events).toHaveLength(1);
    expect(Date.now() - t0).toBeLessThan(2000);
    const t1 = Date.now();
    const empty = await list(a.client, 'wait=1&after=1');
    const elapsed = Date.now() - t1;
    expect(empty).toEqual({ events: [], next_after: 1 });
    expect(elapsed).toBeGreaterThanOrEqual(950);
    expect(elapsed).toBeLessThan(3000);
  });

  // One process per node with SQLite: cross-node wake-ups are a PostgreSQL matter (LISTEN/NOTIFY).
  if (engine === 'postgres')
    it('a poll on node A is woken by a post on node B (PostgreSQL NOTIFY)', async () => {
      const node2 = await secondNode(s);
      try {
        const a = await agent();
        const onB = new Client(node2.url, a.client.bearer);
        // The owner's session works on node B too: sessions live in the database.
        const ownerOnB = new Client(node2.url);
        for (const [k2, v] of owner.client.cookies) ownerOnB.cookies.set(k2, v);
        expectStatus(await onB.get('/api/v1/whoami'), 200);
        const t0 = Date.now();
        const poll = a.client.get('/api/v1/inbox?wait=10');
        await sleep(300);
        const id = await mention(a.id, page.id, ownerOnB, 'from node B');
        const res = await poll;
        const elapsed = Date.now() - t0;
        expect(res.body.events.map((e: any) => e.payload.message_id)).toEqual([id]);
        expect(elapsed).toBeLessThan(3000);
        // And the other way round.
        const t1 = Date.now();
        const pollB = onB.get('/api/v1/inbox?wait=10&after=1');
        await sleep(300);
        await mention(a.id);
        const resB = await pollB;
        expect(resB.body.events.map((e: any) => e.seq)).toEqual([2]);
        expect(Date.now() - t1).toBeLessThan(3000);
      } finally {
        await node2.close();
      }
    });

  it('refuses bad input with the error body', async () => {
    const a = await agent();
    for (const q of ['wait=26', 'wait=-1', 'wait=abc', 'limit=0', 'limit=101', 'limit=2.5', 'after=-1', 'state=new']) {
      expectError(await a.client.get(`/api/v1/inbox?${q}`), 400, 'invalid_request');
    }
    for (const body of [
      { up_to: 3, seqs: [1] },
      {},
      { up_to: -1 },
      { up_to: 1.5 },
      { seqs: [0] },
      { seqs: Array.from({ length: 1001 }, (_, i) => i + 1) },
      { seqs: 'all' },
      { up_to: 1, extra: true },
    ]) {
      expectError(await a.client.post('/api/v1/inbox/ack', body), 400, 'invalid_request');
    }
    expectStatus(await a.client.post('/api/v1/inbox/ack', { seqs: Array.from({ length: 1000 }, (_, i) => i + 1) }), 200);
    expectStatus(await a.client.get('/api/v1/inbox?wait=0&limit=100&state=all&after=0'), 200);
    expectError(await new Client(s.url).get('/api/v1/inbox'), 401, 'unauthorized');
  });

  it('a client that goes away stops waiting (no listener left behind)', async () => {
    const a = await agent();
    const key = `${owner.workspace.id}:${a.id}`;
    const emitter = (s.ctx.notifier as unknown as { emitter: { listenerCount(k: string): number } }).emitter;
    // A plain socket-level request (fetch's pool may open spare connections that would hold the server's close).
    const req = http.get(`${s.url}/api/v1/inbox?wait=25`, { headers: { authorization: `Bearer ${a.client.bearer}` }, agent: false });
    const gone = new Promise<void>((resolve) => req.on('close', () => resolve()));
    req.on('error', () => undefined);
    await sleep(300);
    expect(emitter.listenerCount(key)).toBe(1);
    req.destroy();
    await gone;
    const t0 = Date.now();
    while (emitter.listenerCount(key) > 0 && Date.now() - t0 < 2000) await sleep(20);
    expect(emitter.listenerCount(key)).toBe(0);
  });

  it('closing the server ends waiting polls at once', async () => {
    const t = await startTestServer(engine);
    const h = await signupHuman(t.url, 'Cleo');
    const t0 = Date.now();
    let answeredAt = 0;
    const poll = h.client
      .get('/api/v1/inbox?wait=25')
      .catch((e: unknown) => e)
      .finally(() => (answeredAt = Date.now()));
    await sleep(300);
    const stopping = Date.now();
    await t.stop();
    const res = await poll;
    expect(answeredAt - stopping).toBeLessThan(2000);
    expect(Date.now() - t0).toBeLessThan(10_000);
    if (!(res instanceof Error)) {
      expect((res as any).status).toBe(200);
      expect((res as any).body.events).toEqual([]);
    }
  });
});
