import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { Client, joinAs, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { connectMcp } from '../mcp/support.js';
import { waitForVectors } from '../support/embeddings-server.js';

/**
 * Issue 11, item 2: search scores and plans must not be an oracle. A signed-up user of another
 * workspace must not learn whether a word occurs here from how their own results score or
 * which fallback runs, and a viewer must not learn it of secret pages of their own workspace.
 * Each test records what the victim's caller sees, lets the other side write, and compares.
 */

interface Hit {
  id: string;
  score: number;
}

describe.each(testEngines())('trust: search is no oracle (%s)', (engine) => {
  let s: TestServer;
  let a: Client; // workspace A's owner: the observer
  let b: Client; // workspace B's owner: writes words
  let aViewer: Client;

  beforeAll(async () => {
    s = await startTestServer(engine);
    a = (await signupHuman(s.url, 'Alice')).client;
    const wsA = (await a.get('/api/v1/whoami')).body.workspace.slug;
    b = (await signupHuman(s.url, 'Bob')).client;
    aViewer = (await joinAs(a, wsA, 'viewer')).client;
    for (const [path, content] of [
      ['notes/falcon.md', '# Falcon\n\nThe zephyrine falcon nests on the north tower.\n'],
      ['notes/harbor.md', '# Harbor\n\nShips of the harbor carry quillwort and zephyrine lumber, zephyrine again.\n'],
      ['notes/garden.md', '# Garden\n\nQuillwort grows by the pond in the garden.\n'],
    ]) {
      const r = await a.post('/api/v1/nodes', { path, content });
      expect(r.status, r.text).toBe(201);
    }
  }, 60_000);
  afterAll(async () => s?.stop());

  const search = async (c: Client, q: string, mode: string): Promise<{ mode_used: string; hits: Hit[] }> => {
    const r = await c.get(`/api/v1/search?q=${encodeURIComponent(q)}&mode=${mode}&limit=10`);
    expect(r.status, r.text).toBe(200);
    return { mode_used: r.body.mode_used, hits: r.body.results.map((h: Hit) => ({ id: h.id, score: h.score })) };
  };

  it('keyword scores are derived from the rank alone: no raw bm25 value reaches a caller', async () => {
    const r = await search(a, 'zephyrine', 'fts');
    expect(r.hits.length).toBe(2);
    expect(r.hits.map((h) => h.score)).toEqual([1, 0.5]);
  });

  it("another workspace writing the query's words changes nothing in this workspace's answers: scores, fallback or weighting", async () => {
    // `flumdiddle` is in no section of A: the any-word fallback runs, and its "weak" decision
    // (a word in no section) used to be counted over every workspace.
    const queries: [string, string][] = [
      ['zephyrine', 'fts'],
      ['quillwort', 'fts'],
      ['zephyrine flumdiddle', 'hybrid'],
      ['quillwort flumdiddle', 'fts'],
      ['harbor zephyrine', 'hybrid'],
    ];
    await waitForVectors(a);
    const before = [];
    for (const [q, m] of queries) before.push(await search(a, q, m));
    const mcpBefore = await (async () => {
      const key = await a.post('/api/v1/principals', {
        name: 'observer',
        ceiling: 'internal',
        grants: [{ action: 'search', scope: '*', ceiling: 'internal' }],
      });
      const k = await a.post(`/api/v1/principals/${key.body.id}/tokens`, { name: 'k' });
      return k.body.key as string;
    })();
    const mcp = await connectMcp(s.url, mcpBefore);
    const mcpSearch = async () => (await mcp.callTool({ name: 'context_search', arguments: { query: 'zephyrine flumdiddle' } })).content;
    const m1 = await mcpSearch();

    // Workspace B writes the words, many times, and the word A lacks.
    for (let i = 0; i < 40; i++) {
      const r = await b.post('/api/v1/nodes', {
        path: `flood/p${i}.md`,
        content: `# Flood ${i}\n\nzephyrine ${'zephyrine '.repeat(i % 5)}quillwort flumdiddle flumdiddle harbor.\n`,
      });
      expect(r.status).toBe(201);
    }

    await waitForVectors(a);
    const after = [];
    for (const [q, m] of queries) after.push(await search(a, q, m));
    expect(after).toEqual(before);
    expect(await mcpSearch()).toEqual(m1);
    await mcp.close();
  });

  it("another workspace writing a word does not change the order of this workspace's keyword results", async () => {
    // Two pages hold both words, each one of them four times. While `vorpalite` is the rarer
    // word here, the page heavy in it leads. Workspace B then writes `vorpalite` into many pages:
    // weighed over the whole deployment it would become the common word and the order would flip.
    const pages: [string, string][] = [
      ['order/heavy-vorpal.md', '# One\n\nvorpalite vorpalite vorpalite vorpalite brimstave.\n'],
      ['order/heavy-brim.md', '# Two\n\nbrimstave brimstave brimstave brimstave vorpalite.\n'],
    ];
    for (let i = 0; i < 4; i++) pages.push([`order/brim-${i}.md`, `# Filler ${i}\n\nbrimstave alone in note ${i}.\n`]);
    for (let i = 0; i < 8; i++) pages.push([`order/plain-${i}.md`, `# Plain ${i}\n\nnothing of either word in note ${i}.\n`]);
    for (const [path, content] of pages) expect((await a.post('/api/v1/nodes', { path, content })).status).toBe(201);
    const order = async () => (await a.get('/api/v1/search?q=vorpalite%20brimstave&mode=fts&limit=10')).body.results.map((h: { path: string }) => h.path);
    const before = await order();
    expect(before.slice(0, 2)).toEqual(['order/heavy-vorpal.md', 'order/heavy-brim.md']);
    for (let i = 0; i < 40; i++) {
      expect((await b.post('/api/v1/nodes', { path: `other/v${i}.md`, content: `# Other ${i}\n\nvorpalite ${i}.\n` })).status).toBe(201);
    }
    expect(await order()).toEqual(before);
  });

  it("a viewer's scores do not move when pages above its ceiling hold the query's words", async () => {
    // A word in one page the viewer may read; then three secret pages get it too.
    expect((await a.post('/api/v1/nodes', { path: 'notes/moon.md', content: '# Moon\n\nThe moonquill blooms at night, far from the harbor.\n' })).status).toBe(
      201,
    );
    // Hybrid answers fuse the vector list: compare only once the embedding worker has caught up.
    await waitForVectors(a);
    const before = await search(aViewer, 'moonquill', 'fts');
    const beforeHybrid = await search(aViewer, 'moonquill flumdiddle', 'hybrid');
    expect(before.hits).toHaveLength(1);
    for (let i = 0; i < 3; i++) {
      const r = await a.post('/api/v1/nodes', {
        path: `vault/s${i}.md`,
        content: `---\nsensitivity: secret\n---\n# Secret ${i}\n\nmoonquill and flumdiddle ${i}.\n`,
      });
      expect(r.status).toBe(201);
    }
    await waitForVectors(a);
    expect(await search(aViewer, 'moonquill', 'fts')).toEqual(before);
    expect(await search(aViewer, 'moonquill flumdiddle', 'hybrid')).toEqual(beforeHybrid);
    // The owner sees the secret pages; the viewer's answers said nothing of them.
    expect((await search(a, 'moonquill', 'fts')).hits).toHaveLength(4);
  });

  it("a viewer's order does not move when secret pages or secret blocks use the query's words", async () => {
    const pages: [string, string][] = [
      ['lvorder/heavy-glint.md', '# Uno\n\nglintarch glintarch glintarch glintarch sorrelbay.\n'],
      ['lvorder/heavy-sorrel.md', '# Dos\n\nsorrelbay sorrelbay sorrelbay sorrelbay glintarch.\n'],
    ];
    for (let i = 0; i < 4; i++) pages.push([`lvorder/sorrel-${i}.md`, `# Filler ${i}\n\nsorrelbay alone, note ${i}.\n`]);
    for (const [path, content] of pages)
      expect((await a.post('/api/v1/nodes', { path, content: `---\nsensitivity: public\n---\n${content}` })).status).toBe(201);
    const order = async () => (await aViewer.get('/api/v1/search?q=glintarch%20sorrelbay&mode=fts&limit=10')).body.results.map((h: { path: string }) => h.path);
    const before = await order();
    // The two pages holding both words first, then those holding one (any word ranks, issue 20).
    expect(before.slice(0, 2)).toEqual(['lvorder/heavy-glint.md', 'lvorder/heavy-sorrel.md']);
    expect(before).toHaveLength(6);
    // Secret pages, and secret blocks in a public page, make glintarch the common word overall.
    for (let i = 0; i < 20; i++) {
      expect(
        (await a.post('/api/v1/nodes', { path: `lvault/g${i}.md`, content: `---\nsensitivity: secret\n---\n# Vault ${i}\n\nglintarch ${i}.\n` })).status,
      ).toBe(201);
    }
    const blocks = Array.from({ length: 20 }, (_, i) => `## Part ${i}\n\n::: secret\nglintarch hidden ${i}.\n:::\n`).join('\n');
    expect((await a.post('/api/v1/nodes', { path: 'lvorder/blocks.md', content: `---\nsensitivity: public\n---\n# Blocks\n\n${blocks}` })).status).toBe(201);
    expect(await order()).toEqual(before);
    // The owner, who reads them, sees them.
    expect((await a.get('/api/v1/search?q=glintarch&mode=fts&limit=50')).body.results.length).toBeGreaterThan(20);
  });

  it('an agent with a grant on one Space: pages elsewhere neither crowd out its results nor change its scores', async () => {
    const key = await a.post('/api/v1/principals', {
      name: 'scoped',
      ceiling: 'internal',
      grants: [
        { action: 'search', scope: 'scoped', ceiling: 'internal' },
        { action: 'read', scope: 'scoped', ceiling: 'internal' },
      ],
    });
    expect(key.status, key.text).toBe(201);
    const tok = (await a.post(`/api/v1/principals/${key.body.id}/tokens`, { name: 'k' })).body.key as string;
    const agent = new Client(s.url, tok);
    expect((await a.post('/api/v1/nodes', { path: 'scoped/notes.md', content: '# Notes\n\nA numbat once, and the kettle water boils.\n' })).status).toBe(201);
    await waitForVectors(a);
    const fts = async () => (await agent.get('/api/v1/search?q=numbat&mode=fts&limit=10')).body.results.map((h: { path: string }) => h.path);
    const weak = async () =>
      (await agent.get('/api/v1/search?q=kettle%20water%20quarvelian&mode=hybrid&limit=10')).body.results.map((h: { path: string; score: number }) => [
        h.path,
        h.score,
      ]);
    expect(await fts()).toEqual(['scoped/notes.md']);
    const weakBefore = await weak();
    // Outside its grant: many pages that bm25 prefers, and the word its query lacks.
    for (let i = 0; i < 25; i++) {
      expect(
        (
          await a.post('/api/v1/nodes', {
            path: `elsewhere/n${i}.md`,
            content: `---\ntitle: Numbat ${i}\n---\n# Numbat ${i}\n\nnumbat numbat numbat quarvelian.\n`,
          })
        ).status,
      ).toBe(201);
    }
    await waitForVectors(a);
    expect(await fts()).toEqual(['scoped/notes.md']);
    expect(await weak()).toEqual(weakBefore);
  });
});
