import { isIP } from 'node:net';
import { CompiledQuery, sql, type InferResult, type RawBuilder } from 'kysely';
import type { CoreContext } from '../core/context.js';
import { forbidden, notFound, unauthorized } from '../core/errors.js';
import { toGrant, toLevel } from '../core/principal-loader.js';
import { findWorkspace } from '../core/workspaces.js';
import { AGENT_CAP } from '../policy/access.js';
import type { Grant, Principal, Role } from '../policy/principal.js';
import { LEVELS } from '../policy/sensitivity.js';
import { pinSnapshot, readCache, readSnapshot } from '../store/read-cache.js';
import type { PagesTable } from '../store/schema.js';
import { resolveAccessToken } from './oauth/tokens.js';
import { hashSecret, safeEqual } from './secrets.js';
import { SESSION_IDLE_MS } from './sessions.js';

/** The parts of a request that identify the caller; faces fill it from their transport. */
export interface Credentials {
  authorization: string | undefined;
  sessionToken: string | undefined;
  csrfHeader: string | undefined;
  csrfCookie: string | undefined;
  /** POST, PUT, PATCH, DELETE: a session needs the CSRF token on these. */
  unsafe: boolean;
  ip: string;
  /** Workspace asked for by header or query (id or slug). */
  workspace: string | undefined;
  /** Routes of the second login step accept a session still waiting for TOTP. */
  allowPending?: boolean;
  /**
   * A page id the request reads: on PostgreSQL an agent key's own statement reads the live page
   * at that id in its workspace too (authenticateAndPrefetch), one round trip less per read.
   */
  prefetchPage?: string | undefined;
}

/** A caller, and the live page row read with its key when one was asked for (undefined: not read). */
export interface Authenticated {
  principal: Principal;
  page: PagesTable | null | undefined;
}

/** How fresh a key's last_used_at and a session's last_seen_at are kept. */
const KEY_USE_RESOLUTION_MS = 60_000;

function sameIp(a: string, b: string): boolean {
  const strip = (x: string) => (x.startsWith('::ffff:') && isIP(x.slice(7)) === 4 ? x.slice(7) : x);
  return strip(a) === strip(b);
}

/**
 * What an agent key's request needs beyond the key row, as subqueries of the one lookup: on
 * PostgreSQL each separate query was a round trip on every request (issue 18). Grants come as a
 * JSON array of [action, scope, ceiling] in their stored order.
 */
function keyExtras(ctx: CoreContext, nowIso: string) {
  const grants =
    ctx.store.dialect === 'postgres'
      ? sql<string>`(select coalesce(json_agg(json_build_array(g.action, g.scope, g.ceiling) order by g.position), '[]')::text from grants g where g.principal_id = principals.id)`
      : sql<string>`(select json_group_array(json_array(g.action, g.scope, g.ceiling)) from (select action, scope, ceiling from grants where principal_id = principals.id order by position) g)`;
  return {
    grants: grants.as('grantList'),
    elevatedUntil: sql<
      string | null
    >`(select max(e.expires_at) from elevations e where e.agent_id = principals.id and e.revoked_at is null and e.expires_at > ${nowIso})`.as('elevatedUntil'),
    creatorRole: sql<
      string | null
    >`(select m.role from members m where m.workspace_id = agent_keys.workspace_id and m.principal_id = principals.created_by)`.as('creatorRole'),
  };
}

function parseGrants(json: string): Grant[] {
  return (JSON.parse(json) as [string, string, string][]).map(([action, scope, ceiling]) => toGrant({ action, scope, ceiling }));
}

/**
 * The agent-key statement is built and compiled once per engine (and with or without the page
 * read ahead) with these placeholders, then run with each request's values: building it was a
 * good part of an authenticated read's CPU. The text stays the same, so PostgreSQL connections
 * prepare it once (store/db.ts).
 */
const AT = { hash: '\u0000cv:token-hash', now: '\u0000cv:now' } as const;

function agentKeyStatement(ctx: CoreContext) {
  const extras = keyExtras(ctx, AT.now);
  return ctx.store.db
    .selectFrom('agent_keys')
    .innerJoin('principals', 'principals.id', 'agent_keys.principal_id')
    .innerJoin('workspaces', 'workspaces.id', 'agent_keys.workspace_id')
    .select([
      'agent_keys.id as keyId',
      'agent_keys.ceiling as keyCeiling',
      'agent_keys.ip_pin',
      'agent_keys.expires_at',
      'agent_keys.revoked_at',
      'agent_keys.epoch',
      'agent_keys.last_used_at',
      'principals.id as principalId',
      'principals.name',
      'principals.ceiling as agentCeiling',
      'principals.created_by',
      'principals.deleted_at',
      'principals.suspended_at',
      'workspaces.id as workspaceId',
      'workspaces.slug',
      'workspaces.token_epoch',
      extras.grants,
      extras.elevatedUntil,
      extras.creatorRole,
    ])
    .where('agent_keys.token_hash', '=', AT.hash);
}

type AgentKeyRow = InferResult<ReturnType<typeof agentKeyStatement>>[number];
const agentKeyCompiled = new Map<string, CompiledQuery<AgentKeyRow>>();

async function loadAgentKey(ctx: CoreContext, values: { hash: string; now: string }): Promise<AgentKeyRow | undefined> {
  const name = ctx.store.dialect;
  let compiled = agentKeyCompiled.get(name);
  if (!compiled) {
    compiled = agentKeyStatement(ctx).compile();
    agentKeyCompiled.set(name, compiled);
  }
  const by = new Map<unknown, string | undefined>([
    [AT.hash, values.hash],
    [AT.now, values.now],
  ]);
  const parameters = compiled.parameters.map((v) => {
    if (!by.has(v)) return v;
    const value = by.get(v);
    if (value === undefined) throw new Error(`agent key statement: no value for ${JSON.stringify(v)}`);
    return value;
  });
  const r = await ctx.store.db.executeQuery(CompiledQuery.raw(compiled.sql, parameters) as CompiledQuery<AgentKeyRow>);
  return r.rows[0];
}

/** Keys whose rows are kept between commits (read-cache.ts): a hot key reads nothing. */
const KEYS_CACHED = 10_000;

/**
 * An agent key's row and what follows from it alone: the caller it stands for (frozen; one
 * object for every request the row serves) and its times as numbers.
 */
interface KeyEntry {
  row: AgentKeyRow;
  /** Revoked, deleted, suspended, or of an older workspace epoch (a lockdown). */
  dead: boolean;
  expiresMs: number | null;
  lastUsedMs: number | null;
  elevatedMs: number | null;
  /** The caller while the elevation the row names lasts, and after it (the same object if none). */
  elevated: Principal;
  plain: Principal;
}

function keyEntry(key: AgentKeyRow): KeyEntry {
  const grants = Object.freeze(parseGrants(key.grantList).map((g) => Object.freeze(g)));
  const elevated: Principal = Object.freeze({
    id: key.principalId,
    kind: 'agent',
    name: key.name,
    workspaceId: key.workspaceId,
    workspaceSlug: key.slug,
    role: null,
    grants: grants as Grant[],
    agentCeiling: toLevel(key.agentCeiling),
    keyCeiling: toLevel(key.keyCeiling),
    via: 'key',
    sessionId: null,
    keyId: key.keyId,
    stepUpAt: null,
    elevatedUntil: key.elevatedUntil ?? null,
    createdBy: key.created_by,
    creatorRole: key.created_by ? ((key.creatorRole as Role | null) ?? null) : null,
  });
  return {
    row: key,
    // A suspended agent (its creator left the workspace) is as dead as a revoked key.
    dead: Boolean(key.revoked_at || key.deleted_at || key.suspended_at || key.epoch !== key.token_epoch),
    expiresMs: key.expires_at ? Date.parse(key.expires_at) : null,
    lastUsedMs: key.last_used_at ? Date.parse(key.last_used_at) : null,
    elevatedMs: key.elevatedUntil ? Date.parse(key.elevatedUntil) : null,
    elevated,
    plain: key.elevatedUntil ? Object.freeze({ ...elevated, elevatedUntil: null }) : elevated,
  };
}

/** Levels as PostgreSQL ranks them below: 1 (public) to 4 (secret). */
const LEVEL_ARRAY = sql.raw(`array[${LEVELS.map((l) => `'${l}'`).join(', ')}]::text[]`);

/**
 * PostgreSQL: the database's snapshot (read-cache.ts) and the live page `id` as of that same
 * snapshot (one statement reads at one). The page is read only for a key that could read it,
 * as far as the key's row tells: a live key (not revoked, unexpired, its agent neither deleted
 * nor suspended, its workspace not locked down since) of the page's workspace, whose ceiling
 * bound reaches the page's level. Read for anyone, a page took as long to answer "not found" as
 * its size, telling that it exists (attack of session o: another workspace's; of session q: a
 * revoked or expired key's old workspace's, and a page above the caller's ceiling). The key is
 * checked in full after; a page left out here is one the key cannot read (`null`: not found).
 *
 * The bound is policy/access.ts ceilingFor's for reading, without the grants (they only lower
 * it): elevated, the key's ceiling; else the lowest of the agent's, the key's and AGENT_CAP. It
 * must never be lower than what ceilingFor gives, or a readable page would answer 404
 * (test/http/attack-session-q.test.ts reads secret pages elevated).
 *
 * The key's workspace and bound are values the page's scan filters on, never a join: a join lets the
 * planner scan pages by id first and build the whole row (`row_to_json(p)`, which reads every
 * TOASTed column) before the join's filter drops another workspace's page — a 1 MB page then
 * cost ~2 ms more than a missing id (session q).
 */
export function stateWithPageStatement(id: string, hash: string, now: string): RawBuilder<{ state: string; page: string | null }> {
  const rank = (level: RawBuilder<unknown>) => sql`array_position(${LEVEL_ARRAY}, ${level})`;
  const bound = sql`case when exists (select 1 from elevations e where e.agent_id = pr.id and e.revoked_at is null and e.expires_at > ${now})
      then ${rank(sql`coalesce(k.ceiling, 'secret')`)}
      else least(${rank(sql`coalesce(k.ceiling, 'secret')`)}, ${rank(sql`coalesce(pr.ceiling, 'secret')`)}, ${rank(sql.lit(AGENT_CAP))}) end`;
  // The live key's row, as each of the two values below reads it (each an InitPlan, run once).
  const liveKey = sql`from agent_keys k join principals pr on pr.id = k.principal_id join workspaces w on w.id = k.workspace_id
      where k.token_hash = ${hash} and k.revoked_at is null and (k.expires_at is null or k.expires_at > ${now})
        and pr.deleted_at is null and pr.suspended_at is null and k.epoch = w.token_epoch`;
  return sql<{ state: string; page: string | null }>`select pg_current_snapshot()::text as state,
    (select row_to_json(p)::text from pages p
      where p.workspace_id = (select k.workspace_id ${liveKey})
        and p.id = ${id} and p.deleted_at is null
        and ${rank(sql`p.sensitivity`)} <= (select ${bound} ${liveKey})) as page`;
}

async function stateWithPage(ctx: CoreContext, id: string, hash: string, now: string): Promise<{ state: string; page: string | null }> {
  const r = await stateWithPageStatement(id, hash, now).execute(ctx.store.db);
  return r.rows[0]!;
}

async function fromAgentKey(ctx: CoreContext, secret: string, c: Credentials): Promise<Authenticated> {
  const db = ctx.store.db;
  const now = Date.now();
  const hash = hashSecret(secret);
  const load = async () => {
    const row = await loadAgentKey(ctx, { hash, now: new Date(now).toISOString() });
    return row ? keyEntry(row) : undefined;
  };
  // A kept row is the one a read would return now: any commit (a revocation, a lockdown, an
  // elevation, this key's own last_used_at) drops it. Only the times are checked anew below.
  // On PostgreSQL the state is asked for with the page the request names (if any) in one round
  // trip, the page as of that state: a kept key then costs nothing more (SQLite reads
  // in-process, and reading the page ahead saves nothing there).
  const ahead =
    ctx.store.dialect === 'postgres' && c.prefetchPage !== undefined ? await stateWithPage(ctx, c.prefetchPage, hash, new Date(now).toISOString()) : undefined;
  const snapshot = ahead ? ahead.state : await readSnapshot(ctx.store);
  const entry = await readCache<KeyEntry | undefined>(ctx.store, 'agent-keys', { entries: KEYS_CACHED }).through(hash, load, snapshot);
  // One message for every dead key: the caller learns nothing about which check failed.
  const dead = () => unauthorized('The agent key is invalid, expired or revoked', 'invalid_token');
  if (!entry || entry.dead) throw dead();
  const key = entry.row;
  if (entry.expiresMs !== null && entry.expiresMs <= now) throw dead();
  if (key.ip_pin && !sameIp(key.ip_pin, c.ip)) throw unauthorized('This key is pinned to another IP address', 'invalid_token');
  if (c.workspace && c.workspace !== key.workspaceId && c.workspace !== key.slug) {
    throw notFound(`Workspace ${c.workspace} not found`, 'workspace_not_found');
  }
  if (entry.lastUsedMs === null || now - entry.lastUsedMs > KEY_USE_RESOLUTION_MS) {
    // At most one write per key per minute: a hot key must not put an fsync on every request.
    await db
      .updateTable('agent_keys')
      .set({ last_used_at: new Date(now).toISOString() })
      .where('id', '=', key.keyId)
      .execute();
  }
  // The row names the latest elevation unexpired when it was read; it may have run out since.
  const principal = entry.elevatedMs !== null && entry.elevatedMs > now ? entry.elevated : entry.plain;
  // What this request reads next (its page) is judged against the same state of the store.
  pinSnapshot(principal, snapshot);
  if (!ahead) return { principal, page: undefined };
  // A page of another workspace does not exist for this key (the statement already reads none).
  const page = ahead.page === null ? null : (JSON.parse(ahead.page) as PagesTable);
  return { principal, page: page !== null && page.workspace_id === key.workspaceId ? page : null };
}

async function fromSession(ctx: CoreContext, token: string, c: Credentials): Promise<Principal> {
  const db = ctx.store.db;
  const s = await db
    .selectFrom('sessions')
    .innerJoin('principals', 'principals.id', 'sessions.principal_id')
    .select([
      'sessions.id',
      'sessions.principal_id',
      'sessions.workspace_id',
      'sessions.csrf_token',
      'sessions.expires_at',
      'sessions.revoked_at',
      'sessions.stepup_at',
      'sessions.pending',
      'sessions.last_seen_at',
      'sessions.created_at',
      'principals.name',
      'principals.deleted_at',
    ])
    .where('sessions.token_hash', '=', hashSecret(token))
    .executeTakeFirst();
  const now = Date.now();
  if (!s || s.revoked_at || s.deleted_at || Date.parse(s.expires_at) <= now || now - Date.parse(s.last_seen_at) > SESSION_IDLE_MS) {
    throw unauthorized('The session has ended; sign in again', 'session_expired');
  }
  if (s.pending && !c.allowPending) {
    // A session waiting for its second factor can do nothing but finish signing in.
    throw s.pending === 'totp'
      ? unauthorized('Enter your TOTP code (POST /api/auth/totp/verify) to finish signing in', 'totp_required')
      : unauthorized('Enrol TOTP (POST /api/auth/totp/enroll) to finish signing in', 'totp_enroll_required');
  }
  if (c.unsafe) {
    // Double submit, bound to the session: header == cookie == the session's own token.
    const h = c.csrfHeader ?? '';
    if (!h || !safeEqual(h, s.csrf_token) || (c.csrfCookie !== undefined && !safeEqual(c.csrfCookie, h))) {
      throw forbidden('Missing or wrong X-CSRF-Token header (echo the svc_csrf cookie)', 'csrf_failed');
    }
  }
  if (now - Date.parse(s.last_seen_at) > KEY_USE_RESOLUTION_MS) {
    await db
      .updateTable('sessions')
      .set({ last_seen_at: new Date(now).toISOString() })
      .where('id', '=', s.id)
      .execute();
  }
  let workspaceId = s.workspace_id;
  if (c.workspace) {
    const ws = await findWorkspace(db, c.workspace);
    if (!ws) throw notFound(`Workspace ${c.workspace} not found`, 'workspace_not_found');
    workspaceId = ws.id;
  }
  const member = await db
    .selectFrom('members')
    .innerJoin('workspaces', 'workspaces.id', 'members.workspace_id')
    .select(['members.role', 'workspaces.slug', 'workspaces.locked_at', 'workspaces.locked_by_session'])
    .where('members.workspace_id', '=', workspaceId)
    .where('members.principal_id', '=', s.principal_id)
    .executeTakeFirst();
  // Not a member: the workspace does not exist for this caller.
  if (!member) throw notFound(`Workspace ${c.workspace ?? workspaceId} not found`, 'workspace_not_found');
  // A lockdown ended every older session's access to this workspace (not to the others).
  if (member.locked_at && s.created_at < member.locked_at && s.id !== member.locked_by_session) {
    throw unauthorized('This workspace was locked down after you signed in; sign in again to use it', 'session_expired');
  }
  return {
    id: s.principal_id,
    kind: 'human',
    name: s.name,
    workspaceId,
    workspaceSlug: member.slug,
    role: member.role as Role,
    grants: [],
    agentCeiling: null,
    keyCeiling: null,
    via: 'session',
    sessionId: s.id,
    keyId: null,
    stepUpAt: s.stepup_at,
    elevatedUntil: null,
    createdBy: null,
  };
}

/**
 * Turns request credentials into a principal for /api/v1, or throws 401. OAuth (`oa_`)
 * and git (`gt_`) tokens are refused here: they belong to /mcp and /git.
 */
export async function authenticate(ctx: CoreContext, c: Credentials): Promise<Principal> {
  return (await authenticateAndPrefetch(ctx, c)).principal;
}

/** authenticate, with the page of `c.prefetchPage` when the credentials could read it in the same statement. */
export async function authenticateAndPrefetch(ctx: CoreContext, c: Credentials): Promise<Authenticated> {
  const auth = c.authorization?.trim();
  if (auth) {
    const [scheme, value = ''] = auth.split(/\s+/, 2);
    if (scheme?.toLowerCase() === 'bearer') {
      if (value.startsWith('ak_')) return fromAgentKey(ctx, value, c);
      if (value.startsWith('oa_')) throw unauthorized('OAuth access tokens are accepted only on /mcp', 'invalid_token');
      if (value.startsWith('gt_')) throw unauthorized('Git tokens are accepted only on /git', 'invalid_token');
      throw unauthorized('Unrecognised bearer token', 'invalid_token');
    }
    if (scheme?.toLowerCase() === 'basic') throw unauthorized('Basic credentials are accepted only on /git', 'invalid_token');
    throw unauthorized('Unsupported Authorization scheme; use Bearer ak_…', 'invalid_token');
  }
  if (c.sessionToken) return { principal: await fromSession(ctx, c.sessionToken, c), page: undefined };
  throw unauthorized('Sign in, or send an agent key as Authorization: Bearer ak_…', 'unauthorized');
}

/** The parts of an MCP request that identify the caller (/mcp and /w/:slug/mcp). */
export interface McpCredentials {
  authorization: string | undefined;
  ip: string;
  /** The workspace slug of /w/:slug/mcp; the token must belong to it. */
  pinnedWorkspace?: string | undefined;
}

/**
 * Turns MCP request credentials into a principal, or throws 401. MCP takes bearer tokens
 * only: agent keys (`ak_`) and OAuth access tokens (`oa_`, src/auth/oauth/tokens.ts).
 * Sessions, git tokens (`gt_`) and Basic credentials are refused. On /w/:slug/mcp a token
 * of another workspace is refused like an invalid one (401 `invalid_token`): it is not
 * valid for this resource, and the answer says nothing about whether the slug exists.
 */
export async function authenticateMcp(ctx: CoreContext, c: McpCredentials): Promise<Principal> {
  const auth = c.authorization?.trim();
  if (!auth) throw unauthorized('Send an agent key (Authorization: Bearer ak_…) or sign in with OAuth (see WWW-Authenticate)', 'unauthorized');
  const [scheme, value = ''] = auth.split(/\s+/, 2);
  if (scheme?.toLowerCase() !== 'bearer') throw unauthorized('MCP accepts Bearer tokens only', 'invalid_token');
  let p: Principal;
  if (value.startsWith('ak_')) {
    ({ principal: p } = await fromAgentKey(ctx, value, {
      authorization: auth,
      sessionToken: undefined,
      csrfHeader: undefined,
      csrfCookie: undefined,
      unsafe: false,
      ip: c.ip,
      workspace: undefined,
    }));
  } else if (value.startsWith('oa_')) {
    // Bound to /mcp or /w/<slug>/mcp: resolveAccessToken checks the binding against this endpoint.
    return resolveAccessToken(ctx, value, c.pinnedWorkspace);
  } else if (value.startsWith('gt_')) {
    throw unauthorized('Git tokens are accepted only on /git', 'invalid_token');
  } else {
    throw unauthorized('Unrecognised bearer token', 'invalid_token');
  }
  if (c.pinnedWorkspace !== undefined && c.pinnedWorkspace !== p.workspaceSlug) {
    throw unauthorized(`This token is not valid for /w/${c.pinnedWorkspace}/mcp`, 'invalid_token');
  }
  return p;
}
