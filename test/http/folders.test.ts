import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LIFECYCLE_LIMITS } from '../../src/core/folder-input.js';
import { connectMcp, ok as mcpOk } from '../mcp/support.js';
import { testEngines } from '../support/engines.js';
import { expectError, expectStatus } from '../support/expect.js';
import { Client, createAgentWithKey, joinAs, signupHuman, startTestServer, type Res, type TestServer } from '../support/server.js';

/**
 * Folders over REST (issue 16): `POST /api/v1/clusters/<space>/<folder…>/archive|restore` and
 * `PUT …/lifecycle`. An archive changes every page of the folder and its sub-folders in ONE
 * commit; humans step up first; a caller without write but with propose gets archive proposals
 * (202). Lifecycle settings are the owner's (admin), validated, and shown in the tree (REST and
 * MCP) beside the folder's summary, which comes from its index.md.
 */

const PASSWORD = 'correct horse battery';

describe.each(testEngines())('folders over REST (%s)', (engine) => {
  let s: TestServer;
  let owner: { id: string; client: Client; workspace: { id: string; slug: string } };
  let editor: { id: string; client: Client };
  let viewer: { id: string; client: Client };
  let k = 0;
  const uniq = (p: string) => `${p}${++k}-${Date.now().toString(36)}`;

  const create = async (path: string, sensitivity = 'internal', extra = '') => {
    const res = await owner.client.post('/api/v1/nodes', { path, content: `---\nsensitivity: ${sensitivity}\n${extra}---\n# ${path}\n\nBody of ${path}.\n` });
    expectStatus(res, 201);
    return { id: res.body.id as string, path: res.body.path as string, commit_sha: res.body.commit_sha as string };
  };
  /** A fresh folder `eng/<name>` with two pages and a sub-folder page, plus a sibling folder whose name it prefixes. */
  const folder = async () => {
    const name = uniq('legacy');
    const pages = [await create(`eng/${name}/a.md`), await create(`eng/${name}/b.md`), await create(`eng/${name}/sub/c.md`)];
    const sibling = await create(`eng/${name}x/d.md`);
    return { path: `eng/${name}`, pages, sibling };
  };
  const stepUp = async (c: Client) => expectStatus(await c.post('/api/auth/stepup', { password: PASSWORD }), 200);
  const page = async (id: string) => {
    const res = await owner.client.get(`/api/v1/nodes/${encodeURIComponent(id)}`);
    expectStatus(res, 200);
    return res.body;
  };
  const history = async (id: string) => {
    const res = await owner.client.get(`/api/v1/nodes/${encodeURIComponent(id)}/history`);
    expectStatus(res, 200);
    return res.body.versions as { commit_sha: string; action: string; message: string }[];
  };
  const tree = async (c: Client, space: string, query = '') => {
    const res = await c.get(`/api/v1/spaces/${space}/tree${query}`);
    expectStatus(res, 200);
    return res.body;
  };
  const findFolder = (node: any, path: string): any => {
    if (node.path === path) return node;
    for (const f of node.folders) {
      const hit = findFolder(f, path);
      if (hit) return hit;
    }
    return undefined;
  };
  /** A request exactly as written: fetch would resolve `..` before sending. */
  const raw = (method: string, path: string, c: Client, body = '{}'): Promise<Res> =>
    new Promise((resolve, reject) => {
      const u = new URL(c.base);
      const headers: Record<string, string> = { 'content-type': 'application/json', cookie: [...c.cookies].map(([a, b]) => `${a}=${b}`).join('; ') };
      if (c.csrf) headers['x-csrf-token'] = c.csrf;
      const req = http.request({ host: u.hostname, port: u.port, method, path, headers }, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: new Headers(res.headers as Record<string, string>), body: JSON.parse(text || 'null'), text }),
        );
      });
      req.on('error', reject);
      req.end(body);
    });

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = await signupHuman(s.url, 'Olga');
    editor = await joinAs(owner.client, owner.workspace.slug, 'editor');
    viewer = await joinAs(owner.client, owner.workspace.slug, 'viewer');
  }, 60_000);
  afterAll(async () => s?.stop());

  describe('archive and restore', () => {
    it('an owner archives a folder after a step-up: every page, sub-folders included, in one commit; restore is one commit too', async () => {
      const f = await folder();
      const noStep = await owner.client.post(`/api/v1/clusters/${f.path}/archive`, { reason: 'superseded' });
      expectError(noStep, 403, 'step_up_required');
      expect((await page(f.pages[0]!.id)).state).toBe('active');

      await stepUp(owner.client);
      const res = await owner.client.post(`/api/v1/clusters/${f.path}/archive`, { reason: 'superseded' });
      expectStatus(res, 200);
      expect(res.body).toMatchObject({ cluster_path: f.path, archived: true, proposals: [] });
      const commit = res.body.commit_sha as string;
      expect(commit).toMatch(/^[0-9a-f]{40}$/);
      expect(res.body.pages.map((x: { path: string }) => x.path).sort()).toEqual(f.pages.map((x) => x.path).sort());
      expect(res.body.pages.every((x: { commit_sha: string }) => x.commit_sha === commit)).toBe(true);
      for (const p of f.pages) {
        const got = await page(p.id);
        expect(got).toMatchObject({ state: 'archived', commit_sha: commit });
        expect(got.frontmatter).toMatchObject({ state: 'archived', archived_reason: 'superseded' });
        // One new version per page, all the same commit, straight after each page's own create.
        const versions = await history(p.id);
        expect(versions.map((v) => [v.action, v.commit_sha])).toEqual([
          ['archive', commit],
          ['create', p.commit_sha],
        ]);
        expect(versions[0]!.message).toBe(`Archive folder ${f.path} (3 pages)`);
      }
      // The sibling whose name starts the same stays as it was.
      expect((await page(f.sibling.id)).state).toBe('active');
      const t = await tree(owner.client, 'eng', `?path=${f.path.slice(4)}&include_archived=true`);
      expect(t.tree).toMatchObject({ path: f.path, archived: true });

      expectError(await owner.client.post(`/api/v1/clusters/${f.path}/archive`), 409, 'already_archived');

      // Restore needs no step-up: the editor, who never stepped up, restores with a message.
      const back = await editor.client.post(`/api/v1/clusters/${f.path}/restore`, { message: 'Back in use' });
      expectStatus(back, 200);
      expect(back.body).toMatchObject({ cluster_path: f.path, archived: false, proposals: [] });
      expect(back.body.pages).toHaveLength(3);
      expect(back.body.commit_sha).not.toBe(commit);
      for (const p of f.pages) {
        const got = await page(p.id);
        expect(got).toMatchObject({ state: 'active', commit_sha: back.body.commit_sha });
        expect(got.frontmatter.archived_reason).toBeUndefined();
        expect((await history(p.id))[0]).toMatchObject({ action: 'restore', commit_sha: back.body.commit_sha, message: 'Back in use' });
      }
      expectError(await editor.client.post(`/api/v1/clusters/${f.path}/restore`), 409, 'not_archived');
    });

    it('editors and viewers step up too; a stepped-up viewer gets archive proposals (202) and may not restore', async () => {
      const f = await folder();
      expectError(await editor.client.post(`/api/v1/clusters/${f.path}/archive`), 403, 'step_up_required');
      expectError(await viewer.client.post(`/api/v1/clusters/${f.path}/archive`), 403, 'step_up_required');
      await stepUp(viewer.client);
      const res = await viewer.client.post(`/api/v1/clusters/${f.path}/archive`, { reason: 'stale' });
      expectStatus(res, 202);
      expect(res.body).toMatchObject({ proposed: true, cluster_path: f.path, commit_sha: null, pages: [], archived: false });
      expect(res.body.proposals.map((x: { kind: string; path: string }) => [x.kind, x.path]).sort()).toEqual(f.pages.map((p) => ['archive', p.path]).sort());
      for (const p of f.pages) expect((await page(p.id)).state).toBe('active');
      // The proposals are real: the owner sees them open.
      const open = await owner.client.get('/api/v1/proposals?status=open');
      expectStatus(open, 200);
      const ids = open.body.proposals.map((x: { id: string }) => x.id);
      for (const pr of res.body.proposals) expect(ids).toContain(pr.id);

      await stepUp(owner.client);
      expectStatus(await owner.client.post(`/api/v1/clusters/${f.path}/archive`), 200);
      expectError(await viewer.client.post(`/api/v1/clusters/${f.path}/restore`), 403, 'forbidden');
    });

    it('agents: with write it lands without a step-up; with propose only it becomes proposals; without grants the folder does not exist', async () => {
      const writer = await createAgentWithKey(owner.client, [{ action: 'read' }, { action: 'write' }], { name: uniq('writer') });
      const proposer = await createAgentWithKey(owner.client, [{ action: 'read' }, { action: 'propose' }], { name: uniq('proposer') });
      const reader = await createAgentWithKey(owner.client, [{ action: 'read' }], { name: uniq('reader') });
      const bare = await createAgentWithKey(owner.client, [], { name: uniq('bare') });

      const f = await folder();
      const proposed = await proposer.client.post(`/api/v1/clusters/${f.path}/archive`);
      expectStatus(proposed, 202);
      expect(proposed.body.proposals).toHaveLength(3);
      expect(proposed.body.proposals[0]).toMatchObject({ kind: 'archive', params: { reason: 'manual' } });
      expectError(await reader.client.post(`/api/v1/clusters/${f.path}/archive`), 403, 'forbidden');
      const missing = await bare.client.post(`/api/v1/clusters/${f.path}/archive`);
      expectError(missing, 404, 'not_found');
      // Hidden answers exactly as absent.
      const absent = await bare.client.post(`/api/v1/clusters/eng/${uniq('nothing')}/archive`);
      expectError(absent, 404, 'not_found');

      const res = await writer.client.post(`/api/v1/clusters/${f.path}/archive`, { reason: 'closed' });
      expectStatus(res, 200);
      expect(res.body).toMatchObject({ archived: true, proposals: [] });
      expect(new Set(res.body.pages.map((x: { commit_sha: string }) => x.commit_sha))).toEqual(new Set([res.body.commit_sha]));
      expectError(await proposer.client.post(`/api/v1/clusters/${f.path}/restore`), 403, 'forbidden');
      expectStatus(await writer.client.post(`/api/v1/clusters/${f.path}/restore`), 200);
    });

    it('a folder whose pages are all above your ceiling answers as a missing one; mixed folders change only what you may see', async () => {
      const name = uniq('board');
      await create(`eng/${name}/minutes.md`, 'secret');
      await stepUp(editor.client);
      const hidden = await editor.client.post(`/api/v1/clusters/eng/${name}/archive`);
      const missing = await editor.client.post(`/api/v1/clusters/eng/${name}-none/archive`);
      expectError(hidden, 404, 'not_found');
      expectError(missing, 404, 'not_found');
      expect(hidden.body.error.message.replace(name, 'X')).toBe(missing.body.error.message.replace(`${name}-none`, 'X'));

      const open = await create(`eng/${name}/agenda.md`);
      const res = await editor.client.post(`/api/v1/clusters/eng/${name}/archive`);
      expectStatus(res, 200);
      expect(res.body.pages.map((x: { id: string }) => x.id)).toEqual([open.id]);
      // Not every page changed, so the folder itself is not marked archived.
      expect(res.body.archived).toBe(false);
      expect((await page(`eng/${name}/minutes.md`)).state).toBe('active');
    });

    it('bad input: unknown acts and fields, a restore with a reason, a bare Space, traversal and encodings', async () => {
      const f = await folder();
      await stepUp(owner.client);
      const c = owner.client;
      expectError(await c.post(`/api/v1/clusters/${f.path}/explode`), 404, 'not_found');
      expectError(await c.post(`/api/v1/clusters/${f.path}`), 404, 'not_found');
      expectError(await c.post('/api/v1/clusters/archive'), 404, 'not_found');
      expectError(await c.put(`/api/v1/clusters/${f.path}/archive`, { auto_archive_days: 3 }), 404, 'not_found');
      expectError(await c.post(`/api/v1/clusters/${f.path}/archive`, { reason: 'bored' }), 400, 'invalid_request');
      expectError(await c.post(`/api/v1/clusters/${f.path}/archive`, { reason: 'manual', force: true }), 400, 'invalid_request');
      expectError(await c.post(`/api/v1/clusters/${f.path}/restore`, { reason: 'manual' }), 400, 'invalid_request');
      expectError(await c.post(`/api/v1/clusters/${f.path}/archive`, { message: 'x'.repeat(5000) }), 400, 'invalid_request');
      const malformed = await c.request('POST', `/api/v1/clusters/${f.path}/archive`, { body: '{"reason":', headers: { 'content-type': 'application/json' } });
      expect(malformed.status).toBe(400);
      // A Space is not a folder (spec: <space>/<folder>).
      expectError(await c.post('/api/v1/clusters/eng/archive'), 400, 'invalid_path');
      // Traversal, raw and percent-encoded, never reaches another folder.
      for (const path of [
        `/api/v1/clusters/eng/../${f.path}/archive`,
        `/api/v1/clusters/eng/%2e%2e/${f.path.slice(4)}/archive`,
        `/api/v1/clusters/eng/${f.path.slice(4)}/..%2Farchive`,
      ]) {
        expectError(await raw('POST', path, c), 400, 'invalid_path');
      }
      // An encoded slash is a slash: the same folder, nothing else.
      expect((await raw('POST', `/api/v1/clusters/eng%2F${f.path.slice(4)}/explode`, c)).status).toBe(404);
      expectError(await c.post(`/api/v1/clusters/eng/${encodeURIComponent('bad name')}/archive`), 400, 'invalid_path');
      expectError(await c.post(`/api/v1/clusters/eng/${'x'.repeat(101)}/archive`), 400, 'invalid_path');
      for (const p of f.pages) expect((await page(p.id)).state).toBe('active');
      // Percent-encoded letters are the same folder.
      const encoded = f.path.replace(/^eng\/l/, 'eng/%6C');
      const res = await c.post(`/api/v1/clusters/${encoded}/archive`);
      expectStatus(res, 200);
      expect(res.body.cluster_path).toBe(f.path);
    });
  });

  describe('lifecycle settings', () => {
    it('the owner sets them; null clears one, a missing field keeps it; the tree shows them beside the summary from index.md', async () => {
      const f = await folder();
      await create(`${f.path}/index.md`, 'internal', 'summary: "Old services we keep for reference."\n');
      const put = await owner.client.put(`/api/v1/clusters/${f.path}/lifecycle`, { auto_archive_days: 90, half_life_days: 30 });
      expectStatus(put, 200);
      expect(put.body).toEqual({ path: f.path, summary: 'Old services we keep for reference.', auto_archive_days: 90, half_life_days: 30, archived: false });

      const t = await tree(viewer.client, 'eng');
      expect(findFolder(t.tree, f.path)).toMatchObject({ summary: 'Old services we keep for reference.', auto_archive_days: 90, half_life_days: 30 });
      // The sub-folder keeps its own (unset) settings; the Space's own node has none.
      expect(findFolder(t.tree, `${f.path}/sub`)).toMatchObject({ auto_archive_days: null, half_life_days: null });
      expect(t.tree).toMatchObject({ path: 'eng', auto_archive_days: null, half_life_days: null });

      const keep = await owner.client.put(`/api/v1/clusters/${f.path}/lifecycle`, { half_life_days: null });
      expectStatus(keep, 200);
      expect(keep.body).toMatchObject({ auto_archive_days: 90, half_life_days: null });
      const sub = await owner.client.put(`/api/v1/clusters/${f.path}/sub/lifecycle`, { half_life_days: LIFECYCLE_LIMITS.maxDays });
      expectStatus(sub, 200);
      expect(sub.body).toMatchObject({ path: `${f.path}/sub`, summary: '', auto_archive_days: null, half_life_days: LIFECYCLE_LIMITS.maxDays });

      // MCP context_tree answers from the same function.
      const agent = await createAgentWithKey(owner.client, [{ action: 'read' }], { name: uniq('treereader') });
      const mcp = await connectMcp(s.url, agent.key);
      try {
        const mt = await mcpOk(mcp, 'context_tree', { path: f.path });
        expect(mt.tree).toMatchObject({ path: f.path, summary: 'Old services we keep for reference.', auto_archive_days: 90, half_life_days: null });
        expect(findFolder(mt.tree, `${f.path}/sub`)).toMatchObject({ half_life_days: LIFECYCLE_LIMITS.maxDays });
      } finally {
        await mcp.close();
      }
    });

    it('a folder summary falls back to the first paragraph of index.md, and only for callers who may read that page', async () => {
      const name = uniq('notes');
      await create(`eng/${name}/index.md`, 'confidential', '');
      await create(`eng/${name}/open.md`);
      const ownerView = findFolder((await tree(owner.client, 'eng')).tree, `eng/${name}`);
      expect(ownerView.summary).toBe(`Body of eng/${name}/index.md.`);
      const viewerView = findFolder((await tree(viewer.client, 'eng')).tree, `eng/${name}`);
      expect(viewerView.summary).toBe('');
    });

    it('only owners and agents with admin; editors, viewers and other agents are refused; hidden and unknown folders are 404', async () => {
      const f = await folder();
      const body = { auto_archive_days: 30 };
      expectError(await editor.client.put(`/api/v1/clusters/${f.path}/lifecycle`, body), 403, 'forbidden');
      expectError(await viewer.client.put(`/api/v1/clusters/${f.path}/lifecycle`, body), 403, 'forbidden');
      const admin = await createAgentWithKey(owner.client, [{ action: 'read' }, { action: 'admin', scope: 'eng' }], { name: uniq('admin') });
      const elsewhere = await createAgentWithKey(owner.client, [{ action: 'read' }, { action: 'admin', scope: 'ops' }], { name: uniq('opsadmin') });
      const writer = await createAgentWithKey(owner.client, [{ action: 'read' }, { action: 'write' }, { action: 'propose' }], { name: uniq('w') });
      const bare = await createAgentWithKey(owner.client, [], { name: uniq('bare') });
      expectStatus(await admin.client.put(`/api/v1/clusters/${f.path}/lifecycle`, body), 200);
      expectError(await elsewhere.client.put(`/api/v1/clusters/${f.path}/lifecycle`, body), 403, 'forbidden');
      expectError(await writer.client.put(`/api/v1/clusters/${f.path}/lifecycle`, body), 403, 'forbidden');
      expectError(await bare.client.put(`/api/v1/clusters/${f.path}/lifecycle`, body), 404, 'not_found');
      expectError(await owner.client.put(`/api/v1/clusters/eng/${uniq('nowhere')}/lifecycle`, body), 404, 'not_found');
      const secret = uniq('vault');
      await create(`eng/${secret}/keys.md`, 'secret');
      expectError(await admin.client.put(`/api/v1/clusters/eng/${secret}/lifecycle`, body), 404, 'not_found');
      expectStatus(await owner.client.put(`/api/v1/clusters/eng/${secret}/lifecycle`, body), 200);
      // Nothing the refused callers sent stuck.
      expect(findFolder((await tree(owner.client, 'eng')).tree, f.path)).toMatchObject({ auto_archive_days: 30, half_life_days: null });
    });

    it('validation: whole days in range or null, at least one field, no unknown fields, JSON only; traversal and encodings', async () => {
      const f = await folder();
      const url = `/api/v1/clusters/${f.path}/lifecycle`;
      const bad: unknown[] = [
        {},
        { auto_archive_days: 0 },
        { auto_archive_days: -1 },
        { half_life_days: LIFECYCLE_LIMITS.maxDays + 1 },
        { half_life_days: 1e300 },
        { auto_archive_days: 1.5 },
        { auto_archive_days: '30' },
        { auto_archive_days: true },
        { auto_archive_days: [30] },
        { auto_archive_days: { days: 30 } },
        { auto_archive_days: 30, summary: 'no' },
        { auto_archive_days: 30, archived: true },
        [30, 14],
        'thirty',
        null,
      ];
      for (const b of bad) expectError(await owner.client.put(url, b), 400, 'invalid_request');
      const malformed = await owner.client.request('PUT', url, { body: '{"auto_archive_days": 3', headers: { 'content-type': 'application/json' } });
      expect(malformed.status).toBe(400);
      const form = await owner.client.request('PUT', url, { body: 'auto_archive_days=3', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
      expect(form.status).toBeGreaterThanOrEqual(400);
      expect(form.status).toBeLessThan(500);
      expectError(await owner.client.put('/api/v1/clusters/eng/lifecycle', { auto_archive_days: 3 }), 400, 'invalid_path');
      for (const path of [
        `/api/v1/clusters/eng/../${f.path}/lifecycle`,
        `/api/v1/clusters/eng/%2e%2e/${f.path.slice(4)}/lifecycle`,
        `/api/v1/clusters/eng%2F..%2F${f.path.slice(4)}/lifecycle`,
      ]) {
        expectError(await raw('PUT', path, owner.client, JSON.stringify({ auto_archive_days: 3 })), 400, 'invalid_path');
      }
      // The edges of the range are accepted; nothing above changed the folder.
      expect(findFolder((await tree(owner.client, 'eng')).tree, f.path)).toMatchObject({ auto_archive_days: null, half_life_days: null });
      const edge = await owner.client.put(url, { auto_archive_days: LIFECYCLE_LIMITS.minDays, half_life_days: LIFECYCLE_LIMITS.maxDays });
      expectStatus(edge, 200);
      expect(edge.body).toMatchObject({ auto_archive_days: 1, half_life_days: 3650 });
    });
  });
});
