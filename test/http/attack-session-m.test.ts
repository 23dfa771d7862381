import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server.js';
import { testEngines } from '../support/engines.js';
import {
  Client,
  createAgentWithKey,
  createReaderAgent,
  joinAs,
  onNode,
  signupHuman,
  startServerOn,
  startTestServer,
  type TestServer,
} from '../support/server.js';
import { browse } from '../support/web.js';
import { MCP_ACCEPT, rawMcp, type RawAnswer } from '../mcp/support.js';

/**
 * Attack session M: what the read cache, the kept agent keys, the JSON splice, the leased rate
 * limits and the pooled MCP servers (commits 3c476fc, fff1200) let a caller observe.
 */

const PASSWORD = 'correct horse battery';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let seq = 0;
const uniq = (p: string) => `${p}${++seq}${Date.now().toString(36)}`;

/** One raw POST to an MCP endpoint. */
function mcpPost(base: string, key: string, body: unknown, path = '/mcp'): Promise<RawAnswer> {
  return rawMcp(base, path, { token: key, body: typeof body === 'string' ? body : JSON.stringify(body) });
}

const toolCall = (id: unknown, name: string, args: Record<string, unknown> = {}) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name, arguments: args },
});

async function newPage(c: Client, path: string, content: string): Promise<{ id: string; content_hash: string; path: string }> {
  const r = await c.post('/api/v1/nodes', { path, content });
  expect(r.status, r.text).toBe(201);
  return r.body;
}

/** The text of a tools/call result's one item, parsed when JSON. */
function resultText(m: any): { isError: boolean; text: string; json: any } {
  const text = m.result.content[0].text as string;
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { isError: m.result.isError === true, text, json };
}

/** A JSON-RPC message with every read time (which differs between two reads) blanked. */
const untimed = (m: unknown): unknown => JSON.parse(JSON.stringify(m).replace(/(last_touched_at\\*"\s*:\s*\\*")[0-9T:.Z-]+/g, '$1T'));

describe.each(testEngines())('kept reads stay exact under attack (%s)', (engine) => {
  let a: TestServer;
  let b: RunningServer;
  let owner: Client;
  let ownerB: Client;
  let slug: string;

  beforeAll(async () => {
    a = await startTestServer(engine);
    b = await startServerOn(a.ctx.config);
    const o = await signupHuman(a.url, 'Keeper');
    owner = o.client;
    slug = o.workspace.slug;
    expect((await owner.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
    ownerB = onNode(b.url, owner);
  }, 60_000);
  afterAll(async () => {
    await b?.close();
    await a?.stop();
  });

  it('a page moved away (on the other node) and another created at its old path: a kept path read answers the new page', async () => {
    const dir = uniq('mv');
    const old = await newPage(owner, `${dir}/spot.md`, '# Old\n\nold words\n');
    const reader = await createReaderAgent(owner, 'internal');
    for (const ref of [`${dir}/spot.md`, `/${dir}/spot.md`]) {
      for (let i = 0; i < 2; i++) expect((await reader.client.get(`/api/v1/nodes/${encodeURIComponent(ref)}`)).body.content).toContain('old words');
    }
    expect((await ownerB.post(`/api/v1/nodes/${old.id}/move`, { to: `${dir}/elsewhere.md` })).status).toBe(200);
    for (const ref of [`${dir}/spot.md`, `/${dir}/spot.md`]) expect((await reader.client.get(`/api/v1/nodes/${encodeURIComponent(ref)}`)).status).toBe(404);
    const fresh = await newPage(ownerB, `${dir}/spot.md`, '# New\n\nnew words\n');
    for (const ref of [`${dir}/spot.md`, `/${dir}/spot.md`]) {
      const r = await reader.client.get(`/api/v1/nodes/${encodeURIComponent(ref)}`);
      expect(r.body.id).toBe(fresh.id);
      expect(r.body.content).toContain('new words');
    }
    const moved = await reader.client.get(`/api/v1/nodes/${old.id}`);
    expect(moved.body.path).toBe(`${dir}/elsewhere.md`);
  });

  it('archive, restore and delete are seen at once by kept reads, on this node and the other', async () => {
    const p = await newPage(owner, `${uniq('arc')}/p.md`, '# A\n\nwords\n');
    const reader = await createReaderAgent(owner, 'internal');
    const onB = new Client(b.url, reader.key);
    const state = async (c: Client) => (await c.get(`/api/v1/nodes/${p.id}`)).body.state;
    expect(await state(reader.client)).toBe('active');
    expect(await state(onB)).toBe('active');
    expect((await ownerB.post(`/api/v1/nodes/${p.id}/archive`, { reason: 'superseded' })).status).toBe(200);
    expect(await state(reader.client)).toBe('archived');
    expect((await owner.post(`/api/v1/nodes/${p.id}/restore`)).status).toBe(200);
    expect(await state(onB)).toBe('active');
    expect(await state(reader.client)).toBe('active');
    expect((await ownerB.delete(`/api/v1/nodes/${p.id}`)).status).toBe(200);
    expect((await reader.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(404);
    expect((await reader.client.get(`/api/v1/nodes/${encodeURIComponent(p.path)}?format=md`)).status).toBe(404);
  });

  it('a block raised above the reader, and the page raised and lowered, change the very next read (whole, section, md)', async () => {
    const p = await newPage(owner, `${uniq('blk')}/p.md`, '---\nsensitivity: internal\n---\n# B\n\n## Part\n\nshared line\n');
    const reader = await createReaderAgent(owner, 'internal');
    const get = (q = '') => reader.client.get(`/api/v1/nodes/${p.id}${q}`);
    for (let i = 0; i < 2; i++) {
      expect((await get()).body.redacted).toBe(false);
      expect((await get('?section=Part')).body.section).toContain('shared line');
      expect((await get('?format=md')).text).toContain('shared line');
    }
    const raised = '---\nsensitivity: internal\n---\n# B\n\n## Part\n\nshared line\n\n::: confidential\nhidden line\n:::\n';
    expect((await owner.put(`/api/v1/nodes/${p.id}`, { content: raised })).status).toBe(200);
    const whole = await get();
    expect(whole.body.redacted).toBe(true);
    expect(whole.text).not.toContain('hidden line');
    expect((await get('?section=Part')).text).not.toContain('hidden line');
    expect((await get('?format=md')).text).not.toContain('hidden line');
    expect((await ownerB.put(`/api/v1/nodes/${p.id}`, { content: raised.replace('sensitivity: internal', 'sensitivity: confidential') })).status).toBe(200);
    expect((await get()).status).toBe(404);
    expect((await get('?section=Part')).status).toBe(404);
    expect((await owner.put(`/api/v1/nodes/${p.id}`, { content: '# B\n\n## Part\n\nplain again\n' })).status).toBe(200);
    expect((await get('?format=md')).text).toContain('plain again');
  });

  it('a key minted below its agent’s ceiling never gets the agent’s other key’s view, in either order, over REST and MCP', async () => {
    const p = await newPage(owner, `${uniq('kc')}/p.md`, '---\nsensitivity: internal\n---\n# K\n\nopen\n\n::: confidential\nconf words\n:::\n');
    const high = await createReaderAgent(owner, 'confidential');
    const minted = await owner.post(`/api/v1/principals/${high.id}/tokens`, { name: 'low', ceiling: 'internal' });
    expect(minted.status, minted.text).toBe(201);
    const low = new Client(a.url, minted.body.key);
    for (let i = 0; i < 4; i++) {
      // Whoever reads first fills what is kept; the other must still get its own view.
      const url = `/api/v1/nodes/${p.id}`;
      let h, l;
      if (i % 2 === 0) {
        h = await high.client.get(url);
        l = await low.get(url);
      } else {
        l = await low.get(url);
        h = await high.client.get(url);
      }
      expect(h.text).toContain('conf words');
      expect(l.text).not.toContain('conf words');
      expect(l.body.redacted).toBe(true);
      const ml = await mcpPost(a.url, minted.body.key, toolCall(1, 'context_get', { id: p.id }));
      expect(ml.text).not.toContain('conf words');
      const mh = await mcpPost(a.url, high.key, toolCall(1, 'context_get', { id: p.id }));
      expect(mh.text).toContain('conf words');
    }
  });

  it('two agents alike but for the scope of their read grant: the kept read of one is never the other’s', async () => {
    const space = uniq('sc');
    const p = await newPage(owner, `${space}/p.md`, '# S\n\nscoped words\n');
    const inside = await createReaderAgent(owner, 'internal', space);
    const outside = await createReaderAgent(owner, 'internal', `${space}x`);
    for (let i = 0; i < 2; i++) {
      expect((await inside.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(200);
      expect((await outside.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(404);
      expect((await outside.client.get(`/api/v1/nodes/${encodeURIComponent(p.path)}`)).status).toBe(404);
      expect((await mcpPost(a.url, outside.key, toolCall(1, 'fetch', { id: p.id }))).text).not.toContain('scoped words');
    }
  });

  it('grants lowered or moved on this node, and the agent deleted on the other: the next kept read follows', async () => {
    const space = uniq('gr');
    const p = await newPage(owner, `${space}/p.md`, '---\nsensitivity: internal\n---\n# G\n\nopen\n\n::: confidential\nconf words\n:::\n');
    const agent = await createReaderAgent(owner, 'confidential');
    for (let i = 0; i < 2; i++) expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).text).toContain('conf words');
    const lower = await owner.put(`/api/v1/principals/${agent.id}/grants`, { grants: [{ action: 'read', scope: '*', ceiling: 'internal' }] });
    expect(lower.status, lower.text).toBe(200);
    const l = await agent.client.get(`/api/v1/nodes/${p.id}`);
    expect(l.status).toBe(200);
    expect(l.text).not.toContain('conf words');
    const moved = await owner.put(`/api/v1/principals/${agent.id}/grants`, { grants: [{ action: 'read', scope: `${space}x`, ceiling: 'confidential' }] });
    expect(moved.status, moved.text).toBe(200);
    expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(404);
    expect((await ownerB.delete(`/api/v1/principals/${agent.id}`)).status).toBe(200);
    const gone = await agent.client.get(`/api/v1/nodes/${p.id}`);
    expect(gone.status).toBe(401);
    expect((await mcpPost(a.url, agent.key, toolCall(1, 'context_whoami'))).status).toBe(401);
  });

  it('the creator demoted on the other node caps the agent’s next kept read here; removed, the agent is refused', async () => {
    const editor = await joinAs(owner, slug, 'editor', uniq('Ed'));
    const p = await newPage(owner, `${uniq('cr')}/p.md`, '---\nsensitivity: confidential\n---\n# C\n\nconfidential words\n');
    const agent = await createReaderAgent(editor.client, 'confidential');
    for (let i = 0; i < 2; i++) expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(200);
    const demote = await ownerB.patch(`/api/v1/workspaces/${slug}/members/${editor.id}`, { role: 'viewer' });
    expect(demote.status, demote.text).toBe(200);
    expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(404);
    expect((await ownerB.delete(`/api/v1/workspaces/${slug}/members/${editor.id}`)).status).toBe(200);
    expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(401);
  });

  it('an elevation granted on the other node opens a secret page here at once; a revoked key is refused at once', async () => {
    const p = await newPage(owner, `${uniq('el')}/p.md`, '---\nsensitivity: secret\n---\n# E\n\nsecret words\n');
    const agent = await createReaderAgent(owner, 'confidential');
    for (let i = 0; i < 2; i++) expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(404);
    const el = await ownerB.post('/api/v1/elevations', { agent_id: agent.id, minutes: 1, reason: 'attack m' });
    expect(el.status, el.text).toBe(201);
    const opened = await agent.client.get(`/api/v1/nodes/${p.id}`);
    expect(opened.status).toBe(200);
    expect(opened.text).toContain('secret words');
    // Another agent with the very same grants, not elevated, still sees nothing.
    const twin = await createReaderAgent(owner, 'confidential');
    expect((await twin.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(404);
    expect((await owner.delete(`/api/v1/principals/${agent.id}/tokens/${agent.keyId}`)).status).toBe(200);
    expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(401);
  });

  it('people of different roles, read after read in turns, each get their own view', async () => {
    const viewer = await joinAs(owner, slug, 'viewer', uniq('Vi'));
    const editor = await joinAs(owner, slug, 'editor', uniq('Ed'));
    const p = await newPage(
      owner,
      `${uniq('hm')}/p.md`,
      '---\nsensitivity: internal\n---\n# H\n\nopen\n\n::: confidential\nconf words\n:::\n\n::: secret\nsecret words\n:::\n',
    );
    const conf = await newPage(owner, `${uniq('hm')}/c.md`, '---\nsensitivity: confidential\n---\n# C\n\nconf page\n');
    for (let i = 0; i < 2; i++) {
      const o = await owner.get(`/api/v1/nodes/${p.id}`);
      const e = await editor.client.get(`/api/v1/nodes/${p.id}`);
      const v = await viewer.client.get(`/api/v1/nodes/${p.id}`);
      expect(o.text).toContain('secret words');
      expect(e.text).toContain('conf words');
      expect(e.text).not.toContain('secret words');
      expect(v.text).not.toContain('conf words');
      expect((await editor.client.get(`/api/v1/nodes/${conf.id}`)).status).toBe(200);
      expect((await viewer.client.get(`/api/v1/nodes/${conf.id}`)).status).toBe(404);
    }
  });

  it('MCP context_get, fetch and a section read answer a page edited on the other node a moment ago', async () => {
    const p = await newPage(owner, `${uniq('mc')}/p.md`, '# M\n\n## Sec\n\nfirst text\n');
    const agent = await createReaderAgent(owner, 'internal');
    const read = async () => {
      const r = await mcpPost(a.url, agent.key, [
        toolCall(1, 'context_get', { id: p.id }),
        toolCall(2, 'fetch', { id: p.id }),
        toolCall(3, 'context_get', { path: p.path, section: 'Sec' }),
      ]);
      expect(r.status, r.text).toBe(200);
      return (r.json as any[]).map((m) => resultText(m).text);
    };
    for (let i = 0; i < 2; i++) for (const t of await read()) expect(t).toContain('first text');
    expect((await mcpPost(a.url, agent.key, toolCall(9, 'context_get', { id: p.id }))).text).toContain('first text');
    expect((await ownerB.put(`/api/v1/nodes/${p.id}`, { content: '# M\n\n## Sec\n\nsecond text\n' })).status).toBe(200);
    expect((await mcpPost(a.url, agent.key, toolCall(9, 'context_get', { id: p.id }))).text).toContain('second text');
    for (const t of await read()) expect(t).toContain('second text');
  });

  it('the JSON splice answers what a fresh read would: stand-in times in frontmatter and body, unicode, a large page', async () => {
    const stand = '2000-01-01T00:00:00.000Z';
    const content =
      `---\nlast_touched_at: "${stand}"\nupdated: "1000-01-01T00:00:00.000Z"\ntitle: "Zoë \\u2028 ☃ \\"q\\""\n---\n` +
      `# Splice 🧪\n\n"last_touched_at":"${stand}"\n\n${'ünïcødé line with 1000-01-01T00:00:00.000Z\n'.repeat(4000)}`;
    const p = await newPage(owner, `${uniq('js')}/p.md`, content);
    const agent = await createReaderAgent(owner, 'internal');
    const first = await agent.client.get(`/api/v1/nodes/${p.id}`);
    await sleep(3);
    const second = await agent.client.get(`/api/v1/nodes/${p.id}`);
    expect(first.status).toBe(200);
    expect(second.status).toBe(200);
    expect(second.headers.get('etag')).toBe(first.headers.get('etag'));
    expect(second.body.frontmatter).toEqual(first.body.frontmatter);
    expect(second.body.content).toBe(content);
    expect(second.body.last_touched_at).not.toBe(stand);
    expect(Math.abs(Date.parse(second.body.last_touched_at) - Date.now())).toBeLessThan(10_000);
    const { last_touched_at: t1, ...rest1 } = first.body;
    const { last_touched_at: t2, ...rest2 } = second.body;
    expect(typeof t1).toBe('string');
    expect(typeof t2).toBe('string');
    expect(rest2).toEqual(rest1);
    // The one field spliced is the record's own, not the frontmatter's nor the body's.
    expect(second.text.split(`"last_touched_at":"${t2}"`)).toHaveLength(2);
    const md = await agent.client.get(`/api/v1/nodes/${p.id}?format=md`);
    expect(md.text).toBe(content);
    const mcp = await mcpPost(a.url, agent.key, toolCall(1, 'context_get', { id: p.id }));
    expect(mcp.text).toContain('Splice');
  });

  it('an agent key’s frozen caller and kept records never make a face answer 500 (REST reads and writes, MCP tools)', async () => {
    const space = uniq('fz');
    const p = await newPage(owner, `${space}/p.md`, '---\ntags: [a, b]\n---\n# F\n\n## Sec\n\nbody [[other]]\n');
    const agent = await createAgentWithKey(
      owner,
      ['read', 'write', 'search', 'propose', 'collab'].map((action) => ({ action, ceiling: 'confidential' })),
    );
    const c = agent.client;
    for (let round = 0; round < 2; round++) {
      const answers = [
        await c.get(`/api/v1/nodes/${p.id}`),
        await c.get(`/api/v1/nodes/${p.id}?section=Sec`),
        await c.get(`/api/v1/nodes/${p.id}/history`),
        await c.get(`/api/v1/nodes/${p.id}/backlinks`),
        await c.get(`/api/v1/nodes/${p.id}/threads`),
        await c.get(`/api/v1/search?q=body`),
        await c.get(`/api/v1/bundle?q=body`),
        await c.get('/api/v1/me'),
        await c.get('/api/v1/inbox'),
        await c.post(`/api/v1/nodes/${p.id}/threads`, { body: `round ${round}`, kind: 'comment' }),
        await c.patch(`/api/v1/nodes/${p.id}`, { content: `---\ntags: [a, b]\n---\n# F\n\n## Sec\n\nbody ${round} [[other]]\n` }),
        await c.post(`/api/v1/nodes/${p.id}/append`, { content: `\nmore ${round}\n` }),
        await c.post('/api/v1/nodes', { path: `${space}/n${round}.md`, content: '# N\n\nnew\n' }),
        await c.get(`/api/v1/nodes/${p.id}`),
      ];
      for (const r of answers) expect(r.status, r.text).toBeLessThan(500);
    }
    const tools: [string, Record<string, unknown>][] = [
      ['context_get', { id: p.id }],
      ['context_get', { path: p.path, section: 'Sec' }],
      ['fetch', { id: p.id }],
      ['context_search', { query: 'body' }],
      ['context_bundle', { query: 'body' }],
      ['context_tree', { path: space }],
      ['context_related', { id: p.id }],
      ['context_whoami', {}],
      ['collab_inbox', {}],
      ['context_log', {}],
      ['search', { query: 'body' }],
      ['context_write', { path: `${space}/w.md`, content: '# W\n\nw\n' }],
      ['context_propose', { id: p.id, content: '# F\n\nproposed\n', reason: 'test' }],
      ['collab_post', { node: p.id, body: 'hello', kind: 'comment' }],
    ];
    for (let round = 0; round < 2; round++) {
      for (const [name, args] of tools) {
        const r = await mcpPost(a.url, agent.key, toolCall(1, name, args));
        expect(r.status, `${name}: ${r.text}`).toBe(200);
        const out = resultText(r.json);
        expect(out.text, name).not.toMatch(/^internal_error/);
      }
    }
  });

  it('web pages read from kept records answer (page, edit, history), never 500', async () => {
    const p = await newPage(owner, `${uniq('wb')}/p.md`, '---\ntags: [x]\n---\n# W\n\ntext [[elsewhere]]\n');
    const agent = await createReaderAgent(owner, 'internal');
    for (let i = 0; i < 2; i++) {
      expect((await owner.get(`/api/v1/nodes/${p.id}`)).status).toBe(200);
      expect((await agent.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(200);
      for (const url of [`/app/p/${encodeURI(p.path)}`, `/app/e/${encodeURI(p.path)}`, `/app/h/${encodeURI(p.path)}`]) {
        const r = await browse(a, owner, url);
        expect(r.status, `${url}: ${r.text.replace(/[\s\S]*<main[^>]*>/, '').slice(0, 400)}`).toBe(200);
      }
    }
  });
});

describe.each(testEngines())('pooled MCP servers (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url, 'Mowner')).client;
  }, 60_000);
  afterAll(async () => {
    await s?.stop();
  });

  it('found (fixed): a batch with a repeated JSON-RPC id left a call running in a pooled server, whose answer landed in the next caller’s exchange; such a batch is now refused, and nothing of it runs', async () => {
    const page = await newPage(owner, `leak/${uniq('p')}.md`, '# Leak\n\ntext\n');
    const grants = ['read', 'collab'].map((action) => ({ action, ceiling: 'internal' }));
    const alice = await createAgentWithKey(owner, grants, { ceiling: 'internal', name: uniq('alice') });
    const bob = await createAgentWithKey(owner, grants, { ceiling: 'internal', name: uniq('bob') });
    // Alice: two requests with the same id; the quick one answers it, the long-poll stays behind.
    const al = await mcpPost(s.url, alice.key, [toolCall(7, 'collab_inbox', { wait_s: 3 }), toolCall(7, 'context_whoami')]);
    expect(al.status, al.text).toBe(400);
    expect((al.json as any).error.code).toBe(-32600);
    expect((al.json as any).error.message).toMatch(/distinct ids/);
    // Bob, on the same (pooled) server: his own long-poll under id 7, and a quick call.
    const started = Date.now();
    const bobCall = mcpPost(s.url, bob.key, [toolCall(7, 'collab_inbox', { wait_s: 4 }), toolCall(8, 'context_whoami')]);
    await sleep(400);
    // A mention meant for Alice alone.
    const post = await owner.post(`/api/v1/nodes/${page.id}/threads`, {
      body: 'for alice only: the vault code is 4711',
      kind: 'comment',
      mentions: [alice.id],
    });
    expect(post.status, post.text).toBe(201);
    const bo = await bobCall;
    expect(bo.status, bo.text).toBe(200);
    // Bob must get his own (empty) inbox after his own wait; never Alice's events.
    expect(bo.text).not.toContain('4711');
    const seven = (bo.json as any[]).find((m) => m.id === 7);
    expect(resultText(seven).json.events).toEqual([]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(3_500);
  }, 20_000);

  it('a single tools/call (direct) and the same call in a batch (SDK) answer alike: ok, bad arguments, unknown tool, no grant, hidden page', async () => {
    const hidden = await newPage(owner, `par/${uniq('h')}.md`, '---\nsensitivity: confidential\n---\n# H\n\nhidden\n');
    const open = await newPage(owner, `par/${uniq('o')}.md`, '# O\n\nopen words\n');
    const reader = await createReaderAgent(owner, 'internal');
    const cases: [string, Record<string, unknown>][] = [
      ['context_get', { id: open.id }],
      ['context_get', { id: open.id, section: 'Nope' }],
      ['context_get', { id: hidden.id }],
      ['context_get', { id: ['x'], section: 7 }],
      ['context_get', { idd: open.id }],
      ['context_write', { path: 'par/x.md', content: '# X\n' }],
      ['collab_inbox', {}],
      ['no_such_tool', {}],
      ['fetch', { id: hidden.id }],
      ['context_whoami', {}],
    ];
    for (const [name, args] of cases) {
      const one = await mcpPost(s.url, reader.key, toolCall(5, name, args));
      const two = await mcpPost(s.url, reader.key, [toolCall(5, name, args), toolCall(6, 'context_whoami')]);
      const viaMeta = await mcpPost(s.url, reader.key, { jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name, arguments: args, _meta: {} } });
      expect(one.status, one.text).toBe(200);
      expect(two.status, two.text).toBe(200);
      const inBatch = (two.json as any[]).find((m) => m.id === 5);
      expect(untimed(one.json), name).toEqual(untimed(inBatch));
      expect(untimed(viaMeta.json), name).toEqual(untimed(inBatch));
      expect(one.text).not.toContain('hidden');
    }
  });

  it('malformed JSON-RPC is refused the same way whichever path it would take; notifications get 202; initialize only alone', async () => {
    const reader = await createReaderAgent(owner, 'internal');
    const base = toolCall(1, 'context_whoami');
    const bad: unknown[] = [
      { ...base, extra: 1 },
      { ...base, id: 1.5 },
      { ...base, id: null },
      { ...base, id: true },
      { ...base, params: [] },
      { ...base, params: 'x' },
      { ...base, jsonrpc: '1.0' },
      { ...base, method: 5 },
      [{ ...base, extra: 1 }, base],
    ];
    for (const body of bad) {
      const r = await mcpPost(s.url, reader.key, body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.json.error.code).toBe(-32700);
    }
    // Ids of every allowed kind come back as they were sent.
    for (const id of ['x', '', 0, -3, Number.MAX_SAFE_INTEGER, 'ü'.repeat(1000)]) {
      const r = await mcpPost(s.url, reader.key, { ...base, id });
      expect(r.status).toBe(200);
      expect(r.json.id).toEqual(id);
      expect(resultText(r.json).json.id).toBeDefined();
    }
    const note = await mcpPost(s.url, reader.key, { jsonrpc: '2.0', method: 'notifications/initialized' });
    expect(note.status).toBe(202);
    expect(note.text).toBe('');
    const init = {
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
    };
    const twice = await mcpPost(s.url, reader.key, [init, base]);
    expect(twice.status).toBe(400);
    expect(twice.json.error.code).toBe(-32600);
    expect((await mcpPost(s.url, reader.key, init)).status).toBe(200);
    const single = await mcpPost(s.url, reader.key, [base]);
    expect(Array.isArray(single.json)).toBe(true);
  });

  it('a client that hangs up during a long-poll leaves the next callers their own answers', async () => {
    const grants = ['read', 'collab'].map((action) => ({ action, ceiling: 'internal' }));
    const quitter = await createAgentWithKey(owner, grants, { ceiling: 'internal', name: uniq('quitter') });
    const ac = new AbortController();
    const hung = fetch(`${s.url}/mcp`, {
      method: 'POST',
      signal: ac.signal,
      headers: { authorization: `Bearer ${quitter.key}`, 'content-type': 'application/json', accept: MCP_ACCEPT },
      body: JSON.stringify(toolCall(3, 'collab_inbox', { wait_s: 5 })),
    }).catch((e: unknown) => e);
    const hungBatch = fetch(`${s.url}/mcp`, {
      method: 'POST',
      signal: ac.signal,
      headers: { authorization: `Bearer ${quitter.key}`, 'content-type': 'application/json', accept: MCP_ACCEPT },
      body: JSON.stringify([toolCall(3, 'collab_inbox', { wait_s: 5 }), toolCall(4, 'collab_inbox', { wait_s: 5 })]),
    }).catch((e: unknown) => e);
    await sleep(300);
    ac.abort();
    await hung;
    await hungBatch;
    const others = await Promise.all(
      Array.from({ length: 4 }, async () => {
        const ag = await createAgentWithKey(owner, grants, { ceiling: 'internal', name: uniq('next') });
        return { ag, r: await mcpPost(s.url, ag.key, [toolCall(3, 'context_whoami'), toolCall(4, 'collab_inbox', { wait_s: 1 })]) };
      }),
    );
    for (const { ag, r } of others) {
      expect(r.status, r.text).toBe(200);
      expect(resultText((r.json as any[]).find((m) => m.id === 3)).json.id).toBe(ag.id);
    }
    const single = await mcpPost(s.url, quitter.key, toolCall(3, 'context_whoami'));
    expect(resultText(single.json).json.id).toBe(quitter.id);
  }, 20_000);

  it('many callers at once with the same JSON-RPC id, direct and batched, each get their own answer', async () => {
    const agents = await Promise.all(Array.from({ length: 6 }, () => createReaderAgent(owner, 'internal')));
    for (let round = 0; round < 3; round++) {
      const answers = await Promise.all(
        agents.flatMap((ag) => [
          mcpPost(s.url, ag.key, toolCall(1, 'context_whoami')).then((r) => ({ ag, got: [r.json] })),
          mcpPost(s.url, ag.key, [toolCall(1, 'context_whoami'), toolCall(2, 'context_whoami')]).then((r) => ({ ag, got: r.json as any[] })),
        ]),
      );
      for (const { ag, got } of answers) for (const m of got) expect(resultText(m).json.id).toBe(ag.id);
    }
  });
});

describe.each(testEngines())('leased rate limits (%s)', (engine) => {
  let s: TestServer;
  let limited: RunningServer;
  let other: RunningServer;

  beforeAll(async () => {
    s = await startTestServer(engine);
    const env = { RATE_LIMITS: 'on', RATE_LIMIT_API_PER_MIN: '1', RATE_LIMIT_API_BURST: '1000', RATE_LIMIT_LOGIN_PER_MIN: '1000' };
    limited = await startServerOn(s.ctx.config, env);
    other = await startServerOn(s.ctx.config, env);
  }, 60_000);
  afterAll(async () => {
    await limited?.close();
    await other?.close();
    await s?.stop();
  });

  it('found: one MCP batch of 100 calls spends nearly the whole shared bucket of 1000 (concurrent leases overwrite each other)', async () => {
    const human = (await signupHuman(limited.url, 'Burst')).client;
    const agent = await createReaderAgent(human, 'internal');
    const here = new Client(limited.url, agent.key);
    expect((await here.get('/api/v1/me')).status).toBe(200);
    const batch = await mcpPost(
      limited.url,
      agent.key,
      Array.from({ length: 100 }, (_, i) => toolCall(i + 1, 'context_whoami')),
    );
    expect(batch.status, batch.text).toBe(200);
    for (const m of batch.json as any[]) expect(resultText(m).isError).toBe(false);
    // Another node holds no lease: its first hit reads the shared bucket itself.
    const there = await new Client(other.url, agent.key).get('/api/v1/me');
    expect(there.status).toBe(200);
    // 102 requests so far, and at most one lease (≤ 64) held unused by the first node.
    expect(Number(there.headers.get('ratelimit-remaining'))).toBeGreaterThanOrEqual(1000 - 102 - 64 - 2);
  });

  it('concurrent bursts on two nodes never pass more than the bucket, and every refusal says when to retry', async () => {
    const env = { RATE_LIMITS: 'on', RATE_LIMIT_API_PER_MIN: '1', RATE_LIMIT_API_BURST: '120', RATE_LIMIT_LOGIN_PER_MIN: '1000' };
    const one = await startServerOn(s.ctx.config, env);
    const two = await startServerOn(s.ctx.config, env);
    try {
      const human = (await signupHuman(one.url, 'Twin')).client;
      const agent = await createReaderAgent(human, 'internal');
      const clients = [new Client(one.url, agent.key), new Client(two.url, agent.key)];
      const all = await Promise.all(Array.from({ length: 200 }, (_, i) => clients[i % 2]!.get('/api/v1/me')));
      let allowed = 0;
      for (const r of all) {
        const left = r.headers.get('ratelimit-remaining');
        expect(left).toMatch(/^\d+$/);
        if (r.status === 200) allowed++;
        else {
          expect(r.status).toBe(429);
          expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
          expect(Number(left)).toBe(0);
        }
      }
      expect(allowed).toBeLessThanOrEqual(121);
      // A batch whose further calls run past the bucket: those calls are refused as tool errors.
      const batch = await mcpPost(one.url, agent.key, [toolCall(1, 'context_whoami'), toolCall(2, 'context_whoami')]);
      expect([200, 429]).toContain(batch.status);
    } finally {
      await one.close();
      await two.close();
    }
  });
});

describe('kept reads: the key of what is kept (sqlite)', () => {
  let s: TestServer;
  let owner: Client;

  beforeAll(async () => {
    s = await startTestServer('sqlite');
    owner = (await signupHuman(s.url, 'Kowner')).client;
  }, 60_000);
  afterAll(async () => {
    await s?.stop();
  });

  it('found: ?section=%00 after a whole-page read answers the whole page instead of section_not_found', async () => {
    const p = await newPage(owner, `sec/${uniq('p')}.md`, '# Title\n\nintro\n\n## Part\n\npart text\n');
    const reader = await createReaderAgent(owner, 'internal');
    // Nothing kept for it yet: a section named NUL does not exist.
    const fresh = await reader.client.get(`/api/v1/nodes/${p.id}?section=%00`);
    expect(fresh.status, fresh.text).toBe(404);
    expect(fresh.body.code).toBe('section_not_found');
    // The whole page is read (and kept); the same question again must get the same answer.
    expect((await reader.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(200);
    const kept = await reader.client.get(`/api/v1/nodes/${p.id}?section=%00`);
    expect(kept.status, kept.text).toBe(404);
    expect(kept.body.code).toBe('section_not_found');
  });
});
