import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { createAgentWithKey, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';
import { connectMcp } from '../mcp/support.js';

/**
 * Issue 12: the spec's proposal table — "an agent action that lacks permission" with the propose
 * grant opens a proposal. REST create, update and restore by such an agent answer 202 with the
 * proposal, as archive already did; without propose they stay 403; MCP context_write still
 * points to context_propose.
 */
describe.each(testEngines())('agents without write propose instead (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let proposer: { client: Client; key: string };
  let reader: Client; // read only: no propose
  let writer: Client; // write up to internal
  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url)).client;
    const a = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'propose' }], { name: 'proposer' });
    proposer = { client: a.client, key: a.key };
    reader = (await createAgentWithKey(owner, [{ action: 'read' }], { name: 'reader' })).client;
    writer = (
      await createAgentWithKey(owner, [{ action: 'read', ceiling: 'internal' }, { action: 'write', ceiling: 'internal' }, { action: 'propose' }], {
        name: 'writer',
        ceiling: 'internal',
      })
    ).client;
  });
  afterAll(async () => s?.stop());

  const accept = async (id: string) => {
    expect((await owner.post('/api/auth/stepup', { password: 'correct horse battery' })).status).toBe(200);
    const r = await owner.post(`/api/v1/proposals/${id}/accept`, {});
    expect(r.status, r.text).toBe(200);
    return r.body;
  };

  it('a create becomes a create proposal (202); accepting it creates the page', async () => {
    const r = await proposer.client.post('/api/v1/nodes', { path: 'eng/new-idea.md', content: '# New idea\n\nFrom an agent.\n', message: 'please add' });
    expect(r.status, r.text).toBe(202);
    expect(r.body.proposed).toBe(true);
    expect(r.body.proposal).toMatchObject({ kind: 'create', origin: 'no_write', path: 'eng/new-idea.md', status: 'open' });
    expect((await owner.get(`/api/v1/nodes/${encodeURIComponent('eng/new-idea.md')}`)).status).toBe(404);
    await accept(r.body.proposal.id);
    const page = await owner.get(`/api/v1/nodes/${encodeURIComponent('eng/new-idea.md')}`);
    expect(page.status).toBe(200);
    expect(page.body.content).toContain('From an agent.');
  });

  it('an update (PUT and PATCH) becomes an edit proposal on the version the agent read; accepting merges it', async () => {
    const c = await owner.post('/api/v1/nodes', { path: 'eng/plan.md', content: '# Plan\n\nStep one.\n\nStep two.\n' });
    expect(c.status).toBe(201);
    const read = c.body.commit_sha as string;
    // Someone else changes the first line after the agent read the page.
    expect((await owner.put(`/api/v1/nodes/${c.body.id}`, { content: '# Plan\n\nStep one, done.\n\nStep two.\n' })).status).toBe(200);
    const put = await proposer.client.put(`/api/v1/nodes/${c.body.id}`, { content: '# Plan\n\nStep one.\n\nStep two, by the agent.\n', base_sha: read });
    expect(put.status, put.text).toBe(202);
    expect(put.body.proposal).toMatchObject({ kind: 'edit', origin: 'no_write', node_id: c.body.id });
    await accept(put.body.proposal.id);
    const after = (await owner.get(`/api/v1/nodes/${c.body.id}`)).body.content as string;
    // Both changes are there: the proposal did not revert the other writer's work.
    expect(after).toContain('Step one, done.');
    expect(after).toContain('Step two, by the agent.');

    const patch = await proposer.client.patch(`/api/v1/nodes/${c.body.id}`, { frontmatter: { tags: ['planning'] } });
    expect(patch.status, patch.text).toBe(202);
    expect(patch.body.proposal.kind).toBe('edit');
  });

  it('a restore becomes a proposal; accepting it restores the page', async () => {
    const c = await owner.post('/api/v1/nodes', { path: 'eng/old.md', content: '# Old\n\nOld text.\n' });
    expect((await owner.post(`/api/v1/nodes/${c.body.id}/archive`, { reason: 'stale' })).status).toBe(200);
    const r = await proposer.client.post(`/api/v1/nodes/${c.body.id}/restore`, {});
    expect(r.status, r.text).toBe(202);
    expect(r.body.proposal).toMatchObject({ origin: 'no_write', node_id: c.body.id });
    expect((await owner.get(`/api/v1/nodes/${c.body.id}`)).body.state).toBe('archived');
    await accept(r.body.proposal.id);
    expect((await owner.get(`/api/v1/nodes/${c.body.id}`)).body.state).toBe('active');
  });

  it('without the propose grant the same requests stay 403, and nothing is proposed', async () => {
    const c = await owner.post('/api/v1/nodes', { path: 'eng/locked.md', content: '# Locked\n\nText.\n' });
    expect((await reader.post('/api/v1/nodes', { path: 'eng/other.md', content: '# Other\n' })).status).toBe(403);
    expect((await reader.put(`/api/v1/nodes/${c.body.id}`, { content: '# Locked\n\nChanged.\n' })).status).toBe(403);
    const open = (await owner.get('/api/v1/proposals?status=open')).body.proposals as { path: string }[];
    expect(open.filter((x) => x.path === 'eng/other.md' || x.path === 'eng/locked.md')).toEqual([]);
  });

  it('a writer whose content is above its ceiling is refused, not turned into a proposal', async () => {
    const r = await writer.post('/api/v1/nodes', { path: 'eng/high.md', content: '---\nsensitivity: confidential\n---\n# High\n' });
    expect(r.status, r.text).toBe(403);
  });

  it('a proposal identical to the page is refused (409 no_change); a path held by a visible page is 409 already_exists', async () => {
    const c = await owner.post('/api/v1/nodes', { path: 'eng/same.md', content: '# Same\n\nText.\n' });
    const same = await proposer.client.put(`/api/v1/nodes/${c.body.id}`, { content: '# Same\n\nText.\n' });
    expect(same.status).toBe(409);
    expect(same.body.code).toBe('no_change');
    const taken = await proposer.client.post('/api/v1/nodes', { path: 'eng/same.md', content: '# Again\n' });
    expect(taken.status).toBe(409);
    expect(taken.body.code).toBe('already_exists');
  });

  it('MCP context_write still refuses and points to context_propose', async () => {
    const mcp = await connectMcp(s.url, proposer.key);
    try {
      const r = await mcp.callTool({ name: 'context_write', arguments: { path: 'eng/mcp.md', content: '# Mcp\n' } });
      expect(r.isError).toBe(true);
      expect(JSON.stringify(r.content)).toMatch(/context_propose/);
    } finally {
      await mcp.close();
    }
  });
});
