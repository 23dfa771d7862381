import type { FastifyRequest } from 'fastify';

/**
 * URLs that carry a secret in their path or query: invite tokens (`/invite/<token>`,
 * `/api/v1/invites/<token>/accept`) and any `token`, `code`, `key` or `password` parameter.
 * The request log shows them as `[redacted]` (issue 11): a log file is read by more people
 * than the invitee.
 */
const SECRET_PATHS: RegExp[] = [/^(\/invite\/)[^/?#]+/, /^(\/api\/v1\/invites\/)(?!$)[^/?#]+(?=\/accept)/];
const SECRET_PARAMS = /([?&](?:token|invite_token|code|key|password|secret|access_token|refresh_token)=)[^&#]*/gi;

export function redactUrl(url: string): string {
  let out = url;
  for (const re of SECRET_PATHS) out = out.replace(re, '$1[redacted]');
  return out.replace(SECRET_PARAMS, '$1[redacted]');
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
