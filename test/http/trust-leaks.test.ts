import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, joinAs, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { call, connectMcp } from '../mcp/support.js';

/**
 * Issue 11, items 8, 9 and 11 (the smaller ways in): Space names that tell of hidden pages,
 * log entries that hide later ones, frontmatter that costs CPU, sniffable markdown, and a log
 * that could create Spaces.
 */

describe.each(testEngines())('trust: small leaks (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let viewer: Client;
  let slug: string;

  beforeAll(async () => {
    s = await startTestServer(engine);
    const o = await signupHuman(s.url, 'Owner');
    owner = o.client;
    slug = o.workspace.slug;
    viewer = (await joinAs(owner, slug, 'viewer')).client;
    for (const [path, sens] of [
      ['layoffs/plan.md', 'secret'],
      ['layoffs/list.md', 'confidential'],
      ['handbook/intro.md', 'internal'],
      ['mixed/open/a.md', 'internal'],
      ['mixed/closed/b.md', 'secret'],
    ] as const) {
      const r = await owner.post('/api/v1/nodes', { path, content: `---\nsensitivity: ${sens}\n---\n# Page\n\nText.\n` });
      expect(r.status, r.text).toBe(201);
    }
    expect((await owner.post('/api/v1/spaces', { id: 'empty', name: 'Empty so far' })).status).toBe(201);
  }, 60_000);
  afterAll(async () => s?.stop());

  describe('item 8: a Space (or folder) holding only hidden pages does not exist for the caller', () => {
    it('REST /spaces, service://index and context_tree leave it out; its tree answers as a missing Space', async () => {
      const ids = (r: { body: { spaces: { id: string }[] } }) => r.body.spaces.map((x) => x.id);
      expect(ids(await owner.get('/api/v1/spaces'))).toEqual(expect.arrayContaining(['layoffs', 'handbook', 'mixed', 'empty']));
      const seen = ids(await viewer.get('/api/v1/spaces'));
      expect(seen).toEqual(expect.arrayContaining(['handbook', 'mixed', 'empty']));
      expect(seen).not.toContain('layoffs');
      const hidden = await viewer.get('/api/v1/spaces/layoffs/tree');
      const missing = await viewer.get('/api/v1/spaces/nothing-here/tree');
      expect(hidden.status).toBe(404);
      expect(hidden.body.code).toBe(missing.body.code);
      expect(hidden.body.error.message.replace('layoffs', 'X')).toBe(missing.body.error.message.replace('nothing-here', 'X'));
      // A folder of hidden pages does not appear in a tree the caller can see.
      const mixed = await viewer.get('/api/v1/spaces/mixed/tree');
      expect(mixed.status).toBe(200);
      expect(mixed.text).not.toContain('closed');

      // An agent reading only `handbook`, and one at internal everywhere, over MCP.
      const agent = await createAgentWithKey(owner, [{ action: 'read', scope: '*', ceiling: 'internal' }], { ceiling: 'internal' });
      const c = await connectMcp(s.url, agent.key);
      try {
        const res = await c.readResource({ uri: 'service://index' });
        const index = JSON.parse((res.contents[0] as { text: string }).text) as { spaces?: { id: string }[] } | { id: string }[];
        const list = Array.isArray(index) ? index : (index.spaces ?? []);
        expect(list.map((x) => x.id)).not.toContain('layoffs');
        expect(list.map((x) => x.id)).toContain('handbook');
        const tree = await call(c, 'context_tree', {});
        expect(tree.text).not.toContain('layoffs');
        const t = await call(c, 'context_tree', { path: 'layoffs' });
        expect(t.isError).toBe(true);
        expect(t.text).toMatch(/^not_found: /);
      } finally {
        await c.close();
      }
    });
  });

  describe('item 11: context_log never creates a Space', () => {
    it('an unknown Space is unknown_scope naming the Spaces the caller can use (never hidden ones); a folder inside a known Space is fine', async () => {
      const agent = await createAgentWithKey(
        owner,
        [
          { action: 'propose', scope: '*', ceiling: 'internal' },
          { action: 'read', scope: '*', ceiling: 'internal' },
        ],
        { ceiling: 'internal' },
      );
      const c = await connectMcp(s.url, agent.key);
      try {
        const r = await call(c, 'context_log', { scope: 'brand-new', entry: 'hello' });
        expect(r.isError).toBe(true);
        expect(r.text).toMatch(/^unknown_scope: /);
        expect(r.text).toContain('handbook');
        expect(r.text).not.toContain('layoffs');
        expect((await owner.get('/api/v1/spaces')).body.spaces.map((x: { id: string }) => x.id)).not.toContain('brand-new');
        // A hidden Space answers the same as a missing one.
        const h = await call(c, 'context_log', { scope: 'layoffs', entry: 'hello' });
        expect(h.text.replace('layoffs', 'X')).toBe(r.text.replace('brand-new', 'X'));
        // Known Space, new folder: appended.
        const ok = await call(c, 'context_log', { scope: 'handbook/notes', entry: 'first note' });
        expect(ok.isError, ok.text).toBe(false);
      } finally {
        await c.close();
      }
    });
  });

  describe('item 9: small defects', () => {
    it('a log entry cannot open a ::: block in any container, so it cannot hide later entries', async () => {
      const agent = await createAgentWithKey(
        owner,
        [
          { action: 'propose', scope: '*', ceiling: 'internal' },
          { action: 'read', scope: '*', ceiling: 'internal' },
        ],
        { ceiling: 'internal' },
      );
      const c = await connectMcp(s.url, agent.key);
      try {
        for (const entry of ['> ::: secret', '- ::: secret', '  ::: secret', '>> ::: confidential', '1. ::: secret', 'fine\n> ::: secret\nmore']) {
          const r = await call(c, 'context_log', { scope: 'handbook', entry });
          expect(r.isError, `${JSON.stringify(entry)}: ${r.text}`).toBe(true);
          expect(r.text).toMatch(/^invalid_entry: /);
        }
        expect((await call(c, 'context_log', { scope: 'handbook', entry: 'later entry stays visible' })).isError).toBe(false);
      } finally {
        await c.close();
      }
      const log = await viewer.get(`/api/v1/nodes/${encodeURIComponent('handbook/log.md')}`);
      expect(log.status).toBe(200);
      expect(log.body.redacted).toBe(false);
      expect(log.body.content).toContain('later entry stays visible');
    });

    it('deeply nested frontmatter is refused quickly with 400, in YAML flow, YAML blocks, aliases and JSON bodies; the server stays responsive', async () => {
      const deep = 100_000;
      const cases = [
        `---\nx: ${'['.repeat(deep)}${']'.repeat(deep)}\n---\n# Flow\n`,
        `---\nx: ${'{a: '.repeat(5000)}1${'}'.repeat(5000)}\n---\n# Map\n`,
        `---\n${Array.from({ length: 200 }, (_, i) => `${'  '.repeat(i)}k${i}:`).join('\n')} 1\n---\n# Block\n`,
        `---\nx: ${'- '.repeat(200)}1\n---\n# Dashes\n`,
        `---\na: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n---\n# Laughs\n`,
      ];
      for (const [i, content] of cases.entries()) {
        const t0 = Date.now();
        const r = await owner.post('/api/v1/nodes', { path: `deep/case-${i}.md`, content });
        expect(r.status, `case ${i}: ${r.text.slice(0, 200)}`).toBe(400);
        expect(r.body.code).toBe('invalid_frontmatter');
        expect(Date.now() - t0).toBeLessThan(5000);
      }
      let nested: Record<string, unknown> = { leaf: 1 };
      for (let i = 0; i < 200; i++) nested = { n: nested };
      const j = await owner.post('/api/v1/nodes', { space: 'deep', title: 'Json', body: 'x', frontmatter: nested });
      expect(j.status, j.text.slice(0, 200)).toBe(400);
      expect(j.body.code).toBe('invalid_frontmatter');
      expect((await owner.get('/healthz')).status).toBe(200);
      // Ordinary nesting still works.
      const fine = await owner.post('/api/v1/nodes', {
        path: 'deep/fine.md',
        content: '---\nowners: [{name: a, teams: [x, y]}]\nmeta:\n  a:\n    b: 1\n---\n# Fine\n',
      });
      expect(fine.status, fine.text).toBe(201);
    });

    it('every answer carries X-Content-Type-Options: nosniff, page markdown and markdown bundles included', async () => {
      const md = await viewer.get(`/api/v1/nodes/${encodeURIComponent('handbook/intro.md')}?format=md`);
      expect(md.headers.get('content-type')).toMatch(/text\/markdown/);
      expect(md.headers.get('x-content-type-options')).toBe('nosniff');
      const bundle = await viewer.request('POST', '/api/v1/bundle', { json: { intent: 'page text' }, headers: { accept: 'text/markdown' } });
      expect(bundle.headers.get('content-type')).toMatch(/text\/markdown/);
      expect(bundle.headers.get('x-content-type-options')).toBe('nosniff');
      expect((await new Client(s.url).get('/api/v1/nope')).headers.get('x-content-type-options')).toBe('nosniff');
      expect((await new Client(s.url).get('/healthz')).headers.get('x-content-type-options')).toBe('nosniff');
    });
  });
});
