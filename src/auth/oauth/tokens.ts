import { sql } from 'kysely';
import type { CoreContext } from '../../core/context.js';
import { appendAudit } from '../../core/audit.js';
import { nowIso } from '../../core/ids.js';
import { ServiceError, unauthorized } from '../../errors/index.js';
import type { Principal, Role } from '../../policy/principal.js';
import type { Executor } from '../../store/db.js';
import type { OAuthGrantsTable } from '../../store/schema.js';
import { inTransaction } from '../../store/tx.js';
import { hashSecret, newSecret } from '../secrets.js';
import type { ClientRecord } from './clients.js';
import { pkceMatches, VERIFIER_RE } from './consent.js';
import { metadataDocumentHost } from './metadata-document.js';
import { parseMcpResource } from './resource.js';

/**
 * The token endpoint's grants (authorization_code with PKCE, refresh_token with rotation),
 * revocation (RFC 7009), and what an `oa_` access token means on /mcp: the consenting person,
 * in the consented workspace, at their role of the moment.
 */

export interface TokenResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  /** Only for clients that registered the refresh_token grant. */
  refresh_token?: string;
  scope: string;
}

const invalidGrant = (message: string) => new ServiceError(400, 'invalid_grant', message);
const invalidTarget = (message: string) => new ServiceError(400, 'invalid_target', message);

/** Whether the client registered the refresh_token grant (RFC 7591 grant_types). */
function allowsRefresh(client: ClientRecord): boolean {
  const meta = JSON.parse(client.metadata) as { grant_types?: unknown };
  return Array.isArray(meta.grant_types) && meta.grant_types.includes('refresh_token');
}

/** The person's role in the workspace now; null when they left it (or were removed). */
async function currentRole(db: Executor, workspaceId: string, principalId: string): Promise<Role | null> {
  const m = await db
    .selectFrom('members')
    .innerJoin('principals', 'principals.id', 'members.principal_id')
    .select('members.role')
    .where('members.workspace_id', '=', workspaceId)
    .where('members.principal_id', '=', principalId)
    .where('principals.deleted_at', 'is', null)
    .executeTakeFirst();
  return (m?.role as Role | undefined) ?? null;
}

/** Why a grant can no longer issue or back tokens, or null while it holds. */
async function grantProblem(db: Executor, g: OAuthGrantsTable): Promise<string | null> {
  if (g.revoked_at) return 'the authorization was revoked';
  const ws = await db.selectFrom('workspaces').select('token_epoch').where('id', '=', g.workspace_id).executeTakeFirst();
  if (!ws || ws.token_epoch !== g.epoch) return 'the workspace was locked down since';
  if (!(await currentRole(db, g.workspace_id, g.principal_id))) return 'the person is no longer a member of the workspace';
  return null;
}

/** Revokes the tokens not revoked yet: every one a grant issued (`grant_id`), or one (`id`). */
async function revokeTokens(trx: Executor, by: 'grant_id' | 'id', value: string, now: Date): Promise<void> {
  await trx
    .updateTable('oauth_tokens')
    .set({ revoked_at: nowIso(now) })
    .where(by, '=', value)
    .where('revoked_at', 'is', null)
    .execute();
}

/** Ends a grant and every token it issued (a replayed code or refresh token, a revocation). */
async function revokeGrant(trx: Executor, g: OAuthGrantsTable, reason: string, by: string | null, now: Date): Promise<void> {
  await trx
    .updateTable('oauth_grants')
    .set({ revoked_at: nowIso(now), revoked_reason: reason })
    .where('id', '=', g.id)
    .where('revoked_at', 'is', null)
    .execute();
  await revokeTokens(trx, 'grant_id', g.id, now);
  await appendAudit(trx, g.workspace_id, { principalId: by, action: 'oauth.grant.revoked', detail: { grant: g.id, client: g.client_id, reason } }, now);
}

/**
 * Ends every OAuth connection of a person in a workspace (removal or leaving, src/core/members.ts):
 * membership is re-read at every use, but a person invited back must not find old tokens alive.
 */
export async function revokePersonsGrants(trx: Executor, workspaceId: string, principalId: string, reason: string, by: string, now: Date): Promise<void> {
  const grants = await liveGrantsOf(trx, workspaceId, principalId).execute();
  for (const g of grants) await revokeGrant(trx, g, reason, by, now);
}

/** The person's grants in a workspace that were not revoked (whether they still hold is grantProblem's question). */
function liveGrantsOf(db: Executor, workspaceId: string, principalId: string) {
  return db
    .selectFrom('oauth_grants')
    .selectAll()
    .where('workspace_id', '=', workspaceId)
    .where('principal_id', '=', principalId)
    .where('revoked_at', 'is', null);
}

/** The single-use credentials (a code, a refresh token) and the column holding their hash. */
const SINGLE_USE = { oauth_codes: 'code_hash', oauth_tokens: 'token_hash' } as const;

/**
 * Spends a single-use credential, decided by the database: of two concurrent uses only one
 * marks it. Whether this use spent it: when it was spent already, the grant dies here; the
 * caller returns instead of throwing, so the revocation is committed before the error is answered.
 */
async function firstUse(trx: Executor, table: keyof typeof SINGLE_USE, hash: string, g: OAuthGrantsTable, reason: string, now: Date): Promise<boolean> {
  const spent = await trx
    .updateTable(table)
    .set({ used_at: nowIso(now) })
    .where(sql.ref(SINGLE_USE[table]), '=', hash)
    .where('used_at', 'is', null)
    .executeTakeFirst();
  if (Number(spent.numUpdatedRows) > 0) return true;
  await revokeGrant(trx, g, reason, null, now);
  return false;
}

/**
 * The grant a credential was issued under, or null when it was issued to another client (the
 * grant exists: a credential's row goes with its grant's).
 */
async function clientGrant(db: Executor, grantId: string, client: ClientRecord): Promise<OAuthGrantsTable | null> {
  const g = await db.selectFrom('oauth_grants').selectAll().where('id', '=', grantId).executeTakeFirstOrThrow();
  return g.client_id === client.id ? g : null;
}

/** What both token grants end with: the resource checked, the grant still holding, then new tokens. */
async function issueIfHolds(
  ctx: CoreContext,
  trx: Executor,
  g: OAuthGrantsTable,
  resource: string | undefined,
  now: Date,
  how: 'authorization_code' | 'refresh_token',
  withRefresh: boolean,
): Promise<TokenResponse> {
  checkResource(ctx, g, resource);
  const problem = await grantProblem(trx, g);
  if (problem) throw invalidGrant(`The authorization no longer holds: ${problem}`);
  return issue(ctx, trx, g, now, how, withRefresh);
}

/** A fresh access and refresh token for a grant. */
async function issue(
  ctx: CoreContext,
  trx: Executor,
  g: OAuthGrantsTable,
  now: Date,
  how: 'authorization_code' | 'refresh_token',
  withRefresh: boolean,
): Promise<TokenResponse> {
  const access = newSecret('oa_');
  const refresh = newSecret('oar_');
  const { accessTokenTtlS, refreshTokenTtlS } = ctx.config.oauth;
  const row = (kind: 'access' | 'refresh', secret: string, ttlS: number) => ({
    id: `ot_${newSecret('').slice(0, 26)}`,
    grant_id: g.id,
    kind,
    token_hash: hashSecret(secret),
    expires_at: new Date(now.getTime() + ttlS * 1000).toISOString(),
    created_at: nowIso(now),
    used_at: null,
    revoked_at: null,
  });
  await trx
    .insertInto('oauth_tokens')
    .values(withRefresh ? [row('access', access, accessTokenTtlS), row('refresh', refresh, refreshTokenTtlS)] : [row('access', access, accessTokenTtlS)])
    .execute();
  await appendAudit(
    trx,
    g.workspace_id,
    { principalId: g.principal_id, action: 'oauth.token.issued', detail: { grant: g.id, client: g.client_id, grant_type: how } },
    now,
  );
  return { access_token: access, token_type: 'Bearer', expires_in: accessTokenTtlS, ...(withRefresh ? { refresh_token: refresh } : {}), scope: g.scope };
}

/** `resource` on a token request, when sent, must be the one the person authorized (RFC 8707 §2.2). */
function checkResource(ctx: CoreContext, g: OAuthGrantsTable, resource: string | undefined): void {
  if (resource === undefined) return;
  if (!parseMcpResource(ctx.config.publicUrl, resource))
    throw invalidTarget(`resource must be ${ctx.config.publicUrl}/mcp or ${ctx.config.publicUrl}/w/<workspace>/mcp`);
  if (resource !== g.resource) throw invalidTarget(`resource must be the one authorized: ${g.resource}`);
}

export interface CodeExchange {
  code: string | undefined;
  redirectUri: string | undefined;
  codeVerifier: string | undefined;
  resource: string | undefined;
}

/** grant_type=authorization_code: single use, short-lived, PKCE verified; a replay ends what the code issued. */
export async function exchangeCode(ctx: CoreContext, client: ClientRecord, x: CodeExchange): Promise<TokenResponse> {
  if (!x.code) throw new ServiceError(400, 'invalid_request', 'code is required');
  if (!x.codeVerifier) throw new ServiceError(400, 'invalid_request', 'code_verifier is required (PKCE)');
  if (!VERIFIER_RE.test(x.codeVerifier)) throw new ServiceError(400, 'invalid_request', 'code_verifier must be 43 to 128 unreserved characters');
  const db = ctx.store.db;
  const found = await db.selectFrom('oauth_codes').selectAll().where('code_hash', '=', hashSecret(x.code)).executeTakeFirst();
  if (!found) throw invalidGrant('The code is invalid or expired');
  const grant = await clientGrant(db, found.grant_id, client);
  if (!grant) throw invalidGrant('The code was issued to another client');
  const now = new Date();
  const outcome = await inTransaction(ctx.store, grant.workspace_id, async (trx) => {
    if (!(await firstUse(trx, 'oauth_codes', found.code_hash, grant, 'authorization code replayed', now))) return 'replayed' as const;
    if (Date.parse(found.expires_at) <= now.getTime()) throw invalidGrant('The code expired; start the authorization again');
    // RFC 6749 §4.1.3: required (and equal) when the authorization request named it; else, if sent, the one used.
    if (found.redirect_uri_named ? x.redirectUri !== found.redirect_uri : x.redirectUri !== undefined && x.redirectUri !== found.redirect_uri) {
      throw invalidGrant('redirect_uri must be the one of the authorization request');
    }
    if (!pkceMatches(x.codeVerifier!, found.code_challenge)) throw invalidGrant('code_verifier does not match the code_challenge');
    return issueIfHolds(ctx, trx, grant, x.resource, now, 'authorization_code', allowsRefresh(client));
  });
  if (outcome === 'replayed') throw invalidGrant('The code was already used; every token it issued is now revoked');
  return outcome;
}

/** grant_type=refresh_token: rotated on use; presenting a rotated one again revokes the whole grant. */
export async function refreshTokens(
  ctx: CoreContext,
  client: ClientRecord,
  x: { refreshToken: string | undefined; resource: string | undefined; scope: string | undefined },
): Promise<TokenResponse> {
  if (!allowsRefresh(client)) throw new ServiceError(400, 'unauthorized_client', 'This client did not register the refresh_token grant type');
  if (!x.refreshToken) throw new ServiceError(400, 'invalid_request', 'refresh_token is required');
  const db = ctx.store.db;
  const token = await db
    .selectFrom('oauth_tokens')
    .selectAll()
    .where('token_hash', '=', hashSecret(x.refreshToken))
    .where('kind', '=', 'refresh')
    .executeTakeFirst();
  if (!token) throw invalidGrant('The refresh token is invalid, expired or revoked');
  const grant = await clientGrant(db, token.grant_id, client);
  if (!grant) throw invalidGrant('The refresh token was issued to another client');
  if (x.scope !== undefined && x.scope.split(' ').some((s) => s && s !== grant.scope))
    throw new ServiceError(400, 'invalid_scope', `The only scope is ${grant.scope}`);
  const now = new Date();
  const outcome = await inTransaction(ctx.store, grant.workspace_id, async (trx) => {
    if (token.revoked_at || Date.parse(token.expires_at) <= now.getTime()) throw invalidGrant('The refresh token is invalid, expired or revoked');
    if (!(await firstUse(trx, 'oauth_tokens', token.token_hash, grant, 'rotated refresh token reused', now))) return 'reused' as const;
    return issueIfHolds(ctx, trx, grant, x.resource, now, 'refresh_token', true);
  });
  if (outcome === 'reused') throw invalidGrant('The refresh token was already used; the authorization is revoked, sign in again');
  return outcome;
}

/**
 * RFC 7009: revokes an access or refresh token of this client. A refresh token takes its whole
 * grant with it (§2.1 allows it, and a client that drops its refresh token means to disconnect);
 * an unknown token, or another client's, is answered the same (200) and changes nothing.
 */
export async function revokeToken(ctx: CoreContext, client: ClientRecord, secret: string | undefined): Promise<void> {
  if (!secret) throw new ServiceError(400, 'invalid_request', 'token is required');
  const db = ctx.store.db;
  const token = await db.selectFrom('oauth_tokens').selectAll().where('token_hash', '=', hashSecret(secret)).executeTakeFirst();
  if (!token) return;
  const grant = await clientGrant(db, token.grant_id, client);
  if (!grant) return;
  const now = new Date();
  await inTransaction(ctx.store, grant.workspace_id, async (trx) => {
    if (token.kind === 'refresh') return revokeGrant(trx, grant, 'refresh token revoked by the client', null, now);
    await revokeTokens(trx, 'id', token.id, now);
    await appendAudit(trx, grant.workspace_id, { principalId: null, action: 'oauth.token.revoked', detail: { grant: grant.id, client: client.id } }, now);
  });
}

/** How often a token's use is recorded (last use and an audit entry): at most once a minute. */
const USE_RESOLUTION_MS = 60_000;

/**
 * An `oa_` access token on /mcp or /w/:slug/mcp, as the person who consented (spec §5 code O):
 * their role now (never more), in the consented workspace only. Bound to `/mcp` it also works on
 * `/w/<its workspace>/mcp`; bound to `/w/<slug>/mcp` only there. One message for every dead token.
 */
export async function resolveAccessToken(ctx: CoreContext, secret: string, pinnedSlug: string | undefined): Promise<Principal> {
  const dead = () => unauthorized('The OAuth access token is invalid, expired or revoked', 'invalid_token');
  const db = ctx.store.db;
  const t = await db
    .selectFrom('oauth_tokens')
    .innerJoin('oauth_grants', 'oauth_grants.id', 'oauth_tokens.grant_id')
    .innerJoin('workspaces', 'workspaces.id', 'oauth_grants.workspace_id')
    .innerJoin('principals', 'principals.id', 'oauth_grants.principal_id')
    .select(['oauth_tokens.id as tokenId', 'oauth_tokens.kind', 'oauth_tokens.expires_at', 'oauth_tokens.revoked_at', 'oauth_tokens.used_at'])
    .select([
      'oauth_grants.id as grantId',
      'oauth_grants.client_id',
      'oauth_grants.resource',
      'oauth_grants.epoch',
      'oauth_grants.revoked_at as grantRevokedAt',
    ])
    .select(['workspaces.id as workspaceId', 'workspaces.slug', 'workspaces.token_epoch'])
    .select(['principals.id as principalId', 'principals.name', 'principals.deleted_at'])
    .where('oauth_tokens.token_hash', '=', hashSecret(secret))
    .executeTakeFirst();
  const now = Date.now();
  if (!t || t.kind !== 'access' || t.revoked_at || t.grantRevokedAt || t.deleted_at || t.epoch !== t.token_epoch) throw dead();
  if (Date.parse(t.expires_at) <= now) throw dead();
  const bound = parseMcpResource(ctx.config.publicUrl, t.resource);
  const fits = bound !== null && (bound.slug === null ? pinnedSlug === undefined || pinnedSlug === t.slug : pinnedSlug === bound.slug && bound.slug === t.slug);
  if (!fits) throw unauthorized(`This token is not valid for ${pinnedSlug === undefined ? '/mcp' : `/w/${pinnedSlug}/mcp`}`, 'invalid_token');
  const role = await currentRole(db, t.workspaceId, t.principalId);
  if (!role) throw dead();
  if (!t.used_at || now - Date.parse(t.used_at) > USE_RESOLUTION_MS) {
    const at = new Date(now);
    await inTransaction(ctx.store, t.workspaceId, async (trx) => {
      await trx
        .updateTable('oauth_tokens')
        .set({ used_at: nowIso(at) })
        .where('id', '=', t.tokenId)
        .execute();
      await appendAudit(trx, t.workspaceId, { principalId: t.principalId, action: 'oauth.token.used', detail: { grant: t.grantId, client: t.client_id } }, at);
    });
  }
  return {
    id: t.principalId,
    kind: 'human',
    name: t.name,
    workspaceId: t.workspaceId,
    workspaceSlug: t.slug,
    role,
    grants: [],
    agentCeiling: null,
    keyCeiling: null,
    via: 'oauth',
    sessionId: null,
    keyId: null,
    stepUpAt: null,
    elevatedUntil: null,
    createdBy: null,
  };
}

export interface Connection {
  id: string;
  client_id: string;
  client_name: string;
  /** For a client identified by its metadata document URL: that URL's host (else null). */
  client_from: string | null;
  redirect_hosts: string[];
  resource: string;
  created_at: string;
  last_used_at: string | null;
}

/** The applications the person connected to this workspace and has not revoked. */
export async function listConnections(ctx: CoreContext, p: Principal): Promise<Connection[]> {
  const rows = await ctx.store.db
    .selectFrom('oauth_grants')
    .innerJoin('oauth_clients', 'oauth_clients.id', 'oauth_grants.client_id')
    .select([
      'oauth_grants.id',
      'oauth_grants.client_id',
      'oauth_grants.resource',
      'oauth_grants.created_at',
      'oauth_clients.name',
      'oauth_clients.redirect_uris',
    ])
    .select((eb) =>
      eb
        .selectFrom('oauth_tokens')
        .select((e) => e.fn.max('oauth_tokens.used_at').as('u'))
        .whereRef('oauth_tokens.grant_id', '=', 'oauth_grants.id')
        .as('last_used_at'),
    )
    .where('oauth_grants.principal_id', '=', p.id)
    .where('oauth_grants.workspace_id', '=', p.workspaceId)
    .where('oauth_grants.revoked_at', 'is', null)
    .orderBy('oauth_grants.created_at', 'desc')
    .execute();
  return rows.map((r) => ({
    id: r.id,
    client_id: r.client_id,
    client_name: r.name || r.client_id,
    client_from: metadataDocumentHost(r.client_id),
    redirect_hosts: [...new Set((JSON.parse(r.redirect_uris) as string[]).map((u) => new URL(u).host))],
    resource: r.resource,
    created_at: r.created_at,
    last_used_at: (r.last_used_at as string | null | undefined) ?? null,
  }));
}

/** Revokes one of the person's own connections (404 for anything else). */
export async function revokeConnection(ctx: CoreContext, p: Principal, id: string): Promise<void> {
  const g = await liveGrantsOf(ctx.store.db, p.workspaceId, p.id).where('id', '=', id).executeTakeFirst();
  if (!g) throw new ServiceError(404, 'not_found', `Connection ${id} not found`);
  await inTransaction(ctx.store, p.workspaceId, (trx) => revokeGrant(trx, g, 'revoked by the person', p.id, new Date()));
}
