import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { frameworkError, isDatabaseUnavailable, isServiceError, ServiceError, type ErrorCode } from '../../core/errors.js';

/** The REST error body: `{ error: { code, message }, code }` plus any details the error carries. */
export function errorBody(e: ServiceError): Record<string, unknown> {
  return { error: { code: e.code, message: e.message }, code: e.code, ...(e.details ?? {}) };
}

/** What a 503 for a lost database asks the caller to wait before trying again. */
export const UNAVAILABLE_RETRY_S = 2;

const BY_STATUS: Record<number, ErrorCode> = {
  400: 'invalid_request',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  405: 'method_not_allowed',
  406: 'not_acceptable',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  429: 'rate_limited',
};

/**
 * PostgreSQL refuses the NUL character (U+0000) in text with SQLSTATE 22021 (SQLite stores it):
 * a NUL in an address or a field the core passes on to a query is the caller's bad input on
 * either engine, never a server fault.
 */
function isNulRefusal(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === '22021';
}

/** Maps anything thrown in a request to the one error type; unknown failures are logged and 500. */
export function toServiceError(err: unknown, req: FastifyRequest): ServiceError {
  if (isServiceError(err)) return err;
  if (isNulRefusal(err)) return new ServiceError(400, 'invalid_request', 'Text must not contain the NUL character (U+0000)');
  if (hasZodFastifySchemaValidationErrors(err)) {
    const parts = err.validation.map((v) => {
      const path = v.instancePath.split('/').filter(Boolean).join('.');
      const where = `${err.validationContext ?? 'body'}${path ? `.${path}` : ''}`;
      return `${where}: ${v.message ?? 'invalid'}`;
    });
    return new ServiceError(400, 'invalid_request', parts.join('; '));
  }
  const fe = err as Partial<FastifyError>;
  const status = typeof fe.statusCode === 'number' ? fe.statusCode : 500;
  if (status >= 400 && status < 500) {
    if (fe.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || err instanceof SyntaxError || fe.code === 'FST_ERR_CTP_EMPTY_JSON_BODY') {
      return new ServiceError(400, 'invalid_json', `The request body is not valid JSON: ${fe.message ?? ''}`.trim());
    }
    if (fe.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return new ServiceError(413, 'payload_too_large', 'The request body is too large');
    return frameworkError(status, BY_STATUS[status] ?? 'invalid_request', fe.message ?? 'Bad request');
  }
  if (isDatabaseUnavailable(err)) {
    // Not a bug and not the caller's fault: the database is down or restarting. Nothing was
    // acknowledged; the node serves again by itself when the database is back (/readyz says when).
    req.log.warn({ err }, 'database unavailable');
    return new ServiceError(503, 'unavailable', 'The database is unavailable right now; try again shortly');
  }
  req.log.error({ err }, 'unhandled error');
  return new ServiceError(500, 'internal_error', 'Something went wrong on our side; it has been logged');
}

export function sendError(reply: FastifyReply, e: ServiceError): FastifyReply {
  // A back-off decided in the core (per-account sign-in failures) says when to come back.
  const retry = e.details?.retryAfterSeconds;
  if (e.status === 429 && typeof retry === 'number' && !reply.getHeader('retry-after')) reply.header('Retry-After', String(retry));
  if (e.code === 'unavailable' && !reply.getHeader('retry-after')) reply.header('Retry-After', String(UNAVAILABLE_RETRY_S));
  return reply.code(e.status).type('application/json; charset=utf-8').send(errorBody(e));
}
