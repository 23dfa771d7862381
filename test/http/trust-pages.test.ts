import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, joinAs, signupHuman, startTestServer, type Res, type TestServer } from '../support/server.js';
import { call, connectMcp } from '../mcp/support.js';

/**
 * Issue 11, items 1, 5 and 8 (pages): old versions, validators and existence must tell a
 * caller nothing of what lies above its ceiling or outside its grants. Each test replays the
 * attack a review found, over HTTP (and MCP where the tool is a way in of its own).
 */

const PASSWORD = 'correct horse battery';
const enc = encodeURIComponent;
/** The git blob sha of a text, as git computes it: what a plain content hash would reveal. */
const blobSha = (text: string) =>
  createHash('sha1')
    .update(`blob ${Buffer.byteLength(text)}\0${text}`)
    .digest('hex');

describe.each(testEngines())('trust: pages, versions and validators (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let editor: Client;
  let viewer: Client;
  let slug: string;
  let n = 0;
  const uniq = (p: string) => `${p}-${++n}-${Date.now().toString(36)}`;

  beforeAll(async () => {
    s = await startTestServer(engine);
    const o = await signupHuman(s.url, 'Owner');
    owner = o.client;
    slug = o.workspace.slug;
    editor = (await joinAs(owner, slug, 'editor')).client;
    viewer = (await joinAs(owner, slug, 'viewer')).client;
  }, 60_000);
  afterAll(async () => s?.stop());

  async function write(c: Client, path: string, content: string, id?: string) {
    const r = id ? await c.put(`/api/v1/nodes/${id}`, { content }) : await c.post('/api/v1/nodes', { path, content });
    expect(r.status, r.text).toBe(id ? 200 : 201);
    return r.body as { id: string; commit_sha: string; content_hash: string };
  }
  const proposalsOf = async (c: Client) => ((await c.get('/api/v1/proposals?status=open')).body.proposals ?? []) as { id: string; path: string }[];

  describe('item 1: a write conflict never carries a version the writer may not read', () => {
    it('a base that is a hidden old version (page lowered from secret) is invalid_base, like an unknown one; no proposal keeps its text', async () => {
      const path = `plans/${uniq('p')}.md`;
      const v1 = await write(owner, path, '---\nsensitivity: secret\n---\n# Plan\n\nSECRET-PLAN-4242 is the codename.\n');
      const v2 = await write(owner, path, '---\nsensitivity: internal\n---\n# Plan\n\nNothing to see.\n', v1.id);
      const before = (await proposalsOf(owner)).length;

      const answers = [];
      for (const body of [
        { content: '# Plan\n\nMy edit.\n', base_sha: v1.commit_sha },
        { content: '# Plan\n\nMy edit.\n', base_sha: v1.content_hash },
        { content: '# Plan\n\nMy edit.\n', base_sha: 'f'.repeat(40) },
      ]) {
        const r = await editor.put(`/api/v1/nodes/${v1.id}`, body);
        expect(r.status, r.text).toBe(400);
        expect(r.body.code).toBe('invalid_base');
        expect(r.text).not.toContain('SECRET-PLAN');
        answers.push(r.body.error.message.replace(body.base_sha, '<sha>'));
      }
      // One answer for hidden and unknown: nothing tells them apart.
      expect(new Set(answers).size).toBe(1);
      // If-Match with the hidden version's hash: the same refusal.
      const im = await editor.request('PUT', `/api/v1/nodes/${v1.id}`, {
        json: { content: '# Plan\n\nMy edit.\n' },
        headers: { 'if-match': `"${v1.content_hash}"` },
      });
      expect(im.status, im.text).toBe(400);
      expect(im.body.code).toBe('invalid_base');
      // PATCH would have rebuilt the page from that base: refused too.
      const pa = await editor.patch(`/api/v1/nodes/${v1.id}`, { body: 'x\n', base_sha: v1.commit_sha });
      expect(pa.body.code).toBe('invalid_base');
      expect(pa.text).not.toContain('SECRET-PLAN');
      // Nothing was kept as a proposal, and the page is unchanged.
      expect((await proposalsOf(owner)).length).toBe(before);
      expect((await owner.get(`/api/v1/nodes/${v1.id}`)).body.commit_sha).toBe(v2.commit_sha);

      // A readable base still merges: the editor's own stale write against v2.
      await write(owner, path, '---\nsensitivity: internal\n---\n# Plan\n\nNothing to see.\n\nOwner adds a line.\n', v1.id);
      const merged = await editor.put(`/api/v1/nodes/${v1.id}`, {
        content: '---\nsensitivity: internal\n---\n# Plan (edited)\n\nNothing to see.\n',
        base_sha: v2.commit_sha,
      });
      expect(merged.status, merged.text).toBe(200);
      expect(merged.body.merged).toBe(true);
    });

    it('a base whose hidden block the writer never saw is invalid_base (block level, not only page level)', async () => {
      const path = `plans/${uniq('b')}.md`;
      const v1 = await write(owner, path, '# Plan\n\nOpen text.\n\n::: secret\nHIDDEN-BLOCK-777\n:::\n');
      await write(owner, path, '# Plan\n\nOpen text.\n', v1.id);
      const r = await editor.put(`/api/v1/nodes/${v1.id}`, { content: '# Plan\n\nOpen text, edited.\n', base_sha: v1.commit_sha });
      expect(r.status, r.text).toBe(400);
      expect(r.body.code).toBe('invalid_base');
      expect(r.text).not.toContain('HIDDEN-BLOCK');
    });

    it("another page's version is not a base of this one", async () => {
      const a = await write(owner, `plans/${uniq('a')}.md`, '# A\n\nText.\n');
      const b = await write(owner, `plans/${uniq('b')}.md`, '# B\n\nText.\n');
      await write(owner, '', '# B\n\nText 2.\n', b.id);
      const r = await editor.put(`/api/v1/nodes/${b.id}`, { content: '# B\n\nMine.\n', base_sha: a.commit_sha });
      expect(r.status).toBe(400);
      expect(r.body.code).toBe('invalid_base');
    });

    it('history pages through visible versions only: no hidden commit id, ever, also with limit=1', async () => {
      const path = `plans/${uniq('h')}.md`;
      const v1 = await write(owner, path, '# H\n\nOne.\n');
      const v2 = await write(owner, path, '---\nsensitivity: secret\n---\n# H\n\nTwo, secret.\n', v1.id);
      const v3 = await write(owner, path, '---\nsensitivity: secret\n---\n# H\n\nThree, secret.\n', v1.id);
      const v4 = await write(owner, path, '# H\n\nFour.\n', v1.id);
      const hidden = [v2.commit_sha, v3.commit_sha];
      const seen: string[] = [];
      let before: string | null = null;
      const texts: string[] = [];
      for (let i = 0; i < 10; i++) {
        const r: Res = await editor.get(`/api/v1/nodes/${v1.id}/history?limit=1${before ? `&before=${before}` : ''}`);
        expect(r.status, r.text).toBe(200);
        texts.push(r.text);
        seen.push(...r.body.versions.map((v: { commit_sha: string }) => v.commit_sha));
        before = r.body.next_before;
        if (!before) break;
      }
      expect(seen).toEqual([v4.commit_sha, v1.commit_sha]);
      for (const t of texts) for (const h of hidden) expect(t).not.toContain(h);
      // The owner sees all four.
      const all = await owner.get(`/api/v1/nodes/${v1.id}/history?limit=10`);
      expect(all.body.versions.map((v: { commit_sha: string }) => v.commit_sha)).toEqual([v4.commit_sha, v3.commit_sha, v2.commit_sha, v1.commit_sha]);
    });

    it("diff needs both versions visible under the caller's grants: a version at a path outside them answers as one that never existed", async () => {
      // An agent that reads `eng` only, at secret (granted with step-up), elevated: it may diff there.
      expect((await owner.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
      const agent = await createAgentWithKey(owner, [{ action: 'read', scope: 'eng', ceiling: 'secret' }], { ceiling: 'secret' });
      const el = await owner.post('/api/v1/elevations', { agent_id: agent.id, minutes: 30, reason: 'diff test' });
      expect(el.status, el.text).toBe(201);
      const name = uniq('d');
      const v1 = await write(owner, `hr/${name}.md`, '# D\n\nHR-ONLY-TEXT-99.\n');
      const moved = await owner.post(`/api/v1/nodes/${v1.id}/move`, { to: `eng/${name}.md` });
      expect(moved.status, moved.text).toBe(200);
      const v3 = await write(owner, '', '# D\n\nEngineering text.\n', v1.id);

      const hiddenFrom = await agent.client.get(`/api/v1/nodes/${v1.id}/diff?from=${v1.commit_sha}&to=${v3.commit_sha}`);
      const missingFrom = await agent.client.get(`/api/v1/nodes/${v1.id}/diff?from=${'0'.repeat(7)}&to=${v3.commit_sha}`);
      expect(hiddenFrom.status, hiddenFrom.text).toBe(404);
      expect(hiddenFrom.text).not.toContain('HR-ONLY');
      expect(missingFrom.status).toBe(404);
      // Default `from`: the newest version before `to` the caller reads whole (the moved one,
      // whose text is now under `eng`); the version at `hr/` is never a side.
      const dflt = await agent.client.get(`/api/v1/nodes/${v1.id}/diff?to=${v3.commit_sha}`);
      expect(dflt.status, dflt.text).toBe(200);
      expect(dflt.body.from).toBe(moved.body.commit_sha);
      expect(dflt.text).not.toContain(`hr/${name}`);
      const onlyHidden = await agent.client.get(`/api/v1/nodes/${v1.id}/diff?to=${moved.body.commit_sha}`);
      expect(onlyHidden.status, onlyHidden.text).toBe(200);
      expect(onlyHidden.body.from).toBeNull();
      expect(onlyHidden.text).not.toContain(v1.commit_sha);
      // The owner diffs across both.
      const own = await owner.get(`/api/v1/nodes/${v1.id}/diff?from=${v1.commit_sha}&to=${v3.commit_sha}`);
      expect(own.status).toBe(200);
      expect(own.body.from_content).toContain('HR-ONLY-TEXT-99');
    });
  });

  describe('item 5: a redacted view never carries the hash of text it hides', () => {
    it('ETag and content_hash of a redacted view differ from the blob sha, are stable, and writers keep If-Match', async () => {
      const path = `notes/${uniq('r')}.md`;
      const full = '# Notes\n\nOpen.\n\n::: confidential\nPIN 4711\n:::\n';
      const page = await write(owner, path, full);
      expect(page.content_hash).toBe(blobSha(full));

      const a = await viewer.get(`/api/v1/nodes/${page.id}`);
      const b = await viewer.get(`/api/v1/nodes/${enc(path)}?format=md`);
      expect(a.status).toBe(200);
      expect(a.body.redacted).toBe(true);
      expect(a.body.content).not.toContain('4711');
      expect(a.body.content_hash).not.toBe(blobSha(full));
      expect(a.body.content_hash).toMatch(/^r-[0-9a-f]{40}$/);
      expect(a.headers.get('etag')).toBe(`"${a.body.content_hash}"`);
      expect(b.headers.get('etag')).toBe(a.headers.get('etag'));
      expect(a.text).not.toContain(blobSha(full));
      // History shows the viewer the same validator, never the blob sha.
      const h = await viewer.get(`/api/v1/nodes/${page.id}/history`);
      expect(h.text).not.toContain(blobSha(full));
      expect(h.body.versions[0].content_hash).toBe(a.body.content_hash);
      // Reading at the commit: the same.
      const at = await viewer.get(`/api/v1/nodes/${page.id}?at=${page.commit_sha}`);
      expect(at.body.content_hash).toBe(a.body.content_hash);

      // The editor sees the whole page: the real blob sha, and If-Match with it works.
      const e = await editor.get(`/api/v1/nodes/${page.id}`);
      expect(e.body.content_hash).toBe(blobSha(full));
      const put = await editor.request('PUT', `/api/v1/nodes/${page.id}`, {
        json: { content: `${full}\nMore.\n` },
        headers: { 'if-match': e.headers.get('etag')! },
      });
      expect(put.status, put.text).toBe(200);
      // The viewer's validator is no base: a write with it is refused (and it could not write anyway).
      const vput = await viewer.request('PUT', `/api/v1/nodes/${page.id}`, { json: { content: 'x\n' }, headers: { 'if-match': a.headers.get('etag')! } });
      expect([400, 403]).toContain(vput.status);
      expect(vput.text).not.toContain('4711');
    });

    it('over MCP, context_get and fetch carry the redacted validator too', async () => {
      const full = '# M\n\nOpen.\n\n::: confidential\nMCP-HIDDEN-1\n:::\n';
      const page = await write(owner, `notes/${uniq('m')}.md`, full);
      const agent = await createAgentWithKey(owner, [{ action: 'read', scope: '*', ceiling: 'internal' }], { ceiling: 'internal' });
      const mcp = await connectMcp(s.url, agent.key);
      try {
        const got = await call(mcp, 'context_get', { id: page.id });
        expect(got.isError, got.text).toBe(false);
        expect(got.json.redacted).toBe(true);
        expect(got.text).not.toContain(blobSha(full));
        expect(got.json.content_hash).toMatch(/^r-/);
        const f = await call(mcp, 'fetch', { id: page.id });
        expect(f.text).not.toContain(blobSha(full));
        expect(f.text).not.toContain('MCP-HIDDEN');
      } finally {
        await mcp.close();
      }
    });
  });

  describe('item 8: existence', () => {
    it('archiving or restoring a folder of hidden pages answers exactly as a folder that does not exist', async () => {
      const agent = await createAgentWithKey(owner, [
        { action: 'read', scope: '*', ceiling: 'confidential' },
        { action: 'write', scope: '*', ceiling: 'confidential' },
      ]);
      const folder = uniq('vault');
      await write(owner, `ops/${folder}/a.md`, '---\nsensitivity: secret\n---\n# A\n');
      await write(owner, `ops/${folder}/b.md`, '---\nsensitivity: secret\nstate: archived\n---\n# B\n');
      for (const action of ['archive', 'restore']) {
        const hidden = await agent.client.post(`/api/v1/clusters/ops/${folder}/${action}`);
        const none = await agent.client.post(`/api/v1/clusters/ops/${folder}-none/${action}`);
        expect(hidden.status, hidden.text).toBe(404);
        expect(none.status).toBe(404);
        expect(hidden.body.code).toBe(none.body.code);
        expect(hidden.body.error.message.replace(folder, 'X')).toBe(none.body.error.message.replace(`${folder}-none`, 'X'));
      }
      const mcp = await connectMcp(s.url, agent.key);
      try {
        const h = await call(mcp, 'context_archive', { cluster_path: `ops/${folder}` });
        const x = await call(mcp, 'context_archive', { cluster_path: `ops/${folder}-none` });
        expect(h.isError).toBe(true);
        expect(h.text.replace(folder, 'X')).toBe(x.text.replace(`${folder}-none`, 'X'));
      } finally {
        await mcp.close();
      }
    });

    it('creating or moving onto a hidden page\'s path says only "taken", the same as for a visible one, over REST and MCP', async () => {
      const hiddenPath = `plans/${uniq('taken')}.md`;
      const visiblePath = `plans/${uniq('seen')}.md`;
      const hp = await write(owner, hiddenPath, '---\nsensitivity: secret\ntitle: Merger with Initech\n---\n# Merger with Initech\n');
      await write(owner, visiblePath, '# Seen\n');
      const norm = (t: string, p: string) => t.replace(p, '<path>');
      const onHidden = await editor.post('/api/v1/nodes', { path: hiddenPath, content: '# Mine\n' });
      const onVisible = await editor.post('/api/v1/nodes', { path: visiblePath, content: '# Mine\n' });
      expect(onHidden.status).toBe(409);
      expect(onHidden.body.code).toBe('already_exists');
      expect(norm(onHidden.text, hiddenPath)).toBe(norm(onVisible.text, visiblePath));
      expect(onHidden.text).not.toContain('Initech');
      expect(onHidden.text).not.toContain(hp.id);
      const mine = await write(editor, `plans/${uniq('mine')}.md`, '# Mine\n');
      const mv = await editor.post(`/api/v1/nodes/${mine.id}/move`, { to: hiddenPath });
      expect(mv.status).toBe(409);
      expect(mv.body.code).toBe('already_exists');
      expect(mv.text).not.toContain('Initech');

      const agent = await createAgentWithKey(owner, [
        { action: 'read', scope: '*', ceiling: 'confidential' },
        { action: 'write', scope: '*', ceiling: 'confidential' },
      ]);
      const mcp = await connectMcp(s.url, agent.key);
      try {
        const h = await call(mcp, 'context_write', { path: hiddenPath, content: '# Mine\n' });
        expect(h.isError).toBe(true);
        expect(h.text).toMatch(/^already_exists: /);
        expect(h.text).not.toContain('Initech');
      } finally {
        await mcp.close();
      }
    });
  });
});
