import type { FastifyRequest } from 'fastify';

/**
 * URLs that carry a secret in their path or query: invite tokens (`/invite/<token>`,
 * `/api/v1/invites/<token>/accept`) and any `token`, `code`, `key` or `password` parameter.
 * The request log shows them as `[redacted]` (issue 11): a log file is read by more people
 * than the invitee. Headers are never logged (Authorization carries agent keys, OAuth tokens
 * and git's Basic credentials; Cookie carries sessions).
 */
const SECRET_PATHS: RegExp[] = [/^(\/invite\/)[^/?#]+/, /^(\/api\/v1\/invites\/)(?!$)[^/?#]+(?=\/accept)/];
const SECRET_PARAMS =
  /([?&](?:token|invite_token|code|key|api_key|password|secret|client_secret|code_verifier|access_token|refresh_token|id_token|assertion)=)[^&#]*/gi;
/**
 * Our own secrets wherever they appear (a token pasted into a path or an odd parameter): agent
 * keys, OAuth access, refresh, code and client secrets, sessions, git tokens, invites — each a
 * prefix and 43 base64url characters (src/auth/secrets.ts).
 */
const OUR_SECRETS = /\b(ak|oa|oar|oac|ocs|ss|gt|iv)_[A-Za-z0-9_-]{16,}/g;

export function redactUrl(url: string): string {
  let out = url;
  for (const re of SECRET_PATHS) out = out.replace(re, '$1[redacted]');
  return out.replace(SECRET_PARAMS, '$1[redacted]').replace(OUR_SECRETS, '$1_[redacted]');
}

/** Fastify's request serializer with the URL redacted. */
export function requestSerializer(req: FastifyRequest): Record<string, unknown> {
  return {
    method: req.method,
    url: redactUrl(req.url),
    host: req.host,
    remoteAddress: req.ip,
    remotePort: req.socket?.remotePort,
  };
}

/**
 * Fastify's reply serializer (the "request completed" line): the status and, once a face has
 * resolved it, the caller's principal id and workspace id (ids only, never a name or a credential).
 * Fastify passes only `statusCode` in some cases, hence the optional request.
 */
export function replySerializer(reply: { statusCode: number; request?: Pick<FastifyRequest, 'principal'> }): Record<string, unknown> {
  const p = reply.request?.principal;
  return {
    statusCode: reply.statusCode,
    ...(p ? { principal: p.id, workspace: p.workspaceId } : {}),
  };
}
