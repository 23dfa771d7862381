import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, joinAs, signupHuman, startTestServer, type Res, type TestServer } from '../support/server.js';
import { call, connectMcp } from '../mcp/support.js';

/**
 * Issue 11, item 11 (and the proposal parts of 8 and 9): a proposal carries the base its
 * proposer read, so accepting it never silently reverts others' work; junk proposals are
 * refused; proposals are judged on the page as it is now; a proposal at a hidden page's path
 * answers as at a free one; the list pages with a cursor.
 */

describe.each(testEngines())('trust: proposals (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let editor: Client;
  let slug: string;
  let n = 0;
  const uniq = (p: string) => `${p}-${++n}-${Date.now().toString(36)}`;

  beforeAll(async () => {
    s = await startTestServer(engine);
    const o = await signupHuman(s.url, 'Owner');
    owner = o.client;
    slug = o.workspace.slug;
    editor = (await joinAs(owner, slug, 'editor')).client;
  }, 60_000);
  afterAll(async () => s?.stop());

  const ORIGINAL = '# Runbook\n\n## Deploy\n\nRun deploy.sh.\n\n## Rollback\n\nRun rollback.sh.\n';
  async function page(content = ORIGINAL, sensitivity?: string) {
    const body = sensitivity ? `---\nsensitivity: ${sensitivity}\n---\n${content}` : content;
    const r = await owner.post('/api/v1/nodes', { path: `ops/${uniq('runbook')}.md`, content: body });
    expect(r.status, r.text).toBe(201);
    return r.body as { id: string; path: string; commit_sha: string; content_hash: string };
  }
  const proposer = () => createAgentWithKey(owner, [{ action: 'read' }, { action: 'propose' }]);

  it('the silent revert: an agent proposes content built from X after someone changed the page; with base_sha X, accepting keeps both changes', async () => {
    const agent = await proposer();
    const x = await page();
    // Someone else changes another part of the page.
    const y = await editor.put(`/api/v1/nodes/${x.id}`, { content: ORIGINAL.replace('Run rollback.sh.', 'Run rollback.sh --safe.') });
    expect(y.status).toBe(200);
    // The agent built its full content from X.
    const mine = ORIGINAL.replace('Run deploy.sh.', 'Run deploy.sh, then check the dashboard.');
    const pr = await agent.client.post('/api/v1/proposals', { node_id: x.id, content: mine, base_sha: x.commit_sha, reason: 'dashboard step' });
    expect(pr.status, pr.text).toBe(201);
    expect(pr.body.base_commit).toBe(x.commit_sha);
    expect(pr.body.base_hash).toBe(x.content_hash);
    const acc = await owner.post(`/api/v1/proposals/${pr.body.id}/accept`);
    expect(acc.status, acc.text).toBe(200);
    const now = (await owner.get(`/api/v1/nodes/${x.id}`)).body.content as string;
    expect(now).toContain('check the dashboard');
    expect(now).toContain('rollback.sh --safe');
  });

  it('without base_sha the base is the page as it is when proposing (documented): content built from an older read replaces the change made before it', async () => {
    const agent = await proposer();
    const x = await page();
    expect((await editor.put(`/api/v1/nodes/${x.id}`, { content: ORIGINAL.replace('Run rollback.sh.', 'Run rollback.sh --safe.') })).status).toBe(200);
    const pr = await agent.client.post('/api/v1/proposals', { node_id: x.id, content: ORIGINAL.replace('Run deploy.sh.', 'Run deploy.sh twice.') });
    expect(pr.status).toBe(201);
    expect(pr.body.base_commit).not.toBe(x.commit_sha);
    // A change made AFTER the proposal is still kept by the merge at accept time.
    const later = (await owner.get(`/api/v1/nodes/${x.id}`)).body.content as string;
    expect((await editor.put(`/api/v1/nodes/${x.id}`, { content: later.replace('# Runbook', '# Runbook (added later)') })).status).toBe(200);
    expect((await owner.post(`/api/v1/proposals/${pr.body.id}/accept`)).status).toBe(200);
    const now = (await owner.get(`/api/v1/nodes/${x.id}`)).body.content as string;
    expect(now).toContain('deploy.sh twice');
    expect(now).toContain('(added later)');
    // …but the change made before the proposal is gone: the proposer should have sent base_sha.
    expect(now).not.toContain('rollback.sh --safe');
  });

  it('a clash at accept keeps the proposal open and shows the conflicting text; accepting with edited content resolves it', async () => {
    const agent = await proposer();
    const x = await page();
    const pr = await agent.client.post('/api/v1/proposals', {
      node_id: x.id,
      content: ORIGINAL.replace('Run deploy.sh.', 'Run deploy-v2.sh.'),
      base_sha: x.commit_sha,
    });
    expect(pr.status).toBe(201);
    expect((await editor.put(`/api/v1/nodes/${x.id}`, { content: ORIGINAL.replace('Run deploy.sh.', 'Run deploy-v3.sh.') })).status).toBe(200);
    const acc = await owner.post(`/api/v1/proposals/${pr.body.id}/accept`);
    expect(acc.status, acc.text).toBe(409);
    expect(acc.body.code).toBe('conflict');
    expect(acc.text).toContain('deploy-v2.sh');
    expect(acc.text).toContain('deploy-v3.sh');
    expect((await owner.get(`/api/v1/proposals/${pr.body.id}`)).body.status).toBe('open');
    const fixed = await owner.post(`/api/v1/proposals/${pr.body.id}/accept`, { content: ORIGINAL.replace('Run deploy.sh.', 'Run deploy-v3.sh (v2 dropped).') });
    expect(fixed.status, fixed.text).toBe(200);
  });

  it("a base_sha that is not a readable version of the page is invalid_base: random, another page's, a hidden version's — the same answer, and no proposal", async () => {
    const agent = await proposer();
    const x = await page();
    const other = await page();
    // A hidden version: the page was secret once, then lowered.
    const hid = await page('# Hidden once\n\nSECRET-WORDS-31.\n', 'secret');
    const lowered = await owner.put(`/api/v1/nodes/${hid.id}`, { content: '# Hidden once\n\nNow open.\n' });
    expect(lowered.status).toBe(200);
    const before = (await owner.get('/api/v1/proposals?status=open&limit=200')).body.proposals.length;
    const answers: string[] = [];
    for (const [id, sha] of [
      [x.id, 'f'.repeat(40)],
      [x.id, other.commit_sha],
      [hid.id, hid.commit_sha],
      [hid.id, hid.content_hash],
    ] as const) {
      const r = await agent.client.post('/api/v1/proposals', { node_id: id, content: '# Mine\n', base_sha: sha });
      expect(r.status, r.text).toBe(400);
      expect(r.body.code).toBe('invalid_base');
      expect(r.text).not.toContain('SECRET-WORDS');
      answers.push(r.body.error.message.replace(sha, '<sha>'));
    }
    expect(new Set(answers).size).toBe(1);
    expect((await owner.get('/api/v1/proposals?status=open&limit=200')).body.proposals.length).toBe(before);
    // Wrong type and shape: 400 before anything else.
    expect((await agent.client.post('/api/v1/proposals', { node_id: x.id, content: '# M\n', base_sha: 42 })).status).toBe(400);
    expect((await agent.client.post('/api/v1/proposals', { node_id: x.id, content: '# M\n', base_sha: 'zz' })).status).toBe(400);
    // Over MCP: the same code as a tool error.
    const c = await connectMcp(s.url, agent.key);
    try {
      const m = await call(c, 'context_propose', { id: hid.id, content: '# Mine\n', base_sha: hid.commit_sha });
      expect(m.isError).toBe(true);
      expect(m.text).toMatch(/^invalid_base: /);
    } finally {
      await c.close();
    }
  });

  it('junk is refused: a patch that is not a unified diff, a patch or content that changes nothing', async () => {
    const agent = await proposer();
    const x = await page();
    const c = await connectMcp(s.url, agent.key);
    try {
      const garbage = await call(c, 'context_propose', { id: x.id, patch: 'please make it better' });
      expect(garbage.isError).toBe(true);
      expect(garbage.text).toMatch(/^invalid_patch: /);
      const same = await call(c, 'context_propose', { id: x.id, content: ORIGINAL });
      expect(same.text).toMatch(/^no_change: /);
      const noop = await call(c, 'context_propose', { id: x.id, patch: `--- a/x.md\n+++ b/x.md\n@@ -1,1 +1,1 @@\n # Runbook\n` });
      expect(noop.isError).toBe(true);
      expect(noop.text).toMatch(/^(no_change|invalid_patch): /);
      // A real patch against the version read (base_sha) works and records that base.
      const good = await call(c, 'context_propose', {
        id: x.id,
        base_sha: x.commit_sha,
        patch: `--- a/x.md\n+++ b/x.md\n@@ -3,3 +3,3 @@\n ## Deploy\n \n-Run deploy.sh.\n+Run deploy.sh now.\n`,
      });
      expect(good.isError, good.text).toBe(false);
      expect(good.json.proposal.base_commit).toBe(x.commit_sha);
    } finally {
      await c.close();
    }
    const rest = await agent.client.post('/api/v1/proposals', { node_id: x.id, content: ORIGINAL });
    expect(rest.status).toBe(409);
    expect(rest.body.code).toBe('no_change');
  });

  it("a writer's own open conflict proposal is superseded when their next write to that page lands", async () => {
    const x = await page();
    expect((await owner.put(`/api/v1/nodes/${x.id}`, { content: ORIGINAL.replace('Run deploy.sh.', 'Run A.') })).status).toBe(200);
    const clash = await editor.put(`/api/v1/nodes/${x.id}`, { content: ORIGINAL.replace('Run deploy.sh.', 'Run B.'), base_sha: x.commit_sha });
    expect(clash.status, clash.text).toBe(409);
    const pid = clash.body.error?.proposal?.id ?? clash.body.proposal?.id;
    expect(pid).toBeTruthy();
    expect((await owner.get(`/api/v1/proposals/${pid}`)).body.status).toBe('open');
    const head = (await editor.get(`/api/v1/nodes/${x.id}`)).body.commit_sha;
    expect((await editor.put(`/api/v1/nodes/${x.id}`, { content: ORIGINAL.replace('Run deploy.sh.', 'Run A and B.'), base_sha: head })).status).toBe(200);
    const after = await owner.get(`/api/v1/proposals/${pid}`);
    expect(after.body.status).toBe('superseded');
    expect(after.body.decision_reason).toMatch(/later write/);
  });

  it("proposals are judged on the page as it is now: raised above a viewer, or moved out of an agent's scope, they disappear", async () => {
    const viewer = (await joinAs(owner, slug, 'viewer')).client;
    const scoped = await createAgentWithKey(owner, [
      { action: 'read', scope: 'ops' },
      { action: 'propose', scope: 'ops' },
    ]);
    const x = await page();
    const pr = await owner.post('/api/v1/proposals', { node_id: x.id, content: `${ORIGINAL}\nMore.\n` });
    expect(pr.status).toBe(201);
    expect((await viewer.get(`/api/v1/proposals/${pr.body.id}`)).status).toBe(200);
    expect((await scoped.client.get(`/api/v1/proposals/${pr.body.id}`)).status).toBe(200);
    // Raised to confidential: the viewer no longer sees the proposal, by id or in the list.
    const raised = await owner.put(`/api/v1/nodes/${x.id}`, { content: `---\nsensitivity: confidential\n---\n${ORIGINAL}` });
    expect(raised.status).toBe(200);
    expect((await viewer.get(`/api/v1/proposals/${pr.body.id}`)).status).toBe(404);
    expect((await viewer.get('/api/v1/proposals?limit=200')).body.proposals.map((p: { id: string }) => p.id)).not.toContain(pr.body.id);
    expect((await viewer.post(`/api/v1/proposals/${pr.body.id}/accept`)).status).toBe(404);
    // Moved out of the agent's scope: gone for it too.
    const y = await page();
    const pr2 = await owner.post('/api/v1/proposals', { node_id: y.id, content: `${ORIGINAL}\nMore.\n` });
    expect((await scoped.client.get(`/api/v1/proposals/${pr2.body.id}`)).status).toBe(200);
    expect((await owner.post(`/api/v1/nodes/${y.id}/move`, { to: `hr/${uniq('moved')}.md` })).status).toBe(200);
    expect((await scoped.client.get(`/api/v1/proposals/${pr2.body.id}`)).status).toBe(404);
  });

  it("a proposal at a hidden page's path answers exactly as one at a free path; accepting it fails cleanly for the human", async () => {
    const viewer = (await joinAs(owner, slug, 'viewer')).client;
    const hidden = await page('# Board minutes\n\nTOP-SECRET-MINUTES.\n', 'secret');
    const free = `ops/${uniq('free')}.md`;
    const a = await viewer.post('/api/v1/proposals', { path: hidden.path, content: '# Mine\n', reason: 'r' });
    const b = await viewer.post('/api/v1/proposals', { path: free, content: '# Mine\n', reason: 'r' });
    expect(a.status, a.text).toBe(201);
    expect(b.status).toBe(201);
    const shape = (r: Res) => ({ kind: r.body.kind, node_id: r.body.node_id, base_hash: r.body.base_hash, status: r.body.status });
    expect(shape(a)).toEqual(shape(b));
    expect(a.text).not.toContain(hidden.id);
    expect(a.text).not.toContain('TOP-SECRET');
    const acc = await owner.post(`/api/v1/proposals/${a.body.id}/accept`);
    expect(acc.status).toBe(409);
    expect(acc.body.code).toBe('already_exists');
    expect((await owner.get(`/api/v1/nodes/${hidden.id}`)).body.content).toContain('TOP-SECRET-MINUTES');
  });

  it('the list pages with a cursor: every visible proposal exactly once, pages full although hidden ones are mixed in', async () => {
    const viewer = (await joinAs(owner, slug, 'viewer')).client;
    const mark = uniq('cursor');
    const open = await page(`# ${mark}\n\nOpen.\n`);
    const secret = await page(`# ${mark}\n\nClosed.\n`, 'secret');
    const made: string[] = [];
    for (let i = 0; i < 7; i++) {
      const target = i % 2 === 0 ? open : secret;
      const r = await owner.post('/api/v1/proposals', { node_id: target.id, content: `# ${mark}\n\nVersion ${i}.\n` });
      expect(r.status).toBe(201);
      if (target === open) made.push(r.body.id);
    }
    // Older open proposals of the same proposer and page are superseded; list every status.
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let i = 0; i < 100; i++) {
      const r: Res = await viewer.get(`/api/v1/proposals?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(r.status, r.text).toBe(200);
      if (r.body.next_cursor) expect(r.body.proposals).toHaveLength(2);
      seen.push(...r.body.proposals.map((p: { id: string }) => p.id));
      cursor = r.body.next_cursor;
      if (!cursor) break;
    }
    expect(new Set(seen).size).toBe(seen.length);
    for (const id of made) expect(seen).toContain(id);
    const all = (await owner.get('/api/v1/proposals?limit=200')).body.proposals.map((p: { id: string }) => p.id);
    expect(seen.length).toBeLessThan(all.length);
    const bad = await viewer.get('/api/v1/proposals?cursor=not-a-cursor');
    expect(bad.status).toBe(400);
    expect(bad.body.code).toBe('invalid_cursor');
  });
});
