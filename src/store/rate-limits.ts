import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import type { Dialect } from './db.js';
import type { DB } from './schema.js';

/**
 * Token buckets shared by every node: a bucket holds at most `capacity` tokens and gains
 * `refillPerSecond` of them continuously; a hit takes one token or is refused.
 *
 * One atomic statement takes n tokens (1, or a node's lease: LeasedBuckets below):
 *   INSERT … ON CONFLICT(bucket) DO UPDATE SET tokens = refilled - n, updated_ms = now
 *   WHERE refilled >= n RETURNING tokens
 * A row comes back only when the hit took its tokens; no row means refused (and the bucket is left
 * as it was: refill is computed from `updated_ms`, so nothing is lost by not writing).
 *
 * Where the buckets live:
 * - SQLite: NOT the main database (every write there is answered after a sync of its log, so a
 *   write per request would hold every answer for a sync) but `rate-limits.sqlite` beside it in DATA_DIR, WAL and synchronous=OFF:
 *   counters are not precious. Every process on the machine opens the same file, so they share.
 * - PostgreSQL: the `rate_limits` table of the main database (migration 002; it cannot portably
 *   be made UNLOGGED after creation), written through a small pool of its own whose sessions run
 *   `synchronous_commit=off`, so a hit never waits for a WAL flush. Time is the database's clock,
 *   so nodes with skewed clocks still agree.
 */

export interface RateLimitResult {
  allowed: boolean;
  /** Whole seconds until a refused hit would pass (≥ 1 when refused, 0 when allowed). */
  retryAfterSeconds: number;
  /** Whole tokens left after this hit. */
  remaining: number;
}

export interface BucketSpec {
  capacity: number;
  refillPerSecond: number;
}

export interface RateLimitStore {
  readonly dialect: Dialect;
  /**
   * Takes `n` tokens (default 1) if the bucket holds at least `need` (default `n`) when the hit
   * lands; else takes none and refuses.
   */
  hit(bucket: string, spec: BucketSpec, n?: number, need?: number): Promise<RateLimitResult>;
  /** Deletes buckets untouched for `idleMs` (they are full again); returns how many. */
  prune(idleMs: number): Promise<number>;
  close(): Promise<void>;
}

export interface RateLimitStoreOptions {
  dialect: Dialect;
  dataDir: string;
  databaseUrl?: string | undefined;
}

export const RATE_LIMIT_FILE = 'rate-limits.sqlite';

/** Float slack: PostgreSQL `real` keeps ~7 digits, and k × (1/12 s) need not sum to exactly 1. */
const EPS = 1e-3;

function refused(tokens: number, updatedMs: number, nowMs: number, spec: BucketSpec): RateLimitResult {
  const refilled = Math.min(spec.capacity, tokens + (Math.max(0, nowMs - updatedMs) / 1000) * spec.refillPerSecond);
  const wait = (1 - EPS - refilled) / spec.refillPerSecond;
  return { allowed: false, retryAfterSeconds: Math.max(1, Math.ceil(wait)), remaining: 0 };
}

function allowed(tokens: number): RateLimitResult {
  return { allowed: true, retryAfterSeconds: 0, remaining: Math.max(0, Math.floor(tokens + EPS)) };
}

function checkSpec(spec: BucketSpec, n: number, need: number): void {
  if (!(spec.capacity >= 1) || !(spec.refillPerSecond > 0)) throw new Error(`Bad bucket ${JSON.stringify(spec)}`);
  if (!Number.isInteger(n) || n < 1 || n > spec.capacity) throw new Error(`Bad take ${n} from ${JSON.stringify(spec)}`);
  if (!Number.isInteger(need) || need < n) throw new Error(`Bad need ${need} for a take of ${n}`);
}

class SqliteRateLimits implements RateLimitStore {
  readonly dialect = 'sqlite' as const;
  private readonly db: Database.Database;
  private readonly hitStmt: Database.Statement;
  private readonly readStmt: Database.Statement;
  private readonly pruneStmt: Database.Statement;

  constructor(file: string) {
    this.db = new Database(file);
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = OFF');
    // better-sqlite3 is synchronous: a lock wait blocks the event loop, so keep it short and
    // fail open (the caller lets the request through) rather than stall.
    this.db.pragma('busy_timeout = 500');
    this.db.exec(`create table if not exists rate_limits (
      bucket text primary key, tokens real not null, updated_ms integer not null) without rowid`);
    this.hitStmt = this.db.prepare(`
      insert into rate_limits (bucket, tokens, updated_ms) values (@bucket, @capacity - @n, @now)
      on conflict (bucket) do update set
        tokens = max(0.0, min(@capacity, tokens + max(0, excluded.updated_ms - updated_ms) / 1000.0 * @rate) - @n),
        updated_ms = max(updated_ms, excluded.updated_ms)
      where min(@capacity, tokens + max(0, excluded.updated_ms - updated_ms) / 1000.0 * @rate) >= @need - @eps
      returning tokens`);
    this.readStmt = this.db.prepare('select tokens, updated_ms from rate_limits where bucket = ?');
    this.pruneStmt = this.db.prepare('delete from rate_limits where updated_ms < ?');
  }

  async hit(bucket: string, spec: BucketSpec, n = 1, need = n): Promise<RateLimitResult> {
    checkSpec(spec, n, need);
    const now = Date.now();
    const row = this.hitStmt.get({ bucket, capacity: spec.capacity, rate: spec.refillPerSecond, now, eps: EPS, n, need }) as { tokens: number } | undefined;
    if (row) return allowed(row.tokens);
    const cur = this.readStmt.get(bucket) as { tokens: number; updated_ms: number } | undefined;
    return cur ? refused(cur.tokens, cur.updated_ms, now, spec) : { allowed: false, retryAfterSeconds: 1, remaining: 0 };
  }

  async prune(idleMs: number): Promise<number> {
    return this.pruneStmt.run(Date.now() - idleMs).changes;
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}

/** The database's clock in epoch milliseconds; `now()` is fixed for the statement. */
const PG_NOW_MS = sql<number>`(extract(epoch from now()) * 1000)::bigint`;

class PostgresRateLimits implements RateLimitStore {
  readonly dialect = 'postgres' as const;
  private readonly db: Kysely<DB>;

  constructor(databaseUrl: string) {
    const pool = new pg.Pool({
      connectionString: databaseUrl,
      max: 4,
      // Counters are not precious: do not wait for the WAL flush on every hit.
      options: '-c synchronous_commit=off',
      // A stuck database must not hold requests: the caller fails open on error.
      connectionTimeoutMillis: 2000,
      statement_timeout: 2000,
    });
    pool.on('error', () => {});
    this.db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
  }

  async hit(bucket: string, spec: BucketSpec, n = 1, need = n): Promise<RateLimitResult> {
    checkSpec(spec, n, need);
    const cap = sql`${spec.capacity}::float8`;
    const take = sql`${n}::float8`;
    const rate = sql`${spec.refillPerSecond}::float8`;
    const refilled = sql`least(${cap}, r.tokens + greatest(0, excluded.updated_ms - r.updated_ms) / 1000.0 * ${rate})`;
    const res = await sql<{ tokens: number }>`
      insert into rate_limits as r (bucket, tokens, updated_ms)
      values (${bucket}, ${cap} - ${take}, ${PG_NOW_MS})
      on conflict (bucket) do update set
        tokens = greatest(0, ${refilled} - ${take}),
        updated_ms = greatest(r.updated_ms, excluded.updated_ms)
      where ${refilled} >= ${need - EPS}::float8
      returning tokens`.execute(this.db);
    const row = res.rows[0];
    if (row) return allowed(Number(row.tokens));
    const cur = await sql<{ tokens: number; updated_ms: number; now_ms: number }>`
      select tokens, updated_ms, ${PG_NOW_MS} as now_ms from rate_limits where bucket = ${bucket}`.execute(this.db);
    const c = cur.rows[0];
    return c ? refused(Number(c.tokens), Number(c.updated_ms), Number(c.now_ms), spec) : { allowed: false, retryAfterSeconds: 1, remaining: 0 };
  }

  async prune(idleMs: number): Promise<number> {
    const res = await sql`delete from rate_limits where updated_ms < ${PG_NOW_MS} - ${Math.floor(idleMs)}::bigint`.execute(this.db);
    return Number(res.numAffectedRows ?? 0n);
  }

  async close(): Promise<void> {
    await this.db.destroy();
  }
}

/**
 * The most tokens a node takes from a shared bucket at once. Bounded first by LEASE_SHARE (the
 * default API bucket of 30 is never leased from); this cap binds only generous buckets. At 64,
 * a key read 2,000 times a second took 31 leases a second on PostgreSQL, each a commit that
 * drops what every node kept (read-cache.ts).
 */
const LEASE_MAX = 1_024;
/** A lease takes at most this share of what the bucket had left, so only a bucket far from empty is leased from. */
const LEASE_SHARE = 1 / 16;
/** Leased tokens not used within this long are dropped (they count as spent). */
const LEASE_MS = 1_000;
/** Past this many buckets known, expired leases are swept before another is kept. */
const LEASES_KEPT = 10_000;

interface Lease {
  /** Tokens taken from the shared bucket and not spent yet. */
  tokens: number;
  /** What the shared bucket held after the lease was taken. */
  shared: number;
  until: number;
}

/**
 * Leases over a shared store: where a bucket is far from empty, a hit takes a few tokens at once
 * (at most 1/16 of what is left, ≤ 1,024) and the next hits on this node spend them without a
 * statement. A hot principal with a generous limit then costs a statement per many requests,
 * not one each (one was a sixth of an authenticated read's CPU). Exactness is kept where it
 * matters: a bucket with fewer than 32 tokens left is never leased from, so every hit near the
 * limit is one atomic statement as before, and no node can spend a token the bucket did not
 * hold. What it costs: leased tokens a node does not use within a second are spent for nothing,
 * and `RateLimit-Remaining` is this node's view (the bucket after its lease, plus what it holds).
 */
class LeasedBuckets implements RateLimitStore {
  private readonly leases = new Map<string, Lease>();
  /** The take from the shared store under way for a bucket: one at a time, so no lease replaces another. */
  private readonly taking = new Map<string, Promise<unknown>>();

  constructor(private readonly shared: RateLimitStore) {}

  get dialect(): Dialect {
    return this.shared.dialect;
  }

  async hit(bucket: string, spec: BucketSpec, n = 1): Promise<RateLimitResult> {
    if (n !== 1) return this.shared.hit(bucket, spec, n);
    for (;;) {
      const lease = this.leases.get(bucket);
      if (lease && lease.tokens > 0 && Date.now() < lease.until) {
        lease.tokens--;
        return { allowed: true, retryAfterSeconds: 0, remaining: lease.shared + lease.tokens };
      }
      // Hits arriving together (an MCP batch) wait for the one take under way and spend from
      // what it leased, rather than each taking (and dropping) a lease of its own.
      const under = this.taking.get(bucket);
      if (!under) break;
      await under.catch(() => undefined);
    }
    const take = this.take(bucket, spec);
    this.taking.set(bucket, take);
    try {
      return await take;
    } finally {
      if (this.taking.get(bucket) === take) this.taking.delete(bucket);
    }
  }

  /** One hit on the shared bucket, taking a lease with it when the bucket is far from empty. */
  private async take(bucket: string, spec: BucketSpec): Promise<RateLimitResult> {
    const now = Date.now();
    // Any lease here is spent or past its time: replacing it loses nothing unspent.
    const lease = this.leases.get(bucket);
    if (lease && now < lease.until) {
      const extra = Math.min(LEASE_MAX, Math.floor(lease.shared * LEASE_SHARE), spec.capacity - 1);
      if (extra >= 2) {
        // Sized by what the bucket held at this node's last take (up to LEASE_MS ago), so taken
        // only if the bucket still holds enough for it to be a 1/16 share now: another node may
        // have spent most of it since (attack of session o: 1,025 of 1,100 tokens leased).
        const r = await this.shared.hit(bucket, spec, 1 + extra, Math.max(1 + extra, Math.ceil(extra / LEASE_SHARE)));
        if (r.allowed) {
          this.leases.set(bucket, { tokens: extra, shared: r.remaining, until: now + LEASE_MS });
          return { ...r, remaining: r.remaining + extra };
        }
      }
    }
    const r = await this.shared.hit(bucket, spec, 1);
    // What the bucket holds now decides whether the next hit may lease.
    if (r.allowed) {
      if (this.leases.size >= LEASES_KEPT) this.dropExpired(now);
      this.leases.set(bucket, { tokens: 0, shared: r.remaining, until: now + LEASE_MS });
    } else this.leases.delete(bucket);
    return r;
  }

  private dropExpired(now: number): void {
    for (const [bucket, lease] of this.leases) if (lease.until <= now) this.leases.delete(bucket);
  }

  async prune(idleMs: number): Promise<number> {
    this.dropExpired(Date.now());
    return this.shared.prune(idleMs);
  }

  close(): Promise<void> {
    this.leases.clear();
    return this.shared.close();
  }
}

/** Opens the bucket store for the deployment's engine (see the module comment for where they live). */
export function openRateLimitStore(opts: RateLimitStoreOptions): RateLimitStore {
  if (opts.dialect === 'postgres') {
    if (!opts.databaseUrl) throw new Error('PostgreSQL rate limits need the database URL');
    return new LeasedBuckets(new PostgresRateLimits(opts.databaseUrl));
  }
  fs.mkdirSync(opts.dataDir, { recursive: true });
  return new LeasedBuckets(new SqliteRateLimits(path.join(opts.dataDir, RATE_LIMIT_FILE)));
}
