/**
 * The built service (`node dist/main.js`, as `npm start` runs it) on a store another benchmark
 * loaded: its resident memory after start and after searches and bundles over HTTP, and those
 * requests' latency as a client sees it. bench/search-scale.ts runs it on its store (issue 19's
 * "RSS at 100,000 pages with vectors" figure).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { latency, log, ROOT, round, SERVICE_ENV, startChild, type ChildServer } from './util.js';

const MODES = ['fts', 'vector', 'hybrid'] as const;

/** VmRSS, VmHWM, RssAnon and RssFile of one process, in MB (Linux; null elsewhere). */
function memoryOf(pid: number | undefined): Record<string, number> | null {
  if (pid === undefined || !fs.existsSync(`/proc/${pid}/status`)) return null;
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => {
    const m = new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status);
    return m ? round(Number(m[1]) / 1024, 1) : -1;
  };
  return { rss_mb: field('VmRSS'), peak_rss_mb: field('VmHWM'), anon_mb: field('RssAnon'), file_mb: field('RssFile'), ...smapsOf(pid) };
}

/**
 * Resident memory by kind of mapping: the brk heap (malloc: SQLite's cache, the driver's
 * buffers), the largest anonymous mapping (the vector matrix's WebAssembly memory), the other
 * anonymous mappings (V8's heap, thread stacks, malloc's other arenas), files (the binary).
 */
function smapsOf(pid: number): Record<string, number> {
  let file = '';
  try {
    file = fs.readFileSync(`/proc/${pid}/smaps`, 'utf8');
  } catch {
    return {};
  }
  let name = '';
  let brk = 0;
  let anon: number[] = [];
  let files = 0;
  for (const line of file.split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      name = head[1] ?? '';
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (!rss) continue;
    const kb = Number(rss[1]);
    if (name === '[heap]') brk += kb;
    else if (name.startsWith('/')) files += kb;
    else anon.push(kb);
  }
  anon = anon.sort((a, b) => b - a);
  const mb = (kb: number) => round(kb / 1024, 1);
  return {
    smaps_malloc_heap_mb: mb(brk),
    smaps_largest_anon_mb: mb(anon[0] ?? 0),
    smaps_other_anon_mb: mb(anon.slice(1).reduce((a, b) => a + b, 0)),
    smaps_files_mb: mb(files),
  };
}

async function timed(url: string, init: RequestInit): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(url, init);
  const body = await res.text();
  const ms = performance.now() - t0;
  if (res.status !== 200) throw new Error(`${init.method ?? 'GET'} ${url}: ${res.status} ${body.slice(0, 300)}`);
  return ms;
}

export async function benchServiceMemory(opts: {
  dataDir: string;
  databaseUrl: string | undefined;
  key: string;
  queries: readonly string[];
  warm: readonly string[];
  /** Extra arguments for node (e.g. V8 flags to compare), default none. */
  nodeArgs?: string[];
}): Promise<Record<string, unknown>> {
  execFileSync(process.execPath, [path.join(ROOT, 'scripts', 'build.mjs')], { env: { ...process.env, BUILD_QUIET: '1' }, stdio: 'inherit' });
  let service: ChildServer | undefined;
  try {
    const t0 = performance.now();
    service = await startChild({
      name: 'built service',
      script: 'dist/main.js',
      plainNode: { nodeArgs: opts.nodeArgs ?? [] },
      env: { ...SERVICE_ENV, RATE_LIMIT_BUNDLE_PER_MIN: '1000000', DATA_DIR: opts.dataDir, ...(opts.databaseUrl ? { DATABASE_URL: opts.databaseUrl } : {}) },
      readyPath: '/readyz',
      readyTimeoutMs: 300_000,
    });
    const readyMs = performance.now() - t0;
    const pid = service.pgid; // detached: the node process leads its own group
    const afterStart = memoryOf(pid);
    log(`built service ready in ${round(readyMs, 0)} ms, RSS ${afterStart?.rss_mb ?? '?'} MB`);
    const headers = { authorization: `Bearer ${opts.key}` };
    const searchUrl = (q: string, mode: string) => `${service!.url}/api/v1/search?${new URLSearchParams({ q, mode, limit: '10' })}`;
    const bundleInit = (q: string): RequestInit => ({
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify({ intent: q, budget_tokens: 4000 }),
    });

    // The matrix loads in the background after start (a worker reads it on SQLite): the first
    // vector query waits for it, so the latencies below are the steady state's.
    const m0 = performance.now();
    await timed(searchUrl(opts.warm[0] ?? 'start', 'vector'), { headers });
    const matrixMs = performance.now() - m0;
    const afterMatrix = memoryOf(pid);
    log(`  first vector query ${round(matrixMs, 0)} ms (the matrix loaded), RSS ${afterMatrix?.rss_mb ?? '?'} MB`);
    const search: Record<string, unknown> = {};
    for (const mode of MODES) {
      for (const q of opts.warm) await timed(searchUrl(q, mode), { headers });
      const samples: number[] = [];
      for (const q of opts.queries) samples.push(await timed(searchUrl(q, mode), { headers }));
      search[mode] = latency(samples);
      log(`  http ${mode}: p50 ${latency(samples).p50_ms} ms, p95 ${latency(samples).p95_ms} ms`);
    }
    for (const q of opts.warm.slice(0, 10)) await timed(`${service.url}/api/v1/bundle`, bundleInit(q));
    const bundleSamples: number[] = [];
    for (const q of opts.queries.slice(0, 100)) bundleSamples.push(await timed(`${service.url}/api/v1/bundle`, bundleInit(q)));
    const afterLoad = memoryOf(pid);
    log(`  http bundle: p95 ${latency(bundleSamples).p95_ms} ms; RSS after ${afterLoad?.rss_mb ?? '?'} MB (peak ${afterLoad?.peak_rss_mb ?? '?'})`);
    return {
      command: `node ${[...(opts.nodeArgs ?? []), 'dist/main.js'].join(' ')}`,
      ready_ms: round(readyMs, 0),
      memory_after_start: afterStart,
      first_vector_query_ms: round(matrixMs, 0),
      memory_after_matrix: afterMatrix,
      memory_after_requests: afterLoad,
      http_search: { queries: opts.queries.length, warmup_queries_per_mode: opts.warm.length, ...search },
      http_bundle: { budget_tokens: 4000, ...latency(bundleSamples) },
    };
  } finally {
    if (service) await service.stop();
  }
}
