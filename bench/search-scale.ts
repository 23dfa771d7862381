/**
 * Retrieval SPEED at scale: N synthetic pages (default 10,000; `--pages=100000`) in one workspace.
 *
 *   tsx bench/search-scale.ts [--pages=N] [--queries=300] [--pg[=URL]] [--no-vectors] [--data-dir=DIR]
 *                             [--no-service | --service-only] [--node-args="--flag …"]
 *   (--data-dir: the store kept between runs, loaded when empty, reused when it holds N pages; with
 *   --pg the database `cv_bench_keep_scale<N>` is kept as well)
 *   npm run bench -- --only=search_scale [--scale=100000]
 *
 * - Pages are realistic synthetic markdown: a title, tags, 3–5 `##` sections of 1–3 paragraphs,
 *   words drawn Zipf-like from a real vocabulary (the words of the Debian evaluation corpus when
 *   it is built, bench/eval/; else generated pseudo-words), an occasional [[link]], spread over 5
 *   Spaces × 20 folders.
 * - Loading bypasses git (100,000 durable commits would take over an hour): page rows are
 *   inserted and the real `indexPage` (src/retrieval/indexer.ts) is called for each, 1,000 pages
 *   per transaction — exactly the keyword/links/tags indexing a write does, without the commit
 *   object. The embedding worker is stopped while loading, so keyword and vector throughput are
 *   timed separately: then `worker.drain()` embeds the queued pages with the configured provider
 *   (builtin by default).
 * - Search latency per mode (fts, vector, hybrid), sequential, after warm-up, over a few hundred
 *   varied queries (2–4 words: half taken from one page's text, half drawn from the vocabulary);
 *   bundle latency when src/retrieval/bundle.ts exists; the vector matrices' bytes and the
 *   process RSS/heap before and after the first vector query loads them.
 * - Then the built service (`node dist/main.js`) on the same store, alone (bench/service-memory.ts):
 *   its RSS after start and after the same searches and bundles over HTTP, and their latency.
 *   `--service-only` skips the in-process searches (the store must be loaded already);
 *   `--no-service` skips the built service; `--node-args` passes flags to its node.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import type { CoreContext } from '../src/core/context.js';
import { analyzeContent } from '../src/core/pages/content.js';
import { parsePagePath } from '../src/core/paths.js';
import { ensureFolders, ensureSpace } from '../src/core/spaces.js';
import type { Principal } from '../src/policy/principal.js';
import { indexPage } from '../src/retrieval/indexer.js';
import { searchPages } from '../src/retrieval/search.js';
import type { PagesTable } from '../src/store/schema.js';
import { inTransaction } from '../src/store/tx.js';
import { rng } from './content.js';
import { CORPUS_FILE, type Corpus } from './eval/build-corpus.js';
import { openHarness, runtimeOf } from './eval/harness.js';
import { benchServiceMemory } from './service-memory.js';
import { installCleanupHandlers, latency, loadAverage, log, round, runStandalone } from './util.js';

const MODES = ['fts', 'vector', 'hybrid'] as const;
const TX_PAGES = 1000;
const SPACES = 5;
const FOLDERS = 20;

// ---------------------------------------------------------------------------------------------
// Vocabulary and pages
// ---------------------------------------------------------------------------------------------

const STOP = new Set(
  'the a an and or of to in on for is are was be by with as at it this that from can you your which not if when these their its into but also has have will may more than all any other such some only most so do does should'.split(
    ' ',
  ),
);

export interface Vocabulary {
  source: string;
  /** Words, most frequent first. */
  words: string[];
  /** Cumulative Zipf weights for sampling. */
  cum: Float64Array;
}

function pseudoWords(n: number): string[] {
  const r = rng(7);
  const on = ['b', 'c', 'd', 'f', 'g', 'k', 'l', 'm', 'n', 'p', 'r', 's', 't', 'v', 'st', 'tr', 'pl', 'gr', 'ch', 'sh'];
  const nu = ['a', 'e', 'i', 'o', 'u', 'ai', 'ou', 'ea'];
  const co = ['', 'n', 'r', 's', 't', 'l', 'x', 'nd', 'rt', 'ck'];
  const out = new Set<string>();
  while (out.size < n) {
    const syl = 1 + Math.floor(r() * 3);
    let w = '';
    for (let i = 0; i < syl; i++) w += on[Math.floor(r() * on.length)]! + nu[Math.floor(r() * nu.length)]! + co[Math.floor(r() * co.length)]!;
    out.add(w);
  }
  return [...out];
}

/** Words by frequency from the evaluation corpus when built, else pseudo-words; Zipf s = 1.05 over ranks. */
export function vocabulary(): Vocabulary {
  let words: string[];
  let source: string;
  if (fs.existsSync(CORPUS_FILE)) {
    const corpus = JSON.parse(fs.readFileSync(CORPUS_FILE, 'utf8')) as Corpus;
    const freq = new Map<string, number>();
    for (const p of corpus.pages) {
      for (const m of p.content.toLowerCase().matchAll(/[a-z][a-z0-9-]{1,24}/g)) freq.set(m[0], (freq.get(m[0]) ?? 0) + 1);
    }
    words = [...freq.entries()]
      .filter(([w, n]) => n >= 2 && !w.endsWith('-'))
      .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
      .map(([w]) => w);
    source = `words of the Debian evaluation corpus (${words.length} distinct, frequency-ranked)`;
  } else {
    words = pseudoWords(30_000);
    source = 'generated pseudo-words (30,000; build bench/eval corpus for real words)';
  }
  const cum = new Float64Array(words.length);
  let s = 0;
  for (let i = 0; i < words.length; i++) cum[i] = s += 1 / (i + 1) ** 1.05;
  return { source, words, cum };
}

function draw(v: Vocabulary, r: () => number): string {
  const x = r() * v.cum[v.cum.length - 1]!;
  let lo = 0;
  let hi = v.cum.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (v.cum[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return v.words[lo]!;
}

function phrase(v: Vocabulary, r: () => number, n: number): string {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(draw(v, r));
  return out.join(' ');
}

function sentence(v: Vocabulary, r: () => number): string {
  const s = phrase(v, r, 6 + Math.floor(r() * 11));
  return `${s[0]!.toUpperCase()}${s.slice(1)}.`;
}

function contentWord(v: Vocabulary, r: () => number): string {
  for (;;) {
    const w = draw(v, r);
    if (!STOP.has(w) && w.length > 2) return w;
  }
}

export function pagePath(n: number): string {
  return `space${n % SPACES}/folder${Math.floor(n / SPACES) % FOLDERS}/page-${String(n).padStart(6, '0')}.md`;
}

/** Page n: deterministic, ~0.7–3 KB (mean ~1.6 KB). */
export function syntheticPage(v: Vocabulary, n: number): string {
  const r = rng(n * 2654435761 + 17);
  const title = [0, 1, 2].map(() => contentWord(v, r)).join(' ');
  const tags = [contentWord(v, r), contentWord(v, r)];
  let md = `---\ntags: [${tags.join(', ')}]\n---\n# ${title[0]!.toUpperCase()}${title.slice(1)}\n\n${sentence(v, r)} ${sentence(v, r)}\n\n`;
  const sections = 3 + Math.floor(r() * 3);
  for (let s = 0; s < sections; s++) {
    md += `## ${contentWord(v, r)} ${contentWord(v, r)}${r() < 0.5 ? ` ${contentWord(v, r)}` : ''}\n\n`;
    const paras = 1 + Math.floor(r() * 3);
    for (let p = 0; p < paras; p++) {
      const k = 2 + Math.floor(r() * 2);
      const ss: string[] = [];
      for (let i = 0; i < k; i++) ss.push(sentence(v, r));
      md += `${ss.join(' ')}\n\n`;
    }
    if (r() < 0.3) md += `- ${sentence(v, r)}\n- ${sentence(v, r)}\n- See [[page-${String(Math.floor(r() * (n + 1))).padStart(6, '0')}]]\n\n`;
  }
  return md;
}

/** Queries: half from a page's own text (a contiguous run of content words), half drawn from the vocabulary. */
export function makeQueries(v: Vocabulary, pages: number, count: number, seed = 99): string[] {
  const r = rng(seed);
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    const len = 2 + Math.floor(r() * 3);
    if (i % 2 === 0) {
      const n = Math.floor(r() * pages);
      const words = syntheticPage(v, n)
        .replace(/^---[\s\S]*?---\n/, '')
        .toLowerCase()
        .match(/[a-z][a-z0-9-]+/g)!
        .filter((w) => !STOP.has(w) && w.length > 2);
      const at = Math.floor(r() * Math.max(1, words.length - len));
      out.push(words.slice(at, at + len).join(' '));
    } else {
      const ws: string[] = [];
      for (let k = 0; k < len; k++) ws.push(contentWord(v, r));
      out.push(ws.join(' '));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Bulk load through indexPage
// ---------------------------------------------------------------------------------------------

function gitBlobSha(content: string): string {
  const buf = Buffer.from(content, 'utf8');
  return createHash('sha1').update(`blob ${buf.length}\0`).update(buf).digest('hex');
}

let idCounter = 0;
function pageId(): string {
  // ULID-like and sortable; ids only need to be unique in this throwaway store.
  return `01BENCH${String(++idCounter).padStart(19, '0')}`;
}

async function bulkLoad(
  ctx: CoreContext,
  p: Principal,
  v: Vocabulary,
  pages: number,
  maxSeconds: number,
): Promise<{ seconds: number; sections: number; bytes: number }> {
  const t0 = performance.now();
  const deadline = Date.now() + maxSeconds * 1000;
  const now = new Date().toISOString();
  const fakeCommit = '0'.repeat(40);
  let bytes = 0;
  let lastLog = t0;
  const spacesDone = new Set<string>();
  for (let start = 0; start < pages; start += TX_PAGES) {
    if (Date.now() > deadline) throw new Error(`bulk load exceeded ${maxSeconds} s after ${start} pages`);
    const end = Math.min(pages, start + TX_PAGES);
    await inTransaction(ctx.store, p.workspaceId, async (trx) => {
      for (let n = start; n < end; n++) {
        const raw = syntheticPage(v, n);
        bytes += raw.length;
        const target = parsePagePath(pagePath(n));
        const c = analyzeContent(raw, target.slug);
        if (!spacesDone.has(target.folderPath)) {
          await ensureSpace(trx, p.workspaceId, target.space, now);
          await ensureFolders(trx, p.workspaceId, target.folderPath, now);
          spacesDone.add(target.folderPath);
        }
        const row: PagesTable = {
          id: pageId(),
          workspace_id: p.workspaceId,
          path: target.path,
          space: target.space,
          cluster_path: target.folderPath,
          title: c.title,
          content: raw,
          content_hash: gitBlobSha(raw),
          commit_sha: fakeCommit,
          sensitivity: c.sensitivity,
          block_level: c.blockLevel,
          state: c.state,
          frontmatter: JSON.stringify(c.frontmatter),
          tags: JSON.stringify(c.tags),
          links: JSON.stringify(c.links),
          created_at: now,
          updated_at: now,
          last_touched_at: null,
          created_by: p.id,
          updated_by: p.id,
          deleted_at: null,
        };
        await trx.insertInto('pages').values(row).execute();
        await indexPage(trx, row, { fresh: true });
      }
    });
    const t = performance.now();
    if (t - lastLog > 10_000 || end === pages) {
      log(`  indexed ${end}/${pages} pages (${round((end * 1000) / (t - t0), 0)} pages/s)`);
      lastLog = t;
    }
  }
  const seconds = (performance.now() - t0) / 1000;
  const s = await ctx.store.db
    .selectFrom('page_sections')
    .select(sql<number>`count(*)`.as('n'))
    .executeTakeFirstOrThrow();
  return { seconds, sections: Number(s.n), bytes };
}

// ---------------------------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------------------------

function mem(): { rss_mb: number; heap_used_mb: number; external_mb: number; array_buffers_mb: number } {
  const m = process.memoryUsage();
  const mb = (x: number) => round(x / 1048576, 1);
  return { rss_mb: mb(m.rss), heap_used_mb: mb(m.heapUsed), external_mb: mb(m.external), array_buffers_mb: mb(m.arrayBuffers) };
}

type BundleFn = (ctx: CoreContext, p: Principal, opts: Record<string, unknown>) => Promise<unknown>;

async function findBundle(): Promise<BundleFn | null> {
  const spec = '../src/retrieval/bundle.js';
  try {
    const mod = (await import(spec)) as { buildBundle?: BundleFn };
    return mod.buildBundle ?? null;
  } catch {
    return null;
  }
}

export async function benchSearchScale(opts: {
  pages: number;
  queries: number;
  pgAdminUrl?: string | undefined;
  vectors: boolean;
  maxLoadSeconds?: number;
  dataDir?: string | undefined;
  /** The built service on the same store: measured after (default), only, or not at all. */
  service?: 'after' | 'only' | 'no';
  serviceNodeArgs?: string[];
}): Promise<Record<string, unknown>> {
  const v = vocabulary();
  log(`search scale: ${opts.pages} pages on ${opts.pgAdminUrl ? 'postgres' : 'sqlite'}; vocabulary: ${v.source}`);
  const h = await openHarness({ label: `scale${opts.pages}`, pgAdminUrl: opts.pgAdminUrl, keepDir: opts.dataDir });
  try {
    const out: Record<string, unknown> = { engine: h.engine, pages: opts.pages, vocabulary: v.source };
    const loads: Record<string, number> = { at_start: loadAverage() };
    const rt = runtimeOf(h.ctx);
    // Keyword indexing alone: the worker must not interleave its rounds.
    if (rt?.worker && 'stop' in rt.worker) await (rt.worker as { stop(): Promise<void> }).stop();

    const have = Number(
      (
        await h.ctx.store.db
          .selectFrom('pages')
          .select(sql<number>`count(*)`.as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    );
    const memBeforeLoad = mem();
    if (have === opts.pages) {
      log(`reusing the ${have} pages already in ${opts.dataDir} (indexing not measured)`);
      out.keyword_indexing = out.vector_indexing = `reused the store in --data-dir (indexing not measured)`;
      if (rt?.worker?.drain) await rt.worker.drain();
    } else {
      if (have > 0) throw new Error(`${opts.dataDir} holds ${have} pages, not ${opts.pages}: use an empty directory`);
      log('bulk load: page rows + indexPage, 1,000 pages per transaction');
      const kw = await bulkLoad(h.ctx, h.principal, v, opts.pages, opts.maxLoadSeconds ?? 2400);
      loads.after_keyword_index = loadAverage();
      out.keyword_indexing = {
        method: 'pages rows + real indexPage() in transactions of 1,000 pages (no git commit objects)',
        seconds: round(kw.seconds, 2),
        pages_per_sec: round(opts.pages / kw.seconds, 1),
        sections: kw.sections,
        sections_per_page: round(kw.sections / opts.pages, 2),
        content_bytes_mean: Math.round(kw.bytes / opts.pages),
      };

      if (rt?.worker?.drain && opts.vectors) {
        log(`embedding ${opts.pages} pages with ${rt.provider?.provider}:${rt.provider?.model} (worker.drain)`);
        const t0 = performance.now();
        const n = Number(await rt.worker.drain());
        const s = (performance.now() - t0) / 1000;
        loads.after_embedding = loadAverage();
        log(`  embedded ${n} pages in ${round(s, 1)} s`);
        out.vector_indexing = {
          provider: rt.provider ? `${rt.provider.provider}:${rt.provider.model}:${rt.provider.dimensions}` : 'unknown',
          seconds: round(s, 2),
          pages_embedded: n,
          pages_per_sec: round(n / s, 1),
          sections_per_sec: round(kw.sections / s, 1),
        };
      } else out.vector_indexing = rt ? 'skipped (--no-vectors)' : 'no retrieval runtime in this build';
    }

    if (h.engine === 'postgres') {
      // Planner statistics, hint bits and visibility map for the freshly loaded tables, as the
      // service's statistics keeper (src/store/statistics.ts) or autovacuum sets them within a
      // minute or so of a bulk load: done at once, so no search below runs beside it.
      const t0 = performance.now();
      await sql`vacuum (analyze)`.execute(h.ctx.store.db);
      log(`  vacuum (analyze): ${round(performance.now() - t0, 0)} ms`);
      // The server's memory settings decide much of these figures (docs/deploy.md §8).
      const settings = await sql<{ name: string; setting: string }>`
        select name, current_setting(name) as setting from pg_settings
        where name in ('shared_buffers', 'huge_pages', 'effective_cache_size', 'max_parallel_workers_per_gather', 'random_page_cost')`.execute(h.ctx.store.db);
      out.postgres_settings = Object.fromEntries(settings.rows.map((r) => [r.name, r.setting]));
    }

    // Memory: the first vector query loads the workspace's matrix.
    const gc = (globalThis as { gc?: () => void }).gc;
    gc?.();
    const memBefore = mem();
    let matrixLoadMs: number | null = null;
    if (rt) {
      const t0 = performance.now();
      await searchPages(h.ctx, h.principal, { q: 'warm up', mode: 'vector', limit: 10, includeArchived: false });
      matrixLoadMs = performance.now() - t0;
      log(`  first vector query (loads the matrix): ${round(matrixLoadMs, 0)} ms`);
    }
    gc?.();
    const memAfter = mem();
    const memoryBytes = (rt as { memoryBytes?: () => Promise<{ workspaces: number; rows: number; bytes: number }> } | undefined)?.memoryBytes;
    const matrices = memoryBytes ? await memoryBytes.call(rt) : null;
    out.vector_memory = {
      matrices: matrices
        ? { ...matrices, mb: round(matrices.bytes / 1048576, 1), bytes_per_section: matrices.rows ? round(matrices.bytes / matrices.rows, 1) : null }
        : 'not reported by this build',
      first_vector_query_ms: matrixLoadMs === null ? null : round(matrixLoadMs, 1),
      process_before_bulk_load: memBeforeLoad,
      process_before_matrix_load: memBefore,
      process_after_matrix_load: memAfter,
      gc_forced: Boolean(gc),
    };

    const queries = makeQueries(v, opts.pages, opts.queries);
    const warm = makeQueries(v, opts.pages, 40, 4242);
    const builtService = async () => {
      await h.stopServer();
      log('the built service on the same store (node dist/main.js)');
      out.built_service = await benchServiceMemory({
        dataDir: h.dataDir,
        databaseUrl: h.databaseUrl,
        key: h.key,
        queries,
        warm,
        nodeArgs: opts.serviceNodeArgs,
      });
    };
    if (opts.service === 'only') {
      await builtService();
      return out;
    }
    const search: Record<string, unknown> = {};
    for (const mode of MODES) {
      for (const q of warm) await searchPages(h.ctx, h.principal, { q, mode, limit: 10, includeArchived: false });
      const samples: number[] = [];
      let empty = 0;
      const used: Record<string, number> = {};
      for (const q of queries) {
        const t0 = performance.now();
        const res = await searchPages(h.ctx, h.principal, { q, mode, limit: 10, includeArchived: false });
        samples.push(performance.now() - t0);
        if (res.results.length === 0) empty++;
        const u = String((res as { mode_used?: unknown }).mode_used ?? mode);
        used[u] = (used[u] ?? 0) + 1;
      }
      const slowest = samples
        .map((ms, i) => ({ q: queries[i]!, ms: round(ms, 1) }))
        .sort((a, b) => b.ms - a.ms)
        .slice(0, 5);
      search[mode] = { ...latency(samples), empty_results: empty, mode_used: used, slowest };
      loads[`after_${mode}`] = loadAverage();
      log(`  ${mode}: p50 ${(search[mode] as { p50_ms: number }).p50_ms} ms, p95 ${(search[mode] as { p95_ms: number }).p95_ms} ms`);
    }
    out.search = { queries: queries.length, warmup_queries_per_mode: warm.length, limit: 10, ...search };

    const bundle = await findBundle();
    if (bundle) {
      const samples: number[] = [];
      const bq = queries.slice(0, Math.min(100, queries.length));
      for (const q of warm.slice(0, 10)) await bundle(h.ctx, h.principal, { intent: q, budgetTokens: 4000 });
      for (const q of bq) {
        const t0 = performance.now();
        await bundle(h.ctx, h.principal, { intent: q, budgetTokens: 4000 });
        samples.push(performance.now() - t0);
      }
      out.bundle = { budget_tokens: 4000, ...latency(samples) };
      loads.after_bundle = loadAverage();
    } else out.bundle = 'src/retrieval/bundle.ts not in this build';

    out.load_average_1m = loads;
    if (opts.service !== 'no') await builtService();
    return out;
  } finally {
    await h.close();
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  installCleanupHandlers();
  const args = process.argv.slice(2);
  const num = (name: string, dflt: number) => {
    const a = args.find((x) => x.startsWith(`--${name}=`));
    return a ? Number(a.slice(name.length + 3)) : Number(process.env[`BENCH_${name.toUpperCase()}`] ?? dflt);
  };
  const pgArg = args.find((a) => a === '--pg' || a.startsWith('--pg='));
  const pgAdminUrl = pgArg ? (pgArg.includes('=') ? pgArg.slice(5) : 'postgres://postgres@127.0.0.1:5432/test') : undefined;
  const dirArg = args.find((a) => a.startsWith('--data-dir='));
  const dataDir = dirArg ? path.resolve(dirArg.slice('--data-dir='.length)) : undefined;
  if (dataDir) fs.mkdirSync(dataDir, { recursive: true });
  const service = args.includes('--service-only') ? 'only' : args.includes('--no-service') ? 'no' : 'after';
  const nodeArgs = args.find((a) => a.startsWith('--node-args='));
  const serviceNodeArgs = nodeArgs ? nodeArgs.slice('--node-args='.length).split(' ').filter(Boolean) : undefined;
  const t0 = performance.now();
  runStandalone(async () => ({
    ...(await benchSearchScale({
      pages: num('pages', 10_000),
      queries: num('queries', 300),
      pgAdminUrl,
      vectors: !args.includes('--no-vectors'),
      dataDir,
      service,
      serviceNodeArgs,
    })),
    total_duration_s: round((performance.now() - t0) / 1000, 1),
  }));
}
