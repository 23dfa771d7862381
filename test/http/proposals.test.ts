import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exportToBareRepo } from '../../src/store/git/export.js';
import { testEngines } from '../support/engines.js';
import { expectError } from '../support/expect.js';
import { Client, createAgentWithKey, joinAs, signupHuman, startTestServer, type TestServer } from '../support/server.js';

const PASSWORD = 'correct horse battery';
const doc = (lines: string[]) => `${lines.join('\n')}\n`;

describe.each(testEngines())('merging, proposals and their events (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let ownerId: string;
  let ws: { id: string; slug: string };
  let editor: Client;
  let viewer: Client;

  beforeAll(async () => {
    s = await startTestServer(engine);
    const h = await signupHuman(s.url, 'Owner');
    owner = h.client;
    ownerId = h.id;
    ws = h.workspace;
    editor = (await joinAs(owner, ws.slug, 'editor')).client;
    viewer = (await joinAs(owner, ws.slug, 'viewer')).client;
  });
  afterAll(async () => s?.stop());

  const inbox = async (c: Client) => (await c.get('/api/v1/inbox?state=all&limit=100')).body.events as any[];

  it('merges a stale write that does not overlap, and says so', async () => {
    const a = (await createAgentWithKey(owner, [{ action: 'read' }, { action: 'write' }], { name: 'merger' })).client;
    const base = doc(['# Title', '', 'alpha', '', 'beta', '', 'gamma', '', 'delta']);
    const c = await a.post('/api/v1/nodes', { path: 'eng/merge/m.md', content: base });
    const first = await a.put(`/api/v1/nodes/${c.body.id}`, { content: base.replace('alpha', 'ALPHA') }, { 'if-match': c.headers.get('etag')! });
    expect(first.body.merged).toBe(false);
    const second = await a.put(`/api/v1/nodes/${c.body.id}`, { content: base.replace('delta', 'DELTA'), base_sha: c.body.content_hash });
    expect(second.status).toBe(200);
    expect(second.body.merged).toBe(true);
    expect(second.body.content).toBe(doc(['# Title', '', 'ALPHA', '', 'beta', '', 'gamma', '', 'DELTA']));
  });

  it('turns an overlapping stale write into a proposal, a conflict event and a 409', async () => {
    const a = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'write' }], { name: 'clasher' });
    const c = await a.client.post('/api/v1/nodes', { path: 'eng/merge/c.md', content: doc(['one', 'two', 'three']) });
    await owner.put(`/api/v1/nodes/${c.body.id}`, { content: doc(['one', 'TWO (owner)', 'three']) });
    const res = await a.client.put(`/api/v1/nodes/${c.body.id}`, { content: doc(['one', 'two (agent)', 'three']) }, { 'if-match': `"${c.body.content_hash}"` });
    expectError(res, 409, 'conflict');
    expect(res.body.proposal).toMatchObject({ status: 'open', kind: 'edit', origin: 'conflict', node_id: c.body.id, base_hash: c.body.content_hash });
    // Agents do not see proposal content; humans do.
    expect(res.body.proposal.content).toBeNull();
    const seen = await owner.get(`/api/v1/proposals/${res.body.proposal.id}`);
    expect(seen.body.content).toBe(doc(['one', 'two (agent)', 'three']));
    // The page is untouched; the writer's inbox holds the conflict, the deciders' a proposal event.
    expect((await owner.get(`/api/v1/nodes/${c.body.id}`)).body.content).toBe(doc(['one', 'TWO (owner)', 'three']));
    expect((await inbox(a.client)).some((e) => e.kind === 'conflict' && e.proposal_id === res.body.proposal.id)).toBe(true);
    expect((await inbox(editor)).some((e) => e.kind === 'proposal' && e.proposal_id === res.body.proposal.id)).toBe(true);
    expect((await inbox(viewer)).some((e) => e.proposal_id === res.body.proposal.id)).toBe(false);
  });

  it('a stale write from a caller who may not write: an agent with propose gets a proposal on its base, a viewer is refused', async () => {
    const reader = (await createAgentWithKey(owner, [{ action: 'read' }, { action: 'propose' }], { name: 'reader-only' })).client;
    const c = await owner.post('/api/v1/nodes', { path: 'eng/merge/ro.md', content: doc(['one', 'two']) });
    await owner.put(`/api/v1/nodes/${c.body.id}`, { content: doc(['one', 'TWO']) });
    const before = (await owner.get('/api/v1/proposals?status=open&limit=200')).body.proposals.length;
    const refused = await viewer.put(`/api/v1/nodes/${c.body.id}`, { content: doc(['one', 'two!']) }, { 'if-match': `"${c.body.content_hash}"` });
    expectError(refused, 403, 'forbidden');
    expect((await owner.get('/api/v1/proposals?status=open&limit=200')).body.proposals.length).toBe(before);
    // Issue 12: the agent's change becomes a proposal based on the version it read (its If-Match).
    const res = await reader.put(`/api/v1/nodes/${c.body.id}`, { content: doc(['one', 'two!']) }, { 'if-match': `"${c.body.content_hash}"` });
    expect(res.status, res.text).toBe(202);
    expect(res.body.proposal).toMatchObject({ kind: 'edit', origin: 'no_write', base_hash: c.body.content_hash });
    expect((await owner.get(`/api/v1/nodes/${c.body.id}`)).body.content).toBe(doc(['one', 'TWO']));
  });

  it('loses no write when two agents race on one page for many rounds', async () => {
    const a = (await createAgentWithKey(owner, [{ action: 'read' }, { action: 'write' }], { name: 'racer-a' })).client;
    const b = (await createAgentWithKey(owner, [{ action: 'read' }, { action: 'write' }], { name: 'racer-b' })).client;
    const lines = Array.from({ length: 40 }, (_, i) => `line ${i}`);
    const c = await a.post('/api/v1/nodes', { path: 'eng/race/page.md', content: doc(lines) });
    const landed = { a: new Set<number>(), b: new Set<number>() };
    let proposals = 0;
    for (let round = 0; round < 12; round++) {
      const [ra, rb] = await Promise.all([a.get(`/api/v1/nodes/${c.body.id}`), b.get(`/api/v1/nodes/${c.body.id}`)]);
      // a edits the top half, b the bottom half; every fourth round both edit line 20.
      const la = round % 4 === 3 ? 20 : round % 10;
      const lb = round % 4 === 3 ? 20 : 30 + (round % 10);
      const edit = (content: string, line: number, who: string) =>
        content
          .split('\n')
          .map((l, i) => (i === line ? `${l} ${who}${round}` : l))
          .join('\n');
      const [wa, wb] = await Promise.all([
        a.put(`/api/v1/nodes/${c.body.id}`, { content: edit(ra.body.content, la, 'a'), base_sha: ra.body.content_hash }),
        b.put(`/api/v1/nodes/${c.body.id}`, { content: edit(rb.body.content, lb, 'b'), base_sha: rb.body.content_hash }),
      ]);
      for (const [w, who] of [
        [wa, 'a'],
        [wb, 'b'],
      ] as const) {
        if (w.status === 200) landed[who].add(round);
        else {
          expect(w.status).toBe(409);
          expect(w.body.proposal.status).toBe('open');
          proposals++;
        }
      }
    }
    const final = (await a.get(`/api/v1/nodes/${c.body.id}`)).body.content as string;
    for (const who of ['a', 'b'] as const) for (const r of landed[who]) expect(final, `${who}${r}`).toContain(`${who}${r}`);
    // Every write either landed or is held in a proposal: 24 writes in all.
    expect(landed.a.size + landed.b.size + proposals).toBe(24);
    expect(landed.a.size + landed.b.size).toBeGreaterThanOrEqual(18);
  });

  it('walks a proposal through its states, with the right people deciding', async () => {
    const agent = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'propose' }], { name: 'proposer' });
    const page = await owner.post('/api/v1/nodes', { path: 'eng/prop/doc.md', content: doc(['# Doc', '', 'first']) });
    const noGrant = (await createAgentWithKey(owner, [{ action: 'read' }], { name: 'mute' })).client;
    expectError(await noGrant.post('/api/v1/proposals', { node_id: page.body.id, content: 'x' }), 403, 'forbidden');

    const p1 = await agent.client.post('/api/v1/proposals', { node_id: page.body.id, content: doc(['# Doc', '', 'second']), reason: 'clearer' });
    expect(p1.status).toBe(201);
    expect(p1.body).toMatchObject({ status: 'open', kind: 'edit', origin: 'propose', reason: 'clearer', proposer: agent.id, content: null });
    // A newer proposal by the same principal for the same page supersedes the older one.
    const p2 = await agent.client.post('/api/v1/proposals', { path: 'eng/prop/doc.md', content: doc(['# Doc', '', 'third']), reason: 'even clearer' });
    const old = await owner.get(`/api/v1/proposals/${p1.body.id}`);
    expect(old.body).toMatchObject({ status: 'superseded', superseded_by: p2.body.id });
    expect((await owner.get('/api/v1/proposals?status=open')).body.proposals.map((x: any) => x.id)).toContain(p2.body.id);

    // Agents and viewers cannot decide; an editor can.
    expect((await agent.client.post(`/api/v1/proposals/${p2.body.id}/accept`)).status).toBe(403);
    expectError(await viewer.post(`/api/v1/proposals/${p2.body.id}/accept`), 403, 'forbidden');
    expectError(await editor.post(`/api/v1/proposals/${p1.body.id}/accept`), 409, 'proposal_closed');
    const acc = await editor.post(`/api/v1/proposals/${p2.body.id}/accept`);
    expect(acc.status).toBe(200);
    expect(acc.body).toMatchObject({ status: 'accepted' });
    expect(acc.body.result_commit).toMatch(/^[0-9a-f]{40}$/);
    const now = await owner.get(`/api/v1/nodes/${page.body.id}`);
    expect(now.body.content).toBe(doc(['# Doc', '', 'third']));
    expect(now.body.updated_by).toBe(agent.id);
    expect((await inbox(agent.client)).some((e) => e.kind === 'proposal' && e.payload.event === 'accepted')).toBe(true);
    expectError(await editor.post(`/api/v1/proposals/${p2.body.id}/reject`, { reason: 'late' }), 409, 'proposal_closed');

    // The commit credits the proposer as author, the editor as committer.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-prop-'));
    try {
      await exportToBareRepo(s.ctx.store.db, ws.id, dir);
      const who = execFileSync('git', ['log', '-1', '--format=%an|%ae|%cn', acc.body.result_commit], { cwd: dir }).toString().trim();
      expect(who).toBe(`proposer|${agent.id}@context-vault|editor`);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }

    const p3 = await agent.client.post('/api/v1/proposals', { node_id: page.body.id, content: 'nope\n' });
    expectError(await editor.post(`/api/v1/proposals/${p3.body.id}/reject`, {}), 400, 'invalid_request');
    const rej = await editor.post(`/api/v1/proposals/${p3.body.id}/reject`, { reason: 'not needed' });
    expect(rej.body).toMatchObject({ status: 'rejected', decision_reason: 'not needed' });
    expect((await inbox(agent.client)).some((e) => e.payload.event === 'rejected' && e.payload.reason === 'not needed')).toBe(true);
  });

  it('re-merges on accept when the page moved on, and can accept edited content', async () => {
    const agent = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'propose' }], { name: 'slowpoke' });
    const page = await owner.post('/api/v1/nodes', { path: 'eng/prop/re.md', content: doc(['a', '', 'b', '', 'c']) });
    const pr = await agent.client.post('/api/v1/proposals', { node_id: page.body.id, content: doc(['a', '', 'b', '', 'C']) });
    await owner.put(`/api/v1/nodes/${page.body.id}`, { content: doc(['A', '', 'b', '', 'c']) });
    await owner.post('/api/auth/stepup', { password: PASSWORD });
    const acc = await owner.post(`/api/v1/proposals/${pr.body.id}/accept`);
    expect(acc.status).toBe(200);
    expect((await owner.get(`/api/v1/nodes/${page.body.id}`)).body.content).toBe(doc(['A', '', 'b', '', 'C']));

    const clash = await agent.client.post('/api/v1/proposals', { node_id: page.body.id, content: doc(['A', '', 'b', '', 'agent']) });
    await owner.put(`/api/v1/nodes/${page.body.id}`, { content: doc(['A', '', 'b', '', 'owner']) });
    expectError(await owner.post(`/api/v1/proposals/${clash.body.id}/accept`), 409, 'conflict');
    const edited = await owner.post(`/api/v1/proposals/${clash.body.id}/accept`, { content: doc(['A', '', 'b', '', 'owner and agent']) });
    expect(edited.status).toBe(200);
    expect((await owner.get(`/api/v1/nodes/${page.body.id}`)).body.content).toBe(doc(['A', '', 'b', '', 'owner and agent']));
  });

  it('proposes a new page at a free path', async () => {
    const agent = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'propose' }], { name: 'creator' });
    const pr = await agent.client.post('/api/v1/proposals', { path: 'eng/prop/new.md', content: '# New\n' });
    expect(pr.body.kind).toBe('create');
    await editor.post(`/api/v1/proposals/${pr.body.id}/accept`);
    const page = await owner.get(`/api/v1/nodes/${encodeURIComponent('eng/prop/new.md')}`);
    expect(page.body).toMatchObject({ content: '# New\n', created_by: agent.id });
  });

  it('turns an archive without write, and an agent move to a wider audience, into proposals', async () => {
    const reader = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'propose' }], { name: 'archivist' });
    const page = await owner.post('/api/v1/nodes', { path: 'eng/else/old.md', content: 'old\n' });
    const ar = await reader.client.post(`/api/v1/nodes/${page.body.id}/archive`, { reason: 'stale' });
    expect(ar.status).toBe(202);
    expect(ar.body.proposal).toMatchObject({ kind: 'archive', origin: 'no_write', params: { reason: 'stale' } });
    expect((await owner.get(`/api/v1/nodes/${page.body.id}`)).body.state).toBe('active');
    await editor.post(`/api/v1/proposals/${ar.body.proposal.id}/accept`);
    expect((await owner.get(`/api/v1/nodes/${page.body.id}`)).body).toMatchObject({ state: 'archived', archived_reason: 'stale' });
    // Without the propose grant it stays a refusal.
    const mute = (await createAgentWithKey(owner, [{ action: 'read' }], { name: 'mute2' })).client;
    const p2 = await owner.post('/api/v1/nodes', { path: 'eng/else/other.md', content: 'x\n' });
    expectError(await mute.post(`/api/v1/nodes/${p2.body.id}/archive`), 403, 'forbidden');

    // Someone reads the pub Space, so moving there widens the audience.
    await createAgentWithKey(owner, [{ action: 'read', scope: 'pub' }], { name: 'pub-reader' });
    const mover = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'write' }, { action: 'propose' }], { name: 'mover' });
    const mv = await mover.client.post(`/api/v1/nodes/${p2.body.id}/move`, { to: 'pub/other.md' });
    expect(mv.status).toBe(202);
    expect(mv.body.proposal).toMatchObject({ kind: 'move', origin: 'step_up', params: { to: 'pub/other.md' } });
    // The gate it passed asks the decider to step up too.
    expectError(await editor.post(`/api/v1/proposals/${mv.body.proposal.id}/accept`), 403, 'step_up_required');
    await editor.post('/api/auth/stepup', { password: PASSWORD });
    expect((await editor.post(`/api/v1/proposals/${mv.body.proposal.id}/accept`)).status).toBe(200);
    expect((await owner.get(`/api/v1/nodes/${p2.body.id}`)).body.path).toBe('pub/other.md');
  });

  it('hides proposals about pages the caller cannot see, and supersedes them when the page is deleted', async () => {
    const low = await createAgentWithKey(
      owner,
      [
        { action: 'read', ceiling: 'internal' },
        { action: 'propose', ceiling: 'internal' },
      ],
      { name: 'low' },
    );
    const high = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'propose' }], { name: 'high' });
    const conf = await owner.post('/api/v1/nodes', { path: 'eng/hidden/c.md', content: '---\nsensitivity: confidential\n---\nc\n' });
    const pr = await high.client.post('/api/v1/proposals', { node_id: conf.body.id, content: '---\nsensitivity: confidential\n---\nc2\n' });
    expect(pr.status).toBe(201);
    expect((await low.client.get(`/api/v1/proposals/${pr.body.id}`)).status).toBe(404);
    expect((await low.client.get('/api/v1/proposals')).body.proposals.map((x: any) => x.id)).not.toContain(pr.body.id);
    expect((await viewer.get(`/api/v1/proposals/${pr.body.id}`)).status).toBe(404);
    expectError(await low.client.post('/api/v1/proposals', { node_id: conf.body.id, content: 'x' }), 404, 'not_found');
    // Proposing content above the ceiling is refused.
    expectError(
      await low.client.post('/api/v1/proposals', { path: 'eng/hidden/new.md', content: '---\nsensitivity: confidential\n---\nx\n' }),
      403,
      'forbidden',
    );

    await owner.post('/api/auth/stepup', { password: PASSWORD });
    expect((await owner.delete(`/api/v1/nodes/${conf.body.id}`)).status).toBe(200);
    expect((await owner.get(`/api/v1/proposals/${pr.body.id}`)).body.status).toBe('superseded');
  });

  it('refuses bad proposal input', async () => {
    const agent = (await createAgentWithKey(owner, [{ action: 'read' }, { action: 'propose' }], { name: 'bad' })).client;
    expectError(await agent.post('/api/v1/proposals', { content: 'x' }), 400, 'invalid_request');
    expectError(await agent.post('/api/v1/proposals', { path: '../x.md', content: 'x' }), 400, 'invalid_path');
    expectError(await agent.post('/api/v1/proposals', { node_id: 'pg_01234567890123456789012345', content: 'x' }), 404, 'not_found');
    expectError(await agent.post('/api/v1/proposals', { path: 'a/b.md', content: '' }), 400, 'empty_content');
    expectError(await agent.post('/api/v1/proposals', { path: 'a/b.md', content: 'x', colour: 1 }), 400, 'invalid_request');
    expectError(await owner.get('/api/v1/proposals/pp_nope'), 404, 'not_found');
    expectError(await owner.get('/api/v1/proposals?status=maybe'), 400, 'invalid_request');
    expect(ownerId).toMatch(/^pr_/);
  });
});
