import { createHash, randomBytes } from 'node:crypto';
import * as oauth from 'oauth4webapi';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { Client, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { form, REDIRECT } from './support.js';

/**
 * The OAuth endpoints one by one: registration (RFC 7591), the authorization endpoint's checks,
 * and the token and revocation endpoints' errors, driven by a second, independent OAuth client
 * library (oauth4webapi) so that the answers are checked by something other than the MCP SDK.
 */

const insecure = { [oauth.allowInsecureRequests]: true } as const;

function pkce(): { verifier: string; challenge: string } {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

async function register(base: string, body: Record<string, unknown>): Promise<{ status: number; body: any }> {
  const res = await fetch(`${base}/oauth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json().catch(() => null) };
}

describe.each(testEngines())('OAuth endpoints (%s)', (engine) => {
  let s: TestServer;
  let base: string;
  let person: Client;
  let as: oauth.AuthorizationServer;

  beforeAll(async () => {
    s = await startTestServer(engine, { OAUTH_REDIRECT_ALLOWLIST: 'https://app.example.com/oauth/callback,https://claude.ai' });
    base = s.url;
    person = (await signupHuman(base, 'Petra')).client;
    const issuer = new URL(base);
    as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }));
  });
  afterAll(async () => s?.stop());

  /** Registers a client, has the person approve, and answers the code with what it needs. */
  async function authorized(opts: { auth?: 'none' | 'client_secret_basic' | 'client_secret_post' } = {}) {
    const reg = await register(base, { redirect_uris: [REDIRECT], client_name: 'lib client', token_endpoint_auth_method: opts.auth ?? 'none' });
    expect(reg.status, JSON.stringify(reg.body)).toBe(201);
    const { verifier, challenge } = pkce();
    const q = new URLSearchParams({
      response_type: 'code',
      client_id: reg.body.client_id,
      redirect_uri: REDIRECT,
      code_challenge: challenge,
      code_challenge_method: 'S256',
      state: 'st',
      resource: `${base}/mcp`,
    });
    const page = await person.get(`/oauth/authorize?${q}`, { accept: 'application/json' });
    expect(page.status, page.text).toBe(200);
    const res = await person.post('/oauth/authorize', { ...page.body.answer.fields, decision: 'approve' }, { accept: 'application/json' });
    const back = new URL(res.body.redirect_to);
    const client: oauth.Client = { client_id: reg.body.client_id };
    const params = oauth.validateAuthResponse(as, client, back, 'st');
    return { reg: reg.body, verifier, params, client, code: back.searchParams.get('code')! };
  }

  function clientAuth(reg: { token_endpoint_auth_method: string; client_secret?: string }): oauth.ClientAuth {
    if (reg.token_endpoint_auth_method === 'client_secret_basic') return oauth.ClientSecretBasic(reg.client_secret!);
    if (reg.token_endpoint_auth_method === 'client_secret_post') return oauth.ClientSecretPost(reg.client_secret!);
    return oauth.None();
  }

  /** The error a token response carries, as the library reads it. */
  async function tokenError(res: Response, client: oauth.Client): Promise<{ error: string; status: number }> {
    try {
      await oauth.processAuthorizationCodeResponse(as, client, res);
    } catch (e) {
      if (e instanceof oauth.ResponseBodyError) return { error: e.error, status: e.status };
      // invalid_client with Basic also carries a WWW-Authenticate challenge; the body still says why.
      if (e instanceof oauth.WWWAuthenticateChallengeError) return { error: ((await e.response.clone().json()) as { error: string }).error, status: e.status };
      throw e;
    }
    throw new Error('expected an error response');
  }

  describe('registration', () => {
    it('registers public and confidential clients; the library reads the answers', async () => {
      const pub = await oauth.processDynamicClientRegistrationResponse(
        await oauth.dynamicClientRegistrationRequest(as, { redirect_uris: [REDIRECT], token_endpoint_auth_method: 'none', client_name: 'x' }, insecure),
      );
      expect(pub.client_id).toMatch(/^oc_/);
      expect(pub.client_secret).toBeUndefined();
      const conf = await register(base, { redirect_uris: ['http://[::1]:9000/cb', 'http://localhost/cb'] });
      expect(conf.status).toBe(201);
      expect(conf.body.token_endpoint_auth_method).toBe('client_secret_basic');
      expect(conf.body.client_secret).toMatch(/^ocs_/);
      expect(conf.body.client_secret_expires_at).toBe(0);
    });

    it('allows allowlisted https redirect URIs, refuses every other one with invalid_redirect_uri', async () => {
      expect((await register(base, { redirect_uris: ['https://claude.ai/api/mcp/auth_callback'], token_endpoint_auth_method: 'none' })).status).toBe(201);
      expect((await register(base, { redirect_uris: ['https://app.example.com/oauth/callback'], token_endpoint_auth_method: 'none' })).status).toBe(201);
      for (const bad of [
        'https://evil.example.com/cb',
        'http://app.example.com/oauth/callback',
        'https://app.example.com/oauth/callbackX',
        'https://app.example.com/other',
        'http://127.0.0.1:8080/cb#frag',
        'http://user:pw@127.0.0.1/cb',
        'cursor://anysphere/oauth',
        'javascript:alert(1)',
        'not a url',
        'http://127.0.0.1.evil.com/cb',
      ]) {
        const r = await register(base, { redirect_uris: [bad], token_endpoint_auth_method: 'none' });
        expect(r.status, bad).toBe(400);
        expect(r.body.error, bad).toBe('invalid_redirect_uri');
        expect(r.body.error_description, bad).toBeTruthy();
      }
      const none = await register(base, { client_name: 'no uris' });
      expect(none.body.error).toBe('invalid_redirect_uri');
      const empty = await register(base, { redirect_uris: [] });
      expect(empty.body.error).toBe('invalid_redirect_uri');
    });

    it('refuses bad metadata with invalid_client_metadata, and non-JSON bodies', async () => {
      for (const bad of [
        { redirect_uris: [REDIRECT], token_endpoint_auth_method: 'private_key_jwt' },
        { redirect_uris: [REDIRECT], grant_types: ['client_credentials'] },
        { redirect_uris: [REDIRECT], grant_types: ['refresh_token'] },
        { redirect_uris: [REDIRECT], response_types: ['token'] },
        { redirect_uris: [REDIRECT], client_name: 'x'.repeat(201) },
        { redirect_uris: [REDIRECT], client_uri: 'javascript:alert(1)' },
      ]) {
        const r = await register(base, bad);
        expect(r.status, JSON.stringify(bad)).toBe(400);
        expect(r.body.error, JSON.stringify(bad)).toBe('invalid_client_metadata');
      }
      const arr = await fetch(`${base}/oauth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '[1]' });
      expect((await arr.json()).error).toBe('invalid_client_metadata');
      const text = await fetch(`${base}/oauth/register`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x' });
      expect(text.status).toBe(415);
      const broken = await fetch(`${base}/oauth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' });
      expect(broken.status).toBe(400);
      expect((await broken.json()).error).toBe('invalid_json');
    });

    it('a registration nobody consented to within a day is forgotten', async () => {
      const r = await register(base, { redirect_uris: [REDIRECT], token_endpoint_auth_method: 'none' });
      await s.ctx.store.db
        .updateTable('oauth_clients')
        .set({ created_at: new Date(Date.now() - 25 * 3600 * 1000).toISOString() })
        .where('id', '=', r.body.client_id)
        .execute();
      const res = await person.get(`/oauth/authorize?response_type=code&client_id=${r.body.client_id}&redirect_uri=${encodeURIComponent(REDIRECT)}`, {
        accept: 'text/html',
      });
      expect(res.status).toBe(400);
      expect(res.text).toContain('Unknown client_id');
    });
  });

  describe('authorization endpoint', () => {
    let clientId: string;
    beforeAll(async () => {
      clientId = (await register(base, { redirect_uris: [REDIRECT, 'http://127.0.0.1:9/other'], token_endpoint_auth_method: 'none' })).body.client_id;
    });
    const good = () => ({
      response_type: 'code',
      client_id: clientId,
      redirect_uri: REDIRECT,
      code_challenge: pkce().challenge,
      code_challenge_method: 'S256',
      state: 's1',
      resource: `${base}/mcp`,
    });
    const get = (q: Record<string, string>, c: Client = person) =>
      fetch(`${base}/oauth/authorize?${new URLSearchParams(q)}`, {
        redirect: 'manual',
        headers: { accept: 'text/html', cookie: [...c.cookies].map(([k, v]) => `${k}=${v}`).join('; ') },
      });

    it('never redirects to a URI the client did not register', async () => {
      for (const q of [
        { ...good(), client_id: 'oc_unknown' },
        { ...good(), redirect_uri: 'https://evil.example.com/cb' },
        { ...good(), redirect_uri: 'http://127.0.0.1:53682/callback/extra' },
      ]) {
        const res = await get(q);
        expect(res.status).toBe(400);
        expect(res.headers.get('location')).toBeNull();
        expect(res.headers.get('content-type')).toMatch(/text\/html/);
      }
      // Two registered URIs: the request must say which.
      const { redirect_uri: _r, ...without } = good();
      expect((await get(without)).status).toBe(400);
    });

    it('other problems go back to the client as error= on its redirect URI', async () => {
      const cases: [Record<string, string>, string][] = [
        [{ ...good(), response_type: 'token' }, 'unsupported_response_type'],
        [{ ...good(), code_challenge: '' }, 'invalid_request'],
        [{ ...good(), code_challenge_method: 'plain' }, 'invalid_request'],
        [(({ code_challenge_method: _m, ...q }) => q)(good()), 'invalid_request'],
        [(({ code_challenge: _c, ...q }) => q)(good()), 'invalid_request'],
        [(({ resource: _r, ...q }) => q)(good()), 'invalid_target'],
        [{ ...good(), resource: 'https://elsewhere.example.com/mcp' }, 'invalid_target'],
        [{ ...good(), resource: `${base}/api/v1` }, 'invalid_target'],
        [{ ...good(), scope: 'admin' }, 'invalid_scope'],
      ];
      for (const [q, error] of cases) {
        const res = await get(q);
        expect(res.status, error).toBe(302);
        const to = new URL(res.headers.get('location')!);
        expect(to.origin + to.pathname).toBe(REDIRECT);
        expect(to.searchParams.get('error'), JSON.stringify(q)).toBe(error);
        expect(to.searchParams.get('state')).toBe('s1');
      }
    });

    it('a signed-out browser is sent to /login and back', async () => {
      const res = await get(good(), new Client(base));
      expect(res.status).toBe(302);
      const loc = new URL(res.headers.get('location')!, base);
      expect(loc.pathname).toBe('/login');
      expect(loc.searchParams.get('next')).toMatch(/^\/oauth\/authorize\?/);
    });

    it('the consent page names the client, its redirect host, the workspace and the resource', async () => {
      const res = await get(good());
      expect(res.status).toBe(200);
      const html = await res.text();
      expect(html).toContain('returns you to <code>127.0.0.1:53682</code>');
      expect(html).toContain(`${base}/mcp`);
      expect(html).toContain('name="csrf_token"');
      expect(res.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
    });

    it('approving needs the consent csrf_token, and a signed-in session', async () => {
      const page = await person.get(`/oauth/authorize?${new URLSearchParams(good())}`, { accept: 'application/json' });
      const fields = page.body.answer.fields;
      const forged = await person.request('POST', '/oauth/authorize', {
        json: { ...fields, csrf_token: 'x'.repeat(43), decision: 'approve' },
        csrf: false,
        headers: { accept: 'application/json' },
      });
      expect(forged.status).toBe(403);
      expect(forged.body.error).toBe('csrf_failed');
      const anon = await new Client(base).post('/oauth/authorize', { ...fields, decision: 'approve' }, { accept: 'application/json' });
      expect(anon.status).toBe(401);
      const odd = await person.post('/oauth/authorize', { ...fields, decision: 'maybe' }, { accept: 'application/json' });
      expect(odd.status).toBe(400);
    });
  });

  describe('token endpoint (oauth4webapi)', () => {
    it('exchanges a code with PKCE (public client) and refreshes', async () => {
      const a = await authorized();
      const res = await oauth.authorizationCodeGrantRequest(as, a.client, oauth.None(), a.params, REDIRECT, a.verifier, {
        ...insecure,
        additionalParameters: { resource: `${base}/mcp` },
      });
      const tokens = await oauth.processAuthorizationCodeResponse(as, a.client, res);
      expect(tokens.access_token).toMatch(/^oa_/);
      expect(tokens.token_type).toBe('bearer');
      const refreshed = await oauth.processRefreshTokenResponse(
        as,
        a.client,
        await oauth.refreshTokenGrantRequest(as, a.client, oauth.None(), tokens.refresh_token!, insecure),
      );
      expect(refreshed.access_token).not.toBe(tokens.access_token);
    });

    it('confidential clients authenticate with their secret (basic and post)', async () => {
      for (const method of ['client_secret_basic', 'client_secret_post'] as const) {
        const a = await authorized({ auth: method });
        const res = await oauth.authorizationCodeGrantRequest(as, a.client, clientAuth(a.reg), a.params, REDIRECT, a.verifier, insecure);
        expect((await oauth.processAuthorizationCodeResponse(as, a.client, res)).access_token).toMatch(/^oa_/);
      }
      const a = await authorized({ auth: 'client_secret_basic' });
      const wrong = await oauth.authorizationCodeGrantRequest(as, a.client, oauth.ClientSecretBasic('ocs_wrong'), a.params, REDIRECT, a.verifier, insecure);
      expect(await tokenError(wrong, a.client)).toEqual({ error: 'invalid_client', status: 401 });
      expect(wrong.headers.get('www-authenticate')).toMatch(/^Basic/);
      const none = await oauth.authorizationCodeGrantRequest(as, a.client, oauth.None(), a.params, REDIRECT, a.verifier, insecure);
      expect((await tokenError(none, a.client)).error).toBe('invalid_client');
    });

    it('answers every RFC 6749 error with its code', async () => {
      const a = await authorized();
      const wrongVerifier = await oauth.authorizationCodeGrantRequest(as, a.client, oauth.None(), a.params, REDIRECT, pkce().verifier, insecure);
      expect(await tokenError(wrongVerifier, a.client)).toEqual({ error: 'invalid_grant', status: 400 });
      // That attempt used the code up: the right verifier now meets a used code.
      const b = await authorized();
      const wrongRedirect = await oauth.authorizationCodeGrantRequest(as, b.client, oauth.None(), b.params, 'http://127.0.0.1:9/other', b.verifier, insecure);
      expect((await tokenError(wrongRedirect, b.client)).error).toBe('invalid_grant');
      const c = await authorized();
      const wrongResource = await oauth.authorizationCodeGrantRequest(as, c.client, oauth.None(), c.params, REDIRECT, c.verifier, {
        ...insecure,
        additionalParameters: { resource: `${base}/w/nope/mcp` },
      });
      expect((await tokenError(wrongResource, c.client)).error).toBe('invalid_target');
      const d = await authorized();
      const unknownClient = { client_id: 'oc_nobody' };
      const r = await oauth.authorizationCodeGrantRequest(as, unknownClient, oauth.None(), d.params, REDIRECT, d.verifier, insecure);
      expect(await tokenError(r, unknownClient)).toEqual({ error: 'invalid_client', status: 401 });
      const otherClient = (await authorized()).client;
      const stolen = await oauth.authorizationCodeGrantRequest(as, otherClient, oauth.None(), d.params, REDIRECT, d.verifier, insecure);
      expect((await tokenError(stolen, otherClient)).error).toBe('invalid_grant');
      const grant = await oauth.clientCredentialsGrantRequest(as, d.client, oauth.None(), new URLSearchParams(), insecure);
      expect((await tokenError(grant, d.client)).error).toBe('unsupported_grant_type');
      const garbage = await form(base, '/oauth/token', {
        grant_type: 'authorization_code',
        code: 'oac_nothing',
        redirect_uri: REDIRECT,
        code_verifier: pkce().verifier,
        client_id: d.client.client_id,
      });
      expect(garbage.body.error).toBe('invalid_grant');
    });

    it('missing or repeated parameters are invalid_request', async () => {
      const a = await authorized();
      const id = a.client.client_id;
      for (const [fields, error] of [
        [{ client_id: id }, 'invalid_request'],
        [{ client_id: id, grant_type: 'authorization_code', redirect_uri: REDIRECT, code_verifier: a.verifier }, 'invalid_request'],
        [{ client_id: id, grant_type: 'authorization_code', code: a.code, redirect_uri: REDIRECT }, 'invalid_request'],
        [{ client_id: id, grant_type: 'authorization_code', code: a.code, redirect_uri: REDIRECT, code_verifier: 'short' }, 'invalid_request'],
        [{ client_id: id, grant_type: 'refresh_token' }, 'invalid_request'],
        [{ grant_type: 'refresh_token', refresh_token: 'x' }, 'invalid_client'],
      ] as [Record<string, string>, string][]) {
        const r = await form(base, '/oauth/token', fields);
        expect(r.body.error, JSON.stringify(fields)).toBe(error);
        expect(r.headers.get('cache-control')).toBe('no-store');
      }
      const repeated = await fetch(`${base}/oauth/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: `grant_type=authorization_code&client_id=${id}&client_id=${id}`,
      });
      expect((await repeated.json()).error).toBe('invalid_request');
      const text = await fetch(`${base}/oauth/token`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x' });
      expect(text.status).toBe(400);
      expect((await text.json()).error).toBe('invalid_request');
    });

    it('revocation answers 200 and authenticates the client', async () => {
      const a = await authorized();
      const res = await oauth.authorizationCodeGrantRequest(as, a.client, oauth.None(), a.params, REDIRECT, a.verifier, insecure);
      const tokens = await oauth.processAuthorizationCodeResponse(as, a.client, res);
      await oauth.processRevocationResponse(await oauth.revocationRequest(as, a.client, oauth.None(), tokens.access_token, insecure));
      const mcp = await fetch(`${base}/mcp`, {
        method: 'POST',
        headers: { authorization: `Bearer ${tokens.access_token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      });
      expect(mcp.status).toBe(401);
      const anon = await form(base, '/oauth/revoke', { token: tokens.refresh_token! });
      expect(anon.status).toBe(401);
      expect(anon.body.error).toBe('invalid_client');
    });
  });
});

describe('OAuth rate limits', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer('sqlite', { RATE_LIMITS: 'on' });
  });
  afterAll(async () => s?.stop());

  it('registration: 10 per minute per IP; token: 30 per minute per IP', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 11; i++) statuses.push((await register(s.url, { redirect_uris: [REDIRECT], token_endpoint_auth_method: 'none' })).status);
    expect(statuses.slice(0, 10).every((x) => x === 201)).toBe(true);
    expect(statuses[10]).toBe(429);
    const tokens: number[] = [];
    for (let i = 0; i < 31; i++)
      tokens.push((await form(s.url, '/oauth/token', { grant_type: 'refresh_token', refresh_token: 'x', client_id: 'oc_x' })).status);
    expect(tokens.slice(0, 30).every((x) => x === 401)).toBe(true);
    expect(tokens[30]).toBe(429);
  });
});
