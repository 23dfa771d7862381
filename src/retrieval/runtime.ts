import { sql, type ExpressionBuilder } from 'kysely';
import type { EmbeddingsConfig } from '../config.js';
import type { Store } from '../store/db.js';
import type { DB } from '../store/schema.js';
import { bytesAsVec, hashTag } from './embed-text.js';
import { EmbedWorker, VECTOR_LOG_KEEP_MS } from './embed-worker.js';
import { BuiltinEmbeddings } from './embeddings/builtin.js';
import { OpenAIEmbeddings } from './embeddings/openai.js';
import { modelKey, type EmbeddingProvider } from './embeddings/provider.js';
import { ReindexJob } from './reindex-job.js';
import { readVectorsInWorker } from './vectors/load-worker.js';
import { VectorMatrix } from './vectors/matrix.js';

interface Loaded {
  matrix: VectorMatrix | null;
  /** Every vector_log seq up to this one was applied, except the gaps. */
  cursor: number;
  /** Seqs at or below the cursor not visible yet (a transaction still open, or rolled back): asked for again until they expire. */
  gaps: Map<number, number>;
  refreshedAt: number;
}

/**
 * How long a vector_log seq may stay invisible before we stop asking for it: well beyond the
 * life of any embedding round's transaction (one short transaction of at most 32 pages). A seq
 * still missing after this was rolled back (or its transaction hung): the reload a node does
 * after sleeping past half of VECTOR_LOG_KEEP_MS is the safety net.
 */
export const VECTOR_LOG_SETTLE_MS = 10 * 60_000;
/**
 * Seqs at most this far below the highest one seen are taken for gaps (on start, and after a jump):
 * a transaction that stays open while 10,000 later entries commit is not waited for.
 */
const START_LOOKBACK = 10_000;
/** More gaps than this are asked for as one range (read from the lowest) instead of an IN list. */
const GAP_LIST_MAX = 500;

export interface EmbeddingsStatus {
  status: 'ok' | 'degraded' | 'starting';
  provider: string;
  model: string;
  dimensions: number;
  backlog: number;
  last_error: string | null;
  last_error_at: string | null;
}

const QUERY_CACHE = 256;
/** Section vectors read per query when a workspace's matrix loads. */
const LOAD_PAGE_ROWS = 2_000;

/** A matrix row of a section_vectors row (its vector read in the driver's buffer: see bytesAsVec). */
function vectorRow(r: { page_id: string; ord: number; last_ord: number; text_hash: string; vec: Uint8Array }) {
  return { pageId: r.page_id, ord: r.ord, last: r.last_ord, tag: hashTag(r.text_hash), vec: bytesAsVec(r.vec) };
}

/**
 * The vector side of retrieval on one node: the embedding provider, the worker that keeps
 * vectors behind writes, and one in-memory matrix per workspace, loaded on first use and
 * brought up to date from `vector_log` before every vector query (so writes through any node,
 * and the worker of any node, reach every node's matrix).
 */
export class RetrievalRuntime {
  readonly provider: EmbeddingProvider;
  readonly key: string;
  readonly worker: EmbedWorker;
  /** Re-indexing that an upgrade asked for (migration 010); started by the server once it logs. */
  readonly reindex: ReindexJob;
  private readonly loaded = new Map<string, Promise<Loaded>>();
  private readonly queryCache = new Map<string, Float32Array>();
  /**
   * The whole log as this node last saw it: every seq up to `hi` that was visible was read,
   * and `gaps` (seq -> when first missed) are those that were not. vector_log seqs are taken at
   * insert and become visible at commit, so on PostgreSQL two nodes' workers can commit them out
   * of order; a cursor that jumped past an open transaction's seq would skip it forever.
   */
  private readonly log = { started: false, hi: 0, gaps: new Map<number, number>() };
  /** Refreshes run one at a time: they move `log` and a workspace's cursor together. */
  private refreshing: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly store: Store,
    config: EmbeddingsConfig,
    provider?: EmbeddingProvider,
  ) {
    this.provider = provider ?? (config.provider === 'openai' ? new OpenAIEmbeddings(config) : new BuiltinEmbeddings());
    this.key = modelKey(this.provider.provider, this.provider.model, config.provider === 'openai' ? config.dimensions : undefined);
    this.worker = new EmbedWorker(store, this.provider, this.key);
    this.reindex = new ReindexJob(store);
  }

  private stopped = false;
  private warming: Promise<void> | undefined;

  /** Starts the worker, and loads every workspace's matrix in the background so no query waits for it. */
  async start(): Promise<void> {
    await this.worker.start();
    this.warming = this.warm().catch(() => undefined);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.reindex.stop();
    await this.worker.stop();
    await this.warming;
    // The scan helper lets go of their memory now rather than when they are collected.
    for (const p of this.loaded.values()) void p.then((s) => s.matrix?.dispose()).catch(() => undefined);
  }

  private async warm(): Promise<void> {
    const rows = await this.store.db.selectFrom('section_vectors').select('workspace_id').distinct().where('model', '=', this.key).execute();
    for (const { workspace_id } of rows) {
      if (this.stopped) return;
      await this.matrix(workspace_id);
    }
  }

  /**
   * Whether the query's vector comes without waiting on anything: cached, or made here by the
   * builtin provider. (A remote provider's answer is worth running other work beside.)
   */
  embedsAtOnce(q: string): boolean {
    return this.provider.provider === 'builtin' || this.queryCache.has(q);
  }

  /** Embeds a search query (cached: agents repeat themselves). Throws EmbeddingUnavailableError on an outage. */
  async embedQuery(q: string): Promise<Float32Array> {
    const hit = this.queryCache.get(q);
    if (hit) {
      this.queryCache.delete(q);
      this.queryCache.set(q, hit);
      return hit;
    }
    const [v] = await this.provider.embed([q]);
    if (this.queryCache.size >= QUERY_CACHE) this.queryCache.delete(this.queryCache.keys().next().value as string);
    this.queryCache.set(q, v!);
    return v!;
  }

  /** The workspace's matrix, current with every vector written so far (null while it has none). */
  async matrix(workspaceId: string): Promise<VectorMatrix | null> {
    let p = this.loaded.get(workspaceId);
    if (!p) {
      p = this.load(workspaceId);
      this.loaded.set(workspaceId, p);
      p.catch(() => this.loaded.delete(workspaceId));
    }
    const state = await p;
    if (Date.now() - state.refreshedAt > VECTOR_LOG_KEEP_MS / 2) {
      // Slept past what the log keeps: start over.
      this.loaded.delete(workspaceId);
      state.matrix?.dispose();
      return this.matrix(workspaceId);
    }
    await this.serial(() => this.refresh(workspaceId, state));
    return state.matrix;
  }

  /** Bytes held by the loaded matrices (for benchmarks and operators). */
  async memoryBytes(): Promise<{ workspaces: number; rows: number; bytes: number }> {
    let rows = 0;
    let bytes = 0;
    for (const p of this.loaded.values()) {
      const s = await p;
      rows += s.matrix?.rows ?? 0;
      bytes += s.matrix?.bytes ?? 0;
    }
    return { workspaces: this.loaded.size, rows, bytes };
  }

  async status(): Promise<EmbeddingsStatus> {
    const backlog = await this.worker.backlog();
    const err = this.worker.status.lastError;
    return {
      status: err ? 'degraded' : 'ok',
      provider: this.provider.provider,
      model: this.provider.model,
      dimensions: this.provider.dimensions,
      backlog,
      last_error: err,
      last_error_at: this.worker.status.lastErrorAt,
    };
  }

  private async load(workspaceId: string): Promise<Loaded> {
    const db = this.store.db;
    // Read the log before the vectors: a change visible now is in the vectors read below; one
    // not visible yet (a gap, or above the cursor) is asked for by every refresh until it shows.
    const { hi, gaps } = await this.serial(async () => {
      await this.scanLog();
      return { hi: this.log.hi, gaps: new Map(this.log.gaps) };
    });
    const state: Loaded = { matrix: null, cursor: hi, gaps, refreshedAt: Date.now() };
    const count = await db
      .selectFrom('section_vectors')
      .select(sql<number>`count(*)`.as('n'))
      .where('workspace_id', '=', workspaceId)
      .where('model', '=', this.key)
      .executeTakeFirstOrThrow();
    // Room for every row now and some writes to come, instead of growing by halves while loading.
    const room = Number(count.n) * 1.02 + 1024;
    // Paged by page id so a 100,000-page workspace never sits in one result set. Pages are small:
    // the rows' f32 vectors are garbage once quantized, and the allocator keeps what a large
    // page of them took (20,000 rows: 40 MB of blobs, RSS +400 MB at 240,000 sections). On
    // SQLite a worker thread reads them (vectors/load-worker.ts: what the reading churns is
    // given back when it exits).
    if (this.store.sqliteFile !== null) {
      for await (const page of readVectorsInWorker(this.store.sqliteFile, workspaceId, this.key, LOAD_PAGE_ROWS)) {
        const rows = page.pageIds.map((pageId, i) => ({
          pageId,
          ord: page.ords[i]!,
          last: page.lastOrds[i]!,
          tag: hashTag(page.textHashes[i]!),
          vec: page.vecs.subarray(page.offsets[i]! >> 2, page.offsets[i + 1]! >> 2),
        }));
        this.apply(state, rows, room);
      }
      return state;
    }
    let after = '';
    for (;;) {
      const rows = await this.vectorRows(workspaceId, { after });
      if (rows.length === 0) break;
      // Never split a page across two pages of results: drop the last page and read it again
      // (a page with more rows than a query reads: read whole by itself).
      const lastPage = rows[rows.length - 1]!.page_id;
      const complete = rows.length < LOAD_PAGE_ROWS ? rows : rows.filter((r) => r.page_id !== lastPage);
      const usable = complete.length > 0 ? complete : await this.vectorRows(workspaceId, { page: lastPage });
      this.apply(state, usable.map(vectorRow), room);
      after = usable[usable.length - 1]!.page_id;
      if (rows.length < LOAD_PAGE_ROWS) break;
    }
    return state;
  }

  /** The workspace's vectors of this model: a page of rows after a page id, or one page's rows. */
  private vectorRows(workspaceId: string, which: { after: string } | { page: string }) {
    const q = this.store.db
      .selectFrom('section_vectors')
      .select(['page_id', 'ord', 'last_ord', 'text_hash', 'vec'])
      .where('workspace_id', '=', workspaceId)
      .where('model', '=', this.key);
    return 'page' in which
      ? q.where('page_id', '=', which.page).orderBy('ord').execute()
      : q.where('page_id', '>', which.after).orderBy('page_id').orderBy('ord').limit(LOAD_PAGE_ROWS).execute();
  }

  private apply(state: Loaded, rows: { pageId: string; ord: number; last: number; tag: number; vec: Float32Array }[], room?: number): void {
    const byPage = new Map<string, { ord: number; last: number; vec: Float32Array; tag: number }[]>();
    for (const r of rows) {
      state.matrix ??= new VectorMatrix(r.vec.length, room);
      if (r.vec.length !== state.matrix.dims) continue;
      const list = byPage.get(r.pageId) ?? [];
      list.push(r);
      byPage.set(r.pageId, list);
    }
    for (const [page, vecs] of byPage) state.matrix!.setPage(page, vecs);
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.refreshing.then(fn, fn);
    this.refreshing = run.catch(() => undefined);
    return run;
  }

  /**
   * Advances the node's view of the whole log (seqs only, from the primary key): every seq
   * above `hi` that is not visible becomes a gap, every gap that shows up is struck off, and
   * gaps older than VECTOR_LOG_SETTLE_MS are given up. Only the whole log can tell a gap from
   * another workspace's entry, hence one scan for all workspaces (each entry is read once per
   * node, plus the few gaps).
   */
  private async scanLog(): Promise<void> {
    const db = this.store.db;
    const now = Date.now();
    if (!this.log.started) await this.startLog(now);
    const { hi, gaps } = this.log;
    const rows = await db.selectFrom('vector_log').select('seq').where(this.seqWanted(hi, gaps)).orderBy('seq').execute();
    let top = hi;
    const seen = new Set<number>();
    for (const r of rows) {
      const n = Number(r.seq);
      seen.add(n);
      if (n > top) top = n;
      gaps.delete(n);
    }
    // A jump in the sequence (a restore, or a burst between two refreshes) is looked at only near its top.
    for (let n = Math.max(hi + 1, top - START_LOOKBACK); n < top; n++) if (!seen.has(n)) gaps.set(n, now);
    this.log.hi = top;
    for (const [n, at] of gaps) if (now - at > VECTOR_LOG_SETTLE_MS) gaps.delete(n);
  }

  /**
   * The first look at the log: seqs missing just below the top may belong to transactions still
   * open while this node starts. A missing seq is taken for a gap unless the entry above it was
   * written more than twice the settle time ago: the missing one was taken before that entry
   * committed, so its transaction began long enough ago to have ended (entries deleted for age,
   * or rolled back, are not asked for then; `at` is the writing node's clock, synchronised
   * clocks are assumed to within minutes).
   */
  private async startLog(now: number): Promise<void> {
    const db = this.store.db;
    const top = await db
      .selectFrom('vector_log')
      .select(sql<number | null>`max(seq)`.as('seq'))
      .executeTakeFirstOrThrow();
    const hi = Number(top.seq ?? 0);
    const rows = await db
      .selectFrom('vector_log')
      .select(['seq', 'at'])
      .where('seq', '>', hi - START_LOOKBACK)
      .orderBy('seq')
      .execute();
    let prev = Math.max(0, hi - START_LOOKBACK);
    for (const r of rows) {
      const n = Number(r.seq);
      if (now - Date.parse(r.at) < 2 * VECTOR_LOG_SETTLE_MS) for (let g = prev + 1; g < n; g++) this.log.gaps.set(g, now);
      prev = n;
    }
    this.log.hi = hi;
    this.log.started = true;
  }

  /** seq > cursor, or one of the gaps (as a range from the lowest when there are many: the caller filters). */
  private seqWanted(cursor: number, gaps: Map<number, number>) {
    return (eb: ExpressionBuilder<DB, 'vector_log'>) => {
      if (gaps.size === 0) return eb('seq', '>', cursor);
      if (gaps.size > GAP_LIST_MAX)
        return eb(
          'seq',
          '>=',
          [...gaps.keys()].reduce((a, b) => Math.min(a, b)),
        );
      return eb.or([eb('seq', '>', cursor), eb('seq', 'in', [...gaps.keys()])]);
    };
  }

  private async refresh(workspaceId: string, state: Loaded): Promise<void> {
    const db = this.store.db;
    await this.scanLog();
    const hi = this.log.hi;
    const rows = await db
      .selectFrom('vector_log')
      .select(['seq', 'page_id'])
      .where('workspace_id', '=', workspaceId)
      .where(this.seqWanted(state.cursor, state.gaps))
      .orderBy('seq')
      .execute();
    const changes = rows.filter((c) => Number(c.seq) > state.cursor || state.gaps.has(Number(c.seq)));
    const found = new Set(changes.map((c) => Number(c.seq)));
    for (const n of found) state.gaps.delete(n);
    // The node-wide gaps between this workspace's old cursor and the new one may be its entries:
    // keep asking for them (they are struck off when they show, or expire).
    for (const [n, at] of this.log.gaps) if (n > state.cursor && n <= hi && !found.has(n)) state.gaps.set(n, at);
    const now = Date.now();
    for (const [n, at] of state.gaps) if (now - at > VECTOR_LOG_SETTLE_MS) state.gaps.delete(n);
    state.cursor = Math.max(state.cursor, hi);
    state.refreshedAt = now;
    if (changes.length === 0) return;
    const pages = [...new Set(changes.map((c) => c.page_id))];
    for (let i = 0; i < pages.length; i += 500) {
      const batch = pages.slice(i, i + 500);
      const vecs = await db
        .selectFrom('section_vectors')
        .select(['page_id', 'ord', 'last_ord', 'text_hash', 'vec'])
        .where('page_id', 'in', batch)
        .where('model', '=', this.key)
        .orderBy('page_id')
        .orderBy('ord')
        .execute();
      for (const p of batch) state.matrix?.removePage(p);
      this.apply(state, vecs.map(vectorRow));
    }
  }
}
