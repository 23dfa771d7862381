import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { sql, type Kysely, type Transaction } from 'kysely';
import type { Store } from '../store/db.js';
import type { DB } from '../store/schema.js';
import { inTransaction } from '../store/tx.js';
import { indexPagesOfAnyWorkspace } from './indexer.js';

/**
 * Re-indexing after an upgrade, in the background (issue 12).
 *
 * Migrations hold no application code: a migration that leaves live pages without index rows
 * requests this job with a `maintenance_jobs` row (migration 010), and the server does the work
 * after it starts serving. Pages are indexed in page id order, `batch` pages per transaction, each
 * from its own row with `indexPages` (the code every page write uses). The batch's index rows and
 * the job's progress (`last_id`, `done`, `total`) commit together, so after a stop or a crash the
 * job resumes after the last page of the last committed batch, losing and repeating nothing.
 *
 * While it runs the service is ready and serves: keyword search, backlinks and vectors miss the
 * pages not reached yet. /readyz shows the state and progress; the log shows start, progress
 * (every ten seconds), errors (retried with a back-off, never skipped: no page is left out of
 * the index) and the end.
 *
 * One runner per deployment: a node claims the job with a lease (`claimed_by`, `claimed_until`)
 * renewed by every batch, under a row lock on PostgreSQL, so two nodes never both run it; a node
 * that finds another's live lease waits for it to lapse (the runner stopped uncleanly) and then
 * takes over from `last_id`. A node that stops cleanly gives its lease back at once. Each batch
 * also locks the workspaces it indexes, as page writes do, so a write and the job never interleave
 * on a page.
 */

export const REINDEX_JOB = 'reindex_pages';

/** `maintenance_jobs` (migration 010); only this module reads or writes it. */
export interface MaintenanceJobsTable {
  name: string;
  requested_at: string;
  started_at: string | null;
  finished_at: string | null;
  /** The last page id indexed: the job goes on after it. */
  last_id: string | null;
  done: number;
  total: number | null;
  claimed_by: string | null;
  claimed_until: string | null;
  last_error: string | null;
}

type JobDB = DB & { maintenance_jobs: MaintenanceJobsTable };

export type ReindexState = 'none' | 'pending' | 'running' | 'finished' | 'unknown';

export interface ReindexStatus {
  /** none: no job was requested; pending: requested, not started; running; finished. */
  state: ReindexState;
  done: number;
  total: number | null;
  started_at: string | null;
  finished_at: string | null;
  /** The last batch's failure (the job retries it); null once a batch succeeds. */
  last_error: string | null;
}

export interface JobLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export interface ReindexOptions {
  /** Pages per transaction, at most (fewer when pages are slow to index; see targetMs). */
  batch?: number;
  /** What a batch should take: writers of its workspaces, and on SQLite every query, wait for it. */
  targetMs?: number;
  /** How long a claim holds without a batch renewing it. */
  leaseMs?: number;
  /** Rest between batches, at least (and at least half the last batch's time), so requests get the database. */
  pauseMs?: number;
  nodeId?: string;
}

const DEFAULT_BATCH = 200;
const DEFAULT_LEASE_MS = 60_000;
const DEFAULT_TARGET_MS = 100;
const DEFAULT_PAUSE_MS = 5;
const PROGRESS_LOG_MS = 10_000;
const MAX_BACKOFF_MS = 60_000;
/** A node waiting for another's lease looks again at least this often. */
const MAX_WAIT_MS = 30_000;

const silent: JobLog = { info: () => {}, warn: () => {}, error: () => {} };

type Step =
  | { kind: 'idle' }
  | { kind: 'finished'; done: number }
  | { kind: 'batch'; indexed: number; before: number; done: number; total: number; resumed: boolean }
  | { kind: 'wait'; ms: number; holder: string };

export function statusOf(row: MaintenanceJobsTable | undefined): ReindexStatus {
  if (!row) return { state: 'none', done: 0, total: null, started_at: null, finished_at: null, last_error: null };
  const state: ReindexState = row.finished_at !== null ? 'finished' : row.started_at !== null ? 'running' : 'pending';
  return {
    state,
    done: Number(row.done),
    total: row.total === null ? null : Number(row.total),
    started_at: row.started_at,
    finished_at: row.finished_at,
    last_error: row.last_error,
  };
}

export class ReindexJob {
  readonly nodeId: string;
  /** Batches this node has committed (operators and tests). */
  batches = 0;
  private readonly batch: number;
  private readonly leaseMs: number;
  private readonly pauseMs: number;
  private readonly targetMs: number;
  /** Pages in the next batch: starts small and follows what a page costs here. */
  private size: number;
  private lastBatchMs = 0;
  private log: JobLog = silent;
  private stopped = true;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private failures = 0;
  private holding = false;
  private waitingLogged = false;
  private lastProgressLog = 0;
  private startedAt = 0;
  /** 'none' and 'finished' never change in a running process: no query for them. */
  private settled: ReindexStatus | undefined;

  constructor(
    private readonly store: Store,
    opts: ReindexOptions = {},
  ) {
    this.batch = opts.batch ?? DEFAULT_BATCH;
    this.leaseMs = opts.leaseMs ?? DEFAULT_LEASE_MS;
    this.pauseMs = opts.pauseMs ?? DEFAULT_PAUSE_MS;
    this.targetMs = opts.targetMs ?? DEFAULT_TARGET_MS;
    this.size = Math.min(this.batch, 20);
    this.nodeId = opts.nodeId ?? `${os.hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
  }

  private get jobs(): Kysely<JobDB> {
    return this.store.db as unknown as Kysely<JobDB>;
  }

  /** Starts working in the background (never waits for the work); progress goes to `log`. */
  start(log?: JobLog): void {
    if (log) this.log = log;
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(0);
  }

  /** Stops after the batch in hand and gives the claim back, so a restart resumes at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
    if (this.holding) {
      this.holding = false;
      await this.jobs
        .updateTable('maintenance_jobs')
        .set({ claimed_by: null, claimed_until: null })
        .where('name', '=', REINDEX_JOB)
        .where('claimed_by', '=', this.nodeId)
        .execute()
        .catch(() => undefined);
    }
  }

  /** The job as the table says (any node's work), for /readyz. */
  async status(): Promise<ReindexStatus> {
    if (this.settled) return { ...this.settled };
    const row = await this.jobs.selectFrom('maintenance_jobs').selectAll().where('name', '=', REINDEX_JOB).executeTakeFirst();
    const s = statusOf(row);
    if (s.state === 'none' || s.state === 'finished') this.settled = s;
    return s;
  }

  /** Runs the job to its end here, ignoring other nodes' claims (tests, operators, benchmarks). */
  async runToEnd(): Promise<number> {
    let total = 0;
    for (;;) {
      const s = await this.step(true);
      if (s.kind === 'batch') total += s.indexed;
      else return total;
    }
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.running = this.tick().finally(() => {
        this.running = undefined;
      });
    }, ms);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    let next: number | null;
    try {
      const s = await this.step(false);
      this.failures = 0;
      next = this.after(s);
    } catch (err) {
      this.failures++;
      const ms = Math.min(MAX_BACKOFF_MS, 1000 * 2 ** Math.min(this.failures - 1, 10));
      const message = err instanceof Error ? err.message : String(err);
      this.log.error(
        { err, job: REINDEX_JOB, failures: this.failures, retry_in_ms: ms },
        `reindex: a batch failed (retried in ${Math.round(ms / 1000)} s): ${message}`,
      );
      await this.jobs
        .updateTable('maintenance_jobs')
        .set({ last_error: message.slice(0, 500) })
        .where('name', '=', REINDEX_JOB)
        .execute()
        .catch(() => undefined);
      next = ms;
    }
    if (next !== null) this.schedule(next);
  }

  /** Logs what a step did; the delay before the next step, or null when there is nothing more. */
  private after(s: Step): number | null {
    const now = Date.now();
    switch (s.kind) {
      case 'idle':
        return null;
      case 'finished':
        this.holding = false;
        this.log.info({ job: REINDEX_JOB, done: s.done, ms: this.startedAt ? now - this.startedAt : undefined }, `reindex: finished, ${s.done} pages indexed`);
        return null;
      case 'wait':
        if (!this.waitingLogged) {
          this.waitingLogged = true;
          this.log.info({ job: REINDEX_JOB, holder: s.holder }, 'reindex: another node runs the job; this one waits');
        }
        return Math.min(s.ms, MAX_WAIT_MS);
      case 'batch':
        // The job takes at most about two thirds of the database's time; requests get the rest.
        return Math.max(this.pauseMs, Math.round(this.lastBatchMs / 2));
    }
  }

  /**
   * One batch in one transaction: claim (or renew), index the next pages after `last_id`, record
   * progress. With no page left, marks the job finished.
   */
  private async step(force: boolean): Promise<Step> {
    const pg = this.store.dialect === 'postgres';
    if (!force) {
      // Look without a lock first: a waiting node must not queue behind the runner's batches.
      const seen = await this.jobs.selectFrom('maintenance_jobs').selectAll().where('name', '=', REINDEX_JOB).executeTakeFirst();
      if (!seen || seen.finished_at !== null) return { kind: 'idle' };
      const wait = this.claimedElsewhere(seen);
      if (wait) return wait;
    }
    const t0 = Date.now();
    const result = await inTransaction(this.store, null, async (trx): Promise<Step> => {
      const jobs = trx as unknown as Transaction<JobDB>;
      let q = jobs.selectFrom('maintenance_jobs').selectAll().where('name', '=', REINDEX_JOB);
      if (pg) q = q.forUpdate();
      const job = await q.executeTakeFirst();
      if (!job || job.finished_at !== null) return { kind: 'idle' };
      if (!force) {
        const wait = this.claimedElsewhere(job);
        if (wait) return wait;
      }
      const now = new Date();
      const at = now.toISOString();

      const next = await trx
        .selectFrom('pages')
        .select(['id', 'workspace_id'])
        .where('deleted_at', 'is', null)
        .where('id', '>', job.last_id ?? '')
        .orderBy('id')
        .limit(this.size)
        .execute();
      const done = Number(job.done);
      if (next.length === 0) {
        await jobs
          .updateTable('maintenance_jobs')
          .set({ finished_at: at, started_at: job.started_at ?? at, total: done, claimed_by: null, claimed_until: null, last_error: null })
          .where('name', '=', REINDEX_JOB)
          .execute();
        return { kind: 'finished', done };
      }

      // Page writes lock their workspace (inTransaction); so does the batch, in one order.
      const workspaces = [...new Set(next.map((p) => p.workspace_id))].sort();
      if (pg) await sql`select id from workspaces where id in (${sql.join(workspaces)}) order by id for update`.execute(trx);
      // Read under the locks: the rows as they are now (a page deleted meanwhile was unindexed by its delete).
      const rows = await trx
        .selectFrom('pages')
        .selectAll()
        .where(
          'id',
          'in',
          next.map((p) => p.id),
        )
        .where('deleted_at', 'is', null)
        .orderBy('id')
        .execute();
      await indexPagesOfAnyWorkspace(trx, rows);

      const lastId = next[next.length - 1]!.id;
      const left = await trx
        .selectFrom('pages')
        .select(sql<number>`count(*)`.as('n'))
        .where('deleted_at', 'is', null)
        .where('id', '>', lastId)
        .executeTakeFirstOrThrow();
      const nowDone = done + rows.length;
      const total = nowDone + Number(left.n);
      await jobs
        .updateTable('maintenance_jobs')
        .set({
          started_at: job.started_at ?? at,
          last_id: lastId,
          done: nowDone,
          total,
          claimed_by: this.nodeId,
          claimed_until: new Date(now.getTime() + this.leaseMs).toISOString(),
          last_error: null,
        })
        .where('name', '=', REINDEX_JOB)
        .execute();
      return { kind: 'batch', indexed: rows.length, before: done, done: nowDone, total, resumed: job.started_at !== null };
    });

    if (result.kind === 'batch') {
      const r = result;
      this.lastBatchMs = Date.now() - t0;
      if (r.indexed > 0) {
        const perPage = Math.max(this.lastBatchMs, 1) / r.indexed;
        this.size = Math.max(1, Math.min(this.batch, Math.floor(this.targetMs / perPage)));
      }
      const first = !this.holding;
      this.batches++;
      this.holding = true;
      this.waitingLogged = false;
      const now = Date.now();
      if (first) {
        this.startedAt = now;
        this.lastProgressLog = now;
        this.log.info(
          { job: REINDEX_JOB, node: this.nodeId, done: r.before, total: r.total },
          r.resumed ? `reindex: resumed at ${r.before} of ${r.total} pages` : `reindex: started, ${r.total} pages to index (the service serves meanwhile)`,
        );
      } else if (now - this.lastProgressLog >= PROGRESS_LOG_MS) {
        this.lastProgressLog = now;
        this.log.info({ job: REINDEX_JOB, done: r.done, total: r.total }, `reindex: ${r.done} of ${r.total} pages`);
      }
    }
    return result;
  }

  /** A live claim of another node: how long to wait before looking again. */
  private claimedElsewhere(job: MaintenanceJobsTable): Step | null {
    if (job.claimed_by === null || job.claimed_by === this.nodeId || job.claimed_until === null) return null;
    const left = Date.parse(job.claimed_until) - Date.now();
    if (!(left > 0)) return null;
    // The claim may have been taken while this node held it (a batch longer than the lease).
    this.holding = false;
    return { kind: 'wait', ms: left + 100, holder: job.claimed_by };
  }
}
