import type { Principal } from '../../policy/principal.js';
import type { CoreContext } from '../context.js';
import { isServiceError } from '../errors.js';
import { parsePagePath } from '../paths.js';
import { createPage, updatePage, type WriteResult } from './write.js';

export interface UpsertResult extends WriteResult {
  created: boolean;
  merged: boolean;
}

/**
 * Commits full markdown at a path: an update when a page the caller can read lives there
 * (with `baseSha`, a stale write merges three-way or becomes a proposal, see updatePage),
 * else a new page. A page at the path that the caller cannot see answers 409
 * `already_exists`, as a create there would. Used by MCP's context_write.
 */
export async function writePageAt(
  ctx: CoreContext,
  p: Principal,
  input: { path: string; content: string; baseSha?: string | undefined; message?: string | undefined },
): Promise<UpsertResult> {
  const target = parsePagePath(input.path);
  try {
    const r = await updatePage(ctx, p, target.path, { kind: 'replace', content: input.content }, { baseSha: input.baseSha }, input.message);
    return { ...r, created: false };
  } catch (e) {
    if (!(isServiceError(e) && e.status === 404 && e.code === 'not_found')) throw e;
  }
  // A page created by someone else since the look above answers 409 already_exists: read it first.
  const r = await createPage(ctx, p, { path: target.path, content: input.content }, input.message);
  return { ...r, created: true, merged: false };
}
