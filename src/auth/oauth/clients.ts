import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { nowIso } from '../../core/ids.js';
import { ServiceError } from '../../errors/index.js';
import type { OAuthClientsTable } from '../../store/schema.js';
import { hashSecret, newSecret, safeEqual } from '../secrets.js';
import { ClientName, MAX_REDIRECT_URIS } from './client-metadata.js';
import { isMetadataDocumentId, MetadataDocumentError, resolveMetadataDocumentClient } from './metadata-document.js';
import { redirectUriProblem } from './redirect.js';

/**
 * OAuth clients (RFC 7591 dynamic registration). Public clients (`token_endpoint_auth_method:
 * none`, what MCP clients register as) prove nothing but their id and PKCE; confidential ones
 * get a secret, shown once and stored hashed.
 */

/** A registration no person consented to within a day is forgotten (anyone may register). */
export const UNUSED_CLIENT_TTL_MS = 24 * 60 * 60 * 1000;
const URL_MAX = 2000;

export const AUTH_METHODS = ['none', 'client_secret_basic', 'client_secret_post'] as const;
export type AuthMethod = (typeof AUTH_METHODS)[number];
const GRANT_TYPES = ['authorization_code', 'refresh_token'] as const;

/** What a registration may say; other RFC 7591 fields are ignored, as §2 allows. */
const Metadata = z.object({
  redirect_uris: z.array(z.string().max(URL_MAX)).min(1).max(MAX_REDIRECT_URIS),
  token_endpoint_auth_method: z.enum(AUTH_METHODS).default('client_secret_basic'),
  grant_types: z.array(z.enum(GRANT_TYPES)).min(1).default(['authorization_code', 'refresh_token']),
  response_types: z.array(z.literal('code')).min(1).default(['code']),
  client_name: ClientName,
  client_uri: z.string().max(URL_MAX).optional(),
  scope: z.string().max(200).optional(),
  software_id: z.string().max(200).optional(),
  software_version: z.string().max(100).optional(),
});

export type ClientRecord = OAuthClientsTable;
export { MAX_REDIRECT_URIS };

const metadataError = (message: string) => new ServiceError(400, 'invalid_client_metadata', message);

/** RFC 7591 §3.2.1: the registered client, with its secret when it has one (shown this once). */
export async function registerClient(ctx: CoreContext, body: unknown): Promise<Record<string, unknown>> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw metadataError('The body must be a JSON object of client metadata');
  const raw = body as Record<string, unknown>;
  if (raw.redirect_uris === undefined) throw new ServiceError(400, 'invalid_redirect_uri', 'redirect_uris is required: at least one redirect URI');
  const parsed = Metadata.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const where = issue.path.join('.') || 'metadata';
    const code = issue.path[0] === 'redirect_uris' ? 'invalid_redirect_uri' : 'invalid_client_metadata';
    throw new ServiceError(400, code, `${where}: ${issue.message}`);
  }
  const m = parsed.data;
  for (const uri of m.redirect_uris) {
    const problem = redirectUriProblem(uri, ctx.config.oauth.redirectAllowlist);
    if (problem) throw new ServiceError(400, 'invalid_redirect_uri', problem);
  }
  if (!m.grant_types.includes('authorization_code')) throw metadataError('grant_types must include authorization_code');
  for (const field of ['client_uri'] as const) {
    const v = m[field];
    if (v !== undefined && !/^https?:\/\//i.test(v)) throw metadataError(`${field} must be an http(s) URL`);
  }

  const now = new Date();
  await forgetUnusedClients(ctx, now);
  const id = `oc_${newSecret('').slice(0, 32)}`;
  const secret = m.token_endpoint_auth_method === 'none' ? null : newSecret('ocs_');
  const answer: Record<string, unknown> = {
    client_id: id,
    client_id_issued_at: Math.floor(now.getTime() / 1000),
    redirect_uris: m.redirect_uris,
    token_endpoint_auth_method: m.token_endpoint_auth_method,
    grant_types: m.grant_types,
    response_types: m.response_types,
    ...(m.client_name !== undefined ? { client_name: m.client_name } : {}),
    ...(m.client_uri !== undefined ? { client_uri: m.client_uri } : {}),
    ...(m.scope !== undefined ? { scope: m.scope } : {}),
    ...(m.software_id !== undefined ? { software_id: m.software_id } : {}),
    ...(m.software_version !== undefined ? { software_version: m.software_version } : {}),
  };
  await ctx.store.db
    .insertInto('oauth_clients')
    .values({
      id,
      secret_hash: secret ? hashSecret(secret) : null,
      name: m.client_name ?? '',
      redirect_uris: JSON.stringify(m.redirect_uris),
      auth_method: m.token_endpoint_auth_method,
      metadata: JSON.stringify(answer),
      created_at: nowIso(now),
      used_at: null,
    })
    .execute();
  return secret ? { ...answer, client_secret: secret, client_secret_expires_at: 0 } : answer;
}

/** Registrations nobody consented to within a day: anyone may register, so they must not pile up. */
async function forgetUnusedClients(ctx: CoreContext, now: Date): Promise<void> {
  await ctx.store.db
    .deleteFrom('oauth_clients')
    .where('used_at', 'is', null)
    .where('created_at', '<', new Date(now.getTime() - UNUSED_CLIENT_TTL_MS).toISOString())
    .execute();
}

/**
 * A registered client that is still valid (used, or registered within the day), or null. A
 * client_id that is a URL is resolved from its metadata document (metadata-document.ts), every
 * time (from the cache): a refused document throws MetadataDocumentError with the reason.
 */
export async function findClient(ctx: CoreContext, id: string | undefined): Promise<ClientRecord | null> {
  if (id && isMetadataDocumentId(id)) return resolveMetadataDocumentClient(ctx, id);
  if (!id || id.length > 200) return null;
  const row = await ctx.store.db.selectFrom('oauth_clients').selectAll().where('id', '=', id).executeTakeFirst();
  if (!row) return null;
  if (!row.used_at && Date.now() - Date.parse(row.created_at) > UNUSED_CLIENT_TTL_MS) return null;
  return row;
}

export function redirectUrisOf(c: ClientRecord): string[] {
  return JSON.parse(c.redirect_uris) as string[];
}

/** The client's display name: its registered name, else its id. */
export function clientName(c: ClientRecord): string {
  return c.name || c.id;
}

/** How a token or revocation request presented its client (RFC 6749 §2.3.1). */
export interface ClientCredentials {
  /** From `Authorization: Basic` (form-urlencoded id and secret). */
  basic?: { id: string; secret: string } | undefined;
  /** `client_id` and `client_secret` of the body. */
  bodyId?: string | undefined;
  bodySecret?: string | undefined;
}

/** Parses `Authorization: Basic …` into a client id and secret; undefined when absent or not Basic. */
export function basicCredentials(header: string | undefined): { id: string; secret: string } | undefined | 'malformed' {
  if (!header) return undefined;
  const m = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header);
  if (!m) return /^Basic\b/i.test(header) ? 'malformed' : undefined;
  const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) return 'malformed';
  try {
    return { id: decodeURIComponent(decoded.slice(0, colon).replace(/\+/g, ' ')), secret: decodeURIComponent(decoded.slice(colon + 1).replace(/\+/g, ' ')) };
  } catch {
    return 'malformed';
  }
}

const invalidClient = (message: string) => new ServiceError(401, 'invalid_client', message);

/**
 * The client a token or revocation request is from, authenticated by the method it registered:
 * `none` by its id alone (PKCE proves the rest), the secret ones by their secret.
 */
export async function authenticateClient(ctx: CoreContext, c: ClientCredentials): Promise<ClientRecord> {
  if (c.basic && c.bodyId !== undefined && c.bodyId !== c.basic.id) throw invalidClient('client_id in the body differs from the Basic credentials');
  const id = c.basic?.id ?? c.bodyId;
  if (!id) throw invalidClient('Send client_id (or Basic client credentials)');
  let client: ClientRecord | null;
  try {
    client = await findClient(ctx, id);
  } catch (e) {
    if (e instanceof MetadataDocumentError) throw invalidClient(`The client's metadata document was refused: ${e.message}`);
    throw e;
  }
  if (!client) throw invalidClient('Unknown client_id');
  if (client.auth_method === 'none') {
    if (c.basic || c.bodySecret !== undefined) throw invalidClient('This client is public (token_endpoint_auth_method none): send no secret');
    return client;
  }
  const secret = client.auth_method === 'client_secret_basic' ? c.basic?.secret : c.bodySecret;
  if (secret === undefined) throw invalidClient(`This client authenticates with ${client.auth_method}`);
  if (!client.secret_hash || !safeEqual(hashSecret(secret), client.secret_hash)) throw invalidClient('Wrong client secret');
  return client;
}
