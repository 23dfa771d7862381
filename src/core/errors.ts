/**
 * The one error type of the service. Faces render it: REST as
 * `{ error: { code, message }, code }`, MCP as an `isError` tool result.
 * Codes are snake_case and listed in docs/errors.md.
 */
export class ServiceError extends Error {
  readonly code: string;
  readonly status: number;
  /** Extra fields a face may attach to the body (for example a proposal id). */
  readonly details: Record<string, unknown> | undefined;

  constructor(status: number, code: string, message: string, details?: Record<string, unknown>) {
    super(message);
    this.name = 'ServiceError';
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

export const badRequest = (message: string, code = 'invalid_request', details?: Record<string, unknown>) =>
  new ServiceError(400, code, message, details);
export const unauthorized = (message = 'Authentication required', code = 'unauthorized') =>
  new ServiceError(401, code, message);
export const forbidden = (message: string, code = 'forbidden') => new ServiceError(403, code, message);
export const notFound = (message = 'Not found', code = 'not_found') => new ServiceError(404, code, message);
export const conflict = (message: string, code = 'conflict', details?: Record<string, unknown>) =>
  new ServiceError(409, code, message, details);
export const tooLarge = (message: string) => new ServiceError(413, 'payload_too_large', message);

export function isServiceError(e: unknown): e is ServiceError {
  return e instanceof ServiceError;
}
