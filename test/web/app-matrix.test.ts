import * as OTPAuth from 'otpauth';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, startTestServer, type TestServer } from '../support/server.js';
import { webPerson, WEB_PASSWORD, type WebPerson } from '../support/web.js';

/**
 * The web app's authorization matrix (issue 17): every route under /app, as a browser sends it
 * (Accept: text/html, the session cookie, the form's `csrf` field, redirects not followed), for
 * every kind of caller. It is the HTML face's counterpart of test/http/authz-matrix.test.ts:
 *
 *  - no usable session (none, an agent key in Authorization, a signed-out session, a session
 *    still waiting for its second factor) → 303 to /login?next=…, and nothing happens;
 *  - a form POST whose `csrf` field is missing or another session's → 403 (the browser tests of
 *    each screen check that nothing changed);
 *  - a viewer, an editor and an owner of the workspace and the owner of ANOTHER workspace
 *    (whose pages, agents, proposals, members are not theirs) each get what the row says: the
 *    core's answer to that role, 404 for what is outside their workspace or above their level.
 *
 * A route the server registers under /app without a row here fails the first test.
 */

type ActorId = 'viewer' | 'editor' | 'owner' | 'outsider';
const ROLES: ActorId[] = ['viewer', 'editor', 'owner', 'outsider'];

interface Outcome {
  status: number;
  /** For a 303: where it leads (a prefix match on the Location path). */
  to?: string;
}
const ok: Outcome = { status: 200 };
const created: Outcome = { status: 201 };
const forbidden: Outcome = { status: 403 };
const missing: Outcome = { status: 404 };
const to = (where: string): Outcome => ({ status: 303, to: where });

interface Req {
  path: string;
  form?: Record<string, string>;
}

interface Row {
  method: 'GET' | 'POST';
  /** The route as Fastify registers it (`s.app.routeList`). */
  route: string;
  variant?: string;
  /** The request for this caller: fresh fixtures where the row changes something. */
  request(w: World, actor: ActorId | 'nobody'): Promise<Req>;
  expect: Record<ActorId, Outcome>;
  /** What a session waiting for its TOTP code gets with a made-up csrf, when not the sign-in page. */
  pendingAnswer?: Outcome;
  /** The row ends the caller's session (sign-out): it runs on a fresh one. */
  freshSession?: boolean;
}

interface Person extends WebPerson {
  role: ActorId;
}

interface World {
  s: TestServer;
  people: Record<ActorId, Person>;
  ws: string;
  wsId: string;
  page: { id: string; path: string; shas: string[] };
  conf: { id: string; path: string };
  agent: { id: string; key: string; keyId: string };
  ownerSessionId: string;
  ownerGitTokenId: string;
  /** A fresh page in the owner's workspace. */
  newPage(tag: string): Promise<{ id: string; path: string; sha: string }>;
  newAgent(): Promise<{ id: string; keyId: string }>;
  newProposal(): Promise<string>;
  newMember(): Promise<string>;
  newInvite(): Promise<string>;
}

let seq = 0;
const uniq = () => `${Date.now().toString(36)}${++seq}`;

const cookieOf = (c: Client) => [...c.cookies].map(([k, v]) => `${k}=${v}`).join('; ');

interface Answer {
  status: number;
  location: string | null;
  text: string;
}

async function browserRequest(
  s: TestServer,
  method: string,
  path: string,
  o: { cookie?: string; bearer?: string; form?: Record<string, string> },
): Promise<Answer> {
  const headers: Record<string, string> = { accept: 'text/html' };
  if (o.cookie) headers.cookie = o.cookie;
  if (o.bearer) headers.authorization = `Bearer ${o.bearer}`;
  let body: string | undefined;
  if (method === 'POST') {
    headers['content-type'] = 'application/x-www-form-urlencoded';
    body = new URLSearchParams(o.form ?? {}).toString();
  }
  const res = await fetch(s.url + path, { method, headers, body, redirect: 'manual' });
  return { status: res.status, location: res.headers.get('location'), text: await res.text() };
}

const totp = (secret: string) => new OTPAuth.TOTP({ secret: OTPAuth.Secret.fromBase32(secret), digits: 6, period: 30 }).generate();

async function signIn(base: string, email: string): Promise<Client> {
  const c = new Client(base);
  const res = await c.post('/api/auth/login', { email, password: WEB_PASSWORD });
  if (res.status !== 200) throw new Error(`login failed: ${res.status} ${res.text}`);
  return c;
}

async function setup(s: TestServer): Promise<World> {
  const owner = await webPerson(s.url, 'Olga');
  const join = async (name: string, role: 'viewer' | 'editor' | 'owner') => {
    const inv = await owner.client.post('/api/v1/invites', { role });
    if (inv.status !== 201) throw new Error(inv.text);
    return webPerson(s.url, name, inv.body.token);
  };
  const viewer = await join('Vera', 'viewer');
  const editor = await join('Emil', 'editor');
  const outsider = await webPerson(s.url, 'Xena');
  const o = owner.client;

  const write = async (path: string, content: string) => {
    const r = await o.post('/api/v1/nodes', { path, content });
    if (r.status !== 201) throw new Error(`write ${path}: ${r.status} ${r.text}`);
    return { id: r.body.id as string, path: r.body.path as string, sha: r.body.commit_sha as string };
  };
  const page = await write('docs/matrix.md', '# Matrix\n\nFirst words.\n');
  const second = await o.put(`/api/v1/nodes/${page.id}`, { content: '# Matrix\n\nSecond words.\n' });
  if (second.status !== 200) throw new Error(second.text);
  const hist = await o.get(`/api/v1/nodes/${page.id}/history`);
  const shas = (hist.body.versions as { sha?: string; commit_sha?: string }[]).map((v) => (v.sha ?? v.commit_sha)!);
  const conf = await write('docs/plans.md', '---\nsensitivity: confidential\n---\n# Plans\n\nEditors and owners only.\n');
  await o.post(`/api/v1/nodes/${page.id}/threads`, { body: 'A first message', kind: 'comment' });

  const agent = await createAgentWithKey(o, [{ action: 'read' }, { action: 'propose' }], { name: 'matrix-bot' });
  // A second session of the owner (another browser): the one the session rows try to revoke, and
  // the one stepped up to mint a git token (the first one is not stepped up until the step-up row).
  const other = await signIn(s.url, owner.email);
  const sessions = await other.get('/api/auth/sessions');
  const ownerSessionId = (sessions.body.sessions as { id: string; current: boolean }[]).find((x) => x.current)!.id;
  expect((await other.post('/api/auth/stepup', { password: WEB_PASSWORD })).status).toBe(200);
  const git = await other.post('/api/v1/me/git-tokens', {});
  expect(git.status, git.text).toBe(201);

  const world: World = {
    s,
    people: {
      owner: { ...owner, role: 'owner' },
      viewer: { ...viewer, role: 'viewer' },
      editor: { ...editor, role: 'editor' },
      outsider: { ...outsider, role: 'outsider' },
    },
    ws: owner.slug,
    wsId: ((await o.get('/api/v1/workspaces')).body.workspaces as { id: string; current: boolean }[]).find((x) => x.current)!.id,
    page: { id: page.id, path: page.path, shas },
    conf,
    agent: { id: agent.id, key: agent.key, keyId: agent.keyId },
    ownerSessionId,
    ownerGitTokenId: git.body.id,
    newPage: (tag) => write(`docs/fresh-${tag}-${uniq()}.md`, '# Fresh\n\nWords.\n'),
    async newAgent() {
      const a = await createAgentWithKey(o, [{ action: 'read' }], { name: `bot-${uniq()}` });
      return { id: a.id, keyId: a.keyId };
    },
    async newProposal() {
      const r = await agent.client.post('/api/v1/proposals', { node_id: page.id, content: `# Matrix\n\nProposed ${uniq()}.\n`, reason: 'matrix' });
      if (r.status !== 201) throw new Error(`proposal: ${r.status} ${r.text}`);
      return r.body.id as string;
    },
    async newMember() {
      const m = await join(`Mia${seq}`, 'viewer');
      return m.id;
    },
    async newInvite() {
      const r = await o.post('/api/v1/invites', { role: 'viewer' });
      if (r.status !== 201) throw new Error(r.text);
      return r.body.id as string;
    },
  };
  return world;
}

const p = (path: string) => encodeURI(path);
const all = (o: Outcome): Record<ActorId, Outcome> => ({ viewer: o, editor: o, owner: o, outsider: o });
/** A resource of the owner's workspace: the outsider meets 404, as for a page that does not exist. */
const inWorkspace = (o: Omit<Record<ActorId, Outcome>, 'outsider'>): Record<ActorId, Outcome> => ({ ...o, outsider: missing });

const ROWS: Row[] = [
  // Reading
  { method: 'GET', route: '/app', request: async () => ({ path: '/app' }), expect: all(ok) },
  { method: 'GET', route: '/app/s/:space', request: async () => ({ path: '/app/s/docs' }), expect: inWorkspace({ viewer: ok, editor: ok, owner: ok }) },
  {
    method: 'GET',
    route: '/app/p/*',
    request: async (w) => ({ path: `/app/p/${p(w.page.path)}` }),
    expect: inWorkspace({ viewer: ok, editor: ok, owner: ok }),
  },
  {
    method: 'GET',
    route: '/app/p/*',
    variant: 'confidential page',
    request: async (w) => ({ path: `/app/p/${p(w.conf.path)}` }),
    expect: inWorkspace({ viewer: missing, editor: ok, owner: ok }),
  },
  { method: 'GET', route: '/app/search', request: async () => ({ path: '/app/search?q=matrix' }), expect: all(ok) },
  // History
  {
    method: 'GET',
    route: '/app/h/*',
    request: async (w) => ({ path: `/app/h/${p(w.page.path)}` }),
    expect: inWorkspace({ viewer: ok, editor: ok, owner: ok }),
  },
  {
    method: 'GET',
    route: '/app/h/*',
    variant: 'confidential page',
    request: async (w) => ({ path: `/app/h/${p(w.conf.path)}` }),
    expect: inWorkspace({ viewer: missing, editor: ok, owner: ok }),
  },
  {
    method: 'GET',
    route: '/app/diff/*',
    request: async (w) => ({ path: `/app/diff/${p(w.page.path)}?from=${w.page.shas.at(-1)}&to=${w.page.shas[0]}` }),
    expect: inWorkspace({ viewer: ok, editor: ok, owner: ok }),
  },
  // Writing
  // A viewer has no write: the new-page and move/archive screens say so (403), as the core would on saving.
  {
    method: 'GET',
    route: '/app/new',
    request: async () => ({ path: '/app/new?space=docs' }),
    expect: { viewer: forbidden, editor: ok, owner: ok, outsider: ok },
  },
  {
    method: 'POST',
    route: '/app/new',
    request: async (_w, a) => ({ path: '/app/new', form: { space: 'docs', path: `made-by-${a}-${uniq()}.md`, content: '# Made\n\nText.\n', message: '' } }),
    expect: { viewer: forbidden, editor: to('/app/p/docs/made-by-'), owner: to('/app/p/docs/made-by-'), outsider: to('/app/p/docs/made-by-') },
  },
  {
    method: 'GET',
    route: '/app/e/*',
    // A viewer's editor is the proposing one (as POST /api/v1/proposals); saving stays refused below.
    request: async (w) => ({ path: `/app/e/${p(w.page.path)}` }),
    expect: inWorkspace({ viewer: ok, editor: ok, owner: ok }),
  },
  {
    method: 'GET',
    route: '/app/e/*',
    variant: 'confidential page',
    request: async (w) => ({ path: `/app/e/${p(w.conf.path)}` }),
    expect: inWorkspace({ viewer: missing, editor: ok, owner: ok }),
  },
  {
    method: 'POST',
    route: '/app/e/*',
    request: async (w, a) => {
      const page = await w.newPage(`edit-${a}`);
      return { path: `/app/e/${p(page.path)}`, form: { id: page.id, base_sha: page.sha, content: '# Fresh\n\nChanged.\n', message: '' } };
    },
    expect: inWorkspace({ viewer: forbidden, editor: to('/app/p/docs/fresh-edit-'), owner: to('/app/p/docs/fresh-edit-') }),
  },
  {
    method: 'POST',
    route: '/app/e/*',
    variant: 'propose',
    request: async (w, a) => {
      const page = await w.newPage(`propose-${a}`);
      return {
        path: `/app/e/${p(page.path)}`,
        form: { id: page.id, base_sha: page.sha, content: '# Fresh\n\nProposed.\n', message: 'a better wording', action: 'propose' },
      };
    },
    expect: inWorkspace({ viewer: { status: 202 }, editor: { status: 202 }, owner: { status: 202 } }),
  },
  {
    method: 'GET',
    route: '/app/a/*',
    request: async (w) => ({ path: `/app/a/${p(w.page.path)}` }),
    expect: inWorkspace({ viewer: forbidden, editor: ok, owner: ok }),
  },
  {
    method: 'POST',
    route: '/app/a/*',
    request: async (w, a) => {
      const page = await w.newPage(`archive-${a}`);
      return { path: `/app/a/${p(page.path)}`, form: { id: page.id, do: 'archive', reason: 'manual' } };
    },
    expect: inWorkspace({ viewer: { status: 202 }, editor: to('/app/p/docs/fresh-archive-'), owner: to('/app/p/docs/fresh-archive-') }),
  },
  // Review
  { method: 'GET', route: '/app/proposals', request: async () => ({ path: '/app/proposals' }), expect: all(ok) },
  {
    method: 'GET',
    route: '/app/proposals/:id',
    request: async (w) => ({ path: `/app/proposals/${await w.newProposal()}` }),
    expect: inWorkspace({ viewer: ok, editor: ok, owner: ok }),
  },
  {
    method: 'POST',
    route: '/app/proposals/:id/accept',
    request: async (w) => {
      const id = await w.newProposal();
      return { path: `/app/proposals/${id}/accept`, form: {} };
    },
    expect: inWorkspace({ viewer: forbidden, editor: to('/app/proposals/'), owner: to('/app/proposals/') }),
  },
  {
    method: 'POST',
    route: '/app/proposals/:id/reject',
    request: async (w) => ({ path: `/app/proposals/${await w.newProposal()}/reject`, form: { reason: 'not now' } }),
    expect: inWorkspace({ viewer: forbidden, editor: to('/app/proposals/'), owner: to('/app/proposals/') }),
  },
  // Talking
  {
    method: 'GET',
    route: '/app/t/*',
    request: async (w) => ({ path: `/app/t/${p(w.page.path)}` }),
    expect: inWorkspace({ viewer: ok, editor: ok, owner: ok }),
  },
  {
    method: 'GET',
    route: '/app/t/*',
    variant: 'confidential page',
    request: async (w) => ({ path: `/app/t/${p(w.conf.path)}` }),
    expect: inWorkspace({ viewer: missing, editor: ok, owner: ok }),
  },
  {
    method: 'POST',
    route: '/app/threads/:page/messages',
    request: async (w, a) => ({ path: `/app/threads/${w.page.id}/messages`, form: { body: `Hello from ${a}`, kind: 'comment' } }),
    expect: inWorkspace({ viewer: to('/app/t/'), editor: to('/app/t/'), owner: to('/app/t/') }),
  },
  {
    method: 'POST',
    route: '/app/threads/:page/messages',
    variant: 'confidential page',
    request: async (w, a) => ({ path: `/app/threads/${w.conf.id}/messages`, form: { body: `Hello from ${a}`, kind: 'comment' } }),
    expect: inWorkspace({ viewer: missing, editor: to('/app/t/'), owner: to('/app/t/') }),
  },
  {
    method: 'POST',
    route: '/app/threads/:page/unlock',
    request: async (w) => ({ path: `/app/threads/${w.page.id}/unlock`, form: {} }),
    expect: inWorkspace({ viewer: forbidden, editor: to('/app/t/'), owner: to('/app/t/') }),
  },
  {
    method: 'POST',
    route: '/app/threads/:page/read',
    request: async (w) => ({ path: `/app/threads/${w.page.id}/read`, form: {} }),
    expect: inWorkspace({ viewer: to('/app/t/'), editor: to('/app/t/'), owner: to('/app/t/') }),
  },
  { method: 'GET', route: '/app/inbox', request: async () => ({ path: '/app/inbox' }), expect: all(ok) },
  { method: 'GET', route: '/app/inbox/count', request: async () => ({ path: '/app/inbox/count' }), expect: all(ok) },
  { method: 'GET', route: '/app/inbox/items', request: async () => ({ path: '/app/inbox/items?after=0' }), expect: all(ok) },
  { method: 'POST', route: '/app/inbox/ack', request: async () => ({ path: '/app/inbox/ack', form: { up_to: '1' } }), expect: all(to('/app/inbox')) },
  // Before the step-up row below: these need one, and none was made yet.
  {
    method: 'POST',
    route: '/app/account/git-tokens',
    request: async () => ({ path: '/app/account/git-tokens', form: { name: 'git' } }),
    expect: all(to('/app/stepup')),
  },
  {
    method: 'POST',
    route: '/app/account/git-tokens/:id/revoke',
    variant: "the owner's token",
    request: async (w) => ({ path: `/app/account/git-tokens/${w.ownerGitTokenId}/revoke`, form: {} }),
    expect: { viewer: missing, editor: missing, owner: to('/app/account'), outsider: missing },
  },
  { method: 'POST', route: '/app/account/totp', request: async () => ({ path: '/app/account/totp', form: {} }), expect: all(to('/app/stepup')) },
  {
    method: 'POST',
    route: '/app/account/totp/verify',
    request: async () => ({ path: '/app/account/totp/verify', form: { code: 'abc' } }),
    expect: all({ status: 400 }),
  },
  {
    method: 'POST',
    route: '/app/lockdown',
    request: async () => ({ path: '/app/lockdown', form: { confirm: 'yes' } }),
    // Nobody has stepped up yet: the owners are sent to the step-up (the outsider owns their own workspace).
    expect: { viewer: forbidden, editor: forbidden, owner: to('/app/stepup'), outsider: to('/app/stepup') },
  },
  {
    method: 'POST',
    route: '/app/elevations',
    request: async (w) => ({ path: '/app/elevations', form: { agent_id: w.agent.id, minutes: '5', reason: 'matrix' } }),
    // The outsider's workspace has no such agent: the core's 404 comes after the step-up.
    expect: { viewer: forbidden, editor: forbidden, owner: to('/app/stepup'), outsider: to('/app/stepup') },
  },
  {
    method: 'POST',
    route: '/app/lifecycle/run',
    variant: 'apply',
    request: async () => ({ path: '/app/lifecycle/run', form: { mode: 'apply' } }),
    expect: { viewer: forbidden, editor: forbidden, owner: to('/app/stepup'), outsider: to('/app/stepup') },
  },
  // Step-up
  { method: 'GET', route: '/app/stepup', request: async () => ({ path: '/app/stepup?next=%2Fapp%2Faccount' }), expect: all(ok) },
  {
    method: 'POST',
    route: '/app/stepup',
    request: async () => ({ path: '/app/stepup', form: { password: WEB_PASSWORD, next: '/app/account' } }),
    expect: all(to('/app/account')),
  },
  // Agents
  { method: 'GET', route: '/app/agents', request: async () => ({ path: '/app/agents' }), expect: all(ok) },
  {
    method: 'POST',
    route: '/app/agents',
    request: async (_w, a) => ({
      path: '/app/agents',
      form: { name: `made-by-${a}`, ceiling: 'internal', action: 'read', scope: '*', grant_ceiling: 'internal' },
    }),
    expect: all(to('/app/agents/')),
  },
  {
    method: 'GET',
    route: '/app/agents/:id',
    request: async (w) => ({ path: `/app/agents/${w.agent.id}` }),
    expect: inWorkspace({ viewer: forbidden, editor: forbidden, owner: ok }),
  },
  {
    method: 'POST',
    route: '/app/agents/:id/keys',
    request: async (w) => ({ path: `/app/agents/${(await w.newAgent()).id}/keys`, form: { name: 'k' } }),
    expect: inWorkspace({ viewer: forbidden, editor: forbidden, owner: created }),
  },
  {
    method: 'POST',
    route: '/app/agents/:id/keys/:kid/revoke',
    request: async (w) => {
      const a = await w.newAgent();
      return { path: `/app/agents/${a.id}/keys/${a.keyId}/revoke`, form: {} };
    },
    expect: inWorkspace({ viewer: forbidden, editor: forbidden, owner: to('/app/agents/') }),
  },
  {
    method: 'POST',
    route: '/app/agents/:id/delete',
    request: async (w) => ({ path: `/app/agents/${(await w.newAgent()).id}/delete`, form: { confirm: 'yes' } }),
    expect: inWorkspace({ viewer: forbidden, editor: forbidden, owner: to('/app/agents') }),
  },
  // Members and invites
  { method: 'GET', route: '/app/members', request: async () => ({ path: '/app/members' }), expect: all(ok) },
  {
    method: 'POST',
    route: '/app/members/:id/role',
    request: async (w) => ({ path: `/app/members/${await w.newMember()}/role`, form: { role: 'editor' } }),
    expect: inWorkspace({ viewer: forbidden, editor: forbidden, owner: to('/app/members') }),
  },
  {
    method: 'POST',
    route: '/app/members/:id/remove',
    request: async (w) => ({ path: `/app/members/${await w.newMember()}/remove`, form: {} }),
    expect: inWorkspace({ viewer: forbidden, editor: forbidden, owner: to('/app/members') }),
  },
  {
    method: 'POST',
    route: '/app/invites',
    request: async () => ({ path: '/app/invites', form: { role: 'viewer', expires_in_days: '7', email: '' } }),
    // The outsider owns a workspace of their own: the invite is to theirs.
    expect: { viewer: forbidden, editor: forbidden, owner: created, outsider: created },
  },
  {
    method: 'POST',
    route: '/app/invites/:id/revoke',
    request: async (w) => ({ path: `/app/invites/${await w.newInvite()}/revoke`, form: {} }),
    expect: inWorkspace({ viewer: forbidden, editor: forbidden, owner: to('/app/members') }),
  },
  // Operations: owners only, but every member reads the lifecycle candidates
  { method: 'GET', route: '/app/admin', request: async () => ({ path: '/app/admin' }), expect: all(ok) },
  {
    method: 'GET',
    route: '/app/lockdown',
    request: async () => ({ path: '/app/lockdown' }),
    expect: { viewer: forbidden, editor: forbidden, owner: ok, outsider: ok },
  },
  {
    method: 'GET',
    route: '/app/elevations',
    request: async () => ({ path: '/app/elevations' }),
    expect: { viewer: forbidden, editor: forbidden, owner: ok, outsider: ok },
  },
  {
    method: 'GET',
    route: '/app/audit',
    request: async () => ({ path: '/app/audit?action=page.' }),
    expect: { viewer: forbidden, editor: forbidden, owner: ok, outsider: ok },
  },
  {
    method: 'GET',
    route: '/app/audit/verify',
    request: async () => ({ path: '/app/audit/verify' }),
    expect: { viewer: forbidden, editor: forbidden, owner: ok, outsider: ok },
  },
  { method: 'GET', route: '/app/lifecycle', request: async () => ({ path: '/app/lifecycle' }), expect: all(ok) },
  {
    method: 'POST',
    route: '/app/lifecycle/run',
    variant: 'dry',
    request: async () => ({ path: '/app/lifecycle/run', form: { mode: 'dry' } }),
    expect: { viewer: forbidden, editor: forbidden, owner: ok, outsider: ok },
  },
  // The workspace switcher: only to a workspace the person belongs to
  {
    method: 'POST',
    route: '/app/workspace',
    request: async (w) => ({ path: '/app/workspace', form: { workspace: w.wsId } }),
    expect: inWorkspace({ viewer: to('/app'), editor: to('/app'), owner: to('/app') }),
  },
  // Account: only one's own sessions and tokens
  {
    method: 'POST',
    route: '/app/account/oauth-clients/:id/revoke',
    variant: 'a connection that is not theirs',
    request: async () => ({ path: '/app/account/oauth-clients/og_none/revoke', form: {} }),
    expect: all(missing),
  },
  {
    method: 'POST',
    route: '/app/account/workspaces',
    request: async (_w, a) => ({ path: '/app/account/workspaces', form: { name: `Matrix ${a}` } }),
    expect: all(to('/app')),
  },
  { method: 'GET', route: '/app/account', request: async () => ({ path: '/app/account' }), expect: all(ok) },
  {
    method: 'POST',
    route: '/app/account/sessions/:id/revoke',
    variant: "the owner's other session",
    request: async (w) => ({ path: `/app/account/sessions/${w.ownerSessionId}/revoke`, form: {} }),
    expect: { viewer: missing, editor: missing, owner: to('/app/account'), outsider: missing },
  },
  // Sign-out
  {
    method: 'POST',
    route: '/app/logout',
    freshSession: true,
    request: async () => ({ path: '/app/logout', form: {} }),
    expect: all(to('/login')),
    // A half-signed-in session may sign out too, but only with its own form's csrf.
    pendingAnswer: forbidden,
  },
];

const rowLabel = (r: Row) => `${r.method} ${r.route}${r.variant ? ` [${r.variant}]` : ''}`;

function check(row: Row, who: string, want: Outcome, got: Answer): void {
  const where = `${rowLabel(row)} as ${who}: ${got.status} ${got.location ?? ''} ${got.status >= 400 ? (got.text.replace(/\s+/g, ' ').match(/role="alert">([^<]*)/)?.[1] ?? '') : ''}`;
  expect(got.status, where).toBe(want.status);
  if (want.to !== undefined) expect(got.location ?? '', where).toMatch(new RegExp(`^${want.to.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
  // Never a stack trace or a raw JSON error to a browser.
  expect(got.text, where).not.toMatch(/"code":|at Object\.|node_modules/);
}

describe.each(testEngines())('web app authorization matrix (%s)', (engine) => {
  let s: TestServer;
  let w: World;
  /** A signed-out session's cookies, a session waiting for its TOTP code. */
  let dead: string;
  let pending: string;

  beforeAll(async () => {
    s = await startTestServer(engine);
    w = await setup(s);
    const gone = await signIn(s.url, w.people.editor.email);
    dead = cookieOf(gone);
    expect((await gone.post('/api/auth/logout')).status).toBe(200);

    const t = await webPerson(s.url, 'Tess');
    expect((await t.client.post('/api/auth/stepup', { password: WEB_PASSWORD })).status).toBe(200);
    const secret: string = (await t.client.post('/api/auth/totp/enroll', {})).body.secret;
    expect((await t.client.post('/api/auth/totp/enroll', { code: totp(secret) })).status).toBe(200);
    const half = new Client(s.url);
    const login = await half.post('/api/auth/login', { email: t.email, password: WEB_PASSWORD });
    expect(login.body.status ?? login.body.next, login.text).toMatch(/totp/);
    pending = cookieOf(half);
  }, 180_000);
  afterAll(async () => s?.stop());

  it('has a row for every route under /app, and none for a route that does not exist', () => {
    const routes = [...new Set(s.app.routeList)].filter((r) => / \/app(\/|$)/.test(r));
    const covered = new Set(ROWS.map((r) => `${r.method} ${r.route}`));
    const missingRows = routes.filter((r) => !covered.has(r));
    expect(missingRows, `routes under /app without a row in test/web/app-matrix.test.ts: ${missingRows.join(', ')}`).toEqual([]);
    const stale = [...covered].filter((k) => !routes.includes(k));
    expect(stale, `rows for routes the server does not register: ${stale.join(', ')}`).toEqual([]);
  });

  for (const row of ROWS) {
    describe(rowLabel(row), () => {
      it('without a usable session: to the sign-in page, nothing done (no cookie, an agent key, a signed-out session, a session waiting for TOTP)', async () => {
        const req = await row.request(w, 'nobody');
        const callers: [string, { cookie?: string; bearer?: string }][] = [
          ['no cookie', {}],
          ['an agent key', { bearer: w.agent.key }],
          ['a signed-out session', { cookie: dead }],
          ['a session waiting for its TOTP code', { cookie: pending }],
        ];
        for (const [who, creds] of callers) {
          const got = await browserRequest(s, row.method, req.path, { ...creds, form: req.form && { ...req.form, csrf: 'x'.repeat(43) } });
          check(row, who, creds.cookie === pending && row.pendingAnswer ? row.pendingAnswer : to('/login'), got);
        }
      });

      if (row.method === 'POST') {
        it("a form without its csrf field, or with another session's: 403", async () => {
          const owner = w.people.owner.client;
          const req = await row.request(w, 'owner');
          const none = await browserRequest(s, 'POST', req.path, { cookie: cookieOf(owner), form: req.form });
          check(row, 'owner without csrf', forbidden, none);
          const other = w.people.viewer.client.csrf!;
          const foreign = await browserRequest(s, 'POST', req.path, { cookie: cookieOf(owner), form: { ...req.form, csrf: other } });
          check(row, "owner with the viewer's csrf", forbidden, foreign);
        });
      }

      for (const id of ROLES) {
        it(id, async () => {
          const person = w.people[id];
          const client = row.freshSession ? await signIn(s.url, person.email) : person.client;
          const req = await row.request(w, id);
          const form = req.form && { ...req.form, csrf: client.csrf! };
          const got = await browserRequest(s, row.method, req.path, { cookie: cookieOf(client), ...(form ? { form } : {}) });
          check(row, id, row.expect[id], got);
        });
      }
    });
  }
});
