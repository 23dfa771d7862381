import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WATCH_LIMITS } from '../../src/core/watch-input.js';
import { testEngines } from '../support/engines.js';
import { expectError, expectStatus } from '../support/expect.js';
import { Client, createAgentWithKey, joinAs, signupHuman, startTestServer, type TestServer } from '../support/server.js';

/**
 * Watching over REST (issue 13): watch a page or a folder, and changes by others arrive in the
 * inbox as `page_changed` events — never your own, never about what you cannot read, coalesced
 * per page while unread, bounded per hour with a digest beyond — and a long-poll wakes on them.
 * Hidden targets are refused exactly as absent ones; bad input is a 400, never a 500.
 */

const PASSWORD = 'correct horse battery';

describe.each(testEngines())('watches over REST (%s)', (engine) => {
  let s: TestServer;
  let owner: { id: string; client: Client; workspace: { id: string; slug: string } };
  let editor: { id: string; client: Client };
  let k = 0;
  const uniq = (p: string) => `${p}${++k}-${Date.now().toString(36)}`;

  const create = async (path: string, sensitivity = 'internal', by: Client = owner.client) => {
    const res = await by.post('/api/v1/nodes', { path, content: `---\nsensitivity: ${sensitivity}\n---\n# Title of ${path}\n\nThe secret body text.\n` });
    expectStatus(res, 201);
    return { id: res.body.id as string, path: res.body.path as string, commit_sha: res.body.commit_sha as string };
  };
  const update = async (id: string, text: string, by: Client = owner.client, sensitivity = 'internal') => {
    const res = await by.put(`/api/v1/nodes/${id}`, { content: `---\nsensitivity: ${sensitivity}\n---\n# Updated\n\n${text}\n` });
    expectStatus(res, 200);
    return res.body as { commit_sha: string };
  };
  const inbox = async (c: Client, query = 'state=all&limit=100') => {
    const res = await c.get(`/api/v1/inbox?${query}`);
    expectStatus(res, 200);
    return res.body as { events: any[]; next_after: number };
  };
  const watchEvents = async (c: Client) => (await inbox(c)).events.filter((e) => e.kind === 'page_changed' || e.kind === 'watch_digest');
  const watch = async (c: Client, body: Record<string, unknown>, status = 200) => {
    const res = await c.put('/api/v1/watches', body);
    expectStatus(res, status);
    return res.body;
  };
  /** An agent that reads (and writes, to make its own changes) everything up to internal. */
  const agent = (
    grants = [
      { action: 'read', ceiling: 'internal' },
      { action: 'write', ceiling: 'internal' },
      { action: 'collab', ceiling: 'internal' },
    ],
  ) => createAgentWithKey(owner.client, grants, { name: uniq('watcher') });

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = await signupHuman(s.url, 'Olga');
    editor = await joinAs(owner.client, owner.workspace.slug, 'editor');
  }, 60_000);
  afterAll(async () => s?.stop());

  it('watches a page: others’ changes arrive as events (id, path, title, action, commit, actor, no content); own changes do not', async () => {
    const w = await agent();
    const page = await create(`eng/${uniq('w')}/a.md`);
    const first = await watch(w.client, { node_id: page.id });
    expect(first).toMatchObject({ created: true, watch: { kind: 'page', node_id: page.id, path: page.path, delivering: true } });
    expect(first.watch.id).toMatch(/^wa_[0-9a-z]{26}$/);
    // Idempotent: the same watch again.
    const again = await watch(w.client, { node_id: page.id });
    expect(again).toMatchObject({ created: false, watch: { id: first.watch.id } });
    const listed = await w.client.get('/api/v1/watches');
    expectStatus(listed, 200);
    expect(listed.body.watches.map((x: any) => x.id)).toEqual([first.watch.id]);
    expect(listed.body.limit).toBe(WATCH_LIMITS.perPrincipal);

    const c1 = await update(page.id, 'by the owner');
    const ev = await watchEvents(w.client);
    expect(ev).toHaveLength(1);
    expect(ev[0]).toMatchObject({
      kind: 'page_changed',
      state: 'unread',
      page_id: page.id,
      payload: {
        path: page.path,
        title: 'Updated',
        action: 'update',
        commit_sha: c1.commit_sha,
        actor: { id: owner.id, name: 'Olga', kind: 'human' },
        changes: 1,
      },
    });
    expect(ev[0].payload.watch_id).toBe(first.watch.id);
    expect(JSON.stringify(ev[0])).not.toContain('by the owner');
    expect(JSON.stringify(ev[0])).not.toContain('secret body');

    // The watcher's own change: nothing new, the unread event is untouched.
    await update(page.id, 'by the watcher itself', w.client);
    const after = await watchEvents(w.client);
    expect(after).toEqual(ev);
    // The writer (not watching) gets nothing either.
    expect(await watchEvents(owner.client)).toEqual([]);
  });

  it('coalesces repeated changes to one page while the event is unread; a new event after it is done', async () => {
    const w = await agent();
    const page = await create(`eng/${uniq('c')}/a.md`);
    await watch(w.client, { path: page.path });
    await update(page.id, 'one');
    const seq1 = (await watchEvents(w.client))[0].seq as number;
    await update(page.id, 'two', editor.client);
    const c3 = await update(page.id, 'three');
    const ev = await watchEvents(w.client);
    expect(ev).toHaveLength(1);
    expect(ev[0].payload).toMatchObject({ changes: 3, commit_sha: c3.commit_sha, actor: { id: owner.id } });
    // Moved to the end of the inbox, so a reader past its cursor sees it again.
    expect(ev[0].seq).toBeGreaterThan(seq1);
    const tail = await inbox(w.client, `after=${seq1}`);
    expect(tail.events.map((e) => e.page_id)).toContain(page.id);

    expectStatus(await w.client.post('/api/v1/inbox/ack', { up_to: ev[0].seq }), 200);
    await update(page.id, 'four', editor.client);
    const unread = (await inbox(w.client, 'state=unread')).events.filter((e) => e.kind === 'page_changed');
    expect(unread).toHaveLength(1);
    expect(unread[0].payload).toMatchObject({ changes: 1, actor: { id: editor.id } });
  });

  it('watches a folder: pages created, moved in, archived, restored and deleted under it later (sub-folders too)', async () => {
    const w = await agent();
    const dir = `eng/${uniq('f')}`;
    const seed = await create(`${dir}/seed.md`);
    const folder = await watch(w.client, { path: dir });
    expect(folder.watch).toMatchObject({ kind: 'folder', node_id: null, path: dir });
    const made = await create(`${dir}/sub/new.md`);
    const outside = await create(`eng/${uniq('elsewhere')}/x.md`);
    const moved = await owner.client.post(`/api/v1/nodes/${outside.id}/move`, { to: `${dir}/x.md` });
    expectStatus(moved, 200);
    expectStatus(await owner.client.post(`/api/v1/nodes/${seed.id}/archive`, { reason: 'manual' }), 200);
    expectStatus(await owner.client.post('/api/auth/stepup', { password: PASSWORD }), 200);
    expectStatus(await owner.client.delete(`/api/v1/nodes/${made.id}`), 200);
    const ev = await watchEvents(w.client);
    const by = (id: string) => ev.find((e) => e.page_id === id)?.payload;
    // Create then delete of one page while unread: one event, the latest action.
    expect(by(made.id)).toMatchObject({ action: 'delete', changes: 2, path: `${dir}/sub/new.md` });
    expect(by(outside.id)).toMatchObject({ action: 'move', path: `${dir}/x.md`, from: outside.path });
    expect(by(seed.id)).toMatchObject({ action: 'archive' });
    expect(ev.every((e) => e.kind === 'page_changed')).toBe(true);
    expect(ev).toHaveLength(3);
    expectStatus(await w.client.post('/api/v1/inbox/ack', { up_to: ev.at(-1)!.seq }), 200);
    expectStatus(await owner.client.post(`/api/v1/nodes/${seed.id}/restore`), 200);
    const restored = (await inbox(w.client, 'state=unread')).events;
    expect(restored.map((e) => [e.page_id, e.payload.action])).toEqual([[seed.id, 'restore']]);
    // A page outside the folder: nothing.
    await update((await create(`eng/${uniq('other')}/y.md`)).id, 'unrelated');
    expect((await inbox(w.client, 'state=unread')).events).toHaveLength(1);
  });

  it('hidden pages give no event: above the ceiling, outside a path-scoped grant, raised above it by a change', async () => {
    const w = await agent();
    const scoped = await createAgentWithKey(owner.client, [{ action: 'read', scope: `ops/notes`, ceiling: 'internal' }], { name: uniq('scoped') });
    const open = await create(`ops/notes/${uniq('p')}.md`);
    await watch(w.client, { path: 'ops' });
    await watch(scoped.client, { path: 'ops/notes' });
    await create(`ops/notes/${uniq('conf')}.md`, 'confidential');
    await create(`ops/private/${uniq('p')}.md`);
    expect((await watchEvents(scoped.client)).map((e) => e.page_id)).toEqual([]);
    expect((await watchEvents(w.client)).filter((e) => e.payload.path.startsWith('ops/private/'))).toHaveLength(1);
    expect((await watchEvents(w.client)).some((e) => e.payload.path.includes('conf'))).toBe(false);
    // A change that raises the page above the watcher's ceiling tells them nothing.
    await update(open.id, 'now confidential', owner.client, 'confidential');
    expect(await watchEvents(scoped.client)).toEqual([]);
    expect((await watchEvents(w.client)).some((e) => e.page_id === open.id)).toBe(false);
  });

  it('a move out of sight reveals nothing: no event, no new path, and the earlier event disappears', async () => {
    const scoped = await createAgentWithKey(owner.client, [{ action: 'read', scope: 'mv/seen', ceiling: 'internal' }], { name: uniq('scoped') });
    const wide = await agent();
    const page = await create(`mv/seen/${uniq('p')}.md`);
    await watch(scoped.client, { node_id: page.id });
    await watch(wide.client, { path: 'mv' });
    await update(page.id, 'first');
    expect((await watchEvents(scoped.client)).map((e) => e.page_id)).toEqual([page.id]);
    const to = `mv/hidden/${uniq('moved')}.md`;
    expectStatus(await owner.client.post(`/api/v1/nodes/${page.id}/move`, { to }), 200);
    const seen = await inbox(scoped.client);
    expect(JSON.stringify(seen)).not.toContain('mv/hidden');
    expect(seen.events.filter((e) => e.kind === 'page_changed')).toEqual([]);
    // Someone who may read the new place is told where it went.
    expect((await watchEvents(wide.client)).find((e) => e.page_id === page.id)?.payload).toMatchObject({ action: 'move', path: to });
    // The watch stays, listed as not delivering, with the path the watcher knew.
    const list = (await scoped.client.get('/api/v1/watches')).body.watches;
    expect(list).toEqual([expect.objectContaining({ node_id: page.id, path: page.path, delivering: false })]);
  });

  it('refuses a hidden target exactly as an absent one (not_found, same message)', async () => {
    const w = await agent();
    const conf = await create(`hid/${uniq('c')}.md`, 'confidential');
    const hiddenDir = `hid/${uniq('only-conf')}`;
    await create(`${hiddenDir}/x.md`, 'confidential');
    const a = await w.client.put('/api/v1/watches', { node_id: conf.id });
    const fake = 'pg_' + '0'.repeat(26);
    const b = await w.client.put('/api/v1/watches', { node_id: fake });
    expectError(a, 404, 'not_found');
    expectError(b, 404, 'not_found');
    expect(a.body.error.message.replace(conf.id, 'X')).toBe(b.body.error.message.replace(fake, 'X'));
    const byPath = await w.client.put('/api/v1/watches', { path: conf.path });
    const noPath = await w.client.put('/api/v1/watches', { path: 'hid/nothing-here.md' });
    expectError(byPath, 404, 'not_found');
    expect(byPath.body.error.message.replace(conf.path, 'X')).toBe(noPath.body.error.message.replace('hid/nothing-here.md', 'X'));
    const dirHidden = await w.client.put('/api/v1/watches', { path: hiddenDir });
    const dirAbsent = await w.client.put('/api/v1/watches', { path: 'hid/no-such-folder' });
    expectError(dirHidden, 404, 'not_found');
    expect(dirHidden.body.error.message.replace(hiddenDir, 'X')).toBe(dirAbsent.body.error.message.replace('hid/no-such-folder', 'X'));
    // A path-scoped agent: outside its grant, or wider than it, is not found; inside it works.
    const scoped = await createAgentWithKey(owner.client, [{ action: 'read', scope: 'hid/open', ceiling: 'internal' }], { name: uniq('scoped') });
    await create(`hid/open/${uniq('p')}.md`);
    const out = await create(`hid/closed/${uniq('p')}.md`);
    expectError(await scoped.client.put('/api/v1/watches', { node_id: out.id }), 404, 'not_found');
    expectError(await scoped.client.put('/api/v1/watches', { path: 'hid' }), 404, 'not_found');
    expectError(await scoped.client.put('/api/v1/watches', { path: 'hid/closed' }), 404, 'not_found');
    await watch(scoped.client, { path: 'hid/open' });
    // An agent without read at all.
    const noRead = await createAgentWithKey(owner.client, [{ action: 'collab' }], { name: uniq('noread') });
    expectError(await noRead.client.put('/api/v1/watches', { path: 'hid/open' }), 404, 'not_found');
    expect((await w.client.get('/api/v1/watches')).body.watches).toEqual([]);
  });

  it('bounds the rate: beyond the hourly number, changes are counted in one digest event', async () => {
    const w = await agent();
    const dir = `bulk/${uniq('r')}`;
    await create(`${dir}/seed.md`);
    await watch(w.client, { path: dir });
    const n = WATCH_LIMITS.eventsPerWindow + 3;
    const pages: { id: string; path: string; commit_sha: string }[] = [];
    for (let i = 0; i < n; i++) pages.push(await create(`${dir}/p${i}.md`));
    let ev = await watchEvents(w.client);
    expect(ev.filter((e) => e.kind === 'page_changed')).toHaveLength(WATCH_LIMITS.eventsPerWindow);
    const digests = ev.filter((e) => e.kind === 'watch_digest');
    expect(digests).toHaveLength(1);
    expect(digests[0]).toMatchObject({ page_id: null, payload: { changes: 3, last_commit: pages.at(-1)!.commit_sha } });
    expect(JSON.stringify(digests[0])).not.toContain(dir);
    // A page with an unread event still coalesces into it; the digest does not grow.
    await update(pages[0]!.id, 'again');
    ev = await watchEvents(w.client);
    expect(ev.find((e) => e.page_id === pages[0]!.id)?.payload.changes).toBe(2);
    expect(ev.filter((e) => e.kind === 'watch_digest')[0].payload.changes).toBe(3);
  }, 60_000);

  it('wakes a waiting long-poll when a watch event arrives', async () => {
    const w = await agent();
    const page = await create(`lp/${uniq('p')}.md`);
    await watch(w.client, { node_id: page.id });
    const after = (await inbox(w.client)).next_after;
    const started = Date.now();
    const poll = w.client.get(`/api/v1/inbox?after=${after}&wait=20`);
    await new Promise((r) => setTimeout(r, 300));
    await update(page.id, 'wake up');
    const res = await poll;
    expectStatus(res, 200);
    expect(res.body.events.map((e: any) => e.kind)).toEqual(['page_changed']);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('stops delivering when the key is revoked, the grant is lost or the agent is deleted; a new key re-binds the watch', async () => {
    const w = await agent();
    const page = await create(`life/${uniq('p')}.md`);
    await watch(w.client, { node_id: page.id });
    const k2 = await owner.client.post(`/api/v1/principals/${w.id}/tokens`, { name: 'second' });
    expectStatus(k2, 201);
    const second = new Client(s.url, k2.body.key);
    expectStatus(await owner.client.delete(`/api/v1/principals/${w.id}/tokens/${w.keyId}`), 200);
    await update(page.id, 'while the key is dead');
    expect(await watchEvents(second)).toEqual([]);
    expect((await second.get('/api/v1/watches')).body.watches[0]).toMatchObject({ delivering: false });
    // Watching again with a live key binds the watch to it.
    expect(await watch(second, { node_id: page.id })).toMatchObject({ created: false, watch: { delivering: true } });
    await update(page.id, 'now it arrives');
    expect((await watchEvents(second)).map((e) => e.page_id)).toEqual([page.id]);
    expectStatus(await second.post('/api/v1/inbox/ack', { up_to: 1_000_000 }), 200);

    // Grants taken away: nothing arrives.
    expectStatus(await owner.client.put(`/api/v1/principals/${w.id}/grants`, { grants: [{ action: 'collab', scope: '*', ceiling: 'internal' }] }), 200);
    await update(page.id, 'no grant');
    expect((await inbox(second, 'state=unread')).events).toEqual([]);
    const rows = () => s.ctx.store.db.selectFrom('inbox_events').select('seq').where('principal_id', '=', w.id).where('state', '=', 'unread').execute();
    expect(await rows()).toEqual([]);
    // Deleted agent: its rows stay inert, and nothing is placed for it.
    expectStatus(await owner.client.put(`/api/v1/principals/${w.id}/grants`, { grants: [{ action: 'read', scope: '*', ceiling: 'internal' }] }), 200);
    expectStatus(await owner.client.delete(`/api/v1/principals/${w.id}`), 200);
    await update(page.id, 'agent gone');
    expect(await rows()).toEqual([]);
  });

  it('an accepted proposal tells watchers, but not its author (credited) nor who accepted it', async () => {
    const proposer = await agent([
      { action: 'read', ceiling: 'internal' },
      { action: 'propose', ceiling: 'internal' },
    ]);
    const other = await agent();
    const page = await create(`prop/${uniq('p')}.md`);
    await watch(proposer.client, { node_id: page.id });
    await watch(other.client, { node_id: page.id });
    await watch(owner.client, { node_id: page.id });
    const pr = await proposer.client.post('/api/v1/proposals', { node_id: page.id, content: '---\nsensitivity: internal\n---\n# Proposed\n' });
    expectStatus(pr, 201);
    expectStatus(await owner.client.post(`/api/v1/proposals/${pr.body.id}/accept`), 200);
    expect(await watchEvents(proposer.client)).toEqual([]);
    expect((await watchEvents(owner.client)).some((e) => e.page_id === page.id)).toBe(false);
    const told = (await watchEvents(other.client)).find((e) => e.page_id === page.id);
    expect(told?.payload).toMatchObject({ action: 'update', actor: { id: owner.id }, author: { id: proposer.id } });
  });

  it('humans watch too; an editor is told of the owner’s change, the owner of nothing they did', async () => {
    const page = await create(`hum/${uniq('p')}.md`);
    await watch(editor.client, { node_id: page.id });
    await watch(owner.client, { node_id: page.id });
    await update(page.id, 'owner edits');
    expect((await watchEvents(editor.client)).map((e) => e.page_id)).toContain(page.id);
    expect((await watchEvents(owner.client)).map((e) => e.page_id)).not.toContain(page.id);
  });

  it('removes a watch by id; someone else’s or an unknown id is not found', async () => {
    const w = await agent();
    const other = await agent();
    const page = await create(`rm/${uniq('p')}.md`);
    const mine = (await watch(w.client, { node_id: page.id })).watch.id as string;
    expectError(await other.client.delete(`/api/v1/watches/${mine}`), 404, 'not_found');
    expectError(await w.client.delete(`/api/v1/watches/wa_${'0'.repeat(26)}`), 404, 'not_found');
    expectError(await w.client.delete(`/api/v1/watches/not-a-watch`), 404, 'not_found');
    const del = await w.client.delete(`/api/v1/watches/${mine}`);
    expectStatus(del, 200);
    expect(del.body).toEqual({ id: mine, removed: true });
    expectError(await w.client.delete(`/api/v1/watches/${mine}`), 404, 'not_found');
    await update(page.id, 'after unwatch');
    expect(await watchEvents(w.client)).toEqual([]);
  });

  it('refuses bad input with 400 and a clear message, never a 500', async () => {
    const w = await agent();
    const page = await create(`bad/${uniq('p')}.md`);
    const cases: [unknown, string][] = [
      [{}, 'invalid_request'],
      [{ node_id: page.id, path: page.path }, 'invalid_request'],
      [{ node_id: 42 }, 'invalid_request'],
      [{ path: ['bad'] }, 'invalid_request'],
      [{ path: null }, 'invalid_request'],
      [{ node_id: page.id, extra: 1 }, 'invalid_request'],
      [{ node_id: 'bad/page.md' }, 'invalid_request'],
      [{ path: '../etc/passwd' }, 'invalid_path'],
      [{ path: 'bad/../../x' }, 'invalid_path'],
      [{ path: 'bad/./x.md' }, 'invalid_path'],
      [{ path: 'bad\\x' }, 'invalid_path'],
      [{ path: 'bad/x\u0000y' }, 'invalid_path'],
      [{ path: 'a/'.repeat(600) + 'x' }, 'invalid_path'],
    ];
    for (const [body, code] of cases) {
      const res = await w.client.put('/api/v1/watches', body);
      expectError(res, 400, code);
    }
    const raw = await w.client.request('PUT', '/api/v1/watches', { body: '{"node_id":', headers: { 'content-type': 'application/json' } });
    expect(raw.status).toBe(400);
  });

  it(`caps watches per principal at ${WATCH_LIMITS.perPrincipal} with watch_limit; watching an already-watched target still answers`, async () => {
    const w = await agent();
    const page = await create(`cap/${uniq('p')}.md`);
    const other = await create(`cap/${uniq('q')}.md`);
    await watch(w.client, { node_id: page.id });
    // Fill up to the cap without making 200 pages: rows as the service would write them.
    const now = new Date().toISOString();
    const fill = Array.from({ length: WATCH_LIMITS.perPrincipal - 1 }, (_, i) => ({
      id: `wa_${String(i).padStart(26, '0')}`,
      workspace_id: owner.workspace.id,
      principal_id: w.id,
      key_id: w.keyId,
      target: `path:cap/filler-${i}`,
      kind: 'folder' as const,
      page_id: null,
      path: `cap/filler-${i}`,
      created_at: now,
    }));
    await s.ctx.store.db.insertInto('watches').values(fill).execute();
    const refused = await w.client.put('/api/v1/watches', { node_id: other.id });
    expectError(refused, 409, 'watch_limit');
    expect(refused.body.error.message).toContain(String(WATCH_LIMITS.perPrincipal));
    expect(await watch(w.client, { node_id: page.id })).toMatchObject({ created: false });
    expect((await w.client.get('/api/v1/watches')).body.watches).toHaveLength(WATCH_LIMITS.perPrincipal);
  });
});
