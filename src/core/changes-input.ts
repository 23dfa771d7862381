import { z } from 'zod';

/**
 * The inputs of the changes feed (issue 13: what changed in a scope since a cursor), shared by
 * MCP `context_changes` and REST `GET /api/v1/changes`.
 */

export const CHANGES_DEFAULT_LIMIT = 50;
export const CHANGES_MAX_LIMIT = 200;
/** Longest cursor accepted (they are short; anything longer is not one of ours). */
export const CURSOR_MAX_CHARS = 200;

/** How many changes at most; the number type is the face's (REST coerces query strings). */
export function changesLimit<T extends z.ZodNumber | z.ZodCoercedNumber>(n: T) {
  return n.int().min(1).max(CHANGES_MAX_LIMIT).default(CHANGES_DEFAULT_LIMIT);
}

/** The `next` of a previous answer. */
export const ChangesCursor = z.string().min(1).max(CURSOR_MAX_CHARS).describe('next of your previous call; omit to start from the beginning');
