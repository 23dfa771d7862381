import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { finished, postJson } from '../support/imports.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';

/**
 * A page's tags, names and links are derived rows: SQLite writes only those that changed when a
 * page is rewritten (indexer.ts syncDerived). Whatever was written, what the API reports must
 * be exactly what the page says now: nothing stale left behind, nothing missing.
 */
describe.each(testEngines())('derived rows follow every rewrite (%s)', (engine) => {
  let s: TestServer;
  let c: Client;
  let owner: Client;
  beforeAll(async () => {
    s = await startTestServer(engine);
    const h = await signupHuman(s.url);
    owner = h.client;
    const a = await createAgentWithKey(h.client, [{ action: 'read' }, { action: 'write' }, { action: 'search' }]);
    c = new Client(s.url, a.key);
  });
  afterAll(async () => s?.stop());

  const put = async (id: string, content: string) => {
    const cur = await c.get(`/api/v1/nodes/${encodeURIComponent(id)}`);
    const r = await c.request('PUT', `/api/v1/nodes/${encodeURIComponent(id)}`, { json: { content }, headers: { 'if-match': cur.headers.get('etag')! } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  };
  const backlinks = async (path: string) =>
    ((await c.get(`/api/v1/nodes/${encodeURIComponent(path)}/backlinks`)).body.backlinks as { path: string }[]).map((b) => b.path).sort();
  const tagged = async (tag: string) =>
    ((await c.get(`/api/v1/search?q=page&mode=fts&tags=${tag}`)).body.results as { path: string }[]).map((r) => r.path).sort();

  it('links, tags and names: unchanged ones kept, removed ones gone, new ones there', async () => {
    for (const p of ['dr/b.md', 'dr/c.md', 'dr/d.md']) expect((await c.post('/api/v1/nodes', { path: p, content: `# ${p}\n\npage\n` })).status).toBe(201);
    const a = 'dr/a.md';
    expect((await c.post('/api/v1/nodes', { path: a, content: '---\ntags: [x, y]\n---\n# A page\n\nSee [[b]] and [[c]].\n' })).status).toBe(201);
    expect(await backlinks('dr/b.md')).toEqual([a]);
    expect(await backlinks('dr/c.md')).toEqual([a]);
    expect(await tagged('y')).toEqual([a]);

    // Text changes only: links and tags unchanged, still reported once each.
    await put(a, '---\ntags: [x, y]\n---\n# A page\n\nSee [[b]] and [[c]], now with more words.\n');
    expect(await backlinks('dr/b.md')).toEqual([a]);
    expect(await backlinks('dr/c.md')).toEqual([a]);
    expect(await tagged('x')).toEqual([a]);

    // One link dropped, one added, one kept; one tag swapped.
    await put(a, '---\ntags: [x, z]\n---\n# A page\n\nSee [[b]] and [[d]].\n');
    expect(await backlinks('dr/b.md')).toEqual([a]);
    expect(await backlinks('dr/c.md')).toEqual([]);
    expect(await backlinks('dr/d.md')).toEqual([a]);
    expect(await tagged('y')).toEqual([]);
    expect(await tagged('z')).toEqual([a]);
    expect(await tagged('x')).toEqual([a]);

    // The same link at another place (its order changes) and the title (a name) changes.
    await put(a, '---\ntags: [x, z]\ntitle: Alpha\n---\n# Alpha\n\n[[d]] first, then [[b]].\n');
    expect(await backlinks('dr/b.md')).toEqual([a]);
    expect(await backlinks('dr/d.md')).toEqual([a]);
    const e = 'dr/e.md';
    expect((await c.post('/api/v1/nodes', { path: e, content: '# E\n\npage [[Alpha]]\n' })).status).toBe(201);
    expect(await backlinks(a)).toEqual([e]);
    // The old title is no name of it any more.
    await put(e, '# E\n\npage [[A page]]\n');
    expect(await backlinks(a)).toEqual([]);

    // Many links at once (past the row-by-row limit), then back to none.
    const many = Array.from({ length: 30 }, (_, i) => `[[n${i}]]`).join(' ');
    await put(a, `---\ntags: [x]\n---\n# Alpha\n\n${many} [[b]]\n`);
    expect(await backlinks('dr/b.md')).toEqual([a]);
    expect(await backlinks('dr/d.md')).toEqual([]);
    await put(a, '# Alpha\n\nno links\n');
    expect(await backlinks('dr/b.md')).toEqual([]);
    expect(await tagged('x')).toEqual([]);
    const related = await c.get(`/api/v1/nodes/${encodeURIComponent(a)}/related`);
    expect(related.body.links).toEqual([]);
  });

  // PostgreSQL reads the pages a batch's links name in the index's own statement, which cannot
  // see the names it inserts: the batch's own names are added to what it read (indexer.ts).
  it('pages imported in one batch link to each other by name: every link reaches its page', async () => {
    const job = await postJson(owner, 'ring', [
      { path: 'one.md', content: '# One\n\npage to [[Two]] and [[three]]\n' },
      { path: 'two.md', content: '# Two\n\npage to [[three]]\n' },
      { path: 'three.md', content: '# Three\n\npage to [[One]]\n' },
    ]);
    expect(job.status, JSON.stringify(job.body)).toBe(200);
    await finished(owner, job.body);
    expect(await backlinks('ring/one.md')).toEqual(['ring/three.md']);
    expect(await backlinks('ring/two.md')).toEqual(['ring/one.md']);
    expect(await backlinks('ring/three.md')).toEqual(['ring/one.md', 'ring/two.md']);
    // A page's own links as stored (related's `links` follow the stored target, not the name).
    const linked = async (path: string) =>
      ((await c.get(`/api/v1/nodes/${encodeURIComponent(path)}/related`)).body.links as { path: string }[]).map((l) => l.path).sort();
    expect(await linked('ring/one.md')).toEqual(['ring/three.md', 'ring/two.md']);
    expect(await linked('ring/two.md')).toEqual(['ring/three.md']);
    expect(await linked('ring/three.md')).toEqual(['ring/one.md']);
    // A link written before its page existed reaches the page once it is created.
    expect((await c.post('/api/v1/nodes', { path: 'ring/early.md', content: '# Early\n\npage to [[Later]]\n' })).status).toBe(201);
    expect(await linked('ring/early.md')).toEqual([]);
    expect((await c.post('/api/v1/nodes', { path: 'ring/later.md', content: '# Later\n\npage\n' })).status).toBe(201);
    expect(await linked('ring/early.md')).toEqual(['ring/later.md']);
  });
});
