import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyAuditChain } from '../../src/core/audit.js';
import { testEngines } from '../support/engines.js';
import { expectError, expectStatus } from '../support/expect.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';

/**
 * Threads on pages over real HTTP: posting and listing, mentions and replies reaching only
 * principals who can read the page, the loop breaker at exactly 4 agent hops, unlock, read
 * marks and bad input. The inbox itself (long-poll, ack, filters) is in inbox.test.ts.
 */

const PASSWORD = 'correct horse battery';
let n = 0;

type Agent = { id: string; client: Client };

/** A new human who joins `ws` with `role` by signing up with an owner's invite (the invited workspace is then their default). */
async function member(base: string, owner: Client, ws: string, role: 'editor' | 'viewer' | 'owner', name: string): Promise<{ id: string; client: Client }> {
  const inv = await owner.post(`/api/v1/workspaces/${ws}/invites`, { role });
  expectStatus(inv, 201);
  const client = new Client(base);
  const email = `${name.toLowerCase()}-${process.pid}-${++n}-${Date.now()}@example.com`;
  const res = await client.post('/api/v1/auth/signup', { email, password: PASSWORD, name, invite_token: inv.body.token });
  expectStatus(res, 201);
  expect(res.body.workspace.id).toBeTruthy();
  return { id: res.body.principal.id, client };
}

const enc = (path: string) => encodeURIComponent(path);

async function inbox(c: Client, query = 'state=all&limit=100') {
  const res = await c.get(`/api/v1/inbox?${query}`);
  expectStatus(res, 200);
  return res.body.events as any[];
}

describe.each(testEngines())('threads (%s)', (engine) => {
  let s: TestServer;
  let owner: { id: string; client: Client; workspace: { id: string; slug: string } };
  let editor: { id: string; client: Client };
  let viewer: { id: string; client: Client };
  let alpha: Agent; // read + collab everywhere, confidential
  let beta: Agent; // read + collab everywhere
  let opsOnly: Agent; // read + collab over `ops` only
  let lowCeiling: Agent; // grants at confidential, own ceiling internal
  let readOnly: Agent; // read, no collab
  let page: { id: string; path: string };
  let secretish: { id: string; path: string };
  let uniq = 0;

  const newPage = async (sensitivity = 'internal') => {
    const path = `eng/threads/p${++uniq}-${Date.now()}.md`;
    const res = await owner.client.post('/api/v1/nodes', { path, content: `---\nsensitivity: ${sensitivity}\n---\n# T\n\nBody.\n` });
    expectStatus(res, 201);
    return { id: res.body.id as string, path };
  };
  const post = (c: Client, ref: string, body: Record<string, unknown>) => c.post(`/api/v1/nodes/${ref}/threads`, body);
  /** What was written to a principal's inbox, whatever listing would show. */
  const storedEvents = (principalId: string) =>
    s.ctx.store.db.selectFrom('inbox_events').select(['seq', 'kind', 'page_id']).where('principal_id', '=', principalId).orderBy('seq').execute();

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = await signupHuman(s.url, 'Olive');
    editor = await member(s.url, owner.client, owner.workspace.slug, 'editor', 'Edith');
    viewer = await member(s.url, owner.client, owner.workspace.slug, 'viewer', 'Victor');
    const both = [{ action: 'read' }, { action: 'collab' }];
    alpha = await createAgentWithKey(owner.client, both, { name: 'Alpha' });
    beta = await createAgentWithKey(owner.client, both, { name: 'Beta Bot' });
    opsOnly = await createAgentWithKey(
      owner.client,
      [
        { action: 'read', scope: 'ops' },
        { action: 'collab', scope: 'ops' },
      ],
      { name: 'Gamma' },
    );
    lowCeiling = await createAgentWithKey(owner.client, both, { name: 'Delta', ceiling: 'internal' });
    readOnly = await createAgentWithKey(owner.client, [{ action: 'read' }], { name: 'Reader' });
    page = await newPage();
    secretish = await newPage('confidential');
  });
  afterAll(async () => s?.stop());

  it('an empty thread, by id and by URL-encoded path', async () => {
    const p = await newPage();
    for (const ref of [p.id, enc(p.path)]) {
      const res = await alpha.client.get(`/api/v1/nodes/${ref}/threads`);
      expectStatus(res, 200);
      expect(res.body).toMatchObject({ page_id: p.id, path: p.path, locked: false, locked_at: null, agent_hops: 0, unread: 0, messages: [], next_after: null });
    }
  });

  it('posts and lists messages in order with author, kind, reply_to and mentions', async () => {
    const p = await newPage();
    const first = await post(owner.client, p.id, { body: 'What is the plan?', kind: 'question', mentions: [alpha.id] });
    expectStatus(first, 201);
    expect(first.body).toMatchObject({
      seq: 1,
      author: { id: owner.id, name: 'Olive', kind: 'human' },
      kind: 'question',
      body: 'What is the plan?',
      reply_to: null,
      mentions: [alpha.id],
      thread: { locked: false, agent_hops: 0 },
    });
    expect(first.body.id).toMatch(/^tm_/);
    // The alias path does the same.
    const second = await alpha.client.post(`/api/v1/nodes/${enc(p.path)}/threads/messages`, {
      body: 'Ship it on Friday.',
      kind: 'answer',
      reply_to: first.body.id,
    });
    expectStatus(second, 201);
    expect(second.body).toMatchObject({
      seq: 2,
      author: { id: alpha.id, name: 'Alpha', kind: 'agent' },
      kind: 'answer',
      reply_to: first.body.id,
      thread: { agent_hops: 1 },
    });
    const third = await post(viewer.client, p.id, { body: 'ok' });
    expectStatus(third, 201);
    expect(third.body.kind).toBe('comment');

    const list = await editor.client.get(`/api/v1/nodes/${p.id}/threads`);
    expectStatus(list, 200);
    expect(list.body.messages.map((m: any) => [m.seq, m.author.id, m.kind, m.body])).toEqual([
      [1, owner.id, 'question', 'What is the plan?'],
      [2, alpha.id, 'answer', 'Ship it on Friday.'],
      [3, viewer.id, 'comment', 'ok'],
    ]);
    expect(list.body.messages[0].mentions).toEqual([alpha.id]);
    expect(list.body.messages[1].reply_to).toBe(first.body.id);
    expect(list.body.messages[0].created_at).toMatch(/^\d{4}-\d\d-\d\dT/);
    expect(list.body.agent_hops).toBe(0);

    // Paging by seq.
    const paged = await editor.client.get(`/api/v1/nodes/${p.id}/threads?after=1&limit=1`);
    expect(paged.body.messages.map((m: any) => m.seq)).toEqual([2]);
    expect(paged.body.next_after).toBe(2);
  });

  it('a mention by id and by @name (any case) reaches the mentioned; a reply reaches the author replied to', async () => {
    const p = await newPage();
    const msg = await post(owner.client, p.id, { body: 'Please review\n\nthe  numbers.', mentions: [alpha.id, '@edith', '@BETA BOT'] });
    expectStatus(msg, 201);
    expect(msg.body.mentions).toEqual([alpha.id, editor.id, beta.id]);
    for (const who of [alpha.client, editor.client, beta.client]) {
      const ev = (await inbox(who)).filter((e) => e.payload.message_id === msg.body.id);
      expect(ev).toHaveLength(1);
      expect(ev[0]).toMatchObject({
        kind: 'mention',
        state: 'unread',
        page_id: p.id,
        proposal_id: null,
        payload: {
          page_id: p.id,
          path: p.path,
          message_id: msg.body.id,
          author: { id: owner.id, name: 'Olive', kind: 'human' },
          kind: 'comment',
          excerpt: 'Please review the numbers.',
        },
      });
    }
    // Not mentioned: nothing; the author never gets an event of their own message.
    expect((await inbox(viewer.client)).filter((e) => e.payload.message_id === msg.body.id)).toHaveLength(0);
    expect((await inbox(owner.client)).filter((e) => e.payload.message_id === msg.body.id)).toHaveLength(0);

    const reply = await post(alpha.client, p.id, { body: 'Looks right.', kind: 'answer', reply_to: msg.body.id });
    expectStatus(reply, 201);
    const got = (await inbox(owner.client)).filter((e) => e.payload.message_id === reply.body.id);
    expect(got).toHaveLength(1);
    expect(got[0]).toMatchObject({
      kind: 'reply',
      page_id: p.id,
      payload: { reply_to: msg.body.id, mentioned: false, author: { id: alpha.id, kind: 'agent' }, kind: 'answer' },
    });

    // Replying to yourself delivers nothing; a reply that also mentions the author gives one event.
    const self = await post(alpha.client, p.id, { body: 'And one more thing.', reply_to: reply.body.id });
    expectStatus(self, 201);
    expect((await inbox(alpha.client)).filter((e) => e.payload.message_id === self.body.id)).toHaveLength(0);
    const both = await post(editor.client, p.id, { body: 'Noted', reply_to: msg.body.id, mentions: ['@olive'] });
    const bothEv = (await inbox(owner.client)).filter((e) => e.payload.message_id === both.body.id);
    expect(bothEv).toHaveLength(1);
    expect(bothEv[0].kind).toBe('reply');
    expect(bothEv[0].payload.mentioned).toBe(true);
  });

  it('a mention or reply of someone who cannot read the page delivers nothing, and the author is not told', async () => {
    // opsOnly's grants cover `ops` only; lowCeiling reads confidential grants but its own ceiling is internal.
    const before = { ops: (await inbox(opsOnly.client)).length, low: (await inbox(lowCeiling.client)).length };
    const m1 = await post(owner.client, page.id, { body: 'cc', mentions: [opsOnly.id, '@gamma'] });
    expectStatus(m1, 201);
    const m2 = await post(owner.client, secretish.id, { body: 'cc', mentions: [lowCeiling.id] });
    expectStatus(m2, 201);
    // The answer is the same shape as any other: it does not say who was reached.
    expect(Object.keys(m1.body).sort()).toEqual(['author', 'body', 'created_at', 'id', 'kind', 'mentions', 'reply_to', 'seq', 'thread']);
    expect(m1.body.mentions).toEqual([opsOnly.id]);

    // lowCeiling can read the internal page: a reply to its message there is delivered.
    const own = await post(lowCeiling.client, page.id, { body: 'from low' });
    expectStatus(own, 201);
    await post(editor.client, page.id, { body: 'thanks', reply_to: own.body.id });

    const ops = await inbox(opsOnly.client);
    const low = await inbox(lowCeiling.client);
    expect(ops.length).toBe(before.ops);
    expect(low.length).toBe(before.low + 1);
    expect(low.at(-1).kind).toBe('reply');
    expect(low.some((e) => e.page_id === secretish.id)).toBe(false);
    // Not merely hidden when listed: no event row was ever written for them.
    expect(await storedEvents(opsOnly.id)).toHaveLength(0);
    expect((await storedEvents(lowCeiling.id)).map((e) => e.page_id)).toEqual([page.id]);

    // A reply to an author who can no longer read the page reaches nobody.
    const fleeting = await createAgentWithKey(owner.client, [{ action: 'read' }, { action: 'collab' }], { name: 'Fleeting' });
    const said = await post(fleeting.client, page.id, { body: 'I was here' });
    expectStatus(said, 201);
    expectStatus(await owner.client.put(`/api/v1/principals/${fleeting.id}/grants`, { grants: [{ action: 'read', scope: 'ops', ceiling: 'internal' }] }), 200);
    const answer = await post(editor.client, page.id, { body: 'and now you are not', reply_to: said.body.id, mentions: [fleeting.id] });
    expectStatus(answer, 201);
    expect(await storedEvents(fleeting.id)).toHaveLength(0);
    // And they cannot see those threads at all.
    expectError(await opsOnly.client.get(`/api/v1/nodes/${page.id}/threads`), 404, 'not_found');
    expectError(await lowCeiling.client.get(`/api/v1/nodes/${secretish.id}/threads`), 404, 'not_found');
    expectError(await post(lowCeiling.client, secretish.id, { body: 'hi' }), 404, 'not_found');
  });

  it('who may post: agents need collab over the page; humans of every role may', async () => {
    const p = await newPage();
    expectError(await post(readOnly.client, p.id, { body: 'hi' }), 403, 'forbidden');
    expectStatus(await readOnly.client.get(`/api/v1/nodes/${p.id}/threads`), 200);
    // A collab grant elsewhere does not help; reading is not posting.
    const split = await createAgentWithKey(owner.client, [{ action: 'read' }, { action: 'collab', scope: 'ops' }], { name: 'Split' });
    expectError(await post(split.client, p.id, { body: 'hi' }), 403, 'forbidden');
    // A collab grant below the page's level is not enough either.
    const lowCollab = await createAgentWithKey(
      owner.client,
      [
        { action: 'read', ceiling: 'confidential' },
        { action: 'collab', ceiling: 'internal' },
      ],
      { name: 'LowCollab' },
    );
    expectError(await post(lowCollab.client, secretish.id, { body: 'hi' }), 403, 'forbidden');
    expectStatus(await post(lowCollab.client, p.id, { body: 'hi' }), 201);
    for (const h of [viewer, editor, owner]) expectStatus(await post(h.client, p.id, { body: 'hello' }), 201);
    // A session needs CSRF like every unsafe request.
    expectError(await viewer.client.request('POST', `/api/v1/nodes/${p.id}/threads`, { json: { body: 'x' }, csrf: false }), 403, 'csrf_failed');
    // An unknown page, a deleted page, a page of another workspace: 404.
    expectError(await post(alpha.client, 'pg_00000000000000000000000000', { body: 'x' }), 404, 'not_found');
    expectError(await post(alpha.client, enc('eng/none/x.md'), { body: 'x' }), 404, 'not_found');
    const stranger = await signupHuman(s.url, 'Stan');
    expectError(await stranger.client.get(`/api/v1/nodes/${p.id}/threads`), 404, 'not_found');
  });

  it('loop breaker: 3 agent messages are fine, the 4th is accepted and locks, the 5th is refused with 423 thread_locked', async () => {
    const p = await newPage();
    const agents = [alpha, beta, alpha];
    for (const [i, a] of agents.entries()) {
      const r = await post(a.client, p.id, { body: `hop ${i + 1}` });
      expectStatus(r, 201);
      expect(r.body.thread).toMatchObject({ locked: false, agent_hops: i + 1 });
    }
    const fourth = await post(beta.client, p.id, { body: 'hop 4' });
    expectStatus(fourth, 201);
    expect(fourth.body.thread.locked).toBe(true);
    expect(fourth.body.thread.agent_hops).toBe(4);
    expect(fourth.body.thread.locked_at).toBe(fourth.body.created_at);
    const fifth = await post(alpha.client, p.id, { body: 'hop 5' });
    expectError(fifth, 423, 'thread_locked');
    expectError(await alpha.client.post(`/api/v1/nodes/${p.id}/threads/messages`, { body: 'hop 5' }), 423, 'thread_locked');
    const state = await alpha.client.get(`/api/v1/nodes/${p.id}/threads`);
    expect(state.body).toMatchObject({ locked: true, agent_hops: 4 });
    expect(state.body.messages).toHaveLength(4);

    // A human may still post; it resets the count but the lock stays until an unlock.
    const human = await post(viewer.client, p.id, { body: 'Stop, both of you.' });
    expectStatus(human, 201);
    expect(human.body.thread).toMatchObject({ locked: true, agent_hops: 0 });
    expectError(await post(beta.client, p.id, { body: 'but' }), 423, 'thread_locked');

    // Unlock: viewers and agents 403; an editor's session unlocks.
    expectError(await viewer.client.post(`/api/v1/nodes/${p.id}/threads/unlock`), 403, 'forbidden');
    expectError(await alpha.client.post(`/api/v1/nodes/${p.id}/threads/unlock`), 403, 'session_required');
    const un = await editor.client.post(`/api/v1/nodes/${p.id}/threads/unlock`);
    expectStatus(un, 200);
    expect(un.body).toMatchObject({ page_id: p.id, locked: false, locked_at: null, agent_hops: 0, changed: true, unlocked_by: editor.id });
    // Again: nothing to do.
    const again = await editor.client.post(`/api/v1/nodes/${p.id}/threads/unlock`, {});
    expectStatus(again, 200);
    expect(again.body.changed).toBe(false);

    // Agents may talk again, and four more hops lock again.
    for (let i = 1; i <= 3; i++) expect((await post(i % 2 ? alpha.client : beta.client, p.id, { body: `again ${i}` })).body.thread.locked).toBe(false);
    expect((await post(beta.client, p.id, { body: 'again 4' })).body.thread.locked).toBe(true);
    // The owner unlocks too.
    const byOwner = await owner.client.post(`/api/v1/nodes/${p.id}/threads/unlock`);
    expectStatus(byOwner, 200);
    expect(byOwner.body.changed).toBe(true);

    const rows = await s.ctx.store.db
      .selectFrom('audit_log')
      .select(['action', 'node_id', 'principal_id'])
      .where('workspace_id', '=', owner.workspace.id)
      .where('node_id', '=', p.id)
      .orderBy('seq')
      .execute();
    expect(rows.filter((r) => r.action === 'thread.unlock').map((r) => r.principal_id)).toEqual([editor.id, owner.id]);
    expect(rows.filter((r) => r.action === 'thread.post')).toHaveLength(9);
    expect(await verifyAuditChain(s.ctx.store.db, owner.workspace.id)).toBeNull();
  });

  it('concurrent agent posts: exactly four land, numbered 1..4, the rest are refused', async () => {
    const p = await newPage();
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => post((i % 2 ? alpha : beta).client, p.id, { body: `race ${i}` })));
    const ok = results.filter((r) => r.status === 201);
    expect(ok).toHaveLength(4);
    for (const r of results.filter((x) => x.status !== 201)) expectError(r, 423, 'thread_locked');
    expect(ok.map((r) => r.body.seq).sort()).toEqual([1, 2, 3, 4]);
    const t = await owner.client.get(`/api/v1/nodes/${p.id}/threads`);
    expect(t.body).toMatchObject({ locked: true, agent_hops: 4 });
    expect(t.body.messages.map((m: any) => m.seq)).toEqual([1, 2, 3, 4]);
  });

  it('a human message between agent messages resets the count', async () => {
    const p = await newPage();
    for (let i = 0; i < 3; i++) expectStatus(await post(alpha.client, p.id, { body: `a${i}` }), 201);
    const h = await post(owner.client, p.id, { body: 'human' });
    expect(h.body.thread.agent_hops).toBe(0);
    for (let i = 0; i < 3; i++) {
      const r = await post(beta.client, p.id, { body: `b${i}` });
      expect(r.body.thread).toMatchObject({ locked: false, agent_hops: i + 1 });
    }
    const fourth = await post(alpha.client, p.id, { body: 'b3' });
    expect(fourth.body.thread).toMatchObject({ locked: true, agent_hops: 4 });
    expectError(await post(beta.client, p.id, { body: 'b4' }), 423, 'thread_locked');
  });

  it('threads/read marks the thread read for the caller only', async () => {
    const p = await newPage();
    await post(alpha.client, p.id, { body: 'one' });
    await post(beta.client, p.id, { body: 'two' });
    await post(owner.client, p.id, { body: 'mine' });
    expect((await owner.client.get(`/api/v1/nodes/${p.id}/threads`)).body).toMatchObject({ unread: 2, last_read_seq: 0 });
    const read = await owner.client.post(`/api/v1/nodes/${p.id}/threads/read`);
    expectStatus(read, 200);
    expect(read.body).toMatchObject({ page_id: p.id, unread: 0, last_read_seq: 3 });
    expect((await owner.client.get(`/api/v1/nodes/${p.id}/threads`)).body.unread).toBe(0);
    // Others still have theirs; an agent marks its own (its own messages never count).
    expect((await editor.client.get(`/api/v1/nodes/${p.id}/threads`)).body.unread).toBe(3);
    expect((await alpha.client.get(`/api/v1/nodes/${p.id}/threads`)).body.unread).toBe(2);
    expectStatus(await alpha.client.post(`/api/v1/nodes/${enc(p.path)}/threads/read`, {}), 200);
    expect((await alpha.client.get(`/api/v1/nodes/${p.id}/threads`)).body.unread).toBe(0);
    await post(beta.client, p.id, { body: 'three' });
    expect((await owner.client.get(`/api/v1/nodes/${p.id}/threads`)).body).toMatchObject({ unread: 1, last_read_seq: 3 });
    expectError(await opsOnly.client.post(`/api/v1/nodes/${p.id}/threads/read`), 404, 'not_found');
    expectError(await owner.client.post(`/api/v1/nodes/${p.id}/threads/read`, { up_to: 1 }), 400, 'invalid_request');
  });

  it('refuses bad input with a clear code', async () => {
    const p = await newPage();
    const other = await newPage();
    const elsewhere = await post(owner.client, other.id, { body: 'elsewhere' });
    const bad: [Record<string, unknown>, string][] = [
      [{ body: 'x', mentions: ['@nobody-here'] }, 'unknown_mention'],
      [{ body: 'x', mentions: ['pr_00000000000000000000000000'] }, 'unknown_mention'],
      [{ body: 'x', mentions: ['Alpha'] }, 'unknown_mention'],
      [{ body: 'x', reply_to: 'tm_00000000000000000000000000' }, 'unknown_reply_to'],
      [{ body: 'x', reply_to: elsewhere.body.id }, 'unknown_reply_to'],
      [{ body: 'x'.repeat(20_001) }, 'invalid_request'],
      [{ body: '' }, 'invalid_request'],
      [{ body: '   \n ' }, 'invalid_request'],
      [{ body: 'x', kind: 'rant' }, 'invalid_request'],
      [{ body: 'x', mentions: Array.from({ length: 51 }, () => alpha.id) }, 'invalid_request'],
      [{ body: 'x', mention: [alpha.id] }, 'invalid_request'],
      [{ body: 'x', extra: 1 }, 'invalid_request'],
      [{}, 'invalid_request'],
    ];
    for (const [body, code] of bad) {
      const res = await post(owner.client, p.id, body);
      expectError(res, 400, code);
    }
    expectStatus(await post(owner.client, p.id, { body: 'x'.repeat(20_000) }), 201);
    // Two principals with one name: @name is ambiguous, the ids work.
    const t1 = await createAgentWithKey(owner.client, [{ action: 'read' }], { name: 'Twin' });
    const t2 = await createAgentWithKey(owner.client, [{ action: 'read' }], { name: 'twin' });
    const amb = await post(owner.client, p.id, { body: 'x', mentions: ['@Twin'] });
    expectError(amb, 400, 'ambiguous_mention');
    expect(amb.body.error.message).toContain(t1.id);
    expectStatus(await post(owner.client, p.id, { body: 'x', mentions: [t1.id, t2.id] }), 201);
    // Nothing of the refused posts was written, and the audit chain holds.
    const list = await owner.client.get(`/api/v1/nodes/${p.id}/threads`);
    expect(list.body.messages).toHaveLength(2);
    expectError(await owner.client.get(`/api/v1/nodes/${p.id}/threads?limit=0`), 400, 'invalid_request');
    expectError(await owner.client.get(`/api/v1/nodes/${p.id}/threads?limit=501`), 400, 'invalid_request');
    expect(await verifyAuditChain(s.ctx.store.db, owner.workspace.id)).toBeNull();
  });

  it('a deleted page takes its thread with it', async () => {
    const p = await newPage();
    await post(owner.client, p.id, { body: 'x' });
    expectStatus(await owner.client.post('/api/auth/stepup', { password: PASSWORD }), 200);
    expectStatus(await owner.client.delete(`/api/v1/nodes/${p.id}`), 200);
    expectError(await owner.client.get(`/api/v1/nodes/${p.id}/threads`), 404, 'not_found');
    expectError(await post(owner.client, p.id, { body: 'x' }), 404, 'not_found');
  });

  it('appears in the OpenAPI document', async () => {
    const doc = await new Client(s.url).get('/api/v1/openapi.json');
    for (const [path, method] of [
      ['/api/v1/nodes/{id}/threads', 'get'],
      ['/api/v1/nodes/{id}/threads', 'post'],
      ['/api/v1/nodes/{id}/threads/messages', 'post'],
      ['/api/v1/nodes/{id}/threads/read', 'post'],
      ['/api/v1/nodes/{id}/threads/unlock', 'post'],
      ['/api/v1/inbox', 'get'],
      ['/api/v1/inbox/ack', 'post'],
    ] as const) {
      expect(doc.body.paths[path]?.[method], `${method} ${path}`).toBeTruthy();
    }
  });
});
