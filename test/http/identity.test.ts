import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { currentTotp } from '../../src/auth/totp.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';

const PASSWORD = 'correct horse battery';

/** A TOTP code from the next time step, so it differs from one just used. */
function nextCode(secret: string): string {
  return currentTotp(secret, Date.now() + 30_000);
}

async function login(base: string, email: string, password = PASSWORD): Promise<{ client: Client; status: number; body: any }> {
  const client = new Client(base);
  const res = await client.post('/api/auth/login', { email, password });
  return { client, status: res.status, body: res.body };
}

async function stepUp(c: Client, body: Record<string, string> = { password: PASSWORD }) {
  const r = await c.post('/api/auth/stepup', body);
  expect(r.status, r.text).toBe(200);
  return r;
}

describe.each(testEngines())('TOTP, step-up, sessions, lockdown, elevations, git tokens (%s)', (engine) => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer(engine);
  });
  afterAll(async () => s?.stop());

  async function emailOf(c: Client): Promise<string> {
    return (await c.get('/api/auth/me')).body.user.email;
  }

  it('enrols TOTP, then logs in in two steps; a pending session can do nothing else; codes are not replayed', async () => {
    const { client } = await signupHuman(s.url);
    const email = await emailOf(client);
    // Enrolling from a signed-in session needs a step-up (issue 11).
    expect((await client.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
    const start = await client.post('/api/auth/totp/enroll');
    expect(start.status).toBe(200);
    expect(start.body.enabled).toBe(false);
    expect(start.body.otpauth_uri).toMatch(/^otpauth:\/\/totp\/.*secret=/);
    const secret: string = start.body.secret;
    expect((await client.post('/api/auth/totp/enroll', { code: '000000' })).body.code).toBe('invalid_code');
    const enrolCode = currentTotp(secret);
    const done = await client.post('/api/auth/totp/enroll', { code: enrolCode });
    expect(done.body).toEqual({ enabled: true });
    expect((await client.post('/api/auth/totp/enroll')).body.code).toBe('totp_already_enabled');
    expect((await client.get('/api/v1/me')).body.totp).toBe(true);

    const l = await login(s.url, email);
    expect(l.status).toBe(200);
    expect(l.body.status).toBe('totp_required');
    const pending = l.client;
    for (const path of ['/api/v1/me', '/api/v1/spaces', '/api/auth/me']) {
      const r = await pending.get(path);
      expect(r.status, path).toBe(401);
      expect(r.body.code).toBe('totp_required');
    }
    expect((await pending.post('/api/v1/nodes', { path: 'a/b.md', content: 'x' })).status).toBe(401);
    const wrong = await pending.post('/api/auth/totp/verify', { code: '123456' });
    expect(wrong.status).toBe(401);
    expect(wrong.body.code).toBe('invalid_code');
    // The enrolment code was consumed: the same code does not work again.
    const replay = await pending.post('/api/auth/totp/verify', { code: enrolCode });
    expect(replay.body.code).toBe('invalid_code');
    const loginCode = nextCode(secret);
    const ok = await pending.post('/api/auth/totp/verify', { code: loginCode });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body.status).toBe('ok');
    expect((await pending.get('/api/v1/me')).status).toBe(200);
    // Step-up with TOTP enrolled needs a code, and that code cannot be the one just used.
    expect((await pending.post('/api/auth/stepup', { password: PASSWORD })).body.code).toBe('code_required');
    expect((await pending.post('/api/auth/stepup', { code: loginCode })).body.code).toBe('invalid_code');
  });

  it('requires enrolment at login and sign-up when REQUIRE_TOTP=on', async () => {
    const t = await startTestServer(engine, { REQUIRE_TOTP: 'on' });
    try {
      const c = new Client(t.url);
      const email = `req-${Date.now()}@example.com`;
      const su = await c.post('/api/v1/auth/signup', { email, password: PASSWORD, name: 'Req' });
      expect(su.status).toBe(201);
      expect(su.body.status).toBe('totp_enroll_required');
      expect((await c.get('/api/v1/me')).body.code).toBe('totp_enroll_required');
      const l = await login(t.url, email);
      expect(l.body.status).toBe('totp_enroll_required');
      const start = await l.client.post('/api/auth/totp/enroll');
      const done = await l.client.post('/api/auth/totp/enroll', { code: currentTotp(start.body.secret) });
      expect(done.body.enabled).toBe(true);
      expect((await l.client.get('/api/v1/me')).status).toBe(200);
      // From now on login asks for the code.
      expect((await login(t.url, email)).body.status).toBe('totp_required');
    } finally {
      await t.stop();
    }
  });

  it('gates deletes behind a five-minute step-up; agents can never step up', async () => {
    const h = await signupHuman(s.url);
    const c = h.client;
    const page = await c.post('/api/v1/nodes', { path: 'eng/step/a.md', content: 'x' });
    const denied = await c.delete(`/api/v1/nodes/${page.body.id}`);
    expect(denied.status).toBe(403);
    expect(denied.body.code).toBe('step_up_required');
    // A wrong password on a valid session is 403, not 401 (issue 11): the session is fine.
    expect((await c.post('/api/auth/stepup', { password: 'wrong password!!' })).status).toBe(403);
    expect((await c.post('/api/auth/stepup', {})).body.code).toBe('password_required');
    const up = await stepUp(c);
    expect(Date.parse(up.body.step_up_until) - Date.now()).toBeGreaterThan(4 * 60_000);
    expect((await c.delete(`/api/v1/nodes/${page.body.id}`)).status).toBe(200);
    // Five minutes later it has lapsed (the clock cannot be moved through the API: age the row).
    const p2 = await c.post('/api/v1/nodes', { path: 'eng/step/b.md', content: 'x' });
    await s.ctx.store.db
      .updateTable('sessions')
      .set({ stepup_at: new Date(Date.now() - 5 * 60_000 - 1000).toISOString() })
      .where('principal_id', '=', h.id)
      .execute();
    expect((await c.delete(`/api/v1/nodes/${p2.body.id}`)).body.code).toBe('step_up_required');

    const agent = await createAgentWithKey(c, [{ action: 'read' }, { action: 'write' }]);
    const a = await agent.client.post('/api/auth/stepup', { password: PASSWORD });
    expect(a.status).toBe(403);
    expect(a.body.code).toBe('session_required');
  });

  it('ends a session idle for 24 hours, and gives a pending session 10 minutes', async () => {
    const h = await signupHuman(s.url);
    expect((await h.client.get('/api/v1/me')).status).toBe(200);
    // No API moves the clock: age the session's last activity past the idle limit.
    await s.ctx.store.db
      .updateTable('sessions')
      .set({ last_seen_at: new Date(Date.now() - 24 * 3600_000 - 60_000).toISOString() })
      .where('principal_id', '=', h.id)
      .execute();
    const idle = await h.client.get('/api/v1/me');
    expect(idle.status).toBe(401);
    expect(idle.body.code).toBe('session_expired');

    const t = await signupHuman(s.url);
    const email = await emailOf(t.client);
    expect((await t.client.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
    const start = await t.client.post('/api/auth/totp/enroll');
    await t.client.post('/api/auth/totp/enroll', { code: currentTotp(start.body.secret) });
    const res = await fetch(`${s.url}/api/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email, password: PASSWORD }),
    });
    expect((await res.json()).status).toBe('totp_required');
    const cookie = res.headers.getSetCookie().find((x) => x.startsWith('svc_session='))!;
    const expires = Date.parse(/Expires=([^;]+)/i.exec(cookie)![1]!);
    expect(Math.abs(expires - (Date.now() + 10 * 60_000))).toBeLessThan(60_000);
  });

  it('lists and revokes own sessions; logout clears both cookies', async () => {
    const h = await signupHuman(s.url);
    const email = await emailOf(h.client);
    const second = (await login(s.url, email)).client;
    const list = await h.client.get('/api/auth/sessions');
    expect(list.status).toBe(200);
    expect(list.body.sessions).toHaveLength(2);
    expect(list.body.sessions.filter((x: { current: boolean }) => x.current)).toHaveLength(1);
    const other = list.body.sessions.find((x: { current: boolean }) => !x.current);
    expect((await second.get('/api/v1/me')).status).toBe(200);
    expect((await h.client.delete(`/api/auth/sessions/${other.id}`)).status).toBe(200);
    expect((await second.get('/api/v1/me')).status).toBe(401);
    expect((await h.client.delete('/api/auth/sessions/se_unknown')).status).toBe(404);
    // Another user's session id is not yours to end.
    const stranger = await signupHuman(s.url);
    const theirs = (await stranger.client.get('/api/auth/sessions')).body.sessions[0].id;
    expect((await h.client.delete(`/api/auth/sessions/${theirs}`)).status).toBe(404);
    expect((await stranger.client.get('/api/v1/me')).status).toBe(200);

    const out = await fetch(`${s.url}/api/auth/logout`, {
      method: 'POST',
      headers: { cookie: [...h.client.cookies].map(([k, v]) => `${k}=${v}`).join('; '), 'x-csrf-token': h.client.csrf! },
    });
    expect(out.status).toBe(200);
    const cleared = out.headers.getSetCookie();
    for (const name of ['svc_session', 'svc_csrf']) {
      expect(
        cleared.find((x) => x.startsWith(`${name}=`)),
        name,
      ).toMatch(/Expires=Thu, 01 Jan 1970/i);
    }
    expect((await h.client.get('/api/v1/me')).status).toBe(401);
  });

  it('locks a workspace down: keys and other sessions die at once, the caller stays in', async () => {
    const h = await signupHuman(s.url);
    const email = await emailOf(h.client);
    const other = (await login(s.url, email)).client;
    const agent = await createAgentWithKey(h.client, [{ action: 'read' }]);
    expect((await agent.client.get('/api/v1/spaces')).status).toBe(200);
    const noUp = await h.client.post(`/api/v1/workspaces/${h.workspace.slug}/lockdown`);
    expect(noUp.body.code).toBe('step_up_required');
    await stepUp(h.client);
    expect((await h.client.post('/api/v1/workspaces/ws_nope/lockdown')).status).toBe(404);
    const lock = await h.client.post(`/api/v1/workspaces/${h.workspace.slug}/lockdown`);
    expect(lock.status).toBe(200);
    expect(lock.body).toMatchObject({ token_epoch: 1, sessions_dropped: 1 });
    const dead = await agent.client.get('/api/v1/spaces');
    expect(dead.status).toBe(401);
    expect(dead.body.code).toBe('invalid_token');
    expect((await other.get('/api/v1/me')).status).toBe(401);
    expect((await h.client.get('/api/v1/me')).status).toBe(200);
    // A key minted after the lockdown works.
    const k = await h.client.post(`/api/v1/principals/${agent.id}/tokens`, { name: 'after' });
    expect((await new Client(s.url, k.body.key).get('/api/v1/spaces')).status).toBe(200);
  });

  it('elevates an agent to secret for exactly the stated time', async () => {
    const h = await signupHuman(s.url);
    await stepUp(h.client);
    const agent = await createAgentWithKey(h.client, [{ action: 'read', ceiling: 'secret' }], { ceiling: 'secret' });
    const page = await h.client.post('/api/v1/nodes', { path: 'vault/keys.md', content: '---\nsensitivity: secret\n---\nthe key\n' });
    expect((await agent.client.get(`/api/v1/nodes/${page.body.id}`)).status).toBe(404);
    expect((await h.client.post('/api/v1/elevations', { agent_id: agent.id, minutes: 0, reason: 'x' })).status).toBe(400);
    expect((await h.client.post('/api/v1/elevations', { agent_id: agent.id, minutes: 481, reason: 'x' })).status).toBe(400);
    expect((await h.client.post('/api/v1/elevations', { agent_id: 'pr_nope', minutes: 5, reason: 'x' })).status).toBe(404);
    const el = await h.client.post('/api/v1/elevations', { agent_id: agent.id, minutes: 5, reason: 'rotate keys' });
    expect(el.status).toBe(201);
    expect(Math.abs(Date.parse(el.body.expires_at) - (Date.now() + 5 * 60_000))).toBeLessThan(10_000);
    expect((await agent.client.get(`/api/v1/nodes/${page.body.id}`)).body.content).toContain('the key');
    expect((await agent.client.get('/api/v1/whoami')).body.ceiling).toBe('secret');
    // Expiry is exact: once the end passes, the next request is back under confidential.
    await s.ctx.store.db
      .updateTable('elevations')
      .set({ expires_at: new Date(Date.now() - 1).toISOString() })
      .where('id', '=', el.body.id)
      .execute();
    expect((await agent.client.get(`/api/v1/nodes/${page.body.id}`)).status).toBe(404);
    // Agents cannot elevate anyone, themselves included.
    expect((await agent.client.post('/api/v1/elevations', { agent_id: agent.id, minutes: 5, reason: 'me' })).status).toBe(403);
  });

  it('asks for step-up to grant secret, and to move a page where more agents can read it', async () => {
    const h = await signupHuman(s.url);
    const a = await h.client.post('/api/v1/principals', { name: 'x', grants: [{ action: 'read', scope: 'pub', ceiling: 'internal' }] });
    expect(a.status).toBe(201);
    const secretGrant = await h.client.put(`/api/v1/principals/${a.body.id}/grants`, { grants: [{ action: 'read', scope: '*', ceiling: 'secret' }] });
    expect(secretGrant.body.code).toBe('step_up_required');
    expect((await h.client.post('/api/v1/principals', { name: 'y', ceiling: 'secret', grants: [] })).body.code).toBe('step_up_required');

    const page = await h.client.post('/api/v1/nodes', { path: 'eng/private/plan.md', content: 'plan' });
    const widen = await h.client.post(`/api/v1/nodes/${page.body.id}/move`, { to: 'pub/plan.md' });
    expect(widen.status).toBe(403);
    expect(widen.body.code).toBe('step_up_required');
    // Within the same audience no step-up is needed.
    expect((await h.client.post(`/api/v1/nodes/${page.body.id}/move`, { to: 'eng/other/plan.md' })).status).toBe(200);
    await stepUp(h.client);
    expect((await h.client.post(`/api/v1/nodes/${page.body.id}/move`, { to: 'pub/plan.md' })).status).toBe(200);
    expect((await h.client.put(`/api/v1/principals/${a.body.id}/grants`, { grants: [{ action: 'read', scope: '*', ceiling: 'secret' }] })).status).toBe(200);
  });

  it('mints git tokens with step-up; they are refused on /api/v1', async () => {
    const h = await signupHuman(s.url);
    expect((await h.client.post('/api/v1/me/git-tokens', {})).body.code).toBe('step_up_required');
    await stepUp(h.client);
    expect((await h.client.post('/api/v1/me/git-tokens', { expires_in_days: 366 })).status).toBe(400);
    const t = await h.client.post('/api/v1/me/git-tokens', { name: 'laptop' });
    expect(t.status).toBe(201);
    expect(t.body.token).toMatch(/^gt_/);
    expect(Math.abs(Date.parse(t.body.expires_at) - (Date.now() + 365 * 86_400_000))).toBeLessThan(60_000);
    const bearer = await new Client(s.url, t.body.token).get('/api/v1/me');
    expect(bearer.status).toBe(401);
    const basic = await fetch(`${s.url}/api/v1/me`, { headers: { authorization: `Basic ${Buffer.from(`x:${t.body.token}`).toString('base64')}` } });
    expect(basic.status).toBe(401);
  });
});
