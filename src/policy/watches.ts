import { ceilingFor } from './access.js';
import { canReadPage, type PageFacts } from './pages.js';
import type { Principal } from './principal.js';

/**
 * Watching (issue 13): who may watch what, and who is told of a change. A watch needs read on
 * what it watches, and something the caller cannot see is refused exactly as something that does
 * not exist (the core answers not_found for both). Delivery is judged again at every change with
 * the watcher's access at that moment, so a lost grant, a lower ceiling or a page moved out of
 * sight simply stop the events.
 */

/** A page may be watched by whoever reads it now. */
export function canWatchPage(p: Principal, page: PageFacts): boolean {
  return canReadPage(p, page);
}

/** What the core found at a folder or Space path, as far as the caller is concerned. */
export interface FolderSight {
  /** A folder or Space row exists at the path. */
  exists: boolean;
  /** Some live page lies in it (or in a sub-folder), whoever may read it. */
  livePages: boolean;
  /** Some live page in it is at or below the caller's read ceiling for the folder. */
  readablePage: boolean;
}

/**
 * A folder or Space may be watched when a read grant covers all of it (a narrower grant inside it
 * is not enough: the watch would be on more than the caller may read) and it is there for the
 * caller: it holds a page they can read, or it exists and holds no page at all. A folder whose
 * pages are all hidden from the caller does not exist for them (as for folder archive).
 */
export function canWatchFolder(p: Principal, path: string, sight: FolderSight): boolean {
  if (ceilingFor(p, 'read', path) === null) return false;
  if (sight.readablePage) return true;
  return sight.exists && !sight.livePages;
}

/**
 * Is the watcher told of this change? Never of their own change (nor of one credited to them),
 * and only when they may read the page as it is now: a page above their ceiling, outside their
 * grants, or moved where they cannot read it gives no event at all.
 */
export function watchDelivers(watcher: Principal, actorIds: readonly string[], page: PageFacts): boolean {
  if (actorIds.includes(watcher.id)) return false;
  return canReadPage(watcher, page);
}

/** A move's old path is told only to a watcher who could read the page there. */
export function revealsOldPath(watcher: Principal, before: PageFacts): boolean {
  return canReadPage(watcher, before);
}
