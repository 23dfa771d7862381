import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { testEngines } from '../support/engines.js';
import { createAgentWithKey, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';
import { call, connectMcp, fails, ok, SPEC_16 } from './support.js';

/**
 * The opt-in extended toolset (issue 13, beyond the spec), driven through the official SDK
 * client against a started server: off by default, on with `?toolset=extended`; edits that do
 * not resend the page (append, replace a section, apply a diff) under the write's merge rules;
 * the changes feed; history, diff and a read at a commit; a thread's messages; the caller's own
 * proposals and withdrawing one; move. Hidden pages never show, bad inputs answer clear errors.
 */

const EXTENDED_READ_ONLY = ['context_changes', 'context_history', 'context_diff', 'context_get_at', 'collab_thread', 'context_proposals'];
const EXTENDED_WRITING = ['context_append', 'context_replace_section', 'context_patch', 'context_move', 'context_withdraw'];
const EXT = '/mcp?toolset=extended';
const PASSWORD = 'correct horse battery';

const rpc = (base: string, key: string, path: string, body: unknown) =>
  fetch(base + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify(body),
  });

describe.each(testEngines())('MCP extended toolset (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let scribeKey: string;
  let scribe: McpClient;
  let scribeId: string;
  let other: McpClient;
  let otherId: string;
  let proposer: McpClient;
  let proposerId: string;
  let reader: McpClient;
  let scoped: McpClient;
  let collabOnly: McpClient;
  let secretReader: McpClient;
  let specOnly: McpClient;

  const mdOf = async (id: string) => (await owner.get(`/api/v1/nodes/${id}?format=md`)).text;

  beforeAll(async () => {
    s = await startTestServer(engine);
    const h = await signupHuman(s.url, 'Olive');
    owner = h.client;
    const all = [{ action: 'read' }, { action: 'write' }, { action: 'search' }, { action: 'propose' }, { action: 'collab' }];
    const a = await createAgentWithKey(owner, all, { name: 'Scribe' });
    scribeKey = a.key;
    scribeId = a.id;
    scribe = await connectMcp(s.url, a.key, EXT);
    specOnly = await connectMcp(s.url, a.key);
    const b = await createAgentWithKey(owner, all, { name: 'Other' });
    otherId = b.id;
    other = await connectMcp(s.url, b.key, EXT);
    const pr = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'propose' }], { name: 'Proposer' });
    proposerId = pr.id;
    proposer = await connectMcp(s.url, pr.key, EXT);
    reader = await connectMcp(s.url, (await createAgentWithKey(owner, [{ action: 'read' }], { name: 'Reader' })).key, EXT);
    // Reads only the `feed` Space, at internal: the hidden-page checks.
    scoped = await connectMcp(
      s.url,
      (await createAgentWithKey(owner, [{ action: 'read', scope: 'feed', ceiling: 'internal' }], { name: 'Scoped', ceiling: 'internal' })).key,
      EXT,
    );
    collabOnly = await connectMcp(s.url, (await createAgentWithKey(owner, [{ action: 'collab' }], { name: 'Chatter' })).key, EXT);
    // An agent elevated by the owner reads at secret: the diff needs it.
    const el = await createAgentWithKey(owner, all, { name: 'Auditor' });
    expect((await owner.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
    const grant = await owner.post('/api/v1/elevations', { agent_id: el.id, minutes: 60, reason: 'extended tests' });
    expect(grant.status, grant.text).toBe(201);
    secretReader = await connectMcp(s.url, el.key, EXT);
  }, 60_000);

  afterAll(async () => {
    for (const c of [scribe, other, proposer, reader, scoped, collabOnly, secretReader, specOnly]) await c?.close();
    await s?.stop();
  });

  const page = async (path: string, content: string) => ok(scribe, 'context_write', { path, content });

  describe('the toolset', () => {
    it('is off by default: /mcp lists exactly the spec 16, and an extended tool is an unknown tool there', async () => {
      const { tools } = await specOnly.listTools();
      expect(tools.map((t) => t.name).sort()).toEqual([...SPEC_16].sort());
      await expect(specOnly.callTool({ name: 'context_append', arguments: { path: 'eng/a.md', text: 'x' } })).rejects.toThrow(/Unknown tool: context_append/);
    });

    it('is on with ?toolset=extended: the 16 and the extended tools, with grants-style annotations', async () => {
      const { tools } = await scribe.listTools();
      // The spec's 16 and this file's tools (other extended tools, e.g. watches, are tested where they are defined).
      expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining([...SPEC_16, ...EXTENDED_READ_ONLY, ...EXTENDED_WRITING]));
      expect(new Set(tools.map((t) => t.name)).size).toBe(tools.length);
      for (const t of tools.filter((x) => EXTENDED_READ_ONLY.includes(x.name) || EXTENDED_WRITING.includes(x.name))) {
        expect(t.annotations?.openWorldHint, t.name).toBe(false);
        expect(t.annotations?.readOnlyHint, t.name).toBe(EXTENDED_READ_ONLY.includes(t.name));
        expect(t.description?.length, t.name).toBeGreaterThan(20);
        expect(t.inputSchema.type).toBe('object');
      }
      const by = new Map(tools.map((t) => [t.name, t.inputSchema as any]));
      expect(by.get('context_append').required.sort()).toEqual(['text']);
      expect(by.get('context_replace_section').required.sort()).toEqual(['section', 'text']);
      expect(by.get('context_patch').required).toEqual(['patch']);
      expect(by.get('context_changes').properties.limit).toMatchObject({ type: 'integer', minimum: 1, maximum: 200, default: 50 });
      expect(by.get('context_withdraw').required).toEqual(['id']);
    });

    it('also on the pinned endpoint; an unknown toolset is refused', async () => {
      const ws = (await owner.get('/api/v1/whoami')).body;
      const slug = ws.workspace?.slug ?? ws.workspaces?.[0]?.slug;
      const pinned = await rpc(s.url, scribeKey, `/w/${slug}/mcp?toolset=extended`, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
      expect(pinned.status).toBe(200);
      expect(((await pinned.json()) as any).result.tools.map((t: { name: string }) => t.name)).toContain('context_changes');
      const bogus = await rpc(s.url, scribeKey, '/mcp?toolset=bogus', { jsonrpc: '2.0', id: 1, method: 'tools/list' });
      expect(bogus.status).toBe(400);
      expect(((await bogus.json()) as any).error.message).toBe('invalid_request: toolset must be spec or extended');
    });
  });

  describe('edits that do not resend the page', () => {
    it('context_append adds text at the end of the page, or at the end of a section', async () => {
      const p = await page('eng/edit/append.md', '# Log\n\nfirst\n\n## Later\n\nsecond\n\n## Last\n\nthird\n');
      const end = await ok(scribe, 'context_append', { id: p.id, text: 'fourth' });
      expect(end).toMatchObject({ id: p.id, path: 'eng/edit/append.md', changed: true, merged: false, state: 'active' });
      expect(end.commit_sha).not.toBe(p.commit_sha);
      expect(await mdOf(p.id)).toBe('# Log\n\nfirst\n\n## Later\n\nsecond\n\n## Last\n\nthird\n\nfourth\n');
      const sec = await ok(scribe, 'context_append', { path: 'eng/edit/append.md', section: 'Later', text: '- a bullet\n', message: 'bullet' });
      expect(sec.changed).toBe(true);
      expect(await mdOf(p.id)).toBe('# Log\n\nfirst\n\n## Later\n\nsecond\n\n- a bullet\n\n## Last\n\nthird\n\nfourth\n');
      const hist = await ok(scribe, 'context_history', { id: p.id, limit: 1 });
      expect(hist.versions[0].message).toBe('bullet');
    });

    it('context_replace_section replaces what is under a heading and keeps the heading', async () => {
      const p = await page('eng/edit/section.md', '# Doc\n\nintro\n\n## Setup\n\nold steps\n\n### Detail\n\nold detail\n\n## After\n\nkept\n');
      await ok(scribe, 'context_replace_section', { id: p.id, section: 'Setup', text: 'new steps\n' });
      expect(await mdOf(p.id)).toBe('# Doc\n\nintro\n\n## Setup\n\nnew steps\n\n## After\n\nkept\n');
      // The section as context_get shows it, heading included, is taken back as it is.
      const got = await ok(scribe, 'context_get', { id: p.id, section: 'After' });
      await ok(scribe, 'context_replace_section', { id: p.id, section: '## After', text: got.section.replace('kept', 'changed') });
      expect(await mdOf(p.id)).toBe('# Doc\n\nintro\n\n## Setup\n\nnew steps\n\n## After\n\nchanged\n');
      const same = await ok(scribe, 'context_replace_section', { id: p.id, section: 'After', text: 'changed' });
      expect(same).toMatchObject({ changed: false });
    });

    it('a missing section lists the headings that exist', async () => {
      const p = await page('eng/edit/missing.md', '# Title\n\n## Alpha\n\na\n\n## Beta\n\nb\n');
      const t = await fails(scribe, 'context_append', { id: p.id, section: 'Gamma', text: 'x' }, 'section_not_found');
      expect(t).toContain('No section titled "Gamma" in eng/edit/missing.md');
      expect(t).toContain('its headings: "Title", "Alpha", "Beta"');
      await fails(scribe, 'context_replace_section', { id: p.id, section: 'Gamma', text: 'x' }, 'section_not_found');
    });

    it('context_patch applies a unified diff; a bad diff or one that does not apply is refused', async () => {
      const p = await page('eng/edit/patch.md', '# P\n\nline one\nline two\n');
      const patch = ['--- a/eng/edit/patch.md', '+++ b/eng/edit/patch.md', '@@ -1,4 +1,4 @@', ' # P', ' ', ' line one', '-line two', '+line 2', ''].join('\n');
      const r = await ok(scribe, 'context_patch', { id: p.id, patch, base_sha: p.content_hash });
      expect(r).toMatchObject({ changed: true, merged: false });
      expect(await mdOf(p.id)).toBe('# P\n\nline one\nline 2\n');
      const t = await fails(scribe, 'context_patch', { id: p.id, patch }, 'patch_does_not_apply');
      expect(t).toContain('eng/edit/patch.md');
      await fails(scribe, 'context_patch', { id: p.id, patch: 'just words' }, 'invalid_patch');
      const two = [patch, patch.replaceAll('eng/edit/patch.md', 'eng/other.md')].join('');
      await fails(scribe, 'context_patch', { id: p.id, patch: two }, 'invalid_patch');
    });

    it('a stale base merges with what others changed since; a clash becomes a proposal', async () => {
      const p = await page('eng/edit/merge.md', '# M\n\n## A\n\nalpha\n\n## B\n\nbeta\n\n## C\n\ngamma\n');
      // The other agent changes section A after the scribe read the page.
      await ok(other, 'context_replace_section', { id: p.id, section: 'A', text: 'ALPHA' });
      const merged = await ok(scribe, 'context_replace_section', { id: p.id, section: 'C', text: 'GAMMA', base_sha: p.commit_sha });
      expect(merged).toMatchObject({ merged: true, changed: true });
      expect(await mdOf(p.id)).toBe('# M\n\n## A\n\nALPHA\n\n## B\n\nbeta\n\n## C\n\nGAMMA\n');
      const appended = await ok(scribe, 'context_append', { id: p.id, section: 'B', text: 'more beta', base_sha: p.content_hash });
      expect(appended.merged).toBe(true);
      expect(await mdOf(p.id)).toContain('beta\n\nmore beta\n\n## C');
      // Both change section A from the same base: a conflict, kept as the scribe's proposal.
      const t = await fails(scribe, 'context_replace_section', { id: p.id, section: 'A', text: 'Alpha!', base_sha: p.commit_sha }, 'conflict');
      const id = /\(proposal (pp_[0-9a-z]+) created\)/.exec(t)?.[1];
      expect(id, t).toBeDefined();
      const pr = await owner.get(`/api/v1/proposals/${id}`);
      expect(pr.body).toMatchObject({ status: 'open', origin: 'conflict', node_id: p.id, base_commit: p.commit_sha });
      expect(pr.body.content).toContain('Alpha!');
      expect(await mdOf(p.id)).toContain('## A\n\nALPHA\n');
      await fails(scribe, 'context_append', { id: p.id, text: 'x', base_sha: 'f'.repeat(40) }, 'invalid_base');
    });

    it('without write, the edit is refused and points to context_propose', async () => {
      const p = await page('eng/edit/nowrite.md', '# N\n\nbody\n');
      for (const [tool, args] of [
        ['context_append', { id: p.id, text: 'x' }],
        ['context_replace_section', { id: p.id, section: 'N', text: 'x' }],
        ['context_patch', { id: p.id, patch: '--- a\n+++ b\n@@ -1 +1 @@\n-# N\n+# M\n' }],
      ] as const) {
        const t = await fails(proposer, tool, args, 'forbidden');
        expect(t, tool).toContain('context_propose');
      }
      expect(await mdOf(p.id)).toBe('# N\n\nbody\n');
    });

    it('hidden blocks can be neither overwritten nor erased nor described through an edit', async () => {
      const r = await owner.post('/api/v1/nodes', {
        path: 'eng/edit/redacted.md',
        content: '# R\n\nopen text\n\n::: secret\n## Launch codes\n\n0000\n:::\n\n## Tail\n\nend\n',
      });
      expect(r.status, r.text).toBe(201);
      const before = await mdOf(r.body.id);
      const seen = await ok(scribe, 'context_get', { id: r.body.id });
      expect(seen.redacted).toBe(true);
      const cases = [
        ['context_append', { id: r.body.id, text: 'more' }],
        ['context_append', { id: r.body.id, section: 'Launch codes', text: 'more' }],
        ['context_replace_section', { id: r.body.id, section: 'R', text: 'everything gone' }],
        ['context_replace_section', { id: r.body.id, section: 'Nope', text: 'x' }],
        ['context_patch', { id: r.body.id, patch: '--- a\n+++ b\n@@ -1,3 +1,3 @@\n # R\n \n-open text\n+new text\n' }],
      ] as const;
      for (const [tool, args] of cases) {
        const t = await fails(scribe, tool, args, 'forbidden');
        expect(t, tool).toContain('[redacted]');
        expect(t, tool).not.toContain('Launch');
        expect(t, tool).not.toContain('0000');
      }
      expect(await mdOf(r.body.id)).toBe(before);
    });

    it('bad inputs: unknown page, hidden page, wrong types, blank or oversize text, hostile refs', async () => {
      const p = await page('eng/edit/bad.md', '# B\n\nbody\n');
      await fails(scribe, 'context_append', { id: 'pg_00000000000000000000000000', text: 'x' }, 'not_found');
      await fails(scribe, 'context_append', { path: 'eng/edit/none.md', text: 'x' }, 'not_found');
      await fails(scribe, 'context_append', { id: p.id, text: 5 }, 'invalid_request');
      await fails(scribe, 'context_append', { id: p.id, text: '' }, 'invalid_request');
      await fails(scribe, 'context_append', { id: p.id, text: '   \n' }, 'invalid_request');
      await fails(scribe, 'context_append', { id: p.id, path: 'eng/edit/bad.md', text: 'x' }, 'invalid_request');
      await fails(scribe, 'context_append', { text: 'x' }, 'invalid_request');
      await fails(scribe, 'context_append', { id: p.id, text: 'x', sneaky: true }, 'invalid_request');
      await fails(scribe, 'context_replace_section', { id: p.id, section: '', text: 'x' }, 'invalid_request');
      await fails(scribe, 'context_replace_section', { id: p.id, section: ['B'], text: 'x' }, 'invalid_request');
      await fails(scribe, 'context_patch', { id: p.id, patch: '' }, 'invalid_request');
      await fails(scribe, 'context_append', { path: '../../etc/passwd', text: 'x' }, 'not_found');
      const big = 'x'.repeat(1024 * 1024 + 1);
      await fails(scribe, 'context_append', { id: p.id, text: big }, 'invalid_request');
      const t = await fails(scribe, 'context_append', { id: p.id, text: 'y'.repeat(1024 * 1024 - 4) }, 'payload_too_large');
      expect(t).toContain('larger than');
      // A secret page does not exist for the scribe (confidential).
      const secret = await owner.post('/api/v1/nodes', { path: 'eng/edit/secret.md', content: '---\nsensitivity: secret\n---\n# S\n' });
      await fails(scribe, 'context_append', { id: secret.body.id, text: 'x' }, 'not_found');
      await fails(scribe, 'context_append', { path: 'eng/edit/secret.md', text: 'x' }, 'not_found');
      expect(await mdOf(p.id)).toBe('# B\n\nbody\n');
    });
  });

  describe('context_move', () => {
    it('moves a page (its id stays); a move that widens its audience becomes a proposal, as a success', async () => {
      const p = await page('eng/move/a.md', '# A\n');
      const moved = await ok(scribe, 'context_move', { id: p.id, to: 'eng/moved/a.md', message: 'tidy' });
      expect(moved).toMatchObject({ id: p.id, path: 'eng/moved/a.md', proposed: false });
      expect((await owner.get(`/api/v1/nodes/${p.id}`)).body.path).toBe('eng/moved/a.md');
      // `feed` is read by the scoped agent: moving there widens who reads the page.
      const widening = await ok(scribe, 'context_move', { path: 'eng/moved/a.md', to: 'feed/a.md' });
      expect(widening).toMatchObject({ proposed: true, proposal: { status: 'open', kind: 'move', node_id: p.id } });
      expect((await owner.get(`/api/v1/nodes/${p.id}`)).body.path).toBe('eng/moved/a.md');
    });

    it('refuses without write, onto a taken path, to a hostile path, and for an unknown page', async () => {
      const p = await page('eng/move/b.md', '# B\n');
      await page('eng/move/c.md', '# C\n');
      await fails(proposer, 'context_move', { id: p.id, to: 'eng/move/b2.md' }, 'forbidden');
      await fails(scribe, 'context_move', { id: p.id, to: 'eng/move/c.md' }, 'already_exists');
      await fails(scribe, 'context_move', { id: p.id, to: '../etc/passwd.md' }, 'invalid_path');
      await fails(scribe, 'context_move', { id: p.id, to: 'eng/move/b.md' }, 'invalid_request');
      await fails(scribe, 'context_move', { id: 'pg_00000000000000000000000000', to: 'eng/move/z.md' }, 'not_found');
      await fails(scribe, 'context_move', { id: p.id }, 'invalid_request');
    });
  });

  describe('context_changes', () => {
    it('tells what changed since a cursor: created, changed, moved, archived, restored, deleted, with commit, time and author', async () => {
      const a = await ok(scribe, 'context_write', { path: 'feed/one.md', content: '# One\n' });
      const first = await ok(scribe, 'context_changes', { scope: 'feed' });
      expect(first.changes.map((c: any) => [c.change, c.path])).toContainEqual(['created', 'feed/one.md']);
      const cursor = first.next;
      expect(typeof cursor).toBe('string');
      expect(first.more).toBe(false);

      await ok(other, 'context_append', { id: a.id, text: 'more' });
      await ok(other, 'context_move', { id: a.id, to: 'feed/sub/one.md' });
      await ok(other, 'context_archive', { id: a.id, reason: 'stale' });
      await ok(other, 'context_restore', { id: a.id });
      const since = await ok(scribe, 'context_changes', { scope: 'feed', since: cursor });
      expect(since.changes.map((c: any) => c.change)).toEqual(['changed', 'moved', 'archived', 'restored']);
      const mv = since.changes[1];
      expect(mv).toMatchObject({ id: a.id, path: 'feed/sub/one.md', from: 'feed/one.md', author: { id: otherId, name: 'Other' } });
      expect(mv.commit_sha).toMatch(/^[0-9a-f]{40}$/);
      expect(Number.isNaN(Date.parse(mv.at))).toBe(false);

      // Caught up: the same cursor comes back, with nothing.
      const none = await ok(scribe, 'context_changes', { scope: 'feed', since: since.next });
      expect(none).toEqual({ changes: [], next: since.next, more: false });

      expect((await owner.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
      expect((await owner.delete(`/api/v1/nodes/${a.id}`)).status).toBe(200);
      const del = await ok(scribe, 'context_changes', { scope: 'feed/sub', since: since.next });
      expect(del.changes).toEqual([expect.objectContaining({ change: 'deleted', id: a.id, path: 'feed/sub/one.md' })]);
    });

    it('pages with limit and more; each change comes exactly once', async () => {
      for (let i = 0; i < 5; i++) await ok(scribe, 'context_write', { path: `feed/paged/p${i}.md`, content: `# P${i}\n` });
      const seen: string[] = [];
      let since: string | undefined;
      for (let round = 0; round < 10; round++) {
        const r = await ok(scribe, 'context_changes', { scope: 'feed/paged', limit: 2, ...(since ? { since } : {}) });
        seen.push(...r.changes.map((c: any) => c.path));
        since = r.next;
        if (!r.more) break;
      }
      expect(seen).toEqual(['feed/paged/p0.md', 'feed/paged/p1.md', 'feed/paged/p2.md', 'feed/paged/p3.md', 'feed/paged/p4.md']);
      // Numbers sent as strings (as models do) are taken.
      expect((await ok(scribe, 'context_changes', { scope: 'feed/paged', limit: '3' })).changes).toHaveLength(3);
    });

    it('never shows a hidden page, a page that moved out of sight, or the cursor moving for them', async () => {
      const visible = await ok(scribe, 'context_write', { path: 'feed/hide/seen.md', content: '# Seen\n' });
      const leaving = await ok(scribe, 'context_write', { path: 'feed/hide/leaving.md', content: '# Leaving\n' });
      await owner.post('/api/v1/nodes', { path: 'feed/hide/conf.md', content: '---\nsensitivity: confidential\n---\n# Conf\n' });
      const start = await ok(scoped, 'context_changes', { scope: 'feed/hide' });
      expect(start.changes.map((c: any) => c.path).sort()).toEqual(['feed/hide/leaving.md', 'feed/hide/seen.md']);
      // Moved out of the scoped agent's reach: gone from its feed, old entries included; the new path never shows.
      await ok(scribe, 'context_move', { id: leaving.id, to: 'eng/hide/left.md' });
      const again = await ok(scoped, 'context_changes', { scope: 'feed/hide' });
      expect(again.changes.map((c: any) => c.path)).toEqual(['feed/hide/seen.md']);
      const everything = await ok(scoped, 'context_changes', { limit: 200 });
      const text = JSON.stringify(everything);
      expect(text).not.toContain('eng/');
      expect(text).not.toContain('conf.md');
      expect(text).not.toContain(leaving.id);
      // Hidden commits leave the answer, cursor included, exactly as it was.
      const after = await ok(scoped, 'context_changes', { scope: 'feed/hide', since: start.next });
      expect(after).toEqual({ changes: [], next: start.next, more: false });
      await owner.put(`/api/v1/nodes/feed/hide/conf.md`, { content: '---\nsensitivity: confidential\n---\n# Conf 2\n' });
      expect(await ok(scoped, 'context_changes', { scope: 'feed/hide', since: start.next })).toEqual(after);
      await ok(scribe, 'context_append', { id: visible.id, text: 'seen change' });
      const last = await ok(scoped, 'context_changes', { scope: 'feed/hide', since: start.next });
      expect(last.changes.map((c: any) => [c.change, c.path])).toEqual([['changed', 'feed/hide/seen.md']]);
      // Moved into sight from a hidden place: the move shows, where it came from does not.
      const arriving = await ok(scribe, 'context_write', { path: 'eng/hide/arriving.md', content: '# Arriving\n' });
      // It widens who reads the page: the agent would only propose it; the owner moves it (stepped up).
      expect((await ok(scribe, 'context_move', { id: arriving.id, to: 'feed/hide/arriving.md' })).proposed).toBe(true);
      expect((await owner.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
      const mv = await owner.post(`/api/v1/nodes/${arriving.id}/move`, { to: 'feed/hide/arriving.md' });
      expect(mv.status, mv.text).toBe(200);
      const arrived = await ok(scoped, 'context_changes', { scope: 'feed/hide', since: last.next });
      expect(arrived.changes).toEqual([expect.objectContaining({ change: 'moved', id: arriving.id, path: 'feed/hide/arriving.md' })]);
      expect(arrived.changes[0].from).toBeUndefined();
      expect(JSON.stringify(arrived)).not.toContain('eng/');
      // A scope outside its reach is unknown (and names the ones it can use), as one that does not exist.
      const t = await fails(scoped, 'context_changes', { scope: 'eng' }, 'unknown_scope');
      expect(t).toContain('feed');
      expect(await fails(scoped, 'context_changes', { scope: 'nowhere' }, 'unknown_scope')).toContain('feed');
    });

    it('refuses a bad cursor, bad limits and wrong types', async () => {
      const t = await fails(scribe, 'context_changes', { since: 'not a cursor!' }, 'invalid_cursor');
      expect(t).toContain('next');
      await fails(scribe, 'context_changes', { since: Buffer.from('12:../x').toString('base64url') }, 'invalid_cursor');
      await fails(scribe, 'context_changes', { since: 'x'.repeat(500) }, 'invalid_request');
      await fails(scribe, 'context_changes', { since: 5 }, 'invalid_request');
      await fails(scribe, 'context_changes', { limit: 0 }, 'invalid_request');
      await fails(scribe, 'context_changes', { limit: 201 }, 'invalid_request');
      await fails(scribe, 'context_changes', { scope: '../..' }, 'invalid_scope');
      await fails(collabOnly, 'context_changes', {}, 'forbidden');
    });
  });

  describe('history, diff and a read at a commit', () => {
    it('context_history lists versions newest first and pages with before', async () => {
      const p = await page('eng/hist/h.md', '# H\n\nv1\n');
      await ok(scribe, 'context_replace_section', { id: p.id, section: 'H', text: 'v2' });
      await ok(other, 'context_replace_section', { id: p.id, section: 'H', text: 'v3' });
      const h = await ok(reader, 'context_history', { id: p.id, limit: 2 });
      expect(h.versions.map((v: any) => v.action)).toEqual(['update', 'update']);
      expect(h.versions[0].principal_id).toBe(otherId);
      expect(h.next_before).toBe(h.versions[1].commit_sha);
      const older = await ok(reader, 'context_history', { path: 'eng/hist/h.md', before: h.next_before });
      expect(older.versions.map((v: any) => v.commit_sha)).toEqual([p.commit_sha]);
      expect(older.next_before).toBeNull();
      await fails(reader, 'context_history', { id: p.id, before: 'zzzzzzz' }, 'invalid_sha');
      await fails(reader, 'context_history', { id: p.id, limit: 500 }, 'invalid_request');
      await fails(collabOnly, 'context_history', { id: p.id }, 'forbidden');
    });

    it('context_get_at reads the page as it was; context_diff shows the change (secret-level read only)', async () => {
      const p = await page('eng/hist/d.md', '# D\n\nold line\n');
      const v2 = await ok(scribe, 'context_replace_section', { id: p.id, section: 'D', text: 'new line' });
      const at = await ok(reader, 'context_get_at', { id: p.id, at: p.commit_sha.slice(0, 10) });
      expect(at).toMatchObject({ id: p.id, commit_sha: p.commit_sha, content: '# D\n\nold line\n' });
      const sec = await ok(reader, 'context_get_at', { id: p.id, at: p.commit_sha, section: 'D' });
      expect(sec.section).toContain('old line');
      await fails(reader, 'context_get_at', { id: p.id, at: 'f'.repeat(40) }, 'commit_not_found');
      await fails(reader, 'context_get_at', { id: p.id }, 'invalid_request');
      await fails(reader, 'context_get_at', { id: p.id, at: 'nothex!' }, 'invalid_sha');

      const t = await fails(scribe, 'context_diff', { id: p.id }, 'forbidden');
      expect(t).toContain('secret-level read');
      const d = await ok(secretReader, 'context_diff', { id: p.id });
      expect(d).toMatchObject({ id: p.id, from: p.commit_sha, to: v2.commit_sha });
      expect(d.diff).toContain('-old line');
      expect(d.diff).toContain('+new line');
      expect(d.from_content).toBeUndefined();
      const explicit = await ok(secretReader, 'context_diff', { id: p.id, from: p.commit_sha, to: p.commit_sha });
      expect(explicit.diff).not.toContain('+new line');
    });

    it('a hidden page has no history, no diff and no past for the caller', async () => {
      const secret = await owner.post('/api/v1/nodes', { path: 'eng/hist/secret.md', content: '---\nsensitivity: secret\n---\n# S\n' });
      const id = secret.body.id as string;
      await fails(scribe, 'context_history', { id }, 'not_found');
      await fails(scribe, 'context_get_at', { id, at: secret.body.commit_sha }, 'not_found');
      await fails(scribe, 'context_diff', { id }, 'not_found');
      await fails(scoped, 'context_history', { path: 'eng/hist/d.md' }, 'not_found');
    });
  });

  describe('collab_thread', () => {
    it("reads a page's thread in order, after a seq", async () => {
      const p = await page('eng/thread/t.md', '# T\n');
      for (const body of ['one', 'two', 'three']) await ok(scribe, 'collab_post', { node: p.id, body });
      const all = await ok(reader, 'collab_thread', { node: p.id });
      expect(all.messages.map((m: any) => m.body)).toEqual(['one', 'two', 'three']);
      expect(all.messages[0].author).toMatchObject({ id: scribeId, name: 'Scribe', kind: 'agent' });
      expect(all).toMatchObject({ locked: false, page_id: p.id });
      const page1 = await ok(reader, 'collab_thread', { node: 'eng/thread/t.md', limit: 2 });
      expect(page1.messages.map((m: any) => m.body)).toEqual(['one', 'two']);
      const page2 = await ok(reader, 'collab_thread', { node: p.id, after: page1.next_after });
      expect(page2.messages.map((m: any) => m.body)).toEqual(['three']);
      expect(page2.next_after).toBeNull();
    });

    it('refuses without read, for hidden or unknown pages, and bad numbers', async () => {
      const p = await page('eng/thread/u.md', '# U\n');
      await fails(collabOnly, 'collab_thread', { node: p.id }, 'forbidden');
      await fails(scoped, 'collab_thread', { node: p.id }, 'not_found');
      await fails(reader, 'collab_thread', { node: 'pg_00000000000000000000000000' }, 'not_found');
      await fails(reader, 'collab_thread', { node: p.id, after: -1 }, 'invalid_request');
      await fails(reader, 'collab_thread', { node: p.id, limit: 501 }, 'invalid_request');
    });
  });

  describe('own proposals and withdrawing one', () => {
    it('lists only the caller’s own proposals with their status; withdraws only its own open one', async () => {
      const target = await page('eng/prop/x.md', '# X\n\nbody\n');
      const mine = (await ok(proposer, 'context_propose', { id: target.id, content: '# X\n\nbetter body\n', reason: 'clarity' })).proposal;
      const second = (await ok(proposer, 'context_propose', { path: 'eng/prop/new.md', content: '# New\n' })).proposal;
      const theirs = (await ok(scribe, 'context_propose', { id: target.id, content: '# X\n\nscribe body\n' })).proposal;

      const list = await ok(proposer, 'context_proposals', {});
      expect(list.proposals.map((p: any) => p.id)).toEqual([second.id, mine.id]);
      expect(list.proposals[1]).toMatchObject({ status: 'open', kind: 'edit', path: 'eng/prop/x.md', reason: 'clarity', decided_at: null });
      expect(list.proposals[1].content).toBeUndefined();

      await fails(proposer, 'context_withdraw', { id: theirs.id }, 'forbidden');
      const w = await ok(proposer, 'context_withdraw', { id: mine.id, reason: 'not needed' });
      expect(w).toMatchObject({ id: mine.id, status: 'rejected', decision_reason: 'Withdrawn by its author: not needed' });
      const rest = await owner.get(`/api/v1/proposals/${mine.id}`);
      expect(rest.body).toMatchObject({ status: 'rejected', decided_by: proposerId });
      await fails(proposer, 'context_withdraw', { id: mine.id }, 'proposal_closed');
      expect((await ok(proposer, 'context_proposals', { status: 'open' })).proposals.map((p: any) => p.id)).toEqual([second.id]);
      expect((await ok(proposer, 'context_proposals', { status: 'rejected' })).proposals.map((p: any) => p.id)).toEqual([mine.id]);
      // The scribe's proposal is still open.
      expect((await owner.get(`/api/v1/proposals/${theirs.id}`)).body.status).toBe('open');
    });

    it('refuses unknown ids, bad statuses, and callers without propose or write', async () => {
      await fails(proposer, 'context_withdraw', { id: 'pp_00000000000000000000000000' }, 'not_found');
      await fails(proposer, 'context_withdraw', { id: '' }, 'invalid_request');
      await fails(proposer, 'context_proposals', { status: 'withdrawn' }, 'invalid_request');
      await fails(proposer, 'context_proposals', { cursor: 'nope' }, 'invalid_cursor');
      await fails(reader, 'context_proposals', {}, 'forbidden');
      await fails(reader, 'context_withdraw', { id: 'pp_00000000000000000000000000' }, 'forbidden');
    });
  });

  it('an error reports the same text through the extended endpoint as through the spec one', async () => {
    const a = await call(specOnly, 'context_get', { path: 'eng/none/x.md' });
    const b = await call(scribe, 'context_get', { path: 'eng/none/x.md' });
    expect(b).toEqual(a);
  });
});
