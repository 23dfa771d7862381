import { sql } from 'kysely';
import { badRequest, notFound } from '../errors/index.js';
import { ceilingFor, hasActionWithin, scopeCovers } from '../policy/access.js';
import type { Action, Principal } from '../policy/principal.js';
import { atOrBelow, LEVELS } from '../policy/sensitivity.js';
import type { Executor } from '../store/db.js';
import type { RetrievalContext } from './context.js';
import { folderPath } from './candidates.js';
import { closest } from './suggest.js';
import { livePagesOfSpace } from './live-pages.js';

/**
 * Scope checks of retrieval (issue 13): a `scope` (search, bundle, the project prompt) that names
 * no Space or folder the caller can use is an error naming the ones it can use, not an empty
 * answer. A Space or folder that exists but holds only pages the caller cannot see answers
 * exactly as one that does not exist, and only scopes the caller can see are ever named.
 */

/** Scopes named in an `unknown_scope` answer at most. */
export const SCOPES_SHOWN = 20;
/** Spaces looked at at most to list usable ones (an error path, kept bounded). */
const SPACES_SCANNED = 500;
/** Folders of a Space read at most to suggest one. */
const FOLDER_ROWS = 2000;

/** The levels the caller sees for `action` at `target`. */
function levelsAt(p: Principal, action: Action, target: string) {
  const ceiling = ceilingFor(p, action, target);
  return ceiling === null ? [] : LEVELS.filter((l) => atOrBelow(l, ceiling));
}

/** Pages under a Space (`eng`) or folder (`eng/ops`), its sub-folders included; the prefix test is on segment boundaries. */
function pagesUnder(db: Executor, workspaceId: string, target: string) {
  const space = target.split('/')[0]!;
  let q = livePagesOfSpace(db, workspaceId, space).select('id');
  if (target !== space)
    q = q.where((eb) => eb.or([eb('cluster_path', '=', target), eb(sql<string>`substr(cluster_path, 1, ${[...target].length + 1})`, '=', `${target}/`)]));
  return q;
}

/**
 * The places the caller's reach for `action` starts inside `target`: the target itself when a
 * grant (or the role) covers it, else the narrower grant scopes inside it (a path-scoped agent).
 */
function reachInside(p: Principal, action: Action, target: string): string[] {
  if (ceilingFor(p, action, target) !== null) return [target];
  if (p.kind === 'human') return [];
  return [...new Set(p.grants.filter((g) => g.action === action && g.scope !== '*' && scopeCovers(target, g.scope)).map((g) => g.scope))];
}

/**
 * True when the caller can see `target` for `action`: it holds a live page (any state) the caller
 * may see, or it is an existing Space or folder that holds no live page at all (an empty Space,
 * a folder whose pages moved away), inside the caller's reach. One indexed query per place.
 */
export async function scopeVisible(db: Executor, p: Principal, action: Action, target: string): Promise<boolean> {
  if (!hasActionWithin(p, action, target)) return false;
  const reach = reachInside(p, action, target);
  for (const t of reach.length > 0 ? reach : []) {
    const levels = levelsAt(p, action, t);
    if (levels.length === 0) continue;
    if (await pagesUnder(db, p.workspaceId, t).where('sensitivity', 'in', levels).limit(1).executeTakeFirst()) return true;
  }
  // Reach that starts above the target (a grant on `eng` for target `eng/ops`) was handled above
  // as the target itself; an empty place is visible when it exists and holds no live page.
  if (await pagesUnder(db, p.workspaceId, target).limit(1).executeTakeFirst()) return false;
  const space = target.split('/')[0]!;
  if (target === space)
    return (await db.selectFrom('spaces').select('id').where('workspace_id', '=', p.workspaceId).where('id', '=', space).executeTakeFirst()) !== undefined;
  const folder = await db.selectFrom('folders').select('path').where('workspace_id', '=', p.workspaceId).where('path', '=', target).executeTakeFirst();
  return folder !== undefined && (await scopeVisible(db, p, action, space));
}

/**
 * The scopes the caller can use for `action`, in order: each visible Space it reaches as a whole,
 * and for a path-scoped agent the folders its grants name instead. Stops after `max`, and says
 * whether there were more.
 */
export async function usableScopes(db: Executor, p: Principal, action: Action, max = SCOPES_SHOWN): Promise<{ scopes: string[]; more: boolean }> {
  const spaces = await db
    .selectFrom('spaces')
    .select('id')
    .where('workspace_id', '=', p.workspaceId)
    .orderBy('id')
    .limit(SPACES_SCANNED + 1)
    .execute();
  const out: string[] = [];
  for (const s of spaces.slice(0, SPACES_SCANNED)) {
    if (!hasActionWithin(p, action, s.id)) continue;
    const places = ceilingFor(p, action, s.id) !== null ? [s.id] : reachInside(p, action, s.id);
    for (const t of places) {
      if (!(await scopeVisible(db, p, action, t))) continue;
      if (out.length === max) return { scopes: out, more: true };
      out.push(t);
    }
  }
  return { scopes: out, more: spaces.length > SPACES_SCANNED };
}

/** Folders of a Space the caller sees pages in (for a suggestion), from one bounded query. */
async function visibleFolders(db: Executor, p: Principal, action: Action, space: string): Promise<string[]> {
  const rows = await livePagesOfSpace(db, p.workspaceId, space)
    .select(['cluster_path', 'path', 'sensitivity'])
    .orderBy('cluster_path')
    .limit(FOLDER_ROWS)
    .execute();
  const out = new Set<string>();
  for (const r of rows) {
    const levels = levelsAt(p, action, r.path);
    if (!levels.includes(r.sensitivity as (typeof levels)[number])) continue;
    const segs = r.cluster_path.split('/');
    for (let i = 2; i <= segs.length; i++) out.add(segs.slice(0, i).join('/'));
  }
  return [...out];
}

/** The full scope (`eng` or `eng/ops/…`) of a Space and folder filter, as retrieval reads them. */
export function scopeTarget(space: string | undefined, folder: string | undefined): string | null {
  const sp = space?.trim().replace(/^\/+|\/+$/g, '') || undefined;
  const f = folder?.trim().replace(/^\/+|\/+$/g, '') || undefined;
  if (f !== undefined) return folderPath(sp, f);
  return sp ?? null;
}

/**
 * Refuses a scope the caller cannot use for `action` with 404 `unknown_scope`, naming a likely
 * one ("did you mean …?") and the scopes it can use. Nothing when no scope is given.
 */
export async function assertUsableScope(
  ctx: RetrievalContext,
  p: Principal,
  action: Action,
  space: string | undefined,
  folder: string | undefined,
): Promise<void> {
  const target = scopeTarget(space, folder);
  if (target === null) return;
  if (target.length > 512 || /[\u0000-\u001f\u007f]/.test(target) || target.split('/').some((seg) => seg === '' || seg === '.' || seg === '..')) {
    throw badRequest('scope must be a Space or space/folder path', 'invalid_scope');
  }
  if (await scopeVisible(ctx.store.db, p, action, target)) return;
  throw await unknownScope(ctx.store.db, p, action, target);
}

/** The `unknown_scope` error for `target`: the same text whether it does not exist or is hidden. */
export async function unknownScope(db: Executor, p: Principal, action: Action, target: string) {
  const { scopes, more } = await usableScopes(db, p, action);
  const space = target.split('/')[0]!;
  let guess: string | undefined;
  if (target !== space && scopes.some((s) => s === space || scopeCovers(s, space) || scopeCovers(space, s))) {
    const folders = (await visibleFolders(db, p, action, space)).filter((f) => scopes.some((s) => scopeCovers(s, f) || scopeCovers(f, s)));
    guess = closest(target, folders)[0];
  }
  guess ??= closest(target, scopes)[0];
  const list =
    scopes.length === 0 ? `none: you can ${action} in no Space` : `${scopes.join(', ')}${more ? ', … (more: see context_tree)' : ''}, or a folder inside one`;
  const hint = guess ? ` Did you mean ${guess}?` : '';
  return notFound(`No scope ${target} that you can ${action} in.${hint} Scopes you can use: ${list}`, 'unknown_scope');
}
