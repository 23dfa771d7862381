import type { WatchRecord } from '../core/watches.js';
import { WATCH_LIMITS } from '../core/watch-input.js';

/**
 * Watches as each face shows them; one source: `watch`, `listWatches`, `unwatch`
 * (core/watches.ts). REST and the MCP tools answer the same shapes.
 */

/** One watch: what it is on and whether it still delivers events. */
export function watchView(w: WatchRecord) {
  return { id: w.id, kind: w.kind, node_id: w.node_id, path: w.path, created_at: w.created_at, delivering: w.delivering };
}

/** `PUT /api/v1/watches`, `context_watch`: the watch, and whether this call made it (false: it was there already). */
export function watchResultView(r: { watch: WatchRecord; created: boolean }) {
  return { watch: watchView(r.watch), created: r.created };
}

/** `GET /api/v1/watches`, `context_watches`: the caller's watches and how many they may hold. */
export function watchListView(watches: WatchRecord[]) {
  return { watches: watches.map(watchView), limit: WATCH_LIMITS.perPrincipal };
}

/** `DELETE /api/v1/watches/:id`, `context_unwatch`. */
export function unwatchView(r: { id: string; removed: true }) {
  return { id: r.id, removed: r.removed };
}
