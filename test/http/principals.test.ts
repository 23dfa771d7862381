import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { expectError, expectStatus } from '../support/expect.js';

/**
 * Black-box checks of agents, grants, agent keys, credentials, sessions with CSRF, sign-up
 * and login over REST.
 */

const PASSWORD = 'correct horse battery';
let emailCounter = 0;
const freshEmail = (name: string) => `${name}-${process.pid}-${++emailCounter}-${Date.now()}@example.com`;

/** A client that presents exactly the given session cookies (a copy taken earlier). */
function withCookies(base: string, cookies: Map<string, string>): Client {
  const c = new Client(base);
  for (const [k, v] of cookies) c.cookies.set(k, v);
  return c;
}

describe.each(testEngines())('agents, grants and keys (%s)', (engine) => {
  let s: TestServer;
  let ann: { client: Client; id: string; workspace: { id: string; slug: string } };
  let bea: { client: Client; id: string; workspace: { id: string; slug: string } };

  beforeAll(async () => {
    s = await startTestServer(engine);
    ann = await signupHuman(s.url, 'Ann');
    bea = await signupHuman(s.url, 'Bea');
  });
  afterAll(async () => s?.stop());

  describe('agents', () => {
    it('creating an agent answers 201 with id, kind, name, ceiling, creator and grants', async () => {
      const grants = [
        { action: 'read', scope: 'eng', ceiling: 'internal' },
        { action: 'write', scope: 'eng/notes', ceiling: 'confidential' },
      ];
      const res = await ann.client.post('/api/v1/principals', { name: 'indexer', grants, ceiling: 'confidential' });
      expectStatus(res, 201);
      expect(res.body.id).toMatch(/^pr_/);
      expect(res.body.kind).toBe('agent');
      expect(res.body.name).toBe('indexer');
      expect(res.body.ceiling).toBe('confidential');
      expect(res.body.creator).toBe(ann.id);
      expect(res.body.grants).toEqual(grants);
      expect(typeof res.body.created_at).toBe('string');

      const got = await ann.client.get(`/api/v1/principals/${res.body.id}`);
      expectStatus(got, 200);
      expect(got.body).toMatchObject({ id: res.body.id, kind: 'agent', name: 'indexer', ceiling: 'confidential', creator: ann.id, grants });
    });

    it('grants default to none, the ceiling to internal, and a grant ceiling to internal', async () => {
      const bare = await ann.client.post('/api/v1/principals', { name: 'bare' });
      expectStatus(bare, 201);
      expect(bare.body.grants).toEqual([]);
      expect(bare.body.ceiling).toBe('internal');
      const dflt = await ann.client.post('/api/v1/principals', { name: 'dflt', grants: [{ action: 'read', scope: '*' }] });
      expectStatus(dflt, 201);
      expect(dflt.body.grants).toEqual([{ action: 'read', scope: '*', ceiling: 'internal' }]);
    });

    it('bad agent input is 400', async () => {
      expectError(await ann.client.post('/api/v1/principals', { name: 'x', ceiling: 'ultra' }), 400, 'invalid_request');
      expectError(await ann.client.post('/api/v1/principals', { name: '   ' }), 400, 'invalid_request');
      expectError(await ann.client.post('/api/v1/principals', { grants: [] }), 400, 'invalid_request');
      expectError(await ann.client.post('/api/v1/principals', { name: 'x', grants: [{ action: 'fly', scope: '*' }] }), 400, 'invalid_request');
      expectError(await ann.client.post('/api/v1/principals', { name: 'x', grants: [{ action: 'read', scope: '../x' }] }), 400, 'invalid_path');
    });

    it('an agent cannot create agents (403 session_required)', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }, { action: 'admin' }], { name: 'wannabe-creator' });
      expectError(await a.client.post('/api/v1/principals', { name: 'child' }), 403, 'session_required');
    });

    it('a human lists principals with email and role; agents with ceiling and creator', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'lister' });
      const me = await ann.client.get('/api/v1/me');
      expectStatus(me, 200);
      const res = await ann.client.get('/api/v1/principals');
      expectStatus(res, 200);
      const human = res.body.principals.find((p: any) => p.id === ann.id);
      expect(human).toMatchObject({ id: ann.id, kind: 'human', name: 'Ann', email: me.body.email, role: 'owner' });
      expect(human.email).toMatch(/@example\.com$/);
      const agent = res.body.principals.find((p: any) => p.id === a.id);
      expect(agent).toMatchObject({ id: a.id, kind: 'agent', name: 'lister', ceiling: 'confidential', creator: ann.id });
      // Nobody from workspace B.
      expect(res.body.principals.map((p: any) => p.id)).not.toContain(bea.id);
    });

    it('an agent lists principals with id, name and kind only', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'peeker' });
      const res = await a.client.get('/api/v1/principals');
      expectStatus(res, 200);
      const list: any[] = res.body.principals;
      expect(list.map((p) => p.id)).toContain(ann.id);
      expect(list.map((p) => p.id)).toContain(a.id);
      for (const p of list) {
        expect(Object.keys(p).sort()).toEqual(['id', 'kind', 'name']);
        expect(p).not.toHaveProperty('email');
        expect(p).not.toHaveProperty('role');
        expect(p).not.toHaveProperty('ceiling');
        expect(p).not.toHaveProperty('creator');
      }
      expect(res.text).not.toContain('@example.com');
    });

    it('an agent reads itself in full and other agents as id, name and kind only', async () => {
      const me = await createAgentWithKey(ann.client, [{ action: 'read', scope: 'eng' }], { name: 'self-reader' });
      const other = await createAgentWithKey(ann.client, [{ action: 'write' }], { name: 'other' });
      const self = await me.client.get(`/api/v1/principals/${me.id}`);
      expectStatus(self, 200);
      expect(self.body).toMatchObject({ id: me.id, kind: 'agent', grants: [{ action: 'read', scope: 'eng', ceiling: 'confidential' }] });
      const peer = await me.client.get(`/api/v1/principals/${other.id}`);
      expectStatus(peer, 200);
      expect(Object.keys(peer.body).sort()).toEqual(['id', 'kind', 'name']);
      // Grants of another agent are for humans.
      expectError(await me.client.get(`/api/v1/principals/${other.id}/grants`), 403, 'forbidden');
      const own = await me.client.get(`/api/v1/principals/${me.id}/grants`);
      expectStatus(own, 200);
      expect(own.body.grants).toEqual([{ action: 'read', scope: 'eng', ceiling: 'confidential' }]);
    });

    it('an unknown agent, or one of another workspace, is 404 not_found', async () => {
      const theirs = await createAgentWithKey(bea.client, [{ action: 'read' }], { name: 'bea-agent' });
      const ghost = 'pr_0123456789abcdefghjkmnpqrs';
      expectError(await ann.client.get(`/api/v1/principals/${ghost}`), 404, 'not_found');
      expectError(await ann.client.get(`/api/v1/principals/${theirs.id}`), 404, 'not_found');
      expectError(await ann.client.get(`/api/v1/principals/${theirs.id}/grants`), 404, 'not_found');
      expectError(await ann.client.put(`/api/v1/principals/${theirs.id}/grants`, { grants: [] }), 404, 'not_found');
      expectError(await ann.client.get(`/api/v1/principals/${theirs.id}/tokens`), 404, 'not_found');
      expectError(await ann.client.post(`/api/v1/principals/${theirs.id}/tokens`, { name: 'steal' }), 404, 'not_found');
      expectError(await ann.client.delete(`/api/v1/principals/${theirs.id}/tokens/${theirs.keyId}`), 404, 'not_found');
      expectError(await ann.client.delete(`/api/v1/principals/${theirs.id}`), 404, 'not_found');
      // Bea's agent survived all of it, with its grants.
      const me = await theirs.client.get('/api/v1/me');
      expectStatus(me, 200);
      expect(me.body.grants).toEqual([{ action: 'read', scope: '*', ceiling: 'confidential' }]);
    });

    it('deleting an agent: agents may not (403); its creator may, and its keys die at once', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }, { action: 'admin' }], { name: 'doomed' });
      expectStatus(await a.client.get('/api/v1/me'), 200);
      expectError(await a.client.delete(`/api/v1/principals/${a.id}`), 403, 'session_required');
      const del = await ann.client.delete(`/api/v1/principals/${a.id}`);
      expectStatus(del, 200);
      expect(del.body).toEqual({ deleted: true, id: a.id });
      expectError(await a.client.get('/api/v1/me'), 401, 'invalid_token');
      expectError(await ann.client.get(`/api/v1/principals/${a.id}`), 404, 'not_found');
      const list = await ann.client.get('/api/v1/principals');
      expect(list.body.principals.map((p: any) => p.id)).not.toContain(a.id);
      expectError(await ann.client.delete(`/api/v1/principals/${a.id}`), 404, 'not_found');
      // A key minted for it afterwards is impossible.
      expectError(await ann.client.post(`/api/v1/principals/${a.id}/tokens`, { name: 'late' }), 404, 'not_found');
    });
  });

  describe('grants', () => {
    it('GET shows the grants; PUT replaces them, and the agent acts under the new ones at once', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }, { action: 'write' }], { name: 'regranted' });
      const before = await ann.client.get(`/api/v1/principals/${a.id}/grants`);
      expectStatus(before, 200);
      expect(before.body.grants).toEqual([
        { action: 'read', scope: '*', ceiling: 'confidential' },
        { action: 'write', scope: '*', ceiling: 'confidential' },
      ]);
      expectStatus(await a.client.post('/api/v1/nodes', { path: 'eng/regrant-1.md', content: '# One\n' }), 201);

      const next = [{ action: 'read', scope: 'eng', ceiling: 'internal' }];
      const put = await ann.client.put(`/api/v1/principals/${a.id}/grants`, { grants: next });
      expectStatus(put, 200);
      expect(put.body.grants).toEqual(next);
      expect((await ann.client.get(`/api/v1/principals/${a.id}/grants`)).body.grants).toEqual(next);
      expect((await a.client.get('/api/v1/me')).body.grants).toEqual(next);
      // Write is gone: the same key is refused now.
      expectError(await a.client.post('/api/v1/nodes', { path: 'eng/regrant-2.md', content: '# Two\n' }), 403, 'forbidden');
      expectStatus(await a.client.get(`/api/v1/nodes/${encodeURIComponent('eng/regrant-1.md')}`), 200);

      // An empty list removes every grant.
      const none = await ann.client.put(`/api/v1/principals/${a.id}/grants`, { grants: [] });
      expectStatus(none, 200);
      expect(none.body.grants).toEqual([]);
      expectError(await a.client.get(`/api/v1/nodes/${encodeURIComponent('eng/regrant-1.md')}`), 404, 'not_found');
    });

    it('an owner may grant up to secret', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'secret-holder' });
      const grants = [
        { action: 'read', scope: '*', ceiling: 'secret' },
        { action: 'admin', scope: 'ops', ceiling: 'secret' },
      ];
      expectError(await ann.client.put(`/api/v1/principals/${a.id}/grants`, { grants }), 403, 'step_up_required');
      expectStatus(await ann.client.post('/api/auth/stepup', { password: PASSWORD }), 200);
      const put = await ann.client.put(`/api/v1/principals/${a.id}/grants`, { grants });
      expectStatus(put, 200);
      expect(put.body.grants).toEqual(grants);
      expect((await ann.client.get(`/api/v1/principals/${a.id}/grants`)).body.grants).toEqual(grants);
    });

    it('invalid grants are 400 and change nothing', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read', scope: 'eng' }], { name: 'stable' });
      const url = `/api/v1/principals/${a.id}/grants`;
      expectError(await ann.client.put(url, { grants: [{ action: 'fly', scope: '*' }] }), 400, 'invalid_request');
      expectError(await ann.client.put(url, { grants: [{ action: 'READ', scope: '*' }] }), 400, 'invalid_request');
      expectError(await ann.client.put(url, { grants: [{ action: 'read', scope: '../x' }] }), 400, 'invalid_path');
      expectError(await ann.client.put(url, { grants: [{ action: 'read', scope: 'eng/../ops' }] }), 400, 'invalid_path');
      expectError(await ann.client.put(url, { grants: [{ action: 'read', scope: '/eng' }] }), 400, 'invalid_path');
      expectError(await ann.client.put(url, { grants: [{ action: 'read', scope: '' }] }), 400, 'invalid_request');
      expectError(await ann.client.put(url, { grants: [{ action: 'read', scope: '*', ceiling: 'ultra' }] }), 400, 'invalid_request');
      expectError(await ann.client.put(url, { grants: [{ action: 'read', scope: '*', ceiling: 'top-secret' }] }), 400, 'invalid_request');
      expectError(await ann.client.put(url, { grants: 'read' }), 400, 'invalid_request');
      expectError(await ann.client.put(url, {}), 400, 'invalid_request');
      const tooMany = Array.from({ length: 101 }, () => ({ action: 'read', scope: '*' }));
      expectError(await ann.client.put(url, { grants: tooMany }), 400, ['invalid_request', 'invalid_grants']);
      const after = await ann.client.get(url);
      expect(after.body.grants).toEqual([{ action: 'read', scope: 'eng', ceiling: 'confidential' }]);
    });

    it('an agent may not replace grants, not even its own (403 session_required)', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }, { action: 'admin' }], { name: 'self-promoter' });
      const res = await a.client.put(`/api/v1/principals/${a.id}/grants`, { grants: [{ action: 'write', scope: '*', ceiling: 'secret' }] });
      expectError(res, 403, 'session_required');
      const after = await ann.client.get(`/api/v1/principals/${a.id}/grants`);
      expect(after.body.grants.map((g: any) => g.action)).toEqual(['read', 'admin']);
    });
  });

  describe('keys', () => {
    it('minting a key answers 201 with the ak_ secret once; listings show hints only', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'keyed' });
      const mint = await ann.client.post(`/api/v1/principals/${a.id}/tokens`, { name: 'laptop' });
      expectStatus(mint, 201);
      const key: string = mint.body.key;
      expect(key).toMatch(/^ak_[A-Za-z0-9_-]{20,}$/);
      expect(mint.body.id).toMatch(/^tk_/);
      expect(mint.body.name).toBe('laptop');
      expect(mint.body.expires_at).toBeNull();
      expect(mint.body.hint).not.toBe(key);
      // The new key works.
      const me = await new Client(s.url, key).get('/api/v1/me');
      expectStatus(me, 200);
      expect(me.body.id).toBe(a.id);

      const list = await ann.client.get(`/api/v1/principals/${a.id}/tokens`);
      expectStatus(list, 200);
      expect(list.body.tokens.map((t: any) => t.id).sort()).toEqual([a.keyId, mint.body.id].sort());
      for (const t of list.body.tokens) {
        expect(t).not.toHaveProperty('key');
        for (const v of Object.values(t)) {
          expect(v).not.toBe(key);
          expect(v).not.toBe(a.key);
        }
        expect(t.hint.startsWith('ak_')).toBe(true);
      }
      expect(list.text).not.toContain(key);
      expect(list.text).not.toContain(a.key);
      expect(list.text).not.toContain(key.slice(3, 20));
      const listed = list.body.tokens.find((t: any) => t.id === mint.body.id);
      expect(listed.hint).toBe(mint.body.hint);
      expect(key.endsWith(listed.hint.slice(-4))).toBe(true);
      // Keys are for humans to manage.
      expectError(await a.client.get(`/api/v1/principals/${a.id}/tokens`), 403, 'session_required');
      expectError(await a.client.post(`/api/v1/principals/${a.id}/tokens`, { name: 'self-minted' }), 403, 'session_required');
    });

    it('expires_in_days is bounded: 0 and 4000 are 400; 1 day sets expires_at a day ahead', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'expiring' });
      const url = `/api/v1/principals/${a.id}/tokens`;
      expectError(await ann.client.post(url, { name: 'k', expires_in_days: 0 }), 400, 'invalid_request');
      expectError(await ann.client.post(url, { name: 'k', expires_in_days: 4000 }), 400, 'invalid_request');
      expectError(await ann.client.post(url, { name: 'k', expires_in_days: -5 }), 400, 'invalid_request');
      expectError(await ann.client.post(url, { name: 'k', expires_in_days: 1.5 }), 400, 'invalid_request');
      expectError(await ann.client.post(url, { name: 'k', expires_in_days: '30' }), 400, 'invalid_request');
      const t0 = Date.now();
      const one = await ann.client.post(url, { name: 'k', expires_in_days: 1 });
      expectStatus(one, 201);
      expect(Math.abs(Date.parse(one.body.expires_at) - (t0 + 86_400_000))).toBeLessThan(60_000);
      expectStatus(await new Client(s.url, one.body.key).get('/api/v1/me'), 200);
      expectStatus(await ann.client.post(url, { name: 'k', expires_in_days: 3650 }), 201);
      const list = await ann.client.get(url);
      expect(list.body.tokens).toHaveLength(3); // the helper's key, 1 day and 3650 days
    });

    it('ip_pin must be an IP address; a key pinned elsewhere is 401, pinned to 127.0.0.1 works', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'pinned' });
      const url = `/api/v1/principals/${a.id}/tokens`;
      expectError(await ann.client.post(url, { name: 'k', ip_pin: 'not-an-ip' }), 400, 'invalid_request');
      expectError(await ann.client.post(url, { name: 'k', ip_pin: '10.9.8.7/24' }), 400, 'invalid_request');
      expectError(await ann.client.post(url, { name: 'k', ip_pin: '999.1.1.1' }), 400, 'invalid_request');
      const far = await ann.client.post(url, { name: 'far', ip_pin: '10.9.8.7' });
      expectStatus(far, 201);
      expect(far.body.ip_pin).toBe('10.9.8.7');
      expectError(await new Client(s.url, far.body.key).get('/api/v1/me'), 401, 'invalid_token');
      const near = await ann.client.post(url, { name: 'near', ip_pin: '127.0.0.1' });
      expectStatus(near, 201);
      const me = await new Client(s.url, near.body.key).get('/api/v1/me');
      expectStatus(me, 200);
      expect(me.body.id).toBe(a.id);
    });

    it("a key with ceiling public cannot read an internal page (404) while the agent's other key can", async () => {
      expectStatus(await ann.client.post('/api/v1/nodes', { path: 'eng/internal-note.md', content: '# Internal\n\nFor staff.\n' }), 201);
      expectStatus(
        await ann.client.post('/api/v1/nodes', { path: 'eng/public-note.md', content: '---\nsensitivity: public\n---\n# Public\n\nFor all.\n' }),
        201,
      );
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'two-keys' });
      const low = await ann.client.post(`/api/v1/principals/${a.id}/tokens`, { name: 'low', ceiling: 'public' });
      expectStatus(low, 201);
      expect(low.body.ceiling).toBe('public');
      const lowClient = new Client(s.url, low.body.key);
      const internal = encodeURIComponent('eng/internal-note.md');
      const pub = encodeURIComponent('eng/public-note.md');
      const hidden = await lowClient.get(`/api/v1/nodes/${internal}`);
      expectError(hidden, 404, 'not_found');
      expect(hidden.text).not.toContain('For staff');
      expectStatus(await lowClient.get(`/api/v1/nodes/${pub}`), 200);
      const full = await a.client.get(`/api/v1/nodes/${internal}`);
      expectStatus(full, 200);
      expect(full.body.content).toContain('For staff.');
      expectError(await ann.client.post(`/api/v1/principals/${a.id}/tokens`, { name: 'k', ceiling: 'ultra' }), 400, 'invalid_request');
    });

    it('revoking a key kills it on its very next request; the agent’s other keys still work', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'revocable' });
      const second = await ann.client.post(`/api/v1/principals/${a.id}/tokens`, { name: 'second' });
      expectStatus(second, 201);
      const other = new Client(s.url, second.body.key);
      expectStatus(await a.client.get('/api/v1/me'), 200);
      expectStatus(await other.get('/api/v1/me'), 200);

      expectError(await a.client.delete(`/api/v1/principals/${a.id}/tokens/${a.keyId}`), 403, 'session_required');
      expectError(await bea.client.delete(`/api/v1/principals/${a.id}/tokens/${a.keyId}`), 404, 'not_found');
      expectStatus(await a.client.get('/api/v1/me'), 200);

      const rev = await ann.client.delete(`/api/v1/principals/${a.id}/tokens/${a.keyId}`);
      expectStatus(rev, 200);
      expect(rev.body).toEqual({ revoked: true, id: a.keyId });
      expectError(await a.client.get('/api/v1/me'), 401, 'invalid_token');
      expectError(await a.client.get('/api/v1/principals'), 401, 'invalid_token');
      expectStatus(await other.get('/api/v1/me'), 200);

      const list = await ann.client.get(`/api/v1/principals/${a.id}/tokens`);
      const byId = new Map<string, any>(list.body.tokens.map((t: any) => [t.id, t]));
      expect(byId.get(a.keyId).revoked_at).toEqual(expect.any(String));
      expect(byId.get(second.body.id).revoked_at).toBeNull();

      expectError(await ann.client.delete(`/api/v1/principals/${a.id}/tokens/tk_0123456789abcdefghjkmnpqrs`), 404, 'not_found');
      // A key id of another agent does not revoke through this agent.
      const b = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'bystander' });
      expectError(await ann.client.delete(`/api/v1/principals/${a.id}/tokens/${b.keyId}`), 404, 'not_found');
      expectStatus(await b.client.get('/api/v1/me'), 200);
    });

    it('an expired key is 401', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'short-lived', key: { expires_in_days: 1 } });
      expectStatus(await a.client.get('/api/v1/me'), 200);
      // No API can move time forward or backdate a key, so the test ages this one key
      // directly in the database; everything observed afterwards goes through HTTP.
      await s.ctx.store.db
        .updateTable('agent_keys')
        .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
        .where('id', '=', a.keyId)
        .execute();
      expectError(await a.client.get('/api/v1/me'), 401, 'invalid_token');
      expectError(await a.client.get('/api/v1/principals'), 401, 'invalid_token');
    });
  });

  describe('credentials', () => {
    it('no credentials is 401 unauthorized', async () => {
      const anon = new Client(s.url);
      expectError(await anon.get('/api/v1/me'), 401, 'unauthorized');
      expectError(await anon.get('/api/v1/principals'), 401, 'unauthorized');
      expectError(await anon.post('/api/v1/nodes', { path: 'eng/anon.md', content: '# x\n' }), 401, 'unauthorized');
    });

    it('unknown, foreign and malformed tokens are 401', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'real' });
      const cases: [string, string | readonly string[]][] = [
        ['Bearer ak_garbage', 'invalid_token'],
        ['Bearer oa_x', ['invalid_token', 'unauthorized']],
        ['Bearer gt_x', ['invalid_token', 'unauthorized']],
        ['Bearer zz_whatever', ['invalid_token', 'unauthorized']],
        [`Basic ${Buffer.from('ann:gt_secret').toString('base64')}`, ['invalid_token', 'unauthorized']],
        [`Basic ${Buffer.from(`x:${a.key}`).toString('base64')}`, ['invalid_token', 'unauthorized']],
        [`Token ${a.key}`, ['invalid_token', 'unauthorized']],
        [`Bearer ${a.key}x`, 'invalid_token'],
      ];
      for (const [authorization, code] of cases) {
        const res = await new Client(s.url).get('/api/v1/me', { authorization });
        expectError(res, 401, code);
      }
      expectStatus(await a.client.get('/api/v1/me'), 200);
    });

    it('a key used with X-Service-Workspace naming another workspace is 404 workspace_not_found', async () => {
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'traveller' });
      expectError(await a.client.get('/api/v1/me', { 'x-service-workspace': bea.workspace.slug }), 404, 'workspace_not_found');
      expectError(await a.client.get('/api/v1/principals', { 'x-service-workspace': bea.workspace.id }), 404, 'workspace_not_found');
      expectError(await a.client.get('/api/v1/me', { 'x-service-workspace': 'no-such-workspace' }), 404, 'workspace_not_found');
      expectError(await a.client.get(`/api/v1/me?workspace=${bea.workspace.slug}`), 404, 'workspace_not_found');
      const own = await a.client.get('/api/v1/me', { 'x-service-workspace': ann.workspace.slug });
      expectStatus(own, 200);
      expect(own.body.workspace).toEqual({ id: ann.workspace.id, slug: ann.workspace.slug });
    });

    it('a session naming a workspace the human is not a member of is 404 workspace_not_found', async () => {
      expectError(await ann.client.get('/api/v1/principals', { 'x-service-workspace': bea.workspace.slug }), 404, 'workspace_not_found');
      const own = await ann.client.get('/api/v1/me', { 'x-service-workspace': ann.workspace.slug });
      expectStatus(own, 200);
      expect(own.body.workspace.id).toBe(ann.workspace.id);
    });
  });

  describe('sessions and CSRF', () => {
    it('an unsafe request with the session cookie but without X-CSRF-Token is 403 csrf_failed', async () => {
      const before = (await ann.client.get('/api/v1/principals')).body.principals.length;
      const res = await ann.client.request('POST', '/api/v1/principals', { json: { name: 'csrf-victim' }, csrf: false });
      expectError(res, 403, 'csrf_failed');
      const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'csrf-target' });
      expectError(await ann.client.request('DELETE', `/api/v1/principals/${a.id}`, { csrf: false }), 403, 'csrf_failed');
      expectError(await ann.client.request('PUT', `/api/v1/principals/${a.id}/grants`, { json: { grants: [] }, csrf: false }), 403, 'csrf_failed');
      expectStatus(await a.client.get('/api/v1/me'), 200);
      const after = (await ann.client.get('/api/v1/principals')).body.principals;
      expect(after.map((p: any) => p.name)).not.toContain('csrf-victim');
      expect(after.length).toBe(before + 1);
    });

    it('a wrong X-CSRF-Token, or the token of another session, is 403 csrf_failed', async () => {
      expectError(await ann.client.post('/api/v1/principals', { name: 'x' }, { 'x-csrf-token': 'wrong' }), 403, 'csrf_failed');
      expectError(await ann.client.post('/api/v1/principals', { name: 'x' }, { 'x-csrf-token': '' }), 403, 'csrf_failed');
      // Bea's own CSRF token, echoed in header and cookie, does not fit Ann's session.
      const mixed = new Client(s.url);
      mixed.cookies.set('svc_session', ann.client.cookies.get('svc_session')!);
      mixed.cookies.set('svc_csrf', bea.client.csrf!);
      expectError(await mixed.post('/api/v1/principals', { name: 'x' }), 403, 'csrf_failed');
      // The right token in the header but a different cookie value is refused too.
      const split = new Client(s.url);
      split.cookies.set('svc_session', ann.client.cookies.get('svc_session')!);
      split.cookies.set('svc_csrf', 'not-the-token');
      expectError(await split.post('/api/v1/principals', { name: 'x' }, { 'x-csrf-token': ann.client.csrf! }), 403, 'csrf_failed');
    });

    it('a GET needs no CSRF token', async () => {
      const res = await ann.client.request('GET', '/api/v1/principals', { csrf: false });
      expectStatus(res, 200);
    });
  });
});

describe.each(testEngines())('sign-up, login and logout (%s)', (engine) => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer(engine);
  });
  afterAll(async () => s?.stop());

  const email = freshEmail('Carol');

  it('sign-up answers 201, signs the new owner in, and the session works', async () => {
    const c = new Client(s.url);
    const res = await c.post('/api/v1/auth/signup', { email, password: PASSWORD, name: 'Carol' });
    expectStatus(res, 201);
    expect(res.body.principal).toMatchObject({ name: 'Carol', email: email.toLowerCase() });
    expect(res.body.principal.id).toMatch(/^pr_/);
    expect(res.body.workspace.id).toMatch(/^ws_/);
    expect(typeof res.body.workspace.slug).toBe('string');
    expect(res.body.csrf_token).toBe(c.csrf);
    expect(res.text).not.toContain(PASSWORD);
    const me = await c.get('/api/v1/me');
    expectStatus(me, 200);
    expect(me.body).toMatchObject({ id: res.body.principal.id, kind: 'human', email: email.toLowerCase(), role: 'owner' });
  });

  it('a duplicate email is 409 email_taken, whatever its case', async () => {
    expectError(await new Client(s.url).post('/api/v1/auth/signup', { email, password: PASSWORD, name: 'Again' }), 409, 'email_taken');
    expectError(await new Client(s.url).post('/api/v1/auth/signup', { email: email.toUpperCase(), password: PASSWORD, name: 'Again' }), 409, 'email_taken');
  });

  it('a weak password is 400 weak_password; a bad email or missing name is 400', async () => {
    expectError(await new Client(s.url).post('/api/v1/auth/signup', { email: freshEmail('w'), password: 'short', name: 'W' }), 400, 'weak_password');
    expectError(await new Client(s.url).post('/api/v1/auth/signup', { email: freshEmail('w'), password: 'aaaaaaaaaaaaaaa', name: 'W' }), 400, 'weak_password');
    expectError(await new Client(s.url).post('/api/v1/auth/signup', { email: 'not-an-email', password: PASSWORD, name: 'W' }), 400, 'invalid_request');
    expectError(await new Client(s.url).post('/api/v1/auth/signup', { email: freshEmail('w'), password: PASSWORD }), 400, 'invalid_request');
  });

  it('the three sign-up paths all work', async () => {
    for (const url of ['/api/v1/auth/signup', '/auth/signup', '/api/auth/signup']) {
      const c = new Client(s.url);
      const e = freshEmail('alias');
      const res = await c.post(url, { email: e, password: PASSWORD, name: 'Alias' });
      expectStatus(res, 201);
      const me = await c.get('/api/v1/me');
      expectStatus(me, 200);
      expect(me.body.email).toBe(e.toLowerCase());
      // The session is a full one: it can do an unsafe request with its CSRF token.
      expectStatus(await c.post('/api/v1/principals', { name: 'first-agent' }), 201);
    }
  });

  it('a wrong password and an unknown email are both 401 invalid_credentials with the same message', async () => {
    const wrong = await new Client(s.url).post('/api/auth/login', { email, password: 'not the password at all' });
    const unknown = await new Client(s.url).post('/api/auth/login', { email: freshEmail('nobody'), password: PASSWORD });
    expectError(wrong, 401, 'invalid_credentials');
    expectError(unknown, 401, 'invalid_credentials');
    expect(wrong.body.error.message).toBe(unknown.body.error.message);
    expect(wrong.headers.get('set-cookie')).toBeNull();
  });

  it('login works with the right password (email in any case)', async () => {
    const c = new Client(s.url);
    const res = await c.post('/api/auth/login', { email: email.toUpperCase(), password: PASSWORD });
    expectStatus(res, 200);
    expect(res.body.principal.email).toBe(email.toLowerCase());
    expect(res.body.csrf_token).toBe(c.csrf);
    expectStatus(await c.get('/api/v1/me'), 200);
  });

  it('logout ends the session: the old cookie gets 401 afterwards, other sessions live on', async () => {
    const c = new Client(s.url);
    expectStatus(await c.post('/api/auth/login', { email, password: PASSWORD }), 200);
    const other = new Client(s.url);
    expectStatus(await other.post('/api/auth/login', { email, password: PASSWORD }), 200);
    const saved = new Map(c.cookies);
    expect(saved.get('svc_session')).toBeTruthy();

    // Logout is unsafe: it needs the CSRF token too.
    expectError(await c.request('POST', '/api/auth/logout', { csrf: false }), 403, 'csrf_failed');
    const out = await c.post('/api/auth/logout');
    expectStatus(out, 200);
    expect(c.cookies.has('svc_session')).toBe(false);

    const replay = withCookies(s.url, saved);
    expectError(await replay.get('/api/v1/me'), 401, ['session_expired', 'unauthorized']);
    expectError(await replay.post('/api/v1/principals', { name: 'ghost' }), 401, ['session_expired', 'unauthorized']);
    expectError(await replay.post('/api/auth/logout'), 401, ['session_expired', 'unauthorized']);
    expectStatus(await other.get('/api/v1/me'), 200);
  });
});

describe.each(testEngines())('sign-up by invite only (%s)', (engine) => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer(engine, { SIGNUPS: 'invite' });
  });
  afterAll(async () => s?.stop());

  it('admits the very first account without an invite (bootstrap), and nobody after it', async () => {
    const first = await new Client(s.url).post('/api/v1/auth/signup', { email: freshEmail('first'), password: PASSWORD, name: 'First' });
    expect(first.status).toBe(201);
    const second = await new Client(s.url).post('/api/v1/auth/signup', { email: freshEmail('second'), password: PASSWORD, name: 'Second' });
    expectError(second, 403, 'invite_required');
  });

  it('without an invite token sign-up is 403 invite_required, on every sign-up path', async () => {
    for (const url of ['/api/v1/auth/signup', '/auth/signup', '/api/auth/signup']) {
      const res = await new Client(s.url).post(url, { email: freshEmail('inv'), password: PASSWORD, name: 'Inv' });
      expectError(res, 403, 'invite_required');
      expect(res.headers.get('set-cookie')).toBeNull();
    }
  });

  it('with an invite token that is not valid sign-up is 404 invite_not_found, and no account exists', async () => {
    const e = freshEmail('inv');
    const res = await new Client(s.url).post('/api/v1/auth/signup', { email: e, password: PASSWORD, name: 'Inv', invite_token: 'made-up-token' });
    expectError(res, 404, 'invite_not_found');
    expectError(await new Client(s.url).post('/api/auth/login', { email: e, password: PASSWORD }), 401, 'invalid_credentials');
  });
});
