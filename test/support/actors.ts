import { expect } from 'vitest';
import { ACTIONS, type Action, type Role } from '../../src/policy/principal.js';
import { Client, type TestServer } from './server.js';

/**
 * The callers of the authorization matrix (issue 3), set up once per server: one workspace
 * "A" with an owner, a second owner who stepped up, an editor and a viewer (who joined
 * through invites), agents of A lacking one grant each or with a low ceiling, dead
 * credentials of every kind, and another workspace "F" whose broadly granted agent presents
 * A's ids. Cells of the matrix take a copy of an actor's client, so nothing a cell answers
 * (a Set-Cookie of a login, say) leaks into the next cell.
 *
 * A new actor is one id in ACTOR_IDS plus one entry in the record `setupWorld` builds.
 */

export const PASSWORD = 'correct horse battery';

export const ACTOR_IDS = [
  'none',
  'foreignKey',
  'agentNoGrant',
  'agentLowCeiling',
  'viewer',
  'editor',
  'owner',
  'ownerStepUp',
  'expiredKey',
  'revokedKey',
  'lockedOutKey',
  'oauthToken',
  'gitToken',
  'pinnedKey',
  'demotedCreator',
  'demotedAgent',
  'elevatedAgent',
] as const;
export type ActorId = (typeof ACTOR_IDS)[number];

/**
 * anonymous: no credentials. human: a web session in A. agent: a live agent key (of A, or of
 * F for foreignKey). dead: a credential /api refuses whatever the route (expired, revoked,
 * locked-out or IP-pinned keys, oa_ and gt_ tokens).
 */
export type ActorKind = 'anonymous' | 'human' | 'agent' | 'dead';

export interface Human {
  id: string;
  name: string;
  email: string;
  client: Client;
}

export interface Actor {
  id: ActorId;
  kind: ActorKind;
  /** Human-readable, for failure messages. */
  about: string;
  /** Humans: their account and role in A. */
  human?: Human & { role: Role; stepUp: boolean };
  /**
   * A copy of the credential to present. `grant` is the action the route checks for agents:
   * the "agent without the needed grant" then holds every action but that one (and nothing
   * at all when the route names no grant).
   */
  client(grant?: Action): Client;
  /** The agent behind the credential (agents only), for rows about "your own" agent. */
  agentId?(grant?: Action): string;
  /** An equivalent new credential, for cells that end or change the caller's own session. */
  fresh(grant?: Action): Promise<Client>;
  /** The sensitivity of the pages this actor's page cells work on. */
  pageSensitivity: 'internal' | 'confidential' | 'secret';
  /** Runs before each cell (keeps the step-up of ownerStepUp fresh). */
  prepare?(): Promise<void>;
}

export interface PageRef {
  id: string;
  path: string;
}

export interface World {
  s: TestServer;
  /** Workspace A, where every human actor works and every agent actor but foreignKey lives. */
  ws: { id: string; slug: string };
  /** The first session of A's owner: makes fixtures. It stepped up and locked A down once. */
  admin: Client;
  actors: Record<ActorId, Actor>;
  /** Workspace F of foreignKey: its owner, and an agent there. */
  foreign: { ws: { id: string; slug: string }; owner: Human; agentId: string };
  /** A human outside A (own workspace only): invites from elsewhere, someone else's sessions. */
  stranger: Human & { ws: { id: string; slug: string } };
  /** A shared agent of A made by the owner, for read-only rows. */
  targetAgentId: string;
  /** Shared pages of Space `vault` for read-only rows. */
  pages: { internal: PageRef; confidential: PageRef; secret: PageRef };
  /** The agent the demoted creator made while still an editor (issue 11). */
  demotedCreatorsAgentId: string;
  /** A unique, path-safe token for fresh names. */
  uniq(prefix?: string): string;
  /** A fresh page of A made by the owner, under `scratch/<dir>/`. */
  page(opts?: { sensitivity?: string; archived?: boolean; dir?: string }): Promise<PageRef>;
  /** A fresh agent of A made by `by` (default: the owner). */
  agent(by?: Client, grants?: { action: string; scope: string; ceiling: string }[]): Promise<string>;
  /** A fresh agent of A with one key. */
  agentWithKey(): Promise<{ id: string; keyId: string }>;
  /** A fresh invite, by `by` (default: A's owner) into `ws` (default: A). */
  invite(role: Role, by?: Client, ws?: string): Promise<{ id: string; token: string }>;
  /** A fresh human who joined A through an invite with this role. */
  member(role: Role): Promise<Human>;
  /** A fresh human with a workspace of their own; `member` joins it with `role` (it accepts an invite). */
  host(member?: { client: Client; role: Role }): Promise<Human & { ws: { id: string; slug: string } }>;
  /** A new session of this human (password login; no TOTP in these fixtures). */
  login(h: Human): Promise<Client>;
}

let seq = 0;
const uniq = (prefix = 'x') => `${prefix}-${process.pid}-${++seq}-${Date.now().toString(36)}`;

/** A copy of a client: same bearer and cookies, its own jar from now on. */
export function cloneClient(c: Client): Client {
  const copy = new Client(c.base, c.bearer);
  for (const [k, v] of c.cookies) copy.cookies.set(k, v);
  return copy;
}

function must(res: { status: number; text: string }, status: number, what: string): void {
  if (res.status !== status) throw new Error(`fixture ${what}: expected ${status}, got ${res.status} ${res.text.slice(0, 300)}`);
}

/** Signs a human up (with an invite when given); the client holds the new session. */
export async function signup(base: string, name: string, inviteToken?: string): Promise<Human & { ws: { id: string; slug: string } }> {
  const client = new Client(base);
  const email = `${uniq(name.toLowerCase())}@example.com`;
  const res = await client.post('/api/v1/auth/signup', { email, password: PASSWORD, name, ...(inviteToken ? { invite_token: inviteToken } : {}) });
  must(res, 201, `sign-up of ${name}`);
  return { id: res.body.principal.id, name, email, client, ws: { id: res.body.workspace.id, slug: res.body.workspace.slug } };
}

async function stepUp(c: Client): Promise<void> {
  must(await c.post('/api/auth/stepup', { password: PASSWORD }), 200, 'step-up');
}

const ALL_GRANTS = ACTIONS.map((action) => ({ action, scope: '*', ceiling: 'confidential' }));

/** Builds workspace A, F and every actor. Takes a few seconds (each sign-up hashes a password). */
export async function setupWorld(s: TestServer): Promise<World> {
  const base = s.url;

  // --- Workspace A and its owner. The first session is the fixture maker ("admin").
  const o1 = await signup(base, 'Owner');
  const ws = o1.ws;
  const admin = o1.client;

  const agentWithKey = async (
    grants: { action: string; scope: string; ceiling: string }[],
    opts: { ceiling?: string; key?: Record<string, unknown>; by?: Client } = {},
  ) => {
    const by = opts.by ?? admin;
    const a = await by.post('/api/v1/principals', { name: uniq('agent'), ceiling: opts.ceiling ?? 'confidential', grants });
    must(a, 201, 'agent create');
    const k = await by.post(`/api/v1/principals/${a.body.id}/tokens`, { name: 'k', ...(opts.key ?? {}) });
    must(k, 201, 'key mint');
    return { id: a.body.id as string, keyId: k.body.id as string, key: k.body.key as string };
  };

  // --- Key after lockdown: minted in A, then A is locked down before anything else exists
  // there (lockdown drops every other session of A's members: there are none yet).
  const doomed = await agentWithKey(ALL_GRANTS);
  must(await new Client(base, doomed.key).get('/api/v1/whoami'), 200, 'key before lockdown');
  await stepUp(admin);
  must(await admin.post(`/api/v1/workspaces/${ws.slug}/lockdown`), 200, 'lockdown of A');

  const login = async (h: Human): Promise<Client> => {
    const c = new Client(base);
    const res = await c.post('/api/auth/login', { email: h.email, password: PASSWORD });
    must(res, 200, `login of ${h.name}`);
    if (res.body.status !== 'ok') throw new Error(`fixture login of ${h.name}: status ${res.body.status}`);
    return c;
  };

  const invite = async (role: Role, by: Client = admin, where: string = ws.slug) => {
    const res = await by.post(`/api/v1/workspaces/${where}/invites`, { role });
    must(res, 201, `invite (${role})`);
    return { id: res.body.id as string, token: res.body.token as string };
  };

  // --- Humans of A. The owner actor is a second session of the first owner, never stepped up.
  const owner: Human = { id: o1.id, name: o1.name, email: o1.email, client: await login(o1) };
  const member = async (role: Role): Promise<Human> => {
    const inv = await invite(role);
    // An invite sign-up makes the invited workspace the session's default (docs/decisions.md).
    const h = await signup(base, role === 'owner' ? 'Owner2' : role === 'editor' ? 'Editor' : 'Viewer', inv.token);
    if (h.ws.id !== ws.id) throw new Error('fixture: invite sign-up did not land in A');
    return h;
  };
  const viewer = await member('viewer');
  const editor = await member('editor');
  // Step-up is per session: a second owner holds the stepped-up session, so that cells which
  // end every other session of a human (lockdown) cannot touch the non-stepped-up owner.
  const owner2 = await member('owner');
  let owner2SteppedAt = Date.now();
  await stepUp(owner2.client);

  // --- A git token, minted for real (POST /api/v1/me/git-tokens needs the step-up).
  const gt = await owner2.client.post('/api/v1/me/git-tokens', { name: 'matrix' });
  must(gt, 201, 'git token');

  // --- Agents of A. One per action, holding every action but that one; one with no grants.
  const lacking = new Map<Action | 'any', { id: string; key: string }>();
  for (const action of ACTIONS) lacking.set(action, await agentWithKey(ALL_GRANTS.filter((g) => g.action !== action)));
  lacking.set('any', await agentWithKey([]));
  // Every grant at confidential, but the agent's own ceiling is internal.
  const low = await agentWithKey(ALL_GRANTS, { ceiling: 'internal' });
  const expired = await agentWithKey(ALL_GRANTS, { key: { expires_in_days: 1 } });
  // No API moves the clock: age the key in the database (as the identity suite ages sessions).
  await s.ctx.store.db
    .updateTable('agent_keys')
    .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
    .where('id', '=', expired.keyId)
    .execute();
  const revoked = await agentWithKey(ALL_GRANTS);
  must(await admin.delete(`/api/v1/principals/${revoked.id}/tokens/${revoked.keyId}`), 200, 'key revoke');
  const pinned = await agentWithKey(ALL_GRANTS, { key: { ip_pin: '10.9.8.7' } });
  const target = await agentWithKey([{ action: 'read', scope: '*', ceiling: 'internal' }]);
  // Reads `pub` only: moving a page into `pub/` widens its audience (a step-up gate).
  await agentWithKey([{ action: 'read', scope: 'pub', ceiling: 'internal' }]);

  // --- Issue 11: a creator who lost their role, and an agent an owner elevated.
  // An editor makes an agent with every grant an editor may give, mints its key, and is then
  // demoted to viewer: the agent's reach follows its creator's current role.
  const creator = await member('editor');
  const demotedAgent = await agentWithKey(
    ALL_GRANTS.filter((g) => g.action !== 'admin'),
    { by: creator.client },
  );
  must(await admin.patch(`/api/v1/workspaces/${ws.slug}/members/${creator.id}`, { role: 'viewer' }), 200, 'demotion of the creator');
  // Every grant at confidential, elevated by the stepped-up owner for longer than the run.
  const elevated = await agentWithKey(ALL_GRANTS);
  must(await owner2.client.post('/api/v1/elevations', { agent_id: elevated.id, minutes: 120, reason: 'matrix' }), 201, 'elevation');

  // --- Workspace F and its broadly granted agent.
  const fo = await signup(base, 'Foreign');
  const fAgent = await agentWithKey(ALL_GRANTS, { by: fo.client });

  const stranger = await signup(base, 'Stranger');

  // --- Shared pages of A.
  const page = async (opts: { sensitivity?: string; archived?: boolean; dir?: string; path?: string } = {}): Promise<PageRef> => {
    const fm = [`sensitivity: ${opts.sensitivity ?? 'internal'}`, ...(opts.archived ? ['state: archived', 'archived_reason: manual'] : [])];
    const path = opts.path ?? `scratch/${opts.dir ?? 'p'}/${uniq('page')}.md`;
    const res = await admin.post('/api/v1/nodes', { path, content: `---\n${fm.join('\n')}\n---\n# Matrix page\n\nBody.\n` });
    must(res, 201, `page ${path}`);
    return { id: res.body.id, path: res.body.path };
  };
  const pages = {
    internal: await page({ path: 'vault/read/internal.md' }),
    confidential: await page({ path: 'vault/read/confidential.md', sensitivity: 'confidential' }),
    secret: await page({ path: 'vault/read/secret.md', sensitivity: 'secret' }),
  };

  const key = (k: string) => new Client(base, k);
  const humanActor = (id: ActorId, about: string, h: Human, role: Role, steppedUp: boolean): Actor => ({
    id,
    kind: 'human',
    about,
    human: { ...h, role, stepUp: steppedUp },
    client: () => cloneClient(h.client),
    fresh: async () => {
      const c = await login(h);
      if (steppedUp) await stepUp(c);
      return c;
    },
    pageSensitivity: 'internal',
  });
  const keyActor = (id: ActorId, kind: ActorKind, about: string, k: { id: string; key: string }, sens: Actor['pageSensitivity'] = 'internal'): Actor => ({
    id,
    kind,
    about,
    client: () => key(k.key),
    agentId: () => k.id,
    fresh: async () => key(k.key),
    pageSensitivity: sens,
  });
  const tokenActor = (id: ActorId, about: string, token: string | undefined): Actor => ({
    id,
    kind: token ? 'dead' : 'anonymous',
    about,
    client: () => new Client(base, token),
    fresh: async () => new Client(base, token),
    pageSensitivity: 'internal',
  });
  const noGrant = (grant?: Action) => lacking.get(grant ?? 'any')!;

  const actors: Record<ActorId, Actor> = {
    none: tokenActor('none', 'no credentials', undefined),
    foreignKey: keyActor('foreignKey', 'agent', "another workspace's agent key, every grant", fAgent),
    agentNoGrant: {
      id: 'agentNoGrant',
      kind: 'agent',
      about: 'agent of A without the grant the route checks',
      client: (grant) => key(noGrant(grant).key),
      agentId: (grant) => noGrant(grant).id,
      fresh: async (grant) => key(noGrant(grant).key),
      pageSensitivity: 'internal',
    },
    // For page rows it works on confidential pages: its ceiling (internal) is too low for them.
    agentLowCeiling: keyActor('agentLowCeiling', 'agent', 'agent of A with every grant at confidential, own ceiling internal', low, 'confidential'),
    viewer: humanActor('viewer', 'viewer of A (session)', viewer, 'viewer', false),
    editor: humanActor('editor', 'editor of A (session)', editor, 'editor', false),
    owner: humanActor('owner', 'owner of A without step-up (session)', owner, 'owner', false),
    ownerStepUp: {
      ...humanActor('ownerStepUp', 'owner of A with step-up (session)', owner2, 'owner', true),
      // Step-up lasts five minutes; renew it well before, so a slow machine does not flip cells.
      prepare: async () => {
        if (Date.now() - owner2SteppedAt > 3 * 60_000) {
          await stepUp(owner2.client);
          owner2SteppedAt = Date.now();
        }
      },
    },
    expiredKey: keyActor('expiredKey', 'dead', 'expired agent key of A', expired),
    revokedKey: keyActor('revokedKey', 'dead', 'revoked agent key of A', revoked),
    lockedOutKey: keyActor('lockedOutKey', 'dead', 'agent key of A minted before its lockdown', doomed),
    oauthToken: tokenActor('oauthToken', 'an OAuth-shaped token oa_…', `oa_${'Q'.repeat(43)}`),
    gitToken: tokenActor('gitToken', 'a real git token gt_… of the stepped-up owner', gt.body.token),
    pinnedKey: keyActor('pinnedKey', 'dead', 'agent key of A pinned to 10.9.8.7, used from 127.0.0.1', pinned),
    demotedCreator: humanActor('demotedCreator', 'a former editor of A, demoted to viewer after making an agent (session)', creator, 'viewer', false),
    demotedAgent: keyActor(
      'demotedAgent',
      'agent',
      'agent of A made by an editor (every editor grant at confidential) who was then demoted to viewer',
      demotedAgent,
    ),
    elevatedAgent: keyActor('elevatedAgent', 'agent', 'agent of A with every grant at confidential, elevated by an owner', elevated, 'secret'),
  };

  // Sanity of the fixtures (not of the matrix): every live actor works in the workspace it should.
  for (const a of Object.values(actors)) {
    if (a.kind !== 'human' && a.kind !== 'agent') continue;
    const who = await a.client().get('/api/v1/whoami');
    expect(who.status, `${a.id}: ${who.text}`).toBe(200);
    expect(who.body.workspace.id, a.id).toBe(a.id === 'foreignKey' ? fo.ws.id : ws.id);
    if (a.human) expect(who.body.role, a.id).toBe(a.human.role);
  }

  return {
    s,
    ws,
    admin,
    actors,
    foreign: { ws: fo.ws, owner: fo, agentId: fAgent.id },
    stranger,
    targetAgentId: target.id,
    demotedCreatorsAgentId: demotedAgent.id,
    pages,
    uniq,
    page,
    agent: async (by = admin, grants = [{ action: 'read', scope: '*', ceiling: 'internal' }]) => {
      const a = await by.post('/api/v1/principals', { name: uniq('agent'), ceiling: 'internal', grants });
      must(a, 201, 'agent create');
      return a.body.id as string;
    },
    agentWithKey: async () => {
      const a = await agentWithKey([{ action: 'read', scope: '*', ceiling: 'internal' }]);
      return { id: a.id, keyId: a.keyId };
    },
    invite,
    member,
    host: async (m) => {
      const h = await signup(base, 'Host');
      if (m) {
        const inv = await invite(m.role, h.client, h.ws.slug);
        must(await cloneClient(m.client).post(`/api/v1/invites/${inv.token}/accept`), 200, 'invite accept');
      }
      return h;
    },
    login,
  };
}
