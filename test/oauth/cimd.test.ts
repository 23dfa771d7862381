import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { addressProblem, documentRedirectProblem } from '../../src/auth/oauth/metadata-document.js';
import { testEngines } from '../support/engines.js';
import { type Client, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { connectMcp, ok } from '../mcp/support.js';
import { form, REDIRECT } from './support.js';

/**
 * Client ID Metadata Documents (issue 14, beyond the spec): a client_id that is the URL of the
 * client's metadata. A small HTTP server on 127.0.0.1 serves documents (good and hostile) and
 * counts every request, so the tests see what the Context Vault server fetched and when.
 */

interface DocServer {
  base: string;
  hits: Map<string, number>;
  close(): Promise<void>;
}

async function startDocServer(): Promise<DocServer> {
  const hits = new Map<string, number>();
  let base = '';
  const doc = (path: string, extra: Record<string, unknown> = {}) => ({
    client_id: `${base}${path}`,
    client_name: 'Doc client',
    redirect_uris: [REDIRECT],
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'none',
    ...extra,
  });
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    hits.set(path, (hits.get(path) ?? 0) + 1);
    const json = (body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(200, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    };
    if (path.startsWith('/good/')) return json(doc(path), path.endsWith('/cached') ? { 'cache-control': 'max-age=3600' } : {});
    if (path.startsWith('/allowlisted/')) return json(doc(path, { redirect_uris: ['https://app.example.com/cb'] }));
    switch (path) {
      case '/other-id':
        return json(doc('/good/someone-else'));
      case '/no-redirects':
        return json({ client_id: `${base}${path}`, client_name: 'No redirects' });
      case '/bad-redirect':
        return json(doc(path, { redirect_uris: ['https://evil.example/cb'] }));
      case '/jwt':
        return json(doc(path, { token_endpoint_auth_method: 'private_key_jwt' }));
      case '/secret':
        return json(doc(path, { token_endpoint_auth_method: 'client_secret_basic' }));
      case '/bidi':
        return json(doc(path, { client_name: 'Safe\u202eelif' }));
      case '/big':
        return json(doc(path, { padding: 'x'.repeat(70 * 1024) }));
      case '/forever': {
        res.writeHead(200, { 'content-type': 'application/json' });
        const chunk = ' '.repeat(8192);
        const tick = setInterval(() => (res.destroyed ? clearInterval(tick) : res.write(chunk)), 5);
        res.on('close', () => clearInterval(tick));
        return;
      }
      case '/slow':
        return; // never answers
      case '/redirect':
        res.writeHead(302, { location: `${base}/good/target` });
        return res.end();
      case '/html':
        res.writeHead(200, { 'content-type': 'text/html' });
        return res.end('<html><body>not a document</body></html>');
      default:
        res.writeHead(404);
        return res.end();
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    base,
    hits,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

function pkce(): { verifier: string; challenge: string } {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

describe.each(testEngines())('client ID metadata documents (%s)', (engine) => {
  let docs: DocServer;
  let s: TestServer;
  let off: TestServer;
  let person: Client;

  beforeAll(async () => {
    docs = await startDocServer();
    s = await startTestServer(engine, { OAUTH_CIMD_ALLOW_LOOPBACK: 'on', OAUTH_REDIRECT_ALLOWLIST: 'https://app.example.com' });
    off = await startTestServer(engine);
    person = (await signupHuman(s.url, 'Dora')).client;
  });
  afterAll(async () => {
    await s?.stop();
    await off?.stop();
    await docs?.close();
  });

  function authorizeQuery(clientId: string, challenge = pkce().challenge, redirect = REDIRECT): string {
    return new URLSearchParams({
      response_type: 'code',
      client_id: clientId,
      redirect_uri: redirect,
      code_challenge: challenge,
      code_challenge_method: 'S256',
      state: 'st',
      resource: `${s.url}/mcp`,
    }).toString();
  }

  /** The authorization request's answer as a JSON-asking client sees it. */
  function authorize(clientId: string, who: Client = person) {
    return who.get(`/oauth/authorize?${authorizeQuery(clientId)}`, { accept: 'application/json' });
  }

  async function refused(clientId: string, reason: RegExp, who: Client = person) {
    const res = await authorize(clientId, who);
    expect(res.status, res.text).toBe(400);
    expect(res.headers.get('location')).toBeNull();
    expect(res.body.error).toBe('invalid_request');
    expect(res.body.error_description).toMatch(/metadata document/);
    expect(res.body.error_description).toMatch(reason);
    return res;
  }

  it('the metadata advertises client_id_metadata_document_supported', async () => {
    const meta = await (await fetch(`${s.url}/.well-known/oauth-authorization-server`)).json();
    expect(meta.client_id_metadata_document_supported).toBe(true);
  });

  it('full flow: a URL client_id is consented, exchanges its code with PKCE, calls /mcp, refreshes and revokes', async () => {
    const clientId = `${docs.base}/good/flow`;
    const { verifier, challenge } = pkce();
    const page = await person.get(`/oauth/authorize?${authorizeQuery(clientId, challenge)}`, { accept: 'application/json' });
    expect(page.status, page.text).toBe(200);
    expect(page.body.client).toMatchObject({ id: clientId, name: 'Doc client', from_host: new URL(docs.base).host, redirect_host: '127.0.0.1:53682' });

    // The HTML page names the host the document came from.
    const html = await person.get(`/oauth/authorize?${authorizeQuery(clientId, challenge)}`, { accept: 'text/html' });
    expect(html.status).toBe(200);
    expect(html.text).toContain('Doc client');
    expect(html.text).toContain(`client from <strong>${new URL(docs.base).host}</strong>`);

    const approved = await person.post('/oauth/authorize', { ...page.body.answer.fields, decision: 'approve' }, { accept: 'application/json' });
    expect(approved.status, approved.text).toBe(200);
    const back = new URL(approved.body.redirect_to);
    expect(back.searchParams.get('state')).toBe('st');
    const code = back.searchParams.get('code')!;

    const tok = await form(s.url, '/oauth/token', {
      grant_type: 'authorization_code',
      code,
      redirect_uri: REDIRECT,
      code_verifier: verifier,
      client_id: clientId,
    });
    expect(tok.status, JSON.stringify(tok.body)).toBe(200);
    expect(tok.body.access_token).toMatch(/^oa_/);

    const mcp = await connectMcp(s.url, tok.body.access_token);
    const me = await ok(mcp, 'context_whoami');
    expect(JSON.stringify(me)).toContain('Dora');
    await mcp.close();

    const conns = await person.get('/api/v1/me/oauth-clients');
    expect(conns.status).toBe(200);
    const conn = conns.body.clients.find((c: { client_id: string }) => c.client_id === clientId);
    expect(conn).toMatchObject({ client_name: 'Doc client', client_from: new URL(docs.base).host, redirect_hosts: ['127.0.0.1:53682'] });

    const refreshed = await form(s.url, '/oauth/token', { grant_type: 'refresh_token', refresh_token: tok.body.refresh_token, client_id: clientId });
    expect(refreshed.status, JSON.stringify(refreshed.body)).toBe(200);
    // A secret is refused: the document made it a public client.
    const withSecret = await form(s.url, '/oauth/token', {
      grant_type: 'refresh_token',
      refresh_token: refreshed.body.refresh_token,
      client_id: clientId,
      client_secret: 'x',
    });
    expect(withSecret.status).toBe(401);
    expect(withSecret.body.error).toBe('invalid_client');

    const revoked = await form(s.url, '/oauth/revoke', { token: refreshed.body.refresh_token, client_id: clientId });
    expect(revoked.status).toBe(200);
    const after = await form(s.url, '/oauth/token', { grant_type: 'refresh_token', refresh_token: refreshed.body.refresh_token, client_id: clientId });
    expect(after.body.error).toBe('invalid_grant');
    const gone = await person.get('/api/v1/me/oauth-clients');
    expect(gone.body.clients.find((c: { client_id: string }) => c.client_id === clientId)).toBeUndefined();
  });

  it('a second consent of the same URL client updates its row and works again', async () => {
    const clientId = `${docs.base}/good/twice`;
    for (let i = 0; i < 2; i++) {
      const page = await authorize(clientId);
      expect(page.status, page.text).toBe(200);
      const approved = await person.post('/oauth/authorize', { ...page.body.answer.fields, decision: 'approve' }, { accept: 'application/json' });
      expect(approved.status, approved.text).toBe(200);
      expect(new URL(approved.body.redirect_to).searchParams.get('code')).toMatch(/^oac_/);
    }
    const conns = await person.get('/api/v1/me/oauth-clients');
    expect(conns.body.clients.filter((c: { client_id: string }) => c.client_id === clientId)).toHaveLength(2);
  });

  it('the document is cached: two authorizations fetch it once; a failure is cached too', async () => {
    const clientId = `${docs.base}/good/cached`;
    expect((await authorize(clientId)).status).toBe(200);
    expect((await authorize(clientId)).status).toBe(200);
    expect(docs.hits.get('/good/cached')).toBe(1);

    await refused(`${docs.base}/missing`, /404/);
    await refused(`${docs.base}/missing`, /404/);
    expect(docs.hits.get('/missing')).toBe(1);

    // Concurrent requests share one fetch.
    const many = await Promise.all(Array.from({ length: 5 }, () => authorize(`${docs.base}/good/burst`)));
    expect(many.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(docs.hits.get('/good/burst')).toBe(1);
  });

  it('a redirect URI on the allowlist is accepted from a document', async () => {
    const clientId = `${docs.base}/allowlisted/one`;
    const res = await person.get(`/oauth/authorize?${authorizeQuery(clientId, pkce().challenge, 'https://app.example.com/cb')}`, {
      accept: 'application/json',
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.client.redirect_host).toBe('app.example.com');
  });

  it('refuses a document that names another client_id, lacks redirect_uris, or names a redirect URI not allowed', async () => {
    await refused(`${docs.base}/other-id`, /another client_id/);
    await refused(`${docs.base}/no-redirects`, /no redirect_uris/);
    await refused(`${docs.base}/bad-redirect`, /evil\.example.*neither a loopback/);
  });

  it('refuses token_endpoint_auth_method other than none, a client secret and a disguised client_name', async () => {
    await refused(`${docs.base}/jwt`, /private_key_jwt/);
    await refused(`${docs.base}/secret`, /client_secret_basic/);
    await refused(`${docs.base}/bidi`, /client_name.*control or bidi/);
  });

  it('refuses an oversized document, one that streams forever, a redirect (not followed) and non-JSON', async () => {
    await refused(`${docs.base}/big`, /over 64 KiB/);
    const t0 = Date.now();
    await refused(`${docs.base}/forever`, /over 64 KiB/);
    expect(Date.now() - t0).toBeLessThan(4000);
    await refused(`${docs.base}/redirect`, /redirect \(302\).*not followed/);
    expect(docs.hits.get('/good/target')).toBeUndefined();
    await refused(`${docs.base}/html`, /not JSON/);
  });

  it('refuses a document that does not arrive in time; at most 20 fetches at once', async () => {
    const t0 = Date.now();
    const slow = Array.from({ length: 20 }, (_, i) => refused(`${docs.base}/slow?n=${i}`, /did not arrive within 5 s/));
    // The slow fetches hold every slot: a 21st URL is refused at once, and not remembered.
    await new Promise((r) => setTimeout(r, 300));
    const t1 = Date.now();
    await refused(`${docs.base}/good/while-busy`, /too many client metadata documents/);
    expect(Date.now() - t1).toBeLessThan(1000);
    expect(docs.hits.get('/good/while-busy')).toBeUndefined();
    await Promise.all(slow);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(4900);
    expect(docs.hits.get('/slow')).toBe(20);
    expect((await authorize(`${docs.base}/good/while-busy`)).status).toBe(200);
  }, 15_000);

  it('refuses private, link-local, unique-local, CGNAT, multicast and unspecified addresses before connecting', async () => {
    for (const [url, range] of [
      ['https://10.0.0.1/x', 'private'],
      ['https://192.168.1.5/client.json', 'private'],
      ['https://169.254.169.254/latest/meta-data', 'linkLocal'],
      ['https://100.64.0.1/x', 'carrierGradeNat'],
      ['https://224.0.0.1/x', 'multicast'],
      ['https://0.0.0.0/x', 'unspecified'],
      ['https://[fd00::1]/x', 'uniqueLocal'],
      ['https://[fe80::1]/x', 'linkLocal'],
      [new URL('https://[::ffff:10.0.0.1]/x').href, 'private'],
    ] as const) {
      const t0 = Date.now();
      await refused(url, new RegExp(`is a ${range} address`));
      // No connection was tried: a connection to these would not answer this fast, or would say so.
      expect(Date.now() - t0, url).toBeLessThan(1000);
    }
  });

  it('with the development setting off, loopback documents are refused without a fetch', async () => {
    const other = (await signupHuman(off.url, 'Otto')).client;
    const port = new URL(docs.base).port;
    const cases: [string, RegExp][] = [
      [`${docs.base}/good/off`, /must be https/],
      [`https://127.0.0.1:${port}/good/off`, /loopback address/],
      [`https://[::1]:${port}/good/off`, /loopback address/],
      [`https://localhost:${port}/good/off`, /loopback name/],
      ['https://localhost/x', /loopback name/],
    ];
    for (const [url, reason] of cases) {
      const res = await other.get(
        `/oauth/authorize?${new URLSearchParams({ response_type: 'code', client_id: url, redirect_uri: REDIRECT, code_challenge: pkce().challenge, code_challenge_method: 'S256', resource: `${off.url}/mcp` })}`,
        { accept: 'application/json' },
      );
      expect(res.status, url).toBe(400);
      expect(res.body.error_description, url).toMatch(reason);
    }
    expect(docs.hits.get('/good/off')).toBeUndefined();
  });

  it('malformed URL client_ids are refused', async () => {
    await refused('https://example.com/', /must have a path/);
    await refused('https://example.com', /must have a path/);
    await refused('https://user:pw@example.com/x', /credentials/);
    await refused('https://example.com/x#frag', /fragment/);
    await refused('https://example.com/a/../x', /normal form/);
    await refused('http://example.com/x', /must be https/);
    await refused(`https://example.com/${'a'.repeat(1000)}`, /at most 1000/);
  });

  it('a refused document at /oauth/authorize is a page for a browser, never a redirect', async () => {
    const res = await person.get(`/oauth/authorize?${authorizeQuery('https://10.0.0.1/x')}`, { accept: 'text/html' });
    expect(res.status).toBe(400);
    expect(res.headers.get('location')).toBeNull();
    expect(res.headers.get('content-type')).toMatch(/text\/html/);
    expect(res.text).toContain('Cannot connect the application');
    expect(res.text).toContain('private address');
  });

  it('at /oauth/token and /oauth/revoke a refused document is invalid_client', async () => {
    for (const id of [`${docs.base}/other-id`, 'https://10.0.0.1/x', `${docs.base}/jwt`]) {
      const tok = await form(s.url, '/oauth/token', { grant_type: 'authorization_code', code: 'oac_x', code_verifier: 'v'.repeat(43), client_id: id });
      expect(tok.status, id).toBe(401);
      expect(tok.body.error).toBe('invalid_client');
      expect(tok.body.error_description).toMatch(/metadata document was refused/);
      const rev = await form(s.url, '/oauth/revoke', { token: 'oa_x', client_id: id });
      expect(rev.status).toBe(401);
      expect(rev.body.error).toBe('invalid_client');
    }
  });

  it('a code issued to one URL client cannot be exchanged by another', async () => {
    const a = `${docs.base}/good/code-a`;
    const { verifier, challenge } = pkce();
    const page = await person.get(`/oauth/authorize?${authorizeQuery(a, challenge)}`, { accept: 'application/json' });
    const approved = await person.post('/oauth/authorize', { ...page.body.answer.fields, decision: 'approve' }, { accept: 'application/json' });
    const code = new URL(approved.body.redirect_to).searchParams.get('code')!;
    const tok = await form(s.url, '/oauth/token', {
      grant_type: 'authorization_code',
      code,
      redirect_uri: REDIRECT,
      code_verifier: verifier,
      client_id: `${docs.base}/good/code-b`,
    });
    expect(tok.status).toBe(400);
    expect(tok.body.error).toBe('invalid_grant');
  });
});

describe('client ID metadata documents: rules without a server', () => {
  it('only public unicast addresses pass; loopback only under the development setting', () => {
    expect(addressProblem('93.184.216.34', false)).toBeNull();
    expect(addressProblem('2606:2800:220:1::1', false)).toBeNull();
    for (const a of [
      '10.1.2.3',
      '172.16.0.1',
      '192.168.0.1',
      '127.0.0.1',
      '169.254.169.254',
      '100.64.0.1',
      '0.0.0.0',
      '255.255.255.255',
      '::1',
      '::',
      'fc00::1',
      'fe80::1',
      'ff02::1',
      '::ffff:127.0.0.1',
      '::ffff:192.168.0.1',
    ]) {
      expect(addressProblem(a, false), a).not.toBeNull();
    }
    expect(addressProblem('127.0.0.1', true)).toBeNull();
    expect(addressProblem('::1', true)).toBeNull();
    expect(addressProblem('10.0.0.1', true)).not.toBeNull();
  });

  it('a document may redirect to https on its own origin (the domain vouches for itself), not to another', () => {
    const doc = new URL('https://client.example.com/oauth/metadata.json');
    expect(documentRedirectProblem('https://client.example.com/callback', doc, [])).toBeNull();
    expect(documentRedirectProblem('http://127.0.0.1:9999/cb', doc, [])).toBeNull();
    expect(documentRedirectProblem('https://evil.example.com/callback', doc, [])).toMatch(/own origin/);
    expect(documentRedirectProblem('http://client.example.com/callback', doc, [])).toMatch(/own origin/);
    expect(documentRedirectProblem('https://client.example.com.evil.net/cb', doc, [])).toMatch(/own origin/);
    expect(documentRedirectProblem('https://app.example.com/cb', doc, ['https://app.example.com'])).toBeNull();
  });

  it('OAUTH_CIMD_ALLOW_LOOPBACK is off by default and takes on or off', () => {
    expect(loadConfig({}).oauth.cimdAllowLoopback).toBe(false);
    expect(loadConfig({ OAUTH_CIMD_ALLOW_LOOPBACK: 'on' }).oauth.cimdAllowLoopback).toBe(true);
    expect(() => loadConfig({ OAUTH_CIMD_ALLOW_LOOPBACK: 'yes' })).toThrow(/OAUTH_CIMD_ALLOW_LOOPBACK/);
  });
});
