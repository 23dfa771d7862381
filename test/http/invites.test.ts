import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signup } from '../../src/core/accounts.js';
import { hashSecret } from '../../src/auth/secrets.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { expectError, expectStatus } from '../support/expect.js';

/**
 * Black-box checks of invites over real HTTP: create, list (hints only), revoke, accept
 * (CSRF, email-bound, expired, revoked, used, already a member), and sign-up with an
 * invite token in invite-only and open mode.
 */

type Human = { client: Client; id: string; workspace: { id: string; slug: string } };

const PASSWORD = 'correct horse battery';
let counter = 0;
const freshEmail = (name: string) => `${name}-${process.pid}-${++counter}-${Date.now()}@example.com`;
const at = (path: string, ws: string) => `${path}${path.includes('?') ? '&' : '?'}workspace=${encodeURIComponent(ws)}`;
const DAY = 86_400_000;

/** Ages one invite in the database: no API can move the clock, so the test backdates `expires_at`. */
async function expire(s: TestServer, inviteId: string): Promise<void> {
  await s.ctx.store.db
    .updateTable('invites')
    .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
    .where('id', '=', inviteId)
    .execute();
}

async function members(client: Client, ws: string): Promise<{ id: string; role: string }[]> {
  const res = await client.get(`/api/v1/workspaces/${ws}/members`);
  expectStatus(res, 200);
  return res.body.members.map((m: any) => ({ id: m.id, role: m.role }));
}

async function emailOf(client: Client): Promise<string> {
  return (await client.get('/api/v1/me')).body.email;
}

describe.each(testEngines())('invites (%s)', (engine) => {
  let s: TestServer;
  let ann: Human; // owner
  let bob: Human; // editor in Ann's workspace
  let cat: Human; // outsider

  beforeAll(async () => {
    s = await startTestServer(engine);
    ann = await signupHuman(s.url, 'Ann');
    bob = await signupHuman(s.url, 'Bob');
    cat = await signupHuman(s.url, 'Cat');
    const inv = await ann.client.post('/api/v1/invites', { role: 'editor' });
    expectStatus(inv, 201);
    expectStatus(await bob.client.post(`/api/v1/invites/${inv.body.token}/accept`), 200);
  });
  afterAll(async () => s?.stop());

  it('create answers 201 with id, role, email, expires_at (7 days), a one-time iv_ token and accept_url', async () => {
    const before = Date.now();
    const res = await ann.client.post('/api/v1/invites', { role: 'viewer' });
    expectStatus(res, 201);
    const b = res.body;
    expect(b.id).toMatch(/^in_/);
    expect(b).toMatchObject({ role: 'viewer', email: null, state: 'pending', created_by: ann.id, revoked_at: null, accepted_at: null, accepted_by: null });
    expect(b.token).toMatch(/^iv_[A-Za-z0-9_-]{40,}$/);
    expect(b.accept_url).toBe(`${s.ctx.config.publicUrl}/invite/${b.token}`);
    expect(b.hint).toBe(`iv_…${b.token.slice(-4)}`);
    const expires = Date.parse(b.expires_at);
    expect(expires).toBeGreaterThanOrEqual(before + 7 * DAY - 1000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 7 * DAY + 1000);
    // Only the hash is stored.
    const row = await s.ctx.store.db.selectFrom('invites').selectAll().where('id', '=', b.id).executeTakeFirstOrThrow();
    expect(row.token_hash).toBe(hashSecret(b.token));
    expect(JSON.stringify(row)).not.toContain(b.token);
  });

  it('expires_in_days is 1 to 30; the email is lower-cased; both URL forms create in their workspace', async () => {
    const long = await ann.client.post(`/api/v1/workspaces/${ann.workspace.slug}/invites`, { role: 'owner', email: 'Zed@Example.COM', expires_in_days: 30 });
    expectStatus(long, 201);
    expect(long.body).toMatchObject({ role: 'owner', email: 'zed@example.com' });
    expect(Math.abs(Date.parse(long.body.expires_at) - (Date.now() + 30 * DAY))).toBeLessThan(60_000);
    const short = await ann.client.post(`/api/v1/workspaces/${ann.workspace.id}/invites`, { role: 'editor', expires_in_days: 1 });
    expectStatus(short, 201);
    expect(Math.abs(Date.parse(short.body.expires_at) - (Date.now() + DAY))).toBeLessThan(60_000);
    // An owner of two workspaces creates in the one the path names, not the current one.
    const other = await ann.client.post('/api/v1/workspaces', { name: 'Ann Side Project' });
    expectStatus(other, 201);
    const there = await ann.client.post(`/api/v1/workspaces/${other.body.slug}/invites`, { role: 'viewer' });
    expectStatus(there, 201);
    expect((await ann.client.get(`/api/v1/workspaces/${other.body.id}/invites`)).body.invites.map((i: any) => i.id)).toEqual([there.body.id]);
    expect((await ann.client.get('/api/v1/invites')).body.invites.map((i: any) => i.id)).not.toContain(there.body.id);
    const acc = await cat.client.post(`/api/v1/invites/${there.body.token}/accept`);
    expectStatus(acc, 200);
    expect(acc.body).toEqual({ workspace: { id: other.body.id, slug: other.body.slug, name: 'Ann Side Project' }, role: 'viewer' });
  });

  it('bad invite input is 400 invalid_request and creates nothing', async () => {
    const before = (await ann.client.get('/api/v1/invites')).body.invites.length;
    const bad: unknown[] = [
      {},
      { role: 'admin' },
      { role: 'Editor' },
      { role: 3 },
      { role: 'viewer', expires_in_days: 0 },
      { role: 'viewer', expires_in_days: 31 },
      { role: 'viewer', expires_in_days: 1.5 },
      { role: 'viewer', expires_in_days: '7' },
      { role: 'viewer', email: 'not-an-email' },
      { role: 'viewer', token: 'iv_mine' },
    ];
    for (const body of bad) expectError(await ann.client.post('/api/v1/invites', body), 400, 'invalid_request');
    expect((await ann.client.get('/api/v1/invites')).body.invites.length).toBe(before);
  });

  it('an invite for the email of a member is 409 already_member', async () => {
    expectError(await ann.client.post('/api/v1/invites', { role: 'viewer', email: await emailOf(bob.client) }), 409, 'already_member');
  });

  it('both listing forms show the hint and state, never the token; accept turns it used', async () => {
    const res = await ann.client.post('/api/v1/invites', { role: 'viewer', email: await emailOf(cat.client) });
    expectStatus(res, 201);
    const token: string = res.body.token;
    for (const url of ['/api/v1/invites', `/api/v1/workspaces/${ann.workspace.slug}/invites`, `/api/v1/workspaces/${ann.workspace.id}/invites`]) {
      const list = await ann.client.get(url);
      expectStatus(list, 200);
      expect(list.text).not.toContain(token);
      expect(list.text).not.toContain(token.slice(3, 20));
      const mine = list.body.invites.find((i: any) => i.id === res.body.id);
      expect(mine).toEqual({
        id: res.body.id,
        role: 'viewer',
        email: res.body.email,
        hint: `iv_…${token.slice(-4)}`,
        state: 'pending',
        created_by: ann.id,
        created_at: res.body.created_at,
        expires_at: res.body.expires_at,
        revoked_at: null,
        accepted_at: null,
        accepted_by: null,
      });
      expect(Object.keys(mine)).not.toContain('token');
      expect(Object.keys(mine)).not.toContain('accept_url');
    }

    const acc = await cat.client.post(`/api/v1/invites/${token}/accept`);
    expectStatus(acc, 200);
    expect(acc.body).toEqual({ workspace: { id: ann.workspace.id, slug: ann.workspace.slug, name: 'Ann' }, role: 'viewer' });
    expect(await members(ann.client, ann.workspace.slug)).toContainEqual({ id: cat.id, role: 'viewer' });
    // Cat works there now, as a viewer.
    const who = await cat.client.get(at('/api/v1/whoami', ann.workspace.slug));
    expect(who.body).toMatchObject({ workspace: { id: ann.workspace.id }, role: 'viewer' });
    const after = (await ann.client.get('/api/v1/invites')).body.invites.find((i: any) => i.id === res.body.id);
    expect(after).toMatchObject({ state: 'accepted', accepted_by: cat.id, accepted_at: expect.any(String), revoked_at: null });

    // Used: nobody can take it again, not even its taker.
    expectError(await cat.client.post(`/api/v1/invites/${token}/accept`), 409, 'invite_used');
    const dan = await signupHuman(s.url, 'Dan');
    expectError(await dan.client.post(`/api/v1/invites/${token}/accept`), 409, 'invite_used');
    // A used invite cannot be revoked either; removing the member is the way.
    expectError(await ann.client.delete(`/api/v1/invites/${res.body.id}`), 409, 'invite_used');

    // One transaction wrote all of it, with its audit entry.
    const audit = await s.ctx.store.db
      .selectFrom('audit_log')
      .selectAll()
      .where('workspace_id', '=', ann.workspace.id)
      .where('action', '=', 'invite.accept')
      .execute();
    expect(audit.map((e) => [e.principal_id, JSON.parse(e.detail)])).toContainEqual([cat.id, { invite: res.body.id, role: 'viewer' }]);
    expectStatus(await ann.client.delete(`/api/v1/members/${cat.id}`), 200);
  });

  it('revoke (both forms): the invite is refused afterwards with 410 invite_revoked; revoking twice is fine', async () => {
    for (const form of ['current', 'path'] as const) {
      const res = await ann.client.post('/api/v1/invites', { role: 'editor' });
      expectStatus(res, 201);
      const url = form === 'current' ? `/api/v1/invites/${res.body.id}` : `/api/v1/workspaces/${ann.workspace.slug}/invites/${res.body.id}`;
      const rev = await ann.client.delete(url);
      expectStatus(rev, 200);
      expect(rev.body).toMatchObject({ id: res.body.id, state: 'revoked', revoked_at: expect.any(String) });
      expect(rev.text).not.toContain(res.body.token);
      const again = await ann.client.delete(url);
      expectStatus(again, 200);
      expect(again.body.revoked_at).toBe(rev.body.revoked_at);

      const listed = (await ann.client.get('/api/v1/invites')).body.invites.find((i: any) => i.id === res.body.id);
      expect(listed.state).toBe('revoked');
      expectError(await cat.client.post(`/api/v1/invites/${res.body.token}/accept`), 410, 'invite_revoked');
      expect((await members(ann.client, ann.workspace.slug)).map((m) => m.id)).not.toContain(cat.id);
    }
    const audit = await s.ctx.store.db
      .selectFrom('audit_log')
      .select('action')
      .where('workspace_id', '=', ann.workspace.id)
      .where('action', '=', 'invite.revoke')
      .execute();
    expect(audit.length).toBe(2);
  });

  it('an unknown invite id, or one of another workspace, is 404 invite_not_found on revoke', async () => {
    expectError(await ann.client.delete('/api/v1/invites/in_0123456789abcdefghjkmnpqrs'), 404, 'invite_not_found');
    const catInv = await cat.client.post('/api/v1/invites', { role: 'viewer' });
    expectStatus(catInv, 201);
    expectError(await ann.client.delete(`/api/v1/invites/${catInv.body.id}`), 404, 'invite_not_found');
    expectError(await ann.client.delete(`/api/v1/workspaces/${ann.workspace.slug}/invites/${catInv.body.id}`), 404, 'invite_not_found');
    expect((await cat.client.get('/api/v1/invites')).body.invites.find((i: any) => i.id === catInv.body.id).state).toBe('pending');
  });

  it('an expired invite is 410 invite_expired and is listed as expired', async () => {
    const res = await ann.client.post('/api/v1/invites', { role: 'viewer', expires_in_days: 1 });
    expectStatus(res, 201);
    await expire(s, res.body.id);
    expectError(await cat.client.post(`/api/v1/invites/${res.body.token}/accept`), 410, 'invite_expired');
    expect((await members(ann.client, ann.workspace.slug)).map((m) => m.id)).not.toContain(cat.id);
    const listed = (await ann.client.get('/api/v1/invites')).body.invites.find((i: any) => i.id === res.body.id);
    expect(listed).toMatchObject({ state: 'expired', accepted_at: null });
    // An expired invite may still be revoked; it then reads as revoked.
    expectStatus(await ann.client.delete(`/api/v1/invites/${res.body.id}`), 200);
    expectError(await cat.client.post(`/api/v1/invites/${res.body.token}/accept`), 410, 'invite_revoked');
  });

  it('an invite with an email is only for that email (403 invite_email_mismatch); the addressee takes it', async () => {
    const dan = await signupHuman(s.url, 'Dan');
    const res = await ann.client.post('/api/v1/invites', { role: 'editor', email: (await emailOf(dan.client)).toUpperCase() });
    expectStatus(res, 201);
    expectError(await cat.client.post(`/api/v1/invites/${res.body.token}/accept`), 403, 'invite_email_mismatch');
    expect((await ann.client.get('/api/v1/invites')).body.invites.find((i: any) => i.id === res.body.id).state).toBe('pending');
    const ok = await dan.client.post(`/api/v1/invites/${res.body.token}/accept`);
    expectStatus(ok, 200);
    expect(ok.body.role).toBe('editor');
  });

  it('a member accepting another invite is 409 already_member, and the invite stays pending', async () => {
    const res = await ann.client.post('/api/v1/invites', { role: 'owner' });
    expectStatus(res, 201);
    expectError(await bob.client.post(`/api/v1/invites/${res.body.token}/accept`), 409, 'already_member');
    expect(await members(ann.client, ann.workspace.slug)).toContainEqual({ id: bob.id, role: 'editor' });
    expect((await ann.client.get('/api/v1/invites')).body.invites.find((i: any) => i.id === res.body.id).state).toBe('pending');
    expectStatus(await ann.client.delete(`/api/v1/invites/${res.body.id}`), 200);
  });

  it('an unknown token is 404 invite_not_found', async () => {
    expectError(await cat.client.post('/api/v1/invites/iv_made-up-token/accept'), 404, 'invite_not_found');
    expectError(await cat.client.post('/api/v1/invites/anything/accept'), 404, 'invite_not_found');
  });

  it('accept needs a session with its CSRF token: no CSRF 403, no session 401, an agent 403', async () => {
    const res = await ann.client.post('/api/v1/invites', { role: 'viewer' });
    expectStatus(res, 201);
    const url = `/api/v1/invites/${res.body.token}/accept`;
    expectError(await cat.client.request('POST', url, { csrf: false }), 403, 'csrf_failed');
    expectError(await cat.client.post(url, undefined, { 'x-csrf-token': 'wrong' }), 403, 'csrf_failed');
    expectError(await new Client(s.url).post(url), 401, 'unauthorized');
    const a = await createAgentWithKey(ann.client, [{ action: 'read' }, { action: 'admin' }], { name: 'taker' });
    expectError(await a.client.post(url), 403, 'session_required');
    expectError(await cat.client.post(url, { extra: 1 }), 400, 'invalid_request');
    expect((await ann.client.get('/api/v1/invites')).body.invites.find((i: any) => i.id === res.body.id).state).toBe('pending');
    // With everything right it works.
    expectStatus(await cat.client.post(url, {}), 200);
    expectStatus(await ann.client.delete(`/api/v1/members/${cat.id}`), 200);
  });

  it('non-owners may not create, list or revoke invites (403 forbidden)', async () => {
    const res = await ann.client.post('/api/v1/invites', { role: 'viewer' });
    expectStatus(res, 201);
    const ws = ann.workspace.slug;
    expectError(await bob.client.post(at('/api/v1/invites', ws), { role: 'viewer' }), 403, 'forbidden');
    expectError(await bob.client.post(`/api/v1/workspaces/${ws}/invites`, { role: 'owner' }), 403, 'forbidden');
    expectError(await bob.client.get(at('/api/v1/invites', ws)), 403, 'forbidden');
    expectError(await bob.client.get(`/api/v1/workspaces/${ws}/invites`), 403, 'forbidden');
    expectError(await bob.client.delete(at(`/api/v1/invites/${res.body.id}`, ws)), 403, 'forbidden');
    expectError(await bob.client.delete(`/api/v1/workspaces/${ws}/invites/${res.body.id}`), 403, 'forbidden');
    expect((await ann.client.get('/api/v1/invites')).body.invites.find((i: any) => i.id === res.body.id).state).toBe('pending');
  });

  it('non-members get 404 workspace_not_found; agents 403 session_required', async () => {
    const res = await ann.client.post('/api/v1/invites', { role: 'viewer' });
    for (const ws of [ann.workspace.slug, ann.workspace.id]) {
      expectError(await cat.client.get(`/api/v1/workspaces/${ws}/invites`), 404, 'workspace_not_found');
      expectError(await cat.client.post(`/api/v1/workspaces/${ws}/invites`, { role: 'owner' }), 404, 'workspace_not_found');
      expectError(await cat.client.delete(`/api/v1/workspaces/${ws}/invites/${res.body.id}`), 404, 'workspace_not_found');
    }
    expectError(await cat.client.get(at('/api/v1/invites', ann.workspace.slug)), 404, 'workspace_not_found');
    const a = await createAgentWithKey(ann.client, [{ action: 'read' }, { action: 'admin' }], { name: 'inviter' });
    expectError(await a.client.get('/api/v1/invites'), 403, 'session_required');
    expectError(await a.client.post('/api/v1/invites', { role: 'viewer' }), 403, 'session_required');
    expectError(await a.client.delete(`/api/v1/invites/${res.body.id}`), 403, 'session_required');
  });

  it('an owner invite makes an owner; a demoted owner can no longer invite', async () => {
    const dan = await signupHuman(s.url, 'Dan');
    const res = await ann.client.post('/api/v1/invites', { role: 'owner' });
    expectStatus(await dan.client.post(`/api/v1/invites/${res.body.token}/accept`), 200);
    const ws = ann.workspace.slug;
    const made = await dan.client.post(`/api/v1/workspaces/${ws}/invites`, { role: 'viewer' });
    expectStatus(made, 201);
    expectStatus(await ann.client.patch(`/api/v1/members/${dan.id}`, { role: 'editor' }), 200);
    expectError(await dan.client.post(`/api/v1/workspaces/${ws}/invites`, { role: 'viewer' }), 403, 'forbidden');
    expectError(await dan.client.delete(`/api/v1/workspaces/${ws}/invites/${made.body.id}`), 403, 'forbidden');
  });

  it('the invite routes appear in the OpenAPI document', async () => {
    const doc = await new Client(s.url).get('/api/v1/openapi.json');
    const paths = doc.body.paths;
    expect(Object.keys(paths['/api/v1/invites'])).toEqual(expect.arrayContaining(['get', 'post']));
    expect(Object.keys(paths['/api/v1/invites/{id}'])).toEqual(['delete']);
    expect(Object.keys(paths['/api/v1/workspaces/{ws}/invites'])).toEqual(expect.arrayContaining(['get', 'post']));
    expect(Object.keys(paths['/api/v1/workspaces/{ws}/invites/{id}'])).toEqual(['delete']);
    expect(Object.keys(paths['/api/v1/invites/{token}/accept'])).toEqual(['post']);
    expect(Object.keys(paths['/api/v1/invites'].post.responses)).toContain('201');
  });
});

describe.each(testEngines())('sign-up with an invite, SIGNUPS=invite (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let ws: { id: string; slug: string };

  beforeAll(async () => {
    s = await startTestServer(engine, { SIGNUPS: 'invite' });
    // Invite mode admits nobody without an invite, so the first owner is created through the
    // core with sign-ups open (as an operator's bootstrap would), then signs in over HTTP.
    const email = freshEmail('owner');
    const first = await signup({ ...s.ctx, config: { ...s.ctx.config, signups: 'open' } }, { email, password: PASSWORD, name: 'Olga' });
    ws = first.workspace;
    owner = new Client(s.url);
    expectStatus(await owner.post('/api/auth/login', { email, password: PASSWORD }), 200);
  });
  afterAll(async () => s?.stop());

  async function invite(body: Record<string, unknown>): Promise<{ id: string; token: string }> {
    const res = await owner.post('/api/v1/invites', body);
    expectStatus(res, 201);
    return res.body;
  }

  async function cannotLogIn(email: string): Promise<void> {
    expectError(await new Client(s.url).post('/api/auth/login', { email, password: PASSWORD }), 401, 'invalid_credentials');
  }

  it('without a token sign-up is 403 invite_required', async () => {
    const email = freshEmail('none');
    expectError(await new Client(s.url).post('/api/v1/auth/signup', { email, password: PASSWORD, name: 'None' }), 403, 'invite_required');
    await cannotLogIn(email);
  });

  it('a valid token creates the account, joins the invited workspace with its role, and makes it the default', async () => {
    const inv = await invite({ role: 'editor' });
    const c = new Client(s.url);
    const email = freshEmail('newbie');
    const res = await c.post('/api/v1/auth/signup', { email, password: PASSWORD, name: 'Newbie', invite_token: inv.token });
    expectStatus(res, 201);
    expect(res.body.workspace).toEqual({ id: ws.id, slug: ws.slug, name: 'Olga' });
    const who = await c.get('/api/v1/whoami');
    expect(who.body).toMatchObject({ name: 'Newbie', workspace: { id: ws.id }, role: 'editor' });
    // The account still gets its own workspace, as owner.
    const list = await c.get('/api/v1/workspaces');
    expect(list.body.workspaces.map((w: any) => [w.id === ws.id ? 'invited' : 'own', w.role, w.current]).sort()).toEqual([
      ['invited', 'editor', true],
      ['own', 'owner', false],
    ]);
    // The new editor can write in the invited workspace straight away.
    expectStatus(await c.post('/api/v1/nodes', { path: 'eng/newbie.md', content: '# Hello\n' }), 201);
    const listed = (await owner.get('/api/v1/invites')).body.invites.find((i: any) => i.id === inv.id);
    expect(listed).toMatchObject({ state: 'accepted', accepted_by: res.body.principal.id });

    // The same token cannot make a second account.
    const again = freshEmail('again');
    expectError(
      await new Client(s.url).post('/api/v1/auth/signup', { email: again, password: PASSWORD, name: 'Again', invite_token: inv.token }),
      409,
      'invite_used',
    );
    await cannotLogIn(again);
  });

  it('an email-bound invite signs up only that email', async () => {
    const email = freshEmail('bound');
    const inv = await invite({ role: 'viewer', email });
    const other = freshEmail('other');
    expectError(
      await new Client(s.url).post('/api/v1/auth/signup', { email: other, password: PASSWORD, name: 'Other', invite_token: inv.token }),
      403,
      'invite_email_mismatch',
    );
    await cannotLogIn(other);
    const c = new Client(s.url);
    expectStatus(await c.post('/api/v1/auth/signup', { email: email.toUpperCase(), password: PASSWORD, name: 'Bound', invite_token: inv.token }), 201);
    expect((await c.get('/api/v1/whoami')).body).toMatchObject({ workspace: { id: ws.id }, role: 'viewer' });
  });

  it('unknown, revoked and expired tokens are refused with their codes and create no account', async () => {
    const unknown = freshEmail('unknown');
    expectError(
      await new Client(s.url).post('/api/v1/auth/signup', { email: unknown, password: PASSWORD, name: 'U', invite_token: 'iv_made-up' }),
      404,
      'invite_not_found',
    );
    await cannotLogIn(unknown);

    const revoked = await invite({ role: 'viewer' });
    expectStatus(await owner.delete(`/api/v1/invites/${revoked.id}`), 200);
    const r = freshEmail('revoked');
    expectError(await new Client(s.url).post('/auth/signup', { email: r, password: PASSWORD, name: 'R', invite_token: revoked.token }), 410, 'invite_revoked');
    await cannotLogIn(r);

    const expired = await invite({ role: 'viewer' });
    await expire(s, expired.id);
    const e = freshEmail('expired');
    expectError(
      await new Client(s.url).post('/api/auth/signup', { email: e, password: PASSWORD, name: 'E', invite_token: expired.token }),
      410,
      'invite_expired',
    );
    await cannotLogIn(e);
  });

  it('a sign-up that fails for another reason leaves the invite unused', async () => {
    const inv = await invite({ role: 'viewer' });
    const weak = await new Client(s.url).post('/api/v1/auth/signup', { email: freshEmail('weak'), password: 'short', name: 'W', invite_token: inv.token });
    expectError(weak, 400, 'weak_password');
    const taken = (await owner.get('/api/v1/me')).body.email;
    expectError(
      await new Client(s.url).post('/api/v1/auth/signup', { email: taken, password: PASSWORD, name: 'Dup', invite_token: inv.token }),
      409,
      'email_taken',
    );
    expect((await owner.get('/api/v1/invites')).body.invites.find((i: any) => i.id === inv.id).state).toBe('pending');
    const c = new Client(s.url);
    expectStatus(await c.post('/api/v1/auth/signup', { email: freshEmail('later'), password: PASSWORD, name: 'Later', invite_token: inv.token }), 201);
  });
});

describe.each(testEngines())('sign-up with an invite, SIGNUPS=open (%s)', (engine) => {
  let s: TestServer;
  let ann: Human;

  beforeAll(async () => {
    s = await startTestServer(engine);
    ann = await signupHuman(s.url, 'Ann');
  });
  afterAll(async () => s?.stop());

  it('an invite token given in open mode joins that workspace too', async () => {
    const inv = await ann.client.post('/api/v1/invites', { role: 'viewer' });
    expectStatus(inv, 201);
    const c = new Client(s.url);
    const res = await c.post('/api/v1/auth/signup', { email: freshEmail('open'), password: PASSWORD, name: 'Opal', invite_token: inv.body.token });
    expectStatus(res, 201);
    expect(res.body.workspace.id).toBe(ann.workspace.id);
    expect((await c.get('/api/v1/whoami')).body).toMatchObject({ workspace: { id: ann.workspace.id }, role: 'viewer' });
    expect(await members(ann.client, ann.workspace.slug)).toContainEqual({ id: res.body.principal.id, role: 'viewer' });
  });

  it('a bad token in open mode refuses the sign-up instead of silently ignoring it', async () => {
    const email = freshEmail('typo');
    expectError(
      await new Client(s.url).post('/api/v1/auth/signup', { email, password: PASSWORD, name: 'Typo', invite_token: 'iv_typo' }),
      404,
      'invite_not_found',
    );
    expectError(await new Client(s.url).post('/api/auth/login', { email, password: PASSWORD }), 401, 'invalid_credentials');
    // Without the token the same sign-up works.
    expectStatus(await new Client(s.url).post('/api/v1/auth/signup', { email, password: PASSWORD, name: 'Typo' }), 201);
  });
});
