import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyAuditChain } from '../../src/core/audit.js';
import { exportToBareRepo } from '../../src/store/git/export.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';

const enc = encodeURIComponent;

describe.each(testEngines())('pages over REST (%s)', (engine) => {
  let s: TestServer;
  let human: Client;
  let workspaceId: string;
  let agent: Client;

  beforeAll(async () => {
    s = await startTestServer(engine);
    const h = await signupHuman(s.url);
    human = h.client;
    workspaceId = h.workspace.id;
    agent = (await createAgentWithKey(human, [{ action: 'read' }, { action: 'write' }])).client;
  });
  afterAll(async () => s?.stop());

  it('creates a page from {path, content} with an ETag and the full record', async () => {
    const content = '---\ntitle: Deploy guide\ntags: [ops, deploy]\n---\n# Deploying\n\nSee [[runbook]] and [setup](../setup/install.md).\n';
    const res = await agent.post('/api/v1/nodes', { path: 'eng/ops/deploy.md', content });
    expect(res.status).toBe(201);
    const r = res.body;
    expect(res.headers.get('etag')).toBe(`"${r.content_hash}"`);
    expect(r.id).toMatch(/^pg_[0-9a-z]{26}$/);
    expect(r).toMatchObject({
      path: 'eng/ops/deploy.md',
      space: 'eng',
      cluster_path: 'eng/ops',
      title: 'Deploy guide',
      content,
      body: '# Deploying\n\nSee [[runbook]] and [setup](../setup/install.md).\n',
      frontmatter: { title: 'Deploy guide', tags: ['ops', 'deploy'] },
      tags: ['ops', 'deploy'],
      sensitivity: 'internal',
      state: 'active',
      redacted: false,
    });
    expect(r.links.map((l: { target: string }) => l.target).sort()).toEqual(['../setup/install.md', 'runbook'].sort());
    expect(r.commit_sha).toMatch(/^[0-9a-f]{40}$/);
    // The content hash is git's blob hash of the raw content.
    const blob = execFileSync('git', ['hash-object', '--stdin'], { input: content }).toString().trim();
    expect(r.content_hash).toBe(blob);
  });

  it('creates a page from {space, cluster_path, title, body, frontmatter}', async () => {
    const res = await agent.post('/api/v1/nodes', {
      space: 'eng',
      cluster_path: 'eng/adr',
      title: 'Use Postgres for scale',
      body: 'We decided.',
      frontmatter: { tags: ['adr'] },
    });
    expect(res.status).toBe(201);
    expect(res.body.path).toBe('eng/adr/use-postgres-for-scale.md');
    expect(res.body.title).toBe('Use Postgres for scale');
    expect(res.body.frontmatter).toMatchObject({ title: 'Use Postgres for scale', tags: ['adr'] });
    expect(res.body.body).toBe('We decided.\n');
    // A relative cluster_path is taken inside the Space.
    const rel = await agent.post('/api/v1/nodes', { space: 'eng', cluster_path: 'adr', title: 'Second', body: 'x' });
    expect(rel.body.path).toBe('eng/adr/second.md');
  });

  it('refuses a second page at the same path', async () => {
    await agent.post('/api/v1/nodes', { path: 'eng/dup/a.md', content: 'one' });
    const again = await agent.post('/api/v1/nodes', { path: 'eng/dup/a.md', content: 'two' });
    expect(again.status).toBe(409);
    expect(again.body.code).toBe('already_exists');
  });

  it('reads by id and by URL-encoded path, as JSON, as markdown and by section; reads are recorded', async () => {
    const content = '# Guide\n\nIntro.\n\n## Setup\n\nRun it.\n\n### Details\n\nMore.\n\n## Usage\n\nUse it.\n';
    const c = await agent.post('/api/v1/nodes', { path: 'eng/read/guide.md', content });
    const byId = await agent.get(`/api/v1/nodes/${c.body.id}`);
    expect(byId.status).toBe(200);
    expect(byId.body.content).toBe(content);
    expect(byId.body.last_touched_at).not.toBeNull();
    expect(byId.headers.get('etag')).toBe(`"${c.body.content_hash}"`);
    const byPath = await agent.get(`/api/v1/nodes/${enc('eng/read/guide.md')}`);
    expect(byPath.body.id).toBe(c.body.id);
    const md = await agent.get(`/api/v1/nodes/${c.body.id}?format=md`);
    expect(md.headers.get('content-type')).toMatch(/^text\/markdown/);
    expect(md.text).toBe(content);
    const sec = await agent.get(`/api/v1/nodes/${c.body.id}?section=${enc('setup')}`);
    expect(sec.body.section).toBe('## Setup\n\nRun it.\n\n### Details\n\nMore.\n');
    const secMd = await agent.get(`/api/v1/nodes/${c.body.id}?section=Usage&format=md`);
    expect(secMd.text).toBe('## Usage\n\nUse it.\n');
    // The touch is flushed to the database shortly after.
    await s.ctx.touches.flush();
    const row = await s.ctx.store.db.selectFrom('pages').select('last_touched_at').where('id', '=', c.body.id).executeTakeFirstOrThrow();
    expect(row.last_touched_at).not.toBeNull();
  });

  it('updates with If-Match and base_sha, refuses stale ones with 409, and allows unconditional writes', async () => {
    const c = await agent.post('/api/v1/nodes', { path: 'eng/cas/page.md', content: '# v1\n' });
    const etag = c.headers.get('etag')!;
    const put = await agent.put(`/api/v1/nodes/${c.body.id}`, { content: '# v2\n' }, { 'if-match': etag });
    expect(put.status).toBe(200);
    expect(put.body.changed).toBe(true);
    expect(put.body.content).toBe('# v2\n');
    expect(put.headers.get('etag')).toBe(`"${put.body.content_hash}"`);

    const stale = await agent.put(`/api/v1/nodes/${c.body.id}`, { content: '# lost?\n' }, { 'if-match': etag });
    expect(stale.status).toBe(409);
    expect(stale.body).toMatchObject({ code: 'conflict', error: { code: 'conflict' }, current: { content_hash: put.body.content_hash } });
    const staleBase = await agent.patch(`/api/v1/nodes/${c.body.id}`, { body: 'x', base_sha: c.body.content_hash });
    expect(staleBase.status).toBe(409);
    expect((await agent.get(`/api/v1/nodes/${c.body.id}`)).body.content).toBe('# v2\n');

    // base_sha may be the commit sha that was read, too.
    const byCommit = await agent.put(`/api/v1/nodes/${c.body.id}`, { content: '# v3\n', base_sha: put.body.commit_sha });
    expect(byCommit.status).toBe(200);
    // Without a precondition the last writer wins (documented).
    const lww = await agent.put(`/api/v1/nodes/${c.body.id}`, { content: '# v4\n' });
    expect(lww.status).toBe(200);
    expect(lww.body.content).toBe('# v4\n');
    // Writing the same content makes no commit.
    const same = await agent.put(`/api/v1/nodes/${c.body.id}`, { content: '# v4\n' });
    expect(same.body.changed).toBe(false);
    expect(same.body.commit_sha).toBe(lww.body.commit_sha);
  });

  it('PATCH merges frontmatter keys (null removes) and keeps the rest', async () => {
    const c = await agent.post('/api/v1/nodes', { path: 'eng/patch/p.md', content: '---\ntitle: T\nowner: ann\nstatus: draft\n---\nBody\n' });
    const res = await agent.patch(`/api/v1/nodes/${c.body.id}`, { frontmatter: { status: 'final', owner: null, reviewers: ['bo'] } });
    expect(res.status).toBe(200);
    expect(res.body.frontmatter).toEqual({ title: 'T', status: 'final', reviewers: ['bo'] });
    expect(res.body.body).toBe('Body\n');
    const t = await agent.patch(`/api/v1/nodes/${c.body.id}`, { title: 'New title' });
    expect(t.body.title).toBe('New title');
    expect(t.body.frontmatter.status).toBe('final');
  });

  it('moves a page keeping its id, and refuses a move onto an existing page', async () => {
    const c = await agent.post('/api/v1/nodes', { path: 'eng/mv/a.md', content: '# A\n' });
    await agent.post('/api/v1/nodes', { path: 'eng/mv/b.md', content: '# B\n' });
    const clash = await agent.post(`/api/v1/nodes/${c.body.id}/move`, { to: 'eng/mv/b.md' });
    expect(clash.status).toBe(409);
    const mv = await agent.post(`/api/v1/nodes/${c.body.id}/move`, { to: 'docs/moved/a.md' });
    expect(mv.status).toBe(200);
    expect(mv.body).toMatchObject({ id: c.body.id, path: 'docs/moved/a.md', space: 'docs', cluster_path: 'docs/moved' });
    expect((await agent.get(`/api/v1/nodes/${enc('eng/mv/a.md')}`)).status).toBe(404);
    expect((await agent.get(`/api/v1/nodes/${enc('docs/moved/a.md')}`)).body.id).toBe(c.body.id);
    // The old path is free again.
    expect((await agent.post('/api/v1/nodes', { path: 'eng/mv/a.md', content: 'new' })).status).toBe(201);
  });

  it('archives with a reason and restores, with the state in frontmatter', async () => {
    const c = await agent.post('/api/v1/nodes', { path: 'eng/arch/old.md', content: '---\ntitle: Old\n---\nBody\n' });
    const bad = await agent.post(`/api/v1/nodes/${c.body.id}/archive`, { reason: 'bored' });
    expect(bad.status).toBe(400);
    const a = await agent.post(`/api/v1/nodes/${c.body.id}/archive`, { reason: 'superseded' });
    expect(a.status).toBe(200);
    expect(a.body).toMatchObject({ state: 'archived', archived_reason: 'superseded' });
    expect(a.body.frontmatter).toMatchObject({ title: 'Old', state: 'archived', archived_reason: 'superseded' });
    expect(Date.parse(a.body.archived_at)).not.toBeNaN();
    expect((await agent.post(`/api/v1/nodes/${c.body.id}/archive`)).body.code).toBe('already_archived');
    const tree = await agent.get('/api/v1/spaces/eng/tree?depth=5');
    expect(JSON.stringify(tree.body)).not.toContain('eng/arch/old.md');
    const treeAll = await agent.get('/api/v1/spaces/eng/tree?depth=5&include_archived=true');
    expect(JSON.stringify(treeAll.body)).toContain('eng/arch/old.md');
    const r = await agent.post(`/api/v1/nodes/${c.body.id}/restore`);
    expect(r.status).toBe(200);
    expect(r.body.state).toBe('active');
    expect(r.body.frontmatter).toEqual({ title: 'Old' });
    expect((await agent.post(`/api/v1/nodes/${c.body.id}/restore`)).body.code).toBe('not_archived');
  });

  it('keeps history, reads at an older commit, diffs (secret read only) and survives delete', async () => {
    const c = await agent.post('/api/v1/nodes', { path: 'eng/hist/h.md', content: 'one\n' });
    const u = await agent.put(`/api/v1/nodes/${c.body.id}`, { content: 'two\n' });
    const mv = await agent.post(`/api/v1/nodes/${c.body.id}/move`, { to: 'eng/hist/h2.md' });
    const hist = await agent.get(`/api/v1/nodes/${c.body.id}/history`);
    expect(hist.status).toBe(200);
    expect(hist.body.versions.map((v: { action: string }) => v.action)).toEqual(['move', 'update', 'create']);
    expect(hist.body.versions[2].commit_sha).toBe(c.body.commit_sha);
    const page1 = await agent.get(`/api/v1/nodes/${c.body.id}/history?limit=1`);
    expect(page1.body.versions).toHaveLength(1);
    const page2 = await agent.get(`/api/v1/nodes/${c.body.id}/history?limit=5&before=${page1.body.next_before}`);
    expect(page2.body.versions.map((v: { action: string }) => v.action)).toEqual(['update', 'create']);

    const at = await agent.get(`/api/v1/nodes/${c.body.id}?at=${c.body.commit_sha}`);
    expect(at.status).toBe(200);
    expect(at.body).toMatchObject({ content: 'one\n', path: 'eng/hist/h.md', commit_sha: c.body.commit_sha });
    const short = await agent.get(`/api/v1/nodes/${c.body.id}?at=${u.body.commit_sha.slice(0, 10)}`);
    expect(short.body.content).toBe('two\n');

    // An agent never has secret read, so diff is refused; the owner may.
    expect((await agent.get(`/api/v1/nodes/${c.body.id}/diff`)).status).toBe(403);
    const d = await human.get(`/api/v1/nodes/${c.body.id}/diff?from=${c.body.commit_sha}&to=${u.body.commit_sha}`);
    expect(d.status).toBe(200);
    expect(d.body.diff).toContain('-one');
    expect(d.body.diff).toContain('+two');
    expect(d.body).toMatchObject({ from_content: 'one\n', to_content: 'two\n' });

    // Delete needs admin for an agent, and a step-up for a human.
    const del1 = await agent.delete(`/api/v1/nodes/${c.body.id}`);
    expect(del1.status).toBe(403);
    expect((await human.delete(`/api/v1/nodes/${c.body.id}`)).body.code).toBe('step_up_required');
    expect((await human.post('/api/auth/stepup', { password: 'correct horse battery' })).status).toBe(200);
    const del = await human.delete(`/api/v1/nodes/${c.body.id}`);
    expect(del.status).toBe(200);
    expect(del.body).toMatchObject({ deleted: true, id: c.body.id, path: 'eng/hist/h2.md' });
    expect((await agent.get(`/api/v1/nodes/${c.body.id}`)).status).toBe(404);
    const after = await agent.get(`/api/v1/nodes/${c.body.id}/history`);
    expect(after.body.versions[0].action).toBe('delete');
    expect((await agent.get(`/api/v1/nodes/${c.body.id}?at=${mv.body.commit_sha}`)).body.content).toBe('two\n');
    expect((await agent.get(`/api/v1/nodes/${c.body.id}?at=${del.body.commit_sha}`)).status).toBe(404);
  });

  it('lets an agent with the admin grant delete', async () => {
    const admin = (await createAgentWithKey(human, [{ action: 'read' }, { action: 'write' }, { action: 'admin' }])).client;
    const c = await admin.post('/api/v1/nodes', { path: 'eng/del/x.md', content: 'x' });
    expect((await admin.delete(`/api/v1/nodes/${c.body.id}`)).status).toBe(200);
  });

  it('serves a folder tree with depth and path', async () => {
    for (const p of ['kb/a/one.md', 'kb/a/b/two.md', 'kb/a/b/c/three.md', 'kb/top.md']) {
      expect((await agent.post('/api/v1/nodes', { path: p, content: `# ${p}\n` })).status).toBe(201);
    }
    const t = await agent.get('/api/v1/spaces/kb/tree?depth=1');
    expect(t.status).toBe(200);
    expect(t.body.tree.page_count).toBe(4);
    expect(t.body.tree.pages.map((p: { path: string }) => p.path)).toEqual(['kb/top.md']);
    const a = t.body.tree.folders[0];
    expect(a).toMatchObject({ path: 'kb/a', page_count: 3, truncated: true, folders: [] });
    const deep = await agent.get('/api/v1/spaces/kb/tree?path=a/b&depth=10');
    expect(deep.body.tree.path).toBe('kb/a/b');
    expect(deep.body.tree.folders[0].pages[0].path).toBe('kb/a/b/c/three.md');
    expect((await agent.get('/api/v1/spaces/nope/tree')).status).toBe(404);
    const spaces = await agent.get('/api/v1/spaces');
    expect(spaces.body.spaces.map((x: { id: string }) => x.id)).toContain('kb');
  });

  it('creates Spaces with the admin grant only', async () => {
    expect((await agent.post('/api/v1/spaces', { id: 'ops', name: 'Operations' })).status).toBe(403);
    const made = await human.post('/api/v1/spaces', { id: 'ops', name: 'Operations', summary: 'Runbooks' });
    expect(made.status).toBe(201);
    expect(made.body).toMatchObject({ id: 'ops', name: 'Operations', summary: 'Runbooks' });
    expect((await human.post('/api/v1/spaces', { id: 'ops', name: 'again' })).status).toBe(409);
    expect((await human.post('/api/v1/spaces', { id: 'a/b', name: 'x' })).status).toBe(400);
  });

  it('records the commit message given, refuses an over-long one', async () => {
    const c = await agent.post('/api/v1/nodes', { path: 'eng/msg/m.md', content: 'x', message: 'Add the m page' });
    const h = await agent.get(`/api/v1/nodes/${c.body.id}/history`);
    expect(h.body.versions[0].message).toBe('Add the m page');
    const long = await agent.put(`/api/v1/nodes/${c.body.id}`, { content: 'y', message: 'm'.repeat(2001) });
    expect(long.status).toBe(400);
    expect((await agent.get(`/api/v1/nodes/${c.body.id}`)).body.content).toBe('x');
  });

  it('tells a signed-in human who they are and where', async () => {
    const me = await human.get('/api/auth/me');
    expect(me.status).toBe(200);
    expect(me.body.workspace).toMatchObject({ id: workspaceId, role: 'owner' });
    expect(me.body.workspaces).toEqual([expect.objectContaining({ id: workspaceId, role: 'owner' })]);
    expect(me.body.user.email).toContain('@example.com');
    // Agents have no web session.
    const a = await agent.get('/api/auth/me');
    expect(a.status).toBe(403);
    expect(a.body.code).toBe('session_required');
    const v1 = await human.get('/api/v1/me');
    expect(v1.body).toMatchObject({ kind: 'human', role: 'owner', totp: false });
    const av1 = await agent.get('/api/v1/me');
    expect(av1.body.kind).toBe('agent');
    expect(av1.body.grants.map((g: { action: string }) => g.action)).toEqual(['read', 'write']);
  });

  it('writes real git history: fsck, log and show agree with the API', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-git-'));
    try {
      await exportToBareRepo(s.ctx.store.db, workspaceId, dir);
      execFileSync('git', ['fsck', '--strict', '--no-dangling'], { cwd: dir, stdio: 'pipe' });
      const commits = await s.ctx.store.db.selectFrom('commits').select(['sha']).where('workspace_id', '=', workspaceId).orderBy('seq', 'desc').execute();
      const log = execFileSync('git', ['log', '--format=%H', 'main'], { cwd: dir }).toString().trim().split('\n');
      expect(log).toEqual(commits.map((c) => c.sha));
      const page = await agent.get(`/api/v1/nodes/${enc('eng/ops/deploy.md')}`);
      const shown = execFileSync('git', ['show', `${page.body.commit_sha}:eng/ops/deploy.md`], { cwd: dir }).toString();
      expect(shown).toBe(page.body.content);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('chains every mutation into the audit log', async () => {
    const n = await s.ctx.store.db
      .selectFrom('audit_log')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('workspace_id', '=', workspaceId)
      .executeTakeFirstOrThrow();
    expect(Number(n.n)).toBeGreaterThan(10);
    expect(await verifyAuditChain(s.ctx.store.db, workspaceId)).toBeNull();
    // Tampering with one entry is detected at that entry.
    await s.ctx.store.db.updateTable('audit_log').set({ detail: '{"forged":true}' }).where('workspace_id', '=', workspaceId).where('seq', '=', 3).execute();
    expect(await verifyAuditChain(s.ctx.store.db, workspaceId)).toBe(3);
  });
});
