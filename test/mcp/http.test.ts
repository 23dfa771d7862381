import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PASSWORD } from '../support/actors.js';
import { testEngines } from '../support/engines.js';
import { createAgentWithKey, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';
import { call, connectMcp, ok, rawMcp, type RawAnswer } from './support.js';

const PUBLIC = 'https://vault.example.com';

const rpc = (method: string, params?: unknown, id: number | string = 1) =>
  JSON.stringify({ jsonrpc: '2.0', id, method, ...(params !== undefined ? { params } : {}) });

/** A JSON-RPC error body, never the REST one. */
function expectRpcError(r: RawAnswer, status: number, rpcCode?: number, textCode?: string): void {
  expect(r.status, r.text).toBe(status);
  expect(r.json?.jsonrpc, r.text).toBe('2.0');
  expect(typeof r.json?.error?.code, r.text).toBe('number');
  if (rpcCode !== undefined) expect(r.json.error.code, r.text).toBe(rpcCode);
  if (textCode !== undefined) expect(r.json.error.message, r.text).toMatch(new RegExp(`^${textCode}: `));
}

describe.each(testEngines())('MCP over HTTP (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let slug: string;
  let key: string;

  beforeAll(async () => {
    s = await startTestServer(engine, { PUBLIC_URL: PUBLIC });
    const h = await signupHuman(s.url, 'Olive');
    owner = h.client;
    slug = h.workspace.slug;
    key = (await createAgentWithKey(owner, [{ action: 'read' }, { action: 'write' }])).key;
  });
  afterAll(async () => {
    await s?.stop();
  });

  describe('credentials', () => {
    it('no token: 401 pointing at the protected resource metadata (path-aware)', async () => {
      const r = await rawMcp(s.url, '/mcp', { body: rpc('tools/list') });
      expectRpcError(r, 401, -32000, 'unauthorized');
      expect(r.headers.get('www-authenticate')).toBe(`Bearer resource_metadata="${PUBLIC}/.well-known/oauth-protected-resource/mcp"`);
      const w = await rawMcp(s.url, `/w/${slug}/mcp`, { body: rpc('tools/list') });
      expect(w.status).toBe(401);
      expect(w.headers.get('www-authenticate')).toBe(`Bearer resource_metadata="${PUBLIC}/.well-known/oauth-protected-resource/w/${slug}/mcp"`);
      // GET without a token is asked for credentials too.
      expect((await rawMcp(s.url, '/mcp', { method: 'GET' })).headers.get('www-authenticate')).toContain('resource_metadata=');
    });

    it('invalid, revoked, git and OAuth tokens: 401 invalid_token', async () => {
      for (const token of ['ak_nope', 'gt_whatever', 'oa_whatever', 'sk_other']) {
        const r = await rawMcp(s.url, '/mcp', { token, body: rpc('tools/list') });
        expectRpcError(r, 401, -32000, 'invalid_token');
        expect(r.headers.get('www-authenticate')).toMatch(
          /^Bearer error="invalid_token", resource_metadata="https:\/\/vault\.example\.com\/\.well-known\/oauth-protected-resource\/mcp"$/,
        );
      }
      const basic = await rawMcp(s.url, '/mcp', { body: rpc('tools/list'), headers: { authorization: `Basic ${Buffer.from(`x:${key}`).toString('base64')}` } });
      expect(basic.status).toBe(401);
      const a = await createAgentWithKey(owner, [{ action: 'read' }]);
      expect((await rawMcp(s.url, '/mcp', { token: a.key, body: rpc('tools/list') })).status).toBe(200);
      expect((await owner.delete(`/api/v1/principals/${a.id}/tokens/${a.keyId}`)).status).toBe(200);
      expectRpcError(await rawMcp(s.url, '/mcp', { token: a.key, body: rpc('tools/list') }), 401, -32000, 'invalid_token');
    });

    it('a web session is not an MCP credential', async () => {
      const cookie = [...owner.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
      const r = await rawMcp(s.url, '/mcp', { body: rpc('tools/list'), headers: { cookie, 'x-csrf-token': owner.csrf ?? '' } });
      expectRpcError(r, 401, -32000, 'unauthorized');
      expect(r.headers.get('www-authenticate')).toContain('resource_metadata=');
    });

    it('a git token minted by a human is refused on MCP', async () => {
      const h = await signupHuman(s.url, 'Gus');
      expect((await h.client.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
      const gt = await h.client.post('/api/v1/me/git-tokens', { name: 'laptop' });
      expect(gt.status, gt.text).toBe(201);
      const token = gt.body.token ?? gt.body.key ?? gt.body.secret;
      expect(token).toMatch(/^gt_/);
      expectRpcError(await rawMcp(s.url, '/mcp', { token, body: rpc('tools/list') }), 401, -32000, 'invalid_token');
    });

    it('after a lockdown every key is refused', async () => {
      const h = await signupHuman(s.url, 'Lou');
      const a = await createAgentWithKey(h.client, [{ action: 'read' }]);
      expect((await rawMcp(s.url, '/mcp', { token: a.key, body: rpc('tools/list') })).status).toBe(200);
      expect((await h.client.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
      const lock = await h.client.post(`/api/v1/workspaces/${h.workspace.slug}/lockdown`);
      expect(lock.status, lock.text).toBe(200);
      expectRpcError(await rawMcp(s.url, '/mcp', { token: a.key, body: rpc('tools/list') }), 401, -32000, 'invalid_token');
    });

    it('/w/:slug/mcp is pinned to its workspace', async () => {
      const mine = await connectMcp(s.url, key, `/w/${slug}/mcp`);
      expect((await ok(mine, 'context_whoami')).workspace.slug).toBe(slug);
      await mine.close();
      const other = await signupHuman(s.url, 'Otto');
      const r = await rawMcp(s.url, `/w/${other.workspace.slug}/mcp`, { token: key, body: rpc('tools/list') });
      expectRpcError(r, 401, -32000, 'invalid_token');
      expect(r.headers.get('www-authenticate')).toContain(`/.well-known/oauth-protected-resource/w/${other.workspace.slug}/mcp"`);
      // A slug that does not exist answers the same.
      expect((await rawMcp(s.url, '/w/no-such-workspace/mcp', { token: key, body: rpc('tools/list') })).status).toBe(401);
      // The other workspace's own agent gets in there, and only there.
      const theirs = (await createAgentWithKey(other.client, [{ action: 'read' }])).key;
      expect((await rawMcp(s.url, `/w/${other.workspace.slug}/mcp`, { token: theirs, body: rpc('tools/list') })).status).toBe(200);
      expect((await rawMcp(s.url, `/w/${slug}/mcp`, { token: theirs, body: rpc('tools/list') })).status).toBe(401);
    });
  });

  describe('transport', () => {
    it('answers initialize as service-connect 0.1.0, without a session id', async () => {
      const r = await rawMcp(s.url, '/mcp', {
        token: key,
        body: rpc('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'curl', version: '1' } }),
      });
      expect(r.status).toBe(200);
      expect(r.headers.get('content-type')).toMatch(/application\/json/);
      expect(r.headers.get('mcp-session-id')).toBeNull();
      expect(r.json.result.serverInfo).toEqual({ name: 'service-connect', version: '0.1.0' });
      // Issue 13: instructions for the client's model, sent once per session.
      expect(r.json.result.instructions).toContain('load_project_context');
      expect(r.json.result.capabilities).toMatchObject({ tools: {}, resources: {}, prompts: {} });
      const n = await rawMcp(s.url, '/mcp', { token: key, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
      expect(n.status).toBe(202);
    });

    it('GET and DELETE: 405 with Allow: POST (stateless: no stream, no session)', async () => {
      for (const method of ['GET', 'DELETE']) {
        const r = await rawMcp(s.url, '/mcp', { method, token: key });
        expectRpcError(r, 405, -32000, 'method_not_allowed');
        expect(r.headers.get('allow')).toBe('POST');
        expect((await rawMcp(s.url, `/w/${slug}/mcp`, { method, token: key })).status).toBe(405);
      }
    });

    it('answers a batch with an array in order, refuses oversized batches and unknown protocol versions', async () => {
      const batch = JSON.stringify([
        { jsonrpc: '2.0', id: 'a', method: 'tools/list' },
        { jsonrpc: '2.0', method: 'notifications/initialized' },
        { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'context_whoami', arguments: {} } },
      ]);
      const r = await rawMcp(s.url, '/mcp', { token: key, body: batch });
      expect(r.status, r.text).toBe(200);
      expect(r.json.map((m: { id: unknown }) => m.id)).toEqual(['a', 7]);
      expect(r.json[0].result.tools).toHaveLength(16);
      expect(r.json[1].result.isError).toBeFalsy();
      const many = JSON.stringify(Array.from({ length: 101 }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'tools/list' })));
      expectRpcError(await rawMcp(s.url, '/mcp', { token: key, body: many }), 400, -32600);
      expectRpcError(await rawMcp(s.url, '/mcp', { token: key, body: rpc('tools/list'), headers: { 'mcp-protocol-version': '1999-01-01' } }), 400, -32000);
      expect((await rawMcp(s.url, '/mcp', { token: key, body: rpc('tools/list'), headers: { 'mcp-protocol-version': '2025-06-18' } })).status).toBe(200);
      const twoInits = JSON.stringify(
        [1, 2].map((id) => ({
          jsonrpc: '2.0',
          id,
          method: 'initialize',
          params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } },
        })),
      );
      expectRpcError(await rawMcp(s.url, '/mcp', { token: key, body: twoInits }), 400, -32600);
      // Only notifications: accepted, no body.
      const n = await rawMcp(s.url, '/mcp', { token: key, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
      expect(n.status).toBe(202);
      expect(n.text).toBe('');
    });

    it('malformed requests get JSON-RPC errors, never a 500', async () => {
      expectRpcError(await rawMcp(s.url, '/mcp', { token: key, body: '{"jsonrpc": "2.0", "id": 1, "method": ' }), 400, -32700);
      expectRpcError(await rawMcp(s.url, '/mcp', { token: key, body: '' }), 400, -32700);
      expectRpcError(await rawMcp(s.url, '/mcp', { token: key, body: '{"hello": "world"}' }), 400);
      expectRpcError(
        await rawMcp(s.url, '/mcp', { token: key, body: rpc('tools/list'), headers: { 'content-type': 'text/plain' } }),
        415,
        -32000,
        'unsupported_media_type',
      );
      expectRpcError(await rawMcp(s.url, '/mcp', { token: key, body: rpc('tools/list'), headers: { accept: 'text/html' } }), 406);
      expectRpcError(
        await rawMcp(s.url, '/mcp', { token: key, body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"${'a'.repeat(4 * 1024 * 1024)}"}}` }),
        413,
        -32000,
        'payload_too_large',
      );

      const unknownMethod = await rawMcp(s.url, '/mcp', { token: key, body: rpc('no/such/method') });
      expect(unknownMethod.status).toBe(200);
      expect(unknownMethod.json.error.code).toBe(-32601);

      const unknownTool = await rawMcp(s.url, '/mcp', { token: key, body: rpc('tools/call', { name: 'nope', arguments: {} }) });
      expect(unknownTool.status).toBe(200);
      expect(unknownTool.json.error.code).toBe(-32602);

      const badArgs = await rawMcp(s.url, '/mcp', { token: key, body: rpc('tools/call', { name: 'context_get', arguments: { id: ['x'], section: 7 } }) });
      expect(badArgs.status).toBe(200);
      expect(badArgs.json.result.isError).toBe(true);
      expect(badArgs.json.result.content[0].text).toMatch(/^invalid_request: /);

      const argsNotObject = await rawMcp(s.url, '/mcp', { token: key, body: rpc('tools/call', { name: 'context_get', arguments: 'x' }) });
      expect(argsNotObject.status).toBe(200);
      expect(argsNotObject.json.error.code).toBe(-32602);

      const noName = await rawMcp(s.url, '/mcp', { token: key, body: rpc('tools/call', { arguments: {} }) });
      expect(noName.status).toBe(200);
      expect(noName.json.error.code).toBe(-32602);
    });

    it('MCP calls count in the same per-principal bucket as /api/v1', async () => {
      const limited = await startTestServer(engine, { RATE_LIMITS: 'on', RATE_LIMIT_API_BURST: '3', RATE_LIMIT_API_PER_MIN: '1' });
      try {
        const h = await signupHuman(limited.url, 'Rita');
        const a = await createAgentWithKey(h.client, [{ action: 'read' }]);
        expect((await rawMcp(limited.url, '/mcp', { token: a.key, body: rpc('tools/list') })).status).toBe(200);
        expect((await a.client.get('/api/v1/spaces')).status).toBe(200);
        expect((await rawMcp(limited.url, '/mcp', { token: a.key, body: rpc('tools/list') })).status).toBe(200);
        const r = await rawMcp(limited.url, '/mcp', { token: a.key, body: rpc('tools/list') });
        expectRpcError(r, 429, -32000, 'rate_limited');
        expect(Number(r.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
        expect((await a.client.get('/api/v1/spaces')).status).toBe(429);
      } finally {
        await limited.stop();
      }
    });
  });

  it('context_bundle and the prompt spend the bundle bucket shared with /api/v1/bundle', async () => {
    const limited = await startTestServer(engine, { RATE_LIMITS: 'on', RATE_LIMIT_BUNDLE_PER_MIN: '3' });
    try {
      const h = await signupHuman(limited.url, 'Bea');
      const a = await createAgentWithKey(h.client, [{ action: 'read' }, { action: 'write' }]);
      const c = await connectMcp(limited.url, a.key);
      await ok(c, 'context_write', { path: 'eng/b.md', content: '# Bundled\n\nBundle bucket words.\n' });
      expect(await ok(c, 'context_bundle', { intent: 'bundle bucket' })).toContain('Bundled');
      expect((await a.client.get('/api/v1/bundle?intent=bundle')).status).toBe(200);
      await c.getPrompt({ name: 'load_project_context', arguments: { project: 'eng' } });
      // The fourth bundle within the minute, whichever face asks: refused.
      const r = await call(c, 'context_bundle', { intent: 'bundle bucket' });
      expect(r.isError).toBe(true);
      expect(r.text).toMatch(/^rate_limited: /);
      await expect(c.getPrompt({ name: 'load_project_context', arguments: { project: 'eng' } })).rejects.toThrow(/rate_limited/);
      expect((await a.client.get('/api/v1/bundle?intent=bundle')).status).toBe(429);
      // Other tools are not in that bucket.
      expect((await call(c, 'context_tree', {})).isError).toBe(false);
      await c.close();
    } finally {
      await limited.stop();
    }
  });

  it('a tool call over /w/:slug/mcp works end to end with the SDK client', async () => {
    const c = await connectMcp(s.url, key, `/w/${slug}/mcp`);
    const w = await ok(c, 'context_write', { path: 'eng/pinned.md', content: '# Pinned\n' });
    expect((await call(c, 'context_get', { id: w.id })).json.title).toBe('Pinned');
    await c.close();
  });
});
