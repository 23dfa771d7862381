import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { createAgentWithKey, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';

/**
 * The REST twins of the extended MCP calls (issue 13, beyond the spec): edits in place
 * (POST /nodes/:id/append, /section, /patch), the changes feed (GET /changes) and withdrawing a
 * proposal (POST /proposals/:id/withdraw). Same core functions as the tools; these check what
 * REST adds: status codes, ETag and If-Match, 202 proposals for agents without write.
 */

describe.each(testEngines())('REST edits in place, changes feed, withdraw (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let writer: Client;
  let proposer: Client;
  let proposerId: string;
  let scoped: Client;

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url, 'Olive')).client;
    writer = (await createAgentWithKey(owner, [{ action: 'read' }, { action: 'write' }, { action: 'propose' }], { name: 'Writer' })).client;
    const p = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'propose' }], { name: 'Proposer' });
    proposer = p.client;
    proposerId = p.id;
    scoped = (await createAgentWithKey(owner, [{ action: 'read', scope: 'team', ceiling: 'internal' }], { name: 'Scoped', ceiling: 'internal' })).client;
  });

  afterAll(async () => {
    await s?.stop();
  });

  const create = async (path: string, content: string) => {
    const r = await owner.post('/api/v1/nodes', { path, content });
    expect(r.status, r.text).toBe(201);
    return r.body as { id: string; content_hash: string; commit_sha: string };
  };
  const md = async (id: string) => (await owner.get(`/api/v1/nodes/${id}?format=md`)).text;

  describe('edits in place', () => {
    it('append, replace a section and patch answer the write result with its ETag', async () => {
      const p = await create('team/e/one.md', '# One\n\n## Steps\n\nstep\n\n## End\n\nend\n');
      const a = await writer.post(`/api/v1/nodes/${p.id}/append`, { text: 'another step', section: 'Steps' });
      expect(a.status, a.text).toBe(200);
      expect(a.body).toMatchObject({ id: p.id, changed: true, merged: false });
      expect(a.headers.get('etag')).toBe(`"${a.body.content_hash}"`);
      const r = await writer.post(`/api/v1/nodes/${p.id}/section`, { section: 'End', text: 'the end' }, { 'if-match': a.headers.get('etag')! });
      expect(r.status, r.text).toBe(200);
      const patch = '--- a\n+++ b\n@@ -1,3 +1,3 @@\n-# One\n+# Uno\n \n ## Steps\n';
      const pt = await writer.post(`/api/v1/nodes/${p.id}/patch`, { patch, base_sha: r.body.commit_sha });
      expect(pt.status, pt.text).toBe(200);
      expect(await md(p.id)).toBe('# Uno\n\n## Steps\n\nstep\n\nanother step\n\n## End\n\nthe end\n');
    });

    it('a stale If-Match merges, a clash is 409 with the proposal, and an agent without write proposes (202)', async () => {
      const p = await create('team/e/two.md', '# Two\n\n## A\n\na\n\n## B\n\nb\n');
      expect((await owner.post(`/api/v1/nodes/${p.id}/section`, { section: 'A', text: 'A!' })).status).toBe(200);
      const merged = await writer.post(`/api/v1/nodes/${p.id}/section`, { section: 'B', text: 'B!' }, { 'if-match': `"${p.content_hash}"` });
      expect(merged.status, merged.text).toBe(200);
      expect(merged.body.merged).toBe(true);
      const clash = await writer.post(`/api/v1/nodes/${p.id}/section`, { section: 'A', text: 'a?', base_sha: p.commit_sha });
      expect(clash.status, clash.text).toBe(409);
      expect(clash.body.code).toBe('conflict');
      expect(clash.body.proposal).toMatchObject({ status: 'open', origin: 'conflict' });
      const proposed = await proposer.post(`/api/v1/nodes/${p.id}/append`, { text: 'an idea' });
      expect(proposed.status, proposed.text).toBe(202);
      expect(proposed.body).toMatchObject({ proposed: true, proposal: { status: 'open', kind: 'edit', origin: 'no_write' } });
      expect(await md(p.id)).toBe('# Two\n\n## A\n\nA!\n\n## B\n\nB!\n');
    });

    it('bad inputs: unknown page, missing section, bad diff, hidden blocks, extra fields, oversize', async () => {
      const p = await create('team/e/three.md', '# Three\n\nbody\n\n::: secret\n## Hidden heading\n:::\n');
      expect((await writer.post('/api/v1/nodes/pg_00000000000000000000000000/append', { text: 'x' })).status).toBe(404);
      const hidden = await writer.post(`/api/v1/nodes/${p.id}/section`, { section: 'Nope', text: 'x' });
      expect(hidden.status).toBe(403);
      expect(hidden.text).not.toContain('Hidden heading');
      const q = await create('team/e/four.md', '# Four\n\n## Only\n\nx\n');
      const missing = await writer.post(`/api/v1/nodes/${q.id}/section`, { section: 'Nope', text: 'x' });
      expect(missing.status).toBe(404);
      expect(missing.body).toMatchObject({ code: 'section_not_found' });
      expect(missing.body.error.message).toContain('"Four", "Only"');
      const bad = await writer.post(`/api/v1/nodes/${q.id}/patch`, { patch: 'no hunk here' });
      expect(bad.status).toBe(400);
      expect(bad.body.code).toBe('invalid_patch');
      const stale = await writer.post(`/api/v1/nodes/${q.id}/patch`, { patch: '--- a\n+++ b\n@@ -1 +1 @@\n-# Not there\n+# X\n' });
      expect(stale.status).toBe(409);
      expect(stale.body.code).toBe('patch_does_not_apply');
      expect((await writer.post(`/api/v1/nodes/${q.id}/append`, { text: 'x', extra: 1 })).status).toBe(400);
      expect((await writer.post(`/api/v1/nodes/${q.id}/append`, { text: 7 })).status).toBe(400);
      expect((await writer.post(`/api/v1/nodes/${q.id}/append`, {})).status).toBe(400);
      const big = await writer.post(`/api/v1/nodes/${q.id}/append`, { text: 'y'.repeat(1024 * 1024 - 10) });
      expect(big.status).toBe(413);
      expect(await md(q.id)).toBe('# Four\n\n## Only\n\nx\n');
    });
  });

  describe('GET /api/v1/changes', () => {
    it('pages through what changed, with a cursor that moves only for what the caller sees', async () => {
      const a = await create('team/c/a.md', '# A\n');
      const first = await scoped.get('/api/v1/changes?scope=team/c');
      expect(first.status, first.text).toBe(200);
      expect(first.body.changes.map((c: any) => [c.change, c.path])).toEqual([['created', 'team/c/a.md']]);
      await create('team/c/conf.md', '---\nsensitivity: confidential\n---\n# C\n');
      await owner.post(`/api/v1/nodes/${a.id}/move`, { to: 'team/c/b.md' });
      const next = await scoped.get(`/api/v1/changes?scope=team/c&since=${first.body.next}`);
      expect(next.body.changes).toEqual([expect.objectContaining({ change: 'moved', path: 'team/c/b.md', from: 'team/c/a.md' })]);
      const humanView = await owner.get(`/api/v1/changes?scope=team/c&since=${first.body.next}&limit=1`);
      expect(humanView.body.changes.map((c: any) => c.path)).toEqual(['team/c/conf.md']);
      expect(humanView.body.more).toBe(true);
    });

    it('refuses bad cursors, limits and scopes', async () => {
      expect((await owner.get('/api/v1/changes?since=@@@')).body.code).toBe('invalid_cursor');
      expect((await owner.get('/api/v1/changes?limit=0')).status).toBe(400);
      expect((await owner.get('/api/v1/changes?limit=abc')).status).toBe(400);
      const unknown = await scoped.get('/api/v1/changes?scope=elsewhere');
      expect(unknown.status).toBe(404);
      expect(unknown.body.code).toBe('unknown_scope');
    });
  });

  describe('POST /api/v1/proposals/:id/withdraw', () => {
    it('the author withdraws its open proposal; nobody else can, and only once', async () => {
      const p = await create('team/w/a.md', '# W\n');
      const mine = await proposer.post('/api/v1/proposals', { node_id: p.id, content: '# W\n\nidea\n' });
      expect(mine.status).toBe(201);
      expect((await owner.post(`/api/v1/proposals/${mine.body.id}/withdraw`)).status).toBe(403);
      expect((await writer.post(`/api/v1/proposals/${mine.body.id}/withdraw`, { reason: 'x' })).body.code).toBe('forbidden');
      const w = await proposer.post(`/api/v1/proposals/${mine.body.id}/withdraw`, { reason: 'changed my mind' });
      expect(w.status, w.text).toBe(200);
      expect(w.body).toMatchObject({ status: 'rejected', decided_by: proposerId, decision_reason: 'Withdrawn by its author: changed my mind' });
      const again = await proposer.post(`/api/v1/proposals/${mine.body.id}/withdraw`);
      expect(again.status).toBe(409);
      expect(again.body.code).toBe('proposal_closed');
      expect((await proposer.post('/api/v1/proposals/pp_00000000000000000000000000/withdraw')).status).toBe(404);
      expect((await proposer.post(`/api/v1/proposals/${mine.body.id}/withdraw`, { nope: 1 })).status).toBe(400);
    });
  });
});
