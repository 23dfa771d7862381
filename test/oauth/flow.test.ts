import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { testEngines } from '../support/engines.js';
import { Client, joinAs, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { call } from '../mcp/support.js';
import { form, MemoryProvider, newMcpClient, oauthTransport, REDIRECT } from './support.js';

/**
 * OAuth 2.1 for MCP clients (issue 14), end to end with the MCP SDK's own client OAuth flow:
 * the 401 from /mcp leads it to the protected resource metadata, the authorization server
 * metadata, dynamic registration, an authorization request with PKCE S256 and `resource`; the
 * person consents (here through the consent endpoint's JSON form; test/oauth/consent-browser
 * drives the HTML form in chromium); the SDK exchanges the code and calls /mcp with its `oa_`
 * token.
 */

interface Person {
  client: Client;
  id: string;
  workspace: { id: string; slug: string };
}

/** The person's answer at the consent endpoint, as their browser would give it; returns the redirect. */
async function consent(person: Client, authorizationUrl: URL, decision: 'approve' | 'deny' = 'approve'): Promise<URL> {
  const page = await person.get(authorizationUrl.pathname + authorizationUrl.search, { accept: 'application/json' });
  expect(page.status, page.text).toBe(200);
  // The person connects the workspace their client works in (a /mcp connection lets them pick).
  const fields = { ...page.body.answer.fields, ...(person.workspace && page.body.answer.fields.workspace ? { workspace: person.workspace } : {}) };
  const res = await person.post('/oauth/authorize', { ...fields, decision }, { accept: 'application/json' });
  expect(res.status, res.text).toBe(200);
  return new URL(res.body.redirect_to);
}

/** Runs the SDK's flow to the end for `person`: answers a connected MCP client and its provider. */
async function connectWithOAuth(base: string, person: Client, path = '/mcp', provider = new MemoryProvider()) {
  const first = newMcpClient();
  await expect(first.connect(oauthTransport(base, provider, path))).rejects.toBeInstanceOf(UnauthorizedError);
  const url = provider.authorizationUrl!;
  expect(url).toBeDefined();
  const back = await consent(person, url);
  expect(back.origin + back.pathname).toBe(REDIRECT);
  expect(back.searchParams.get('state')).toBe('state-123');
  expect(back.searchParams.get('iss')).toBe(base);
  const transport = oauthTransport(base, provider, path);
  await transport.finishAuth(back.searchParams.get('code')!);
  const mcp = newMcpClient();
  await mcp.connect(oauthTransport(base, provider, path));
  return { mcp, provider, code: back.searchParams.get('code')! };
}

async function whoami(mcp: ReturnType<typeof newMcpClient>) {
  const r = await call(mcp, 'context_whoami');
  expect(r.isError, r.text).toBe(false);
  return r.json;
}

describe.each(testEngines())('OAuth 2.1 for MCP clients (%s)', (engine) => {
  let s: TestServer;
  let base: string;
  let owner: Person;

  beforeAll(async () => {
    s = await startTestServer(engine);
    base = s.url;
    owner = await signupHuman(base, 'Olga');
  });
  afterAll(async () => s?.stop());

  describe('discovery', () => {
    it('the 401 from /mcp points at protected resource metadata that names this server', async () => {
      const res = await fetch(`${base}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: '{}',
      });
      expect(res.status).toBe(401);
      const m = /resource_metadata="([^"]+)"/.exec(res.headers.get('www-authenticate') ?? '');
      expect(m?.[1]).toBe(`${base}/.well-known/oauth-protected-resource/mcp`);
      const prm = await (await fetch(m![1]!)).json();
      expect(prm).toMatchObject({ resource: `${base}/mcp`, authorization_servers: [base], scopes_supported: ['mcp'] });
      const root = await (await fetch(`${base}/.well-known/oauth-protected-resource`)).json();
      expect(root.resource).toBe(`${base}/mcp`);
    });

    it('the pinned endpoint points at its own metadata, whose resource is the requested URL', async () => {
      const res = await fetch(`${base}/w/${owner.workspace.slug}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      const m = /resource_metadata="([^"]+)"/.exec(res.headers.get('www-authenticate') ?? '');
      expect(m?.[1]).toBe(`${base}/.well-known/oauth-protected-resource/w/${owner.workspace.slug}/mcp`);
      const prm = await (await fetch(m![1]!)).json();
      expect(prm.resource).toBe(`${base}/w/${owner.workspace.slug}/mcp`);
    });

    it('other paths have no protected resource metadata (404)', async () => {
      for (const p of ['/api/v1', '/mcp/x', '/w/a/b/mcp', '/w//mcp', '/git/x.git', 'mcp/../api']) {
        const res = await fetch(`${base}/.well-known/oauth-protected-resource/${p.replace(/^\//, '')}`);
        expect(res.status, p).toBe(404);
      }
    });

    it('authorization server metadata: RFC 8414, its path-suffixed form and the OpenID alias agree', async () => {
      const a = await (await fetch(`${base}/.well-known/oauth-authorization-server`)).json();
      expect(a).toMatchObject({
        issuer: base,
        authorization_endpoint: `${base}/oauth/authorize`,
        token_endpoint: `${base}/oauth/token`,
        registration_endpoint: `${base}/oauth/register`,
        revocation_endpoint: `${base}/oauth/revoke`,
        code_challenge_methods_supported: ['S256'],
        grant_types_supported: ['authorization_code', 'refresh_token'],
        response_types_supported: ['code'],
      });
      expect(a.token_endpoint_auth_methods_supported).toContain('none');
      for (const p of [
        '/.well-known/openid-configuration',
        '/.well-known/oauth-authorization-server/mcp',
        `/.well-known/oauth-authorization-server/w/${owner.workspace.slug}/mcp`,
      ]) {
        expect(await (await fetch(base + p)).json(), p).toEqual(a);
      }
      expect((await fetch(`${base}/.well-known/oauth-authorization-server/elsewhere`)).status).toBe(404);
    });
  });

  describe('the SDK client flow', () => {
    it('discovers, registers, sends the person to consent, exchanges the code and calls /mcp as the person', async () => {
      const { mcp, provider } = await connectWithOAuth(base, owner.client);
      const url = provider.authorizationUrl!;
      expect(url.searchParams.get('code_challenge_method')).toBe('S256');
      expect(url.searchParams.get('resource')).toBe(`${base}/mcp`);
      expect(provider.saved?.access_token).toMatch(/^oa_/);
      expect(provider.saved?.token_type).toMatch(/bearer/i);
      const me = await whoami(mcp);
      expect(me).toMatchObject({ id: owner.id, kind: 'human', role: 'owner', workspace: { slug: owner.workspace.slug } });
      // The person's own powers: an owner writes.
      const w = await call(mcp, 'context_write', { path: 'notes/oauth.md', content: '# Written over OAuth\n\nby the owner' });
      expect(w.isError, w.text).toBe(false);
      const page = await owner.client.get('/api/v1/nodes/notes%2Foauth.md');
      expect(page.status).toBe(200);
      await mcp.close();
    });

    it('an oa_ token is refused on /api/v1 (401)', async () => {
      const { provider } = await connectWithOAuth(base, owner.client);
      const res = await new Client(base, provider.saved!.access_token).get('/api/v1/me');
      expect(res.status).toBe(401);
      expect(res.body.code).toBe('invalid_token');
    });

    it('a token bound to /mcp works on /w/<its workspace>/mcp and not on another workspace', async () => {
      const other = await signupHuman(base, 'Oscar');
      const { provider } = await connectWithOAuth(base, owner.client);
      const token = provider.saved!.access_token;
      const pinned = await rawMcp(`/w/${owner.workspace.slug}/mcp`, token);
      expect(pinned.status).toBe(200);
      const elsewhere = await rawMcp(`/w/${other.workspace.slug}/mcp`, token);
      expect(elsewhere.status).toBe(401);
      const unknown = await rawMcp('/w/no-such-workspace/mcp', token);
      expect(unknown.status).toBe(401);
    });

    it('a token bound to /w/<slug>/mcp works there only', async () => {
      const { provider, mcp } = await connectWithOAuth(base, owner.client, `/w/${owner.workspace.slug}/mcp`);
      expect(provider.authorizationUrl!.searchParams.get('resource')).toBe(`${base}/w/${owner.workspace.slug}/mcp`);
      expect((await whoami(mcp)).workspace.slug).toBe(owner.workspace.slug);
      expect((await rawMcp('/mcp', provider.saved!.access_token)).status).toBe(401);
      const other = await signupHuman(base, 'Opal');
      expect((await rawMcp(`/w/${other.workspace.slug}/mcp`, provider.saved!.access_token)).status).toBe(401);
    });

    it('a person who is not a member of /w/<slug> gets no code for it', async () => {
      const stranger = await signupHuman(base, 'Stan');
      const provider = new MemoryProvider();
      await expect(newMcpClient().connect(oauthTransport(base, provider, `/w/${owner.workspace.slug}/mcp`))).rejects.toBeInstanceOf(UnauthorizedError);
      const url = provider.authorizationUrl!;
      const page = await stranger.client.get(url.pathname + url.search, { accept: 'application/json' });
      expect(page.status).toBe(404);
      expect(page.body.error).toBe('workspace_not_found');
      const html = await stranger.client.get(url.pathname + url.search, { accept: 'text/html' });
      expect(html.status).toBe(404);
      expect(html.text).toContain('not a member');
      expect(html.text).not.toContain('code=');
    });
  });

  async function rawMcp(path: string, token: string) {
    return fetch(base + path, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
  }

  describe('tokens', () => {
    it('a refresh token rotates; presenting the old one again revokes the whole grant', async () => {
      const { provider, mcp } = await connectWithOAuth(base, owner.client);
      const clientId = provider.info!.client_id;
      const first = provider.saved!;
      const r1 = await form(base, '/oauth/token', {
        grant_type: 'refresh_token',
        refresh_token: first.refresh_token!,
        client_id: clientId,
        resource: `${base}/mcp`,
      });
      expect(r1.status, JSON.stringify(r1.body)).toBe(200);
      expect(r1.headers.get('cache-control')).toBe('no-store');
      expect(r1.body.access_token).toMatch(/^oa_/);
      expect(r1.body.refresh_token).not.toBe(first.refresh_token);
      expect((await rawMcp('/mcp', r1.body.access_token)).status).toBe(200);
      // The rotated token again: refused, and everything of this grant dies.
      const replay = await form(base, '/oauth/token', { grant_type: 'refresh_token', refresh_token: first.refresh_token!, client_id: clientId });
      expect(replay.status).toBe(400);
      expect(replay.body.error).toBe('invalid_grant');
      expect((await rawMcp('/mcp', r1.body.access_token)).status).toBe(401);
      expect((await rawMcp('/mcp', first.access_token)).status).toBe(401);
      const again = await form(base, '/oauth/token', { grant_type: 'refresh_token', refresh_token: r1.body.refresh_token, client_id: clientId });
      expect(again.body.error).toBe('invalid_grant');
      await mcp.close().catch(() => {});
    });

    it('a replayed authorization code is refused and revokes what it issued', async () => {
      const { provider, code } = await connectWithOAuth(base, owner.client);
      const token = provider.saved!.access_token;
      const replay = await form(base, '/oauth/token', {
        grant_type: 'authorization_code',
        code,
        redirect_uri: REDIRECT,
        code_verifier: provider.verifier,
        client_id: provider.info!.client_id,
      });
      expect(replay.status).toBe(400);
      expect(replay.body.error).toBe('invalid_grant');
      expect((await rawMcp('/mcp', token)).status).toBe(401);
    });

    it('refresh with another resource is invalid_target', async () => {
      const { provider } = await connectWithOAuth(base, owner.client);
      const res = await form(base, '/oauth/token', {
        grant_type: 'refresh_token',
        refresh_token: provider.saved!.refresh_token!,
        client_id: provider.info!.client_id,
        resource: `${base}/w/${owner.workspace.slug}/mcp`,
      });
      expect(res.status).toBe(400);
      expect(res.body.error).toBe('invalid_target');
      const foreign = await form(base, '/oauth/token', {
        grant_type: 'refresh_token',
        refresh_token: provider.saved!.refresh_token!,
        client_id: provider.info!.client_id,
        resource: 'https://elsewhere.example.com/mcp',
      });
      expect(foreign.body.error).toBe('invalid_target');
    });

    it('revocation (RFC 7009): an access token dies alone; a refresh token takes its grant', async () => {
      const a = await connectWithOAuth(base, owner.client);
      const id = a.provider.info!.client_id;
      const r = await form(base, '/oauth/revoke', { token: a.provider.saved!.access_token, client_id: id });
      expect(r.status).toBe(200);
      expect((await rawMcp('/mcp', a.provider.saved!.access_token)).status).toBe(401);
      const refreshed = await form(base, '/oauth/token', { grant_type: 'refresh_token', refresh_token: a.provider.saved!.refresh_token!, client_id: id });
      expect(refreshed.status).toBe(200);
      const r2 = await form(base, '/oauth/revoke', { token: refreshed.body.refresh_token, token_type_hint: 'refresh_token', client_id: id });
      expect(r2.status).toBe(200);
      expect((await rawMcp('/mcp', refreshed.body.access_token)).status).toBe(401);
      // Unknown tokens are answered the same (200), and change nothing.
      expect((await form(base, '/oauth/revoke', { token: 'oa_nothing', client_id: id })).status).toBe(200);
    });

    it('another client cannot revoke or refresh a token it was not issued', async () => {
      const a = await connectWithOAuth(base, owner.client);
      const b = await connectWithOAuth(base, owner.client);
      const r = await form(base, '/oauth/revoke', { token: a.provider.saved!.access_token, client_id: b.provider.info!.client_id });
      expect(r.status).toBe(200);
      expect((await rawMcp('/mcp', a.provider.saved!.access_token)).status).toBe(200);
      const stolen = await form(base, '/oauth/token', {
        grant_type: 'refresh_token',
        refresh_token: a.provider.saved!.refresh_token!,
        client_id: b.provider.info!.client_id,
      });
      expect(stolen.body.error).toBe('invalid_grant');
    });

    it('the person lists and revokes their connected clients over REST', async () => {
      const { provider } = await connectWithOAuth(base, owner.client, '/mcp', new MemoryProvider({ client_name: 'Listed client' }));
      const list = await owner.client.get('/api/v1/me/oauth-clients');
      expect(list.status).toBe(200);
      const mine = list.body.clients.find((c: { client_id: string }) => c.client_id === provider.info!.client_id);
      expect(mine).toMatchObject({ client_name: 'Listed client', redirect_hosts: ['127.0.0.1:53682'], resource: `${base}/mcp` });
      const del = await owner.client.delete(`/api/v1/me/oauth-clients/${mine.id}`);
      expect(del.status).toBe(200);
      expect((await rawMcp('/mcp', provider.saved!.access_token)).status).toBe(401);
      expect((await owner.client.delete(`/api/v1/me/oauth-clients/${mine.id}`)).status).toBe(404);
      // Someone else's connection is not theirs to see or revoke.
      const other = await signupHuman(base, 'Otto');
      expect((await other.client.delete(`/api/v1/me/oauth-clients/${mine.id}`)).status).toBe(404);
      // Agent keys cannot use these routes (session only).
      const key = await owner.client.post('/api/v1/principals', { name: 'k', grants: [{ action: 'read', scope: '*', ceiling: 'internal' }] });
      const minted = await owner.client.post(`/api/v1/principals/${key.body.id}/tokens`, { name: 'k' });
      expect((await new Client(base, minted.body.key).get('/api/v1/me/oauth-clients')).status).toBe(403);
    });
  });

  describe('who the token is', () => {
    it('dies on lockdown', async () => {
      const o = await signupHuman(base, 'Lena');
      const { provider } = await connectWithOAuth(base, o.client);
      expect((await rawMcp('/mcp', provider.saved!.access_token)).status).toBe(200);
      expect((await o.client.post('/api/auth/stepup', { password: 'correct horse battery' })).status).toBe(200);
      expect((await o.client.post(`/api/v1/workspaces/${o.workspace.slug}/lockdown`)).status).toBe(200);
      expect((await rawMcp('/mcp', provider.saved!.access_token)).status).toBe(401);
      const refresh = await form(base, '/oauth/token', {
        grant_type: 'refresh_token',
        refresh_token: provider.saved!.refresh_token!,
        client_id: provider.info!.client_id,
      });
      expect(refresh.body.error).toBe('invalid_grant');
    });

    it('acts at the role of the moment, and dies on removal from the workspace', async () => {
      const ed = await joinAs(owner.client, owner.workspace.slug, 'editor', 'Edda');
      const { provider, mcp } = await connectWithOAuth(base, ed.client);
      expect((await whoami(mcp)).role).toBe('editor');
      expect((await owner.client.patch(`/api/v1/workspaces/${owner.workspace.slug}/members/${ed.id}`, { role: 'viewer' })).status).toBe(200);
      expect((await whoami(mcp)).role).toBe('viewer');
      const w = await call(mcp, 'context_write', { path: 'notes/viewer.md', content: '# no' });
      expect(w.isError).toBe(true);
      expect(w.text).toMatch(/^forbidden: /);
      expect((await owner.client.delete(`/api/v1/workspaces/${owner.workspace.slug}/members/${ed.id}`)).status).toBe(200);
      expect((await rawMcp('/mcp', provider.saved!.access_token)).status).toBe(401);
    });

    it('a viewer sees why and gets no code', async () => {
      const viewer = await joinAs(owner.client, owner.workspace.slug, 'viewer', 'Vera');
      const provider = new MemoryProvider();
      await expect(newMcpClient().connect(oauthTransport(base, provider, `/w/${owner.workspace.slug}/mcp`))).rejects.toBeInstanceOf(UnauthorizedError);
      const url = provider.authorizationUrl!;
      const page = await viewer.client.get(url.pathname + url.search, { accept: 'application/json' });
      expect(page.status).toBe(200);
      expect(page.body.can_consent).toBe(false);
      expect(page.body.reason).toMatch(/only owners and editors/i);
      const html = await viewer.client.get(url.pathname + url.search, { accept: 'text/html' });
      expect(html.status).toBe(403);
      expect(html.text).toMatch(/only owners and editors/i);
      const res = await viewer.client.post('/oauth/authorize', { ...page.body.answer.fields, decision: 'approve' }, { accept: 'application/json' });
      expect(res.status).toBe(403);
      expect(JSON.stringify(res.body)).not.toContain('code=');
      const denied = await viewer.client.post('/oauth/authorize', { ...page.body.answer.fields, decision: 'deny' }, { accept: 'application/json' });
      expect(new URL(denied.body.redirect_to).searchParams.get('error')).toBe('access_denied');
    });

    it('step-up gates answer how a person over OAuth satisfies them', async () => {
      const { mcp } = await connectWithOAuth(base, owner.client);
      expect((await call(mcp, 'context_write', { path: 'gated/sub/one.md', content: '# One' })).isError).toBe(false);
      const r = await call(mcp, 'context_archive', { cluster_path: 'gated/sub', reason: 'stale' });
      expect(r.isError).toBe(true);
      expect(r.text).toMatch(/^step_up_required: /);
      expect(r.text).toMatch(/web app|session/i);
    });

    it('every issue and use is audited', async () => {
      const o = await signupHuman(base, 'Ada');
      const { mcp } = await connectWithOAuth(base, o.client);
      await whoami(mcp);
      const rows = await s.ctx.store.db.selectFrom('audit_log').select('action').where('workspace_id', '=', o.workspace.id).execute();
      const actions = rows.map((r) => r.action);
      expect(actions).toEqual(expect.arrayContaining(['oauth.consent', 'oauth.token.issued', 'oauth.token.used']));
    });
  });
});
