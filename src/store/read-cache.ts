import type { Store, StoreVersion } from './db.js';

/**
 * Values read from the database, kept while nothing has been committed since they were read.
 * Every entry belongs to one state of the store, named by this process's commits (`ownCommits`,
 * counted as they return) and by what other connections have committed (`othersCommits`:
 * SQLite's `PRAGMA data_version`, a count; PostgreSQL's `pg_current_snapshot()`, equal when the
 * same commits are visible); all entries go when either moves. A hit therefore answers exactly what a fresh
 * read would.
 *
 * Asking costs a few microseconds on SQLite and one small round trip on PostgreSQL, so a request
 * asks once: its first lookup takes the state (`readSnapshot`), and later lookups of the same
 * request made within 50 ms pass it along (`pinSnapshot` / `pinnedSnapshot` on the request's
 * principal). That is the same as the request having read all it reads at that first moment:
 * no answer is older than the request. This process's own commits are always counted live.
 *
 * A value is tagged with the state taken before it was read, so what a load returns is never
 * older than its tag. A request whose state is older than the kept one reads without keeping
 * (and its state never replaces a newer one pinned to its principal): else a request that took
 * its state before a commit could bring back entries read before it, and serve them to a later
 * request that must see the commit. PostgreSQL snapshots are ordered by `compareVersions`.
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
  private others: StoreVersion | undefined;
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
  async through(key: string, load: () => Promise<V>, snapshot: StoreVersion | null): Promise<V> {
    if (snapshot === null) return load();
    const own = this.store.ownCommits();
    const order = compareVersions(snapshot, this.others);
    if (own !== this.own || order === 'other') {
      this.entries.clear();
      this.weight = 0;
      this.own = own;
      this.others = snapshot;
    } else if (order === 'older') {
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

/**
 * `a` against the kept state `b`: the same state, an older one (a request that began before a
 * commit another has seen), or another (newer, or none kept yet).
 *
 * PostgreSQL snapshots (`xmin:xmax:in-progress xids`, xmax being one past the newest completed
 * transaction): xmax never decreases, so a smaller xmax was taken earlier; at an equal xmax no
 * transaction below it can begin, so the in-progress list only shrinks, and a longer list was
 * taken earlier. Anything else is "other": it replaces what was kept (a read more, never a
 * stale answer).
 */
export function compareVersions(a: StoreVersion, b: StoreVersion | undefined): 'same' | 'older' | 'other' {
  if (a === b) return 'same';
  if (typeof a === 'number' && typeof b === 'number') return a < b ? 'older' : 'other';
  if (typeof a === 'string' && typeof b === 'string') {
    const x = parseSnapshot(a);
    const y = parseSnapshot(b);
    if (x && y && (x.xmax < y.xmax || (x.xmax === y.xmax && x.running > y.running))) return 'older';
  }
  return 'other';
}

function parseSnapshot(s: string): { xmax: number; running: number } | null {
  const parts = s.split(':');
  if (parts.length !== 3) return null;
  const xmax = Number(parts[1]);
  if (!Number.isSafeInteger(xmax)) return null;
  return { xmax, running: parts[2] === '' ? 0 : parts[2]!.split(',').length };
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

/** What other connections have committed, now, for ReadCache.through; null where nothing may be kept. */
export function readSnapshot(store: Store): StoreVersion | null | Promise<StoreVersion | null> {
  return store.othersCommits();
}

/**
 * How long a request's snapshot serves its later lookups. A request's work between its
 * authentication and its reads takes microseconds; one that waits (a long-poll, a batch of calls)
 * takes a new snapshot for what it reads afterwards.
 */
const PIN_MS = 50;

const pinned = new WeakMap<object, { snapshot: StoreVersion; at: number }>();

/**
 * Ties a request's snapshot to its principal. Requests of one key share their principal, so a
 * snapshot only ever replaces an older one (or one past its time): a slow request pinning what
 * it read earlier must not hide another node's commit from a request that already saw it.
 */
export function pinSnapshot(owner: object, snapshot: StoreVersion | null): void {
  if (snapshot === null) return;
  const now = performance.now();
  const pin = pinned.get(owner);
  if (pin !== undefined && now - pin.at < PIN_MS && compareVersions(snapshot, pin.snapshot) === 'older') return;
  pinned.set(owner, { snapshot, at: now });
}

/** The snapshot pinned to `owner` in the last moments, else a fresh one. */
export function pinnedSnapshot(store: Store, owner: object): StoreVersion | null | Promise<StoreVersion | null> {
  const pin = pinned.get(owner);
  return pin !== undefined && performance.now() - pin.at < PIN_MS ? pin.snapshot : readSnapshot(store);
}
