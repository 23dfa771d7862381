import { createHash } from 'node:crypto';
import type { CoreContext } from '../../core/context.js';
import { appendAudit } from '../../core/audit.js';
import { nowIso } from '../../core/ids.js';
import { ServiceError } from '../../errors/index.js';
import type { Principal } from '../../policy/principal.js';
import { inTransaction } from '../../store/tx.js';
import { hashSecret, newSecret } from '../secrets.js';
import { type ClientRecord, findClient, redirectUrisOf } from './clients.js';
import { isMetadataDocumentId, MetadataDocumentError } from './metadata-document.js';
import { type McpResource, parseMcpResource } from './resource.js';

/**
 * The authorization endpoint's logic (RFC 6749 §4.1 with OAuth 2.1's rules): checking a
 * request, and the consent that turns it into a code. The face renders the page.
 */

/** The one scope there is: using the MCP endpoint as the consenting person. */
export const OAUTH_SCOPE = 'mcp';
/** Codes are exchanged at once by the client that asked; a minute is plenty. */
export const CODE_TTL_MS = 60_000;
/** RFC 7636 §4.1–4.2: a verifier is 43–128 unreserved characters; its S256 challenge is 43 base64url. */
const VERIFIER_RE = /^[A-Za-z0-9._~-]{43,128}$/;
const CHALLENGE_RE = /^[A-Za-z0-9_-]{43}$/;

export interface AuthorizeRequest {
  client: ClientRecord;
  redirectUri: string;
  /** The request named redirect_uri (else the client's only one was used). */
  redirectUriNamed: boolean;
  state: string | undefined;
  codeChallenge: string;
  resource: McpResource;
  scope: string;
}

/** An error the client hears about through its redirect URI (RFC 6749 §4.1.2.1). */
export interface RedirectError {
  redirect: string;
}

/** The query of an authorization request, one value per parameter (a repeated one is refused). */
export type AuthorizeParams = Record<string, string | undefined>;

/**
 * Checks an authorization request. Problems with the client or its redirect URI throw (the face
 * shows a page: never redirect to a URI that is not known to be the client's); the rest go back
 * to the client as `error=` on its redirect URI.
 */
export async function checkAuthorizeRequest(ctx: CoreContext, raw: Record<string, unknown>): Promise<AuthorizeRequest | RedirectError> {
  const params: AuthorizeParams = {};
  for (const [k, v] of Object.entries(raw)) {
    if (Array.isArray(v)) throw new ServiceError(400, 'invalid_request', `The parameter ${k} is repeated`);
    if (typeof v === 'string') params[k] = v;
  }
  let client: ClientRecord | null;
  try {
    client = await findClient(ctx, params.client_id);
  } catch (e) {
    if (!(e instanceof MetadataDocumentError)) throw e;
    throw new ServiceError(400, 'invalid_request', `This application's client metadata document (${params.client_id}) was refused: ${e.message}`);
  }
  if (!client)
    throw new ServiceError(
      400,
      'invalid_request',
      'Unknown client_id: the application is not registered here (or its registration expired); start the connection again from the application',
    );
  const registered = redirectUrisOf(client);
  const redirectUri = params.redirect_uri ?? (registered.length === 1 ? registered[0] : undefined);
  if (redirectUri === undefined) throw new ServiceError(400, 'invalid_request', 'redirect_uri is required: this application registered more than one');
  if (!registered.includes(redirectUri)) throw new ServiceError(400, 'invalid_request', 'redirect_uri is not one this application registered');

  const state = params.state;
  const back = (error: string, description: string): RedirectError => ({
    redirect: redirectWith(ctx, redirectUri, { error, error_description: description, state }),
  });
  if (state !== undefined && state.length > 2000) return back('invalid_request', 'state is over 2000 characters');
  if (params.response_type !== 'code') return back('unsupported_response_type', 'response_type must be code');
  if (params.code_challenge === undefined) return back('invalid_request', 'PKCE is required: send code_challenge with code_challenge_method=S256');
  if (params.code_challenge_method !== 'S256') return back('invalid_request', 'code_challenge_method must be S256 (plain is not accepted)');
  if (!CHALLENGE_RE.test(params.code_challenge)) return back('invalid_request', 'code_challenge must be the base64url SHA-256 of the verifier (43 characters)');
  const resource = parseMcpResource(ctx.config.publicUrl, params.resource);
  if (!resource) {
    return back('invalid_target', `resource is required and must be ${ctx.config.publicUrl}/mcp or ${ctx.config.publicUrl}/w/<workspace>/mcp`);
  }
  const scopes = (params.scope ?? OAUTH_SCOPE).split(' ').filter(Boolean);
  if (scopes.some((s) => s !== OAUTH_SCOPE)) return back('invalid_scope', `The only scope is ${OAUTH_SCOPE}`);
  return {
    client,
    redirectUri,
    redirectUriNamed: params.redirect_uri !== undefined,
    state,
    codeChallenge: params.code_challenge,
    resource,
    scope: OAUTH_SCOPE,
  };
}

/** The client's redirect URI with the answer's parameters added (and `iss`, RFC 9207). */
export function redirectWith(ctx: CoreContext, redirectUri: string, params: Record<string, string | undefined>): string {
  const u = new URL(redirectUri);
  for (const [k, v] of Object.entries(params)) if (v !== undefined) u.searchParams.set(k, v);
  u.searchParams.set('iss', ctx.config.publicUrl);
  return u.href;
}

/** Spec §5 rule 10: only owners and editors may connect an application. */
export function mayConsent(p: Principal): boolean {
  return p.kind === 'human' && (p.role === 'owner' || p.role === 'editor');
}

/**
 * The person approved: one grant (this client, person, workspace, resource) and a single-use
 * code for it, in one transaction with its audit entry. Answers where to send the browser.
 */
export async function approve(ctx: CoreContext, p: Principal, req: AuthorizeRequest): Promise<string> {
  if (!mayConsent(p)) throw new ServiceError(403, 'forbidden', 'Only owners and editors can connect applications to a workspace');
  const code = newSecret('oac_');
  const now = new Date();
  const grantId = `og_${newSecret('').slice(0, 26)}`;
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    if (isMetadataDocumentId(req.client.id)) {
      // A metadata-document client has no registration: its row (which grants reference) is
      // written at consent, refreshed from the document each time.
      const c = req.client;
      const row = { name: c.name, redirect_uris: c.redirect_uris, auth_method: c.auth_method, metadata: c.metadata, used_at: nowIso(now) };
      await trx
        .insertInto('oauth_clients')
        .values({ id: c.id, secret_hash: null, created_at: nowIso(now), ...row })
        .onConflict((oc) => oc.column('id').doUpdateSet(row))
        .execute();
    }
    const ws = await trx.selectFrom('workspaces').select('token_epoch').where('id', '=', p.workspaceId).executeTakeFirstOrThrow();
    await trx
      .insertInto('oauth_grants')
      .values({
        id: grantId,
        client_id: req.client.id,
        principal_id: p.id,
        workspace_id: p.workspaceId,
        resource: req.resource.url,
        scope: req.scope,
        epoch: ws.token_epoch,
        created_at: nowIso(now),
        revoked_at: null,
        revoked_reason: null,
      })
      .execute();
    await trx
      .insertInto('oauth_codes')
      .values({
        code_hash: hashSecret(code),
        grant_id: grantId,
        redirect_uri: req.redirectUri,
        redirect_uri_named: req.redirectUriNamed ? 1 : 0,
        code_challenge: req.codeChallenge,
        expires_at: new Date(now.getTime() + CODE_TTL_MS).toISOString(),
        used_at: null,
      })
      .execute();
    await trx
      .updateTable('oauth_clients')
      .set({ used_at: nowIso(now) })
      .where('id', '=', req.client.id)
      .where('used_at', 'is', null)
      .execute();
    await appendAudit(
      trx,
      p.workspaceId,
      {
        principalId: p.id,
        action: 'oauth.consent',
        detail: { grant: grantId, client: req.client.id, client_name: req.client.name, resource: req.resource.url },
      },
      now,
    );
  });
  return redirectWith(ctx, req.redirectUri, { code, state: req.state });
}

/** The person said no: the client hears `access_denied`. */
export function deny(ctx: CoreContext, req: AuthorizeRequest): string {
  return redirectWith(ctx, req.redirectUri, { error: 'access_denied', error_description: 'The person declined the connection', state: req.state });
}

/** RFC 7636 §4.6: BASE64URL(SHA256(verifier)) equals the challenge. */
export function pkceMatches(verifier: string, challenge: string): boolean {
  if (!VERIFIER_RE.test(verifier)) return false;
  return createHash('sha256').update(verifier).digest('base64url') === challenge;
}

export { VERIFIER_RE };
