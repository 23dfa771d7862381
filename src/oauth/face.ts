import fastifyFormbody from '@fastify/formbody';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AUTH_METHODS, authenticateClient, basicCredentials, clientName, registerClient, type ClientCredentials } from '../auth/oauth/clients.js';
import { approve, checkAuthorizeRequest, deny, mayConsent, OAUTH_SCOPE, type AuthorizeRequest } from '../auth/oauth/consent.js';
import { metadataDocumentHost } from '../auth/oauth/metadata-document.js';
import { mcpResourceForPath, mcpResourceUrl } from '../auth/oauth/resource.js';
import { exchangeCode, refreshTokens, revokeToken } from '../auth/oauth/tokens.js';
import { describeCaller, currentWorkspaceName } from '../core/identity.js';
import { workspacesOf } from '../core/workspaces.js';
import { CSRF_COOKIE } from '../auth/sessions.js';
import { ServiceError } from '../core/errors.js';
import { toServiceError } from '../http/shared/errors.js';
import { messageBody, sendPage, setPageHeaders } from '../http/shared/html.js';
import { resolvePageSession } from '../http/shared/page-session.js';
import type { Principal } from '../policy/principal.js';
import { consentBody } from './pages.js';

/** OAuth request bodies are a few parameters; anything larger is not one. */
const OAUTH_BODY_LIMIT = 64 * 1024;
/** The parameters of an authorization request, carried through the consent form. */
const AUTHORIZE_PARAMS = ['response_type', 'client_id', 'redirect_uri', 'code_challenge', 'code_challenge_method', 'state', 'resource', 'scope'] as const;

/**
 * The OAuth 2.1 face (spec §4 "OAuth 2.1", issue 14): discovery documents, dynamic client
 * registration, the authorization endpoint with its consent page, the token and revocation
 * endpoints. Registered at the root by app.ts: the paths are the spec's and share no prefix.
 * Every decision is made in src/auth/oauth/; this face parses, renders, and answers errors in
 * OAuth's own body (`{error, error_description}`), or as a page on the browser's routes. The
 * root's rate limits cover registration (10/min per IP) and the token endpoint (30/min per IP).
 */
export async function oauthFace(face: FastifyInstance): Promise<void> {
  const ctx = face.ctx;
  // Read per request: a server started on port 0 learns its PUBLIC_URL only once it listens.
  const url = () => ctx.config.publicUrl;
  await face.register(fastifyFormbody, { bodyLimit: OAUTH_BODY_LIMIT });

  face.setErrorHandler((err, req, reply) => {
    const e = toServiceError(err, req);
    if (isBrowserRoute(req) && wantsHtml(req)) return errorPage(reply, e);
    return oauthError(reply, e, req);
  });

  const publicRoute = { config: { auth: 'public' as const }, schema: { hide: true } };

  // RFC 8414 §3 and its path-suffixed form; the OpenID discovery path answers the same (clients try both).
  const issuerPath = () => new URL(url()).pathname.replace(/^\/+|\/+$/g, '');
  face.get('/.well-known/oauth-authorization-server', publicRoute, async (_req, reply) => sendJson(reply, authorizationServerMetadata(url())));
  face.get('/.well-known/openid-configuration', publicRoute, async (_req, reply) => sendJson(reply, authorizationServerMetadata(url())));
  face.get('/.well-known/oauth-authorization-server/*', publicRoute, async (req, reply) => {
    const suffix = (req.params as { '*': string })['*'];
    const known = suffix === issuerPath() || mcpResourceForPath(url(), `/${stripPrefix(suffix, issuerPath())}`) !== null;
    if (!known) throw new ServiceError(404, 'not_found', 'No authorization server metadata for this path');
    return sendJson(reply, authorizationServerMetadata(url()));
  });

  // RFC 9728: the protected resource's metadata, for /mcp and, path-aware, /w/<slug>/mcp.
  face.get('/.well-known/oauth-protected-resource', publicRoute, async (_req, reply) => sendJson(reply, resourceMetadata(url(), mcpResourceUrl(url(), null))));
  face.get('/.well-known/oauth-protected-resource/*', publicRoute, async (req, reply) => {
    const suffix = (req.params as { '*': string })['*'];
    const resource = mcpResourceForPath(url(), `/${stripPrefix(suffix, issuerPath())}`);
    if (!resource) throw new ServiceError(404, 'not_found', 'Protected resource metadata exists only for /mcp and /w/<workspace>/mcp');
    return sendJson(reply, resourceMetadata(url(), resource.url));
  });

  face.post('/oauth/register', { ...publicRoute, bodyLimit: OAUTH_BODY_LIMIT }, async (req, reply) => {
    if (!isJson(req)) throw new ServiceError(415, 'unsupported_media_type', 'Register with a JSON body (Content-Type: application/json)');
    return sendJson(reply.code(201), await registerClient(ctx, req.body));
  });

  face.get('/oauth/authorize', publicRoute, async (req, reply) => {
    const checked = await checkAuthorizeRequest(ctx, req.query as Record<string, unknown>);
    if ('redirect' in checked) return reply.redirect(checked.redirect, 302);
    // /mcp: the person picks the workspace on the consent page (default: their current one).
    const who = await resolvePageSession(ctx, req, { unsafe: false, workspace: checked.resource.slug ?? stringField(req.query, 'workspace') });
    if (!who.ok) {
      if (who.error.code === 'workspace_not_found') return notMember(req, reply, checked);
      // Signed out (or mid sign-in): the login page brings the browser back here (spec: the /login consent fallback).
      const next = req.url;
      if (!wantsHtml(req) && wantsJson(req)) {
        throw new ServiceError(401, 'unauthorized', `Sign in first: ${url()}/login?next=${encodeURIComponent(next)}`);
      }
      return reply.redirect(`/login?next=${encodeURIComponent(next)}`, 302);
    }
    if (!mayConsent(who.p) && checked.resource.slug === null && stringField(req.query, 'workspace') === undefined) {
      // Their current workspace is one they only view: offer the connection for one they may connect.
      const other = (await workspacesOf(ctx.store.db, who.p.id)).find((w) => w.role === 'owner' || w.role === 'editor');
      const again = other ? await resolvePageSession(ctx, req, { unsafe: false, workspace: other.id }) : undefined;
      if (again?.ok) return consent(req, reply, checked, again.p);
    }
    return consent(req, reply, checked, who.p);
  });

  face.post('/oauth/authorize', { ...publicRoute, bodyLimit: OAUTH_BODY_LIMIT }, async (req, reply) => {
    const body = (req.body ?? {}) as Record<string, unknown>;
    const params: Record<string, unknown> = {};
    for (const k of AUTHORIZE_PARAMS) if (body[k] !== undefined) params[k] = body[k];
    const checked = await checkAuthorizeRequest(ctx, params);
    if ('redirect' in checked) return answerRedirect(req, reply, checked.redirect);
    const csrf = typeof body.csrf_token === 'string' ? body.csrf_token : '';
    const who = await resolvePageSession(ctx, req, { unsafe: true, csrf, workspace: checked.resource.slug ?? stringField(body, 'workspace') });
    if (!who.ok) {
      if (who.error.code === 'csrf_failed')
        throw new ServiceError(403, 'csrf_failed', 'This consent form expired or did not come from this site; start the connection again from the application');
      if (who.error.code === 'workspace_not_found') return answerRedirect(req, reply, deny(ctx, checked));
      throw new ServiceError(401, 'unauthorized', 'Your sign-in ended; start the connection again from the application');
    }
    if (body.decision === 'deny') return answerRedirect(req, reply, deny(ctx, checked));
    if (body.decision !== 'approve') throw new ServiceError(400, 'invalid_request', 'decision must be approve or deny');
    if (!mayConsent(who.p)) {
      throw new ServiceError(
        403,
        'forbidden',
        'Only owners and editors can connect applications to a workspace; ask an owner to connect it, or to make you an editor',
      );
    }
    return answerRedirect(req, reply, await approve(ctx, who.p, checked));
  });

  face.post('/oauth/token', { ...publicRoute, bodyLimit: OAUTH_BODY_LIMIT }, async (req, reply) => {
    const body = oauthBody(req);
    const client = await authenticateClient(ctx, clientCredentials(req, body));
    const grantType = body.grant_type;
    let answer;
    if (grantType === 'authorization_code') {
      answer = await exchangeCode(ctx, client, { code: body.code, redirectUri: body.redirect_uri, codeVerifier: body.code_verifier, resource: body.resource });
    } else if (grantType === 'refresh_token') {
      answer = await refreshTokens(ctx, client, { refreshToken: body.refresh_token, resource: body.resource, scope: body.scope });
    } else if (grantType === undefined) {
      throw new ServiceError(400, 'invalid_request', 'grant_type is required');
    } else {
      throw new ServiceError(400, 'unsupported_grant_type', 'grant_type must be authorization_code or refresh_token');
    }
    return sendJson(reply.header('cache-control', 'no-store').header('pragma', 'no-cache'), answer);
  });

  face.post('/oauth/revoke', { ...publicRoute, bodyLimit: OAUTH_BODY_LIMIT }, async (req, reply) => {
    const body = oauthBody(req);
    const client = await authenticateClient(ctx, clientCredentials(req, body));
    await revokeToken(ctx, client, body.token);
    return reply.code(200).header('cache-control', 'no-store').send();
  });

  /** The consent page (or its JSON descriptor), or why this person cannot consent. */
  async function consent(req: FastifyRequest, reply: FastifyReply, r: AuthorizeRequest, p: Principal) {
    const me = await describeCaller(ctx, p);
    const view = {
      clientName: clientName(r.client),
      clientId: r.client.id,
      // A metadata-document client: its host is what the person can trust, not the name it gives.
      clientFrom: metadataDocumentHost(r.client.id),
      redirectHost: new URL(r.redirectUri).host,
      workspaceName: await currentWorkspaceName(ctx, p),
      workspaceSlug: p.workspaceSlug,
      resource: r.resource.url,
      role: p.role ?? 'member',
      ceiling: me.ceiling,
      refusal: mayConsent(p)
        ? undefined
        : `You are ${p.role === 'viewer' ? 'a viewer' : 'not an owner or editor'} of this workspace: only owners and editors can connect applications. Ask an owner to connect it, or to make you an editor.`,
      fields: { ...formFields(r), ...(r.resource.slug === null ? { workspace: p.workspaceSlug } : {}) },
      // Only /mcp leaves the workspace to the person; /w/<slug>/mcp names it.
      choices:
        r.resource.slug === null
          ? (await workspacesOf(ctx.store.db, p.id)).map((w) => ({
              slug: w.slug,
              name: w.name,
              role: w.role,
              can_consent: w.role === 'owner' || w.role === 'editor',
            }))
          : [],
      csrf: req.cookies[CSRF_COOKIE] ?? '',
    };
    if (!wantsHtml(req) && wantsJson(req)) {
      return sendJson(reply.header('cache-control', 'no-store'), {
        client: { id: view.clientId, name: view.clientName, redirect_host: view.redirectHost, ...(view.clientFrom ? { from_host: view.clientFrom } : {}) },
        workspace: { id: p.workspaceId, slug: view.workspaceSlug, name: view.workspaceName },
        resource: view.resource,
        scope: r.scope,
        role: view.role,
        ceiling: view.ceiling,
        can_consent: view.refusal === undefined,
        ...(view.refusal ? { reason: view.refusal } : {}),
        abilities: ['read', 'search', 'write', 'propose', 'collab'],
        ...(view.choices.length > 0 ? { workspaces: view.choices } : {}),
        csrf_token: view.csrf,
        answer: { method: 'POST', url: `${url()}/oauth/authorize`, fields: { ...view.fields, csrf_token: view.csrf }, decision: ['approve', 'deny'] },
      });
    }
    // The answer redirects the browser to the client: the page's form-action must allow its origin.
    return sendPage(reply, view.refusal ? 403 : 200, view.refusal ? 'Cannot connect' : `Connect ${view.clientName}`, consentBody(view), [
      formActionSource(r.redirectUri),
    ]);
  }

  /** The person is signed in but not a member of the workspace the resource names. */
  async function notMember(req: FastifyRequest, reply: FastifyReply, r: AuthorizeRequest) {
    const named = r.resource.slug ?? stringField(req.query, 'workspace') ?? '';
    const message = `You are not a member of a workspace ${named}. Connect ${mcpResourceUrl(url(), null)} instead, or ask to be invited.`;
    if (!wantsHtml(req) && wantsJson(req)) throw new ServiceError(404, 'workspace_not_found', message);
    return sendPage(
      reply,
      404,
      'Workspace not found',
      messageBody('Workspace not found', message, [{ href: deny(ctx, r), text: 'Go back to the application' }]),
    );
  }
}

/** RFC 8414 §2 metadata; every URL absolute, from PUBLIC_URL. */
function authorizationServerMetadata(publicUrl: string): Record<string, unknown> {
  return {
    issuer: publicUrl,
    authorization_endpoint: `${publicUrl}/oauth/authorize`,
    token_endpoint: `${publicUrl}/oauth/token`,
    registration_endpoint: `${publicUrl}/oauth/register`,
    revocation_endpoint: `${publicUrl}/oauth/revoke`,
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: ['authorization_code', 'refresh_token'],
    code_challenge_methods_supported: ['S256'],
    token_endpoint_auth_methods_supported: [...AUTH_METHODS],
    revocation_endpoint_auth_methods_supported: [...AUTH_METHODS],
    scopes_supported: [OAUTH_SCOPE],
    authorization_response_iss_parameter_supported: true,
    // A client_id may be the https URL of the client's metadata document (src/auth/oauth/metadata-document.ts).
    client_id_metadata_document_supported: true,
  };
}

/** RFC 9728 §2 metadata of one MCP endpoint. */
function resourceMetadata(publicUrl: string, resource: string): Record<string, unknown> {
  return {
    resource,
    authorization_servers: [publicUrl],
    bearer_methods_supported: ['header'],
    scopes_supported: [OAUTH_SCOPE],
    resource_name: 'Context Vault MCP',
  };
}

/**
 * The CSP source that lets the consent form's answer redirect to the client. Chromium does not
 * accept an IPv6 literal (`http://[::1]:port`) as a source and would block the redirect, so a
 * loopback IPv6 URI gets its scheme as the source; the form itself still posts to this site only.
 */
function formActionSource(redirectUri: string): string {
  const u = new URL(redirectUri);
  return u.hostname.startsWith('[') ? u.protocol : u.origin;
}

function stripPrefix(suffix: string, prefix: string): string {
  return prefix && suffix.startsWith(`${prefix}/`) ? suffix.slice(prefix.length + 1) : suffix;
}

function sendJson(reply: FastifyReply, body: unknown): FastifyReply {
  return reply.type('application/json; charset=utf-8').send(JSON.stringify(body));
}

function isJson(req: FastifyRequest): boolean {
  return /^application\/json\s*(;|$)/i.test(req.headers['content-type'] ?? '');
}

function wantsHtml(req: FastifyRequest): boolean {
  return /\btext\/html\b/i.test(req.headers.accept ?? '');
}

function wantsJson(req: FastifyRequest): boolean {
  return /\bapplication\/json\b/i.test(req.headers.accept ?? '');
}

/** The authorization endpoint's routes answer browsers with pages. */
function isBrowserRoute(req: FastifyRequest): boolean {
  return req.url.split('?')[0] === '/oauth/authorize';
}

/** After the consent: a browser follows a 302; a JSON caller is told where to go. */
function answerRedirect(req: FastifyRequest, reply: FastifyReply, to: string): FastifyReply {
  if (!wantsHtml(req) && wantsJson(req)) return sendJson(reply.header('cache-control', 'no-store'), { redirect_to: to });
  return reply.redirect(to, 302);
}

function stringField(from: unknown, name: string): string | undefined {
  const v = (from as Record<string, unknown> | undefined)?.[name];
  return typeof v === 'string' && v.length > 0 ? v : undefined;
}

function formFields(r: AuthorizeRequest): Record<string, string> {
  const f: Record<string, string> = {
    response_type: 'code',
    client_id: r.client.id,
    code_challenge: r.codeChallenge,
    code_challenge_method: 'S256',
    resource: r.resource.url,
    scope: r.scope,
  };
  // Only when the request named it: the token request must then name it too.
  if (r.redirectUriNamed) f.redirect_uri = r.redirectUri;
  if (r.state !== undefined) f.state = r.state;
  return f;
}

/** Token and revocation parameters: form-encoded (RFC 6749) or JSON, each given at most once. */
function oauthBody(req: FastifyRequest): Record<string, string | undefined> {
  const raw = req.body;
  if (raw === undefined || raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new ServiceError(400, 'invalid_request', 'Send the parameters form-encoded (application/x-www-form-urlencoded)');
  }
  const out: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(raw as Record<string, unknown>)) {
    if (Array.isArray(v)) throw new ServiceError(400, 'invalid_request', `The parameter ${k} is repeated`);
    if (typeof v === 'string') out[k] = v;
    else if (v !== undefined && v !== null) throw new ServiceError(400, 'invalid_request', `The parameter ${k} must be a string`);
  }
  return out;
}

function clientCredentials(req: FastifyRequest, body: Record<string, string | undefined>): ClientCredentials {
  const basic = basicCredentials(req.headers.authorization);
  if (basic === 'malformed') throw new ServiceError(401, 'invalid_client', 'Malformed Basic client credentials');
  return { basic, bodyId: body.client_id, bodySecret: body.client_secret };
}

/** RFC 6749 §5.2: `{error, error_description}`; a failed Basic authentication also says how to authenticate. */
function oauthError(reply: FastifyReply, e: ServiceError, req: FastifyRequest): FastifyReply {
  if (e.code === 'invalid_client' && /^Basic\b/i.test(req.headers.authorization ?? '')) reply.header('WWW-Authenticate', 'Basic realm="oauth"');
  reply.header('cache-control', 'no-store');
  return sendJson(reply.code(e.status), { error: e.code, error_description: e.message });
}

function errorPage(reply: FastifyReply, e: ServiceError): FastifyReply {
  setPageHeaders(reply);
  const message = e.status >= 500 ? 'Something went wrong on our side. It has been logged; please try again.' : e.message;
  return sendPage(reply, e.status, 'Cannot connect the application', messageBody('Cannot connect the application', message));
}
