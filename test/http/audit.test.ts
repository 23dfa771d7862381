import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { expectError, expectStatus } from '../support/expect.js';
import { Client, createAgentWithKey, joinAs, startTestServer, type TestServer } from '../support/server.js';
import type { AuditEntryRecord } from '../../src/core/audit.js';

/**
 * The audit log over REST (issue 16): an owner reads the workspace's hash chain newest first,
 * filtered by principal, action (exact or prefix) and page, page by page with a cursor; editors
 * and agents are refused; the verification walks the chain, and a row changed or removed
 * behind the service's back is named.
 */

const PASSWORD = 'correct horse battery';

/** The record REST answers, as core presents it. */
type Entry = AuditEntryRecord;

describe.each(testEngines())('audit log over REST (%s)', (engine) => {
  let s: TestServer;
  let n = 0;

  /** A fresh human with a known email (the login test signs in again). */
  const signup = async (name: string) => {
    const client = new Client(s.url);
    const email = `${name.toLowerCase()}-${process.pid}-${++n}-${Date.now()}@example.com`;
    const res = await client.post('/api/v1/auth/signup', { email, password: PASSWORD, name });
    expectStatus(res, 201);
    return { client, email, id: res.body.principal.id as string, workspace: res.body.workspace as { id: string; slug: string } };
  };
  const createPage = async (c: Client, path: string) => {
    const res = await c.post('/api/v1/nodes', { path, content: `# ${path}\n\nText.\n` });
    expectStatus(res, 201);
    return res.body as { id: string; path: string };
  };
  const list = async (c: Client, query = '') => {
    const res = await c.get(`/api/v1/audit${query ? `?${query}` : ''}`);
    expectStatus(res, 200);
    return res.body as { items: Entry[]; next_cursor: string | null };
  };
  const verify = async (c: Client) => {
    const res = await c.get('/api/v1/audit/verify');
    expectStatus(res, 200);
    return res.body as { ok: boolean; entries: number; first_broken: { seq: number; at: string; action: string } | null };
  };

  let owner: Awaited<ReturnType<typeof signup>>;
  let editor: { client: Client; id: string };
  let agent: { id: string; client: Client };
  let pageA: { id: string; path: string };
  let pageB: { id: string; path: string };

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = await signup('Olga');
    editor = await joinAs(owner.client, owner.workspace.slug, 'editor', 'Eddie');
    agent = await createAgentWithKey(
      owner.client,
      [
        { action: 'read', ceiling: 'internal' },
        { action: 'write', ceiling: 'internal' },
      ],
      { name: 'scribe' },
    );
    pageA = await createPage(owner.client, 'eng/a.md');
    expectStatus(await owner.client.put(`/api/v1/nodes/${pageA.id}`, { content: '# A\n\nChanged.\n' }), 200);
    pageB = await createPage(agent.client, 'eng/b.md');
    // A watch made and removed: both are audited against the page.
    const w = await owner.client.put('/api/v1/watches', { node_id: pageA.id });
    expectStatus(w, 200);
    expectStatus(await owner.client.delete(`/api/v1/watches/${w.body.watch.id}`), 200);
    // A second sign-in of the owner, then its logout.
    const second = new Client(s.url);
    expectStatus(await second.post('/api/auth/login', { email: owner.email, password: PASSWORD }), 200);
    expectStatus(await second.post('/api/auth/logout'), 200);
  }, 120_000);
  afterAll(async () => s?.stop());

  it('lists entries newest first, each with actor, target, parsed detail and the hashes that chain them', async () => {
    const { items, next_cursor } = await list(owner.client, 'limit=500');
    expect(next_cursor).toBeNull();
    const seqs = items.map((e) => e.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => b - a));
    expect(seqs.at(-1)).toBe(1);
    for (const [i, e] of items.entries()) {
      expect(e.hash).toMatch(/^[0-9a-f]{64}$/);
      expect(e.prev_hash).toMatch(/^[0-9a-f]{64}$/);
      // Consecutive entries: each names its predecessor's hash.
      const older = items[i + 1];
      if (older) expect(e.prev_hash).toBe(older.hash);
      else expect(e.prev_hash).toBe('0'.repeat(64));
      expect(Number.isNaN(Date.parse(e.at))).toBe(false);
    }
    expect(items.at(-1)).toMatchObject({ action: 'account.signup', actor: { id: owner.id, kind: 'human', name: 'Olga' } });

    const created = items.find((e) => e.action === 'page.create' && e.target?.node_id === pageA.id);
    expect(created).toMatchObject({
      actor: { id: owner.id, kind: 'human', name: 'Olga' },
      target: { node_id: pageA.id, path: 'eng/a.md' },
      detail: { path: 'eng/a.md', commit: expect.stringMatching(/^[0-9a-f]{40}$/) },
    });
    const byAgent = items.find((e) => e.action === 'page.create' && e.target?.node_id === pageB.id);
    expect(byAgent?.actor).toEqual({ id: agent.id, kind: 'agent', name: 'scribe' });
    // Entries without a page or path have no target; their detail is still parsed.
    const minted = items.find((e) => e.action === 'agent.key.mint');
    expect(minted).toMatchObject({ target: null, detail: { agent: agent.id } });
  });

  it('records sign-ins, sign-outs and watches, not only page changes', async () => {
    const actions = (await list(owner.client, 'limit=500')).items.map((e) => e.action);
    expect(actions).toEqual(
      expect.arrayContaining(['auth.session.open', 'auth.logout', 'watch.create', 'watch.delete', 'invite.create', 'invite.accept', 'agent.create']),
    );
    // Ending another of one's sessions is audited too.
    const third = new Client(s.url);
    const login = await third.post('/api/auth/login', { email: owner.email, password: PASSWORD });
    expectStatus(login, 200);
    const sessions = await owner.client.get('/api/auth/sessions');
    expectStatus(sessions, 200);
    const other = (sessions.body.sessions as { id: string; current: boolean }[]).find((x) => !x.current);
    expect(other).toBeDefined();
    expectStatus(await owner.client.delete(`/api/auth/sessions/${other!.id}`), 200);
    const revoked = (await list(owner.client, 'action=auth.session.revoke')).items;
    expect(revoked[0]).toMatchObject({ actor: { id: owner.id }, detail: { session: other!.id } });
  });

  it('filters by principal, by exact action, by action prefix and by page', async () => {
    const mine = (await list(owner.client, `principal=${agent.id}`)).items;
    expect(mine.length).toBeGreaterThan(0);
    expect(mine.every((e) => e.actor?.id === agent.id)).toBe(true);
    expect(mine.map((e) => e.action)).toContain('page.create');

    const updates = (await list(owner.client, 'action=page.update')).items;
    expect(updates.length).toBe(1);
    expect(updates[0]).toMatchObject({ action: 'page.update', target: { node_id: pageA.id } });

    const all = (await list(owner.client, 'limit=500')).items;
    const pageEntries = all.filter((e) => e.action.startsWith('page.')).map((e) => e.seq);
    for (const prefix of ['page.', 'page.*']) {
      const got = (await list(owner.client, `action=${encodeURIComponent(prefix)}&limit=500`)).items.map((e) => e.seq);
      expect(got).toEqual(pageEntries);
    }
    // `_` in a prefix is a plain character, not a wildcard.
    expect((await list(owner.client, 'action=agent.key.')).items.map((e) => e.action)).toEqual(['agent.key.mint']);
    // A prefix needs its dot: "page" alone is an exact action that nothing has.
    expect((await list(owner.client, 'action=page')).items).toEqual([]);

    const onA = (await list(owner.client, `node=${pageA.id}`)).items;
    expect(onA.map((e) => e.action).sort()).toEqual(['page.create', 'page.update', 'watch.create', 'watch.delete']);
    expect(onA.every((e) => e.target?.node_id === pageA.id)).toBe(true);

    const combined = (await list(owner.client, `node=${pageA.id}&action=watch.&principal=${owner.id}`)).items;
    expect(combined.map((e) => e.action)).toEqual(['watch.delete', 'watch.create']);
  });

  it('pages through the log with the cursor, without gaps or repeats, while new entries arrive', async () => {
    const whole = (await list(owner.client, 'limit=500')).items.map((e) => e.seq);
    const seen: number[] = [];
    let cursor: string | null = null;
    let first = true;
    do {
      const page = await list(owner.client, `limit=3${cursor ? `&cursor=${cursor}` : ''}`);
      expect(page.items.length).toBeLessThanOrEqual(3);
      seen.push(...page.items.map((e) => e.seq));
      cursor = page.next_cursor;
      // A write after the first page lands above it and does not shift the pages that follow.
      if (first) await createPage(owner.client, `eng/while-paging-${engine}.md`);
      first = false;
    } while (cursor);
    expect(seen).toEqual(whole);

    // Filters and cursor together.
    const pages: number[] = [];
    let c: string | null = null;
    do {
      const page = await list(owner.client, `limit=1&action=page.${c ? `&cursor=${c}` : ''}`);
      pages.push(...page.items.map((e) => e.seq));
      c = page.next_cursor;
    } while (c);
    expect(pages).toEqual((await list(owner.client, 'action=page.&limit=500')).items.map((e) => e.seq));
  });

  it('refuses bad input with 400', async () => {
    for (const q of ['limit=0', 'limit=501', 'limit=x', 'action=Page.Update', 'action=%25', 'action=page.*.x']) {
      expectError(await owner.client.get(`/api/v1/audit?${q}`), 400, 'invalid_request');
    }
    for (const cursor of ['nope', Buffer.from('a1:-1').toString('base64url'), Buffer.from('99:pg_x').toString('base64url'), 'a'.repeat(41)]) {
      expectError(await owner.client.get(`/api/v1/audit?cursor=${cursor}`), 400, ['invalid_cursor', 'invalid_request']);
    }
  });

  it('is for owners only: editors, agents and strangers are refused, on both routes', async () => {
    for (const path of ['/api/v1/audit', '/api/v1/audit/verify']) {
      expectError(await editor.client.get(path), 403, 'forbidden');
      expectError(await agent.client.get(path), 403, 'session_required');
      expectError(await new Client(s.url).get(path), 401, 'unauthorized');
    }
    // The editor's own workspace is theirs to read: the log of the workspace the request works in.
    const own = new Client(s.url);
    own.cookies = new Map(editor.client.cookies);
    const mine = await own.get('/api/v1/audit');
    expectStatus(mine, 200);
    expect((mine.body.items as Entry[]).some((e) => e.target?.node_id === pageA.id)).toBe(false);
  });

  it('verifies an intact chain', async () => {
    const all = (await list(owner.client, 'limit=500')).items;
    expect(await verify(owner.client)).toEqual({ ok: true, entries: all.length, first_broken: null });
  });

  it('names the entry changed behind its back, and the successor of a removed one', async () => {
    const t = await signup('Tess');
    for (const p of ['x', 'y', 'z']) await createPage(t.client, `ops/${p}.md`);
    const before = await verify(t.client);
    expect(before.ok).toBe(true);
    const items = (await list(t.client, 'action=page.&limit=500')).items;
    const victim = items.find((e) => e.target?.path === 'ops/y.md')!;
    const db = s.ctx.store.db;
    const where = { ws: t.workspace.id, seq: victim.seq };
    const row = await db.selectFrom('audit_log').selectAll().where('workspace_id', '=', where.ws).where('seq', '=', where.seq).executeTakeFirstOrThrow();

    // Someone edits the detail directly in the database.
    await db.updateTable('audit_log').set({ detail: '{"path":"ops/innocent.md"}' }).where('workspace_id', '=', where.ws).where('seq', '=', where.seq).execute();
    expect(await verify(t.client)).toEqual({ ok: false, entries: before.entries, first_broken: { seq: victim.seq, at: victim.at, action: 'page.create' } });
    // The listing shows what is stored now; the hashes no longer fit it.
    const shown = (await list(t.client, `node=${victim.target!.node_id}`)).items[0]!;
    expect(shown.detail).toEqual({ path: 'ops/innocent.md' });

    // Put back exactly as it was: intact again.
    await db.updateTable('audit_log').set({ detail: row.detail }).where('workspace_id', '=', where.ws).where('seq', '=', where.seq).execute();
    expect((await verify(t.client)).ok).toBe(true);

    // Someone removes the entry: the next one no longer follows from its predecessor.
    await db.deleteFrom('audit_log').where('workspace_id', '=', where.ws).where('seq', '=', where.seq).execute();
    const after = await verify(t.client);
    expect(after).toMatchObject({ ok: false, entries: before.entries - 1, first_broken: { seq: victim.seq + 1 } });

    // Other workspaces' chains are untouched.
    expect((await verify(owner.client)).ok).toBe(true);
  });
});
