import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_LOG_ENTRY_CHARS } from '../../src/core/log.js';
import { connectMcp, ok as mcpOk } from '../mcp/support.js';
import { testEngines } from '../support/engines.js';
import { expectError, expectStatus } from '../support/expect.js';
import { Client, createAgentWithKey, joinAs, signupHuman, startTestServer, type TestServer } from '../support/server.js';

/**
 * `POST /api/v1/log {scope, entry}` (issue 16): appends a timestamped, attributed entry to
 * log.md of a Space or folder as one commit, exactly as MCP `context_log` does. The propose
 * grant is enough: an agent that may propose but not read appends to an existing log, and its
 * answer tells it nothing of what the log already holds.
 */

const LINE = /^- \d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z (.+) \((\S+)\): (.*)$/;

describe.each(testEngines())('POST /api/v1/log (%s)', (engine) => {
  let s: TestServer;
  let owner: { id: string; client: Client; workspace: { id: string; slug: string } };
  let viewer: { id: string; client: Client };
  let k = 0;
  const uniq = (p: string) => `${p}${++k}-${Date.now().toString(36)}`;

  const create = async (path: string, sensitivity = 'internal') => {
    const res = await owner.client.post('/api/v1/nodes', { path, content: `---\nsensitivity: ${sensitivity}\n---\n# ${path}\n\nText.\n` });
    expectStatus(res, 201);
    return res.body as { id: string; path: string };
  };
  const read = async (path: string) => {
    const res = await owner.client.get(`/api/v1/nodes/${encodeURIComponent(path)}`);
    expectStatus(res, 200);
    return res.body as { content: string; commit_sha: string; content_hash: string };
  };
  const entries = (content: string) => content.split('\n').filter((l) => l.startsWith('- '));

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = await signupHuman(s.url, 'Olga');
    viewer = await joinAs(owner.client, owner.workspace.slug, 'viewer', 'Vera');
    await create('eng/readme.md');
  }, 60_000);
  afterAll(async () => s?.stop());

  it('appends timestamped, attributed entries to a Space log and a folder log, one commit each, as context_log does', async () => {
    const folder = `eng/${uniq('runbooks')}`;
    const first = await owner.client.post('/api/v1/log', { scope: folder, entry: 'Checked the deploy runbook' });
    expectStatus(first, 201);
    expect(first.body).toMatchObject({ path: `${folder}/log.md` });
    expect(first.body.id).toMatch(/^pg_/);
    expect(first.body.appended.trim()).toMatch(LINE);
    expect(LINE.exec(first.body.appended.trim())!.slice(1)).toEqual(['Olga', owner.id, 'Checked the deploy runbook']);
    const log1 = await read(`${folder}/log.md`);
    expect(first.body).toMatchObject({ commit_sha: log1.commit_sha, content_hash: log1.content_hash });
    expect(log1.content).toContain(`# Log of ${folder}`);

    const second = await viewer.client.post('/api/v1/log', { scope: folder, entry: 'Second entry\nwith two lines' });
    expectStatus(second, 201);
    expect(second.body.id).toBe(first.body.id);
    expect(second.body.commit_sha).not.toBe(first.body.commit_sha);
    const log2 = await read(`${folder}/log.md`);
    expect(entries(log2.content).map((l) => LINE.exec(l)![3])).toEqual(['Checked the deploy runbook', 'Second entry']);
    expect(log2.content).toContain('\n  with two lines\n');
    const hist = await owner.client.get(`/api/v1/nodes/${first.body.id}/history`);
    expect(hist.body.versions.map((v: { action: string }) => v.action)).toEqual(['update', 'create']);

    // A Space-level log, and MCP appending to the same page in the same format.
    expectStatus(await owner.client.post('/api/v1/log', { scope: 'eng', entry: 'space-level' }), 201);
    const agent = await createAgentWithKey(
      owner.client,
      [
        { action: 'propose', ceiling: 'internal' },
        { action: 'read', ceiling: 'internal' },
      ],
      { name: 'logger' },
    );
    const mcp = await connectMcp(s.url, agent.key);
    try {
      const viaMcp = await mcpOk(mcp, 'context_log', { scope: 'eng', entry: 'from mcp' });
      expect(viaMcp.path).toBe('eng/log.md');
      expect(LINE.exec(viaMcp.appended.trim())!.slice(1)).toEqual(['logger', agent.id, 'from mcp']);
    } finally {
      await mcp.close();
    }
    expect(entries((await read('eng/log.md')).content).map((l) => LINE.exec(l)![3])).toEqual(['space-level', 'from mcp']);
  });

  it('propose alone is enough: an agent that cannot read appends to an existing log without learning what it holds', async () => {
    const folder = `eng/${uniq('ops')}`;
    expectStatus(await owner.client.post('/api/v1/log', { scope: folder, entry: 'owner wrote the private plan' }), 201);
    const blind = await createAgentWithKey(owner.client, [{ action: 'propose', ceiling: 'internal' }], { name: 'blind' });
    const res = await blind.client.post('/api/v1/log', { scope: folder, entry: 'agent was here' });
    expectStatus(res, 201);
    expect(res.text).not.toContain('private plan');
    expect(res.body.content_hash).toBeUndefined();
    expect(Object.keys(res.body).sort()).toEqual(['appended', 'commit_sha', 'id', 'path']);
    // It still cannot read the log it wrote to.
    expectError(await blind.client.get(`/api/v1/nodes/${encodeURIComponent(`${folder}/log.md`)}`), 404, 'not_found');
    const log = await read(`${folder}/log.md`);
    expect(entries(log.content).map((l) => LINE.exec(l)!.slice(1))).toEqual([
      ['Olga', owner.id, 'owner wrote the private plan'],
      ['blind', blind.id, 'agent was here'],
    ]);
    expect(log.commit_sha).toBe(res.body.commit_sha);
    // And it starts a log in a new folder of a Space it may propose in.
    const fresh = await blind.client.post('/api/v1/log', { scope: `eng/${uniq('new')}`, entry: 'first' });
    expectStatus(fresh, 201);
    expect(fresh.body.content_hash).toBeUndefined();
  });

  it('what the caller may not reach stays hidden: a Space of secret pages, a log above its propose ceiling, another workspace', async () => {
    const hiddenSpace = uniq('board');
    await create(`${hiddenSpace}/minutes.md`, 'secret');
    const blind = await createAgentWithKey(owner.client, [{ action: 'propose', ceiling: 'internal' }], { name: 'blind2' });
    const hidden = await blind.client.post('/api/v1/log', { scope: hiddenSpace, entry: 'x' });
    const missing = await blind.client.post('/api/v1/log', { scope: `${hiddenSpace}-none`, entry: 'x' });
    expectError(hidden, 404, 'unknown_scope');
    expectError(missing, 404, 'unknown_scope');
    expect(hidden.body.error.message.replace(hiddenSpace, 'X')).toBe(missing.body.error.message.replace(`${hiddenSpace}-none`, 'X'));
    const usable = hidden.body.error.message.split('scopes you can use:')[1] as string;
    expect(usable).toContain('eng');
    expect(usable).not.toContain(hiddenSpace);

    // A confidential log is beyond an internal proposer that cannot read it: as absent as any page.
    const folder = `eng/${uniq('council')}`;
    expectStatus(await owner.client.post('/api/v1/log', { scope: folder, entry: 'started' }), 201);
    const cur = await read(`${folder}/log.md`);
    const raised = await owner.client.put(`/api/v1/nodes/${encodeURIComponent(`${folder}/log.md`)}`, {
      content: `---\nsensitivity: confidential\n---\n${cur.content}`,
    });
    expectStatus(raised, 200);
    expectError(await blind.client.post('/api/v1/log', { scope: folder, entry: 'x' }), 404, 'not_found');
    // A viewer reads nothing confidential either; an editor may append.
    expectError(await viewer.client.post('/api/v1/log', { scope: folder, entry: 'x' }), 404, 'not_found');
    expect(entries((await read(`${folder}/log.md`)).content)).toHaveLength(1);

    const other = await signupHuman(s.url, 'Faraway');
    expectError(await other.client.post('/api/v1/log', { scope: 'eng', entry: 'x' }), 404, 'unknown_scope');
  });

  it('without propose: refused (403 when the log is readable, 404 when it is not)', async () => {
    expectStatus(await owner.client.post('/api/v1/log', { scope: 'eng', entry: 'seed' }), 201);
    const reader = await createAgentWithKey(owner.client, [{ action: 'read' }, { action: 'write' }], { name: 'reader' });
    expectError(await reader.client.post('/api/v1/log', { scope: 'eng', entry: 'x' }), 403, 'forbidden');
    const bare = await createAgentWithKey(owner.client, [], { name: 'bare' });
    expectError(await bare.client.post('/api/v1/log', { scope: 'eng', entry: 'x' }), 404, 'not_found');
  });

  it('bad input is 400: empty, blank, too long, ::: blocks, NUL, unknown fields, bad scopes, malformed JSON', async () => {
    const c = owner.client;
    const cases: [unknown, string][] = [
      [{ scope: 'eng', entry: '' }, 'invalid_request'],
      [{ scope: 'eng', entry: '   \n ' }, 'invalid_entry'],
      [{ scope: 'eng', entry: 'x'.repeat(MAX_LOG_ENTRY_CHARS + 1) }, 'invalid_request'],
      [{ scope: 'eng', entry: '::: secret\nx\n:::' }, 'invalid_entry'],
      [{ scope: 'eng', entry: 'ok\n> ::: secret' }, 'invalid_entry'],
      [{ scope: 'eng', entry: 'nul \u0000 here' }, 'invalid_entry'],
      [{ scope: 'eng', entry: 'x', extra: 1 }, 'invalid_request'],
      [{ entry: 'x' }, 'invalid_request'],
      [{ scope: 'eng' }, 'invalid_request'],
      [{ scope: 7, entry: 'x' }, 'invalid_request'],
      [{ scope: 'eng', entry: ['x'] }, 'invalid_request'],
      [{ scope: '', entry: 'x' }, 'invalid_request'],
      [{ scope: 'eng/../ops', entry: 'x' }, 'invalid_path'],
      [{ scope: 'eng/.hidden', entry: 'x' }, 'invalid_path'],
      [{ scope: 'eng\\ops', entry: 'x' }, 'invalid_path'],
      [{ scope: 'eng/%2e%2e', entry: 'x' }, 'invalid_path'],
      [{ scope: 'x'.repeat(600), entry: 'x' }, 'invalid_request'],
      [[{ scope: 'eng', entry: 'x' }], 'invalid_request'],
    ];
    for (const [body, code] of cases) expectError(await c.post('/api/v1/log', body), 400, code);
    const malformed = await c.request('POST', '/api/v1/log', { body: '{"scope":"eng",', headers: { 'content-type': 'application/json' } });
    expect(malformed.status).toBe(400);
    expect(entries((await read('eng/log.md')).content).some((l) => l.includes('nul'))).toBe(false);
  });
});
