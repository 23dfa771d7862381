import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyAuditChain } from '../../src/core/audit.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { expectError, expectStatus } from '../support/expect.js';

/**
 * Black-box checks of workspaces, members (role changes, removal, leaving, the last-owner
 * rule) and the display name, over real HTTP. Members join through invites; the invite
 * lifecycle itself is in invites.test.ts.
 */

type Human = { client: Client; id: string; workspace: { id: string; slug: string } };

/** The owner invites the human to `ws` with a role; the human accepts. */
async function join(owner: Client, ws: string, human: Client, role: string): Promise<void> {
  const inv = await owner.post(`/api/v1/workspaces/${ws}/invites`, { role });
  expectStatus(inv, 201);
  const acc = await human.post(`/api/v1/invites/${inv.body.token}/accept`);
  expectStatus(acc, 200);
  expect(acc.body.role).toBe(role);
}

/** Appends `?workspace=` so the request works in that workspace. */
const at = (path: string, ws: string) => `${path}${path.includes('?') ? '&' : '?'}workspace=${encodeURIComponent(ws)}`;

async function memberRole(client: Client, ws: string, id: string): Promise<string | undefined> {
  const res = await client.get(`/api/v1/workspaces/${ws}/members`);
  expectStatus(res, 200);
  return res.body.members.find((m: any) => m.id === id)?.role;
}

describe.each(testEngines())('workspaces (%s)', (engine) => {
  let s: TestServer;
  let ann: Human;
  let bea: Human;

  beforeAll(async () => {
    s = await startTestServer(engine);
    ann = await signupHuman(s.url, 'Ann');
    bea = await signupHuman(s.url, 'Bea');
  });
  afterAll(async () => s?.stop());

  it('a new human belongs to their own workspace as owner, and it is the current one', async () => {
    const res = await ann.client.get('/api/v1/workspaces');
    expectStatus(res, 200);
    expect(res.body.workspaces).toEqual([
      { id: ann.workspace.id, slug: ann.workspace.slug, name: 'Ann', role: 'owner', current: true, created_at: expect.any(String) },
    ]);
  });

  it('POST creates a workspace with a slug from the name; the creator is its owner and can work in it', async () => {
    const res = await ann.client.post('/api/v1/workspaces', { name: '  Rocket Team Ü ' });
    expectStatus(res, 201);
    expect(res.body).toMatchObject({ name: 'Rocket Team Ü', slug: 'rocket-team-u', role: 'owner', current: false });
    expect(res.body.id).toMatch(/^ws_/);
    const again = await ann.client.post('/api/v1/workspaces', { name: 'Rocket Team U' });
    expectStatus(again, 201);
    expect(again.body.slug).toBe('rocket-team-u-2');

    const list = await ann.client.get('/api/v1/workspaces');
    expect(list.body.workspaces.map((w: any) => [w.slug, w.role, w.current])).toEqual([
      [ann.workspace.slug, 'owner', true],
      ['rocket-team-u', 'owner', false],
      ['rocket-team-u-2', 'owner', false],
    ]);
    // The new workspace is usable at once, by id or slug, and the list marks it current there.
    const who = await ann.client.get(at('/api/v1/whoami', 'rocket-team-u'));
    expectStatus(who, 200);
    expect(who.body).toMatchObject({ workspace: { id: res.body.id, slug: 'rocket-team-u' }, role: 'owner' });
    const there = await ann.client.get(at('/api/v1/workspaces', res.body.id));
    expect(there.body.workspaces.find((w: any) => w.current).id).toBe(res.body.id);
    expectStatus(await ann.client.post(at('/api/v1/nodes', res.body.id), { path: 'eng/first.md', content: '# First\n' }), 201);
    expectStatus(await ann.client.post(at('/api/v1/spaces', res.body.id), { id: 'ops' }), 201);
    // Bea sees none of it.
    const beas = await bea.client.get('/api/v1/workspaces');
    expect(beas.body.workspaces.map((w: any) => w.id)).toEqual([bea.workspace.id]);
    expectError(await bea.client.get(at('/api/v1/whoami', 'rocket-team-u')), 404, 'workspace_not_found');

    // The creation is audited in the new workspace's chain, and the chain verifies.
    const audit = await s.ctx.store.db.selectFrom('audit_log').selectAll().where('workspace_id', '=', res.body.id).orderBy('seq').execute();
    expect(audit[0]).toMatchObject({ seq: 1, action: 'workspace.create', principal_id: ann.id });
    expect(await verifyAuditChain(s.ctx.store.db, res.body.id)).toBeNull();
  });

  it('bad workspace input is 400 invalid_request', async () => {
    const bad: unknown[] = [{}, { name: '' }, { name: '   ' }, { name: 42 }, { name: 'x'.repeat(101) }, { name: 'ok', slug: 'mine' }, { name: 'a\nb' }];
    for (const body of bad) expectError(await ann.client.post('/api/v1/workspaces', body), 400, 'invalid_request');
    expectError(
      await ann.client.request('POST', '/api/v1/workspaces', { body: '{"name":', headers: { 'content-type': 'application/json' } }),
      400,
      'invalid_json',
    );
  });

  it('an agent sees its one workspace with no role, and cannot create workspaces', async () => {
    const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'ws-lister' });
    const res = await a.client.get('/api/v1/workspaces');
    expectStatus(res, 200);
    expect(res.body.workspaces).toEqual([
      { id: ann.workspace.id, slug: ann.workspace.slug, name: 'Ann', role: null, current: true, created_at: expect.any(String) },
    ]);
    expectError(await a.client.post('/api/v1/workspaces', { name: 'Agent land' }), 403, 'session_required');
    expectError(await new Client(s.url).get('/api/v1/workspaces'), 401, 'unauthorized');
    expectError(await new Client(s.url).post('/api/v1/workspaces', { name: 'Anon' }), 401, 'unauthorized');
  });

  it('creating a workspace needs the CSRF token', async () => {
    expectError(await ann.client.request('POST', '/api/v1/workspaces', { json: { name: 'Forged' }, csrf: false }), 403, 'csrf_failed');
    const list = await ann.client.get('/api/v1/workspaces');
    expect(list.body.workspaces.map((w: any) => w.name)).not.toContain('Forged');
  });
});

describe.each(testEngines())('members (%s)', (engine) => {
  let s: TestServer;
  let ann: Human; // owner of the team workspace
  let bob: Human;
  let cat: Human; // never a member of Ann's workspace
  let team: { id: string; slug: string };

  beforeAll(async () => {
    s = await startTestServer(engine);
    ann = await signupHuman(s.url, 'Ann');
    bob = await signupHuman(s.url, 'Bob');
    cat = await signupHuman(s.url, 'Cat');
    team = ann.workspace;
    await join(ann.client, team.slug, bob.client, 'editor');
    const pages = [
      ['eng/handbook.md', '# Handbook\n\nFor everyone.\n'],
      ['eng/plans.md', '---\nsensitivity: confidential\n---\n# Plans\n\nConfidential plans.\n'],
    ];
    for (const [path, content] of pages) expectStatus(await ann.client.post('/api/v1/nodes', { path, content }), 201);
  });
  afterAll(async () => s?.stop());

  it('both forms list id, name, email, role and joined_at of every member, oldest first', async () => {
    const me = await bob.client.get('/api/v1/me');
    const current = await ann.client.get('/api/v1/members');
    expectStatus(current, 200);
    expect(current.body.members).toEqual([
      { id: ann.id, name: 'Ann', email: expect.stringMatching(/^ann-.*@example\.com$/), role: 'owner', joined_at: expect.any(String) },
      { id: bob.id, name: 'Bob', email: me.body.email, role: 'editor', joined_at: expect.any(String) },
    ]);
    expect(Date.parse(current.body.members[1].joined_at)).toBeGreaterThanOrEqual(Date.parse(current.body.members[0].joined_at));
    for (const ws of [team.id, team.slug]) {
      const byPath = await ann.client.get(`/api/v1/workspaces/${ws}/members`);
      expectStatus(byPath, 200);
      expect(byPath.body).toEqual(current.body);
    }
    // Any member may list: Bob (editor), through the path form and through ?workspace=.
    expect((await bob.client.get(`/api/v1/workspaces/${team.slug}/members`)).body).toEqual(current.body);
    expect((await bob.client.get(at('/api/v1/members', team.slug))).body).toEqual(current.body);
    // Bob's own workspace has only Bob.
    const own = await bob.client.get('/api/v1/members');
    expect(own.body.members.map((m: any) => [m.id, m.role])).toEqual([[bob.id, 'owner']]);
  });

  it('an agent cannot use the members routes (403 session_required)', async () => {
    const a = await createAgentWithKey(ann.client, [{ action: 'read' }, { action: 'admin' }], { name: 'member-peeker' });
    expectError(await a.client.get('/api/v1/members'), 403, 'session_required');
    expectError(await a.client.get(`/api/v1/workspaces/${team.slug}/members`), 403, 'session_required');
    expectError(await a.client.patch(`/api/v1/members/${bob.id}`, { role: 'owner' }), 403, 'session_required');
    expectError(await a.client.delete(`/api/v1/members/${bob.id}`), 403, 'session_required');
    expect(await memberRole(ann.client, team.slug, bob.id)).toBe('editor');
  });

  it('an editor writes pages and reads confidential ones, but cannot create Spaces', async () => {
    expectStatus(await bob.client.post(at('/api/v1/nodes', team.slug), { path: 'eng/bob-editor.md', content: '# Bob\n' }), 201);
    const plans = await bob.client.get(at(`/api/v1/nodes/${encodeURIComponent('eng/plans.md')}`, team.slug));
    expectStatus(plans, 200);
    expect(plans.body.content).toContain('Confidential plans.');
    expectError(await bob.client.post(at('/api/v1/spaces', team.slug), { id: 'bobspace' }), 403, 'forbidden');
  });

  it('the owner demotes an editor to viewer: writes stop and confidential pages vanish at once; promotion restores them', async () => {
    const res = await ann.client.patch(`/api/v1/members/${bob.id}`, { role: 'viewer' });
    expectStatus(res, 200);
    expect(res.body).toMatchObject({ id: bob.id, name: 'Bob', role: 'viewer', joined_at: expect.any(String) });
    expect(await memberRole(ann.client, team.slug, bob.id)).toBe('viewer');
    const who = await bob.client.get(at('/api/v1/whoami', team.slug));
    expect(who.body).toMatchObject({ role: 'viewer', ceiling: 'internal' });

    expectError(await bob.client.post(at('/api/v1/nodes', team.slug), { path: 'eng/bob-viewer.md', content: '# No\n' }), 403, 'forbidden');
    const plans = await bob.client.get(at(`/api/v1/nodes/${encodeURIComponent('eng/plans.md')}`, team.slug));
    expectError(plans, 404, 'not_found');
    expect(plans.text).not.toContain('Confidential plans');
    expectStatus(await bob.client.get(at(`/api/v1/nodes/${encodeURIComponent('eng/handbook.md')}`, team.slug)), 200);

    // The path form, by workspace id, promotes him back.
    const back = await ann.client.patch(`/api/v1/workspaces/${team.id}/members/${bob.id}`, { role: 'editor' });
    expectStatus(back, 200);
    expect(back.body.role).toBe('editor');
    expectStatus(await bob.client.post(at('/api/v1/nodes', team.slug), { path: 'eng/bob-again.md', content: '# Again\n' }), 201);
    expectStatus(await bob.client.get(at(`/api/v1/nodes/${encodeURIComponent('eng/plans.md')}`, team.slug)), 200);

    // Setting the same role again changes nothing and adds no audit entry.
    const before = await s.ctx.store.db.selectFrom('audit_log').select('seq').where('workspace_id', '=', team.id).where('action', '=', 'member.role').execute();
    expectStatus(await ann.client.patch(`/api/v1/members/${bob.id}`, { role: 'editor' }), 200);
    const after = await s.ctx.store.db
      .selectFrom('audit_log')
      .selectAll()
      .where('workspace_id', '=', team.id)
      .where('action', '=', 'member.role')
      .orderBy('seq')
      .execute();
    expect(after.length).toBe(before.length);
    expect(after.map((e) => JSON.parse(e.detail))).toEqual([
      { member: bob.id, from: 'editor', to: 'viewer' },
      { member: bob.id, from: 'viewer', to: 'editor' },
    ]);
    expect(await verifyAuditChain(s.ctx.store.db, team.id)).toBeNull();
  });

  it('a non-owner may not change roles or remove others (403 forbidden), and nothing changes', async () => {
    expectError(await bob.client.patch(at(`/api/v1/members/${ann.id}`, team.slug), { role: 'viewer' }), 403, 'forbidden');
    expectError(await bob.client.patch(`/api/v1/workspaces/${team.slug}/members/${bob.id}`, { role: 'owner' }), 403, 'forbidden');
    expectError(await bob.client.delete(`/api/v1/workspaces/${team.slug}/members/${ann.id}`), 403, 'forbidden');
    expectError(await bob.client.delete(at(`/api/v1/members/${ann.id}`, team.slug), {}), 403, 'forbidden');
    expect(await memberRole(ann.client, team.slug, ann.id)).toBe('owner');
    expect(await memberRole(ann.client, team.slug, bob.id)).toBe('editor');
  });

  it('a workspace you are not a member of is 404 workspace_not_found on every members route', async () => {
    for (const ws of [team.slug, team.id, 'no-such-workspace']) {
      expectError(await cat.client.get(`/api/v1/workspaces/${ws}/members`), 404, 'workspace_not_found');
      expectError(await cat.client.patch(`/api/v1/workspaces/${ws}/members/${bob.id}`, { role: 'viewer' }), 404, 'workspace_not_found');
      expectError(await cat.client.delete(`/api/v1/workspaces/${ws}/members/${bob.id}`), 404, 'workspace_not_found');
    }
    expectError(await cat.client.get(at('/api/v1/members', team.slug)), 404, 'workspace_not_found');
    expect(await memberRole(ann.client, team.slug, bob.id)).toBe('editor');
  });

  it('an unknown member, or one of another workspace, is 404 member_not_found', async () => {
    expectError(await ann.client.patch('/api/v1/members/pr_0123456789abcdefghjkmnpqrs', { role: 'viewer' }), 404, 'member_not_found');
    expectError(await ann.client.delete(`/api/v1/members/${cat.id}`), 404, 'member_not_found');
    expectError(await ann.client.patch(`/api/v1/workspaces/${team.slug}/members/${cat.id}`, { role: 'viewer' }), 404, 'member_not_found');
    // Cat is still the owner of her own workspace.
    expect(await memberRole(cat.client, cat.workspace.slug, cat.id)).toBe('owner');
  });

  it('bad role-change input is 400 invalid_request', async () => {
    const url = `/api/v1/members/${bob.id}`;
    for (const body of [{}, { role: 'admin' }, { role: 'Owner' }, { role: 1 }, { role: null }, { role: 'viewer', extra: true }, ['viewer']]) {
      expectError(await ann.client.patch(url, body), 400, 'invalid_request');
    }
    expectError(await ann.client.request('PATCH', url, { body: 'role=viewer', headers: { 'content-type': 'application/json' } }), 400, 'invalid_json');
    expect(await memberRole(ann.client, team.slug, bob.id)).toBe('editor');
  });

  it('role changes and removals need the CSRF token', async () => {
    expectError(await ann.client.request('PATCH', `/api/v1/members/${bob.id}`, { json: { role: 'viewer' }, csrf: false }), 403, 'csrf_failed');
    expectError(await ann.client.request('DELETE', `/api/v1/members/${bob.id}`, { csrf: false }), 403, 'csrf_failed');
    expect(await memberRole(ann.client, team.slug, bob.id)).toBe('editor');
  });

  it('the last owner can neither be demoted nor leave (409 last_owner); with a second owner both work', async () => {
    expectError(await ann.client.patch(`/api/v1/members/${ann.id}`, { role: 'editor' }), 409, 'last_owner');
    expectError(await ann.client.patch(`/api/v1/workspaces/${team.slug}/members/${ann.id}`, { role: 'viewer' }), 409, 'last_owner');
    expectError(await ann.client.delete(`/api/v1/members/${ann.id}`), 409, 'last_owner');
    expectError(await ann.client.delete(`/api/v1/workspaces/${team.id}/members/${ann.id}`), 409, 'last_owner');
    expect(await memberRole(ann.client, team.slug, ann.id)).toBe('owner');
    // An owner may set their own role to owner: nothing changes.
    expectStatus(await ann.client.patch(`/api/v1/members/${ann.id}`, { role: 'owner' }), 200);

    // A second owner: now Ann may step down, and then Bob is the last owner.
    expectStatus(await ann.client.patch(`/api/v1/members/${bob.id}`, { role: 'owner' }), 200);
    const down = await ann.client.patch(`/api/v1/members/${ann.id}`, { role: 'editor' });
    expectStatus(down, 200);
    expect(down.body.role).toBe('editor');
    // Ann is no longer an owner: owner-only acts are refused for her now.
    expectError(await ann.client.patch(`/api/v1/members/${bob.id}`, { role: 'viewer' }), 403, 'forbidden');
    expectError(await bob.client.patch(`/api/v1/workspaces/${team.slug}/members/${bob.id}`, { role: 'editor' }), 409, 'last_owner');
    expectError(await bob.client.delete(`/api/v1/workspaces/${team.slug}/members/${bob.id}`), 409, 'last_owner');
    // Bob restores the original arrangement.
    expectStatus(await bob.client.patch(`/api/v1/workspaces/${team.slug}/members/${ann.id}`, { role: 'owner' }), 200);
    expectStatus(await ann.client.patch(`/api/v1/members/${bob.id}`, { role: 'editor' }), 200);
    expect(await memberRole(ann.client, team.slug, ann.id)).toBe('owner');
    expect(await memberRole(ann.client, team.slug, bob.id)).toBe('editor');
  });

  it('an owner removes a member: access to the workspace ends on the next request, the rest of the account works', async () => {
    const dan = await signupHuman(s.url, 'Dan');
    await join(ann.client, team.slug, dan.client, 'editor');
    expectStatus(await dan.client.get(at('/api/v1/members', team.slug)), 200);

    const del = await ann.client.delete(`/api/v1/workspaces/${team.slug}/members/${dan.id}`);
    expectStatus(del, 200);
    expect(del.body).toEqual({ removed: true, id: dan.id, workspace_id: team.id, left: false });

    expectError(await dan.client.get(at('/api/v1/members', team.slug)), 404, 'workspace_not_found');
    expectError(await dan.client.post(at('/api/v1/nodes', team.slug), { path: 'eng/dan.md', content: '# Dan\n' }), 404, 'workspace_not_found');
    expectError(await dan.client.get(`/api/v1/workspaces/${team.slug}/members`), 404, 'workspace_not_found');
    const list = await dan.client.get('/api/v1/workspaces');
    expect(list.body.workspaces.map((w: any) => w.id)).toEqual([dan.workspace.id]);
    expect((await ann.client.get('/api/v1/members')).body.members.map((m: any) => m.id)).not.toContain(dan.id);
    // Removing again: he is not a member any more.
    expectError(await ann.client.delete(`/api/v1/members/${dan.id}`), 404, 'member_not_found');
    const audit = await s.ctx.store.db.selectFrom('audit_log').selectAll().where('workspace_id', '=', team.id).where('action', '=', 'member.remove').execute();
    expect(audit.map((e) => [e.principal_id, JSON.parse(e.detail).member])).toContainEqual([ann.id, dan.id]);
  });

  it('a member leaves (own id, either form); an owner may leave while another owner remains', async () => {
    const eve = await signupHuman(s.url, 'Eve');
    await join(ann.client, team.slug, eve.client, 'viewer');
    const leave = await eve.client.delete(at(`/api/v1/members/${eve.id}`, team.slug));
    expectStatus(leave, 200);
    expect(leave.body).toEqual({ removed: true, id: eve.id, workspace_id: team.id, left: true });
    expectError(await eve.client.get(at('/api/v1/whoami', team.slug)), 404, 'workspace_not_found');

    await join(ann.client, team.slug, eve.client, 'owner');
    const again = await eve.client.delete(`/api/v1/workspaces/${team.id}/members/${eve.id}`);
    expectStatus(again, 200);
    expect(again.body.left).toBe(true);
    expect((await ann.client.get('/api/v1/members')).body.members.map((m: any) => m.id)).not.toContain(eve.id);
    const actions = await s.ctx.store.db
      .selectFrom('audit_log')
      .select('action')
      .where('workspace_id', '=', team.id)
      .where('principal_id', '=', eve.id)
      .orderBy('seq')
      .execute();
    expect(actions.map((a) => a.action)).toEqual(['invite.accept', 'member.leave', 'invite.accept', 'member.leave']);
  });

  it('a removed member whose session worked in that workspace by default falls back to their own workspace', async () => {
    // An invited sign-up's session works in the invited workspace by default.
    const inv = await ann.client.post('/api/v1/invites', { role: 'viewer' });
    expectStatus(inv, 201);
    const fay = new Client(s.url);
    const email = `fay-${process.pid}-${Date.now()}@example.com`;
    const up = await fay.post('/api/v1/auth/signup', { email, password: 'correct horse battery', name: 'Fay', invite_token: inv.body.token });
    expectStatus(up, 201);
    const before = await fay.get('/api/v1/whoami');
    expect(before.body).toMatchObject({ workspace: { id: team.id }, role: 'viewer' });

    expectStatus(await ann.client.delete(`/api/v1/members/${up.body.principal.id}`), 200);
    const after = await fay.get('/api/v1/whoami');
    expectStatus(after, 200);
    expect(after.body.workspace.id).not.toBe(team.id);
    expect(after.body.role).toBe('owner');
    expectError(await fay.get(at('/api/v1/whoami', team.id)), 404, 'workspace_not_found');
  });

  it('a human removed from their last workspace is signed out', async () => {
    const gus = await signupHuman(s.url, 'Gus');
    // Ann joins Gus's workspace as a second owner and removes Gus from it.
    await join(gus.client, gus.workspace.slug, ann.client, 'owner');
    expectStatus(await ann.client.delete(`/api/v1/workspaces/${gus.workspace.slug}/members/${gus.id}`), 200);
    expectError(await gus.client.get('/api/v1/me'), 401, ['session_expired', 'unauthorized']);
    // Ann carries on in the workspace as its owner.
    expect(await memberRole(ann.client, gus.workspace.slug, ann.id)).toBe('owner');
  });

  it('agents created by a human who leaves are suspended at once (keys dead) until an owner adopts them (issue 11)', async () => {
    const hal = await signupHuman(s.url, 'Hal');
    await join(ann.client, team.slug, hal.client, 'editor');
    const made = await hal.client.post(at('/api/v1/principals', team.slug), {
      name: 'hal-bot',
      grants: [{ action: 'read', scope: '*', ceiling: 'internal' }],
    });
    expectStatus(made, 201);
    const key = await hal.client.post(at(`/api/v1/principals/${made.body.id}/tokens`, team.slug), { name: 'k' });
    expectStatus(key, 201);
    const bot = new Client(s.url, key.body.key);
    expectStatus(await bot.get('/api/v1/me'), 200);

    expectStatus(await hal.client.delete(at(`/api/v1/members/${hal.id}`, team.slug)), 200);
    // The key dies with its creator's membership, like any dead key.
    expectError(await bot.get('/api/v1/me'), 401, 'invalid_token');
    expectError(await bot.get(`/api/v1/nodes/${encodeURIComponent('eng/handbook.md')}`), 401, 'invalid_token');
    const listed = (await ann.client.get('/api/v1/principals')).body.principals.find((p: any) => p.id === made.body.id);
    expect(listed).toMatchObject({ kind: 'agent', name: 'hal-bot', creator: hal.id });
    expect(listed.suspended_at).toEqual(expect.any(String));
    // No new key before an owner adopts it.
    expectError(await ann.client.post(`/api/v1/principals/${made.body.id}/tokens`, { name: 'k2' }), 409, 'agent_suspended');
    const adopted = await ann.client.post(`/api/v1/principals/${made.body.id}/adopt`);
    expectStatus(adopted, 200);
    expect(adopted.body).toMatchObject({ creator: ann.id, suspended_at: null });
    // The old key stays dead; a new one works.
    expectError(await bot.get('/api/v1/me'), 401, 'invalid_token');
    const fresh = await ann.client.post(`/api/v1/principals/${made.body.id}/tokens`, { name: 'k3' });
    expectStatus(fresh, 201);
    expectStatus(await new Client(s.url, fresh.body.key).get(`/api/v1/nodes/${encodeURIComponent('eng/handbook.md')}`), 200);
    const audit = await s.ctx.store.db.selectFrom('audit_log').select('action').where('workspace_id', '=', team.id).execute();
    expect(audit.map((a) => a.action)).toEqual(expect.arrayContaining(['agent.suspend', 'agent.adopt']));
  });

  it('the members routes appear in the OpenAPI document', async () => {
    const doc = await new Client(s.url).get('/api/v1/openapi.json');
    expectStatus(doc, 200);
    const paths = doc.body.paths;
    expect(Object.keys(paths['/api/v1/workspaces'])).toEqual(expect.arrayContaining(['get', 'post']));
    expect(Object.keys(paths['/api/v1/members'])).toEqual(['get']);
    expect(Object.keys(paths['/api/v1/members/{id}'])).toEqual(expect.arrayContaining(['patch', 'delete']));
    expect(Object.keys(paths['/api/v1/workspaces/{ws}/members'])).toEqual(['get']);
    expect(Object.keys(paths['/api/v1/workspaces/{ws}/members/{id}'])).toEqual(expect.arrayContaining(['patch', 'delete']));
    expect(paths['/api/v1/members/{id}'].patch.requestBody.content['application/json'].schema.properties.role.enum).toEqual(['owner', 'editor', 'viewer']);
  });
});

describe.each(testEngines())('display name (%s)', (engine) => {
  let s: TestServer;
  let ann: Human;

  beforeAll(async () => {
    s = await startTestServer(engine);
    ann = await signupHuman(s.url, 'Ann');
  });
  afterAll(async () => s?.stop());

  it('PATCH /api/v1/me changes the name everywhere it shows, trimmed', async () => {
    const res = await ann.client.patch('/api/v1/me', { name: '  Ann Smith ' });
    expectStatus(res, 200);
    expect(res.body).toEqual({ id: ann.id, name: 'Ann Smith' });
    expect((await ann.client.get('/api/v1/me')).body.name).toBe('Ann Smith');
    expect((await ann.client.get('/api/v1/whoami')).body.name).toBe('Ann Smith');
    expect((await ann.client.get('/api/v1/members')).body.members[0].name).toBe('Ann Smith');
    const max = 'é'.repeat(100);
    expectStatus(await ann.client.patch('/api/v1/me', { name: max }), 200);
    expect((await ann.client.get('/api/v1/me')).body.name).toBe(max);
    const audit = await s.ctx.store.db
      .selectFrom('audit_log')
      .selectAll()
      .where('workspace_id', '=', ann.workspace.id)
      .where('action', '=', 'account.name')
      .orderBy('seq')
      .execute();
    expect(audit.map((e) => JSON.parse(e.detail))).toEqual([
      { from: 'Ann', to: 'Ann Smith' },
      { from: 'Ann Smith', to: max },
    ]);
  });

  it('empty, too long, wrong type, unknown fields and control characters are 400; the name stays', async () => {
    expectStatus(await ann.client.patch('/api/v1/me', { name: 'Ann' }), 200);
    const bad: unknown[] = [
      { name: '' },
      { name: '    ' },
      { name: 'x'.repeat(101) },
      { name: 7 },
      {},
      { name: 'Ann', email: 'x@example.com' },
      { name: 'A\nB' },
      { name: 'Ann <ann@x>' },
    ];
    for (const body of bad) expectError(await ann.client.patch('/api/v1/me', body), 400, 'invalid_request');
    expect((await ann.client.get('/api/v1/me')).body.name).toBe('Ann');
  });

  it('needs a session with its CSRF token; agents cannot rename themselves', async () => {
    expectError(await ann.client.request('PATCH', '/api/v1/me', { json: { name: 'Forged' }, csrf: false }), 403, 'csrf_failed');
    expectError(await new Client(s.url).patch('/api/v1/me', { name: 'Anon' }), 401, 'unauthorized');
    const a = await createAgentWithKey(ann.client, [{ action: 'read' }], { name: 'namer' });
    expectError(await a.client.patch('/api/v1/me', { name: 'Renamed bot' }), 403, 'session_required');
    expect((await a.client.get('/api/v1/me')).body.name).toBe('namer');
    expect((await ann.client.get('/api/v1/me')).body.name).toBe('Ann');
  });
});
