import { sql, type Insertable, type SelectQueryBuilder } from 'kysely';
import type { Store } from '../store/db.js';
import { builtOnce } from '../store/built-once.js';
import type { DB } from '../store/schema.js';
import { inTransaction } from '../store/tx.js';
import { textHash, vecToBytes, windowEmbedText, windows } from './embed-text.js';
import { EmbeddingUnavailableError, type EmbeddingProvider } from './embeddings/provider.js';

/** Pages taken from the backlog per round; their sections are embedded in one provider call. */
const ROUND = 32;
const IDLE_POLL_MS = 250;
/**
 * A write wakes the worker this long after it, so that a burst of writes is embedded in one
 * round (one claim, one transaction) rather than one round each: on PostgreSQL a round is about
 * ten round trips, spent beside the writes themselves.
 */
const WAKE_DELAY_MS = 25;
/** A failed page waits 2^attempts seconds, at most this long, before its next try. */
const MAX_BACKOFF_MS = 5 * 60_000;
/** How long a claimed job is left to the node that claimed it (well beyond a round with provider retries). */
const CLAIM_LEASE_MS = 5 * 60_000;
/** vector_log entries older than this are deleted; a node that slept longer reloads fully. */
export const VECTOR_LOG_KEEP_MS = 60 * 60_000;

/** Workers of this process; a committed write wakes them (each then looks at its own store). */
const workers = new Set<EmbedWorker>();
export function wakeEmbedWorkers(): void {
  for (const w of workers) w.wake();
}

export interface WorkerStatus {
  lastError: string | null;
  lastErrorAt: string | null;
}

interface Job {
  page_id: string;
  workspace_id: string;
  content_hash: string;
  attempts: number;
}

/**
 * Keeps section vectors behind page writes: every write queues its page in `embed_jobs`
 * (in the write's own transaction); this worker embeds the queued pages' sections and
 * replaces their vectors in one transaction per round. A provider outage never fails a write:
 * the pages stay queued with a back-off and the backlog grows until the provider answers.
 */
export class EmbedWorker {
  private timer: NodeJS.Timeout | undefined;
  /** When the pending timer fires (ms since the epoch). */
  private timerDue = 0;
  private running: Promise<void> | undefined;
  private stopped = true;
  private wakeRequested = false;
  readonly status: WorkerStatus = { lastError: null, lastErrorAt: null };
  /** Where provider failures are reported in full (the server log); /readyz shows no details. */
  onError: ((message: string, err: unknown) => void) | undefined;

  constructor(
    private readonly store: Store,
    private readonly provider: EmbeddingProvider,
    private readonly key: string,
  ) {}

  /** Queues pages whose vectors are missing or of another model (a provider or model change), then starts polling. */
  async start(): Promise<void> {
    this.stopped = false;
    workers.add(this);
    await this.enqueueStale();
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    workers.delete(this);
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** A write just queued a page: look now instead of at the next poll. */
  wake(): void {
    if (this.stopped) return;
    if (this.running) {
      this.wakeRequested = true;
      return;
    }
    // A round already due as soon is not put off by more writes.
    if (this.timer && this.timerDue <= Date.now() + WAKE_DELAY_MS) return;
    this.schedule(WAKE_DELAY_MS);
  }

  /** Pages waiting for vectors (the backlog). */
  async backlog(): Promise<number> {
    const r = await this.store.db
      .selectFrom('embed_jobs')
      .select(sql<number>`count(*)`.as('n'))
      .executeTakeFirstOrThrow();
    return Number(r.n);
  }

  /** Runs rounds until nothing is due (benchmarks, tests and `drain` callers). Returns pages handled. */
  async drain(): Promise<number> {
    let total = 0;
    for (;;) {
      await this.running;
      const n = await this.runRound(true);
      total += n;
      if (n === 0) return total;
    }
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerDue = Date.now() + ms;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.running = this.runRound(false)
        .then((n) => {
          this.running = undefined;
          // A round short of ROUND took everything due then; a write since has asked again.
          const next = n >= ROUND ? 0 : this.wakeRequested ? WAKE_DELAY_MS : IDLE_POLL_MS;
          this.wakeRequested = false;
          this.schedule(next);
        })
        .catch(() => {
          this.running = undefined;
          this.schedule(IDLE_POLL_MS * 4);
        });
    }, ms);
    this.timer.unref();
  }

  private async enqueueStale(): Promise<void> {
    const now = new Date().toISOString();
    await sql`insert into embed_jobs (page_id, workspace_id, content_hash, queued_at, attempts)
      select p.id, p.workspace_id, p.content_hash, ${now}, 0 from pages p
      where p.deleted_at is null
        and exists (select 1 from page_sections s where s.page_id = p.id)
        and not exists (select 1 from section_vectors v where v.page_id = p.id and v.model = ${this.key})
        and not exists (select 1 from embed_jobs j where j.page_id = p.id)`.execute(this.store.db);
    // Log entries every node has had time to replay (see RetrievalRuntime.matrix).
    await sql`delete from vector_log where at < ${new Date(Date.now() - VECTOR_LOG_KEEP_MS).toISOString()}`.execute(this.store.db);
  }

  /** One round: take due pages, embed what changed, write. Returns the number of pages handled. */
  private async runRound(ignoreBackoff: boolean): Promise<number> {
    const db = this.store.db;
    const now = new Date().toISOString();
    let q = db.selectFrom('embed_jobs').select(['page_id', 'workspace_id', 'content_hash', 'attempts']).orderBy('queued_at').limit(ROUND);
    if (!ignoreBackoff) q = q.where((eb) => eb.or([eb('not_before', 'is', null), eb('not_before', '<=', now)]));
    if (this.store.dialect !== 'postgres') return this.process(await q.execute());
    const lease = new Date(Date.parse(now) + CLAIM_LEASE_MS).toISOString();
    const jobs = await this.claim(q, lease);
    try {
      return await this.process(jobs);
    } catch (e) {
      // The database failed the round (the provider's failures are handled inside): hand the
      // jobs back now rather than after the lease.
      await this.release(jobs, lease).catch(() => undefined);
      throw e;
    }
  }

  private async process(jobs: Job[]): Promise<number> {
    if (jobs.length === 0) return 0;
    const db = this.store.db;

    const ids = jobs.map((j) => j.page_id);
    const pages = new Map((await pagesOf.rows(db, { ids })).map((p) => [p.id, p]));
    const sections = await sectionsOf.rows(db, { ids });
    const old = await vectorsOf.rows(db, { ids, model: this.key });
    const reuse = new Map(old.map((o) => [o.text_hash, o.vec]));

    // Each live page's windows of sections; only texts not embedded before go to the provider.
    const byPage = new Map<string, typeof sections>();
    for (const s of sections) {
      const list = byPage.get(s.page_id);
      if (list) list.push(s);
      else byPage.set(s.page_id, [s]);
    }
    const wanted: { page_id: string; ord: number; last: number; hash: string; text: string }[] = [];
    for (const [pageId, list] of byPage) {
      const page = pages.get(pageId);
      if (!page || page.deleted_at !== null) continue;
      for (const w of windows(list)) {
        const text = windowEmbedText(list[0]!.title, w.sections);
        wanted.push({ page_id: pageId, ord: w.first, last: w.last, hash: textHash(text), text });
      }
    }
    const missing = [...new Map(wanted.filter((w) => !reuse.has(w.hash)).map((w) => [w.hash, w.text]))];
    const fresh = new Map<string, Uint8Array>();
    if (missing.length > 0) {
      try {
        const vecs = await this.provider.embed(missing.map(([, t]) => t));
        missing.forEach(([hash], i) => fresh.set(hash, vecToBytes(vecs[i]!)));
      } catch (e) {
        await this.fail(jobs, e);
        return jobs.length;
      }
    }

    const at = new Date().toISOString();
    // The round's pages in a few statements, not a few per page.
    await inTransaction(this.store, null, async (trx) => {
      // A write since we read a job queued newer content: leave that job for the next round.
      const queued = await jobsOf.rows(trx, { ids });
      const current = new Map(queued.map((q) => [q.page_id, q.content_hash]));
      const done = jobs.filter((j) => current.get(j.page_id) === j.content_hash);
      if (done.length === 0) return;
      const doneIds = done.map((j) => j.page_id);
      await deleteVectors.execute(trx, { ids: doneIds });
      const rows = done.flatMap((job) => {
        const page = pages.get(job.page_id);
        const live = page !== undefined && page.deleted_at === null && page.content_hash === job.content_hash;
        if (!live) return [];
        return wanted
          .filter((w) => w.page_id === job.page_id)
          .map((w) => ({
            page_id: w.page_id,
            ord: w.ord,
            last_ord: w.last,
            workspace_id: job.workspace_id,
            model: this.key,
            text_hash: w.hash,
            vec: fresh.get(w.hash) ?? reuse.get(w.hash)!,
          }));
      });
      for (let i = 0; i < rows.length; i += 100) await insertVectors.execute(trx, rows.slice(i, i + 100));
      await deleteJobs.execute(
        trx,
        done.map((j) => ({ page_id: j.page_id, content_hash: j.content_hash })),
      );
      await logVectors.execute(
        trx,
        done.map((j) => ({ workspace_id: j.workspace_id, page_id: j.page_id, at })),
      );
    });
    if (this.status.lastError !== null && missing.length > 0) this.status.lastError = null;
    return jobs.length;
  }

  /**
   * Several nodes on one PostgreSQL: each round claims its jobs, so no two nodes embed the
   * same page. The claim pushes the job's not_before a lease ahead (rows locked by another
   * node's claim are skipped); success deletes the job, failure sets its back-off, a write
   * queues it afresh, and a node killed mid-round leaves it to whoever polls after the lease.
   */
  private async claim(due: SelectQueryBuilder<DB, 'embed_jobs', Job>, lease: string): Promise<Job[]> {
    const r = await sql<Job>`update embed_jobs set not_before = ${lease}
      where page_id in (${due.clearSelect().select('page_id').forUpdate().skipLocked()})
      returning page_id, workspace_id, content_hash, attempts`.execute(this.store.db);
    return r.rows;
  }

  private async release(jobs: Job[], lease: string): Promise<void> {
    if (jobs.length === 0) return;
    await this.store.db
      .updateTable('embed_jobs')
      .set({ not_before: null })
      .where(
        'page_id',
        'in',
        jobs.map((j) => j.page_id),
      )
      .where('not_before', '=', lease)
      .execute();
  }

  private async fail(jobs: Job[], e: unknown): Promise<void> {
    const message = e instanceof Error ? e.message : String(e);
    this.status.lastError = message.slice(0, 500);
    this.status.lastErrorAt = new Date().toISOString();
    if (!(e instanceof EmbeddingUnavailableError)) this.status.lastError = `unexpected: ${this.status.lastError}`;
    this.onError?.(this.status.lastError, e);
    const retryAfter = (e as { retryAfterMs?: number }).retryAfterMs ?? 0;
    for (const job of jobs) {
      const wait = Math.max(retryAfter, Math.min(MAX_BACKOFF_MS, 1000 * 2 ** job.attempts));
      await this.store.db
        .updateTable('embed_jobs')
        .set({ attempts: job.attempts + 1, not_before: new Date(Date.now() + wait).toISOString(), last_error: this.status.lastError })
        .where('page_id', '=', job.page_id)
        .where('content_hash', '=', job.content_hash)
        .execute();
    }
  }
}

// A round's statements, built once per shape (store/built-once.ts): rounds follow every burst of writes.
const pagesOf = builtOnce((db, v: { ids: string[] }) => db.selectFrom('pages').select(['id', 'content_hash', 'deleted_at']).where('id', 'in', v.ids));
const sectionsOf = builtOnce((db, v: { ids: string[] }) =>
  db
    .selectFrom('page_sections')
    .select(['page_id', 'ord', 'title', 'heading', 'text', 'block_level'])
    .where('page_id', 'in', v.ids)
    .orderBy('page_id')
    .orderBy('ord'),
);
const vectorsOf = builtOnce((db, v: { ids: string[]; model: string }) =>
  db.selectFrom('section_vectors').select(['text_hash', 'vec']).where('page_id', 'in', v.ids).where('model', '=', v.model),
);
const jobsOf = builtOnce((db, v: { ids: string[] }) => db.selectFrom('embed_jobs').select(['page_id', 'content_hash']).where('page_id', 'in', v.ids));
const deleteVectors = builtOnce((db, v: { ids: string[] }) => db.deleteFrom('section_vectors').where('page_id', 'in', v.ids));
const insertVectors = builtOnce((db, rows: Insertable<DB['section_vectors']>[]) => db.insertInto('section_vectors').values(rows));
const deleteJobs = builtOnce((db, jobs: { page_id: string; content_hash: string }[]) =>
  db.deleteFrom('embed_jobs').where((eb) => eb.or(jobs.map((j) => eb.and([eb('page_id', '=', j.page_id), eb('content_hash', '=', j.content_hash)])))),
);
const logVectors = builtOnce((db, rows: Insertable<DB['vector_log']>[]) => db.insertInto('vector_log').values(rows));
