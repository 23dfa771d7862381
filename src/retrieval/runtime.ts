import { sql } from 'kysely';
import type { EmbeddingsConfig } from '../config.js';
import type { Store } from '../store/db.js';
import { bytesToVec, hashTag } from './embed-text.js';
import { EmbedWorker, VECTOR_LOG_KEEP_MS } from './embed-worker.js';
import { BuiltinEmbeddings } from './embeddings/builtin.js';
import { OpenAIEmbeddings } from './embeddings/openai.js';
import { modelKey, type EmbeddingProvider } from './embeddings/provider.js';
import { ReindexJob } from './reindex-job.js';
import { VectorMatrix } from './vectors/matrix.js';

interface Loaded {
  matrix: VectorMatrix | null;
  /** Highest vector_log seq applied. */
  seq: number;
  refreshedAt: number;
}

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
  }

  private async warm(): Promise<void> {
    const rows = await this.store.db.selectFrom('section_vectors').select('workspace_id').distinct().where('model', '=', this.key).execute();
    for (const { workspace_id } of rows) {
      if (this.stopped) return;
      await this.matrix(workspace_id);
    }
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
      return this.matrix(workspaceId);
    }
    await this.refresh(workspaceId, state);
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
    const top = await db
      .selectFrom('vector_log')
      .select(sql<number | null>`max(seq)`.as('seq'))
      .executeTakeFirstOrThrow();
    const state: Loaded = { matrix: null, seq: Number(top.seq ?? 0), refreshedAt: Date.now() };
    const count = await db
      .selectFrom('section_vectors')
      .select(sql<number>`count(*)`.as('n'))
      .where('workspace_id', '=', workspaceId)
      .where('model', '=', this.key)
      .executeTakeFirstOrThrow();
    // Room for every row now and some writes to come, instead of growing by halves while loading.
    const room = Number(count.n) * 1.02 + 1024;
    // Paged by page id so a 100,000-page workspace never sits in one result set.
    let after = '';
    for (;;) {
      const rows = await db
        .selectFrom('section_vectors')
        .select(['page_id', 'ord', 'last_ord', 'text_hash', 'vec'])
        .where('workspace_id', '=', workspaceId)
        .where('model', '=', this.key)
        .where('page_id', '>', after)
        .orderBy('page_id')
        .orderBy('ord')
        .limit(20_000)
        .execute();
      if (rows.length === 0) break;
      // Never split a page across two pages of results: drop the last page and read it again.
      const lastPage = rows[rows.length - 1]!.page_id;
      const complete = rows.length < 20_000 ? rows : rows.filter((r) => r.page_id !== lastPage);
      const usable = complete.length > 0 ? complete : rows;
      this.apply(state, usable, room);
      after = usable[usable.length - 1]!.page_id;
      if (rows.length < 20_000) break;
    }
    return state;
  }

  private apply(state: Loaded, rows: { page_id: string; ord: number; last_ord: number; text_hash: string; vec: Uint8Array }[], room?: number): void {
    const byPage = new Map<string, { ord: number; last: number; vec: Float32Array; tag: number }[]>();
    for (const r of rows) {
      const vec = bytesToVec(r.vec);
      state.matrix ??= new VectorMatrix(vec.length, room);
      if (vec.length !== state.matrix.dims) continue;
      const list = byPage.get(r.page_id) ?? [];
      list.push({ ord: r.ord, last: r.last_ord, vec, tag: hashTag(r.text_hash) });
      byPage.set(r.page_id, list);
    }
    for (const [page, vecs] of byPage) state.matrix!.setPage(page, vecs);
  }

  private async refresh(workspaceId: string, state: Loaded): Promise<void> {
    const db = this.store.db;
    const changes = await db
      .selectFrom('vector_log')
      .select(['seq', 'page_id'])
      .where('workspace_id', '=', workspaceId)
      .where('seq', '>', state.seq)
      .orderBy('seq')
      .execute();
    state.refreshedAt = Date.now();
    if (changes.length === 0) return;
    const pages = [...new Set(changes.map((c) => c.page_id))];
    for (let i = 0; i < pages.length; i += 500) {
      const batch = pages.slice(i, i + 500);
      const rows = await db
        .selectFrom('section_vectors')
        .select(['page_id', 'ord', 'last_ord', 'text_hash', 'vec'])
        .where('page_id', 'in', batch)
        .where('model', '=', this.key)
        .orderBy('page_id')
        .orderBy('ord')
        .execute();
      for (const p of batch) state.matrix?.removePage(p);
      this.apply(state, rows);
    }
    state.seq = Math.max(state.seq, Number(changes[changes.length - 1]!.seq));
  }
}
