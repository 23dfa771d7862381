import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, createReaderAgent, onNode, signupHuman, startServerOn, startTestServer, type TestServer } from '../support/server.js';

/**
 * Attack session M: what the read cache, the kept agent keys, the JSON splice, the leased rate
 * limits and the pooled MCP servers (commits 3c476fc, fff1200) let a caller observe.
 */

const PASSWORD = 'correct horse battery';
const ACCEPT = 'application/json, text/event-stream';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let seq = 0;
const uniq = (p: string) => `${p}${++seq}${Date.now().toString(36)}`;

interface Rpc {
  status: number;
  text: string;
  json: any;
}

/** One raw POST to an MCP endpoint. */
async function mcpPost(base: string, key: string, body: unknown, path = '/mcp'): Promise<Rpc> {
  const res = await fetch(base + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', accept: ACCEPT },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, text, json };
}

const toolCall = (id: unknown, name: string, args: Record<string, unknown> = {}) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });

async function newPage(c: Client, path: string, content: string): Promise<{ id: string; content_hash: string; path: string }> {
  const r = await c.post('/api/v1/nodes', { path, content });
  expect(r.status, r.text).toBe(201);
  return r.body;
}

describe('pooled MCP servers (sqlite)', () => {
  let s: TestServer;
  let owner: Client;

  beforeAll(async () => {
    s = await startTestServer('sqlite');
    owner = (await signupHuman(s.url, 'Mowner')).client;
  }, 60_000);
  afterAll(async () => {
    await s?.stop();
  });

  it('found: a batch with a repeated JSON-RPC id leaves a call running in a pooled server, whose answer lands in the next caller’s exchange', async () => {
    const page = await newPage(owner, `leak/${uniq('p')}.md`, '# Leak\n\ntext\n');
    const grants = ['read', 'collab'].map((action) => ({ action, ceiling: 'internal' }));
    const alice = await createAgentWithKey(owner, grants, { ceiling: 'internal', name: uniq('alice') });
    const bob = await createAgentWithKey(owner, grants, { ceiling: 'internal', name: uniq('bob') });
    // Alice: two requests with the same id; the quick one answers it, the long-poll stays behind.
    const a = await mcpPost(s.url, alice.key, [toolCall(7, 'collab_inbox', { wait_s: 3 }), toolCall(7, 'context_whoami')]);
    expect(a.status, a.text).toBe(200);
    // Bob, on the same (pooled) server: his own long-poll under id 7, and a quick call.
    const started = Date.now();
    const bobCall = mcpPost(s.url, bob.key, [toolCall(7, 'collab_inbox', { wait_s: 5 }), toolCall(8, 'context_whoami')]);
    await sleep(400);
    // A mention meant for Alice alone.
    const post = await owner.post(`/api/v1/nodes/${page.id}/threads`, { body: 'for alice only: the vault code is 4711', kind: 'comment', mentions: [alice.id] });
    expect(post.status, post.text).toBe(201);
    const b = await bobCall;
    expect(b.status, b.text).toBe(200);
    const seven = (b.json as any[]).find((m) => m.id === 7);
    // Bob must get his own (empty) inbox after his own wait; never Alice's events.
    expect(b.text).not.toContain('4711');
    expect(JSON.parse(seven.result.content[0].text).events).toEqual([]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(4_500);
  }, 20_000);
});

describe('kept reads (sqlite)', () => {
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
    // Fresh (nothing kept for this key): a section named NUL does not exist.
    const fresh = await reader.client.get(`/api/v1/nodes/${p.id}?section=%00`);
    expect(fresh.status, fresh.text).toBe(404);
    expect((await reader.client.get(`/api/v1/nodes/${p.id}`)).status).toBe(200);
    const kept = await reader.client.get(`/api/v1/nodes/${p.id}?section=%00`);
    expect(kept.status, kept.text).toBe(fresh.status);
    expect(kept.body.code).toBe(fresh.body.code);
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

  it('found: a burst of concurrent requests on one node spends far more of the shared bucket than it was allowed', async () => {
    const human = (await signupHuman(limited.url, 'Burst')).client;
    const agent = await createReaderAgent(human, 'internal');
    const here = new Client(limited.url, agent.key);
    expect((await here.get('/api/v1/me')).status).toBe(200);
    const burst = await Promise.all(Array.from({ length: 30 }, () => here.get('/api/v1/me')));
    expect(burst.every((r) => r.status === 200)).toBe(true);
    // Another node has no lease: its first hit reads the shared bucket itself.
    const there = await new Client(other.url, agent.key).get('/api/v1/me');
    expect(there.status).toBe(200);
    const left = Number(there.headers.get("ratelimit-remaining"));
    console.log("LEFT", engine, left, burst.map((r) => r.headers.get("ratelimit-remaining")).join(","));
    // 32 requests so far; at most one lease (≤ 64) held unused by the first node.
    expect(left).toBeGreaterThanOrEqual(1000 - 32 - 64 - 2);
  });
});
