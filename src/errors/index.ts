import type { CodeWithStatus, ErrorCode, StatusFor } from './codes.js';

export { ERROR_CODES, statusesOf, type CodeWithStatus, type ErrorCode, type ErrorStatus, type StatusOf } from './codes.js';

/**
 * The one error type of the service. Faces render it: REST as
 * `{ error: { code, message }, code }`, MCP as an `isError` tool result.
 * Codes are snake_case, registered in `ERROR_CODES` (src/errors/codes.ts) and listed in
 * docs/errors.md. The status must be one the registry allows for the code: a wrong status, or a
 * code that is not registered, does not compile.
 */
export class ServiceError<C extends ErrorCode = ErrorCode> extends Error {
  readonly code: C;
  readonly status: number;
  /** Extra fields a face may attach to the body (for example a proposal id). */
  readonly details: Record<string, unknown> | undefined;

  constructor(status: StatusFor<C>, code: C, message: string, details?: Record<string, unknown>) {
    super(message);
    this.name = 'ServiceError';
    this.status = status as number;
    this.code = code;
    this.details = details;
  }
}

export const badRequest = (message: string, code: CodeWithStatus<400> = 'invalid_request', details?: Record<string, unknown>) =>
  new ServiceError(400, code, message, details);
export const unauthorized = (message = 'Authentication required', code: CodeWithStatus<401> = 'unauthorized') => new ServiceError(401, code, message);
export const forbidden = (message: string, code: CodeWithStatus<403> = 'forbidden') => new ServiceError(403, code, message);
export const notFound = (message = 'Not found', code: CodeWithStatus<404> = 'not_found') => new ServiceError(404, code, message);
export const conflict = (message: string, code: CodeWithStatus<409> = 'conflict', details?: Record<string, unknown>) =>
  new ServiceError(409, code, message, details);
export const tooLarge = (message: string) => new ServiceError(413, 'payload_too_large', message);

/**
 * A framework 4xx (src/http/shared/errors.ts): the one place a status comes from outside the
 * registry. The code comes from the registry; a framework status without a code of its own is
 * answered as `invalid_request` with the framework's status (for example 414), as docs/errors.md
 * says.
 */
export function frameworkError(status: number, code: ErrorCode, message: string): ServiceError {
  return new ServiceError(status as never, code, message);
}

export function isServiceError(e: unknown): e is ServiceError {
  return e instanceof ServiceError;
}
