import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PASSWORD } from '../support/actors.js';
import { testEngines } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { ALL, Client, createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';

/**
 * Issue 18: on PostgreSQL, `GET /api/v1/nodes/:id` with an agent key reads the page in the
 * statement that checks the key (auth/resolve.ts, one round trip instead of two). The page read
 * that way must be exactly the page read on its own, judged by the same rules: the same record as
 * a read by path (which is not read ahead), hidden above the key's ceiling, gone once deleted,
 * never another workspace's, never after the key is revoked, and never instead of an `at=` read.
 * On SQLite the same requests take the ordinary path: the answers must be the same.
 */
describe.each(testEngines())('a page read with the key that asks for it (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let agent: Client;
  let conf: Client;
  let other: Client;
  let ids: Record<string, string>;

  beforeAll(async () => {
    s = await startTestServer(engine);
    const h = await signupHuman(s.url, 'Prefetch');
    owner = h.client;
    // Granting secret needs a fresh step-up.
    expectStatus(await owner.post('/api/auth/stepup', { password: PASSWORD }), 200);
    agent = (
      await createAgentWithKey(
        owner,
        ALL.map((action) => ({ action, ceiling: 'secret' })),
        { ceiling: 'secret', key: { ceiling: 'secret' } },
      )
    ).client;
    conf = (await createAgentWithKey(owner, [{ action: 'read' }], { ceiling: 'confidential' })).client;
    const o = await signupHuman(s.url, 'Other');
    other = (
      await createAgentWithKey(
        o.client,
        ALL.map((action) => ({ action })),
      )
    ).client;
    ids = {};
    for (const [k, path, content] of [
      ['plain', 'pre/plain.md', '---\ntags: [one, two]\n---\n# Plain\n\nWords and a [[pre/mixed]] link.\n'],
      ['mixed', 'pre/mixed.md', '# Mixed\n\nOpen text.\n\n::: secret\nSecret line\n:::\n\nEnd.\n'],
      ['secret', 'pre/secret.md', '---\nsensitivity: secret\n---\n# Secret\n\nCrown jewels.\n'],
    ] as const) {
      const r = await owner.post('/api/v1/nodes', { path, content });
      expectStatus(r, 201);
      ids[k] = r.body.id;
    }
    const theirs = await other.post('/api/v1/nodes', { path: 'theirs/page.md', content: '# Theirs\n\nNot yours.\n' });
    expectStatus(theirs, 201);
    ids.theirs = theirs.body.id;
  }, 60_000);
  afterAll(async () => s?.stop());

  const strip = (b: Record<string, unknown>) => ({ ...b, last_touched_at: undefined });

  it('by id, the same record as by path (tags, links, redaction included)', async () => {
    for (const [k, path, reader] of [
      ['plain', 'pre/plain.md', agent],
      ['mixed', 'pre/mixed.md', agent],
      ['mixed', 'pre/mixed.md', conf],
    ] as const) {
      const byId = await reader.get(`/api/v1/nodes/${ids[k]}`);
      const byPath = await reader.get(`/api/v1/nodes/${encodeURIComponent(path)}`);
      expectStatus(byId, 200);
      expectStatus(byPath, 200);
      expect(strip(byId.body)).toEqual(strip(byPath.body));
      expect(byId.headers.get('etag')).toBe(byPath.headers.get('etag'));
    }
    const redacted = await conf.get(`/api/v1/nodes/${ids.mixed}`);
    expect(redacted.body.content).not.toContain('Secret line');
    expect(redacted.body.redacted).toBe(true);
    const md = await conf.get(`/api/v1/nodes/${ids.mixed}?format=md`);
    expect(md.text).not.toContain('Secret line');
  });

  it('above the key’s ceiling, of another workspace, or unknown: the same 404', async () => {
    const unknown = await conf.get('/api/v1/nodes/pg_0000000000000000000000');
    for (const r of [
      await conf.get(`/api/v1/nodes/${ids.secret}`),
      await agent.get(`/api/v1/nodes/${ids.theirs}`),
      await other.get(`/api/v1/nodes/${ids.plain}`),
    ]) {
      expect(r.status).toBe(404);
      expect(r.body.code).toBe('not_found');
      expect(r.text).not.toMatch(/Crown jewels|Not yours|Words and/);
    }
    expect(unknown.status).toBe(404);
  });

  it('a write is read at once; a deleted page is gone; at= reads the old version', async () => {
    const first = await agent.get(`/api/v1/nodes/${ids.plain}`);
    const put = await agent.put(`/api/v1/nodes/${ids.plain}`, { content: '# Plain\n\nNew words.\n' }, { 'if-match': first.headers.get('etag')! });
    expectStatus(put, 200);
    const now = await agent.get(`/api/v1/nodes/${ids.plain}`);
    expect(now.body.content).toContain('New words.');
    const then = await agent.get(`/api/v1/nodes/${ids.plain}?at=${first.body.commit_sha}`);
    expectStatus(then, 200);
    expect(then.body.content).toContain('Words and a');

    const made = await agent.post('/api/v1/nodes', { path: 'pre/doomed.md', content: '# Doomed\n\nSoon gone.\n' });
    expectStatus(made, 201);
    expectStatus(await agent.get(`/api/v1/nodes/${made.body.id}`), 200);
    const del = await agent.delete(`/api/v1/nodes/${made.body.id}`);
    expect([200, 204]).toContain(del.status);
    expect((await agent.get(`/api/v1/nodes/${made.body.id}`)).status).toBe(404);
  });

  it('a revoked key reads nothing, not even with a valid page id', async () => {
    const a = await createAgentWithKey(owner, [{ action: 'read' }]);
    expectStatus(await a.client.get(`/api/v1/nodes/${ids.mixed}`), 200);
    expectStatus(await owner.delete(`/api/v1/principals/${a.id}/tokens/${a.keyId}`), 200);
    const r = await a.client.get(`/api/v1/nodes/${ids.mixed}`);
    expect(r.status).toBe(401);
    expect(r.text).not.toContain('Open text');
  });
});
