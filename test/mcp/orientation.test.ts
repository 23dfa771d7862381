import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { testEngines } from '../support/engines.js';
import { createAgentWithKey, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';
import { connectMcp, ok } from './support.js';

/**
 * Issue 13, orientation: what an agent learns before its first real call. `initialize` gives
 * instructions; the tool descriptions say which tool to prefer; Space and folder summaries come
 * from their index.md pages, shown only to callers who may read that page.
 */

const GUIDES_FIRST =
  'Guides for every team: how we write runbooks, how we review changes, and where the templates live. Each guide has an owner who keeps it current, reviews every change to it and answers the questions asked in its thread.';

describe.each(testEngines())('MCP orientation (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let full: McpClient;
  let low: McpClient;
  let scoped: McpClient;

  const index = async (c: McpClient) => {
    const r = await c.readResource({ uri: 'service://index' });
    return JSON.parse((r.contents[0] as { text: string }).text) as { spaces: { id: string; name: string; summary: string }[] };
  };
  const summaryOf = (tree: any, path: string): string | undefined => {
    const walk = (n: any): any => (n.path === path ? n : (n.folders ?? []).map(walk).find(Boolean));
    return walk(tree.tree)?.summary;
  };
  const create = async (path: string, content: string) => {
    const r = await owner.post('/api/v1/nodes', { path, content });
    expect(r.status, r.text).toBe(201);
    return r.body as { id: string };
  };

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url, 'Olive')).client;
    full = await connectMcp(s.url, (await createAgentWithKey(owner, [{ action: 'read' }, { action: 'write' }], { name: 'Full' })).key);
    low = await connectMcp(s.url, (await createAgentWithKey(owner, [{ action: 'read', ceiling: 'internal' }], { name: 'Low', ceiling: 'internal' })).key);
    scoped = await connectMcp(s.url, (await createAgentWithKey(owner, [{ action: 'read', scope: 'kb/guides' }], { name: 'Scoped' })).key);

    expect((await owner.post('/api/v1/spaces', { id: 'docs', name: 'Docs', summary: 'Handbooks (stored summary)' })).status).toBe(201);
    expect((await owner.post('/api/v1/spaces', { id: 'kb', name: 'Knowledge', summary: 'Stored kb summary' })).status).toBe(201);
    await create('kb/index.md', '---\nsummary: "The team knowledge base: guides, decisions and the glossary."\n---\n# Knowledge base\n\nLonger intro text.\n');
    await create('kb/guides/index.md', `# Guides\n\n${GUIDES_FIRST}\n\nSecond paragraph, not part of the summary.\n`);
    await create('kb/guides/writing.md', '# Writing\n\nShort sentences.\n');
    // A confidential index page: its text is the summary for whoever reads confidential, never for others.
    await create('kb/secret/index.md', '---\nsensitivity: confidential\n---\n# Secret\n\nZEBRA-SECRET-SUMMARY about the acquisition.\n');
    await create('kb/secret/open.md', '# Open\n\nAnyone may read this.\n');
    // An internal index page whose first paragraph sits in a confidential block: the block never becomes a summary.
    await create(
      'kb/mixed/index.md',
      '# Mixed\n\n::: confidential\nOTTER-HIDDEN-BLOCK text.\n:::\n\nVisible mixed summary with a [link](../guides/index.md).\n',
    );
    // An archived index page gives no summary.
    const archived = await create('kb/old/index.md', '# Old\n\nARCHIVED-SUMMARY text.\n');
    await create('kb/old/page.md', '# Old page\n\nstill here\n');
    expect((await owner.post(`/api/v1/nodes/${archived.id}/archive`, { reason: 'stale' })).status).toBe(200);
  });

  afterAll(async () => {
    for (const c of [full, low, scoped]) await c?.close();
    await s?.stop();
  });

  it('initialize returns instructions naming where to start, how paths look, how to cite and what to do without write', async () => {
    const text = full.getInstructions() ?? '';
    expect(text.length).toBeGreaterThan(100);
    expect(text.length).toBeLessThan(1500);
    for (const part of [
      'load_project_context',
      'context_bundle',
      'space/folder/page.md',
      'commit',
      'context_propose',
      'base_sha',
      'toolset=extended',
      'collab_ack',
    ]) {
      expect(text, part).toContain(part);
    }
  });

  it('descriptions say which tools to prefer, how paths look, what happens to a missing Space and how the inbox keeps read events', async () => {
    const { tools } = await full.listTools();
    expect(tools).toHaveLength(16);
    const d = (name: string) => tools.find((t) => t.name === name)!.description ?? '';
    expect(d('search')).toContain('prefer context_search');
    expect(d('fetch')).toContain('prefer context_get');
    expect(d('context_search')).toContain('Prefer it to search');
    expect(d('context_get')).toContain('Prefer it to fetch');
    expect(d('context_get')).toContain('section');
    expect(d('context_write')).toContain('space/folder/page.md');
    expect(d('context_write')).toMatch(/Space or folder that does not exist yet is created/);
    expect(d('context_write')).toContain('context_propose');
    expect(d('collab_inbox')).toMatch(/read ones keep coming back until you collab_ack/);
    expect(tools.find((t) => t.name === 'collab_inbox')!.annotations?.readOnlyHint).toBe(true);
    expect(d('context_archive')).toContain('proposed: true');
  });

  it('writing to a Space that does not exist creates it, as the description says', async () => {
    const w = await ok(full, 'context_write', { path: 'fresh/notes/first.md', content: '# First\n\nhello\n' });
    expect(w).toMatchObject({ created: true, path: 'fresh/notes/first.md' });
    expect((await index(full)).spaces.map((x) => x.id)).toContain('fresh');
  });

  it('service://index and context_tree show summaries from index.md pages, else the stored ones', async () => {
    const spaces = (await index(full)).spaces;
    expect(spaces.find((x) => x.id === 'kb')!.summary).toBe('The team knowledge base: guides, decisions and the glossary.');
    expect(spaces.find((x) => x.id === 'docs')!.summary).toBe('Handbooks (stored summary)');
    expect((await ok(full, 'context_tree')).spaces.find((x: { id: string }) => x.id === 'kb').summary).toBe(
      'The team knowledge base: guides, decisions and the glossary.',
    );

    const tree = await ok(full, 'context_tree', { path: 'kb', depth: 3 });
    expect(tree.space.summary).toBe('The team knowledge base: guides, decisions and the glossary.');
    expect(tree.tree.summary).toBe('The team knowledge base: guides, decisions and the glossary.');
    // The first paragraph, cut to about 200 characters on a word.
    const guides = summaryOf(tree, 'kb/guides')!;
    expect(guides.length).toBeLessThanOrEqual(200);
    expect(guides.endsWith('…')).toBe(true);
    expect(GUIDES_FIRST.startsWith(guides.slice(0, -1))).toBe(true);
    expect(guides).not.toContain('Second paragraph');
    expect(summaryOf(tree, 'kb/secret')).toBe('ZEBRA-SECRET-SUMMARY about the acquisition.');
    expect(summaryOf(tree, 'kb/mixed')).toBe('Visible mixed summary with a link.');
    expect(summaryOf(tree, 'kb/old')).toBe('');
    // A sub-tree shows its own folder's summary too.
    expect((await ok(full, 'context_tree', { path: 'kb/guides' })).tree.summary).toBe(guides);
    // REST answers the same.
    const rest = await owner.get('/api/v1/spaces/kb/tree?depth=3');
    expect(rest.status).toBe(200);
    expect(rest.body.space.summary).toBe(tree.space.summary);
  });

  it('never shows a summary from an index page the caller cannot read', async () => {
    const seen = async (c: McpClient) =>
      JSON.stringify([
        await index(c),
        await ok(c, 'context_tree'),
        await ok(c, 'context_tree', { path: 'kb', depth: 3 }).catch(() => null),
        await ok(c, 'context_tree', { path: 'kb/secret' }).catch(() => null),
      ]);

    // Below the index page's level: the folder is listed (it holds a readable page), its summary is not the hidden text.
    const lowSees = await seen(low);
    expect(lowSees).not.toContain('ZEBRA-SECRET');
    const lowTree = await ok(low, 'context_tree', { path: 'kb', depth: 3 });
    expect(summaryOf(lowTree, 'kb/secret')).toBe('');
    expect(summaryOf(lowTree, 'kb/guides')!.length).toBeGreaterThan(0);

    // A read grant on kb/guides only: kb/index.md is outside it, so the Space shows its stored summary.
    const scopedSees = await seen(scoped);
    expect(scopedSees).not.toContain('ZEBRA-SECRET');
    expect(scopedSees).not.toContain('The team knowledge base');
    expect((await index(scoped)).spaces).toEqual([{ id: 'kb', name: 'Knowledge', summary: 'Stored kb summary' }]);

    // Nobody ever gets a block's text or an archived page's text as a summary.
    for (const c of [full, low, scoped]) {
      const all = await seen(c);
      expect(all).not.toContain('OTTER-HIDDEN');
      expect(all).not.toContain('ARCHIVED-SUMMARY');
    }
  });
});
