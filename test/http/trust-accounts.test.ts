import crypto from 'node:crypto';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { currentTotp } from '../../src/auth/totp.js';
import { SCRYPT } from '../../src/auth/secrets.js';
import { loadConfig } from '../../src/config.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { Client, joinAs, signupHuman, startTestServer, type TestServer } from '../support/server.js';

/**
 * Issue 11, items 6, 7 and the credential parts of 9: a stolen session cannot bind its own
 * second factor, guessing spread over addresses meets a per-account back-off, and the smaller
 * defects beside them. Each replays the attack over HTTP.
 */

const PASSWORD = 'correct horse battery';

async function emailOf(c: Client): Promise<string> {
  return (await c.get('/api/auth/me')).body.user.email;
}

describe.each(testEngines())('trust: accounts and credentials (%s)', (engine) => {
  describe('item 6: enrolling a second factor from a signed-in session needs step-up', () => {
    let s: TestServer;
    beforeAll(async () => {
      s = await startTestServer(engine);
    }, 60_000);
    afterAll(async () => s?.stop());

    it('a stolen session (no step-up) cannot start or confirm an enrolment; after a step-up it can', async () => {
      const { client } = await signupHuman(s.url, 'Tess');
      const start = await client.post('/api/auth/totp/enroll');
      expect(start.status, start.text).toBe(403);
      expect(start.body.code).toBe('step_up_required');
      expect((await client.post('/api/auth/totp/enroll', { code: '123456' })).body.code).toBe('step_up_required');
      expect((await client.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
      const ok = await client.post('/api/auth/totp/enroll');
      expect(ok.status, ok.text).toBe(200);
      const done = await client.post('/api/auth/totp/enroll', { code: currentTotp(ok.body.secret) });
      expect(done.body).toEqual({ enabled: true });
    });

    it('with REQUIRE_TOTP=on, a sign-in pending enrolment enrols without a step-up (it has just proved the password)', async () => {
      const strict = await startTestServer(engine, { REQUIRE_TOTP: 'on' });
      try {
        // The sign-up's own session waits for enrolment.
        const h = await signupHuman(strict.url, 'Ned');
        expect((await h.client.get('/api/v1/me')).body.code).toBe('totp_enroll_required');
        const start = await h.client.post('/api/auth/totp/enroll');
        expect(start.status, start.text).toBe(200);
        const done = await h.client.post('/api/auth/totp/enroll', { code: currentTotp(start.body.secret) });
        expect(done.status, done.text).toBe(200);
        expect(done.body).toEqual({ enabled: true });
      } finally {
        await strict.stop();
      }
    });
  });

  describe('item 7: failed attempts are counted per account too, with a growing back-off', () => {
    let s: TestServer;
    beforeAll(async () => {
      // Limits on; each attempt comes from another address (TRUST_PROXY: the proxy's X-Forwarded-For).
      s = await startTestServer(engine, { RATE_LIMITS: 'on', TRUST_PROXY: 'true', RATE_LIMIT_API_BURST: '1000', RATE_LIMIT_API_PER_MIN: '1000' });
    }, 60_000);
    afterAll(async () => s?.stop());
    let ip = 0;
    const from = () => ({ 'x-forwarded-for': `198.51.100.${++ip % 250}` });
    const login = (email: string, password: string) => new Client(s.url).request('POST', '/api/auth/login', { json: { email, password }, headers: from() });

    it('five wrong passwords from five addresses, then even the right one is refused until the back-off ends; a success resets', async () => {
      const { client } = await signupHuman(s.url, 'Gus');
      const email = await emailOf(client);
      for (let i = 0; i < 5; i++) {
        const r = await login(email, `wrong ${i}`);
        expect(r.status, r.text).toBe(401);
        expect(r.body.code).toBe('invalid_credentials');
      }
      const blocked = await login(email, PASSWORD);
      expect(blocked.status, blocked.text).toBe(429);
      expect(blocked.body.code).toBe('rate_limited');
      expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      await new Promise((r) => setTimeout(r, 1200));
      const ok = await login(email, PASSWORD);
      expect(ok.status, ok.text).toBe(200);
      // The count was reset: four more wrong ones are not blocked yet.
      for (let i = 0; i < 4; i++) expect((await login(email, `again ${i}`)).status).toBe(401);
      expect((await login(email, PASSWORD)).status).toBe(200);
    });

    it('an unknown email backs off exactly like a known one (nothing tells them apart)', async () => {
      const email = `ghost-${Date.now()}@example.com`;
      for (let i = 0; i < 5; i++) expect((await login(email, 'x')).status).toBe(401);
      const r = await login(email, 'x');
      expect(r.status).toBe(429);
      expect(r.body.code).toBe('rate_limited');
    });

    it('step-up: a wrong password is 403 (the session is fine), and counts against the same account', async () => {
      const { client } = await signupHuman(s.url, 'Sam');
      const email = await emailOf(client);
      const wrong = await client.request('POST', '/api/auth/stepup', { json: { password: 'nope nope nope' }, headers: from() });
      expect(wrong.status, wrong.text).toBe(403);
      expect(wrong.body.code).toBe('invalid_credentials');
      for (let i = 0; i < 4; i++) await client.request('POST', '/api/auth/stepup', { json: { password: `nope ${i}` }, headers: from() });
      // The account is backed off for sign-in too.
      expect((await login(email, PASSWORD)).status).toBe(429);
    });
  });

  describe('item 9: the smaller defects', () => {
    let s: TestServer;
    beforeAll(async () => {
      s = await startTestServer(engine);
    }, 60_000);
    afterAll(async () => s?.stop());

    it('step-ups and page writes at once never collide into a 500 (audit entries take the workspace lock)', async () => {
      const o = await signupHuman(s.url, 'Ada');
      const ed = await joinAs(o.client, o.workspace.slug, 'editor');
      const jobs: Promise<{ status: number; text: string }>[] = [];
      for (let i = 0; i < 12; i++) {
        jobs.push(o.client.post('/api/auth/stepup', { password: PASSWORD }));
        jobs.push(ed.client.post('/api/v1/nodes', { path: `race/p-${i}-${Date.now()}.md`, content: `# ${i}\n` }));
      }
      for (const r of await Promise.all(jobs)) expect([200, 201], r.text).toContain(r.status);
      const chain = await o.client.get('/api/v1/me');
      expect(chain.status).toBe(200);
    });

    it('POST /api/v1/me/git-tokens with no body mints a token with the defaults', async () => {
      const { client } = await signupHuman(s.url, 'Gil');
      expect((await client.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
      const r = await client.request('POST', '/api/v1/me/git-tokens');
      expect(r.status, r.text).toBe(201);
      expect(r.body.name).toBe('git');
      expect(r.body.token).toMatch(/^gt_/);
      const days = (Date.parse(r.body.expires_at) - Date.now()) / 86_400_000;
      expect(days).toBeGreaterThan(364);
    });

    it('passwords use OWASP-level scrypt; an older hash is upgraded at the next successful login', async () => {
      expect(SCRYPT.N * SCRYPT.r * SCRYPT.p).toBeGreaterThanOrEqual(2 ** 14 * 8 * 5);
      const { client, id } = await signupHuman(s.url, 'Old');
      const email = await emailOf(client);
      const stored = await s.ctx.store.db.selectFrom('principals').select('password_hash').where('id', '=', id).executeTakeFirstOrThrow();
      expect(stored.password_hash).toMatch(new RegExp(`^scrypt\\$${SCRYPT.N}\\$${SCRYPT.r}\\$${SCRYPT.p}\\$`));
      // A hash as the service made it before issue 11 (N=16384, r=8, p=1).
      const salt = crypto.randomBytes(16);
      const key = crypto.scryptSync(PASSWORD.normalize('NFKC'), salt, 32, { N: 16384, r: 8, p: 1 });
      const old = `scrypt$16384$8$1$${salt.toString('base64')}$${key.toString('base64')}`;
      await s.ctx.store.db.updateTable('principals').set({ password_hash: old }).where('id', '=', id).execute();
      const r = await new Client(s.url).post('/api/auth/login', { email, password: PASSWORD });
      expect(r.status, r.text).toBe(200);
      const after = await s.ctx.store.db.selectFrom('principals').select('password_hash').where('id', '=', id).executeTakeFirstOrThrow();
      expect(after.password_hash).not.toBe(old);
      expect(after.password_hash).toMatch(new RegExp(`^scrypt\\$${SCRYPT.N}\\$${SCRYPT.r}\\$${SCRYPT.p}\\$`));
      expect((await new Client(s.url).post('/api/auth/login', { email, password: PASSWORD })).status).toBe(200);
    });
  });

  describe('item 9: sign-up and logs', () => {
    let tdb: TestDatabase;
    let server: RunningServer | undefined;
    const lines: string[] = [];
    beforeAll(async () => {
      tdb = await createTestDatabase(engine);
      const config = loadConfig({
        PORT: '0',
        HOST: '127.0.0.1',
        DATA_DIR: tdb.dataDir,
        LOG_LEVEL: 'info',
        RATE_LIMITS: 'off',
        SIGNUPS: 'invite',
        ...(tdb.databaseUrl ? { DATABASE_URL: tdb.databaseUrl } : {}),
      });
      const stream = new Writable({
        write(chunk, _enc, done) {
          lines.push(String(chunk));
          done();
        },
      });
      server = await startServer(config, { logger: { level: 'info', stream } });
    }, 60_000);
    afterAll(async () => {
      await server?.close();
      await tdb?.cleanup();
    });

    it('invite-only: two first sign-ups at once, exactly one passes', async () => {
      const attempt = (n: number) =>
        new Client(server!.url).post('/api/v1/auth/signup', { email: `first-${n}-${Date.now()}@example.com`, password: PASSWORD, name: `First ${n}` });
      const results = await Promise.all([attempt(1), attempt(2), attempt(3)]);
      expect(results.map((r) => r.status).sort()).toEqual([201, 403, 403]);
      for (const r of results.filter((x) => x.status === 403)) expect(r.body.code).toBe('invite_required');
    });

    it('invite tokens never reach the request log', async () => {
      const token = `iv_${'A'.repeat(20)}secretpart`;
      await new Client(server!.url).get(`/invite/${token}`);
      await new Client(server!.url).post(`/api/v1/invites/${token}/accept`);
      await new Client(server!.url).get(`/api/v1/nodes/x?token=${token}`);
      await new Promise((r) => setTimeout(r, 100));
      const log = lines.join('');
      expect(log).toContain('/invite/[redacted]');
      expect(log).toContain('/api/v1/invites/[redacted]/accept');
      expect(log).not.toContain('secretpart');
    });
  });
});
