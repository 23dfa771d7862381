import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { testEngines } from '../support/engines.js';
import { Client, joinAs, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { call } from '../mcp/support.js';
import { MemoryProvider, newMcpClient, oauthTransport } from './support.js';

/**
 * The authorization matrix of `oa_` tokens (issue 14): a token bound to each resource × every
 * face it might be presented to, and the dead tokens (expired, revoked, pre-lockdown, a removed
 * member) everywhere. Then the spec's tools for an OAuth person at each role: what the role
 * allows, never more.
 */

async function obtain(base: string, person: Client, path: string, workspace?: string): Promise<string> {
  const provider = new MemoryProvider();
  await expect(newMcpClient().connect(oauthTransport(base, provider, path))).rejects.toBeInstanceOf(UnauthorizedError);
  const url = provider.authorizationUrl!;
  const page = await person.get(url.pathname + url.search, { accept: 'application/json' });
  expect(page.status, page.text).toBe(200);
  const fields = { ...page.body.answer.fields, ...(workspace && page.body.answer.fields.workspace ? { workspace } : {}) };
  const res = await person.post('/oauth/authorize', { ...fields, decision: 'approve' }, { accept: 'application/json' });
  expect(res.status, res.text).toBe(200);
  await oauthTransport(base, provider, path).finishAuth(new URL(res.body.redirect_to).searchParams.get('code')!);
  return provider.saved!.access_token;
}

describe.each(testEngines())('oa_ tokens: authorization matrix (%s)', (engine) => {
  let s: TestServer;
  let base: string;
  let a: Awaited<ReturnType<typeof signupHuman>>;
  let b: Awaited<ReturnType<typeof signupHuman>>;

  beforeAll(async () => {
    s = await startTestServer(engine);
    base = s.url;
    a = await signupHuman(base, 'Alma');
    b = await signupHuman(base, 'Bert');
  });
  afterAll(async () => s?.stop());

  /** Where a token may be presented, and how each place answers (status of a harmless request). */
  const places = () => ({
    '/mcp': (t: string) => mcpStatus('/mcp', t),
    '/w/A/mcp': (t: string) => mcpStatus(`/w/${a.workspace.slug}/mcp`, t),
    '/w/B/mcp': (t: string) => mcpStatus(`/w/${b.workspace.slug}/mcp`, t),
    '/w/unknown/mcp': (t: string) => mcpStatus('/w/no-such-ws/mcp', t),
    'GET /api/v1/me': (t: string) => rest('GET', '/api/v1/me', t),
    'GET /api/v1/spaces': (t: string) => rest('GET', '/api/v1/spaces', t),
    'POST /api/v1/nodes': (t: string) => rest('POST', '/api/v1/nodes', t, { path: 'x/y.md', content: '# y' }),
    'GET /api/v1/me/oauth-clients': (t: string) => rest('GET', '/api/v1/me/oauth-clients', t),
    'GET /api/auth/me': (t: string) => rest('GET', '/api/auth/me', t),
  });

  async function mcpStatus(path: string, token: string): Promise<number> {
    const res = await fetch(base + path, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    return res.status;
  }

  async function rest(method: string, path: string, token: string, json?: unknown): Promise<number> {
    const res = await new Client(base, token).request(method, path, { json });
    return res.status;
  }

  it('a token bound to /mcp or /w/<slug>/mcp works where it is bound, 401 everywhere else', async () => {
    const rootToken = await obtain(base, a.client, '/mcp');
    const pinnedToken = await obtain(base, a.client, `/w/${a.workspace.slug}/mcp`);
    const want: Record<string, [number, number]> = {
      '/mcp': [200, 401],
      '/w/A/mcp': [200, 200],
      '/w/B/mcp': [401, 401],
      '/w/unknown/mcp': [401, 401],
      'GET /api/v1/me': [401, 401],
      'GET /api/v1/spaces': [401, 401],
      'POST /api/v1/nodes': [401, 401],
      'GET /api/v1/me/oauth-clients': [401, 401],
      'GET /api/auth/me': [401, 401],
    };
    const got: Record<string, [number, number]> = {};
    for (const [place, ask] of Object.entries(places())) got[place] = [await ask(rootToken), await ask(pinnedToken)];
    expect(got).toEqual(want);
  });

  it('dead tokens are 401 everywhere: expired, revoked, after lockdown, after removal', async () => {
    const ws = await signupHuman(base, 'Dora');
    const ed = await joinAs(ws.client, ws.workspace.slug, 'editor', 'Egon');
    const expired = await obtain(base, ws.client, '/mcp');
    await s.ctx.store.db
      .updateTable('oauth_tokens')
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where('kind', '=', 'access')
      .where('revoked_at', 'is', null)
      .where('grant_id', 'in', (eb) => eb.selectFrom('oauth_grants').select('id').where('principal_id', '=', ws.id))
      .execute();
    const revoked = await obtain(base, ws.client, '/mcp');
    const list = await ws.client.get('/api/v1/me/oauth-clients');
    for (const c of list.body.clients) await ws.client.delete(`/api/v1/me/oauth-clients/${c.id}`);
    const removed = await obtain(base, ed.client, '/mcp', ws.workspace.slug);
    expect(await mcpStatus('/mcp', removed)).toBe(200);
    expect((await ws.client.delete(`/api/v1/workspaces/${ws.workspace.slug}/members/${ed.id}`)).status).toBe(200);
    const locked = await obtain(base, ws.client, `/w/${ws.workspace.slug}/mcp`);
    expect(await mcpStatus(`/w/${ws.workspace.slug}/mcp`, locked)).toBe(200);
    expect((await ws.client.post('/api/auth/stepup', { password: 'correct horse battery' })).status).toBe(200);
    expect((await ws.client.post(`/api/v1/workspaces/${ws.workspace.slug}/lockdown`)).status).toBe(200);
    for (const [name, token] of Object.entries({ expired, revoked, removed, locked, forged: 'oa_' + 'A'.repeat(43), truncated: locked.slice(0, -2) })) {
      for (const path of ['/mcp', `/w/${ws.workspace.slug}/mcp`]) expect(await mcpStatus(path, token), `${name} ${path}`).toBe(401);
    }
  });

  it('the spec tools for an OAuth person follow their role: editor writes, viewer only reads', async () => {
    const ed = await joinAs(a.client, a.workspace.slug, 'editor', 'Enid');
    const vi = await joinAs(a.client, a.workspace.slug, 'viewer', 'Vito');
    const edToken = await obtain(base, ed.client, `/w/${a.workspace.slug}/mcp`);
    const mcp = newMcpClient();
    const provider = new MemoryProvider();
    provider.saved = { access_token: edToken, token_type: 'Bearer' };
    await mcp.connect(oauthTransport(base, provider, `/w/${a.workspace.slug}/mcp`));
    expect((await call(mcp, 'context_write', { path: 'team/plan.md', content: '# Plan\n\nby Enid' })).isError).toBe(false);
    const page = (await call(mcp, 'context_get', { path: 'team/plan.md' })).json;
    expect(page.path).toBe('team/plan.md');
    expect((await call(mcp, 'context_search', { query: 'plan' })).isError).toBe(false);
    // The editor becomes a viewer: the same token now reads only.
    expect((await a.client.patch(`/api/v1/workspaces/${a.workspace.slug}/members/${ed.id}`, { role: 'viewer' })).status).toBe(200);
    const w = await call(mcp, 'context_write', { path: 'team/plan.md', content: '# Plan\n\nchanged' });
    expect(w.isError).toBe(true);
    expect(w.text).toMatch(/^forbidden: /);
    expect((await call(mcp, 'context_get', { path: 'team/plan.md' })).isError).toBe(false);
    await mcp.close();
    // A viewer never gets a token at all (consent is for owners and editors).
    const provider2 = new MemoryProvider();
    await expect(newMcpClient().connect(oauthTransport(base, provider2, `/w/${a.workspace.slug}/mcp`))).rejects.toBeInstanceOf(UnauthorizedError);
    const url = provider2.authorizationUrl!;
    const consent = await vi.client.get(url.pathname + url.search, { accept: 'application/json' });
    expect(consent.body.can_consent).toBe(false);
  });
});
