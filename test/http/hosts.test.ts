import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config.js';
import { checkHosts, parseAllowedHosts, parseHost } from '../../src/http/hosts.js';
import { testEngines } from '../support/engines.js';
import { startTestServer, type TestServer } from '../support/server.js';

interface Raw {
  status: number;
  body: any;
}

/** fetch forbids setting Host, so this goes through node's http client. */
function raw(base: string, method: string, path: string, headers: Record<string, string>, body?: string): Promise<Raw> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: u.hostname, port: u.port, method, path, headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => {
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {
            /* not JSON */
          }
          resolve({ status: res.statusCode ?? 0, body: parsed });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('ALLOWED_HOSTS parsing', () => {
  it.each([
    ['vault.example.com', { name: 'vault.example.com', port: null }],
    ['Vault.Example.COM:8443', { name: 'vault.example.com', port: 8443 }],
    ['vault.example.com.', { name: 'vault.example.com', port: null }],
    ['127.0.0.1:80', { name: '127.0.0.1', port: 80 }],
    ['[::1]:8787', { name: '::1', port: 8787 }],
    ['[::1]', { name: '::1', port: null }],
    ['::1', { name: '::1', port: null }],
  ])('%s', (input, expected) => {
    expect(parseHost(input)).toEqual(expected);
  });

  it.each(['', 'a:b', 'x:70000', '[::1', 'a b', 'http://x', 'a@b'])('refuses %j', (input) => {
    expect(parseHost(input)).toBeNull();
  });

  it('a bad entry refuses the start instead of opening a hole', () => {
    expect(() => parseAllowedHosts(['vault.example.com', 'http://x/'])).toThrow(ConfigError);
    expect(() => parseAllowedHosts(['vault.example.com', 'http://x/'])).toThrow(/ALLOWED_HOSTS/);
  });

  const allowed = parseAllowedHosts(['vault.example.com', 'api.example.com:8443', '127.0.0.1']);
  const base = { method: 'GET', url: '/api/v1/whoami', protocol: 'http', origin: undefined };
  it.each([
    ['vault.example.com', 'http', null],
    ['VAULT.example.com:9999', 'http', null],
    ['api.example.com:8443', 'http', null],
    ['api.example.com', 'http', 'forbidden_host'],
    ['api.example.com:443', 'https', 'forbidden_host'],
    ['127.0.0.1:1234', 'http', null],
    ['evil.example.com', 'http', 'forbidden_host'],
    ['vault.example.com.evil.com', 'http', 'forbidden_host'],
    ['', 'http', 'forbidden_host'],
  ] as const)('Host %j over %s → %s', (host, protocol, verdict) => {
    expect(checkHosts(allowed, { ...base, host, protocol })).toBe(verdict);
  });

  it.each([
    ['https://vault.example.com', null],
    ['https://VAULT.example.com:444', null],
    ['https://api.example.com:8443', null],
    ['https://api.example.com', 'forbidden_origin'],
    ['null', 'forbidden_origin'],
    ['https://evil.example.com', 'forbidden_origin'],
    ['file://', 'forbidden_origin'],
  ] as const)('Origin %j → %s', (origin, verdict) => {
    expect(checkHosts(allowed, { ...base, host: 'vault.example.com', origin })).toBe(verdict);
  });

  it('probes are exempt from the Host check only', () => {
    expect(checkHosts(allowed, { ...base, url: '/healthz', host: '10.1.2.3:8787' })).toBeNull();
    expect(checkHosts(allowed, { ...base, method: 'HEAD', url: '/readyz?x=1', host: '10.1.2.3' })).toBeNull();
    expect(checkHosts(allowed, { ...base, url: '/healthz', host: '10.1.2.3', origin: 'https://evil.example.com' })).toBe('forbidden_origin');
    expect(checkHosts(allowed, { ...base, method: 'POST', url: '/healthz', host: '10.1.2.3' })).toBe('forbidden_host');
  });

  it('an empty list allows anything', () => {
    expect(checkHosts([], { ...base, host: 'evil.example.com', origin: 'null' })).toBeNull();
  });
});

describe.each(testEngines())('ALLOWED_HOSTS over HTTP (%s)', (engine) => {
  let s: TestServer;
  let open: TestServer;
  beforeAll(async () => {
    [s, open] = await Promise.all([startTestServer(engine, { ALLOWED_HOSTS: 'vault.example.com,127.0.0.1' }), startTestServer(engine)]);
  });
  afterAll(async () => {
    await Promise.all([s?.stop(), open?.stop()]);
  });

  it('refuses a foreign Host with 403 forbidden_host, on every kind of route', async () => {
    for (const [method, path] of [
      ['GET', '/api/v1/whoami'],
      ['GET', '/api/v1/no-such-route'],
      ['GET', '/no-such-page'],
      ['POST', '/api/auth/login'],
      ['GET', '/api/v1/openapi.json'],
    ] as const) {
      const r = await raw(s.url, method, path, { host: 'evil.example.com' }, method === 'POST' ? '{"email":"a@b.c","password":"x"}' : undefined);
      expect(r.status, `${method} ${path}`).toBe(403);
      expect(r.body).toEqual({ error: { code: 'forbidden_host', message: expect.any(String) }, code: 'forbidden_host' });
    }
  });

  it('checks the Host before credentials: a bad key still gets forbidden_host, not 401', async () => {
    const r = await raw(s.url, 'GET', '/api/v1/whoami', { host: 'evil.example.com', authorization: 'Bearer ak_nope' });
    expect(r.status).toBe(403);
    expect(r.body.code).toBe('forbidden_host');
  });

  it('refuses a foreign Origin with 403 forbidden_origin', async () => {
    const r = await raw(
      s.url,
      'POST',
      '/api/auth/login',
      { host: 'vault.example.com', origin: 'https://evil.example.com' },
      '{"email":"a@b.c","password":"x"}',
    );
    expect(r.status).toBe(403);
    expect(r.body).toEqual({ error: { code: 'forbidden_origin', message: expect.any(String) }, code: 'forbidden_origin' });
    const nul = await raw(s.url, 'GET', '/api/v1/whoami', { host: 'vault.example.com', origin: 'null' });
    expect(nul.body.code).toBe('forbidden_origin');
  });

  it('lets an allowed Host and Origin through, case-insensitively and on any port', async () => {
    const port = new URL(s.url).port;
    const cases: Record<string, string>[] = [
      { host: 'vault.example.com' },
      { host: 'VAULT.Example.Com:8443' },
      { host: `127.0.0.1:${port}` },
      { host: 'vault.example.com', origin: 'https://vault.example.com' },
      { host: 'vault.example.com', origin: 'HTTPS://Vault.Example.COM:8443' },
      { host: `127.0.0.1:${port}`, origin: `http://127.0.0.1:${port}` },
    ];
    for (const headers of cases) {
      const r = await raw(s.url, 'GET', '/api/v1/whoami', headers);
      // Past the host check: the route now asks for credentials.
      expect(r.status, JSON.stringify(headers)).toBe(401);
    }
    const login = await raw(
      s.url,
      'POST',
      '/api/auth/login',
      { host: 'vault.example.com', origin: 'https://vault.example.com' },
      '{"email":"a@b.c","password":"wrong password"}',
    );
    expect(login.status).toBe(401);
    expect(login.body.code).toBe('invalid_credentials');
  });

  it('lets load-balancer probes with an IP Host reach /healthz and /readyz', async () => {
    expect((await raw(s.url, 'GET', '/healthz', { host: '10.0.0.7:8787' })).status).toBe(200);
    expect((await raw(s.url, 'GET', '/readyz', { host: '10.0.0.7' })).status).toBe(200);
    expect((await raw(s.url, 'GET', '/healthz', { host: '10.0.0.7', origin: 'https://evil.example.com' })).body.code).toBe('forbidden_origin');
  });

  it('fetch from an allowed address works as usual', async () => {
    const r = await fetch(`${s.url}/healthz`);
    expect(r.status).toBe(200);
  });

  it('without ALLOWED_HOSTS any Host and Origin pass', async () => {
    const r = await raw(open.url, 'GET', '/api/v1/whoami', { host: 'evil.example.com', origin: 'https://evil.example.com' });
    expect(r.status).toBe(401);
    expect(r.body.code).not.toMatch(/forbidden/);
  });
});
