import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { Client, joinAs, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { form, REDIRECT } from './support.js';

/**
 * Attacks on the OAuth 2.1 face (issue 14), with real requests against a started server: code
 * interception, replay and races, PKCE downgrade, redirect URI tricks, open redirects, CSRF on
 * the consent form, consent outside one's workspaces or role, resource binding, tokens on the
 * wrong faces, cross-client theft, dead grants, injection into the consent page, malformed
 * input and the rate limits. Every test asserts the safe behaviour.
 */

type Person = Awaited<ReturnType<typeof signupHuman>>;

const ALLOWLIST = 'https://app.example.com/oauth/callback,https://claude.ai';

function pkce(): { verifier: string; challenge: string } {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

async function register(base: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(`${base}/oauth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: res.status, body: parsed };
}

/** A form-encoded request with the person's cookies (a browser submitting the consent form). */
async function browserForm(base: string, person: Client | null, path: string, fields: Record<string, string>, headers: Record<string, string> = {}) {
  const h: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded', ...headers };
  if (person) return person.request('POST', path, { body: new URLSearchParams(fields).toString(), headers: h, csrf: false });
  const res = await fetch(`${base}${path}`, { method: 'POST', headers: h, body: new URLSearchParams(fields).toString(), redirect: 'manual' });
  return { status: res.status, headers: res.headers, text: await res.text(), body: undefined as unknown };
}

/** A GET as the person's browser sends it, without following the redirect (it goes to the client). */
async function manualGet(person: Client, path: string, headers: Record<string, string> = {}) {
  const cookie = [...person.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  const res = await fetch(`${person.base}${path}`, { redirect: 'manual', headers: { cookie, ...headers } });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

describe.each(testEngines())('OAuth attacks (%s)', (engine) => {
  let s: TestServer;
  let base: string;
  let olga: Person;
  let other: Person;

  beforeAll(async () => {
    s = await startTestServer(engine, { OAUTH_REDIRECT_ALLOWLIST: ALLOWLIST });
    base = s.url;
    olga = await signupHuman(base, 'Olga');
    other = await signupHuman(base, 'Otto');
  });
  afterAll(async () => s?.stop());

  async function publicClient(extra: Record<string, unknown> = {}): Promise<string> {
    const r = await register(base, { redirect_uris: [REDIRECT], client_name: 'attack client', token_endpoint_auth_method: 'none', ...extra });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return r.body.client_id;
  }

  function authorizeQuery(
    clientId: string,
    o: { resource?: string; challenge?: string; redirect?: string | null; state?: string; extra?: Record<string, string> } = {},
  ): URLSearchParams {
    const q = new URLSearchParams({
      response_type: 'code',
      client_id: clientId,
      code_challenge: o.challenge ?? pkce().challenge,
      code_challenge_method: 'S256',
      state: o.state ?? 'st',
      resource: o.resource ?? `${base}/mcp`,
      ...(o.extra ?? {}),
    });
    if (o.redirect !== null) q.set('redirect_uri', o.redirect ?? REDIRECT);
    return q;
  }

  /** The JSON consent descriptor for a request. */
  async function descriptor(person: Client, q: URLSearchParams) {
    return person.get(`/oauth/authorize?${q}`, { accept: 'application/json' });
  }

  /** Approves through the JSON descriptor; answers the code and its verifier. */
  async function codeFor(person: Client, o: { clientId?: string; resource?: string; workspace?: string } = {}) {
    const clientId = o.clientId ?? (await publicClient());
    const { verifier, challenge } = pkce();
    const page = await descriptor(person, authorizeQuery(clientId, { resource: o.resource, challenge }));
    expect(page.status, page.text).toBe(200);
    const fields = { ...page.body.answer.fields, ...(o.workspace ? { workspace: o.workspace } : {}) };
    const res = await person.post('/oauth/authorize', { ...fields, decision: 'approve' }, { accept: 'application/json' });
    expect(res.status, res.text).toBe(200);
    const back = new URL(res.body.redirect_to);
    return { clientId, verifier, code: back.searchParams.get('code')! };
  }

  function exchange(clientId: string, code: string, verifier: string, extra: Record<string, string> = {}) {
    return form(base, '/oauth/token', {
      grant_type: 'authorization_code',
      client_id: clientId,
      code,
      code_verifier: verifier,
      redirect_uri: REDIRECT,
      ...extra,
    });
  }

  async function tokensFor(person: Client, o: { resource?: string; workspace?: string; clientId?: string } = {}) {
    const c = await codeFor(person, o);
    const t = await exchange(c.clientId, c.code, c.verifier);
    expect(t.status, JSON.stringify(t.body)).toBe(200);
    return { clientId: c.clientId, access: t.body.access_token as string, refresh: t.body.refresh_token as string };
  }

  async function mcp(path: string, token: string): Promise<{ status: number; body: any }> {
    const res = await fetch(base + path, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'context_whoami', arguments: {} } }),
    });
    const text = await res.text();
    const m = /data: (.*)/.exec(text);
    let body: unknown = text;
    try {
      body = JSON.parse(m ? m[1]! : text);
    } catch {
      // not JSON
    }
    return { status: res.status, body };
  }

  describe('authorization codes', () => {
    it('two concurrent exchanges of one code: exactly one wins, and the winner’s tokens are then revoked', async () => {
      const c = await codeFor(olga.client);
      const [x, y] = await Promise.all([exchange(c.clientId, c.code, c.verifier), exchange(c.clientId, c.code, c.verifier)]);
      const statuses = [x.status, y.status].sort();
      expect(statuses).toEqual([200, 400]);
      const win = x.status === 200 ? x : y;
      const lose = x.status === 200 ? y : x;
      expect(lose.body.error).toBe('invalid_grant');
      expect((await mcp('/mcp', win.body.access_token)).status).toBe(401);
      const refreshed = await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: c.clientId, refresh_token: win.body.refresh_token });
      expect(refreshed.status).toBe(400);
      expect(refreshed.body.error).toBe('invalid_grant');
    });

    it('many concurrent exchanges of one code: one winner at most, and nothing it got survives', async () => {
      const c = await codeFor(olga.client);
      const all = await Promise.all(Array.from({ length: 8 }, () => exchange(c.clientId, c.code, c.verifier)));
      const wins = all.filter((r) => r.status === 200);
      expect(wins.length).toBe(1);
      for (const r of all.filter((x) => x.status !== 200)) expect(r.body.error).toBe('invalid_grant');
      expect((await mcp('/mcp', wins[0]!.body.access_token)).status).toBe(401);
    });

    it('a replay after a successful exchange is refused and revokes what the code issued', async () => {
      const c = await codeFor(olga.client);
      const first = await exchange(c.clientId, c.code, c.verifier);
      expect(first.status).toBe(200);
      expect((await mcp('/mcp', first.body.access_token)).status).toBe(200);
      const again = await exchange(c.clientId, c.code, c.verifier);
      expect(again.status).toBe(400);
      expect(again.body.error).toBe('invalid_grant');
      expect((await mcp('/mcp', first.body.access_token)).status).toBe(401);
    });

    it('an intercepted code is useless to another client, without the verifier, or with a guessed one', async () => {
      const c = await codeFor(olga.client);
      const thief = await publicClient();
      const stolen = await exchange(thief, c.code, c.verifier);
      expect(stolen.status).toBe(400);
      expect(stolen.body.error).toBe('invalid_grant');
      const noVerifier = await form(base, '/oauth/token', { grant_type: 'authorization_code', client_id: c.clientId, code: c.code, redirect_uri: REDIRECT });
      expect(noVerifier.status).toBe(400);
      expect(noVerifier.body.error).toBe('invalid_request');
      const wrong = await exchange(c.clientId, c.code, pkce().verifier);
      expect(wrong.status).toBe(400);
      expect(wrong.body.error).toBe('invalid_grant');
      // The challenge itself as verifier (a "plain" downgrade) is refused too.
      const plain = await exchange(c.clientId, c.code, createHash('sha256').update(c.verifier).digest('base64url'));
      expect(plain.body.error).toBe('invalid_grant');
      const shortVerifier = await exchange(c.clientId, c.code, 'abc');
      expect(shortVerifier.body.error).toBe('invalid_request');
      // The owner still gets its tokens: failed attempts did not burn the code.
      expect((await exchange(c.clientId, c.code, c.verifier)).status).toBe(200);
    });

    it('an expired code is refused', async () => {
      const c = await codeFor(olga.client);
      await s.ctx.store.db
        .updateTable('oauth_codes')
        .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
        .where('used_at', 'is', null)
        .execute();
      const r = await exchange(c.clientId, c.code, c.verifier);
      expect(r.status).toBe(400);
      expect(r.body.error).toBe('invalid_grant');
    });

    it('the redirect_uri of the token request must be the authorized one', async () => {
      const c = await codeFor(olga.client);
      for (const uri of [`${REDIRECT}/`, REDIRECT.replace('127.0.0.1', 'localhost'), REDIRECT.replace('53682', '53683'), `${REDIRECT}?x=1`]) {
        const r = await exchange(c.clientId, c.code, c.verifier, { redirect_uri: uri });
        expect(r.body.error, uri).toBe('invalid_grant');
      }
    });

    it('a code whose authorization request named no redirect_uri is exchanged without one (RFC 6749 §4.1.3)', async () => {
      const clientId = await publicClient();
      const { verifier, challenge } = pkce();
      const page = await descriptor(olga.client, authorizeQuery(clientId, { challenge, redirect: null }));
      expect(page.status, page.text).toBe(200);
      // The person's browser sends the form as the page gave it.
      const res = await olga.client.post('/oauth/authorize', { ...page.body.answer.fields, decision: 'approve' }, { accept: 'application/json' });
      const code = new URL(res.body.redirect_to).searchParams.get('code')!;
      const r = await form(base, '/oauth/token', { grant_type: 'authorization_code', client_id: clientId, code, code_verifier: verifier });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    });
  });

  describe('PKCE at the authorization endpoint', () => {
    it('refuses a missing challenge, the plain method, a malformed challenge; always back to the client, never a code', async () => {
      const clientId = await publicClient();
      const cases: Record<string, Record<string, string | null>> = {
        missing: { code_challenge: null },
        plain: { code_challenge_method: 'plain' },
        noMethod: { code_challenge_method: null },
        lower: { code_challenge_method: 's256' },
        short: { code_challenge: 'abc' },
        padded: { code_challenge: `${pkce().challenge.slice(0, 42)}=` },
      };
      for (const [name, change] of Object.entries(cases)) {
        const q = authorizeQuery(clientId);
        for (const [k, v] of Object.entries(change))
          if (v === null) q.delete(k);
          else q.set(k, v);
        const res = await manualGet(olga.client, `/oauth/authorize?${q}`);
        expect(res.status, name).toBe(302);
        const to = new URL(res.headers.get('location')!);
        expect(to.origin + to.pathname, name).toBe(REDIRECT);
        expect(to.searchParams.get('error'), name).toBe('invalid_request');
        expect(to.searchParams.get('code'), name).toBeNull();
      }
    });
  });

  describe('redirect URIs', () => {
    it('registration refuses look-alikes of loopback and of allowlisted URLs', async () => {
      for (const bad of [
        'http://localhost.evil.com/cb',
        'http://localhost./cb',
        'http://127.0.0.1.nip.io/cb',
        'http://[::ffff:127.0.0.1]/cb',
        'http://[::2]/cb',
        'http://0.0.0.0/cb',
        'http://127.0.0.2/cb',
        'https://claude.ai.evil.com/cb',
        'https://claude.ai@evil.com/cb',
        'https://evil.com/https://claude.ai/',
        'https://evil.com/?https://claude.ai',
        'https://claude.ai./cb',
        'http://claude.ai/cb',
        'https://claude.ai:8443/cb',
        'https://app.example.com/oauth/callback/../../evil',
        'https://app.example.com/oauth/callback/%2e%2e/%2e%2e/evil',
        'https://app.example.com/oauth/callbackevil',
        'https://app.example.com/oauth/',
        'https://app.example.com.evil.com/oauth/callback',
        'https://APP.example.com.evil.com/oauth/callback',
        'javascript://127.0.0.1/%0aalert(1)',
        'data:text/html,<script>alert(1)</script>',
        'file:///etc/passwd',
        'ftp://127.0.0.1/cb',
        'ws://127.0.0.1/cb',
        '//127.0.0.1/cb',
        '/cb',
        'http://127.0.0.1:99999/cb',
        'http://127.0.0.1/cb#',
      ]) {
        const r = await register(base, { redirect_uris: [bad], token_endpoint_auth_method: 'none' });
        expect(r.status, bad).toBe(400);
        expect(r.body.error, bad).toBe('invalid_redirect_uri');
      }
      // One bad URI among good ones spoils the registration.
      const mixed = await register(base, { redirect_uris: [REDIRECT, 'https://evil.com/cb'], token_endpoint_auth_method: 'none' });
      expect(mixed.status).toBe(400);
    });

    it('the authorization endpoint takes only the exact registered URI, and shows a page (no redirect) otherwise', async () => {
      const clientId = await publicClient();
      for (const uri of [
        `${REDIRECT}/`,
        `${REDIRECT}/../evil`,
        `${REDIRECT}?x=1`,
        REDIRECT.toUpperCase(),
        REDIRECT.replace('53682', '53683'),
        REDIRECT.replace('127.0.0.1', 'localhost'),
        REDIRECT.replace('127.0.0.1', '[::1]'),
        REDIRECT.replace('http://', 'http://user@'),
        REDIRECT.replace('callback', 'callbac%6B'),
        'https://evil.com/cb',
        `${REDIRECT}#x`,
        ` ${REDIRECT}`,
      ]) {
        for (const accept of ['text/html', 'application/json']) {
          const res = await fetch(`${base}/oauth/authorize?${authorizeQuery(clientId, { redirect: uri })}`, {
            redirect: 'manual',
            headers: { accept, cookie: `svc_session=${olga.client.cookies.get('svc_session')}` },
          });
          expect(res.status, uri).toBe(400);
          expect(res.headers.get('location'), uri).toBeNull();
        }
      }
    });

    it('no open redirect: unknown client, bad parameters before the client is known, /login?next=', async () => {
      const q = new URLSearchParams({
        response_type: 'code',
        client_id: 'oc_nope',
        redirect_uri: 'https://evil.com/cb',
        code_challenge: pkce().challenge,
        code_challenge_method: 'S256',
      });
      const unknown = await fetch(`${base}/oauth/authorize?${q}`, { redirect: 'manual' });
      expect(unknown.status).toBe(400);
      expect(unknown.headers.get('location')).toBeNull();
      const repeated = await fetch(`${base}/oauth/authorize?${q}&redirect_uri=https://evil.com/2`, { redirect: 'manual' });
      expect(repeated.status).toBe(400);
      expect(repeated.headers.get('location')).toBeNull();
      for (const next of ['//evil.com', 'https://evil.com', '/\\evil.com', '/%2F%2Fevil.com', '/.//evil.com', 'javascript:alert(1)', '\t//evil.com']) {
        const page = await fetch(`${base}/login?next=${encodeURIComponent(next)}`, { redirect: 'manual' });
        const text = await page.text();
        // Whatever the page keeps of next is a path on this site, never another host or a script.
        expect(text, next).not.toMatch(/(value|href)="(\/\/|\/\\|https?:|javascript:|\s)/i);
      }
    });

    it('a signed-out visitor is sent to the login page with the authorization request as next (short state)', async () => {
      const clientId = await publicClient();
      const res = await fetch(`${base}/oauth/authorize?${authorizeQuery(clientId)}`, { redirect: 'manual', headers: { accept: 'text/html' } });
      expect(res.status).toBe(302);
      const loc = new URL(res.headers.get('location')!, base);
      const login = await (await fetch(`${base}/login?next=${encodeURIComponent(loc.searchParams.get('next')!)}`)).text();
      expect(login).toContain('name="next" value="/oauth/authorize?');
    });

    it('the way back to the consent survives the sign-in for every state the endpoint accepts (up to 2000 characters)', async () => {
      const clientId = await publicClient();
      const q = authorizeQuery(clientId, { state: 's'.repeat(1900) });
      const res = await fetch(`${base}/oauth/authorize?${q}`, { redirect: 'manual', headers: { accept: 'text/html' } });
      expect(res.status).toBe(302);
      const loc = new URL(res.headers.get('location')!, base);
      expect(loc.pathname).toBe('/login');
      const next = loc.searchParams.get('next')!;
      expect(next.startsWith('/oauth/authorize?')).toBe(true);
      // The login page carries next through the sign-in, or the person never gets back to the consent.
      const login = await (await fetch(`${base}/login?next=${encodeURIComponent(next)}`)).text();
      expect(login).toContain('name="next"');
    });

    it('a registered redirect URI with CR/LF cannot inject a header into the redirect', async () => {
      const uri = 'http://127.0.0.1:4100/cb\r\nSet-Cookie: pwn=1';
      const reg = await register(base, { redirect_uris: [uri], token_endpoint_auth_method: 'none' });
      if (reg.status !== 201) return expect(reg.body.error).toBe('invalid_redirect_uri');
      const res = await manualGet(olga.client, `/oauth/authorize?${authorizeQuery(reg.body.client_id, { redirect: uri, extra: { response_type: 'token' } })}`);
      expect(res.status).toBeLessThan(500);
      expect(res.headers.get('set-cookie') ?? '').not.toContain('pwn');
      expect(res.headers.get('location') ?? '').not.toMatch(/[\r\n]/);
    });

    it('state with CR/LF and quotes cannot inject headers or markup in the redirect', async () => {
      const clientId = await publicClient();
      const q = authorizeQuery(clientId, { state: 'a\r\nSet-Cookie: pwn=1\r\n"><script>x</script>' });
      q.set('response_type', 'token');
      const res = await manualGet(olga.client, `/oauth/authorize?${q}`);
      expect(res.status).toBe(302);
      expect(res.headers.get('set-cookie') ?? '').not.toContain('pwn');
      const to = new URL(res.headers.get('location')!);
      expect(to.searchParams.get('error')).toBe('unsupported_response_type');
      expect(to.searchParams.get('state')).toBe('a\r\nSet-Cookie: pwn=1\r\n"><script>x</script>');
    });
  });

  describe('the consent form', () => {
    async function fieldsFor(person: Client, resource?: string) {
      const clientId = await publicClient();
      const page = await descriptor(person, authorizeQuery(clientId, { resource }));
      expect(page.status, page.text).toBe(200);
      return page.body.answer.fields as Record<string, string>;
    }
    const noCode = (res: { status: number; headers: Headers; text: string }) => {
      expect(res.headers.get('location') ?? '').not.toContain('code=');
      expect(res.text).not.toContain('code=');
    };

    it('refuses a missing, empty, wrong or other session’s CSRF token, form or JSON', async () => {
      const fields = await fieldsFor(olga.client);
      const otto = await fieldsFor(other.client);
      for (const [name, csrf] of Object.entries({ missing: undefined, empty: '', wrong: 'x'.repeat(43), others: otto.csrf_token })) {
        const f: Record<string, string> = { ...fields, decision: 'approve' };
        if (csrf === undefined) delete f.csrf_token;
        else f.csrf_token = csrf;
        const asForm = await browserForm(base, olga.client, '/oauth/authorize', f, { accept: 'text/html' });
        expect(asForm.status, name).toBe(403);
        noCode(asForm);
        const asJson = await olga.client.request('POST', '/oauth/authorize', { json: f, headers: { accept: 'application/json' }, csrf: false });
        expect(asJson.status, name).toBe(403);
        noCode(asJson);
      }
    });

    it('the X-CSRF-Token header alone (cookie echo without the field) does not approve', async () => {
      const fields = await fieldsFor(olga.client);
      const { csrf_token: _drop, ...rest } = fields;
      const res = await olga.client.request('POST', '/oauth/authorize', {
        json: { ...rest, decision: 'approve' },
        headers: { accept: 'application/json', 'x-csrf-token': olga.client.csrf! },
      });
      expect(res.status).toBe(403);
      noCode(res);
    });

    it('a cross-site form without the session cookie, or with only the CSRF cookie, gets no code', async () => {
      const fields = await fieldsFor(olga.client);
      const bare = await browserForm(base, null, '/oauth/authorize', { ...fields, decision: 'approve' }, { accept: 'text/html', origin: 'https://evil.com' });
      expect([401, 403]).toContain(bare.status);
      noCode(bare);
      const csrfOnly = await browserForm(
        base,
        null,
        '/oauth/authorize',
        { ...fields, decision: 'approve' },
        { accept: 'text/html', cookie: `svc_csrf=${fields.csrf_token}` },
      );
      expect([401, 403]).toContain(csrfOnly.status);
      noCode(csrfOnly);
    });

    it('text/plain bodies (a CORS-simple cross-site POST) are not accepted', async () => {
      const fields = await fieldsFor(olga.client);
      const res = await olga.client.request('POST', '/oauth/authorize', {
        body: new URLSearchParams({ ...fields, decision: 'approve' }).toString(),
        headers: { 'content-type': 'text/plain', accept: 'application/json' },
        csrf: false,
      });
      expect(res.status).toBeGreaterThanOrEqual(400);
      noCode(res);
    });

    it('consent is not possible for a workspace the person is not in (workspace field, id, or /w/<slug>/mcp)', async () => {
      const fields = await fieldsFor(olga.client);
      for (const ws of [other.workspace.slug, other.workspace.id, 'no-such-ws', other.workspace.slug.toUpperCase()]) {
        const res = await olga.client.post('/oauth/authorize', { ...fields, workspace: ws, decision: 'approve' }, { accept: 'application/json' });
        if (res.status === 200) {
          const to = new URL(res.body.redirect_to);
          expect(to.searchParams.get('code'), ws).toBeNull();
          expect(to.searchParams.get('error'), ws).toBe('access_denied');
        } else expect(res.status, ws).toBeGreaterThanOrEqual(400);
      }
      const clientId = await publicClient();
      const pinned = await descriptor(olga.client, authorizeQuery(clientId, { resource: `${base}/w/${other.workspace.slug}/mcp` }));
      expect(pinned.status).toBe(404);
      expect(pinned.body.error).toBe('workspace_not_found');
      // The same answer as a slug that does not exist.
      const none = await descriptor(olga.client, authorizeQuery(clientId, { resource: `${base}/w/no-such-ws/mcp` }));
      expect(none.status).toBe(404);
      expect(none.body.error_description).toBe(pinned.body.error_description.replace(other.workspace.slug, 'no-such-ws'));
      // And posting the pinned form anyway (forged fields) gets no code.
      const forged = await olga.client.post(
        '/oauth/authorize',
        { ...fields, resource: `${base}/w/${other.workspace.slug}/mcp`, decision: 'approve' },
        { accept: 'application/json' },
      );
      expect(new URL(forged.body.redirect_to).searchParams.get('code')).toBeNull();
    });

    it('a /mcp consent page with a ?workspace= the person is not in says so without naming "null"', async () => {
      const clientId = await publicClient();
      const q = authorizeQuery(clientId);
      q.set('workspace', other.workspace.slug);
      const res = await olga.client.get(`/oauth/authorize?${q}`, { accept: 'text/html' });
      expect(res.status).toBe(404);
      expect(res.text).not.toContain('workspace null');
    });

    it('a viewer cannot consent: not through the workspace field, not through /w/<slug>/mcp', async () => {
      const vi = await joinAs(olga.client, olga.workspace.slug, 'viewer', 'Vera');
      // Vera's own workspace is hers (owner); she picks Olga's, where she is a viewer.
      const fields = await fieldsFor(vi.client);
      const viaField = await vi.client.post(
        '/oauth/authorize',
        { ...fields, workspace: olga.workspace.slug, decision: 'approve' },
        { accept: 'application/json' },
      );
      expect(viaField.status).toBe(403);
      noCode(viaField);
      const pinned = await fieldsFor(vi.client, `${base}/w/${olga.workspace.slug}/mcp`);
      const viaPinned = await vi.client.post('/oauth/authorize', { ...pinned, decision: 'approve' }, { accept: 'application/json' });
      expect(viaPinned.status).toBe(403);
      noCode(viaPinned);
    });

    it('a person whose current workspace is one they only view can still pick one they may connect', async () => {
      const vi = await joinAs(olga.client, olga.workspace.slug, 'viewer', 'Viola');
      // Viola signs in with Olga's workspace current (the session's default workspace).
      await s.ctx.store.db.updateTable('sessions').set({ workspace_id: olga.workspace.id }).where('principal_id', '=', vi.id).execute();
      const clientId = await publicClient();
      const json = await descriptor(vi.client, authorizeQuery(clientId));
      expect(json.body.workspaces.some((w: { can_consent: boolean }) => w.can_consent)).toBe(true);
      const page = await vi.client.get(`/oauth/authorize?${authorizeQuery(clientId)}`, { accept: 'text/html' });
      // The HTML page must offer the workspace picker (or default to a workspace she can connect), not only "go back".
      expect(page.text).toContain('<select id="workspace" name="workspace">');
      expect(page.text).toContain('value="approve"');
    });

    it('resource slug tricks are refused before any consent', async () => {
      const clientId = await publicClient();
      for (const r of [
        `${base}/w/${olga.workspace.slug.toUpperCase()}/mcp`,
        `${base}/w/${olga.workspace.slug}/mcp/`,
        `${base}/w/${olga.workspace.slug}%2F..%2F${other.workspace.slug}/mcp`,
        `${base}/w/${olga.workspace.slug}/../${other.workspace.slug}/mcp`,
        `${base}/w//mcp`,
        `${base}/mcp/`,
        `${base}/mcp?toolset=extended`,
        `${base}/mcp#x`,
        `${base.replace('127.0.0.1', 'localhost')}/mcp`,
        `${base.toUpperCase()}/mcp`,
        'https://evil.com/mcp',
      ]) {
        const res = await manualGet(olga.client, `/oauth/authorize?${authorizeQuery(clientId, { resource: r })}`);
        expect(res.status, r).toBe(302);
        expect(new URL(res.headers.get('location')!).searchParams.get('error'), r).toBe('invalid_target');
      }
    });

    it('client_name, state and redirect URI cannot inject markup into the consent page', async () => {
      const evil = '<script>alert(1)</script><img src=x onerror=alert(2)>"\'';
      const reg = await register(base, {
        redirect_uris: [`http://127.0.0.1:4000/cb?x="><script>alert(3)</script>`],
        client_name: evil,
        token_endpoint_auth_method: 'none',
      });
      expect(reg.status, JSON.stringify(reg.body)).toBe(201);
      const q = authorizeQuery(reg.body.client_id, { redirect: reg.body.redirect_uris[0], state: '"><script>alert(4)</script>' });
      const page = await olga.client.get(`/oauth/authorize?${q}`, { accept: 'text/html' });
      expect(page.status).toBe(200);
      expect(page.text).not.toMatch(/<script|<img/);
      expect(page.headers.get('content-security-policy')).toMatch(/frame-ancestors 'none'/);
      expect(page.headers.get('content-security-policy')).toMatch(/default-src 'none'/);
      expect(page.headers.get('content-security-policy') ?? '').not.toMatch(/script-src/);
    });

    it('client_name with bidi overrides or control characters is refused (it would spoof the consent page)', async () => {
      for (const name of ['abc\u202Efdp.exe moc.elgoog', 'Claude\u2066evil\u2069', 'a\u0000b', 'a\u001bb', 'a\u200Fb']) {
        const r = await register(base, { redirect_uris: [REDIRECT], client_name: name, token_endpoint_auth_method: 'none' });
        expect(r.status, JSON.stringify(name)).toBe(400);
        expect(r.body.error, JSON.stringify(name)).toBe('invalid_client_metadata');
      }
    });

    it('the consent page (it carries the CSRF token) is not cached', async () => {
      const clientId = await publicClient();
      const page = await olga.client.get(`/oauth/authorize?${authorizeQuery(clientId)}`, { accept: 'text/html' });
      expect(page.status).toBe(200);
      expect(page.headers.get('cache-control') ?? '').toMatch(/no-store/);
    });

    it('GET never approves, whatever its parameters', async () => {
      const clientId = await publicClient();
      const q = authorizeQuery(clientId);
      q.set('decision', 'approve');
      q.set('csrf_token', olga.client.csrf!);
      const res = await olga.client.get(`/oauth/authorize?${q}`, { accept: 'text/html' });
      expect(res.status).toBe(200);
      expect(res.headers.get('location')).toBeNull();
      const n = await s.ctx.store.db.selectFrom('oauth_grants').select('id').where('client_id', '=', clientId).execute();
      expect(n.length).toBe(0);
    });
  });

  describe('resource binding and faces', () => {
    it('a /mcp token: own workspace only; never another workspace, a case or encoding variant of another', async () => {
      const t = await tokensFor(olga.client);
      expect((await mcp('/mcp', t.access)).status).toBe(200);
      expect((await mcp('/mcp?toolset=extended', t.access)).status).toBe(200);
      expect((await mcp(`/w/${olga.workspace.slug}/mcp`, t.access)).status).toBe(200);
      for (const path of [
        `/w/${other.workspace.slug}/mcp`,
        `/w/${other.workspace.slug.toUpperCase()}/mcp`,
        `/w/${encodeURIComponent(other.workspace.slug).replace(/^./, (c) => `%${c.charCodeAt(0).toString(16)}`)}/mcp`,
        '/w/no-such/mcp',
      ]) {
        const r = await mcp(path, t.access);
        expect(r.status, path).not.toBe(200);
        expect(r.status, path).toBeLessThan(500);
      }
      const who = await mcp('/mcp', t.access);
      expect(JSON.stringify(who.body)).toContain(olga.workspace.slug);
      expect(JSON.stringify(who.body)).not.toContain(other.workspace.slug);
    });

    it('a /w/<slug>/mcp token works there only (not on /mcp, not as another workspace)', async () => {
      const t = await tokensFor(olga.client, { resource: `${base}/w/${olga.workspace.slug}/mcp` });
      expect((await mcp(`/w/${olga.workspace.slug}/mcp`, t.access)).status).toBe(200);
      expect((await mcp(`/w/${olga.workspace.slug}/mcp?toolset=extended`, t.access)).status).toBe(200);
      expect((await mcp('/mcp', t.access)).status).toBe(401);
      expect((await mcp(`/w/${other.workspace.slug}/mcp`, t.access)).status).toBe(401);
      expect((await mcp(`/w/${olga.workspace.slug.toUpperCase()}/mcp`, t.access)).status).not.toBe(200);
    });

    it('resource on the token request must equal the authorized one', async () => {
      const c = await codeFor(olga.client);
      for (const r of [`${base}/w/${olga.workspace.slug}/mcp`, `${base}/w/${other.workspace.slug}/mcp`, `${base}/mcp/`, 'https://evil.com/mcp']) {
        const x = await exchange(c.clientId, c.code, c.verifier, { resource: r });
        expect(x.body.error, r).toBe('invalid_target');
      }
      const ok = await exchange(c.clientId, c.code, c.verifier, { resource: `${base}/mcp` });
      expect(ok.status).toBe(200);
      const widened = await form(base, '/oauth/token', {
        grant_type: 'refresh_token',
        client_id: c.clientId,
        refresh_token: ok.body.refresh_token,
        resource: `${base}/w/${other.workspace.slug}/mcp`,
      });
      expect(widened.body.error).toBe('invalid_target');
    });

    it('an access or refresh token is refused on /api/v1, /api/auth, the web pages and the consent endpoint', async () => {
      const t = await tokensFor(olga.client);
      for (const token of [t.access, t.refresh]) {
        const api = new Client(base, token);
        expect((await api.get('/api/v1/me')).status).toBe(401);
        expect((await api.get('/api/v1/me/oauth-clients')).status).toBe(401);
        expect((await api.delete('/api/v1/me/oauth-clients/og_x')).status).toBe(401);
        expect((await api.post('/api/v1/nodes', { path: 'x/a.md', content: '# a' })).status).toBe(401);
        expect((await api.get('/api/auth/me')).status).toBe(401);
        // A consent page needs a session: a bearer token does not make one.
        const clientId = await publicClient();
        const consentPage = await fetch(`${base}/oauth/authorize?${authorizeQuery(clientId)}`, {
          redirect: 'manual',
          headers: { authorization: `Bearer ${token}`, accept: 'application/json' },
        });
        expect(consentPage.status).toBe(401);
      }
      // And a refresh token is no access token on /mcp.
      expect((await mcp('/mcp', t.refresh)).status).toBe(401);
    });

    it('an agent key cannot list or revoke OAuth connections (session only)', async () => {
      const k = await olga.client.post('/api/v1/principals', {
        name: 'bot',
        ceiling: 'confidential',
        grants: [{ action: 'admin', scope: '*', ceiling: 'confidential' }],
      });
      expect(k.status, k.text).toBe(201);
      const key = await olga.client.post(`/api/v1/principals/${k.body.id}/tokens`, { name: 'k' });
      const bot = new Client(base, key.body.key);
      expect((await bot.get('/api/v1/me/oauth-clients')).status).toBeGreaterThanOrEqual(401);
      expect((await bot.delete('/api/v1/me/oauth-clients/og_x')).status).toBeGreaterThanOrEqual(401);
    });
  });

  describe('refresh tokens and revocation', () => {
    it('a refresh token stolen by another client is refused, and the stolen token still works for its owner', async () => {
      const t = await tokensFor(olga.client);
      const thief = await publicClient();
      const r = await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: thief, refresh_token: t.refresh });
      expect(r.body.error).toBe('invalid_grant');
      expect((await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: t.clientId, refresh_token: t.refresh })).status).toBe(200);
    });

    it('a rotated refresh token presented again revokes the whole grant', async () => {
      const t = await tokensFor(olga.client);
      const one = await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: t.clientId, refresh_token: t.refresh });
      expect(one.status).toBe(200);
      const reuse = await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: t.clientId, refresh_token: t.refresh });
      expect(reuse.body.error).toBe('invalid_grant');
      expect((await mcp('/mcp', one.body.access_token)).status).toBe(401);
      expect((await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: t.clientId, refresh_token: one.body.refresh_token })).body.error).toBe(
        'invalid_grant',
      );
    });

    it('two concurrent refreshes with one token: at most one wins, and then the grant is revoked', async () => {
      const t = await tokensFor(olga.client);
      const all = await Promise.all(
        Array.from({ length: 4 }, () => form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: t.clientId, refresh_token: t.refresh })),
      );
      const wins = all.filter((r) => r.status === 200);
      expect(wins.length).toBe(1);
      expect((await mcp('/mcp', wins[0]!.body.access_token)).status).toBe(401);
    });

    it('another client cannot revoke a token; the owner can', async () => {
      const t = await tokensFor(olga.client);
      const thief = await publicClient();
      const r = await form(base, '/oauth/revoke', { client_id: thief, token: t.access });
      expect(r.status).toBe(200);
      expect((await mcp('/mcp', t.access)).status).toBe(200);
      expect((await form(base, '/oauth/revoke', { client_id: thief, token: t.refresh })).status).toBe(200);
      expect((await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: t.clientId, refresh_token: t.refresh })).status).toBe(200);
    });

    it('a refresh grant is refused to a client that registered without the refresh_token grant type', async () => {
      const clientId = await publicClient({ grant_types: ['authorization_code'] });
      const t = await tokensFor(olga.client, { clientId });
      const r = await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: clientId, refresh_token: t.refresh });
      expect(r.status).toBe(400);
      expect(r.body.error).toBe('unauthorized_client');
    });

    it('an expired refresh token is refused', async () => {
      const t = await tokensFor(olga.client);
      await s.ctx.store.db
        .updateTable('oauth_tokens')
        .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
        .where('kind', '=', 'refresh')
        .where('used_at', 'is', null)
        .where('revoked_at', 'is', null)
        .execute();
      const r = await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: t.clientId, refresh_token: t.refresh });
      expect(r.body.error).toBe('invalid_grant');
    });

    it('another person cannot see or revoke my connection', async () => {
      await tokensFor(olga.client);
      const mine = await olga.client.get('/api/v1/me/oauth-clients');
      const id = mine.body.clients[0].id as string;
      expect((await other.client.delete(`/api/v1/me/oauth-clients/${id}`)).status).toBe(404);
      const theirs = await other.client.get('/api/v1/me/oauth-clients');
      expect(theirs.body.clients.map((c: { id: string }) => c.id)).not.toContain(id);
      // And the DELETE needs the CSRF header like every unsafe session request.
      const noCsrf = await olga.client.request('DELETE', `/api/v1/me/oauth-clients/${id}`, { csrf: false });
      expect(noCsrf.status).toBe(403);
    });
  });

  describe('dead grants', () => {
    it('a deleted account’s tokens and refresh tokens are dead', async () => {
      const p = await signupHuman(base, 'Dan');
      const t = await tokensFor(p.client);
      expect((await mcp('/mcp', t.access)).status).toBe(200);
      await s.ctx.store.db.updateTable('principals').set({ deleted_at: new Date().toISOString() }).where('id', '=', p.id).execute();
      expect((await mcp('/mcp', t.access)).status).toBe(401);
      expect((await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: t.clientId, refresh_token: t.refresh })).body.error).toBe(
        'invalid_grant',
      );
    });

    it('a removed member’s code cannot be exchanged; a demoted one’s refresh gives viewer powers only', async () => {
      const ed = await joinAs(olga.client, olga.workspace.slug, 'editor', 'Ed');
      const c = await codeFor(ed.client, { resource: `${base}/w/${olga.workspace.slug}/mcp` });
      expect((await olga.client.delete(`/api/v1/workspaces/${olga.workspace.slug}/members/${ed.id}`)).status).toBe(200);
      const x = await exchange(c.clientId, c.code, c.verifier);
      expect(x.body.error).toBe('invalid_grant');
    });

    it('a removed member’s tokens stay dead when they are invited back', async () => {
      const host = await signupHuman(base, 'Hana');
      const ed = await joinAs(host.client, host.workspace.slug, 'editor', 'Emil');
      const t = await tokensFor(ed.client, { resource: `${base}/w/${host.workspace.slug}/mcp` });
      expect((await mcp(`/w/${host.workspace.slug}/mcp`, t.access)).status).toBe(200);
      expect((await host.client.delete(`/api/v1/workspaces/${host.workspace.slug}/members/${ed.id}`)).status).toBe(200);
      expect((await mcp(`/w/${host.workspace.slug}/mcp`, t.access)).status).toBe(401);
      // The owner invites the same person back (a new invite, accepted by the same account).
      const inv = await host.client.post(`/api/v1/workspaces/${host.workspace.slug}/invites`, { role: 'editor' });
      expect(inv.status, inv.text).toBe(201);
      ed.client.workspace = undefined;
      expect((await ed.client.post(`/api/v1/invites/${inv.body.token}/accept`)).status).toBe(200);
      // The connection was ended by the removal: rejoining must not bring it back.
      expect((await mcp(`/w/${host.workspace.slug}/mcp`, t.access)).status).toBe(401);
      expect((await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: t.clientId, refresh_token: t.refresh })).body.error).toBe(
        'invalid_grant',
      );
    });

    it('a code whose connection the person revoked before the exchange gives nothing', async () => {
      const p = await signupHuman(base, 'Rhea');
      const c = await codeFor(p.client);
      const list = await p.client.get('/api/v1/me/oauth-clients');
      for (const conn of list.body.clients) expect((await p.client.delete(`/api/v1/me/oauth-clients/${conn.id}`)).status).toBe(200);
      expect((await exchange(c.clientId, c.code, c.verifier)).body.error).toBe('invalid_grant');
    });

    it('after a lockdown, refresh tokens of before are refused', async () => {
      const p = await signupHuman(base, 'Lou');
      const t = await tokensFor(p.client);
      expect((await p.client.post('/api/auth/stepup', { password: 'correct horse battery' })).status).toBe(200);
      expect((await p.client.post(`/api/v1/workspaces/${p.workspace.slug}/lockdown`)).status).toBe(200);
      expect((await mcp('/mcp', t.access)).status).toBe(401);
      expect((await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: t.clientId, refresh_token: t.refresh })).body.error).toBe(
        'invalid_grant',
      );
    });
  });

  describe('malformed input', () => {
    it('repeated, array and object parameters are refused with 400, never a 500', async () => {
      const c = await codeFor(olga.client);
      const repeated = await fetch(`${base}/oauth/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: `grant_type=authorization_code&client_id=${c.clientId}&code=${c.code}&code=${c.code}&code_verifier=${c.verifier}&redirect_uri=${encodeURIComponent(REDIRECT)}`,
      });
      expect(repeated.status).toBe(400);
      for (const body of [
        { grant_type: ['authorization_code'] },
        { grant_type: { a: 1 } },
        { grant_type: 'authorization_code', client_id: c.clientId, code: { $ne: null } },
        { grant_type: 'refresh_token', client_id: c.clientId, refresh_token: 1 },
        [1, 2],
        'str',
        null,
      ]) {
        const res = await fetch(`${base}/oauth/token`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
        expect(res.status, JSON.stringify(body)).toBeGreaterThanOrEqual(400);
        expect(res.status, JSON.stringify(body)).toBeLessThan(500);
      }
      const q = `${authorizeQuery(c.clientId)}&state=second`;
      const dup = await olga.client.get(`/oauth/authorize?${q}`, { accept: 'application/json' });
      expect(dup.status).toBe(400);
      for (const body of [{ client_id: [c.clientId] }, { client_id: { x: 1 } }, [1], 'x']) {
        const res = await olga.client.post('/oauth/authorize', body, { accept: 'application/json' });
        expect(res.status, JSON.stringify(body)).toBeGreaterThanOrEqual(400);
        expect(res.status, JSON.stringify(body)).toBeLessThan(500);
      }
      // A decision that is not the string "approve" never approves.
      const page = await descriptor(olga.client, authorizeQuery(c.clientId));
      for (const decision of [['approve'], { approve: true }, 'APPROVE', 'approve ', true]) {
        const res = await olga.client.post('/oauth/authorize', { ...page.body.answer.fields, decision }, { accept: 'application/json' });
        expect(res.text, JSON.stringify(decision)).not.toContain('code=');
        expect(res.status, JSON.stringify(decision)).toBeLessThan(500);
      }
      for (const body of [
        [],
        'x',
        1,
        null,
        { redirect_uris: 'http://127.0.0.1/cb' },
        { redirect_uris: [1] },
        { redirect_uris: [REDIRECT], client_name: { a: 1 } },
        { redirect_uris: [REDIRECT], token_endpoint_auth_method: 'private_key_jwt' },
        { redirect_uris: [REDIRECT], grant_types: ['implicit'] },
        { redirect_uris: [REDIRECT], response_types: ['token'] },
        { redirect_uris: Array(11).fill(REDIRECT) },
      ]) {
        const r = await register(base, body);
        expect(r.status, JSON.stringify(body)).toBe(400);
      }
    });

    it('invalid percent-encoding and non-UTF-8 bytes answer 400, never a 500', async () => {
      const clientId = await publicClient();
      for (const tail of ['state=%ff%fe', 'state=%', 'state=%zz', 'client_id=%c3%28']) {
        const res = await fetch(`${base}/oauth/authorize?${authorizeQuery(clientId)}&${tail}`.replace(/&state=st/, ''), {
          redirect: 'manual',
          headers: { cookie: `svc_session=${olga.client.cookies.get('svc_session')}`, accept: 'application/json' },
        });
        expect(res.status, tail).toBeLessThan(500);
      }
      for (const raw of [
        'grant_type=%ff&client_id=x',
        'grant_type=authorization_code&client_id=%',
        Buffer.from([0x67, 0x72, 0x61, 0x6e, 0x74, 0x3d, 0xff, 0xfe]),
      ]) {
        const res = await fetch(`${base}/oauth/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: raw });
        expect(res.status, String(raw)).toBeGreaterThanOrEqual(400);
        expect(res.status, String(raw)).toBeLessThan(500);
      }
      const badJson = await fetch(`${base}/oauth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"redirect_uris":' });
      expect(badJson.status).toBe(400);
    });

    it('oversized bodies and parameters are refused', async () => {
      const big = await fetch(`${base}/oauth/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: `grant_type=refresh_token&client_id=x&refresh_token=${'a'.repeat(70_000)}`,
      });
      expect(big.status).toBe(413);
      const bigReg = await register(base, { redirect_uris: [REDIRECT], client_name: 'x'.repeat(70_000) });
      expect(bigReg.status).toBe(413);
      const longUri = await register(base, { redirect_uris: [`http://127.0.0.1/${'a'.repeat(2100)}`] });
      expect(longUri.status).toBe(400);
      const longName = await register(base, { redirect_uris: [REDIRECT], client_name: 'x'.repeat(201) });
      expect(longName.status).toBe(400);
      const clientId = await publicClient();
      const longState = await manualGet(olga.client, `/oauth/authorize?${authorizeQuery(clientId, { state: 's'.repeat(2001) })}`);
      expect(new URL(longState.headers.get('location')!).searchParams.get('error')).toBe('invalid_request');
      const longClient = await olga.client.get(`/oauth/authorize?${authorizeQuery('oc_' + 'a'.repeat(5000))}`, { accept: 'application/json' });
      expect(longClient.status).toBe(400);
    });

    it('malformed Basic credentials, and a public client sending a secret, are invalid_client', async () => {
      const clientId = await publicClient();
      for (const auth of ['Basic', 'Basic !!!', `Basic ${Buffer.from('nocolon').toString('base64')}`, `Basic ${Buffer.from('%zz:x').toString('base64')}`]) {
        const r = await form(base, '/oauth/token', { grant_type: 'refresh_token', refresh_token: 'oar_x' }, { authorization: auth });
        expect(r.status, auth).toBe(401);
        expect(r.body.error, auth).toBe('invalid_client');
      }
      const withSecret = await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: clientId, client_secret: 'x', refresh_token: 'oar_x' });
      expect(withSecret.body.error).toBe('invalid_client');
    });
  });

  describe('error pages and discovery', () => {
    it('parameter names and values echoed in error pages are escaped', async () => {
      const k = '<script>alert(1)</script>';
      const q = `client_id=${encodeURIComponent(k)}&${encodeURIComponent(k)}=1&${encodeURIComponent(k)}=2`;
      const res = await manualGet(olga.client, `/oauth/authorize?${q}`, { accept: 'text/html' });
      expect(res.status).toBe(400);
      expect(res.text).not.toContain('<script>alert');
    });

    it('protected resource metadata does not tell which workspace slugs exist', async () => {
      const known = await (await fetch(`${base}/.well-known/oauth-protected-resource/w/${olga.workspace.slug}/mcp`)).json();
      const unknown = await (await fetch(`${base}/.well-known/oauth-protected-resource/w/no-such-ws/mcp`)).json();
      expect({ ...known, resource: 'x' }).toEqual({ ...unknown, resource: 'x' });
      const a = await fetch(`${base}/w/${olga.workspace.slug}/mcp`, {
        method: 'POST',
        headers: { authorization: 'Bearer oa_nope', 'content-type': 'application/json' },
        body: '{}',
      });
      const b = await fetch(`${base}/w/no-such-ws/mcp`, {
        method: 'POST',
        headers: { authorization: 'Bearer oa_nope', 'content-type': 'application/json' },
        body: '{}',
      });
      expect(a.status).toBe(b.status);
    });

    it('no access token in the query string, and no CORS grant to other origins', async () => {
      const t = await tokensFor(olga.client);
      expect(
        (
          await fetch(`${base}/mcp?access_token=${t.access}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
            body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
          })
        ).status,
      ).toBe(401);
      const pre = await fetch(`${base}/oauth/token`, { method: 'OPTIONS', headers: { origin: 'https://evil.com', 'access-control-request-method': 'POST' } });
      expect(pre.headers.get('access-control-allow-origin')).toBeNull();
      const consent = await fetch(`${base}/oauth/authorize?${authorizeQuery(t.clientId)}`, {
        headers: { origin: 'https://evil.com', accept: 'application/json', cookie: `svc_session=${olga.client.cookies.get('svc_session')}` },
      });
      expect(consent.headers.get('access-control-allow-origin')).toBeNull();
    });
  });

  describe('client authentication and enumeration', () => {
    it('an unknown client and a stale unconsented one answer alike', async () => {
      const stale = await publicClient();
      await s.ctx.store.db
        .updateTable('oauth_clients')
        .set({ created_at: new Date(Date.now() - 25 * 3600_000).toISOString() })
        .where('id', '=', stale)
        .execute();
      const a = await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: stale, refresh_token: 'oar_x' });
      const b = await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: 'oc_unknown', refresh_token: 'oar_x' });
      expect([a.status, a.body]).toEqual([b.status, b.body]);
      const pa = await olga.client.get(`/oauth/authorize?${authorizeQuery(stale)}`, { accept: 'application/json' });
      const pb = await olga.client.get(`/oauth/authorize?${authorizeQuery('oc_unknown')}`, { accept: 'application/json' });
      expect([pa.status, pa.body]).toEqual([pb.status, pb.body]);
    });

    it('a confidential client needs its secret, by its registered method only', async () => {
      const reg = await register(base, { redirect_uris: [REDIRECT], token_endpoint_auth_method: 'client_secret_basic' });
      const id = reg.body.client_id as string;
      const secret = reg.body.client_secret as string;
      const basic = (i: string, sec: string) => `Basic ${Buffer.from(`${encodeURIComponent(i)}:${encodeURIComponent(sec)}`).toString('base64')}`;
      const noSecret = await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: id, refresh_token: 'oar_x' });
      expect(noSecret.status).toBe(401);
      const postMethod = await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: id, client_secret: secret, refresh_token: 'oar_x' });
      expect(postMethod.status).toBe(401);
      const wrong = await form(base, '/oauth/token', { grant_type: 'refresh_token', refresh_token: 'oar_x' }, { authorization: basic(id, `${secret}x`) });
      expect(wrong.status).toBe(401);
      const mismatch = await form(
        base,
        '/oauth/token',
        { grant_type: 'refresh_token', client_id: 'oc_other', refresh_token: 'oar_x' },
        { authorization: basic(id, secret) },
      );
      expect(mismatch.status).toBe(401);
      const right = await form(base, '/oauth/token', { grant_type: 'refresh_token', refresh_token: 'oar_x' }, { authorization: basic(id, secret) });
      expect(right.status).toBe(400);
      expect(right.body.error).toBe('invalid_grant');
      // Revocation authenticates the same way.
      expect((await form(base, '/oauth/revoke', { client_id: id, token: 'oa_x' })).status).toBe(401);
    });

    it('token endpoint answers are not cached, errors included', async () => {
      const r = await form(base, '/oauth/token', { grant_type: 'refresh_token', client_id: 'oc_unknown', refresh_token: 'oar_x' });
      expect(r.headers.get('cache-control')).toMatch(/no-store/);
    });
  });
});

describe.each(testEngines())('OAuth rate limits (%s)', (engine) => {
  let s: TestServer;
  let base: string;

  beforeAll(async () => {
    s = await startTestServer(engine, { RATE_LIMITS: 'on', RATE_LIMIT_OAUTH_REGISTER_PER_MIN: '3', RATE_LIMIT_OAUTH_TOKEN_PER_MIN: '4' });
    base = s.url;
  });
  afterAll(async () => s?.stop());

  it('registration is limited per IP; X-Forwarded-For does not pick another bucket', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await register(base, { redirect_uris: [REDIRECT], token_endpoint_auth_method: 'none' }, { 'x-forwarded-for': `10.0.0.${i}` });
      statuses.push(r.status);
    }
    expect(statuses.slice(0, 3)).toEqual([201, 201, 201]);
    expect(statuses.slice(3)).toEqual([429, 429, 429]);
  });

  it('the token endpoint is limited per IP, spellings of its path included', async () => {
    const statuses: number[] = [];
    for (const path of ['/oauth/token', '/oauth/token', '/oauth/%74oken', '/oauth/token?x=1', '/oauth/token', '/oauth/token/', '/OAUTH/TOKEN']) {
      statuses.push((await form(base, path, { grant_type: 'refresh_token', client_id: 'oc_x', refresh_token: 'oar_x' })).status);
    }
    expect(statuses.slice(0, 4).every((x) => x !== 429)).toBe(true);
    expect(statuses.slice(4).every((x) => x === 429 || x === 404)).toBe(true);
    expect(statuses[4]).toBe(429);
  });
});

const CHROMIUM = '/usr/bin/chromium';
if (!fs.existsSync(CHROMIUM)) {
  if (process.env.CI) throw new Error(`${CHROMIUM} is missing: CI requires Debian's chromium for the browser tests (.ci/run installs it)`);
  console.warn(`\n!!! ${CHROMIUM} not found: the BROWSER attack tests of the OAuth consent page are SKIPPED on this machine (apt-get install chromium) !!!\n`);
}

describe.skipIf(!fs.existsSync(CHROMIUM))('OAuth consent in a real browser: every redirect URI registration accepts can be answered (chromium, sqlite)', () => {
  let s: TestServer;
  let email: string;

  beforeAll(async () => {
    s = await startTestServer('sqlite');
    email = `ipv6-${process.pid}-${Date.now()}@example.com`;
    expect((await new Client(s.url).post('/api/v1/auth/signup', { email, password: 'correct horse battery', name: 'Ivy' })).status).toBe(201);
  });
  afterAll(async () => s?.stop());

  it('an IPv6 loopback redirect URI (http://[::1]:port) receives its code after Allow', async () => {
    const redirect = 'http://[::1]:53690/cb';
    const reg = await register(s.url, { redirect_uris: [redirect], client_name: 'ipv6 client', token_endpoint_auth_method: 'none' });
    expect(reg.status).toBe(201);
    const { challenge } = pkce();
    const q = new URLSearchParams({
      response_type: 'code',
      client_id: reg.body.client_id,
      redirect_uri: redirect,
      code_challenge: challenge,
      code_challenge_method: 'S256',
      state: 'x',
      resource: `${s.url}/mcp`,
    });
    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
    });
    try {
      const page = await (await browser.newContext({ javaScriptEnabled: false })).newPage();
      let landed: URL | undefined;
      await page.route(`${redirect}**`, async (route) => {
        landed = new URL(route.request().url());
        await route.fulfill({ status: 200, contentType: 'text/plain', body: 'ok' });
      });
      await page.goto(`${s.url}/oauth/authorize?${q}`);
      await page.getByLabel('Email').fill(email);
      await page.getByLabel('Password').fill('correct horse battery');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForURL('**/oauth/authorize?**');
      await page.getByRole('button', { name: 'Allow' }).click();
      // Chromium ignores "http://[::1]:53690" in CSP form-action (not a valid host-source) and then blocks the form.
      await expect.poll(() => landed?.searchParams.get('code') ?? null, { timeout: 5_000 }).toMatch(/^oac_/);
    } finally {
      await browser.close();
    }
  });
});
