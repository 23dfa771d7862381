import type { TreeEntry } from './codec.js';

/**
 * Upper bound of the decoded-tree cache, in tree entries: the working set of a few very large
 * folders plus every small tree on their paths. Successive versions of a folder share their
 * unchanged entry objects, so real memory is usually far below the worst case (~250 bytes per
 * entry, ~50 MB).
 */
export const TREE_CACHE_MAX_ENTRIES = 200_000;

/**
 * LRU of decoded trees bounded by total entries. Objects are immutable and content-addressed,
 * so a cached tree is never stale. Keys include the workspace so one workspace never sees
 * another's objects through the cache.
 */
class TreeCache {
  private readonly map = new Map<string, readonly TreeEntry[]>();
  private total = 0;

  constructor(private readonly maxEntries: number) {}

  get(key: string): readonly TreeEntry[] | undefined {
    const v = this.map.get(key);
    if (v) {
      this.map.delete(key);
      this.map.set(key, v);
    }
    return v;
  }

  set(key: string, entries: readonly TreeEntry[]): void {
    const cost = entries.length + 1;
    if (cost > this.maxEntries || this.map.has(key)) return;
    this.map.set(key, entries);
    this.total += cost;
    for (const [k, v] of this.map) {
      if (this.total <= this.maxEntries) break;
      this.map.delete(k);
      this.total -= v.length + 1;
    }
  }

  clear(): void {
    this.map.clear();
    this.total = 0;
  }
}

/** Shared by every ObjectStore in the process; keys are `workspaceId:sha`. */
export const treeCache = new TreeCache(TREE_CACHE_MAX_ENTRIES);

/** Empties the process-wide tree cache (tests use it to force reads from the database). */
export function clearTreeCache(): void {
  treeCache.clear();
}
