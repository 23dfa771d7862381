import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { isDatabaseUnavailable, isServiceError, ServiceError } from '../core/errors.js';

/**
 * A tool's answer: one text item holding the JSON (or the markdown) it returned. With
 * `structured` (the tool declares an outputSchema), the object is also `structuredContent`;
 * the text keeps the same JSON for clients older than MCP 2025-06-18.
 */
export function toolResult(value: unknown, structured = false): CallToolResult {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  if (structured && typeof value === 'object' && value !== null && !Array.isArray(value)) {
    return { content: [{ type: 'text', text }], structuredContent: value as Record<string, unknown> };
  }
  return { content: [{ type: 'text', text }] };
}

/**
 * Spec §7: a tool error is a result with isError true and text `<code>: <message>`. An error
 * whose change was kept as a proposal ends with `(proposal <id> created)`.
 */
export function toolError(e: ServiceError, hint?: string): CallToolResult {
  const proposal = e.details?.proposal as { id?: unknown } | undefined;
  let text = `${e.code}: ${e.message}`;
  if (hint && e.code === 'forbidden') text += `; ${hint}`;
  if (proposal && typeof proposal.id === 'string') text += ` (proposal ${proposal.id} created)`;
  return { content: [{ type: 'text', text }], isError: true };
}

/** Anything thrown by a tool, as the one error type; unknown failures become internal_error. */
export function asServiceError(e: unknown): { error: ServiceError; unexpected: boolean } {
  if (isServiceError(e)) return { error: e, unexpected: false };
  // A lost database is not a bug: the caller may retry (as REST's 503 says).
  if (isDatabaseUnavailable(e))
    return { error: new ServiceError(503, 'unavailable', 'The database is unavailable right now; try again shortly'), unexpected: false };
  return { error: new ServiceError(500, 'internal_error', 'Something went wrong on our side; it has been logged'), unexpected: true };
}
