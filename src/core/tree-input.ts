import { z } from 'zod';

/**
 * The inputs of a folder tree (`spaceTree`), shared by REST `GET /spaces/:s/tree` and the MCP
 * tool `context_tree`. The folder path's limit is a path's (core/pages/input.ts).
 */

export const TREE_MAX_DEPTH = 10;
export const TREE_DEFAULT_DEPTH = 3;

/** How many folder levels below the path: `z.number()` in JSON, `z.coerce.number()` in a query string. */
export function treeDepth<N extends z.ZodNumber | z.ZodCoercedNumber>(base: N) {
  return base.int().min(0).max(TREE_MAX_DEPTH).default(TREE_DEFAULT_DEPTH);
}
