import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { sql } from 'kysely';
import { ulid } from 'ulid';
import { importFiles, importsFinished } from '../../metrics.js';
import { decideImport, decideImportRead } from '../../policy/import.js';
import { enforce } from '../../policy/pages.js';
import type { Principal } from '../../policy/principal.js';
import { minLevel, isLevel } from '../../policy/sensitivity.js';
import type { Executor, Store } from '../../store/db.js';
import type { ImportJobsTable } from '../../store/schema.js';
import { afterCommitIfAny, inTransaction } from '../../store/tx.js';
import { appendAudit } from '../audit.js';
import type { CoreContext } from '../context.js';
import { isDatabaseUnavailable, notFound, ServiceError } from '../errors.js';
import { parseSpaceId } from '../paths.js';
import { liveKeys, loadPrincipal } from '../principal-loader.js';
import { applyImportBatch } from './apply.js';
import type { StagedImport } from './entries.js';
import { IMPORT_LIMITS } from './limits.js';
import { emptyReport, noteFiles, parseReport, type ImportReport } from './report.js';

/**
 * An import as a job (migration 014). Accepting one stores its row and its files in one
 * transaction; then batches of IMPORT_LIMITS.batchFiles are applied, each in its own
 * transaction with its own commit, which also deletes the batch's staged files and advances the
 * job. A crash loses at most the batch in flight (rolled back) and the job is picked up again
 * when its lease runs out, by this node after a restart or by another: nothing accepted is lost
 * and nothing is applied twice.
 */

export type ImportJob = Omit<ImportJobsTable, 'done' | 'report'> & { done: number; report: ImportReport };

/** How long a node holds a job between batches before another may take it over. */
const LEASE_MS = 30_000;
/** How often a node looks for jobs left behind (a crashed node's, or queued by another). */
const POLL_MS = 10_000;
/** PostgreSQL's planner statistics are refreshed after an import of at least this many pages. */
const ANALYZE_AFTER = 200;

const newImportId = () => `im_${ulid().toLowerCase()}`;

function toJob(row: ImportJobsTable): ImportJob {
  return { ...row, done: Number(row.done), report: parseReport(row.report) };
}

/** Stores an accepted import (job row and staged files, one transaction) and answers the job. */
export async function acceptImport(ctx: CoreContext, p: Principal, spaceRaw: string, staged: StagedImport): Promise<ImportJob> {
  const space = parseSpaceId(spaceRaw);
  enforce(decideImport(p, space));
  const now = new Date().toISOString();
  const report = emptyReport();
  noteFiles(report, staged.skipped, staged.renamed);
  const row: ImportJobsTable = {
    id: newImportId(),
    workspace_id: p.workspaceId,
    principal_id: p.id,
    via: p.via,
    key_id: p.keyId,
    key_ceiling: p.keyCeiling,
    space,
    status: 'queued',
    total: staged.files.length,
    done: 0,
    report: JSON.stringify(report),
    error: null,
    created_at: now,
    started_at: null,
    finished_at: null,
    claimed_by: null,
    claimed_until: null,
  };
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    await trx.insertInto('import_jobs').values(row).execute();
    for (let i = 0; i < staged.files.length; i += 500) {
      await trx
        .insertInto('import_files')
        .values(staged.files.slice(i, i + 500).map((f, j) => ({ job_id: row.id, ord: i + j, path: f.path, content: f.content })))
        .execute();
    }
  });
  importFiles.inc({ outcome: 'skipped' }, staged.skipped.length);
  return toJob(row);
}

/** An import's progress and report, to its importer or an owner. */
export async function getImport(ctx: CoreContext, p: Principal, id: string): Promise<ImportJob> {
  const row = await ctx.store.db.selectFrom('import_jobs').selectAll().where('id', '=', id).where('workspace_id', '=', p.workspaceId).executeTakeFirst();
  if (!row) throw notFound('No such import');
  enforce(decideImportRead(p, { principalId: row.principal_id }));
  return toJob(row);
}

/** The importer as it is now, acting through the credential it imported with (null: it no longer may). */
async function importer(db: Executor, job: ImportJobsTable, now: Date): Promise<Principal | null> {
  const p = await loadPrincipal(db, job.workspace_id, job.principal_id, now);
  if (!p) return null;
  if (job.key_id !== null && job.via === 'key' && !(await liveKeys(db, job.workspace_id, [job.key_id], now)).has(job.key_id)) return null;
  if (job.via !== 'key' && (await lockedSince(db, job))) return null;
  const keyCeiling = isLevel(job.key_ceiling) ? job.key_ceiling : null;
  return { ...p, via: job.via as Principal['via'], keyId: job.key_id, keyCeiling: keyCeiling === null ? p.keyCeiling : minLevel(keyCeiling, p.keyCeiling) };
}

/**
 * A lockdown after the import was accepted ends the sessions it was made from (every session
 * older than the lockdown but the one that locked down): a job made without a key stops too,
 * unless it is the person who locked down. (A key's job stops by the key's epoch.)
 */
async function lockedSince(db: Executor, job: ImportJobsTable): Promise<boolean> {
  const ws = await db
    .selectFrom('workspaces')
    .leftJoin('sessions', 'sessions.id', 'workspaces.locked_by_session')
    .select(['workspaces.locked_at', 'sessions.principal_id as locker'])
    .where('workspaces.id', '=', job.workspace_id)
    .executeTakeFirst();
  if (!ws?.locked_at || Date.parse(ws.locked_at) <= Date.parse(job.created_at)) return false;
  return ws.locker !== job.principal_id;
}

class LostLease extends Error {}

/** Tries of a batch that meets a busy database before the import fails. */
const BUSY_RETRIES = 5;

/** SQLite busy or locked; PostgreSQL serialization failure, deadlock, lock not available. */
function isTransient(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (/^SQLITE_(BUSY|LOCKED)/.test(code) || code === '40001' || code === '40P01' || code === '55P03');
}

/**
 * Runs imports on one node. `run` applies one job to its end (the request that accepted a small
 * import awaits it); `kick` starts queued jobs in the background; a timer takes over jobs whose
 * node stopped holding them. `stop` waits for the batch in flight and gives the leases back.
 */
export class ImportRunner {
  readonly node = `node_${ulid().toLowerCase()}`;
  private readonly running = new Map<string, Promise<ImportJob | null>>();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly ctx: CoreContext) {}

  start(): void {
    if (this.timer || this.stopped) return;
    this.kick();
    this.timer = setInterval(() => this.kick(), POLL_MS);
    this.timer.unref();
  }

  /**
   * Stops after each job's batch in flight, then gives this node's leases back (the lease runs
   * out now, not in LEASE_MS), so another node's next look, or this one's after a restart, takes
   * the jobs over at once. A lease the database could not be told about runs out by itself.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await Promise.allSettled([...this.running.values()]);
    await this.ctx.store.db
      .updateTable('import_jobs')
      .set({ claimed_by: null, claimed_until: new Date().toISOString() })
      .where('claimed_by', '=', this.node)
      .where('status', '=', 'running')
      .execute()
      .catch((err: unknown) => this.ctx.log?.warn({ err }, 'giving back import leases failed; they run out by themselves'));
  }

  /** Starts every job that is queued or whose lease ran out, in the background. */
  kick(): void {
    if (this.stopped) return;
    void this.pending().then(
      (ids) => {
        for (const id of ids) void this.run(id).catch((err: unknown) => this.ctx.log?.warn({ err, import: id }, 'import failed'));
      },
      (err: unknown) => this.ctx.log?.warn({ err }, 'looking for imports failed'),
    );
  }

  private async pending(): Promise<string[]> {
    const now = new Date().toISOString();
    const rows = await this.ctx.store.db
      .selectFrom('import_jobs')
      .select('id')
      .where((eb) => eb.or([eb('status', '=', 'queued'), eb.and([eb('status', '=', 'running'), eb('claimed_until', '<', now)])]))
      .orderBy('created_at')
      .limit(20)
      .execute();
    return rows.map((r) => r.id);
  }

  /**
   * Applies a job to its end if this node can claim it; answers it then (null: another node
   * holds it). `caller`: the principal of the request that accepted it, when it runs at once.
   */
  run(id: string, caller?: Principal): Promise<ImportJob | null> {
    const current = this.running.get(id);
    if (current) return current;
    const work = this.apply(id, caller).finally(() => this.running.delete(id));
    this.running.set(id, work);
    return work;
  }

  private async claim(id: string): Promise<boolean> {
    const now = new Date();
    const res = await this.ctx.store.db
      .updateTable('import_jobs')
      .set({
        status: 'running',
        claimed_by: this.node,
        claimed_until: new Date(now.getTime() + LEASE_MS).toISOString(),
        started_at: sql<string>`coalesce(started_at, ${now.toISOString()})`,
      })
      .where('id', '=', id)
      .where((eb) => eb.or([eb('status', '=', 'queued'), eb.and([eb('status', '=', 'running'), eb('claimed_until', '<', now.toISOString())])]))
      .executeTakeFirst();
    return Number(res.numUpdatedRows) === 1;
  }

  private async apply(id: string, caller?: Principal): Promise<ImportJob | null> {
    if (this.stopped || !(await this.claim(id))) return null;
    try {
      // A turn of the event loop before each batch: better-sqlite3 answers synchronously, so
      // without it a background job would hold the process (every other request) to its end.
      // On stop a background job ends after its batch in hand; one a request awaits (a single
      // batch, `caller` set) runs to its end, since shutdown lets requests in flight finish.
      while ((caller !== undefined || !this.stopped) && (await yieldToLoop(), await this.batchRetrying(id, caller))) {
        /* next batch */
      }
    } catch (e) {
      // The database out of reach (or no longer acknowledging writes): the job stays running
      // under its lease, and this node, restarted, or another one takes it up again.
      if (e instanceof LostLease) return null;
      if (isDatabaseUnavailable(e)) {
        if (caller) throw e; // the request that awaits it answers 503
        return null;
      }
      await this.fail(id, e instanceof ServiceError ? e.message : 'The import stopped on an internal error; the pages of the batches before it are in');
      if (!(e instanceof ServiceError)) this.ctx.log?.warn({ err: e, import: id }, 'import failed');
    }
    const row = await this.ctx.store.db.selectFrom('import_jobs').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    if (row.status === 'done' && this.ctx.store.dialect === 'postgres') {
      const report = parseReport(row.report);
      // Without fresh statistics the planner keeps its empty-table plans until autovacuum runs.
      if (report.created + report.updated >= ANALYZE_AFTER) {
        await sql`analyze pages, page_sections, page_keys, page_links, page_tags, page_versions, git_objects`.execute(this.ctx.store.db);
      }
    }
    return toJob(row);
  }

  /**
   * A batch, tried again when the database was only busy: another process holding SQLite's
   * write lock past the busy timeout (the operator's command line beside a running service), or
   * PostgreSQL breaking a deadlock. The batch rolled back whole, so trying again is safe.
   */
  private async batchRetrying(id: string, caller?: Principal): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.batch(id, caller);
      } catch (e) {
        if (attempt >= BUSY_RETRIES || !isTransient(e)) throw e;
        this.ctx.log?.warn({ err: e, import: id, attempt }, 'import batch found the database busy; trying again');
        await new Promise((r) => setTimeout(r, 250 * attempt));
      }
    }
  }

  private async fail(id: string, message: string): Promise<void> {
    await this.ctx.store.db
      .updateTable('import_jobs')
      .set({ status: 'failed', error: message, finished_at: new Date().toISOString(), claimed_by: null, claimed_until: null })
      .where('id', '=', id)
      .where('claimed_by', '=', this.node)
      .execute();
    importsFinished.inc({ status: 'failed' });
  }

  /** One batch in one transaction; answers whether there is more to do. */
  private async batch(id: string, caller?: Principal): Promise<boolean> {
    const head = await this.ctx.store.db.selectFrom('import_jobs').select('workspace_id').where('id', '=', id).executeTakeFirstOrThrow();
    return inTransaction(this.ctx.store, head.workspace_id, async (trx) => {
      const job = await trx.selectFrom('import_jobs').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
      if (job.claimed_by !== this.node || job.status !== 'running') throw new LostLease();
      const now = new Date();
      const p = caller ?? (await importer(trx, job, now));
      if (!p) throw new ServiceError(403, 'forbidden', 'The importer may no longer write here (removed, or its key revoked or expired); the import stopped');
      const files = await trx
        .selectFrom('import_files')
        .select(['ord', 'path', 'content'])
        .where('job_id', '=', id)
        .orderBy('ord')
        .limit(IMPORT_LIMITS.batchFiles)
        .execute();
      const report = parseReport(job.report);
      if (files.length === 0) {
        await appendAudit(
          trx,
          job.workspace_id,
          {
            principalId: job.principal_id,
            action: 'import.done',
            detail: {
              import: id,
              space: job.space,
              created: report.created,
              updated: report.updated,
              unchanged: report.unchanged,
              skipped: report.skipped_count,
              commits: report.commits.length,
            },
          },
          now,
        );
        await trx
          .updateTable('import_jobs')
          .set({ status: 'done', finished_at: now.toISOString(), claimed_by: null, claimed_until: null })
          .where('id', '=', id)
          .execute();
        afterCommitIfAny(trx, () => importsFinished.inc({ status: 'done' }));
        return false;
      }
      const outcome = await applyImportBatch(this.ctx, trx, p, { id, space: job.space }, files, now);
      report.created += outcome.created;
      report.updated += outcome.updated;
      report.unchanged += outcome.unchanged;
      noteFiles(report, outcome.skipped);
      if (outcome.commit) report.commits.push(outcome.commit);
      await trx.deleteFrom('import_files').where('job_id', '=', id).where('ord', '<=', files.at(-1)!.ord).execute();
      await trx
        .updateTable('import_jobs')
        .set({
          done: Number(job.done) + files.length,
          report: JSON.stringify(report),
          claimed_until: new Date(now.getTime() + LEASE_MS).toISOString(),
        })
        .where('id', '=', id)
        .execute();
      afterCommitIfAny(trx, () => {
        importFiles.inc({ outcome: 'created' }, outcome.created);
        importFiles.inc({ outcome: 'updated' }, outcome.updated);
        importFiles.inc({ outcome: 'unchanged' }, outcome.unchanged);
        importFiles.inc({ outcome: 'skipped' }, outcome.skipped.length);
      });
      return true;
    });
  }
}

const runners = new WeakMap<Store, ImportRunner>();

/** The import runner of the store's deployment on this node (one per open store). */
export function importRunner(ctx: CoreContext): ImportRunner {
  let r = runners.get(ctx.store);
  if (!r) runners.set(ctx.store, (r = new ImportRunner(ctx)));
  return r;
}

/** Imports waiting and running in the whole deployment (for /metrics). */
export async function importQueue(ctx: CoreContext): Promise<{ queued: number; running: number }> {
  const rows = await ctx.store.db
    .selectFrom('import_jobs')
    .select(['status', (eb) => eb.fn.countAll<number>().as('n')])
    .where('status', 'in', ['queued', 'running'])
    .groupBy('status')
    .execute();
  const n = (s: string) => Number(rows.find((r) => r.status === s)?.n ?? 0);
  return { queued: n('queued'), running: n('running') };
}
