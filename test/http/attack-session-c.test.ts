import { sql } from 'kysely';
import { halfSentRequest } from '../support/raw-http.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SchemaAheadError } from '../../src/store/migrate.js';
import { rebuildKeywordIndexes } from '../../src/retrieval/reindex-pages.js';
import { createTestDatabase, testEngines } from '../support/engines.js';
import { call, connectMcp, ok } from '../mcp/support.js';
import { Client, createAgentWithKey, joinAs, signupHuman, startServerOn, startTestServer, type TestServer } from '../support/server.js';

/**
 * Attacks on session C's changes (commit b376476), replayed over HTTP against a started server
 * on both engines:
 * 1. an agent key resolved in one query (grants as JSON built in SQL, the elevation and the
 *    creator's role as subqueries): every refusal on the very next request, grants carried intact;
 * 2. PostgreSQL's keyword plans from per-workspace word counts: no oracle of hidden pages or of
 *    another workspace, and no 500 for hostile queries;
 * 3. a draining node and long-polls during close; 4. DATABASE_POOL_MAX and SchemaAheadError.
 * The database is written directly only to stand in for time passing (an expiry) or for rows
 * no route can write (grants with scopes the API refuses, 20,001 sections).
 */

const PASSWORD = 'correct horse battery';
const enc = encodeURIComponent;
const HOUR = 3_600_000;

describe.each(testEngines())('attack: session C changes (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let ownerId: string;
  let slug: string;
  let wsId: string;
  let n = 0;
  const uniq = (p: string) => `${p}${++n}${Date.now().toString(36)}`;
  const db = () => s.ctx.store.db;

  beforeAll(async () => {
    s = await startTestServer(engine);
    const o = await signupHuman(s.url, 'Owner');
    owner = o.client;
    ownerId = o.id;
    slug = o.workspace.slug;
    wsId = o.workspace.id;
    expect((await owner.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
  }, 60_000);
  afterAll(async () => s?.stop());

  const page = async (c: Client, path: string, sensitivity = 'internal', body = `Text at ${sensitivity}.`) => {
    const r = await c.post('/api/v1/nodes', { path, content: `---\nsensitivity: ${sensitivity}\n---\n# P\n\n${body}\n` });
    expect(r.status, r.text).toBe(201);
    return r.body as { id: string; path: string };
  };
  const status = async (c: Client, pageId: string) => (await c.get(`/api/v1/nodes/${pageId}`)).status;

  describe('1. an agent key resolved in one query', () => {
    it('a revoked key, an expired key and a deleted agent are refused on the very next request, alike', async () => {
      const p = await page(owner, `keys/${uniq('p')}.md`);
      const agent = await createAgentWithKey(owner, [{ action: 'read', ceiling: 'internal' }]);
      const second = await owner.post(`/api/v1/principals/${agent.id}/tokens`, { name: 'second', expires_in_days: 1 });
      expect(second.status, second.text).toBe(201);
      const other = new Client(s.url, second.body.key);
      expect(await status(agent.client, p.id)).toBe(200);
      expect(await status(other, p.id)).toBe(200);

      // Revoked: the very next request fails; the agent's other key still works.
      expect((await owner.delete(`/api/v1/principals/${agent.id}/tokens/${agent.keyId}`)).status).toBe(200);
      const revoked = await agent.client.get(`/api/v1/nodes/${p.id}`);
      expect(revoked.status).toBe(401);
      expect(revoked.body.code).toBe('invalid_token');
      expect(await status(other, p.id)).toBe(200);

      // Expired (time passing, written as the clock would leave it).
      await db()
        .updateTable('agent_keys')
        .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
        .where('id', '=', second.body.id)
        .execute();
      const expired = await other.get(`/api/v1/nodes/${p.id}`);
      expect(expired.status).toBe(401);
      expect(expired.body).toEqual(revoked.body);

      // Deleted agent: a fresh key dies with it.
      const k3 = await owner.post(`/api/v1/principals/${agent.id}/tokens`, { name: 'third' });
      const third = new Client(s.url, k3.body.key);
      expect(await status(third, p.id)).toBe(200);
      expect((await owner.delete(`/api/v1/principals/${agent.id}`)).status).toBe(200);
      const gone = await third.get(`/api/v1/nodes/${p.id}`);
      expect(gone.status).toBe(401);
      expect(gone.body).toEqual(revoked.body);
    });

    it('lockdown bumps the epoch: every key of the workspace dies on the next request, its elevation is revoked, and a key minted after reaches no higher', async () => {
      const boss = await signupHuman(s.url, 'Boss');
      expect((await boss.client.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
      const secret = await page(boss.client, `vault/${uniq('s')}.md`, 'secret');
      const agent = await createAgentWithKey(boss.client, [{ action: 'read', ceiling: 'confidential' }]);
      expect((await boss.client.post('/api/v1/elevations', { agent_id: agent.id, minutes: 30, reason: 'incident' })).status).toBe(201);
      expect(await status(agent.client, secret.id)).toBe(200);
      // A key of another workspace is untouched by this lockdown.
      const mine = await createAgentWithKey(owner, [{ action: 'read', ceiling: 'internal' }]);
      expect((await mine.client.get('/api/v1/whoami')).status).toBe(200);

      const lock = await boss.client.post(`/api/v1/workspaces/${boss.workspace.slug}/lockdown`);
      expect(lock.status, lock.text).toBe(200);
      const dead = await agent.client.get(`/api/v1/nodes/${secret.id}`);
      expect(dead.status).toBe(401);
      expect(dead.body.code).toBe('invalid_token');
      expect((await mine.client.get('/api/v1/whoami')).status).toBe(200);

      expect((await boss.client.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
      const k = await boss.client.post(`/api/v1/principals/${agent.id}/tokens`, { name: 'after' });
      expect(k.status, k.text).toBe(201);
      const fresh = new Client(s.url, k.body.key);
      expect((await fresh.get('/api/v1/whoami')).body.ceiling).toBe('confidential');
      expect(await status(fresh, secret.id)).toBe(404);
    });

    it("a suspended agent (creator removed) is dead; an agent whose creator's membership vanished without a suspension can do nothing; a demotion caps the next request", async () => {
      const conf = await page(owner, `crew/${uniq('c')}.md`, 'confidential');
      const plain = await page(owner, `crew/${uniq('i')}.md`, 'internal');

      // Removed through the API: suspended, dead at once.
      const ed1 = await joinAs(owner, slug, 'editor', 'EdOne');
      const a1 = await createAgentWithKey(ed1.client, [{ action: 'read', ceiling: 'confidential' }]);
      expect(await status(a1.client, conf.id)).toBe(200);
      expect((await owner.delete(`/api/v1/workspaces/${slug}/members/${ed1.id}`)).status).toBe(200);
      expect((await a1.client.get(`/api/v1/nodes/${plain.id}`)).status).toBe(401);

      // The member row gone by other means (no suspension): creatorRole is null, so no reach at all.
      const ed2 = await joinAs(owner, slug, 'editor', 'EdTwo');
      const a2 = await createAgentWithKey(ed2.client, [
        { action: 'read', ceiling: 'confidential' },
        { action: 'write', ceiling: 'confidential' },
      ]);
      expect(await status(a2.client, plain.id)).toBe(200);
      await db().deleteFrom('members').where('workspace_id', '=', wsId).where('principal_id', '=', ed2.id).execute();
      expect(await status(a2.client, plain.id)).toBe(404);
      expect((await a2.client.get('/api/v1/whoami')).body.ceiling).toBe('public');
      const w = await a2.client.post('/api/v1/nodes', { path: `crew/${uniq('w')}.md`, content: '# W\n' });
      expect([403, 404]).toContain(w.status);

      // Demoted by hand (grants untouched): the very next request is capped at the viewer's reach.
      const ed3 = await joinAs(owner, slug, 'editor', 'EdThree');
      const a3 = await createAgentWithKey(ed3.client, [{ action: 'read', ceiling: 'confidential' }]);
      expect(await status(a3.client, conf.id)).toBe(200);
      await db().updateTable('members').set({ role: 'viewer' }).where('workspace_id', '=', wsId).where('principal_id', '=', ed3.id).execute();
      expect(await status(a3.client, conf.id)).toBe(404);
      expect(await status(a3.client, plain.id)).toBe(200);
      // Promoted back: the next request reaches confidential again (the role is read per request, not cached).
      await db().updateTable('members').set({ role: 'editor' }).where('workspace_id', '=', wsId).where('principal_id', '=', ed3.id).execute();
      expect(await status(a3.client, conf.id)).toBe(200);
    });

    it("an elevation that was revoked or has expired never widens the agent's ceiling, whatever its expires_at says", async () => {
      const secret = await page(owner, `elev/${uniq('s')}.md`, 'secret');
      const agent = await createAgentWithKey(owner, [{ action: 'read', ceiling: 'confidential' }]);
      expect(await status(agent.client, secret.id)).toBe(404);
      const e1 = await owner.post('/api/v1/elevations', { agent_id: agent.id, minutes: 5, reason: 'one' });
      expect(e1.status, e1.text).toBe(201);
      expect(await status(agent.client, secret.id)).toBe(200);
      expect((await agent.client.get('/api/v1/whoami')).body.ceiling).toBe('secret');

      // Revoked, with an expiry far in the future: not elevated on the next request.
      await db()
        .updateTable('elevations')
        .set({ revoked_at: new Date().toISOString(), expires_at: new Date(Date.now() + 24 * HOUR).toISOString() })
        .where('id', '=', e1.body.id)
        .execute();
      expect(await status(agent.client, secret.id)).toBe(404);
      expect((await agent.client.get('/api/v1/whoami')).body.ceiling).toBe('confidential');

      // A new one works; once expired, the next request is back to confidential.
      const e2 = await owner.post('/api/v1/elevations', { agent_id: agent.id, minutes: 5, reason: 'two' });
      expect(e2.status, e2.text).toBe(201);
      expect(await status(agent.client, secret.id)).toBe(200);
      await db()
        .updateTable('elevations')
        .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
        .where('id', '=', e2.body.id)
        .execute();
      expect(await status(agent.client, secret.id)).toBe(404);
      // An elevation of another agent says nothing about this one.
      const twin = await createAgentWithKey(owner, [{ action: 'read', ceiling: 'confidential' }]);
      expect((await owner.post('/api/v1/elevations', { agent_id: twin.id, minutes: 5, reason: 'twin' })).status).toBe(201);
      expect(await status(twin.client, secret.id)).toBe(200);
      expect(await status(agent.client, secret.id)).toBe(404);
    });

    it('grants changed between two requests: the very next request sees the change, including no grants at all', async () => {
      const alpha = await page(owner, `alpha${n}/${uniq('a')}.md`);
      const beta = await page(owner, `beta${n}/${uniq('b')}.md`);
      const alphaSpace = alpha.path.split('/')[0]!;
      const betaSpace = beta.path.split('/')[0]!;
      const agent = await createAgentWithKey(owner, [{ action: 'read', scope: alphaSpace, ceiling: 'internal' }]);
      expect(await status(agent.client, alpha.id)).toBe(200);
      expect(await status(agent.client, beta.id)).toBe(404);

      const put = async (grants: { action: string; scope: string; ceiling: string }[]) => {
        const r = await owner.put(`/api/v1/principals/${agent.id}/grants`, { grants });
        expect(r.status, r.text).toBe(200);
      };
      await put([{ action: 'read', scope: betaSpace, ceiling: 'internal' }]);
      expect(await status(agent.client, alpha.id)).toBe(404);
      expect(await status(agent.client, beta.id)).toBe(200);

      await put([]);
      const who = await agent.client.get('/api/v1/whoami');
      expect(who.status).toBe(200);
      expect(who.body.grants).toEqual([]);
      expect(await status(agent.client, beta.id)).toBe(404);
      const search = await agent.client.get('/api/v1/search?q=text&mode=fts');
      expect(search.status).not.toBe(500);
      if (search.status === 200) expect(search.body.results).toEqual([]);

      // An agent created with no grants resolves as well.
      const none = await createAgentWithKey(owner, []);
      const w = await none.client.get('/api/v1/whoami');
      expect(w.status, w.text).toBe(200);
      expect(w.body.grants).toEqual([]);
      expect(await status(none.client, alpha.id)).toBe(404);
    });

    it('grants come back in their stored order, and the best matching grant decides (not the first)', async () => {
      const home = `ord${uniq('s')}`;
      const inHome = await page(owner, `${home}/p.md`, 'internal');
      const elsewhere = await page(owner, `else${uniq('s')}/p.md`, 'internal');
      const grants = [
        { action: 'search', scope: home, ceiling: 'public' },
        { action: 'read', scope: '*', ceiling: 'public' },
        { action: 'propose', scope: `${home}/sub`, ceiling: 'internal' },
        { action: 'read', scope: home, ceiling: 'internal' },
        { action: 'collab', scope: '*', ceiling: 'internal' },
      ];
      const agent = await createAgentWithKey(owner, grants);
      expect((await agent.client.get('/api/v1/whoami')).body.grants).toEqual(grants);
      // read * public comes first; read <home> internal still lets it read the internal page there.
      expect(await status(agent.client, inHome.id)).toBe(200);
      expect(await status(agent.client, elsewhere.id)).toBe(404);
      // Reversed order: same answers, grants listed reversed.
      const reversed = [...grants].reverse();
      expect((await owner.put(`/api/v1/principals/${agent.id}/grants`, { grants: reversed })).status).toBe(200);
      expect((await agent.client.get('/api/v1/whoami')).body.grants).toEqual(reversed);
      expect(await status(agent.client, inHome.id)).toBe(200);
      expect(await status(agent.client, elsewhere.id)).toBe(404);
    });

    it('scopes in other scripts travel intact through the JSON built in SQL; scopes with quotes, commas, brackets or backslashes are refused by the API', async () => {
      for (const space of ['Ünïcødé', '日本語', 'Ελληνικά', 'مرحبا', '𝒜𝓈𝓉𝓇𝒶𝓁']) {
        const p = await page(owner, `${space}/${uniq('p')}.md`);
        const out = await page(owner, `plain${uniq('o')}/p.md`);
        const grants = [
          { action: 'read', scope: space, ceiling: 'internal' },
          { action: 'search', scope: `${space}/sub`, ceiling: 'public' },
        ];
        const agent = await createAgentWithKey(owner, grants);
        expect((await agent.client.get('/api/v1/whoami')).body.grants, space).toEqual(grants);
        expect(await status(agent.client, p.id), space).toBe(200);
        expect(await status(agent.client, out.id), space).toBe(404);
      }
      const agent = await createAgentWithKey(owner, []);
      for (const scope of ['a"b', 'x,y', '[z]', 'back\\slash', "it's", '"],["admin","*","secret', 'a/"b', 'sp ace', '{"a":1}']) {
        const r = await owner.put(`/api/v1/principals/${agent.id}/grants`, { grants: [{ action: 'read', scope, ceiling: 'internal' }] });
        expect(r.status, `${scope}: ${r.text}`).toBe(400);
      }
    });

    it('grants stored with hostile scopes (rows no route writes) come back exactly as stored and never become other grants', async () => {
      const agent = await createAgentWithKey(owner, [{ action: 'read', scope: 'x', ceiling: 'public' }]);
      const scopes = [
        'we"ird',
        'com,ma',
        '[br]ack]',
        'back\\slash\\',
        '\\"',
        '"],["admin","*","secret',
        '\'),("admin","*","secret',
        '{"a":[1,2]}',
        'tab\there\nline',
        'ctl\u0001\u001f\u007f\u0085',
        'emoji 🔥 and \u2028 sep',
        'null',
      ];
      await db().deleteFrom('grants').where('principal_id', '=', agent.id).execute();
      await db()
        .insertInto('grants')
        // Written last position first: only `order by position` gives them back in their order.
        .values(
          scopes.map((scope, i) => ({ principal_id: agent.id, position: i, action: i % 2 === 0 ? 'read' : 'search', scope, ceiling: 'internal' })).reverse(),
        )
        .execute();
      const who = await agent.client.get('/api/v1/whoami');
      expect(who.status, who.text).toBe(200);
      const back = who.body.grants as { action: string; scope: string; ceiling: string }[];
      // Byte for byte, in their stored order.
      expect(back.map((g) => g.scope)).toEqual(scopes);
      expect(back.map((g) => g.action)).toEqual(scopes.map((_, i) => (i % 2 === 0 ? 'read' : 'search')));
      expect(back.every((g) => g.ceiling === 'internal')).toBe(true);
      expect(back.some((g) => g.action === 'admin' || g.scope === '*')).toBe(false);
      // No reach was smuggled in: nothing is readable, nothing is administrable.
      const p = await page(owner, `inj${uniq('s')}/p.md`, 'public');
      expect(await status(agent.client, p.id)).toBe(404);
      expect((await agent.client.post('/api/v1/spaces', { id: uniq('sp'), name: 'X' })).status).toBe(403);
    });

    it('an IP-pinned key answers only from its address (IPv4 and the IPv4-mapped IPv6 form), with the same refusal', async () => {
      const p = await page(owner, `pin/${uniq('p')}.md`);
      const agent = await createAgentWithKey(owner, [{ action: 'read', ceiling: 'internal' }], { key: { ip_pin: '10.9.8.7' } });
      const r = await agent.client.get(`/api/v1/nodes/${p.id}`);
      expect(r.status).toBe(401);
      expect(r.body.code).toBe('invalid_token');
      // X-Forwarded-For is not trusted by default: it cannot claim the pinned address.
      expect((await agent.client.get(`/api/v1/nodes/${p.id}`, { 'x-forwarded-for': '10.9.8.7' })).status).toBe(401);
      for (const pin of ['127.0.0.1', '::ffff:127.0.0.1']) {
        const k = await owner.post(`/api/v1/principals/${agent.id}/tokens`, { name: 'pinned', ip_pin: pin });
        expect(k.status, k.text).toBe(201);
        expect(await status(new Client(s.url, k.body.key), p.id), pin).toBe(200);
      }
    });

    it("MCP: servers reused between calls never carry one key's grants, elevation or life into the next call", async () => {
      const secret = await page(owner, `mcpv/${uniq('s')}.md`, 'secret');
      const plain = await page(owner, `mcpv/${uniq('i')}.md`, 'internal');
      const a = await createAgentWithKey(owner, [{ action: 'read', ceiling: 'confidential' }], { name: 'mcp-a' });
      const b = await createAgentWithKey(owner, [{ action: 'search', ceiling: 'internal' }], { name: 'mcp-b' });
      const ma = await connectMcp(s.url, a.key);
      const mb = await connectMcp(s.url, b.key);
      try {
        // Alternating calls land on the same pooled servers: each answers for its own caller.
        for (let i = 0; i < 3; i++) {
          expect((await ok(ma, 'context_whoami')).id).toBe(a.id);
          expect((await ok(mb, 'context_whoami')).id).toBe(b.id);
          expect((await call(ma, 'context_get', { id: plain.id })).isError).toBe(false);
          expect((await call(mb, 'context_get', { id: plain.id })).isError).toBe(true);
        }
        // Elevated: a reads the secret page on the next call; b, on the same servers, does not.
        const el = await owner.post('/api/v1/elevations', { agent_id: a.id, minutes: 5, reason: 'mcp' });
        expect(el.status, el.text).toBe(201);
        expect((await call(ma, 'context_get', { id: secret.id })).isError).toBe(false);
        expect((await call(mb, 'context_get', { id: secret.id })).isError).toBe(true);
        await db()
          .updateTable('elevations')
          .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
          .where('id', '=', el.body.id)
          .execute();
        expect((await call(ma, 'context_get', { id: secret.id })).isError).toBe(true);
        // Grants taken away: the next call is refused.
        expect((await owner.put(`/api/v1/principals/${a.id}/grants`, { grants: [] })).status).toBe(200);
        expect((await call(ma, 'context_get', { id: plain.id })).isError).toBe(true);
        expect((await ok(ma, 'context_whoami')).grants).toEqual([]);
        // Revoked: the next call fails at the transport (401); b's key is untouched.
        expect((await owner.delete(`/api/v1/principals/${a.id}/tokens/${a.keyId}`)).status).toBe(200);
        await expect(ma.callTool({ name: 'context_whoami', arguments: {} })).rejects.toThrow();
        expect((await ok(mb, 'context_whoami')).id).toBe(b.id);
      } finally {
        await ma.close().catch(() => undefined);
        await mb.close();
      }
    });

    it('a key presented for another workspace is refused before anything of that workspace is read', async () => {
      const other = await signupHuman(s.url, 'Other');
      const agent = await createAgentWithKey(owner, [{ action: 'read', ceiling: 'internal' }]);
      const r = await agent.client.get('/api/v1/whoami', { 'x-service-workspace': other.workspace.slug });
      expect(r.status).toBe(404);
      expect(r.body.code).toBe('workspace_not_found');
      expect((await agent.client.get('/api/v1/whoami', { 'x-service-workspace': slug })).status).toBe(200);
      expect(ownerId).toBeTruthy();
    });
  });

  describe('2. search plans are no oracle; hostile queries are no 500', () => {
    let viewer: Client;
    let scoped: Client;
    const hiddenPaths = new Set<string>();
    let bSlugPage: { id: string } | undefined;
    let bClient: Client;

    beforeAll(async () => {
      viewer = (await joinAs(owner, slug, 'viewer', 'Vi')).client;
      // Visible pages: two words in opposite weights, so a scored ranking has a clear order.
      await page(owner, 'orc/heavy-korrigan.md', 'internal', 'korrigan korrigan korrigan korrigan wyvernel.');
      await page(owner, 'orc/heavy-wyvernel.md', 'internal', 'wyvernel wyvernel wyvernel wyvernel korrigan.');
      for (let i = 0; i < 3; i++) await page(owner, `orc/filler-${i}.md`, 'internal', `korrigan once in filler ${i}.`);
      for (let i = 0; i < 3; i++) await page(owner, `orcb/filler-${i}.md`, 'internal', `wyvernel once in the other filler ${i}.`);
      const s1 = await page(owner, 'orcvault/s.md', 'secret', 'korrigan wyvernel zanthoric, the secret.');
      hiddenPaths.add(s1.path);
      const agent = await createAgentWithKey(owner, [
        { action: 'search', scope: 'orc', ceiling: 'internal' },
        { action: 'read', scope: 'orc', ceiling: 'internal' },
      ]);
      scoped = agent.client;
      const b = await signupHuman(s.url, 'Bea');
      bClient = b.client;
      bSlugPage = await page(bClient, 'bwords/p.md', 'internal', 'korrigan wyvernel in workspace B.');
    }, 60_000);

    const observe = async () => {
      const out: unknown[] = [];
      for (const [c, q, mode] of [
        [viewer, 'korrigan wyvernel', 'fts'],
        [viewer, 'korrigan', 'fts'],
        [viewer, 'wyvernel zanthoric', 'fts'],
        [viewer, 'the korrigan', 'fts'],
        [scoped, 'korrigan wyvernel', 'fts'],
        [scoped, 'wyvernel', 'fts'],
        [owner, 'korrigan wyvernel', 'fts'],
      ] as const) {
        const r = await c.get(`/api/v1/search?q=${enc(q)}&mode=${mode}&limit=20`);
        expect(r.status, r.text).toBe(200);
        out.push({ q, mode, results: r.body.results.map((h: { path: string; score: number }) => [h.path, h.score]) });
      }
      const bundle = await viewer.get(`/api/v1/bundle?intent=${enc('korrigan wyvernel')}&budget_tokens=2000`);
      expect(bundle.status, bundle.text).toBe(200);
      out.push(bundle.body.sections.map((x: { path: string; heading: string }) => [x.path, x.heading]));
      return out;
    };

    it('the scored order is the one expected (the premise of the oracle test)', async () => {
      const r = await viewer.get('/api/v1/search?q=korrigan%20wyvernel&mode=fts&limit=20');
      // Any word ranks (issue 20): the two pages holding both words first, then those holding one.
      expect(
        r.body.results
          .map((h: { path: string }) => h.path)
          .slice(0, 2)
          .sort(),
      ).toEqual(['orc/heavy-korrigan.md', 'orc/heavy-wyvernel.md']);
      expect(r.body.results.map((h: { score: number }) => h.score).slice(0, 2)).toEqual([1, 0.5]);
      expect(r.body.results).toHaveLength(8);
      // The owner sees the secret page too; the viewer and the scoped agent never.
      const o = await owner.get('/api/v1/search?q=korrigan%20wyvernel&mode=fts&limit=20');
      expect(o.body.results.map((h: { path: string }) => h.path)).toContain('orcvault/s.md');
    });

    // PostgreSQL only: its word counts are what this attacks (SQLite's have their own tests).
    if (engine === 'postgres')
      it('PostgreSQL: 20,001 hidden sections (secret, and in another workspace) holding the words move nothing a viewer, a scoped agent or the other workspace sees', async () => {
        const before = await observe();
        const bBefore = (await bClient.get('/api/v1/search?q=korrigan%20wyvernel&mode=fts')).body.results;
        const secret = await db()
          .selectFrom('pages')
          .select('id')
          .where('workspace_id', '=', wsId)
          .where('path', '=', 'orcvault/s.md')
          .executeTakeFirstOrThrow();
        // Rows no route can write this fast: copies of the page's first section holding both words,
        // at its level, then the word statistics counted again from the sections, as a restore does.
        const fill = async (pageId: string) =>
          sql`insert into page_sections (workspace_id, page_id, ord, title, heading, heading_level, text, block_level, level)
              select workspace_id, page_id, 1000 + g, title, heading, heading_level, 'korrigan wyvernel hidden copy ' || g, block_level, level
              from page_sections, generate_series(1, 20001) g
              where id = (select min(id) from page_sections where page_id = ${pageId})`.execute(db());
        await fill(secret.id);
        await fill(bSlugPage!.id);
        await rebuildKeywordIndexes(db());
        const after = await observe();
        // The owner sees the secret sections: for them both words are now common, and the plan
        // ranks the newest matches unscored (the secret page's copies first). That plan for the
        // viewer would put heavy-wyvernel (newer) before heavy-korrigan, which tie on ts_rank_cd.
        const ownerAfter = (after[6] as { results: [string, number][] }).results;
        expect(ownerAfter[0]![0]).toBe('orcvault/s.md');
        // Any word ranks (issue 20): the two pages holding both words first, then the fillers.
        expect((before[0] as { results: [string, number][] }).results.map(([p]) => p).slice(0, 2)).toEqual(['orc/heavy-korrigan.md', 'orc/heavy-wyvernel.md']);
        // Everyone else: byte for byte the same answers.
        expect(after.slice(0, 6)).toEqual(before.slice(0, 6));
        expect(after[7]).toEqual(before[7]);
        expect((await bClient.get('/api/v1/search?q=korrigan%20wyvernel&mode=fts')).body.results.length).toBeGreaterThan(0);
        expect(bBefore.length).toBe(1);
        // Workspace A's owner sees nothing of B, B's owner nothing of A.
        expect(ownerAfter.some(([p]) => p.startsWith('bwords/'))).toBe(false);
        const bAfter = (await bClient.get('/api/v1/search?q=korrigan%20wyvernel&mode=fts&limit=50')).body.results as { path: string }[];
        expect(bAfter.every((h) => h.path === 'bwords/p.md')).toBe(true);
      }, 60_000);

    const hostile: [string, string][] = [
      ['dquote', enc('"')],
      ['squote', enc("'")],
      ['backslash', enc('\\')],
      ['operators', enc('&|!:*()')],
      ['tsquery', enc("korrigan & !wyvernel | (foo:* <-> bar:A) ''")],
      ['fts5', enc('NEAR(korrigan wyvernel) OR "x" AND -y ^z col:w*')],
      ['nul', '%00korrigan%00'],
      ['lone surrogate (utf-8 form)', '%ED%A0%80korrigan'],
      ['invalid utf-8', '%FF%FE%C3'],
      ['percent u', '%uD800'],
      ['32+ terms', enc(Array.from({ length: 40 }, (_, i) => `term${i}`).join(' '))],
      ['40 copies', enc('korrigan '.repeat(40))],
      ['digits', enc('1234567890 42 007 3.14159 0x1F')],
      ['scripts', enc('日本語 検索 поиск بحث חיפוש ค้นหา 검색 αναζήτηση')],
      ['long term', enc('k'.repeat(5000).slice(0, 3900))],
      ['long accented', enc('ö'.repeat(1500))],
      ['marks', enc('e\u0301'.repeat(500))],
      ['emoji', enc('🔥🔥 korrigan 👩‍👩‍👧')],
      ['stop words', enc('the and of to a in')],
      ['10 KB', enc('korrigan '.repeat(1200))],
    ];

    it('hostile queries: never a 500 on search (fts, hybrid) or the bundle, and never a hidden page', async () => {
      for (const [name, q] of hostile) {
        for (const mode of ['fts', 'hybrid', 'vector']) {
          const r = await viewer.get(`/api/v1/search?q=${q}&mode=${mode}&limit=50`);
          expect([200, 400], `${name} ${mode}: ${r.status} ${r.text.slice(0, 300)}`).toContain(r.status);
          if (r.status === 200) for (const h of r.body.results as { path: string }[]) expect(hiddenPaths.has(h.path), `${name}: ${h.path}`).toBe(false);
          if (r.status === 400) expect(typeof r.body.code).toBe('string');
        }
        const b = await viewer.get(`/api/v1/bundle?intent=${q}&budget_tokens=1000`);
        expect([200, 400], `${name} bundle: ${b.status} ${b.text.slice(0, 300)}`).toContain(b.status);
        if (b.status === 200) for (const x of b.body.sections as { path: string }[]) expect(hiddenPaths.has(x.path)).toBe(false);
        const a = await scoped.get(`/api/v1/search?q=${q}&mode=fts&limit=50`);
        expect([200, 400], `${name} scoped: ${a.status} ${a.text.slice(0, 300)}`).toContain(a.status);
        if (a.status === 200) for (const h of a.body.results as { path: string }[]) expect(h.path.startsWith('orc/'), h.path).toBe(true);
      }
      // The 10 KB query is refused as too long, not cut silently into a 500.
      expect((await viewer.get(`/api/v1/search?q=${hostile.at(-1)![1]}&mode=fts`)).status).toBe(400);
      // JSON bodies carry lone surrogates and NUL as such.
      for (const intent of ['\ud800korrigan', 'korrigan\u0000wyvernel', '\udfff\ud800', '\\u0000']) {
        const r = await viewer.post('/api/v1/bundle', { intent, budget_tokens: 500 });
        expect([200, 400], `${JSON.stringify(intent)}: ${r.status} ${r.text.slice(0, 300)}`).toContain(r.status);
      }
    }, 60_000);

    it("a word only in hidden pages or in another workspace: the viewer's any-word fallback and its scores stay the same (any engine)", async () => {
      // `zanthoric` is only in the secret page: to the viewer it is in no section, like a
      // misspelling, so the any-word fallback runs and is `weak`. Hidden pages and workspace B
      // then use it often; what the viewer gets must not move.
      const fts = async () =>
        (await viewer.get(`/api/v1/search?q=${enc('wyvernel zanthoric')}&mode=fts&limit=20`)).body.results.map((h: { path: string; score: number }) => [
          h.path,
          h.score,
        ]);
      const hybridPaths = async () =>
        (await viewer.get(`/api/v1/search?q=${enc('wyvernel zanthoric')}&mode=hybrid&limit=20`)).body.results.map((h: { path: string }) => h.path).sort();
      const ftsBefore = await fts();
      const hybridBefore = await hybridPaths();
      expect(ftsBefore.length).toBeGreaterThan(0);
      for (let i = 0; i < 15; i++) {
        await page(owner, `orcvault/z${i}.md`, 'secret', `zanthoric wyvernel ${i}.`);
        hiddenPaths.add(`orcvault/z${i}.md`);
      }
      for (let i = 0; i < 15; i++) await page(bClient, `bz/z${i}.md`, 'internal', `zanthoric wyvernel in B ${i}.`);
      expect(await fts()).toEqual(ftsBefore);
      // The vector list may change as the new pages are embedded (it never holds them for the
      // viewer): the hybrid answer keeps its pages.
      expect(await hybridPaths()).toEqual(hybridBefore);
      expect((await owner.get(`/api/v1/search?q=zanthoric&mode=fts&limit=50`)).body.results.length).toBeGreaterThanOrEqual(16);
    });
  });

  describe('4. schema ahead and pool size', () => {
    it('a second node over a database a newer version migrated refuses to start; the running node keeps serving', async () => {
      await sql`insert into schema_migrations (name, applied_at) values ('999_from_the_future', ${new Date().toISOString()})`.execute(db());
      try {
        const cfg = s.ctx.config;
        const second = startServerOn({ dataDir: cfg.dataDir, databaseUrl: cfg.databaseUrl });
        await expect(second).rejects.toBeInstanceOf(SchemaAheadError);
        await expect(second).rejects.toThrow(/999_from_the_future/);
        expect((await owner.get('/api/v1/whoami')).status).toBe(200);
      } finally {
        await sql`delete from schema_migrations where name = '999_from_the_future'`.execute(db());
      }
    });
  });
});

describe.each(testEngines())('attack: pool, draining and long-polls during close (%s)', (engine) => {
  it('DATABASE_POOL_MAX outside 2 to 1000 (or not a whole number) is refused at start', async () => {
    const tdb = await createTestDatabase(engine);
    try {
      await expect(startServerOn(tdb, { DATABASE_POOL_MAX: '1' })).rejects.toThrow(/DATABASE_POOL_MAX/);
      await expect(startServerOn(tdb, { DATABASE_POOL_MAX: 'lots' })).rejects.toThrow(/DATABASE_POOL_MAX/);
      await expect(startServerOn(tdb, { DATABASE_POOL_MAX: '1001' })).rejects.toThrow(/DATABASE_POOL_MAX/);
      await expect(startServerOn(tdb, { DATABASE_POOL_MAX: '2.5' })).rejects.toThrow(/DATABASE_POOL_MAX/);
    } finally {
      await tdb.cleanup();
    }
  });

  it('a draining node answers its probes and every face with 503, never a 500 (/readyz is what a load balancer polls)', async () => {
    const tdb = await createTestDatabase(engine);
    const s = await startServerOn(tdb);
    try {
      const h = await signupHuman(s.url, 'Probe');
      const agent = await createAgentWithKey(h.client, [{ action: 'read' }]);
      const heads: Record<string, string> = {
        readyz: 'GET /readyz HTTP/1.1\r\n',
        healthz: 'GET /healthz HTTP/1.1\r\n',
        api: `GET /api/v1/whoami HTTP/1.1\r\nAuthorization: Bearer ${agent.key}\r\n`,
        mcp: `POST /mcp HTTP/1.1\r\nAuthorization: Bearer ${agent.key}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 2\r\n`,
        git: `GET /git/${h.workspace.slug}.git/info/refs?service=git-upload-pack HTTP/1.1\r\n`,
        web: 'GET / HTTP/1.1\r\n',
      };
      const open = await Promise.all(Object.entries(heads).map(async ([k, head]) => ({ k, req: await halfSentRequest(s.url, head) })));
      await new Promise((r) => setTimeout(r, 100));
      const closing = s.close({ graceMs: 5_000 });
      await new Promise((r) => setTimeout(r, 100));
      for (const o of open) o.req.finish(o.k === 'mcp' ? '\r\n{}' : '\r\n');
      await Promise.all(open.map((o) => o.req.ended));
      await closing;
      const raw: Record<string, string> = Object.fromEntries(open.map((o) => [o.k, o.req.text()]));
      const statusOf = (k: string) => Number(/^HTTP\/1\.1 (\d+)/.exec(raw[k]!)?.[1]);
      const got = Object.fromEntries(Object.keys(heads).map((k) => [k, statusOf(k)]));
      // Found by attack (session C), fixed: /readyz answered 500 (its schema had no room for the
      // drain's error body); it now answers 503 in its own shape, and every 503 says Retry-After.
      expect(got, `statuses while draining; /readyz said: ${raw.readyz!.slice(raw.readyz!.indexOf('\r\n\r\n') + 4, 400)}`).toEqual({
        readyz: 503,
        healthz: 503,
        api: 503,
        mcp: 503,
        git: 503,
        web: 503,
      });
      for (const k of Object.keys(heads).filter((x) => x !== 'readyz')) expect(raw[k], k).toMatch(/\r\nretry-after: [1-9][0-9]*\r\n/i);
      expect(JSON.parse(raw.readyz!.slice(raw.readyz!.indexOf('\r\n\r\n') + 4))).toMatchObject({ status: 'unavailable' });
    } finally {
      await s.close();
      await tdb.cleanup();
    }
  }, 60_000);

  it('with a pool of 2, long-polls hold no connection: other requests answer while they wait; at close the polls end empty and a late request gets 503 unavailable', async () => {
    const tdb = await createTestDatabase(engine);
    const s = await startServerOn(tdb, { DATABASE_POOL_MAX: '2' });
    let stopped = false;
    try {
      const h = await signupHuman(s.url, 'Poller');
      const agent = await createAgentWithKey(h.client, [
        { action: 'read', ceiling: 'internal' },
        { action: 'collab', ceiling: 'internal' },
        { action: 'search', ceiling: 'internal' },
      ]);
      // An MCP long-poll too (collab_inbox wait_s): it must end with an answer, not a cut connection.
      const mcp = await connectMcp(s.url, agent.key);
      const mcpPoll = mcp.callTool({ name: 'collab_inbox', arguments: { wait_s: 20 } }, undefined, { timeout: 60_000 });
      let pollsDone = 0;
      const polls = Array.from({ length: 4 }, (_, i) =>
        (i % 2 === 0 ? h.client : agent.client).get('/api/v1/inbox?wait=25').then((r) => {
          pollsDone++;
          return r;
        }),
      );
      // Ten requests that each need the database, while four long-polls wait.
      const others = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          i % 2 === 0 ? agent.client.get('/api/v1/whoami') : h.client.post('/api/v1/nodes', { path: `p/x${i}.md`, content: `# X ${i}\n\nbody\n` }),
        ),
      );
      expect(others.map((r) => r.status)).toEqual(Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? 200 : 201)));
      expect(pollsDone).toBe(0);

      // A request whose headers finish after close began gets the service's 503.
      const req = await halfSentRequest(s.url, `GET /api/v1/whoami HTTP/1.1\r\nAuthorization: Bearer ${agent.key}\r\n`);
      // Both the polls and the half-sent request are in the server before it begins closing.
      await new Promise((r) => setTimeout(r, 100));
      const closing = s.close({ graceMs: 10_000 });
      await new Promise((r) => setTimeout(r, 100));
      req.finish();
      const answers = await Promise.all(polls);
      for (const r of answers) {
        expect(r.status, r.text).toBe(200);
        expect(r.body.events).toEqual([]);
      }
      const mcpAnswer = await mcpPoll;
      expect(mcpAnswer.isError ?? false, JSON.stringify(mcpAnswer)).toBe(false);
      expect(JSON.parse((mcpAnswer.content as { text: string }[])[0]!.text).events).toEqual([]);
      await req.ended;
      await closing;
      stopped = true;
      await mcp.close().catch(() => undefined);
      const raw = req.text();
      expect(raw).toMatch(/^HTTP\/1\.1 503 /);
      expect(JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)).error.code).toBe('unavailable');
    } finally {
      if (!stopped) await s.close();
      await tdb.cleanup();
    }
  }, 60_000);
});
