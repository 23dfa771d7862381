import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { encode } from 'gpt-tokenizer/encoding/o200k_base';
import { testEngines } from '../support/engines.js';
import { createAgentWithKey, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';
import { DATA_NOTICE } from '../../src/mcp/prompt.js';
import { call, connectMcp, fails, ok } from './support.js';

const READ_ONLY = ['context_bundle', 'context_search', 'context_get', 'context_tree', 'context_related', 'collab_inbox', 'context_whoami', 'search', 'fetch'];
const WRITING = ['context_propose', 'context_write', 'context_log', 'context_archive', 'context_restore', 'collab_post', 'collab_ack'];

/** Upper bound for the tools/list answer in o200k tokens (it is measured and reported by bench/mcp.ts). */
const TOOLS_LIST_TOKEN_BUDGET = 3000;

describe.each(testEngines())('MCP tools (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let ownerId: string;
  let full: McpClient;
  let fullId: string;
  let fullRest: Client;
  let reader: McpClient;
  let proposer: McpClient;
  let collabOnly: McpClient;
  let seeded: { id: string; hash: string; commit: string };

  beforeAll(async () => {
    s = await startTestServer(engine, { PUBLIC_URL: 'https://vault.example.com' });
    const h = await signupHuman(s.url, 'Olive');
    owner = h.client;
    ownerId = h.id;
    const a = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'write' }, { action: 'search' }, { action: 'propose' }, { action: 'collab' }], {
      name: 'Scribe',
    });
    fullId = a.id;
    fullRest = a.client;
    full = await connectMcp(s.url, a.key);
    reader = await connectMcp(s.url, (await createAgentWithKey(owner, [{ action: 'read' }], { name: 'Reader' })).key);
    proposer = await connectMcp(s.url, (await createAgentWithKey(owner, [{ action: 'read' }, { action: 'propose' }], { name: 'Proposer' })).key);
    collabOnly = await connectMcp(s.url, (await createAgentWithKey(owner, [{ action: 'collab' }], { name: 'Chatter' })).key);
    const w = await ok(full, 'context_write', {
      path: 'eng/runbooks/deploy.md',
      content: '---\ntags: [ops]\n---\n# Deploy\n\nRun the pipeline.\n\n## Rollback\n\nRevert the release.\n',
    });
    seeded = { id: w.id, hash: w.content_hash, commit: w.commit_sha };
  });

  afterAll(async () => {
    for (const c of [full, reader, proposer, collabOnly]) await c?.close();
    await s?.stop();
  });

  describe('listing', () => {
    it('lists the 16 tools with their annotations and argument bounds', async () => {
      const { tools } = await full.listTools();
      expect(tools.map((t) => t.name).sort()).toEqual([...READ_ONLY, ...WRITING].sort());
      for (const t of tools) {
        expect(t.annotations?.openWorldHint, t.name).toBe(false);
        expect(t.annotations?.readOnlyHint, t.name).toBe(READ_ONLY.includes(t.name));
        expect(t.description?.length, t.name).toBeGreaterThan(10);
        expect(t.inputSchema.type).toBe('object');
      }
      const by = new Map(tools.map((t) => [t.name, t.inputSchema as any]));
      const prop = (tool: string, name: string) => by.get(tool).properties[name];
      expect(prop('context_bundle', 'budget_tokens')).toMatchObject({ type: 'integer', minimum: 200, maximum: 64000, default: 4000 });
      expect(by.get('context_bundle').required).toEqual(['intent']);
      expect(prop('context_search', 'limit')).toMatchObject({ type: 'integer', minimum: 1, maximum: 50 });
      expect(prop('context_search', 'tags')).toMatchObject({ type: 'array', items: { type: 'string' } });
      expect(prop('context_tree', 'depth')).toMatchObject({ type: 'integer', minimum: 0, maximum: 10 });
      expect(prop('collab_inbox', 'wait_s')).toMatchObject({ type: 'integer', minimum: 0, maximum: 20 });
      expect(prop('collab_inbox', 'limit')).toMatchObject({ type: 'integer', minimum: 1, maximum: 100 });
      expect(prop('context_archive', 'reason').enum).toEqual(['closed', 'stale', 'superseded', 'manual']);
      expect(prop('collab_post', 'kind').enum).toEqual(['comment', 'question', 'answer']);
      expect(Object.keys(by.get('context_get').properties).sort()).toEqual(['id', 'node_id', 'path', 'section']);
      expect(Object.keys(by.get('context_propose').properties).sort()).toEqual(['base_sha', 'content', 'id', 'patch', 'path', 'reason']);
      expect(by.get('context_write').required.sort()).toEqual(['content', 'path']);
      expect(by.get('context_log').required.sort()).toEqual(['entry', 'scope']);
      expect(by.get('collab_post').required.sort()).toEqual(['body', 'node']);
      expect(by.get('search').required).toEqual(['query']);
      expect(by.get('fetch').required).toEqual(['id']);
      expect(Object.keys(by.get('context_whoami').properties ?? {})).toEqual([]);
      expect(Object.keys(by.get('collab_ack').properties).sort()).toEqual(['seqs', 'up_to']);
    });

    it('keeps the tools/list answer small', async () => {
      const res = await fetch(`${s.url}/mcp`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${(await createAgentWithKey(owner, [{ action: 'read' }])).key}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      });
      const text = await res.text();
      const tokens = encode(JSON.stringify(JSON.parse(text).result)).length;
      expect(tokens).toBeLessThan(TOOLS_LIST_TOKEN_BUDGET);
    });

    it('lists the space-index resource and the load_project_context prompt', async () => {
      const { resources } = await full.listResources();
      expect(resources).toEqual([expect.objectContaining({ uri: 'service://index', name: 'space-index', mimeType: 'application/json' })]);
      const { prompts } = await full.listPrompts();
      expect(prompts).toHaveLength(1);
      expect(prompts[0]!.name).toBe('load_project_context');
      expect(prompts[0]!.arguments).toEqual([
        expect.objectContaining({ name: 'project', required: true }),
        expect.objectContaining({ name: 'budget_tokens', required: false }),
      ]);
    });

    it('reads service://index: the Spaces with summaries', async () => {
      await owner.post('/api/v1/spaces', { id: 'docs', name: 'Docs', summary: 'Handbooks' });
      const r = await full.readResource({ uri: 'service://index' });
      const body = JSON.parse((r.contents[0] as { text: string }).text);
      expect(body.spaces).toEqual(
        expect.arrayContaining([
          { id: 'docs', name: 'Docs', summary: 'Handbooks' },
          { id: 'eng', name: 'eng', summary: '' },
        ]),
      );
      const none = await collabOnly.readResource({ uri: 'service://index' });
      expect(JSON.parse((none.contents[0] as { text: string }).text)).toEqual({ spaces: [] });
    });
  });

  describe('pages', () => {
    it('context_get by id, node_id or path, with a section; it counts as a read', async () => {
      const byId = await ok(reader, 'context_get', { id: seeded.id });
      expect(byId).toMatchObject({ id: seeded.id, path: 'eng/runbooks/deploy.md', state: 'active', title: 'Deploy', commit_sha: seeded.commit });
      expect(byId.content).toContain('Run the pipeline.');
      expect(typeof byId.last_touched_at).toBe('string');
      expect((await ok(reader, 'context_get', { node_id: seeded.id })).id).toBe(seeded.id);
      const sec = await ok(reader, 'context_get', { path: 'eng/runbooks/deploy.md', section: 'Rollback' });
      expect(sec.section).toContain('Revert the release.');
      // Only the section and the page's identity, not the page again.
      expect(sec).toMatchObject({ id: seeded.id, path: 'eng/runbooks/deploy.md', title: 'Deploy', commit_sha: seeded.commit, state: 'active' });
      expect(sec.content).toBeUndefined();
      expect(sec.section).not.toContain('Run the pipeline.');
      await fails(reader, 'context_get', { path: 'eng/runbooks/nope.md' }, 'not_found');
      await fails(reader, 'context_get', { id: seeded.id, path: 'eng/runbooks/deploy.md' }, 'invalid_request');
      await fails(collabOnly, 'context_get', { id: seeded.id }, 'forbidden');
    });

    it('context_write creates and updates; without write it points to context_propose', async () => {
      const c = await ok(full, 'context_write', { path: 'eng/notes/a.md', content: '# A\n\none\n' });
      expect(c).toMatchObject({ created: true, changed: true, merged: false, path: 'eng/notes/a.md' });
      const u = await ok(full, 'context_write', { path: 'eng/notes/a.md', content: '# A\n\ntwo\n', base_sha: c.content_hash, message: 'second' });
      expect(u).toMatchObject({ created: false, changed: true, merged: false, id: c.id });
      const rest = await owner.get(`/api/v1/nodes/${c.id}?format=md`);
      expect(rest.text).toBe('# A\n\ntwo\n');
      const text = await fails(reader, 'context_write', { path: 'eng/notes/b.md', content: '# B\n' }, 'forbidden');
      expect(text).toContain('context_propose');
      await fails(full, 'context_write', { path: '../etc/passwd', content: 'x' }, 'invalid_path');
    });

    it('context_write against a stale base merges cleanly, or becomes a proposal visible over REST', async () => {
      const base = await ok(full, 'context_write', { path: 'eng/notes/merge.md', content: '# M\n\nalpha\n\nbeta\n\ngamma\n' });
      const other = await owner.put(`/api/v1/nodes/${base.id}`, { content: '# M\n\nALPHA\n\nbeta\n\ngamma\n' });
      expect(other.status).toBe(200);
      const merged = await ok(full, 'context_write', { path: 'eng/notes/merge.md', content: '# M\n\nalpha\n\nbeta\n\nGAMMA\n', base_sha: base.content_hash });
      expect(merged).toMatchObject({ merged: true, changed: true });
      expect((await owner.get(`/api/v1/nodes/${base.id}?format=md`)).text).toBe('# M\n\nALPHA\n\nbeta\n\nGAMMA\n');

      const text = await fails(
        full,
        'context_write',
        { path: 'eng/notes/merge.md', content: '# M\n\nAlpha!\n\nbeta\n\ngamma\n', base_sha: base.content_hash },
        'conflict',
      );
      const id = /\(proposal (pp_[0-9a-z]+) created\)$/.exec(text)?.[1];
      expect(id, text).toBeDefined();
      const pr = await owner.get(`/api/v1/proposals/${id}`);
      expect(pr.status).toBe(200);
      expect(pr.body).toMatchObject({ status: 'open', kind: 'edit', origin: 'conflict', node_id: base.id, content: '# M\n\nAlpha!\n\nbeta\n\ngamma\n' });
      // The page did not change.
      expect((await owner.get(`/api/v1/nodes/${base.id}?format=md`)).text).toBe('# M\n\nALPHA\n\nbeta\n\nGAMMA\n');
    });

    it('context_propose with content, with a patch, and without the grant', async () => {
      const byContent = await ok(proposer, 'context_propose', { path: 'eng/runbooks/deploy.md', content: '# Deploy\n\nRun it twice.\n', reason: 'clearer' });
      expect(byContent.proposal).toMatchObject({ status: 'open', kind: 'edit', node_id: seeded.id });
      const created = await ok(proposer, 'context_propose', { path: 'eng/ideas/new.md', content: '# New\n' });
      expect(created.proposal).toMatchObject({ kind: 'create', path: 'eng/ideas/new.md', node_id: null });

      const page = await ok(full, 'context_write', { path: 'eng/notes/patch.md', content: '# P\n\nline one\nline two\n' });
      const patch = ['--- a/eng/notes/patch.md', '+++ b/eng/notes/patch.md', '@@ -1,4 +1,4 @@', ' # P', ' ', ' line one', '-line two', '+line 2', ''].join(
        '\n',
      );
      const byPatch = await ok(proposer, 'context_propose', { id: page.id, patch, reason: 'digits' });
      const rest = await owner.get(`/api/v1/proposals/${byPatch.proposal.id}`);
      expect(rest.body).toMatchObject({ status: 'open', origin: 'propose', base_hash: page.content_hash, content: '# P\n\nline one\nline 2\n' });
      const bad = ['--- a/x', '+++ b/x', '@@ -1,1 +1,1 @@', '-nothing like this', '+x', ''].join('\n');
      await fails(proposer, 'context_propose', { id: page.id, patch: bad }, 'patch_does_not_apply');
      await fails(proposer, 'context_propose', { id: page.id, patch: 'hello', content: 'x' }, 'invalid_request');
      await fails(reader, 'context_propose', { path: 'eng/x.md', content: '# X\n' }, 'forbidden');
    });

    it('context_tree lists Spaces without a path, a folder tree with one', async () => {
      const spaces = await ok(reader, 'context_tree');
      expect(spaces.spaces.map((x: { id: string }) => x.id)).toContain('eng');
      const tree = await ok(reader, 'context_tree', { path: 'eng', depth: 1 });
      expect(tree.space.id).toBe('eng');
      expect(tree.tree.folders.map((f: { path: string }) => f.path)).toContain('eng/runbooks');
      const sub = await ok(reader, 'context_tree', { path: 'eng/runbooks' });
      expect(sub.tree.pages.map((x: { id: string }) => x.id)).toContain(seeded.id);
      await fails(reader, 'context_tree', { depth: 11 }, 'invalid_request');
      await fails(collabOnly, 'context_tree', {}, 'forbidden');
    });

    it('context_related shows links and backlinks', async () => {
      const linker = await ok(full, 'context_write', { path: 'eng/runbooks/index.md', content: '# Index\n\nSee [[Deploy]].\n' });
      const r = await ok(reader, 'context_related', { id: seeded.id });
      expect(r.backlinks.map((x: { id: string }) => x.id)).toContain(linker.id);
      const r2 = await ok(reader, 'context_related', { node_id: linker.id });
      expect(r2.links.map((x: { id: string }) => x.id)).toContain(seeded.id);
      await fails(reader, 'context_related', {}, 'invalid_request');
      await fails(collabOnly, 'context_related', { id: seeded.id }, 'forbidden');
    });

    it('context_log appends entries to log.md of a Space or folder', async () => {
      const first = await ok(proposer, 'context_log', { scope: 'eng/runbooks', entry: 'Checked the deploy runbook' });
      expect(first.path).toBe('eng/runbooks/log.md');
      await ok(full, 'context_log', { scope: 'eng/runbooks', entry: 'Second entry\nwith two lines' });
      const md = (await owner.get(`/api/v1/nodes/${encodeURIComponent('eng/runbooks/log.md')}?format=md`)).text;
      expect(md).toMatch(
        /^# Log of eng\/runbooks\n\n- \S+ Proposer \(pr_[0-9a-z]+\): Checked the deploy runbook\n- \S+ Scribe \(pr_[0-9a-z]+\): Second entry\n {2}with two lines\n$/,
      );
      await ok(proposer, 'context_log', { scope: 'eng', entry: 'space-level' });
      expect((await owner.get(`/api/v1/nodes/${encodeURIComponent('eng/log.md')}?format=md`)).text).toContain('space-level');
      await fails(proposer, 'context_log', { scope: 'eng', entry: '::: secret\nx\n:::' }, 'invalid_entry');
      await fails(reader, 'context_log', { scope: 'eng', entry: 'no' }, 'forbidden');
    });

    it('context_archive and context_restore by id; without write, archiving becomes a proposal', async () => {
      const p = await ok(full, 'context_write', { path: 'eng/notes/old.md', content: '# Old\n' });
      // Without write, the archive is queued for review: a success saying so, not an error.
      const proposed = await ok(proposer, 'context_archive', { id: p.id, reason: 'stale' });
      expect(proposed).toMatchObject({ proposed: true, proposal: { status: 'open', kind: 'archive', node_id: p.id } });
      const prId = proposed.proposal.id as string;
      expect((await owner.get(`/api/v1/proposals/${prId}`)).body).toMatchObject({ kind: 'archive', origin: 'no_write', params: { reason: 'stale' } });
      const a = await ok(full, 'context_archive', { node_id: p.id, reason: 'closed' });
      expect(a).toMatchObject({ id: p.id, state: 'archived' });
      expect((await owner.get(`/api/v1/nodes/${p.id}`)).body).toMatchObject({ state: 'archived', archived_reason: 'closed' });
      await fails(full, 'context_archive', { id: p.id }, 'already_archived');
      await fails(proposer, 'context_restore', { id: p.id }, 'forbidden');
      expect(await ok(full, 'context_restore', { id: p.id })).toMatchObject({ state: 'active' });
      await fails(reader, 'context_archive', { id: p.id }, 'forbidden');
      await fails(full, 'context_archive', { reason: 'manual' }, 'invalid_request');
      await fails(full, 'context_archive', { id: p.id, reason: 'bored' }, 'invalid_request');
    });

    it('context_archive and context_restore by cluster_path', async () => {
      await ok(full, 'context_write', { path: 'eng/legacy/a.md', content: '# La\n' });
      await ok(full, 'context_write', { path: 'eng/legacy/sub/b.md', content: '# Lb\n' });
      await ok(full, 'context_write', { path: 'eng/legacyx/c.md', content: '# Lc\n' });
      const a = await ok(full, 'context_archive', { cluster_path: 'eng/legacy', reason: 'superseded' });
      expect(a).toMatchObject({ cluster_path: 'eng/legacy', archived: true, proposals: [] });
      expect(a.pages.map((x: { path: string }) => x.path).sort()).toEqual(['eng/legacy/a.md', 'eng/legacy/sub/b.md']);
      const tree = (await owner.get('/api/v1/spaces/eng/tree?path=legacy&include_archived=true')).body;
      expect(tree.tree).toMatchObject({ archived: true });
      expect((await owner.get(`/api/v1/nodes/${encodeURIComponent('eng/legacyx/c.md')}`)).body.state).toBe('active');
      await fails(full, 'context_archive', { cluster_path: 'eng/legacy' }, 'already_archived');
      await fails(proposer, 'context_restore', { cluster_path: 'eng/legacy' }, 'forbidden');
      const r = await ok(full, 'context_restore', { cluster_path: 'eng/legacy' });
      expect(r).toMatchObject({ archived: false });
      expect(r.pages).toHaveLength(2);
      await fails(full, 'context_archive', { cluster_path: 'eng/nowhere' }, 'not_found');
      await fails(full, 'context_archive', { cluster_path: 'eng' }, 'invalid_path');
      // Without write, each page becomes an archive proposal.
      const proposed = await ok(proposer, 'context_archive', { cluster_path: 'eng/legacy' });
      expect(proposed.pages).toEqual([]);
      expect(proposed.proposals.map((x: { kind: string }) => x.kind)).toEqual(['archive', 'archive']);
      expect(proposed.archived).toBe(false);
    });
  });

  describe('retrieval', () => {
    it('context_search: hybrid, one result per page, filters; needs the search grant', async () => {
      const r = await ok(full, 'context_search', { query: 'pipeline', scope: 'eng/runbooks', limit: 5 });
      expect(r.results[0]).toMatchObject({ id: seeded.id, path: 'eng/runbooks/deploy.md', title: 'Deploy', state: 'active' });
      expect(typeof r.results[0].snippet).toBe('string');
      expect(new Set(r.results.map((x: { id: string }) => x.id)).size).toBe(r.results.length);
      expect((await ok(full, 'context_search', { query: 'pipeline', tags: ['ops'] })).results).toHaveLength(1);
      expect((await ok(full, 'context_search', { query: 'pipeline', tags: ['nope'] })).results).toHaveLength(0);
      await fails(full, 'context_search', { query: 'pipeline', limit: 51 }, 'invalid_request');
      await fails(reader, 'context_search', { query: 'pipeline' }, 'forbidden');
    });

    it('search returns id, title and url; fetch returns the text and counts as a read', async () => {
      const r = await ok(full, 'search', { query: 'rollback' });
      expect(r.results[0]).toEqual({ id: seeded.id, title: 'Deploy', url: `https://vault.example.com/api/v1/nodes/${seeded.id}` });
      const f = await ok(full, 'fetch', { id: r.results[0].id });
      expect(f).toMatchObject({
        id: seeded.id,
        title: 'Deploy',
        url: r.results[0].url,
        metadata: { path: 'eng/runbooks/deploy.md', state: 'active', redacted: false },
      });
      expect(f.text).toContain('Revert the release.');
      expect(typeof f.metadata.last_touched_at).toBe('string');
      await fails(reader, 'search', { query: 'rollback' }, 'forbidden');
      await fails(collabOnly, 'fetch', { id: seeded.id }, 'forbidden');
      await fails(full, 'fetch', { id: 'pg_00000000000000000000000000' }, 'not_found');
    });

    it('fetch and context_get redact blocks above the ceiling', async () => {
      const low = await createAgentWithKey(owner, [{ action: 'read', ceiling: 'internal' }], { ceiling: 'internal', name: 'Low' });
      const res = await owner.post('/api/v1/nodes', { path: 'eng/secret-ish.md', content: '# S\n\nopen\n\n::: confidential\nhidden words\n:::\n' });
      expect(res.status).toBe(201);
      const c = await connectMcp(s.url, low.key);
      const f = await ok(c, 'fetch', { id: res.body.id });
      expect(f.text).not.toContain('hidden words');
      expect(f.metadata.redacted).toBe(true);
      expect((await ok(c, 'context_get', { id: res.body.id })).content).not.toContain('hidden words');
      await c.close();
    });
  });

  describe('bundle', () => {
    it('context_bundle returns budgeted markdown with a source per section; needs read', async () => {
      const md = await ok(full, 'context_bundle', { intent: 'how to roll back a deploy', budget_tokens: 400, scope: 'eng/runbooks' });
      expect(typeof md).toBe('string');
      expect(md).toContain('source: eng/runbooks/deploy.md');
      expect(md).toContain('Revert the release.');
      expect(encode(md).length).toBeLessThanOrEqual(400);
      await fails(full, 'context_bundle', { intent: 'x', budget_tokens: 199 }, 'invalid_request');
      await fails(full, 'context_bundle', { intent: 'x', budget_tokens: 64001 }, 'invalid_request');
      await fails(collabOnly, 'context_bundle', { intent: 'deploy' }, 'forbidden');
    });

    it('load_project_context: one user message, the bundle prefixed as data', async () => {
      const r = await reader.getPrompt({ name: 'load_project_context', arguments: { project: 'eng', budget_tokens: '600' } });
      expect(r.messages).toHaveLength(1);
      const m = r.messages[0]!;
      expect(m.role).toBe('user');
      const text = (m.content as { type: string; text: string }).text;
      expect(text.startsWith(DATA_NOTICE)).toBe(true);
      expect(text).toContain('source: eng/');
      expect(encode(text).length).toBeLessThan(600 + 100);
      const dflt = await reader.getPrompt({ name: 'load_project_context', arguments: { project: 'eng' } });
      expect((dflt.messages[0]!.content as { text: string }).text.startsWith(DATA_NOTICE)).toBe(true);
      await expect(reader.getPrompt({ name: 'load_project_context', arguments: { project: 'eng', budget_tokens: '100' } })).rejects.toThrow(
        /invalid_request: budget_tokens/,
      );
      await expect(reader.getPrompt({ name: 'load_project_context', arguments: { project: 'eng', budget_tokens: 'lots' } })).rejects.toBeInstanceOf(McpError);
      await expect(collabOnly.getPrompt({ name: 'load_project_context', arguments: { project: 'eng' } })).rejects.toThrow(/forbidden: /);
    });
  });

  describe('collaboration', () => {
    it('collab_post posts with mentions; without collab it is refused', async () => {
      const m = await ok(full, 'collab_post', { node: 'eng/runbooks/deploy.md', body: 'Is the rollback current?', kind: 'question', mentions: ['@Olive'] });
      expect(m).toMatchObject({ seq: 1, mentions: [ownerId], thread: { locked: false } });
      const thread = await owner.get(`/api/v1/nodes/${seeded.id}/threads`);
      expect(thread.body.messages[0]).toMatchObject({ body: 'Is the rollback current?', kind: 'question' });
      await fails(reader, 'collab_post', { node: seeded.id, body: 'hi' }, 'forbidden');
      await fails(full, 'collab_post', { node: seeded.id, body: 'hi', mentions: ['@Nobody'] }, 'unknown_mention');
    });

    it('collab_inbox long-polls, returns unread first and marks them read; collab_ack marks done', async () => {
      const before = await ok(full, 'collab_inbox', {});
      if (before.events.length > 0) await ok(full, 'collab_ack', { up_to: before.next_after });
      const started = Date.now();
      const waiting = call(full, 'collab_inbox', { wait_s: 10 });
      await new Promise((r) => setTimeout(r, 300));
      const post = await owner.post(`/api/v1/nodes/${seeded.id}/threads`, { body: 'Ping @Scribe', mentions: [fullId] });
      expect(post.status).toBe(201);
      const got = await waiting;
      const elapsed = Date.now() - started;
      expect(got.isError, got.text).toBe(false);
      expect(elapsed).toBeGreaterThanOrEqual(250);
      expect(elapsed).toBeLessThan(8000);
      expect(got.json.events).toHaveLength(1);
      const ev = got.json.events[0];
      expect(ev).toMatchObject({ kind: 'mention', state: 'unread', page_id: seeded.id });

      // A second event arrives: it comes first (unread), then the one already read.
      await owner.post(`/api/v1/nodes/${seeded.id}/threads`, { body: 'Again @Scribe', mentions: [fullId] });
      const again = await ok(full, 'collab_inbox', {});
      expect(again.events.map((e: { state: string }) => e.state)).toEqual(['unread', 'read']);
      expect(again.events[1].seq).toBe(ev.seq);
      // REST sees the state MCP left: both events are read now, none unread.
      const rest = await fullRest.get('/api/v1/inbox?state=read');
      expect(rest.body.events.map((e: { seq: number }) => e.seq)).toEqual([ev.seq, again.events[0].seq]);
      expect((await fullRest.get('/api/v1/inbox')).body.events).toEqual([]);

      const done = await ok(full, 'collab_ack', { seqs: [ev.seq] });
      expect(done).toEqual({ done: 1 });
      const left = await ok(full, 'collab_inbox', {});
      expect(left.events.map((e: { seq: number; state: string }) => [e.seq, e.state])).toEqual([[again.events[0].seq, 'read']]);
      await fails(full, 'collab_ack', {}, 'invalid_request');
      await fails(full, 'collab_inbox', { wait_s: 21 }, 'invalid_request');
      await fails(full, 'collab_inbox', { limit: 0 }, 'invalid_request');
    });

    it('context_whoami shows identity, workspace, grants and whom to mention', async () => {
      const me = await ok(full, 'context_whoami');
      expect(me).toMatchObject({ id: fullId, name: 'Scribe', kind: 'agent', ceiling: 'confidential' });
      expect(me.grants.map((g: { action: string }) => g.action).sort()).toEqual(['collab', 'propose', 'read', 'search', 'write']);
      expect(me.workspace.slug).toBeTruthy();
      expect(me.mentionable).toEqual(
        expect.arrayContaining([{ id: ownerId, name: 'Olive', kind: 'human' }, expect.objectContaining({ name: 'Reader', kind: 'agent' })]),
      );
      expect(me.mentionable.find((x: { id: string }) => x.id === fullId)).toBeUndefined();
    });
  });

  describe('argument errors', () => {
    it('wrong types, unknown arguments and out-of-range values are tool errors; an unknown tool is a JSON-RPC error', async () => {
      const t = await fails(full, 'context_get', { path: 5 }, 'invalid_request');
      expect(t).toContain('path');
      await fails(full, 'context_get', { id: seeded.id, extra: 1 }, 'invalid_request');
      await fails(full, 'context_write', { path: 'eng/x.md' }, 'invalid_request');
      await fails(full, 'collab_ack', { seqs: ['a'] }, 'invalid_request');
      await expect(full.callTool({ name: 'no_such_tool', arguments: {} })).rejects.toBeInstanceOf(McpError);
    });
  });
});
