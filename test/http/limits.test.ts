import fs from 'node:fs';
import path from 'node:path';
import Fastify, { type FastifyBaseLogger } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { clientKey } from '../../src/http/client-ip.js';
import { registerRateLimits } from '../../src/http/limits.js';
import type { RunningServer } from '../../src/server.js';
import { openStore, type Store } from '../../src/store/db.js';
import { openRateLimitStore, RATE_LIMIT_FILE, type RateLimitStore } from '../../src/store/rate-limits.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { Client, createAgentWithKey, signupHuman, startServerOn, startTestServer, type Res, type TestServer } from '../support/server.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const PASSWORD = 'velvet otter juggles 7 lanterns';
let n = 0;
const email = (tag: string) => `${tag}-${process.pid}-${++n}-${Date.now()}@example.com`;

function expectLimited(r: Res, maxRetry: number, body: 'rest' | 'oauth' | 'git' = 'rest'): void {
  expect(r.status).toBe(429);
  // The OAuth endpoints answer errors in OAuth's own body (RFC 6749 §5.2); /git in text, which
  // git shows its user as `remote:` lines.
  if (body === 'oauth') expect(r.body).toEqual({ error: 'rate_limited', error_description: expect.any(String) });
  else if (body === 'git') {
    expect(r.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(r.text).toMatch(/^Too many requests: the limit is \d+ per minute per IP/);
  } else expect(r.body).toEqual({ error: { code: 'rate_limited', message: expect.any(String) }, code: 'rate_limited' });
  const retry = r.headers.get('retry-after');
  expect(retry).toMatch(/^\d+$/);
  expect(Number(retry)).toBeGreaterThanOrEqual(1);
  expect(Number(retry)).toBeLessThanOrEqual(maxRetry);
  expect(r.headers.get('ratelimit-remaining')).toBe('0');
}

/** A second node of the same deployment: same DATA_DIR (SQLite) or the same DATABASE_URL. */
const secondNode = (first: TestServer, env: Record<string, string>): Promise<RunningServer> => startServerOn(first.ctx.config, { RATE_LIMITS: 'on', ...env });

/** A logger that records what it is told. */
function recordingLogger() {
  const lines: { level: string; args: unknown[] }[] = [];
  const rec =
    (level: string) =>
    (...args: unknown[]) =>
      void lines.push({ level, args });
  const log = {
    level: 'info',
    fatal: rec('fatal'),
    error: rec('error'),
    warn: rec('warn'),
    info: rec('info'),
    debug: rec('debug'),
    trace: rec('trace'),
    silent: () => {},
    child: () => log,
  } as unknown as FastifyBaseLogger;
  return { log, lines };
}

describe('rate-limit configuration', () => {
  it.each([
    ['RATE_LIMIT_API_PER_MIN', '0'],
    ['RATE_LIMIT_API_PER_MIN', 'x'],
    ['RATE_LIMIT_API_BURST', '-3'],
    ['RATE_LIMIT_LOGIN_PER_MIN', '1.5'],
    ['RATE_LIMIT_IMPORT_PER_HOUR', '0'],
    ['RATE_LIMIT_GIT_PER_MIN', 'lots'],
    ['RATE_LIMIT_OAUTH_TOKEN_PER_MIN', '0'],
    ['RATE_LIMITS', 'maybe'],
  ])('%s=%s refuses the start, naming the variable', (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(name);
  });

  it('defaults are the spec §8 values, limits on', () => {
    expect(loadConfig({}).rateLimits).toEqual({
      enabled: true,
      apiPerMin: 120,
      apiBurst: 30,
      bundlePerMin: 30,
      importPerHour: 5,
      loginPerMin: 5,
      gitPerMin: 60,
      oauthRegisterPerMin: 10,
      oauthTokenPerMin: 30,
    });
  });
});

describe('client keys', () => {
  it.each([
    ['203.0.113.5', '203.0.113.5'],
    ['::ffff:203.0.113.5', '203.0.113.5'],
    ['2001:db8:1:2:3:4:5:6', '2001:db8:1:2::/64'],
    ['2001:db8:1:2::9', '2001:db8:1:2::/64'],
    ['2001:DB8:1:2:ffff::1%eth0', '2001:db8:1:2::/64'],
    ['::1', '0:0:0:0::/64'],
    [undefined, 'unknown'],
  ])('%s → %s', (ip, key) => {
    expect(clientKey(ip)).toBe(key);
  });
});

describe('when limits are off, or the store fails', () => {
  it('RATE_LIMITS=off registers nothing and says so once, loudly', async () => {
    const { log, lines } = recordingLogger();
    const app = Fastify({ logger: false });
    registerRateLimits(app, { config: loadConfig({ RATE_LIMITS: 'off' }), store: {} as Store }, { log });
    app.post('/api/auth/login', async () => ({ ok: true }));
    for (let i = 0; i < 20; i++) expect((await app.inject({ method: 'POST', url: '/api/auth/login' })).statusCode).toBe(200);
    expect(lines).toHaveLength(1);
    expect(lines[0]!.level).toBe('warn');
    expect(String(lines[0]!.args[0])).toMatch(/^RATE LIMITS ARE OFF \(RATE_LIMITS=off\)/);
    await app.close();
  });

  it('a failing store lets requests through and is logged once per outage', async () => {
    const { log, lines } = recordingLogger();
    let down = true;
    const store: RateLimitStore = {
      dialect: 'sqlite',
      hit: async () => {
        if (down) throw new Error('disk on fire');
        return { allowed: true, retryAfterSeconds: 0, remaining: 3 };
      },
      prune: async () => 0,
      close: async () => {},
    };
    const app = Fastify({ logger: false });
    registerRateLimits(app, { config: loadConfig({ RATE_LIMITS: 'on' }), store: {} as Store }, { log, store });
    app.get('/api/v1/thing', async () => ({ ok: true }));
    for (let i = 0; i < 5; i++) {
      const r = await app.inject({ method: 'GET', url: '/api/v1/thing' });
      expect(r.statusCode).toBe(200);
      expect(r.headers['ratelimit-remaining']).toBeUndefined();
    }
    expect(lines.filter((l) => l.level === 'error')).toHaveLength(1);
    down = false;
    const ok = await app.inject({ method: 'GET', url: '/api/v1/thing' });
    expect(ok.headers['ratelimit-remaining']).toBe('3');
    expect(lines.filter((l) => l.level === 'warn')).toHaveLength(1);
    await app.close();
  });
});

describe.each(testEngines())('token-bucket store (%s)', (engine) => {
  let tdb: TestDatabase;
  let main: Store;
  let a: RateLimitStore;
  let b: RateLimitStore;
  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
    main = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
    const opts = { dialect: engine, dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl };
    a = openRateLimitStore(opts);
    b = openRateLimitStore(opts);
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await main?.close();
    await tdb?.cleanup();
  });

  it('takes one token a hit, then refuses with the seconds until the next token', async () => {
    const spec = { capacity: 3, refillPerSecond: 0.01 };
    const got = [];
    for (let i = 0; i < 4; i++) got.push(await a.hit('t:seq', spec));
    expect(got.slice(0, 3).map((r) => [r.allowed, r.remaining])).toEqual([
      [true, 2],
      [true, 1],
      [true, 0],
    ]);
    expect(got[3]!.allowed).toBe(false);
    expect(got[3]!.remaining).toBe(0);
    expect(got[3]!.retryAfterSeconds).toBeGreaterThan(95);
    expect(got[3]!.retryAfterSeconds).toBeLessThanOrEqual(100);
  });

  it('refills continuously', async () => {
    const spec = { capacity: 1, refillPerSecond: 20 };
    expect((await a.hit('t:refill', spec)).allowed).toBe(true);
    const no = await a.hit('t:refill', spec);
    expect(no).toEqual({ allowed: false, retryAfterSeconds: 1, remaining: 0 });
    await sleep(80);
    expect((await a.hit('t:refill', spec)).allowed).toBe(true);
  });

  it('is atomic under concurrency and shared between store instances (nodes)', async () => {
    const spec = { capacity: 10, refillPerSecond: 0.001 };
    const results = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 ? a : b).hit('t:race', spec)));
    expect(results.filter((r) => r.allowed)).toHaveLength(10);
    expect((await b.hit('t:race', spec)).allowed).toBe(false);
  });

  it('a lowered capacity applies at once', async () => {
    for (let i = 0; i < 3; i++) await a.hit('t:cap', { capacity: 10, refillPerSecond: 0.001 });
    // 7 tokens left, but the bucket is now only 2 big: 2 pass.
    const r = [];
    for (let i = 0; i < 3; i++) r.push((await a.hit('t:cap', { capacity: 2, refillPerSecond: 0.001 })).allowed);
    expect(r).toEqual([true, true, false]);
  });

  it('prunes buckets idle for longer than asked', async () => {
    const spec = { capacity: 1, refillPerSecond: 0.001 };
    await a.hit('t:prune', spec);
    expect((await a.hit('t:prune', spec)).allowed).toBe(false);
    expect(await a.prune(60_000)).toBe(0);
    await sleep(20);
    expect(await a.prune(5)).toBeGreaterThanOrEqual(1);
    expect((await a.hit('t:prune', spec)).allowed).toBe(true);
  });

  it(engine === 'sqlite' ? 'keeps SQLite buckets in their own file, not the main database' : 'keeps PostgreSQL buckets in the rate_limits table', async () => {
    await a.hit('t:where', { capacity: 5, refillPerSecond: 1 });
    const inMain = await main.db.selectFrom('rate_limits').select('bucket').execute();
    if (engine === 'sqlite') {
      expect(fs.existsSync(path.join(tdb.dataDir, RATE_LIMIT_FILE))).toBe(true);
      expect(inMain).toHaveLength(0);
    } else {
      expect(inMain.map((r) => r.bucket)).toContain('t:where');
    }
  });
});

describe.each(testEngines())('per-IP limits over HTTP (%s)', (engine) => {
  let s: TestServer;
  let known: string;
  beforeAll(async () => {
    s = await startTestServer(engine, {
      RATE_LIMITS: 'on',
      RATE_LIMIT_LOGIN_PER_MIN: '5',
      RATE_LIMIT_GIT_PER_MIN: '3',
      RATE_LIMIT_OAUTH_REGISTER_PER_MIN: '2',
      RATE_LIMIT_OAUTH_TOKEN_PER_MIN: '2',
    });
    known = email('login');
    const r = await new Client(s.url).post('/api/v1/auth/signup', { email: known, password: PASSWORD, name: 'Lou' });
    expect(r.status).toBe(201);
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('login: 5 attempts a minute per IP, right or wrong; the 6th is 429 with Retry-After', async () => {
    const c = new Client(s.url);
    const statuses = [];
    for (const password of ['wrong password 1', PASSWORD, 'wrong password 2', PASSWORD, 'wrong password 3']) {
      const r = await c.post('/api/auth/login', { email: known, password });
      statuses.push(r.status);
      expect(r.headers.get('ratelimit-limit')).toBe('5');
    }
    expect(statuses).toEqual([401, 200, 401, 200, 401]);
    // Right password, still refused: the limit runs before the password is looked at.
    expectLimited(await c.post('/api/auth/login', { email: known, password: PASSWORD }), 12);
    expectLimited(await c.post('/api/auth/login', { email: 'nobody@example.com', password: 'x' }), 12);
  });

  it('the second login step and the HTML forms share the login bucket (covered before those routes land)', async () => {
    const c = new Client(s.url);
    for (const p of ['/api/auth/totp/verify', '/login', '/login/totp', '/api/auth/stepup', '/app/stepup']) {
      expectLimited(await c.post(p, { code: '123456' }), 12);
    }
    // A forged X-Forwarded-For does not buy a fresh bucket when TRUST_PROXY is off.
    expectLimited(await c.post('/api/auth/login', { email: known, password: PASSWORD }, { 'x-forwarded-for': '203.0.113.99' }), 12);
    // A GET of the login page is not a login attempt.
    expect((await c.get('/login')).status).not.toBe(429);
  });

  it('sign-up: the three sign-up paths share 5 a minute per IP', async () => {
    const c = new Client(s.url);
    const paths = ['/api/v1/auth/signup', '/auth/signup', '/api/auth/signup'];
    // beforeAll signed up once already, but the bucket refills one token every 12 s and the tests
    // before this one may have taken that long: 4 or 5 sign-ups pass (taking the three paths in
    // turn), never a sixth, and the first refusal ends the burst.
    const passed: string[] = [];
    let refused: Res | null = null;
    for (let i = 0; i < 6 && !refused; i++) {
      const p = paths[i % paths.length]!;
      const r = await c.post(p, { email: email('su'), password: PASSWORD, name: 'Sue' });
      if (r.status === 201) passed.push(p);
      else refused = r;
    }
    expect(passed.length).toBeGreaterThanOrEqual(4);
    expect(passed.length).toBeLessThanOrEqual(5);
    expect(new Set(passed).size).toBe(3);
    expectLimited(refused!, 12);
    expectLimited(await c.post('/api/v1/auth/signup', { email: email('su'), password: PASSWORD, name: 'Sue' }), 12);
  });

  it('git: per IP, any method, whatever the route answers', async () => {
    const c = new Client(s.url);
    for (let i = 0; i < 3; i++) expect((await c.get('/git/ws.git/info/refs?service=git-upload-pack')).status).not.toBe(429);
    expectLimited(await c.post('/git/ws.git/git-upload-pack', {}), 20, 'git');
  });

  it('OAuth registration and token endpoints: per IP, separately', async () => {
    const c = new Client(s.url);
    for (let i = 0; i < 2; i++) expect((await c.post('/oauth/register', { redirect_uris: ['http://x'] })).status).not.toBe(429);
    expectLimited(await c.post('/oauth/register', {}), 30, 'oauth');
    for (let i = 0; i < 2; i++) expect((await c.post('/oauth/token', {})).status).not.toBe(429);
    expectLimited(await c.post('/oauth/token', {}), 30, 'oauth');
    // Health is never limited.
    for (let i = 0; i < 10; i++) expect((await c.get('/healthz')).status).toBe(200);
  });
});

describe.each(testEngines())('TRUST_PROXY (%s)', (engine) => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer(engine, { RATE_LIMITS: 'on', RATE_LIMIT_LOGIN_PER_MIN: '2', TRUST_PROXY: 'true' });
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('counts per client address as the one proxy in front saw it', async () => {
    const c = new Client(s.url);
    const login = (xff?: string) =>
      c.post('/api/auth/login', { email: 'nobody@example.com', password: 'wrong password' }, xff ? { 'x-forwarded-for': xff } : {});
    expect((await login('203.0.113.5')).status).toBe(401);
    expect((await login('203.0.113.5')).status).toBe(401);
    expectLimited(await login('203.0.113.5'), 30);
    // Whatever the client put in front of what our proxy appended is ignored.
    expectLimited(await login('198.51.100.1, 203.0.113.5'), 30);
    expect((await login('203.0.113.6')).status).toBe(401);
    expect((await login()).status).toBe(401);
  });
});

describe.each(testEngines())('/api/v1 per principal (%s)', (engine) => {
  let s: TestServer;
  let a: Client;
  let b: Client;
  beforeAll(async () => {
    s = await startTestServer(engine, {
      RATE_LIMITS: 'on',
      RATE_LIMIT_API_BURST: '5',
      RATE_LIMIT_API_PER_MIN: '60',
      RATE_LIMIT_BUNDLE_PER_MIN: '2',
      RATE_LIMIT_IMPORT_PER_HOUR: '1',
    });
    const human = await signupHuman(s.url, 'Pat');
    a = (await createAgentWithKey(human.client, [{ action: 'read' }], { name: 'a' })).client;
    b = (await createAgentWithKey(human.client, [{ action: 'read' }], { name: 'b' })).client;
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('the 6th rapid request of one agent is 429; another agent is not limited; after Retry-After it passes', async () => {
    const burst = await Promise.all(Array.from({ length: 6 }, () => a.get('/api/v1/whoami')));
    const ok = burst.filter((r) => r.status === 200);
    const limited = burst.filter((r) => r.status === 429);
    expect(ok).toHaveLength(5);
    expect(limited).toHaveLength(1);
    expectLimited(limited[0]!, 2);
    expect(ok.map((r) => r.headers.get('ratelimit-limit'))).toEqual(['5', '5', '5', '5', '5']);
    expect(ok.map((r) => Number(r.headers.get('ratelimit-remaining'))).sort()).toEqual([0, 1, 2, 3, 4]);

    const other = await b.get('/api/v1/whoami');
    expect(other.status).toBe(200);
    expect(other.headers.get('ratelimit-remaining')).toBe('4');

    await sleep(Number(limited[0]!.headers.get('retry-after')) * 1000);
    expect((await a.get('/api/v1/whoami')).status).toBe(200);
  });

  it('counts before the body is read: an invalid body still spends a token', async () => {
    await sleep(300); // b is full again (one request, then over a second of refill)
    const bad = await Promise.all(Array.from({ length: 5 }, () => b.post('/api/v1/nodes', { nonsense: true })));
    expect(bad.map((r) => r.status)).toEqual([400, 400, 400, 400, 400]);
    expect((await b.get('/api/v1/whoami')).status).toBe(429);
  });

  it('bundle and import have their own, narrower buckets', async () => {
    const human = await signupHuman(s.url, 'Quinn');
    const c = (await createAgentWithKey(human.client, [{ action: 'read' }], { name: 'c' })).client;
    // The bundle bucket (2 here) is spent by GET and POST alike, per principal.
    expect((await c.post('/api/v1/bundle', { intent: 'anything', budget_tokens: 200 })).status).toBe(200);
    expect((await c.get('/api/v1/bundle?intent=anything')).status).toBe(200);
    const r = await c.get('/api/v1/bundle?intent=anything');
    expectLimited(r, 30);
    expect(r.headers.get('ratelimit-limit')).toBe('2');
    // Other routes are not in that bucket.
    expect((await c.get('/api/v1/whoami')).status).toBe(200);
    // The import bucket (1 here) is spent before the upload is read or judged: a refused
    // import counts too.
    const i = (await createAgentWithKey(human.client, [{ action: 'read' }], { name: 'i' })).client;
    expect((await i.post('/api/v1/import', { space: 'x', files: [] })).status).toBe(403);
    const imp = await i.post('/api/v1/import', { space: 'x', files: [] });
    expectLimited(imp, 3600);
    expect(Number(imp.headers.get('retry-after'))).toBeGreaterThan(3000);
    // Without credentials the import is refused (401) before any bucket is touched.
    expect((await new Client(s.url).post('/api/v1/import', {})).status).toBe(401);
  });
});

describe.each(testEngines())('counters shared by nodes (%s)', (engine) => {
  let s: TestServer;
  let node2: RunningServer;
  let key: string;
  beforeAll(async () => {
    // One token a minute: nothing refills during the test.
    const env = { RATE_LIMITS: 'on', RATE_LIMIT_API_BURST: '5', RATE_LIMIT_API_PER_MIN: '1', RATE_LIMIT_LOGIN_PER_MIN: '3' };
    s = await startTestServer(engine, env);
    node2 = await secondNode(s, env);
    const human = await signupHuman(s.url, 'Nod');
    key = (await createAgentWithKey(human.client, [{ action: 'read' }], { name: 'shared' })).key;
  });
  afterAll(async () => {
    await node2?.close();
    await s?.stop();
  });

  it('hits on node A count on node B', async () => {
    const onA = new Client(s.url, key);
    const onB = new Client(node2.url, key);
    for (let i = 0; i < 3; i++) expect((await onA.get('/api/v1/whoami')).status).toBe(200);
    for (let i = 0; i < 2; i++) expect((await onB.get('/api/v1/whoami')).status).toBe(200);
    expectLimited(await onB.get('/api/v1/whoami'), 60);
    expectLimited(await onA.get('/api/v1/whoami'), 60);
  });

  it('login attempts too', async () => {
    const wrong = { email: 'nobody@example.com', password: 'wrong password' };
    expect((await new Client(s.url).post('/api/auth/login', wrong)).status).toBe(401);
    expect((await new Client(node2.url).post('/api/auth/login', wrong)).status).toBe(401);
    expect((await new Client(s.url).post('/api/auth/login', wrong)).status).toBe(401);
    expectLimited(await new Client(node2.url).post('/api/auth/login', wrong), 20);
  });
});

describe.each(testEngines())('RATE_LIMITS=off (%s)', (engine) => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer(engine, { RATE_LIMITS: 'off', RATE_LIMIT_LOGIN_PER_MIN: '1', RATE_LIMIT_API_BURST: '1' });
  });
  afterAll(async () => {
    await s?.stop();
  });

  it('50 rapid logins are never 429, and no limit headers are sent', async () => {
    const c = new Client(s.url);
    const res = await Promise.all(Array.from({ length: 50 }, () => c.post('/api/auth/login', { email: 'nobody@example.com', password: 'wrong password' })));
    expect(res.map((r) => r.status)).toEqual(Array(50).fill(401));
    expect(res[0]!.headers.get('ratelimit-limit')).toBeNull();
    const api = await Promise.all(Array.from({ length: 10 }, () => c.get('/api/v1/openapi.json')));
    expect(api.every((r) => r.status === 200)).toBe(true);
  });
});
