import type { Store } from './db.js';

/**
 * Values read from the database, kept while nothing has been committed since they were read.
 * Every entry belongs to one state of the store, named by two counts that only grow: this
 * process's commits (`ownCommits`, counted as they return) and other processes' commits on the
 * same file (`othersCommits`, SQLite's `PRAGMA data_version`); all entries go when either moves.
 * A hit therefore answers exactly what a fresh read would. Where the store cannot tell that
 * others committed (PostgreSQL) nothing is kept and every lookup reads.
 *
 * Asking SQLite for `data_version` costs a few microseconds (it opens a read transaction), so a
 * request asks once: its first lookup takes a snapshot of it (`readSnapshot`), and later lookups
 * of the same request made within 50 ms pass it along (`pinSnapshot` / `pinnedSnapshot` on the
 * request's principal). That is the same as the request having read all it reads at that first
 * moment: no answer is older than the request. This process's own commits are always counted live.
 *
 * What is kept must depend on the database alone, or the caller folds whatever else it depends
 * on into the key, and re-checks time-bound facts (an expiry) on every use.
 */
export interface ReadCacheLimits {
  /** Entries kept at most. */
  entries: number;
  /** With `weigh`: the most weight (say, bytes) kept; one entry heavier than this is not kept. */
  weight?: number;
  weigh?: (value: unknown) => number;
}

export class ReadCache<V> {
  private own = -1;
  private others = -1;
  private readonly entries = new Map<string, { value: V; weight: number }>();
  private weight = 0;

  constructor(
    private readonly store: Store,
    private readonly limits: ReadCacheLimits,
  ) {}

  /**
   * The value under `key`, read by `load` when not kept. `snapshot`: other processes' commit
   * count as this request first saw it (readSnapshot); null reads without keeping. The counts
   * are taken before `load` runs, so a commit landing while it reads leaves the value tagged
   * older than what it saw, never newer: the next lookup drops it.
   */
  async through(key: string, load: () => Promise<V>, snapshot: number | null): Promise<V> {
    if (snapshot === null) return load();
    const own = this.store.ownCommits();
    if (own !== this.own || snapshot > this.others) {
      this.entries.clear();
      this.weight = 0;
      this.own = own;
      this.others = snapshot;
    } else if (snapshot < this.others) {
      // A request that began before another process's commit which a later one has seen: it
      // may neither use nor fill what was kept for the newer state.
      return load();
    }
    const hit = this.entries.get(key);
    if (hit !== undefined) return hit.value;
    const value = await load();
    if (value !== undefined && this.own === own && this.others === snapshot) this.keep(key, value);
    return value;
  }

  /** Keeps a value, dropping the oldest entries past the limits (first in, first out). */
  private keep(key: string, value: V): void {
    const { entries: max, weight: maxWeight = Infinity, weigh } = this.limits;
    const weight = weigh ? weigh(value) : 0;
    if (weight > maxWeight) return;
    const old = this.entries.get(key);
    if (old) {
      this.entries.delete(key);
      this.weight -= old.weight;
    }
    while (this.entries.size > 0 && (this.entries.size >= max || this.weight + weight > maxWeight)) {
      const [k, e] = this.entries.entries().next().value as [string, { weight: number }];
      this.entries.delete(k);
      this.weight -= e.weight;
    }
    this.entries.set(key, { value, weight });
    this.weight += weight;
  }
}

const caches = new WeakMap<Store, Map<string, ReadCache<unknown>>>();

/** The store's cache named `name` (one per store: servers in one process never share entries). */
export function readCache<V>(store: Store, name: string, limits: ReadCacheLimits): ReadCache<V> {
  let byName = caches.get(store);
  if (!byName) {
    byName = new Map();
    caches.set(store, byName);
  }
  let cache = byName.get(name);
  if (!cache) {
    cache = new ReadCache<unknown>(store, limits);
    byName.set(name, cache);
  }
  return cache as ReadCache<V>;
}

/** Other processes' commit count now, for ReadCache.through; null where nothing may be kept. */
export function readSnapshot(store: Store): number | null {
  return store.othersCommits();
}

/**
 * How long a request's snapshot serves its later lookups. A request's work between its
 * authentication and its reads takes microseconds; one that waits (a long-poll, a batch of calls)
 * takes a new snapshot for what it reads afterwards.
 */
const PIN_MS = 50;

const pinned = new WeakMap<object, { snapshot: number; at: number }>();

/**
 * Ties a request's snapshot to its principal. Requests of one key share their principal, so a
 * snapshot only ever replaces an older one (or one past its time): a slow request pinning what
 * it read earlier must not hide another node's commit from a request that already saw it.
 */
export function pinSnapshot(owner: object, snapshot: number | null): void {
  if (snapshot === null) return;
  const now = performance.now();
  const pin = pinned.get(owner);
  if (pin !== undefined && now - pin.at < PIN_MS && pin.snapshot > snapshot) return;
  pinned.set(owner, { snapshot, at: now });
}

/** The snapshot pinned to `owner` in the last moments, else a fresh one. */
export function pinnedSnapshot(store: Store, owner: object): number | null {
  const pin = pinned.get(owner);
  return pin !== undefined && performance.now() - pin.at < PIN_MS ? pin.snapshot : readSnapshot(store);
}
