import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Action, Role } from '../../src/policy/principal.js';
import { ACTOR_IDS, cloneClient, PASSWORD, setupWorld, type Actor, type ActorId, type World } from '../support/actors.js';
import { testEngines } from '../support/engines.js';
import { startTestServer, type Res, type TestServer } from '../support/server.js';

/**
 * The authorization matrix of issue 3: every endpoint × every kind of caller → the exact
 * status and code.
 *
 * Rows are the endpoints (ROWS, one object each; a `variant` adds a second row for the same
 * route, for example the step-up gate of a secret grant). Columns are the actors of
 * test/support/actors.ts. Expectations come from rules, not from what the server answers:
 *
 *  1. Public routes (spec auth P) answer the same to everyone, whatever credential is sent.
 *  2. Otherwise no credentials → 401 `unauthorized`; a dead credential (expired, revoked,
 *     locked-out or IP-pinned key, `oa_…`, `gt_…`) → 401 `invalid_token` (spec §5 O and G,
 *     §7; docs/decisions.md "Keys": every dead-key case answers the same 401).
 *  3. Session-only routes (spec S) with a live agent key → 403 `session_required`
 *     (docs/errors.md; docs/decisions.md "Agents get 403 session_required on every members
 *     and invites route", "Agents never satisfy [step-up] (session_required)").
 *  4. Everything else is the row's own `expect` record, usually built from a profile below
 *     (pageRead, pageWrite, owners, ownerStepUpGate…) and overridden per actor with the
 *     decision it follows.
 *
 * Mutating rows build a fresh resource in every cell (page, agent, key, invite, member,
 * workspace), and the lockdown cells work on a workspace of their own, so cells never
 * depend on one another. Cells that rules 2 and 3 refuse before any handler runs share one
 * such resource per row (real ids all the same; see `fixturesFor`): a sign-up hashes a
 * password, and most of those cells would otherwise pay for one each.
 *
 * A new endpoint is one row; a new actor is one column in ACTOR_IDS and in setupWorld, and
 * then every row must say what it expects of it (the "authz matrix table" test checks that).
 * A route without a row fails the completeness test against the server's routeList.
 */

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/** The spec's auth column: P public, S session only (pending sessions included), SK session or agent key. */
type Auth = 'P' | 'S' | 'SK';

interface Outcome {
  status: number;
  code?: string;
  /** Fields the answer must carry (checked with toMatchObject). */
  body?: Record<string, unknown>;
}

interface Cell {
  w: World;
  actor: Actor;
}

interface Req {
  path: string;
  body?: unknown;
  headers?: Record<string, string>;
}

interface Row {
  method: Method;
  /** The route pattern exactly as Fastify registers it (routeList). */
  route: string;
  variant?: string;
  auth: Auth;
  /** The grant action an agent needs here ("agent without the grant" lacks exactly this one). */
  grant?: Action;
  /** The cell ends or changes the caller's session (logout, step-up): use a fresh equivalent one. */
  freshCaller?: boolean;
  request(c: Cell): Req | Promise<Req>;
  /** Outcomes for the actors rules 1–3 do not decide. */
  expect: Partial<Record<ActorId, Outcome>>;
  /** Public rows: the one answer everyone gets (default 200). */
  publicAnswer?: Outcome;
}

const ok = (status = 200): Outcome => ({ status });
const err = (status: number, code: string): Outcome => ({ status, code });
const FORBIDDEN = err(403, 'forbidden');
const NOT_FOUND = err(404, 'not_found');
const STEP_UP = err(403, 'step_up_required');
const WS_NOT_FOUND = err(404, 'workspace_not_found');
const EXCEEDS_ROLE = err(403, 'grant_exceeds_role');
/**
 * Spec "(write, else proposal)": a caller without write but with propose gets a proposal
 * instead of the change — 202 `{proposed: true, proposal}` (issue 4, src/http/routes/nodes.ts
 * sendOutcome). Before issue 4 this was 403 forbidden.
 */
const PROPOSED: Outcome = { status: 202, body: { proposed: true } };

const HUMANS = ['viewer', 'editor', 'owner', 'ownerStepUp'] as const satisfies readonly ActorId[];
const LIVE_AGENTS = ['foreignKey', 'agentNoGrant', 'agentLowCeiling', 'elevatedAgent'] as const satisfies readonly ActorId[];
/**
 * Issue 11: callers whose power was cut. A demoted creator is a viewer in every respect, and the
 * agent it made while an editor reaches no further than a viewer (its grants follow its
 * creator's current role): by default both answer as the viewer does; a row states otherwise
 * only where a human and an agent differ, or where the creator's own agent is the subject.
 */
const AS_VIEWER = ['demotedCreator', 'demotedAgent'] as const satisfies readonly ActorId[];

type Cells = Partial<Record<ActorId, Outcome>>;
const each = (ids: readonly ActorId[], o: Outcome): Cells => Object.fromEntries(ids.map((id) => [id, o]));

/** Every live caller, human or agent, gets `o` (workspace-agnostic routes: me, whoami, lists). */
const everyone = (o: Outcome): Cells => ({ ...each(HUMANS, o), ...each(LIVE_AGENTS, o) });
/** Session routes any member may call (agents are refused by rule 3). */
const anyHuman = (o: Outcome): Cells => each(HUMANS, o);
/** Spec "S own": owners only; viewers and editors get 403 forbidden. */
const owners = (o: Outcome): Cells => ({ viewer: FORBIDDEN, editor: FORBIDDEN, owner: o, ownerStepUp: o });
/** Spec "S own +U": owner role first, then the step-up (core/security.ts checks in that order). */
const ownerStepUpGate = (o: Outcome): Cells => ({ viewer: FORBIDDEN, editor: FORBIDDEN, owner: STEP_UP, ownerStepUp: o });
/**
 * Reading a page (spec "S K (read)"). A page of another workspace, outside the read grants or
 * above the ceiling is 404 not_found, never 403 (docs/errors.md "A page you may not read is
 * not forbidden"). agentLowCeiling reads a confidential page with an internal ceiling.
 */
const pageRead = (o: Outcome): Cells => ({
  foreignKey: NOT_FOUND,
  agentNoGrant: NOT_FOUND,
  agentLowCeiling: NOT_FOUND,
  // Issue 11: an elevation lets the agent read at secret within its read grants.
  elevatedAgent: o,
  ...anyHuman(o),
});
/**
 * Changing a page (spec "S K (write)"): the page must be visible first (404 as for reads);
 * then a write grant, which the agent without it (it still reads) and viewers lack → 403.
 */
const pageWrite = (o: Outcome): Cells => ({
  foreignKey: NOT_FOUND,
  agentNoGrant: FORBIDDEN,
  agentLowCeiling: NOT_FOUND,
  // It reads the secret page, but its write grant stops at confidential: it may not overwrite it.
  elevatedAgent: FORBIDDEN,
  viewer: FORBIDDEN,
  editor: o,
  owner: o,
  ownerStepUp: o,
});

const enc = encodeURIComponent;
const READ_GRANT = [{ action: 'read', scope: '*', ceiling: 'internal' }];

/** The shared page an actor reads: confidential for the low-ceiling agent, internal for the rest. */
const sharedPage = (c: Cell) => c.w.pages[c.actor.pageSensitivity];
/** A fresh page of A at the actor's sensitivity. */
const freshPage = (c: Cell, opts: { archived?: boolean; dir?: string } = {}) => c.w.page({ sensitivity: c.actor.pageSensitivity, ...opts });

/** A fresh open proposal by A's owner on a fresh page at the actor's sensitivity; its id. */
async function freshProposal(c: Cell): Promise<string> {
  const page = await freshPage(c);
  const res = await c.w.admin.post('/api/v1/proposals', { node_id: page.id, content: 'proposed by the owner\n' });
  if (res.status !== 201) throw new Error(`proposal fixture: ${res.status} ${res.text}`);
  return res.body.id as string;
}

/** Humans join the lockdown workspace with their role in A; other callers are not members. */
const roleOf = (a: Actor): Role | undefined => a.human?.role;

// ---------------------------------------------------------------------------------------------
// The rows. Order follows src/app.ts.
// ---------------------------------------------------------------------------------------------

const ROWS: Row[] = [
  // --- Health and the API description: public.
  { method: 'GET', route: '/healthz', auth: 'P', request: () => ({ path: '/healthz' }), expect: {} },
  { method: 'GET', route: '/readyz', auth: 'P', request: () => ({ path: '/readyz' }), expect: {} },
  { method: 'GET', route: '/api/v1/openapi.json', auth: 'P', request: () => ({ path: '/api/v1/openapi.json' }), expect: {} },

  // --- Sign-up (three spellings) and login: public; a credential sent along is ignored.
  ...['/api/v1/auth/signup', '/auth/signup', '/api/auth/signup'].map((route): Row => ({
    method: 'POST',
    route,
    auth: 'P',
    request: ({ w }) => ({ path: route, body: { email: `${w.uniq('su')}@example.com`, password: PASSWORD, name: 'Matrix Signup' } }),
    expect: {},
    publicAnswer: ok(201),
  })),
  {
    method: 'POST',
    route: '/api/auth/login',
    auth: 'P',
    request: ({ w }) => ({ path: '/api/auth/login', body: { email: w.stranger.email, password: PASSWORD } }),
    expect: {},
  },

  // --- Second factor and sessions (spec §4 "Auth and sessions").
  {
    method: 'POST',
    route: '/api/auth/totp/verify',
    auth: 'S',
    request: () => ({ path: '/api/auth/totp/verify', body: { code: '000000' } }),
    // The session is already active: nothing to verify (core/second-factor.ts, 409 not_pending).
    expect: anyHuman(err(409, 'not_pending')),
  },
  {
    method: 'POST',
    route: '/api/auth/totp/enroll',
    auth: 'S',
    // Without a code: a new, inactive secret and its otpauth:// URI (docs/decisions.md "Enrolment").
    // From a signed-in session it needs a step-up (issue 11: a stolen session must not bind
    // its own second factor).
    request: () => ({ path: '/api/auth/totp/enroll' }),
    expect: { viewer: STEP_UP, editor: STEP_UP, owner: STEP_UP, ownerStepUp: ok() },
  },
  {
    method: 'POST',
    route: '/api/auth/stepup',
    auth: 'S',
    freshCaller: true,
    request: () => ({ path: '/api/auth/stepup', body: { password: PASSWORD } }),
    expect: anyHuman(ok()),
  },
  { method: 'GET', route: '/api/auth/sessions', auth: 'S', request: () => ({ path: '/api/auth/sessions' }), expect: anyHuman(ok()) },
  {
    method: 'DELETE',
    route: '/api/auth/sessions/:id',
    variant: 'one of your own sessions',
    auth: 'S',
    request: async ({ w, actor }) => {
      const other = await (actor.human ? w.login(actor.human) : w.login(w.stranger));
      const list = await other.get('/api/auth/sessions');
      const id = list.body.sessions.find((x: { current: boolean }) => x.current).id as string;
      return { path: `/api/auth/sessions/${id}` };
    },
    expect: anyHuman(ok()),
  },
  {
    method: 'DELETE',
    route: '/api/auth/sessions/:id',
    variant: "someone else's session",
    auth: 'S',
    request: async ({ w }) => {
      const theirs = await w.login(w.stranger);
      const id = (await theirs.get('/api/auth/sessions')).body.sessions.find((x: { current: boolean }) => x.current).id as string;
      return { path: `/api/auth/sessions/${id}` };
    },
    // docs/decisions.md "Session lifetime": another user's id is 404.
    expect: anyHuman(NOT_FOUND),
  },
  { method: 'POST', route: '/api/auth/logout', auth: 'S', freshCaller: true, request: () => ({ path: '/api/auth/logout' }), expect: anyHuman(ok()) },
  { method: 'GET', route: '/api/auth/me', auth: 'S', request: () => ({ path: '/api/auth/me' }), expect: anyHuman(ok()) },

  // --- Identity.
  { method: 'GET', route: '/api/v1/me', auth: 'SK', request: () => ({ path: '/api/v1/me' }), expect: everyone(ok()) },
  {
    method: 'PATCH',
    route: '/api/v1/me',
    auth: 'S',
    request: ({ actor }) => ({ path: '/api/v1/me', body: { name: actor.human?.name ?? 'Matrix' } }),
    expect: anyHuman(ok()),
  },
  { method: 'GET', route: '/api/v1/whoami', auth: 'SK', request: () => ({ path: '/api/v1/whoami' }), expect: everyone(ok()) },
  {
    method: 'GET',
    route: '/api/v1/whoami',
    variant: 'naming workspace A in X-Service-Workspace',
    auth: 'SK',
    request: ({ w }) => ({ path: '/api/v1/whoami', headers: { 'x-service-workspace': w.ws.slug } }),
    // An agent key names only its own workspace (docs/errors.md workspace_not_found).
    expect: { ...everyone(ok()), foreignKey: WS_NOT_FOUND },
  },

  // --- Agents, grants and keys (spec §4 "Agents, grants and tokens").
  { method: 'GET', route: '/api/v1/principals', auth: 'SK', request: () => ({ path: '/api/v1/principals' }), expect: everyone(ok()) },
  {
    method: 'POST',
    route: '/api/v1/principals',
    auth: 'S',
    request: ({ w }) => ({ path: '/api/v1/principals', body: { name: w.uniq('new-agent'), ceiling: 'internal', grants: READ_GRANT } }),
    // Any member may create an agent with grants within their role (docs/decisions.md "Grants never exceed the granting human").
    expect: anyHuman(ok(201)),
  },
  {
    method: 'POST',
    route: '/api/v1/principals',
    variant: 'with an admin grant',
    auth: 'S',
    request: ({ w }) => ({
      path: '/api/v1/principals',
      body: { name: w.uniq('new-agent'), ceiling: 'internal', grants: [{ action: 'admin', scope: '*', ceiling: 'internal' }] },
    }),
    // Only owners hold admin, so only they can hand it out (spec §5 rule 3).
    expect: { viewer: EXCEEDS_ROLE, editor: EXCEEDS_ROLE, owner: ok(201), ownerStepUp: ok(201) },
  },
  {
    method: 'POST',
    route: '/api/v1/principals',
    variant: 'with ceiling secret',
    auth: 'S',
    request: ({ w }) => ({ path: '/api/v1/principals', body: { name: w.uniq('new-agent'), ceiling: 'secret', grants: [] } }),
    // Above the viewer's (internal) and editor's (confidential) role ceiling; for owners
    // granting secret is a +U act (docs/decisions.md "Step-up … granting secret").
    expect: { viewer: EXCEEDS_ROLE, editor: EXCEEDS_ROLE, owner: STEP_UP, ownerStepUp: ok(201) },
  },
  {
    method: 'GET',
    route: '/api/v1/principals/:id',
    auth: 'SK',
    request: ({ w }) => ({ path: `/api/v1/principals/${w.targetAgentId}` }),
    // Agents of A see it (as id, name, kind); an agent id of another workspace is not_found.
    expect: { ...everyone(ok()), foreignKey: NOT_FOUND },
  },
  {
    method: 'DELETE',
    route: '/api/v1/principals/:id',
    variant: 'an agent the owner created',
    auth: 'S',
    request: async ({ w }) => ({ path: `/api/v1/principals/${await w.agent()}` }),
    // Creator or owner (spec "S (creator or owner)").
    expect: owners(ok()),
  },
  {
    method: 'DELETE',
    route: '/api/v1/principals/:id',
    variant: 'an agent the caller created',
    auth: 'S',
    request: async ({ w, actor }) => ({ path: `/api/v1/principals/${await w.agent(actor.human ? cloneClient(actor.human.client) : undefined)}` }),
    expect: anyHuman(ok()),
  },
  {
    method: 'GET',
    route: '/api/v1/principals/:id/grants',
    variant: "another agent's grants",
    auth: 'SK',
    request: ({ w }) => ({ path: `/api/v1/principals/${w.targetAgentId}/grants` }),
    // An agent may read its own grants, not other agents' (docs/decisions.md "Grants never exceed…").
    expect: {
      ...anyHuman(ok()),
      foreignKey: NOT_FOUND,
      agentNoGrant: FORBIDDEN,
      agentLowCeiling: FORBIDDEN,
      elevatedAgent: FORBIDDEN,
      demotedAgent: FORBIDDEN,
    },
  },
  {
    method: 'GET',
    route: '/api/v1/principals/:id/grants',
    variant: "the calling agent's own grants",
    auth: 'SK',
    request: ({ w, actor }) => ({ path: `/api/v1/principals/${actor.agentId?.() ?? w.targetAgentId}/grants` }),
    expect: everyone(ok()),
  },
  {
    method: 'PUT',
    route: '/api/v1/principals/:id/grants',
    auth: 'S',
    request: async ({ w }) => ({ path: `/api/v1/principals/${await w.agent()}/grants`, body: { grants: READ_GRANT } }),
    expect: owners(ok()),
  },
  {
    method: 'PUT',
    route: '/api/v1/principals/:id/grants',
    variant: 'a secret grant',
    auth: 'S',
    request: async ({ w }) => ({ path: `/api/v1/principals/${await w.agent()}/grants`, body: { grants: [{ action: 'read', scope: '*', ceiling: 'secret' }] } }),
    // Who may manage the agent is checked first (creator or owner), then the +U for secret.
    expect: ownerStepUpGate(ok()),
  },
  {
    method: 'PUT',
    route: '/api/v1/principals/:id/grants',
    variant: 'a write grant to an agent the caller made (the demoted creator: made while an editor)',
    auth: 'S',
    request: async ({ w, actor }) => ({
      path: `/api/v1/principals/${actor.id === 'demotedCreator' ? w.demotedCreatorsAgentId : await w.agent(actor.human ? cloneClient(actor.human.client) : undefined)}/grants`,
      body: { grants: [{ action: 'write', scope: '*', ceiling: 'internal' }] },
    }),
    // Issue 11: managing an agent is judged on the creator's current role; a viewer holds no write.
    expect: { viewer: EXCEEDS_ROLE, editor: ok(), owner: ok(), ownerStepUp: ok(), demotedCreator: EXCEEDS_ROLE },
  },
  {
    method: 'POST',
    route: '/api/v1/principals/:id/adopt',
    auth: 'S',
    request: async ({ w }) => ({ path: `/api/v1/principals/${await w.agent()}/adopt` }),
    // Issue 11: an owner takes custody of an agent (after its creator left, or was demoted).
    expect: owners(ok()),
  },
  {
    method: 'GET',
    route: '/api/v1/principals/:id/tokens',
    auth: 'S',
    request: ({ w }) => ({ path: `/api/v1/principals/${w.targetAgentId}/tokens` }),
    expect: owners(ok()),
  },
  {
    method: 'POST',
    route: '/api/v1/principals/:id/tokens',
    auth: 'S',
    request: async ({ w }) => ({ path: `/api/v1/principals/${await w.agent()}/tokens`, body: { name: 'matrix' } }),
    expect: owners(ok(201)),
  },
  {
    method: 'DELETE',
    route: '/api/v1/principals/:id/tokens/:tid',
    auth: 'S',
    request: async ({ w }) => {
      const a = await w.agentWithKey();
      return { path: `/api/v1/principals/${a.id}/tokens/${a.keyId}` };
    },
    expect: owners(ok()),
  },

  // --- Safety acts: lockdown, elevations, git tokens (spec "+U").
  {
    method: 'POST',
    route: '/api/v1/workspaces/:ws/lockdown',
    variant: 'a workspace of its own, where the caller has its role in A',
    auth: 'S',
    request: async ({ w, actor }) => {
      // Destructive: a fresh workspace per cell; a human caller joins it with its role in A.
      const role = roleOf(actor);
      const h = await w.host(role && actor.human ? { client: actor.human.client, role } : undefined);
      return { path: `/api/v1/workspaces/${h.ws.slug}/lockdown` };
    },
    expect: ownerStepUpGate(ok()),
  },
  {
    method: 'POST',
    route: '/api/v1/workspaces/:ws/lockdown',
    variant: 'a workspace the caller is not a member of',
    auth: 'S',
    request: async ({ w }) => ({ path: `/api/v1/workspaces/${(await w.host()).ws.slug}/lockdown` }),
    // A workspace you are not a member of does not exist for you (docs/decisions.md "Two URL forms").
    expect: anyHuman(WS_NOT_FOUND),
  },
  {
    method: 'POST',
    route: '/api/v1/elevations',
    auth: 'S',
    request: async ({ w }) => ({ path: '/api/v1/elevations', body: { agent_id: await w.agent(), minutes: 5, reason: 'matrix' } }),
    // docs/decisions.md "Elevations": owner with step-up.
    expect: ownerStepUpGate(ok(201)),
  },
  {
    method: 'POST',
    route: '/api/v1/elevations',
    variant: 'an agent of another workspace',
    auth: 'S',
    request: ({ w }) => ({ path: '/api/v1/elevations', body: { agent_id: w.foreign.agentId, minutes: 5, reason: 'matrix' } }),
    // docs/errors.md not_found: "an agent or key id is unknown or belongs to another workspace".
    expect: ownerStepUpGate(NOT_FOUND),
  },
  {
    method: 'POST',
    route: '/api/v1/me/git-tokens',
    auth: 'S',
    request: () => ({ path: '/api/v1/me/git-tokens', body: { name: 'matrix' } }),
    // Spec "S +U" (not "own"): any human, with step-up (docs/decisions.md "Git tokens").
    expect: { viewer: STEP_UP, editor: STEP_UP, owner: STEP_UP, ownerStepUp: ok(201) },
  },
  // Git tokens are the signed-in person's own (issue 15); test/git/auth.test.ts revokes a real one and sees git refused.
  { method: 'GET', route: '/api/v1/me/git-tokens', auth: 'S', request: () => ({ path: '/api/v1/me/git-tokens' }), expect: anyHuman(ok()) },
  {
    method: 'DELETE',
    route: '/api/v1/me/git-tokens/:id',
    variant: 'a token that is not yours',
    auth: 'S',
    request: () => ({ path: '/api/v1/me/git-tokens/gk_not_yours' }),
    expect: anyHuman(NOT_FOUND),
  },
  // OAuth connections are the signed-in person's own (issue 14); test/oauth/flow.test.ts revokes a real one.
  { method: 'GET', route: '/api/v1/me/oauth-clients', auth: 'S', request: () => ({ path: '/api/v1/me/oauth-clients' }), expect: anyHuman(ok()) },
  {
    method: 'DELETE',
    route: '/api/v1/me/oauth-clients/:id',
    variant: 'a connection that is not yours',
    auth: 'S',
    request: () => ({ path: '/api/v1/me/oauth-clients/og_not_yours' }),
    expect: anyHuman(NOT_FOUND),
  },

  // --- Spaces.
  { method: 'GET', route: '/api/v1/spaces', auth: 'SK', request: () => ({ path: '/api/v1/spaces' }), expect: everyone(ok()) },
  {
    method: 'POST',
    route: '/api/v1/spaces',
    auth: 'SK',
    grant: 'admin',
    request: ({ w }) => ({ path: '/api/v1/spaces', body: { id: w.uniq('sp'), name: 'Matrix' } }),
    // Admin over the whole workspace (docs/errors.md forbidden). The foreign agent holds
    // admin in its own workspace and creates the Space there; the ceiling plays no part.
    expect: {
      foreignKey: ok(201),
      agentNoGrant: FORBIDDEN,
      agentLowCeiling: ok(201),
      elevatedAgent: ok(201),
      viewer: FORBIDDEN,
      editor: FORBIDDEN,
      owner: ok(201),
      ownerStepUp: ok(201),
    },
  },
  {
    method: 'GET',
    route: '/api/v1/spaces/:s/tree',
    auth: 'SK',
    grant: 'read',
    request: () => ({ path: '/api/v1/spaces/vault/tree' }),
    // A Space you can read nothing in is not_found (docs/errors.md); the low-ceiling agent may
    // read there (its confidential pages are just left out of the tree).
    expect: { ...pageRead(ok()), agentLowCeiling: ok() },
  },
  // --- Folders (issue 16): a fresh folder holding one page at the actor's sensitivity.
  {
    method: 'POST',
    route: '/api/v1/clusters/*',
    variant: 'archive',
    auth: 'SK',
    grant: 'write',
    request: async (c) => {
      const dir = c.w.uniq('fa');
      await freshPage(c, { dir });
      return { path: `/api/v1/clusters/scratch/${dir}/archive`, body: { reason: 'manual' } };
    },
    // Spec "S K (write; humans need +U), without write a proposal": the step-up gate comes first
    // for every human; then the pages decide as a page archive does (pageWrite, proposals).
    expect: {
      ...pageWrite(ok()),
      viewer: STEP_UP,
      editor: STEP_UP,
      owner: STEP_UP,
      agentNoGrant: PROPOSED,
      demotedAgent: PROPOSED,
    },
  },
  {
    method: 'POST',
    route: '/api/v1/clusters/*',
    variant: 'restore',
    auth: 'SK',
    grant: 'write',
    request: async (c) => {
      const dir = c.w.uniq('fr');
      await freshPage(c, { dir, archived: true });
      return { path: `/api/v1/clusters/scratch/${dir}/restore` };
    },
    // Spec "write grant", no proposal (as MCP context_restore by cluster_path); no step-up.
    expect: pageWrite(ok()),
  },
  {
    method: 'PUT',
    route: '/api/v1/clusters/*',
    auth: 'SK',
    grant: 'admin',
    request: async (c) => {
      const dir = c.w.uniq('fl');
      await freshPage(c, { dir });
      return { path: `/api/v1/clusters/scratch/${dir}/lifecycle`, body: { auto_archive_days: 30, half_life_days: 14 } };
    },
    // Spec "S K (admin)": owners; agents with an admin grant over the folder (the elevated one
    // reads its secret page and holds admin). A folder the caller cannot see is 404 first.
    expect: {
      foreignKey: NOT_FOUND,
      agentNoGrant: FORBIDDEN,
      agentLowCeiling: NOT_FOUND,
      elevatedAgent: ok(),
      viewer: FORBIDDEN,
      editor: FORBIDDEN,
      owner: ok(),
      ownerStepUp: ok(),
      demotedAgent: FORBIDDEN,
    },
  },

  // --- Pages.
  {
    method: 'POST',
    route: '/api/v1/nodes',
    auth: 'SK',
    grant: 'write',
    request: ({ w, actor }) => ({
      path: '/api/v1/nodes',
      body: { path: `scratch/new/${w.uniq('n')}.md`, content: `---\nsensitivity: ${actor.pageSensitivity}\n---\n# New\n` },
    }),
    // The foreign agent writes in its own workspace. The low-ceiling agent writes a
    // confidential page: above its ceiling (docs/errors.md forbidden); the elevated agent a
    // secret one, above its write grant (an elevation raises reading only).
    // Issue 12: an agent without write but with propose gets a proposal (spec: "an agent action
    // that lacks permission"); a human viewer is refused as before.
    expect: {
      foreignKey: ok(201),
      agentNoGrant: PROPOSED,
      demotedAgent: PROPOSED,
      agentLowCeiling: FORBIDDEN,
      elevatedAgent: FORBIDDEN,
      viewer: FORBIDDEN,
      editor: ok(201),
      owner: ok(201),
      ownerStepUp: ok(201),
    },
  },
  {
    method: 'POST',
    route: '/api/v1/nodes',
    variant: 'naming workspace A in X-Service-Workspace',
    auth: 'SK',
    grant: 'write',
    request: ({ w }) => ({
      path: '/api/v1/nodes',
      headers: { 'x-service-workspace': w.ws.id },
      body: { path: `scratch/new/${w.uniq('n')}.md`, content: '# New\n' },
    }),
    expect: {
      foreignKey: WS_NOT_FOUND,
      agentNoGrant: PROPOSED,
      demotedAgent: PROPOSED,
      agentLowCeiling: ok(201),
      elevatedAgent: ok(201),
      viewer: FORBIDDEN,
      editor: ok(201),
      owner: ok(201),
      ownerStepUp: ok(201),
    },
  },
  {
    method: 'GET',
    route: '/api/v1/nodes/:id',
    variant: 'by id',
    auth: 'SK',
    grant: 'read',
    request: (c) => ({ path: `/api/v1/nodes/${sharedPage(c).id}` }),
    expect: pageRead(ok()),
  },
  {
    method: 'GET',
    route: '/api/v1/nodes/:id',
    variant: 'by path',
    auth: 'SK',
    grant: 'read',
    request: (c) => ({ path: `/api/v1/nodes/${enc(sharedPage(c).path)}` }),
    expect: pageRead(ok()),
  },
  {
    method: 'PUT',
    route: '/api/v1/nodes/:id',
    auth: 'SK',
    grant: 'write',
    request: async (c) => ({ path: `/api/v1/nodes/${(await freshPage(c)).id}`, body: { content: '# Replaced\n' } }),
    expect: { ...pageWrite(ok()), agentNoGrant: PROPOSED, demotedAgent: PROPOSED },
  },
  {
    method: 'PATCH',
    route: '/api/v1/nodes/:id',
    auth: 'SK',
    grant: 'write',
    request: async (c) => ({ path: `/api/v1/nodes/${(await freshPage(c)).id}`, body: { body: 'Patched.\n' } }),
    expect: { ...pageWrite(ok()), agentNoGrant: PROPOSED, demotedAgent: PROPOSED },
  },
  {
    method: 'DELETE',
    route: '/api/v1/nodes/:id',
    auth: 'SK',
    grant: 'admin',
    request: async (c) => ({ path: `/api/v1/nodes/${(await freshPage(c)).id}` }),
    // Spec "S +U, K (admin)": a human needs write over the page and step-up (docs/decisions.md
    // "Step-up … Gates: deleting a page"), so the editor meets the gate and the viewer does not
    // get that far; the agent that reads but lacks admin is forbidden.
    expect: { ...pageWrite(ok()), editor: STEP_UP, owner: STEP_UP },
  },
  {
    method: 'GET',
    route: '/api/v1/nodes/:id/history',
    auth: 'SK',
    grant: 'read',
    request: (c) => ({ path: `/api/v1/nodes/${sharedPage(c).id}/history` }),
    expect: pageRead(ok()),
  },
  {
    method: 'GET',
    route: '/api/v1/nodes/:id/diff',
    auth: 'SK',
    grant: 'read',
    request: (c) => ({ path: `/api/v1/nodes/${sharedPage(c).id}/diff` }),
    // Spec "owner-level read": raw content needs secret-level read (docs/decisions.md "Diff"),
    // which only the owner role reaches; agents never do without an elevation.
    expect: { ...pageRead(ok()), viewer: FORBIDDEN, editor: FORBIDDEN },
  },
  // --- Issue 13 (beyond the spec): edits in place, same conditions as PATCH /nodes/:id, and the changes feed.
  ...(
    [
      ['/api/v1/nodes/:id/append', { text: 'Appended.' }],
      ['/api/v1/nodes/:id/section', { section: 'Matrix page', text: 'Replaced.' }],
      ['/api/v1/nodes/:id/patch', { patch: '--- a\n+++ b\n@@ -4,3 +4,3 @@\n # Matrix page\n \n-Body.\n+Patched.\n' }],
    ] as const
  ).map(([route, body]): Row => ({
    method: 'POST',
    route,
    auth: 'SK',
    grant: 'write',
    request: async (c) => ({ path: route.replace(':id', (await freshPage(c)).id), body }),
    expect: { ...pageWrite(ok()), agentNoGrant: PROPOSED, demotedAgent: PROPOSED },
  })),
  {
    method: 'GET',
    route: '/api/v1/changes',
    auth: 'SK',
    grant: 'read',
    request: () => ({ path: '/api/v1/changes' }),
    // Only what the caller can see; another workspace's agent reads its own feed. Without a read grant anywhere: 403.
    expect: { ...everyone(ok()), agentNoGrant: FORBIDDEN },
  },
  // --- Retrieval (issue 5): backlinks and related read like the page; search needs the search grant.
  ...['/api/v1/nodes/:id/backlinks', '/api/v1/nodes/:id/related'].map((route): Row => ({
    method: 'GET',
    route,
    auth: 'SK',
    grant: 'read',
    request: (c) => ({ path: route.replace(':id', sharedPage(c).id) }),
    expect: pageRead(ok()),
  })),
  {
    method: 'GET',
    route: '/api/v1/search',
    auth: 'SK',
    grant: 'search',
    request: () => ({ path: '/api/v1/search?q=matrix' }),
    // Every role holds search; an agent without a search grant anywhere is 403. Another
    // workspace's agent searches its own workspace (200, nothing of A).
    expect: { ...everyone(ok()), agentNoGrant: FORBIDDEN },
  },
  {
    method: 'GET',
    route: '/api/v1/bundle',
    auth: 'SK',
    grant: 'read',
    request: () => ({ path: '/api/v1/bundle?intent=matrix&budget_tokens=200' }),
    // Every role reads; an agent without a read grant anywhere is 403.
    expect: { ...everyone(ok()), agentNoGrant: FORBIDDEN },
  },
  {
    method: 'POST',
    route: '/api/v1/bundle',
    auth: 'SK',
    grant: 'read',
    request: () => ({ path: '/api/v1/bundle', body: { intent: 'matrix', budget_tokens: 200 } }),
    expect: { ...everyone(ok()), agentNoGrant: FORBIDDEN },
  },
  {
    method: 'POST',
    route: '/api/v1/nodes/:id/move',
    variant: 'within the same audience',
    auth: 'SK',
    grant: 'write',
    request: async (c) => ({ path: `/api/v1/nodes/${(await freshPage(c, { dir: 'mv' })).id}/move`, body: { to: `scratch/moved/${c.w.uniq('m')}.md` } }),
    expect: pageWrite(ok()),
  },
  {
    method: 'POST',
    route: '/api/v1/nodes/:id/move',
    variant: 'to a wider audience (an agent reads pub/ only)',
    auth: 'SK',
    grant: 'write',
    request: async (c) => ({ path: `/api/v1/nodes/${(await freshPage(c, { dir: 'mvw' })).id}/move`, body: { to: `pub/${c.w.uniq('m')}.md` } }),
    // docs/decisions.md "Wider audience": a +U gate, after the write check.
    expect: { ...pageWrite(ok()), editor: STEP_UP, owner: STEP_UP },
  },
  {
    method: 'POST',
    route: '/api/v1/nodes/:id/archive',
    auth: 'SK',
    grant: 'write',
    request: async (c) => ({ path: `/api/v1/nodes/${(await freshPage(c)).id}/archive`, body: { reason: 'manual' } }),
    // Spec "S K (write, else proposal)": the viewer and the agent without write both hold propose.
    expect: { ...pageWrite(ok()), viewer: PROPOSED, agentNoGrant: PROPOSED },
  },
  {
    method: 'POST',
    route: '/api/v1/nodes/:id/restore',
    auth: 'SK',
    grant: 'write',
    request: async (c) => ({ path: `/api/v1/nodes/${(await freshPage(c, { archived: true })).id}/restore` }),
    expect: { ...pageWrite(ok()), agentNoGrant: PROPOSED, demotedAgent: PROPOSED },
  },

  // --- Workspaces.
  { method: 'GET', route: '/api/v1/workspaces', auth: 'SK', request: () => ({ path: '/api/v1/workspaces' }), expect: everyone(ok()) },
  {
    method: 'POST',
    route: '/api/v1/workspaces',
    auth: 'S',
    request: ({ w }) => ({ path: '/api/v1/workspaces', body: { name: w.uniq('Matrix WS') } }),
    expect: anyHuman(ok(201)),
  },

  // --- Members and invites, in both URL forms (docs/decisions.md "Two URL forms, one meaning").
  ...(['/api/v1', '/api/v1/workspaces/:ws'] as const).flatMap((prefix): Row[] => {
    const at = (w: World, rest: string) => `${prefix.replace(':ws', w.ws.slug)}${rest}`;
    const rows: Row[] = [
      { method: 'GET', route: `${prefix}/members`, auth: 'S', request: ({ w }) => ({ path: at(w, '/members') }), expect: anyHuman(ok()) },
      {
        method: 'PATCH',
        route: `${prefix}/members/:id`,
        auth: 'S',
        request: async ({ w }) => ({ path: at(w, `/members/${(await w.member('viewer')).id}`), body: { role: 'editor' } }),
        // docs/decisions.md "Members": only owners change roles.
        expect: owners(ok()),
      },
      {
        method: 'DELETE',
        route: `${prefix}/members/:id`,
        variant: 'another member',
        auth: 'S',
        request: async ({ w }) => ({ path: at(w, `/members/${(await w.member('viewer')).id}`) }),
        // Only owners remove others (leaving is the caller's own id; not a cell here, as it would end the actor's membership).
        expect: owners(ok()),
      },
      { method: 'GET', route: `${prefix}/invites`, auth: 'S', request: ({ w }) => ({ path: at(w, '/invites') }), expect: owners(ok()) },
      {
        method: 'POST',
        route: `${prefix}/invites`,
        auth: 'S',
        request: ({ w }) => ({ path: at(w, '/invites'), body: { role: 'viewer' } }),
        expect: owners(ok(201)),
      },
      {
        method: 'DELETE',
        route: `${prefix}/invites/:id`,
        auth: 'S',
        request: async ({ w }) => ({ path: at(w, `/invites/${(await w.invite('viewer')).id}`) }),
        expect: owners(ok()),
      },
    ];
    if (prefix === '/api/v1') return rows;
    // The :ws form naming a workspace the caller is not a member of (workspace F), with F's ids.
    const inF = (w: World, rest: string) => `/api/v1/workspaces/${w.foreign.ws.slug}${rest}`;
    const notMember = 'workspace F, of which the caller is not a member';
    return [
      ...rows,
      {
        method: 'GET',
        route: `${prefix}/members`,
        variant: notMember,
        auth: 'S',
        request: ({ w }) => ({ path: inF(w, '/members') }),
        expect: anyHuman(WS_NOT_FOUND),
      },
      {
        method: 'PATCH',
        route: `${prefix}/members/:id`,
        variant: notMember,
        auth: 'S',
        request: ({ w }) => ({ path: inF(w, `/members/${w.foreign.owner.id}`), body: { role: 'viewer' } }),
        expect: anyHuman(WS_NOT_FOUND),
      },
      {
        method: 'DELETE',
        route: `${prefix}/members/:id`,
        variant: notMember,
        auth: 'S',
        request: ({ w }) => ({ path: inF(w, `/members/${w.foreign.owner.id}`) }),
        expect: anyHuman(WS_NOT_FOUND),
      },
      {
        method: 'GET',
        route: `${prefix}/invites`,
        variant: notMember,
        auth: 'S',
        request: ({ w }) => ({ path: inF(w, '/invites') }),
        expect: anyHuman(WS_NOT_FOUND),
      },
      {
        method: 'POST',
        route: `${prefix}/invites`,
        variant: notMember,
        auth: 'S',
        request: ({ w }) => ({ path: inF(w, '/invites'), body: { role: 'owner' } }),
        expect: anyHuman(WS_NOT_FOUND),
      },
      {
        method: 'DELETE',
        route: `${prefix}/invites/:id`,
        variant: notMember,
        auth: 'S',
        request: async ({ w }) => ({ path: inF(w, `/invites/${(await w.invite('viewer', w.foreign.owner.client, w.foreign.ws.slug)).id}`) }),
        expect: anyHuman(WS_NOT_FOUND),
      },
    ];
  }),
  {
    method: 'POST',
    route: '/api/v1/invites/:token/accept',
    auth: 'S',
    // A fresh invite into another human's workspace (every human actor is already in A).
    request: async ({ w }) => ({ path: `/api/v1/invites/${(await w.invite('viewer', w.stranger.client, w.stranger.ws.slug)).token}/accept` }),
    expect: anyHuman(ok()),
  },

  // --- Proposals (issue 4; docs/decisions.md "Merging and proposals").
  { method: 'GET', route: '/api/v1/proposals', auth: 'SK', request: () => ({ path: '/api/v1/proposals' }), expect: everyone(ok()) },
  {
    method: 'POST',
    route: '/api/v1/proposals',
    auth: 'SK',
    grant: 'propose',
    request: (c) => ({ path: '/api/v1/proposals', body: { node_id: sharedPage(c).id, content: 'proposed\n', reason: 'matrix' } }),
    // Every human role holds propose; a page the caller cannot read is 404 as for reads.
    // The elevated agent reads the secret page, so it may propose a change to it (its content is
    // internal here, within its propose grant).
    expect: { foreignKey: NOT_FOUND, agentNoGrant: FORBIDDEN, agentLowCeiling: NOT_FOUND, elevatedAgent: ok(201), ...anyHuman(ok(201)) },
  },
  {
    method: 'GET',
    route: '/api/v1/proposals/:id',
    auth: 'SK',
    request: async (c) => ({ path: `/api/v1/proposals/${await freshProposal(c)}` }),
    // A proposal exists for whoever can read what it touches.
    expect: pageRead(ok()),
  },
  {
    method: 'POST',
    route: '/api/v1/proposals/:id/accept',
    auth: 'S',
    request: async (c) => ({ path: `/api/v1/proposals/${await freshProposal(c)}/accept` }),
    expect: { viewer: FORBIDDEN, editor: ok(), owner: ok(), ownerStepUp: ok() },
  },
  {
    method: 'POST',
    route: '/api/v1/proposals/:id/reject',
    auth: 'S',
    request: async (c) => ({ path: `/api/v1/proposals/${await freshProposal(c)}/reject`, body: { reason: 'matrix' } }),
    expect: { viewer: FORBIDDEN, editor: ok(), owner: ok(), ownerStepUp: ok() },
  },
  {
    method: 'POST',
    route: '/api/v1/proposals/:id/withdraw',
    auth: 'SK',
    request: async (c) => ({ path: `/api/v1/proposals/${await freshProposal(c)}/withdraw` }),
    // Issue 13: only the author (A's owner made it: the owner actor is that human) withdraws;
    // whoever else sees it is refused, whoever does not gets 404 as for reads.
    expect: { ...pageRead(FORBIDDEN), owner: ok() },
  },

  // --- Threads and inbox (issue 4; docs/decisions.md "Threads and inbox").
  {
    method: 'GET',
    route: '/api/v1/nodes/:id/threads',
    auth: 'SK',
    grant: 'read',
    request: (c) => ({ path: `/api/v1/nodes/${sharedPage(c).id}/threads` }),
    expect: pageRead(ok()),
  },
  ...['/api/v1/nodes/:id/threads', '/api/v1/nodes/:id/threads/messages'].map((route): Row => ({
    method: 'POST',
    route,
    auth: 'SK',
    grant: 'collab',
    request: async (c) => ({ path: route.replace(':id', (await freshPage(c)).id), body: { body: 'matrix says hi' } }),
    // Every human role holds collab (viewers may post). The elevated agent reads the secret
    // page, but its collab grant stops at confidential.
    expect: { foreignKey: NOT_FOUND, agentNoGrant: FORBIDDEN, agentLowCeiling: NOT_FOUND, elevatedAgent: FORBIDDEN, ...anyHuman(ok(201)) },
  })),
  {
    method: 'POST',
    route: '/api/v1/nodes/:id/threads/read',
    auth: 'SK',
    grant: 'read',
    request: (c) => ({ path: `/api/v1/nodes/${sharedPage(c).id}/threads/read` }),
    expect: pageRead(ok()),
  },
  {
    method: 'POST',
    route: '/api/v1/nodes/:id/threads/unlock',
    auth: 'S',
    request: async (c) => ({ path: `/api/v1/nodes/${(await freshPage(c)).id}/threads/unlock` }),
    expect: { viewer: FORBIDDEN, editor: ok(), owner: ok(), ownerStepUp: ok() },
  },
  { method: 'GET', route: '/api/v1/inbox', auth: 'SK', request: () => ({ path: '/api/v1/inbox' }), expect: everyone(ok()) },
  { method: 'POST', route: '/api/v1/inbox/ack', auth: 'SK', request: () => ({ path: '/api/v1/inbox/ack', body: { up_to: 0 } }), expect: everyone(ok()) },

  // --- Watches (issue 13; docs/decisions.md "Issue 13: watching"). Your own list: everyone.
  { method: 'GET', route: '/api/v1/watches', auth: 'SK', request: () => ({ path: '/api/v1/watches' }), expect: everyone(ok()) },
  {
    method: 'PUT',
    route: '/api/v1/watches',
    auth: 'SK',
    grant: 'read',
    // Watching needs read on the page: one you may not read is not found (idempotent, so cells repeat safely).
    request: (c) => ({ path: '/api/v1/watches', body: { node_id: sharedPage(c).id } }),
    expect: pageRead(ok()),
  },
  {
    method: 'DELETE',
    route: '/api/v1/watches/:id',
    variant: 'your own watch',
    auth: 'SK',
    grant: 'read',
    // The caller watches Space `vault` first; who cannot (no read grant, another workspace) has no watch to remove.
    request: async ({ actor }) => {
      const made = await actor.client('read').put('/api/v1/watches', { path: 'vault' });
      return { path: `/api/v1/watches/${made.status === 200 ? (made.body.watch.id as string) : `wa_${'0'.repeat(26)}`}` };
    },
    expect: { ...everyone(ok()), agentNoGrant: NOT_FOUND, foreignKey: NOT_FOUND },
  },
  {
    method: 'DELETE',
    route: '/api/v1/watches/:id',
    variant: "someone else's watch",
    auth: 'SK',
    // A watch of the shared agent of A, made for this cell: nobody else may see or remove it.
    request: async ({ w }) => {
      const digits = w.uniq('m').replace(/[^0-9a-z]/g, '');
      const id = `wa_${digits.slice(-26).padStart(26, '0')}`;
      await w.s.ctx.store.db
        .insertInto('watches')
        .values({
          id,
          workspace_id: w.ws.id,
          principal_id: w.targetAgentId,
          key_id: null,
          target: `path:${id}`,
          kind: 'folder',
          page_id: null,
          path: 'vault',
          created_at: new Date().toISOString(),
        })
        .execute();
      return { path: `/api/v1/watches/${id}` };
    },
    expect: everyone(NOT_FOUND),
  },
  // --- Audit (issue 16): spec "S own"; the log of the workspace the request works in.
  { method: 'GET', route: '/api/v1/audit', auth: 'S', request: () => ({ path: '/api/v1/audit?limit=5' }), expect: owners(ok()) },
  { method: 'GET', route: '/api/v1/audit/verify', auth: 'S', request: () => ({ path: '/api/v1/audit/verify' }), expect: owners(ok()) },
  // --- Lifecycle (issue 16): the report is for anyone (candidates filtered to what each may
  // read); a run is "S own", and an apply also needs a step-up.
  { method: 'GET', route: '/api/v1/lifecycle/candidates', auth: 'SK', request: () => ({ path: '/api/v1/lifecycle/candidates' }), expect: everyone(ok()) },
  {
    method: 'POST',
    route: '/api/v1/lifecycle/run',
    auth: 'S',
    request: () => ({ path: '/api/v1/lifecycle/run', body: { mode: 'dry' } }),
    expect: owners(ok()),
  },
  {
    method: 'POST',
    route: '/api/v1/lifecycle/run',
    variant: 'apply',
    auth: 'S',
    request: () => ({ path: '/api/v1/lifecycle/run', body: { mode: 'apply' } }),
    expect: ownerStepUpGate(ok()),
  },
  // --- Log (issue 16): spec "S K (propose)". The owner seeds vault/log.md first, so every cell
  // appends to an existing log whoever runs first.
  {
    method: 'POST',
    route: '/api/v1/log',
    auth: 'SK',
    grant: 'propose',
    request: async ({ w }) => {
      const seed = await w.admin.post('/api/v1/log', { scope: 'vault', entry: 'matrix seed' });
      if (seed.status !== 201) throw new Error(`log fixture: ${seed.status} ${seed.text}`);
      return { path: '/api/v1/log', body: { scope: 'vault', entry: 'matrix entry' } };
    },
    // Every role holds propose; the agent without it still reads the log (403, not 404); the
    // foreign agent's workspace has no Space vault (as MCP context_log).
    expect: {
      ...everyone(ok(201)),
      foreignKey: err(404, 'unknown_scope'),
      agentNoGrant: FORBIDDEN,
    },
  },
  // --- Import (issue 16): spec "S K (write)", here in its JSON form (one file at the actor's
  // sensitivity). A caller with some write over the Space imports; each file is then judged as
  // any write, and one it may not write is skipped in the report, never a proposal.
  {
    method: 'POST',
    route: '/api/v1/import',
    auth: 'SK',
    grant: 'write',
    request: ({ w, actor }) => ({
      path: '/api/v1/import',
      body: { space: 'scratch', files: [{ path: `imported/${w.uniq('im')}.md`, content: `---\nsensitivity: ${actor.pageSensitivity}\n---\n# Imported\n` }] },
    }),
    // The foreign agent imports into its own workspace. The low-ceiling agent's confidential
    // file and the elevated agent's secret one are above what they may write: skipped, 200.
    // Agents whose write reaches nowhere (no grant; a demoted creator's) are refused whole.
    expect: {
      foreignKey: { status: 200, body: { status: 'done', created: 1 } },
      agentNoGrant: FORBIDDEN,
      demotedAgent: FORBIDDEN,
      agentLowCeiling: { status: 200, body: { status: 'done', created: 0, skipped_count: 1 } },
      elevatedAgent: { status: 200, body: { status: 'done', created: 0, skipped_count: 1 } },
      viewer: FORBIDDEN,
      editor: { status: 200, body: { status: 'done', created: 1 } },
      owner: { status: 200, body: { status: 'done', created: 1 } },
      ownerStepUp: { status: 200, body: { status: 'done', created: 1 } },
    },
  },
  {
    method: 'GET',
    route: '/api/v1/import/:id',
    auth: 'SK',
    // An import by A's owner (the admin session is the owner actor's own account): owners see
    // every import of the workspace, its importer its own; to anyone else it does not exist.
    request: async ({ w }) => {
      const res = await w.admin.post('/api/v1/import', { space: 'scratch', files: [{ path: `imported/${w.uniq('im')}.md`, content: '# Imported\n' }] });
      if (res.status !== 200) throw new Error(`import fixture: ${res.status} ${res.text}`);
      return { path: `/api/v1/import/${res.body.id}` };
    },
    expect: {
      ...everyone(NOT_FOUND),
      owner: { status: 200, body: { status: 'done' } },
      ownerStepUp: { status: 200, body: { status: 'done' } },
    },
  },
];

/**
 * Routes the matrix does not cover, each with its reason. They belong to other faces with
 * their own credentials and their own tests.
 */
const NOT_IN_MATRIX: { pattern: RegExp; why: string }[] = [
  { pattern: /^\/login(\/|$)/, why: 'HTML sign-in pages: CSRF-protected forms, covered by the browser test' },
  { pattern: /^\/invite\//, why: 'HTML invite landing pages, covered by the browser test' },
  { pattern: /^\/signup$/, why: 'HTML sign-up page: a CSRF-protected form before any session, test/web/getting-in.test.ts' },
  { pattern: /^\/(app(\/|$)|$)/, why: 'the web app (HTML, issue 17): its own matrix of session, csrf field and role, test/web/app-matrix.test.ts' },
  { pattern: /^\/assets\//, why: "the web app's public static files (test/web/app.test.ts)" },
  { pattern: /^\/oauth(\/|$)/, why: 'OAuth endpoints (later issue): their own client credentials and error format' },
  { pattern: /^\/git(\/|$)/, why: 'git smart HTTP: git tokens over Basic auth, its own matrix' },
  { pattern: /^\/mcp(\/|$)/, why: 'MCP (K O): OAuth tokens are valid there, its own matrix' },
  { pattern: /^\/w\/[^/]+\/mcp(\/|$)/, why: 'MCP pinned to a workspace, as /mcp' },
  { pattern: /^\/\.well-known\//, why: 'public OAuth metadata documents' },
];

// ---------------------------------------------------------------------------------------------
// The rules.
// ---------------------------------------------------------------------------------------------

const rowKey = (r: Row) => `${r.method} ${r.route}`;
const rowLabel = (r: Row) => `${rowKey(r)}${r.variant ? ` [${r.variant}]` : ''}`;

function expected(row: Row, actor: Actor): Outcome {
  if (row.auth === 'P') return row.publicAnswer ?? ok();
  if (actor.kind === 'anonymous') return err(401, 'unauthorized');
  if (actor.kind === 'dead') return err(401, 'invalid_token');
  if (row.auth === 'S' && actor.kind === 'agent') return err(403, 'session_required');
  const o = row.expect[actor.id] ?? ((AS_VIEWER as readonly ActorId[]).includes(actor.id) ? row.expect.viewer : undefined);
  if (!o) throw new Error(`The matrix row ${rowLabel(row)} says nothing about ${actor.id} (${actor.about})`);
  return o;
}

/** True when rules 2 or 3 refuse the cell on its credential alone, before the route's handler. */
function refusedByCredential(row: Row, actor: Actor): boolean {
  return row.auth !== 'P' && (actor.kind === 'anonymous' || actor.kind === 'dead' || (row.auth === 'S' && actor.kind === 'agent'));
}

/**
 * The fixture factories a cell uses. Cells refused on their credential never reach the
 * handler, so they share one resource per row and call (made on first use): should one of
 * them wrongly get through, that cell fails on its own status, and the rest are still refused
 * before they could notice the shared resource changed.
 */
const shared = new Map<string, World>();
function fixturesFor(w: World, row: Row, actor: Actor): World {
  if (!refusedByCredential(row, actor)) return w;
  const key = `${w.s.engine} ${rowLabel(row)}`;
  let m = shared.get(key);
  if (!m) {
    const memo = <A extends unknown[], R>(f: (...args: A) => Promise<R>) => {
      const cache = new Map<string, Promise<R>>();
      return (...args: A): Promise<R> => {
        const k = JSON.stringify(args, (_k, v: unknown) => (v instanceof Map ? [...v] : v));
        let p = cache.get(k);
        if (!p) cache.set(k, (p = f(...args)));
        return p;
      };
    };
    m = {
      ...w,
      page: memo(w.page),
      agent: memo(w.agent),
      agentWithKey: memo(w.agentWithKey),
      invite: memo(w.invite),
      member: memo(w.member),
      host: memo(w.host),
      login: memo(w.login),
    };
    shared.set(key, m);
  }
  return m;
}

const show = (o: Outcome) => (o.code ? `${o.status} ${o.code}` : `${o.status}`);

function check(row: Row, actor: Actor, want: Outcome, res: Res): void {
  const cell = `${rowLabel(row)} × ${actor.id} (${actor.about})`;
  const got: Outcome = res.status >= 400 && res.body && typeof res.body === 'object' ? { status: res.status, code: res.body.code } : { status: res.status };
  expect(show(got), `${cell}: expected ${show(want)}, got ${res.status} ${res.text.slice(0, 300)}`).toBe(show(want));
  if (want.body) expect(res.body, `${cell}: body`).toMatchObject(want.body);
  if (want.code) {
    // The error body of spec §7: {error:{code, message}, code}.
    expect(res.body.error?.code, `${cell}: error.code`).toBe(want.code);
    expect(String(res.body.error?.message ?? '').trim().length, `${cell}: error.message`).toBeGreaterThan(0);
  }
}

// The table itself is checked without a server: every row says what it expects of every actor the rules leave open.
describe('authz matrix table', () => {
  it('every row has an outcome for every actor the rules leave open, and no outcome the rules override', () => {
    const problems: string[] = [];
    for (const row of ROWS) {
      for (const id of ACTOR_IDS) {
        const given = row.expect[id] !== undefined;
        const asViewer = (AS_VIEWER as readonly string[]).includes(id);
        const open = row.auth !== 'P' && (HUMANS as readonly string[]).concat(row.auth === 'SK' ? (LIVE_AGENTS as readonly string[]) : []).includes(id);
        // The demoted pair may override the viewer's outcome where the row is open to them.
        if (asViewer) {
          const reachable = row.auth !== 'P' && (id === 'demotedCreator' || row.auth === 'SK');
          if (given && !reachable) problems.push(`${rowLabel(row)}: outcome for ${id} is decided by the rules and would be ignored`);
          continue;
        }
        if (open && !given) problems.push(`${rowLabel(row)}: no outcome for ${id}`);
        if (!open && given) problems.push(`${rowLabel(row)}: outcome for ${id} is decided by the rules and would be ignored`);
      }
    }
    const labels = ROWS.map(rowLabel);
    for (const l of new Set(labels)) if (labels.filter((x) => x === l).length > 1) problems.push(`duplicate row ${l}`);
    expect(problems).toEqual([]);
  });
});

describe.each(testEngines())('authorization matrix (%s)', (engine) => {
  let s: TestServer;
  let w: World;

  beforeAll(async () => {
    s = await startTestServer(engine);
    w = await setupWorld(s);
  }, 120_000);
  afterAll(async () => s?.stop());

  it('has a row for every route of /api, /auth, /healthz and /readyz, and no row for a route that does not exist', () => {
    const routes = [...new Set(s.app.routeList)];
    const covered = new Set(ROWS.map(rowKey));
    const missing = routes.filter((r) => {
      const path = r.slice(r.indexOf(' ') + 1);
      return !covered.has(r) && !NOT_IN_MATRIX.some((x) => x.pattern.test(path));
    });
    expect(
      missing,
      `routes without a matrix row — add one row object each to ROWS (or, for another face, a reason to NOT_IN_MATRIX): ${missing.join(', ')}`,
    ).toEqual([]);
    const stale = [...covered].filter((k) => !routes.includes(k));
    expect(stale, `matrix rows for routes the server does not register: ${stale.join(', ')}`).toEqual([]);
  });

  for (const row of ROWS) {
    describe(rowLabel(row), () => {
      for (const id of ACTOR_IDS) {
        it(id, async () => {
          const actor = w.actors[id];
          const want = expected(row, actor);
          await actor.prepare?.();
          const req = await row.request({ w: fixturesFor(w, row, actor), actor });
          const client = row.freshCaller ? await actor.fresh(row.grant) : actor.client(row.grant);
          const res = await client.request(row.method, req.path, {
            ...(req.body !== undefined ? { json: req.body } : {}),
            ...(req.headers ? { headers: req.headers } : {}),
          });
          check(row, actor, want, res);
        });
      }
    });
  }
});
