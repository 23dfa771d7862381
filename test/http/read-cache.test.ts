import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { RunningServer } from '../../src/server.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, createReaderAgent, onNode, signupHuman, startServerOn, startTestServer, type TestServer } from '../support/server.js';

/**
 * Issue 19: an authenticated read serves its key and its rendered page from what was kept since
 * the last commit (src/store/read-cache.ts), and the per-principal limit from a node's lease
 * (src/store/rate-limits.ts). What a user must never see: a kept answer after a commit anywhere
 * (this node, another node on the same database), after a key ran out or an elevation ended with
 * nothing committed, or one caller's view of a page served to another; nor more requests than
 * the limit, leases or not.
 */

const PASSWORD = 'correct horse battery';
const DAY = 86_400_000;

describe.each(testEngines())('kept reads stay exact (%s)', (engine) => {
  let a: TestServer;
  let b: RunningServer;
  let owner: Client;
  let ownerB: Client;
  let n = 0;
  const uniq = (p: string) => `${p}${++n}${Date.now().toString(36)}`;

  beforeAll(async () => {
    a = await startTestServer(engine);
    // A second node of the same deployment: for SQLite another process would open the same
    // file; here another connection to it, which is what PRAGMA data_version tells apart.
    b = await startServerOn(a.ctx.config);
    const o = await signupHuman(a.url, 'Owner');
    owner = o.client;
    expect((await owner.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
    ownerB = onNode(b.url, owner);
  }, 60_000);
  afterAll(async () => {
    await b?.close();
    await a?.stop();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const page = async (c: Client, path: string, content: string) => {
    const r = await c.post('/api/v1/nodes', { path, content });
    expect(r.status, r.text).toBe(201);
    return r.body as { id: string; content_hash: string };
  };

  it('a commit on another node is seen by the very next request here: key revoked, page edited, grant narrowed, lockdown', async () => {
    const p = await page(owner, `cache/${uniq('p')}.md`, '---\nsensitivity: internal\n---\n# P\n\nfirst text\n');
    const agent = await createReaderAgent(owner, 'confidential');
    const second = await owner.post(`/api/v1/principals/${agent.id}/tokens`, { name: 'second' });
    expect(second.status, second.text).toBe(201);
    const other = new Client(a.url, second.body.key);
    // Read twice on A: the second is served from what A kept.
    for (let i = 0; i < 2; i++) expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).body.content).toContain('first text');

    // The page is edited on B: A answers the new text at once, and the new ETag.
    const put = await ownerB.put(`/api/v1/nodes/${p.id}`, { content: '---\nsensitivity: internal\n---\n# P\n\nsecond text\n' });
    expect(put.status, put.text).toBe(200);
    const after = await agent.client.get(`/api/v1/nodes/${p.id}`);
    expect(after.body.content).toContain('second text');
    expect(after.headers.get('etag')).toBe(`"${put.body.content_hash}"`);

    // The page is raised above the agent's ceiling on B: gone from A's next answer.
    expect((await ownerB.put(`/api/v1/nodes/${p.id}`, { content: '---\nsensitivity: secret\n---\n# P\n\nsecond text\n' })).status).toBe(200);
    expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(404);
    expect((await ownerB.put(`/api/v1/nodes/${p.id}`, { content: '---\nsensitivity: internal\n---\n# P\n\nthird text\n' })).status).toBe(200);
    expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(200);

    // The agent's read grant is narrowed to another space on B: A refuses the read next time.
    const narrowed = await ownerB.put(`/api/v1/principals/${agent.id}/grants`, {
      grants: [
        { action: 'read', scope: 'elsewhere', ceiling: 'confidential' },
        { action: 'search', scope: '*', ceiling: 'confidential' },
      ],
    });
    expect(narrowed.status, narrowed.text).toBe(200);
    expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(404);

    // The key is revoked on B: A refuses it on its very next use; the other key still works there.
    expect((await other.get(`/api/v1/me`)).status).toBe(200);
    expect((await ownerB.delete(`/api/v1/principals/${agent.id}/tokens/${agent.keyId}`)).status).toBe(200);
    const revoked = await agent.client.get(`/api/v1/me`);
    expect(revoked.status).toBe(401);
    expect(revoked.body.code).toBe('invalid_token');
    expect((await other.get(`/api/v1/me`)).status).toBe(200);
  });

  it('a lockdown on another node refuses every key of the workspace here at once', async () => {
    const o = await signupHuman(a.url, 'Locker');
    expect((await o.client.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
    const p = await page(o.client, `lock/${uniq('p')}.md`, '# L\n\ntext\n');
    const agent = await createReaderAgent(o.client, 'internal');
    for (let i = 0; i < 2; i++) expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(200);
    const onB = onNode(b.url, o.client);
    const lock = await onB.post(`/api/v1/workspaces/${o.workspace.slug}/lockdown`, {});
    expect(lock.status, lock.text).toBe(200);
    const r = await agent.client.get(`/api/v1/nodes/${p.id}`);
    expect(r.status).toBe(401);
    expect(r.body.code).toBe('invalid_token');
  });

  it('each caller is answered its own view of one page, read after read, whoever read it first', async () => {
    const p = await page(owner, `views/${uniq('p')}.md`, '---\nsensitivity: internal\n---\n# V\n\nopen words\n\n::: confidential\nhidden words\n:::\n');
    const high = await createReaderAgent(owner, 'confidential');
    const low = await createReaderAgent(owner, 'internal');
    for (let i = 0; i < 3; i++) {
      const h = await high.client.get(`/api/v1/nodes/${p.id}`);
      const l = await low.client.get(`/api/v1/nodes/${p.id}`);
      expect(h.body.content).toContain('hidden words');
      expect(h.body.redacted).toBe(false);
      expect(h.headers.get('etag')).toBe(`"${p.content_hash}"`);
      expect(l.body.content).not.toContain('hidden words');
      expect(l.body.content).toContain('[redacted]');
      expect(l.body.redacted).toBe(true);
      expect(l.headers.get('etag')).not.toBe(`"${p.content_hash}"`);
      // A section read is its own answer, not the page's.
      const s = await high.client.get(`/api/v1/nodes/${p.id}?section=V`);
      expect(s.body.section).toContain('open words');
    }
  });

  it('a kept read answers the same JSON as a fresh one, with the time of this read as last_touched_at', async () => {
    // Frontmatter naming the same field, with the very value the splice uses as a stand-in.
    const p = await page(owner, `json/${uniq('p')}.md`, '---\nlast_touched_at: "1000-01-01T00:00:00.000Z"\nnote: "\\u0000 and \\" quotes"\n---\n# J\n\nbody\n');
    const agent = await createReaderAgent(owner, 'internal');
    const first = await agent.client.get(`/api/v1/nodes/${p.id}`);
    await new Promise((r) => setTimeout(r, 5));
    const second = await agent.client.get(`/api/v1/nodes/${p.id}`);
    expect(second.status).toBe(200);
    expect(second.headers.get('content-type')).toBe(first.headers.get('content-type'));
    expect(second.body.frontmatter).toEqual({ last_touched_at: '1000-01-01T00:00:00.000Z', note: '\u0000 and " quotes' });
    const t1 = Date.parse(first.body.last_touched_at as string);
    const t2 = Date.parse(second.body.last_touched_at as string);
    expect(t2).toBeGreaterThan(t1);
    expect(Math.abs(t2 - Date.now())).toBeLessThan(10_000);
    // Byte for byte the same answer but for that one value.
    const strip = (text: string, at: string) => text.replace(`"last_touched_at":"${at}"`, '"last_touched_at":"T"');
    expect(strip(second.text, second.body.last_touched_at as string)).toBe(strip(first.text, first.body.last_touched_at as string));
  });

  it('a key that runs out, and an elevation that ends, are refused with nothing committed since the last read', async () => {
    const p = await page(owner, `time/${uniq('p')}.md`, '---\nsensitivity: secret\n---\n# S\n\nsecret words\n');
    const agent = await createAgentWithKey(owner, [{ action: 'read', ceiling: 'confidential' }], { key: { expires_in_days: 1 } });
    expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(404);
    const el = await owner.post('/api/v1/elevations', { agent_id: agent.id, minutes: 1, reason: 'test' });
    expect(el.status, el.text).toBe(201);
    for (let i = 0; i < 2; i++) expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(200);
    // The clock moves on; nothing is written (a key's last use is written at most once a minute,
    // so the first request after the jump may write it: check twice).
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.now() + 2 * 60_000);
    expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(404);
    expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(404);
    vi.setSystemTime(Date.now() + 2 * DAY);
    const expired = await agent.client.get(`/api/v1/me`);
    expect(expired.status).toBe(401);
    expect(expired.body.code).toBe('invalid_token');
  });

  describe('per-principal limits leased by nodes', () => {
    let la: RunningServer;
    let lb: RunningServer;
    let human: Client;

    beforeAll(async () => {
      // Two nodes sharing the buckets; a burst of 100 and almost no refill (1 per minute).
      const env = {
        RATE_LIMITS: 'on',
        RATE_LIMIT_API_PER_MIN: '1',
        RATE_LIMIT_API_BURST: '100',
        RATE_LIMIT_LOGIN_PER_MIN: '1000',
        RATE_LIMIT_BUNDLE_PER_MIN: '1000',
      };
      la = await startServerOn(a.ctx.config, env);
      lb = await startServerOn(a.ctx.config, env);
      human = (await signupHuman(la.url, 'Limited')).client;
    }, 60_000);
    afterAll(async () => {
      await la?.close();
      await lb?.close();
    });

    it('two nodes together allow no more than the bucket holds, and every request past it is 429', async () => {
      // The agent is made with the human's session, which spends its own bucket, not the agent's.
      const agent = await createReaderAgent(human, 'internal');
      const onA = new Client(la.url, agent.key);
      const onB = new Client(lb.url, agent.key);
      const seen: Record<string, number[]> = { a: [], b: [] };
      let allowed = 0;
      let refused = 0;
      for (let i = 0; i < 140; i++) {
        const [name, c] = i % 3 === 2 ? ['b', onB] : ['a', onA];
        const r = await c.get('/api/v1/me');
        if (r.status === 200) {
          allowed++;
          seen[name]!.push(Number(r.headers.get('ratelimit-remaining')));
        } else {
          expect(r.status).toBe(429);
          expect(r.body.code).toBe('rate_limited');
          expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
          refused++;
        }
      }
      // A burst of 100 and at most one token refilled while this ran; leases lose at most
      // what a node took and did not use within a second (none here: each used its own).
      expect(allowed).toBeLessThanOrEqual(101);
      expect(allowed).toBeGreaterThanOrEqual(100 - 2 * 64);
      expect(allowed + refused).toBe(140);
      // What each node reports left only goes down.
      for (const list of Object.values(seen)) for (let i = 1; i < list.length; i++) expect(list[i]).toBeLessThanOrEqual(list[i - 1]!);
    });

    it('a node leases only a small share of a bucket, and none near its end: the other node gets the rest, exactly', async () => {
      const env = { RATE_LIMITS: 'on', RATE_LIMIT_API_PER_MIN: '1', RATE_LIMIT_API_BURST: '40', RATE_LIMIT_LOGIN_PER_MIN: '1000' };
      const one = await startServerOn(a.ctx.config, env);
      const two = await startServerOn(a.ctx.config, env);
      try {
        const agent = await createReaderAgent(owner, 'internal');
        const onOne = new Client(one.url, agent.key);
        const onTwo = new Client(two.url, agent.key);
        // Two requests on the first node: the second may lease (at most 1/16 of the 39 left).
        for (let i = 0; i < 2; i++) expect((await onOne.get('/api/v1/me')).status).toBe(200);
        // The second node gets every token the first did not take or hold.
        let two200 = 0;
        for (let i = 0; i < 45; i++) {
          const st = (await onTwo.get('/api/v1/me')).status;
          if (st === 200) two200++;
          else expect(st).toBe(429);
        }
        expect(two200).toBeGreaterThanOrEqual(40 - 2 - 2);
        // What the first node holds it may still spend; then the bucket is empty everywhere.
        let one200 = 0;
        for (let i = 0; i < 5; i++) if ((await onOne.get('/api/v1/me')).status === 200) one200++;
        expect(2 + two200 + one200).toBe(40);
        expect((await onTwo.get('/api/v1/me')).status).toBe(429);
      } finally {
        await one.close();
        await two.close();
      }
    });
  });
});
