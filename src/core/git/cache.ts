import path from 'node:path';
import { bareRepoIsCurrent, prepareBareRepo, syncBareRepo, type HookFile } from '../../store/git/cache-repo.js';
import type { CoreContext } from '../context.js';

export type { HookFile } from '../../store/git/cache-repo.js';
/** The environment a git child of the service runs with (no user config, never prompting). */
export { gitEnv } from '../../store/git/process.js';

/**
 * The cache repositories the git face serves (DESIGN.md §8): one bare repository per workspace
 * under GIT_CACHE_DIR, brought up to the database's main before git reads it. Requests of one
 * workspace that change the cache (a sync, a push) take turns in this process; several nodes
 * each keep their own cache, and the database's compare-and-swap of main orders their pushes.
 */

const queues = new Map<string, Promise<unknown>>();

/** Runs `fn` after every earlier holder of the workspace's turn is done. */
export async function withCacheTurn<T>(workspaceId: string, fn: () => Promise<T>): Promise<T> {
  const before = queues.get(workspaceId) ?? Promise.resolve();
  const run = before.then(fn, fn);
  const tail = run.catch(() => undefined);
  queues.set(workspaceId, tail);
  try {
    return await run;
  } finally {
    if (queues.get(workspaceId) === tail) queues.delete(workspaceId);
  }
}

export function cacheRepoDir(ctx: CoreContext, workspaceId: string): string {
  return path.join(ctx.config.git.cacheDir, `${workspaceId}.git`);
}

/** Makes the workspace's cache repository current; call inside its turn. Returns its directory. */
export async function syncCache(ctx: CoreContext, workspaceId: string, hooks: readonly HookFile[]): Promise<string> {
  const dir = cacheRepoDir(ctx, workspaceId);
  await prepareBareRepo(dir, hooks);
  await syncBareRepo(ctx.store.db, workspaceId, dir);
  return dir;
}

/** True when the workspace's cache repository exists and holds the database's main (no sync needed). */
export function cacheIsCurrent(ctx: CoreContext, workspaceId: string): Promise<boolean> {
  return bareRepoIsCurrent(ctx.store.db, workspaceId, cacheRepoDir(ctx, workspaceId));
}
