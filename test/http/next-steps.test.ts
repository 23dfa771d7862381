import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { expectError } from '../support/expect.js';
import { createAgentWithKey, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';

/**
 * Issue 13 over REST: the same core answers as MCP. Search `space=`/`cluster=` and bundle `scope`
 * naming nothing the caller can use are 404 `unknown_scope` naming what it can (no longer an
 * empty list); a hidden Space answers as a missing one. A missing section lists the visible
 * headings; a path without `.md` suggests the page; a conflict's 409 carries the head, the
 * clashing hunks (redacted to the caller) and the next step, beside the fields it had.
 */
describe.each(testEngines())('REST errors that say what to do next (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let low: Client;
  let writer: Client;
  const enc = encodeURIComponent;

  const create = async (path: string, content: string, by: Client = owner) => {
    const res = await by.post('/api/v1/nodes', { path, content });
    expect(res.status, res.text).toBe(201);
    return res.body as { id: string; path: string; content_hash: string; commit_sha: string };
  };

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url, 'Olive')).client;
    low = (
      await createAgentWithKey(
        owner,
        ['read', 'search'].map((action) => ({ action, ceiling: 'internal' })),
        { ceiling: 'internal' },
      )
    ).client;
    writer = (
      await createAgentWithKey(owner, [
        { action: 'read', ceiling: 'internal' },
        { action: 'write', ceiling: 'confidential' },
      ])
    ).client;
    await create('eng/ops/deploy.md', '# Deploy\n\nRun it.\n\n::: confidential\n## Escrow\n\nKeys.\n:::\n\n## Rollback\n\nRevert.\n');
    await create('hush/only.md', '---\nsensitivity: confidential\n---\n# Only\n\nHidden words.\n');
  }, 60_000);
  afterAll(async () => s?.stop());

  it('search space= and cluster= naming nothing usable are 404 unknown_scope with the usable scopes', async () => {
    const bad = await owner.get('/api/v1/search?q=deploy&space=nope');
    expectError(bad, 404, 'unknown_scope');
    expect(bad.body.error.message).toContain('Scopes you can use: eng, hush, or a folder inside one');
    const typo = await owner.get('/api/v1/search?q=deploy&space=eng&cluster=opz');
    expectError(typo, 404, 'unknown_scope');
    expect(typo.body.error.message).toContain('Did you mean eng/ops?');
    expect((await owner.get('/api/v1/search?q=deploy&space=eng&cluster=ops')).body.results[0].path).toBe('eng/ops/deploy.md');
    // Hidden and missing Spaces answer alike, and the hidden one is not listed.
    const hidden = await low.get('/api/v1/search?q=words&space=hush');
    const missing = await low.get('/api/v1/search?q=words&space=husk');
    expectError(hidden, 404, 'unknown_scope');
    expect(hidden.body.error.message.replace('hush', 'X')).toBe(missing.body.error.message.replace('husk', 'X'));
    expect(hidden.body.error.message).toContain('Scopes you can use: eng, or a folder inside one');
    expectError(await owner.get('/api/v1/search?q=x&cluster=eng%2F..%2Fhush'), 400, 'invalid_scope');
  });

  it('bundle scope: the same answers', async () => {
    expectError(await owner.post('/api/v1/bundle', { intent: 'deploy', scope: 'nope' }), 404, 'unknown_scope');
    const hidden = await low.post('/api/v1/bundle', { intent: 'words', scope: 'hush' });
    const missing = await low.post('/api/v1/bundle', { intent: 'words', scope: 'husk' });
    expect(hidden.body.error.message.replace('hush', 'X')).toBe(missing.body.error.message.replace('husk', 'X'));
  });

  it('GET ?section= that is missing lists the headings the caller sees; a path without .md suggests the page', async () => {
    const o = await owner.get(`/api/v1/nodes/${enc('eng/ops/deploy.md')}?section=Nope`);
    expectError(o, 404, 'section_not_found');
    expect(o.body.error.message).toContain('headings: "Deploy", "Escrow", "Rollback"');
    const l = await low.get(`/api/v1/nodes/${enc('eng/ops/deploy.md')}?section=Nope`);
    expect(l.body.error.message).toContain('headings: "Deploy", "Rollback"');
    expect(l.body.error.message).not.toContain('Escrow');
    const p = await owner.get(`/api/v1/nodes/${enc('eng/ops/deploy')}`);
    expectError(p, 404, 'not_found');
    expect(p.body.error.message).toContain('did you mean eng/ops/deploy.md?');
    const h = await low.get(`/api/v1/nodes/${enc('hush/only')}`);
    expect(h.body.error.message).toBe('Page hush/only not found');
  });

  it('PUT with a stale base that clashes: 409 with the proposal and current as before, plus hunks and next_step; a writer who cannot see the head is refused', async () => {
    const v1 = await create('eng/plan.md', '# Plan\n\nMonday.\n\nTail.\n');
    const v2 = await owner.put(`/api/v1/nodes/${v1.id}`, { content: '# Plan\n\nTuesday.\n\nTail.\n' });
    expect(v2.status).toBe(200);
    const c = await owner.put(`/api/v1/nodes/${v1.id}`, { content: '# Plan\n\nFriday.\n\nTail.\n', base_sha: v1.commit_sha });
    expectError(c, 409, 'conflict');
    expect(c.body.current.commit_sha).toBe(v2.body.commit_sha);
    expect(c.body.proposal.id).toMatch(/^pp_/);
    expect(c.body.hunks).toEqual([{ where: 'body', yours: 'Friday.', current: 'Tuesday.' }]);
    expect(c.body.next_step).toContain(`write with base_sha ${v2.body.commit_sha}`);
    expect(c.body.error.message).toContain(`head is now commit ${v2.body.commit_sha}`);

    // A writer who cannot read the head whole may not replace it at all (it cannot overwrite what
    // it cannot see), so no conflict, no hunk and nothing of the hidden block reach it.
    const w1 = await create('eng/split.md', '# Split\n\nLine one.\n\nLine two.\n');
    const hidden = await owner.put(`/api/v1/nodes/${w1.id}`, { content: '# Split\n\n::: confidential\nHIDDENWORD\n:::\n\nLine two.\n' });
    expect(hidden.status).toBe(200);
    const r = await writer.put(`/api/v1/nodes/${w1.id}`, { content: '# Split\n\nLine one, mine.\n\nLine two.\n', base_sha: w1.commit_sha });
    expectError(r, 403, 'forbidden');
    expect(r.text).not.toContain('HIDDENWORD');
    expect((await owner.get(`/api/v1/nodes/${w1.id}`)).body.commit_sha).toBe(hidden.body.commit_sha);
  });
});
