/**
 * Issue 18: SQLite and PostgreSQL side by side, in ONE run, on the same corpus and machine.
 *
 *   npm run bench -- --only=engines [--quick]        (or: tsx bench/engines.ts [--quick])
 *
 * Per engine, against the real service (src/main.ts) in a child process, over HTTP with an agent key:
 *   1. seed N synthetic pages (bench/search-scale.ts's corpus: real-looking words, 5 spaces × 20
 *      folders) with POST /api/v1/nodes from 8 parallel writers — that is the "pages created per
 *      second, 8 writers" figure; then wait (bounded) until the embedding backlog is drained;
 *   2. GET /api/v1/nodes/:id of random seeded pages, 8 keep-alive clients (autocannon);
 *   3. durable commits per second, one writer: PUT /api/v1/nodes/:id with If-Match, for a window;
 *   4. at once after that: keyword searches (GET /api/v1/search?mode=fts) with varied words taken
 *      from the corpus (common, rare, a run of words from one page, common + rare), then the same
 *      queries in hybrid mode, then POST /api/v1/bundle; p50/p95/p99 and how many did not answer
 *      within the per-query timeout (5 s; such a query is abandoned, not waited for);
 *   5. controls, after those figures: the keyword searches once more (warm), and on PostgreSQL
 *      the planner statistics seen before the searches and the searches again after ANALYZE.
 * On PostgreSQL also: one node against two node processes on the same DATABASE_URL, at the same
 * client load (8 writers; 8 read connections), split 4 + 4 over the two nodes.
 *
 * PostgreSQL: a fresh database `bench_engines_<pid>` on BENCH_PG_URL (default
 * postgres://postgres@127.0.0.1:5432/postgres), dropped at the end, also on failure or a signal.
 * When PostgreSQL does not answer, the benchmark prints a loud line and returns {skipped}.
 * CPU seconds come from /proc (Linux; null elsewhere): the service process group(s), the backends
 * serving the bench database, and every PostgreSQL process of the machine (other users of that
 * server count there too, also during the SQLite side).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { createAgentWithKey, signupHuman } from '../test/support/server.js';
import { rng } from './content.js';
import { pagePath, syntheticPage, vocabulary } from './search-scale.js';
import {
  installCleanupHandlers,
  load,
  latency,
  loadAverage,
  log,
  makeTempDir,
  removeTempDir,
  ROOT,
  round,
  runStandalone,
  SERVICE_ENV,
  startChild,
  type ChildServer,
  type LoadResult,
} from './util.js';

export interface EnginesOptions {
  /** Pages seeded per engine (3,000 full, 300 quick). */
  pages: number;
  /** Seconds of each timed window (reads, one-writer commits, the two-node runs). */
  windowS: number;
  /** Unmeasured warm-up before each read window. */
  warmupS: number;
  /** Keyword and hybrid queries (300). */
  queries: number;
  /** Bundles. */
  bundles: number;
  /** Concurrent writers and read connections (8). */
  clients: number;
  /** Bound on waiting for the embedding backlog after seeding. */
  drainMaxS: number;
  /** Admin URL of the PostgreSQL server; a database is created and dropped on it. */
  pgAdminUrl?: string;
  /** Per-query timeout (5,000 ms). */
  queryTimeoutMs?: number;
}

export const ENGINES_SIZES = {
  full: { pages: 3_000, windowS: 10, warmupS: 2, queries: 300, bundles: 100, clients: 8, drainMaxS: 600 },
  quick: { pages: 300, windowS: 3, warmupS: 1, queries: 60, bundles: 20, clients: 8, drainMaxS: 120 },
} satisfies Record<string, EnginesOptions>;

const DEFAULT_PG_ADMIN_URL = 'postgres://postgres@127.0.0.1:5432/postgres';
const METRICS_TOKEN = 'bench-engines-metrics';
const WRITE_TIMEOUT_MS = 30_000;
/** A query phase stops early (and says so) when it has run this long. */
const PHASE_MAX_S = 300;

// ---------------------------------------------------------------------------------------------
// Corpus and queries
// ---------------------------------------------------------------------------------------------

interface CorpusPage {
  n: number;
  path: string;
  content: string;
}

interface Query {
  kind: 'common' | 'rare' | 'run' | 'common_rare';
  q: string;
}

const STOP = new Set(
  'the a an and or of to in on for is are was be by with as at it this that from can you your which not if when these their its into but also has have will may more than all any other such some only most so do does should see'.split(
    ' ',
  ),
);

function bodyWords(content: string): string[] {
  return (
    content
      .replace(/^---[\s\S]*?---\n/, '')
      .replace(/\[\[[^\]]*\]\]/g, ' ')
      .toLowerCase()
      .match(/[a-z][a-z0-9-]+/g) ?? []
  ).filter((w) => w.length > 2 && !STOP.has(w) && !w.endsWith('-'));
}

/**
 * Queries with varied words from the seeded pages, in four kinds (a quarter each): one common
 * word (among the 50 with the highest page frequency), one rare word (in at most 2 pages), a run
 * of 2–4 words from one page, and a common word with a rare one.
 */
export function corpusQueries(pages: readonly CorpusPage[], count: number, seed = 1818): { queries: Query[]; common: number; rare: number } {
  const df = new Map<string, number>();
  const words = pages.map((p) => bodyWords(p.content));
  for (const ws of words) for (const w of new Set(ws)) df.set(w, (df.get(w) ?? 0) + 1);
  const byDf = [...df.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  const common = byDf.slice(0, 50).map(([w]) => w);
  const rare = byDf.filter(([, n]) => n <= 2).map(([w]) => w);
  const r = rng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const out: Query[] = [];
  for (let i = 0; i < count; i++) {
    const k = i % 4;
    if (k === 0 || rare.length === 0) out.push({ kind: 'common', q: pick(common) });
    else if (k === 1) out.push({ kind: 'rare', q: pick(rare) });
    else if (k === 2) {
      const ws = pick(words);
      const len = 2 + Math.floor(r() * 3);
      const at = Math.floor(r() * Math.max(1, ws.length - len));
      out.push({ kind: 'run', q: ws.slice(at, at + len).join(' ') });
    } else out.push({ kind: 'common_rare', q: `${pick(common)} ${pick(rare)}` });
  }
  return { queries: out, common: common.length, rare: rare.length };
}

// ---------------------------------------------------------------------------------------------
// CPU seconds from /proc
// ---------------------------------------------------------------------------------------------

let clockTicks: number | undefined;
function ticksPerSecond(): number {
  if (clockTicks === undefined) {
    try {
      clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
}

/** (pid, comm, fields after the command) of every process, read from /proc/<pid>/stat. */
function procStats(): { pid: string; comm: string; f: string[] }[] {
  const out: { pid: string; comm: string; f: string[] }[] = [];
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      out.push({ pid, comm: stat.slice(stat.indexOf('(') + 1, close), f: stat.slice(close + 2).split(' ') });
    } catch {
      /* the process ended meanwhile */
    }
  }
  return out;
}

/** utime + stime + cutime + cstime (fields 14–17 of stat; here 11–14 after the command), seconds. */
function cpuOf(f: string[]): number {
  return (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / ticksPerSecond();
}

interface CpuSnapshot {
  service: number | null;
  postgres: number | null;
  /** CPU seconds per backend process serving the bench database (its title names the database). */
  backends: Map<string, number> | null;
}

/** The PostgreSQL database whose backends `cpuSnapshot` follows (set while the PostgreSQL side runs). */
let benchDatabase: string | undefined;

/**
 * CPU seconds used so far by the service process groups, by every `postgres` process of the
 * machine (a backend that ended is counted in the postmaster's cutime, so the sum is monotonic;
 * other users of the server count too), and by each backend connected to the bench database.
 */
function cpuSnapshot(pgids: (number | undefined)[]): CpuSnapshot {
  if (!fs.existsSync('/proc/self/stat')) return { service: null, postgres: null, backends: null };
  const want = new Set(pgids.filter((p): p is number => p !== undefined));
  let service = 0;
  let postgres = 0;
  let sawPostgres = false;
  const backends = new Map<string, number>();
  for (const p of procStats()) {
    if (want.has(Number(p.f[2]))) service += cpuOf(p.f);
    if (p.comm === 'postgres') {
      postgres += cpuOf(p.f);
      sawPostgres = true;
      if (benchDatabase) {
        try {
          if (fs.readFileSync(`/proc/${p.pid}/cmdline`, 'utf8').includes(` ${benchDatabase} `)) backends.set(p.pid, cpuOf(p.f));
        } catch {
          /* ended meanwhile */
        }
      }
    }
  }
  return { service: round(service, 2), postgres: sawPostgres ? round(postgres, 2) : null, backends: benchDatabase ? backends : null };
}

function cpuDelta(
  a: CpuSnapshot,
  b: CpuSnapshot,
): { service_cpu_s: number | null; postgres_backends_cpu_s?: number; postgres_server_all_cpu_s: number | null } {
  const out: ReturnType<typeof cpuDelta> = {
    service_cpu_s: a.service === null || b.service === null ? null : round(b.service - a.service, 2),
    postgres_server_all_cpu_s: a.postgres === null || b.postgres === null ? null : round(b.postgres - a.postgres, 2),
  };
  if (a.backends && b.backends) {
    // Backends alive at the end; one that closed within the window is missing (pools keep theirs under load).
    let s = 0;
    for (const [pid, cpu] of b.backends) s += cpu - (a.backends.get(pid) ?? 0);
    out.postgres_backends_cpu_s = round(s, 2);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL: probe, fresh database, drop
// ---------------------------------------------------------------------------------------------

async function pgReachable(adminUrl: string): Promise<string | null> {
  const c = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 3000 });
  try {
    await c.connect();
    await c.query('select 1');
    return null;
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  } finally {
    await c.end().catch(() => undefined);
  }
}

interface BenchDatabase {
  name: string;
  url: string;
  drop(): Promise<void>;
}

async function createDatabase(adminUrl: string): Promise<BenchDatabase> {
  const name = `bench_engines_${process.pid}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`drop database if exists ${name} with (force)`);
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  // A signal or process.exit skips `finally`: drop it from a short synchronous child then.
  const onExit = () => {
    const script =
      `const pg=require('pg');const c=new pg.Client({connectionString:${JSON.stringify(adminUrl)}});` +
      `c.connect().then(()=>c.query('drop database if exists ${name} with (force)')).finally(()=>c.end()).catch(()=>process.exit(1));`;
    spawnSync(process.execPath, ['-e', script], { cwd: ROOT, stdio: 'ignore', timeout: 15_000 });
  };
  process.on('exit', onExit);
  let dropped = false;
  return {
    name,
    url: u.toString(),
    drop: async () => {
      if (dropped) return;
      dropped = true;
      const c = new pg.Client({ connectionString: adminUrl });
      try {
        await c.connect();
        await c.query(`drop database if exists ${name} with (force)`);
      } finally {
        await c.end().catch(() => undefined);
        process.off('exit', onExit);
      }
    },
  };
}

async function pgFacts(url: string): Promise<Record<string, string | number>> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const show = async (k: string) => String((await c.query(`show ${k}`)).rows[0]?.[k] ?? 'unknown');
    const size = Number((await c.query('select pg_database_size(current_database()) as n')).rows[0]?.n ?? 0);
    return {
      server_version: await show('server_version'),
      fsync: await show('fsync'),
      synchronous_commit: await show('synchronous_commit'),
      wal_sync_method: await show('wal_sync_method'),
      shared_buffers: await show('shared_buffers'),
      // Off, nothing analyzes freshly loaded tables: see search_after_load.planner_stats_before.
      autovacuum: await show('autovacuum'),
      autovacuum_naptime: await show('autovacuum_naptime'),
      database_bytes: size,
    };
  } finally {
    await c.end();
  }
}

/** What the planner knew of the searched tables: rows, changes since the last analyze, when that was. */
async function pgTableStats(url: string): Promise<Record<string, unknown>> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const r = await c.query(
      `select relname, n_live_tup, n_mod_since_analyze, last_analyze, last_autoanalyze, autoanalyze_count
       from pg_stat_user_tables where relname in ('pages', 'page_sections') order by relname`,
    );
    return Object.fromEntries(
      r.rows.map((x: Record<string, unknown>) => [
        x.relname,
        {
          n_live_tup: Number(x.n_live_tup),
          n_mod_since_analyze: Number(x.n_mod_since_analyze),
          analyzed: x.last_analyze !== null || x.last_autoanalyze !== null,
          autoanalyze_count: Number(x.autoanalyze_count),
        },
      ]),
    );
  } finally {
    await c.end();
  }
}

function dirBytes(dir: string): number {
  let n = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    n += e.isDirectory() ? dirBytes(p) : fs.statSync(p).size;
  }
  return n;
}

// ---------------------------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------------------------

interface Node {
  server: ChildServer;
  url: string;
}

interface WriteItem {
  path: string;
  content: string;
}

interface WritersResult {
  writers: number;
  nodes: number;
  duration_s: number;
  created: number;
  failed: number;
  timed_out: number;
  pages_per_sec: number;
  latency: ReturnType<typeof latency>;
  first_failure?: string;
}

/**
 * `writers` loops per node URL, each POSTing the next item until `next` returns undefined or
 * the deadline passes; keep-alive (undici's pool behind fetch).
 */
async function runWriters(opts: {
  urls: string[];
  writersPerUrl: number;
  key: string;
  next: () => WriteItem | undefined;
  deadlineMs?: number;
  onCreated?: (id: string, etag: string, item: WriteItem) => void;
}): Promise<WritersResult> {
  const samples: number[] = [];
  let failed = 0;
  let timedOut = 0;
  let firstFailure: string | undefined;
  const t0 = performance.now();
  const loop = async (url: string) => {
    for (;;) {
      if (opts.deadlineMs !== undefined && performance.now() >= opts.deadlineMs) return;
      const item = opts.next();
      if (!item) return;
      const s = performance.now();
      try {
        const res = await fetch(`${url}/api/v1/nodes`, {
          method: 'POST',
          headers: { authorization: `Bearer ${opts.key}`, 'content-type': 'application/json' },
          body: JSON.stringify(item),
          signal: AbortSignal.timeout(WRITE_TIMEOUT_MS),
        });
        const text = await res.text();
        if (res.status === 201) {
          samples.push(performance.now() - s);
          const body = JSON.parse(text) as { id: string; content_hash: string };
          opts.onCreated?.(body.id, res.headers.get('etag') ?? `"${body.content_hash}"`, item);
        } else {
          failed++;
          firstFailure ??= `${res.status} ${text.slice(0, 300)}`;
        }
      } catch (e) {
        if (e instanceof Error && e.name === 'TimeoutError') timedOut++;
        else {
          failed++;
          firstFailure ??= e instanceof Error ? e.message : String(e);
        }
      }
    }
  };
  const loops: Promise<void>[] = [];
  for (const url of opts.urls) for (let i = 0; i < opts.writersPerUrl; i++) loops.push(loop(url));
  await Promise.all(loops);
  const secs = (performance.now() - t0) / 1000;
  const out: WritersResult = {
    writers: opts.urls.length * opts.writersPerUrl,
    nodes: opts.urls.length,
    duration_s: round(secs, 2),
    created: samples.length,
    failed,
    timed_out: timedOut,
    pages_per_sec: round(samples.length / secs, 1),
    latency: latency(samples),
  };
  if (firstFailure !== undefined) out.first_failure = firstFailure;
  return out;
}

/** Pages waiting for vectors, from /metrics (cv_embeddings_backlog); null when not exported. */
async function backlog(url: string): Promise<number | null> {
  try {
    const res = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` }, signal: AbortSignal.timeout(10_000) });
    const text = await res.text();
    const m = /^cv_embeddings_backlog\s+(\S+)/m.exec(text);
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

async function waitForBacklog(url: string, maxS: number): Promise<{ waited_s: number; backlog_at_start: number | null; backlog_at_end: number | null }> {
  const t0 = performance.now();
  const first = await backlog(url);
  let last = first;
  while (last !== null && last > 0 && performance.now() - t0 < maxS * 1000) {
    await new Promise((r) => setTimeout(r, 500));
    last = await backlog(url);
  }
  return { waited_s: round((performance.now() - t0) / 1000, 1), backlog_at_start: first, backlog_at_end: last };
}

interface TimedQueries {
  n: number;
  answered: number;
  timed_out: number;
  failed: number;
  p50_ms: number;
  p95_ms: number;
  p99_ms: number;
  max_ms: number;
  first_ms: number | null;
  stopped_early_after_s?: number;
  first_failure?: string;
}

/**
 * Sequential requests, each abandoned after `timeoutMs` (counted as timed out, not waited for);
 * latency percentiles over the answered ones. Returns per-kind p95 too.
 */
async function timedQueries<T extends { kind: string }>(
  items: readonly T[],
  timeoutMs: number,
  send: (item: T, signal: AbortSignal) => Promise<Response>,
  onOk?: (item: T, body: unknown) => void,
): Promise<TimedQueries & { by_kind: Record<string, { n: number; p95_ms: number; timed_out: number }> }> {
  const samples: number[] = [];
  const byKind = new Map<string, { samples: number[]; timedOut: number }>();
  let timedOut = 0;
  let failed = 0;
  let firstFailure: string | undefined;
  let firstMs: number | null = null;
  const t0 = performance.now();
  let stoppedAt: number | undefined;
  for (const item of items) {
    if (performance.now() - t0 > PHASE_MAX_S * 1000) {
      stoppedAt = round((performance.now() - t0) / 1000, 1);
      break;
    }
    const k = byKind.get(item.kind) ?? { samples: [], timedOut: 0 };
    byKind.set(item.kind, k);
    const s = performance.now();
    try {
      const res = await send(item, AbortSignal.timeout(timeoutMs));
      const text = await res.text();
      const ms = performance.now() - s;
      if (res.ok) {
        samples.push(ms);
        k.samples.push(ms);
        firstMs ??= ms;
        onOk?.(item, JSON.parse(text));
      } else {
        failed++;
        firstFailure ??= `${res.status} ${text.slice(0, 300)}`;
      }
    } catch (e) {
      if (e instanceof Error && e.name === 'TimeoutError') {
        timedOut++;
        k.timedOut++;
      } else {
        failed++;
        firstFailure ??= e instanceof Error ? e.message : String(e);
      }
    }
  }
  const l = latency(samples);
  const out: TimedQueries & { by_kind: Record<string, { n: number; p95_ms: number; timed_out: number }> } = {
    n: samples.length + timedOut + failed,
    answered: samples.length,
    timed_out: timedOut,
    failed,
    p50_ms: l.p50_ms,
    p95_ms: l.p95_ms,
    p99_ms: l.p99_ms,
    max_ms: l.max_ms,
    first_ms: firstMs === null ? null : round(firstMs, 2),
    by_kind: Object.fromEntries([...byKind].map(([kind, v]) => [kind, { n: v.samples.length, p95_ms: latency(v.samples).p95_ms, timed_out: v.timedOut }])),
  };
  if (stoppedAt !== undefined) out.stopped_early_after_s = stoppedAt;
  if (firstFailure !== undefined) out.first_failure = firstFailure;
  return out;
}

function readLoad(node: Node, key: string, ids: readonly string[], connections: number, durationS: number, seed: number): Promise<LoadResult> {
  const r = rng(seed);
  return load({
    url: node.url,
    connections,
    durationS,
    headers: { authorization: `Bearer ${key}` },
    path: `/api/v1/nodes/${ids[0]}`,
    request: () => ({ path: `/api/v1/nodes/${ids[Math.floor(r() * ids.length)]!}` }),
  });
}

/** Two loads at once (one per node), summed. */
async function readLoadTwo(a: Node, b: Node, key: string, ids: readonly string[], connections: number, durationS: number): Promise<Record<string, unknown>> {
  const half = Math.ceil(connections / 2);
  const [ra, rb] = await Promise.all([readLoad(a, key, ids, half, durationS, 31), readLoad(b, key, ids, connections - half, durationS, 37)]);
  return {
    connections,
    per_node: [ra, rb],
    requests_per_sec: round(ra.requests_per_sec + rb.requests_per_sec, 1),
    requests_non2xx: ra.requests_non2xx + rb.requests_non2xx,
    errors: ra.errors + rb.errors,
    latency_p50_ms_max_of_nodes: Math.max(ra.latency_p50_ms, rb.latency_p50_ms),
    latency_p99_ms_max_of_nodes: Math.max(ra.latency_p99_ms, rb.latency_p99_ms),
  };
}

// ---------------------------------------------------------------------------------------------
// One engine
// ---------------------------------------------------------------------------------------------

interface EngineRun {
  result: Record<string, unknown>;
  /** Seeded pages' ids. */
  ids: string[];
}

type Engine = 'sqlite' | 'postgres';

async function startNode(engine: Engine, name: string, env: Record<string, string>): Promise<Node> {
  const server = await startChild({
    name,
    script: 'src/main.ts',
    env: { ...SERVICE_ENV, METRICS_TOKEN, ...env },
    readyPath: '/healthz',
    readyTimeoutMs: 120_000,
  });
  log(`${engine}: ${name} listening at ${server.url}`);
  return { server, url: server.url };
}

/**
 * The figures of one engine on a running node. With `pgSide` (PostgreSQL): the planner
 * statistics of the searched tables are read before the searches, the keyword searches are
 * repeated after an ANALYZE, and `twoNodes` is called last with the agent key and the seeded
 * ids, while the first node still runs.
 */
async function measureEngine(
  engine: Engine,
  node: Node,
  corpus: readonly CorpusPage[],
  queries: readonly Query[],
  opts: EnginesOptions,
  facts: () => Promise<Record<string, unknown>>,
  extraPgids: () => (number | undefined)[],
  pgSide?: { url: string; twoNodes: (key: string, ids: string[]) => Promise<Record<string, unknown>> },
): Promise<EngineRun> {
  const timeoutMs = opts.queryTimeoutMs ?? 5_000;
  const loads: Record<string, number> = { at_start: loadAverage() };
  const cpu: Record<string, ReturnType<typeof cpuDelta>> = {};
  const snap = () => cpuSnapshot([node.server.pgid, ...extraPgids()]);
  const out: Record<string, unknown> = { engine };

  const human = await signupHuman(node.url, 'Bench');
  const agent = await createAgentWithKey(human.client, [{ action: 'read' }, { action: 'write' }, { action: 'search' }], { name: 'bench-engines' });
  const key = agent.key;

  // 1. Seed through POST, 8 writers.
  log(`${engine}: seeding ${corpus.length} pages with POST /api/v1/nodes, ${opts.clients} writers`);
  const ids: string[] = [];
  const etags = new Map<string, string>();
  const contentOf = new Map<string, string>();
  let next = 0;
  let c0 = snap();
  const seed = await runWriters({
    urls: [node.url],
    writersPerUrl: opts.clients,
    key,
    next: () => {
      const c = corpus[next++];
      return c ? { path: c.path, content: c.content } : undefined;
    },
    onCreated: (id, etag, item) => {
      ids.push(id);
      etags.set(id, etag);
      contentOf.set(id, item.content);
    },
  });
  cpu.seed = cpuDelta(c0, snap());
  loads.after_seed = loadAverage();
  if (seed.created !== corpus.length)
    throw new Error(`${engine}: seeding created ${seed.created} of ${corpus.length} pages (${seed.first_failure ?? 'timeouts'})`);
  log(`  ${seed.pages_per_sec} pages/s (p50 ${seed.latency.p50_ms} ms, p99 ${seed.latency.p99_ms} ms)`);
  out.creates_8_writers_seed = seed;

  log(`${engine}: waiting for the embedding backlog (at most ${opts.drainMaxS} s)`);
  c0 = snap();
  out.embedding_drain_after_seed = { ...(await waitForBacklog(node.url, opts.drainMaxS)), ...cpuDelta(c0, snap()) };
  loads.after_drain = loadAverage();

  // 2. Reads.
  log(`${engine}: GET /api/v1/nodes/:id of random seeded pages, ${opts.clients} connections, ${opts.windowS} s`);
  await readLoad(node, key, ids, opts.clients, opts.warmupS, 7);
  c0 = snap();
  const reads = await readLoad(node, key, ids, opts.clients, opts.windowS, 11);
  cpu.reads = cpuDelta(c0, snap());
  loads.after_reads = loadAverage();
  log(`  ${reads.requests_per_sec} req/s (p50 ${reads.latency_p50_ms} ms, p99 ${reads.latency_p99_ms} ms, non-2xx ${reads.requests_non2xx})`);
  out.reads_get_node = reads;

  // 3. One writer, PUT with If-Match, for a window.
  log(`${engine}: one writer, PUT with If-Match on random pages, ${opts.windowS} s`);
  const r = rng(4711);
  const rev = new Map<string, number>();
  const commitSamples: number[] = [];
  let commitFailed = 0;
  let commitTimedOut = 0;
  let commitFirstFailure: string | undefined;
  c0 = snap();
  const t0 = performance.now();
  const stopAt = t0 + opts.windowS * 1000;
  while (performance.now() < stopAt) {
    const id = ids[Math.floor(r() * ids.length)]!;
    const v = (rev.get(id) ?? 0) + 1;
    rev.set(id, v);
    const content = `${contentOf.get(id)!}\nRevision ${v}.\n`;
    const s = performance.now();
    try {
      const res = await fetch(`${node.url}/api/v1/nodes/${id}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'if-match': etags.get(id)! },
        body: JSON.stringify({ content }),
        signal: AbortSignal.timeout(WRITE_TIMEOUT_MS),
      });
      const text = await res.text();
      if (res.status === 200 && (JSON.parse(text) as { changed: boolean }).changed) {
        commitSamples.push(performance.now() - s);
        etags.set(id, res.headers.get('etag') ?? `"${(JSON.parse(text) as { content_hash: string }).content_hash}"`);
      } else {
        commitFailed++;
        commitFirstFailure ??= `${res.status} ${text.slice(0, 300)}`;
      }
    } catch (e) {
      if (e instanceof Error && e.name === 'TimeoutError') commitTimedOut++;
      else {
        commitFailed++;
        commitFirstFailure ??= e instanceof Error ? e.message : String(e);
      }
    }
  }
  const commitSecs = (performance.now() - t0) / 1000;
  cpu.commits = cpuDelta(c0, snap());
  loads.after_commits = loadAverage();
  const commits: Record<string, unknown> = {
    method: 'PUT /api/v1/nodes/:id with If-Match (the ETag of the previous write), one writer, sequential',
    duration_s: round(commitSecs, 2),
    commits: commitSamples.length,
    failed: commitFailed,
    timed_out: commitTimedOut,
    commits_per_sec: round(commitSamples.length / commitSecs, 1),
    latency: latency(commitSamples),
  };
  if (commitFirstFailure !== undefined) commits.first_failure = commitFirstFailure;
  log(`  ${String(commits.commits_per_sec)} commits/s (p50 ${latency(commitSamples).p50_ms} ms)`);
  out.commits_1_writer = commits;

  // 4. Searches and bundles at once after that load.
  const search = async (mode: 'fts' | 'hybrid') => {
    const used: Record<string, number> = {};
    let empty = 0;
    const res = await timedQueries(
      queries,
      timeoutMs,
      (q, signal) =>
        fetch(`${node.url}/api/v1/search?${new URLSearchParams({ q: q.q, mode, limit: '10' }).toString()}`, {
          headers: { authorization: `Bearer ${key}` },
          signal,
        }),
      (_q, body) => {
        const b = body as { mode_used?: string; results?: unknown[] };
        used[b.mode_used ?? mode] = (used[b.mode_used ?? mode] ?? 0) + 1;
        if ((b.results ?? []).length === 0) empty++;
      },
    );
    return { ...res, mode_used: used, empty_results: empty };
  };
  const backlogBefore = await backlog(node.url);
  const statsBefore = pgSide ? await pgTableStats(pgSide.url) : undefined;
  log(`${engine}: ${queries.length} keyword searches (mode=fts), timeout ${timeoutMs} ms each; embedding backlog ${String(backlogBefore)}`);
  c0 = snap();
  const fts = await search('fts');
  cpu.keyword_search = cpuDelta(c0, snap());
  loads.after_keyword_search = loadAverage();
  log(`  fts p50 ${fts.p50_ms} ms, p95 ${fts.p95_ms} ms, timed out ${fts.timed_out}`);
  log(`${engine}: ${queries.length} hybrid searches`);
  c0 = snap();
  const hybrid = await search('hybrid');
  cpu.hybrid_search = cpuDelta(c0, snap());
  loads.after_hybrid_search = loadAverage();
  log(`  hybrid p50 ${hybrid.p50_ms} ms, p95 ${hybrid.p95_ms} ms, timed out ${hybrid.timed_out}`);
  const bundleItems = queries.slice(0, opts.bundles);
  log(`${engine}: ${bundleItems.length} bundles (POST /api/v1/bundle, budget 4000 tokens)`);
  c0 = snap();
  const bundle = await timedQueries(bundleItems, timeoutMs, (q, signal) =>
    fetch(`${node.url}/api/v1/bundle`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ intent: q.q, budget_tokens: 4000 }),
      signal,
    }),
  );
  cpu.bundle = cpuDelta(c0, snap());
  loads.after_bundle = loadAverage();
  log(`  bundle p50 ${bundle.p50_ms} ms, p95 ${bundle.p95_ms} ms, timed out ${bundle.timed_out}`);
  // Controls, after the figures above: the same keyword searches again (warm), and on
  // PostgreSQL once more after an explicit ANALYZE (planner statistics of the loaded tables).
  log(`${engine}: the ${queries.length} keyword searches again (second pass)`);
  const ftsAgain = await search('fts');
  log(`  fts p50 ${ftsAgain.p50_ms} ms, p95 ${ftsAgain.p95_ms} ms`);
  let ftsAnalyzed: Awaited<ReturnType<typeof search>> | undefined;
  let analyzeMs: number | undefined;
  if (pgSide) {
    const c = new pg.Client({ connectionString: pgSide.url });
    await c.connect();
    try {
      const a0 = performance.now();
      await c.query('analyze');
      analyzeMs = round(performance.now() - a0, 0);
    } finally {
      await c.end();
    }
    log(`${engine}: ANALYZE took ${analyzeMs} ms; the keyword searches a third time`);
    ftsAnalyzed = await search('fts');
    log(`  fts p50 ${ftsAnalyzed.p50_ms} ms, p95 ${ftsAnalyzed.p95_ms} ms`);
  }
  out.search_after_load = {
    per_query_timeout_ms: timeoutMs,
    queries: queries.length,
    limit: 10,
    embedding_backlog_before: backlogBefore,
    ...(statsBefore ? { planner_stats_before: statsBefore } : {}),
    keyword_fts: fts,
    hybrid,
    bundle: { budget_tokens: 4000, ...bundle },
    control_keyword_fts_second_pass: ftsAgain,
    ...(ftsAnalyzed ? { control_keyword_fts_after_analyze: { analyze_ms: analyzeMs, ...ftsAnalyzed } } : {}),
  };

  if (pgSide) out.two_nodes = await pgSide.twoNodes(key, ids);

  out.storage = await facts();
  out.cpu_seconds = cpu;
  out.load_average_1m = loads;
  return { result: out, ids };
}

// ---------------------------------------------------------------------------------------------
// The benchmark
// ---------------------------------------------------------------------------------------------

function num(x: unknown, ...keys: string[]): number | null {
  let v: unknown = x;
  for (const k of keys) v = v && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined;
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

function ratio(a: number | null, b: number | null): number | null {
  return a === null || b === null || b === 0 ? null : round(a / b, 3);
}

export async function benchEngines(opts: EnginesOptions): Promise<Record<string, unknown>> {
  const adminUrl = opts.pgAdminUrl ?? process.env.BENCH_PG_URL ?? DEFAULT_PG_ADMIN_URL;
  const unreachable = await pgReachable(adminUrl);
  if (unreachable) {
    const msg = `PostgreSQL not reachable at ${adminUrl} (${unreachable}): the engines benchmark is SKIPPED`;
    process.stderr.write(`\n!!! ${msg} !!!\n\n`);
    return { skipped: msg };
  }

  const started = loadAverage();
  const v = vocabulary();
  const corpus: CorpusPage[] = Array.from({ length: opts.pages }, (_, n) => ({ n, path: pagePath(n), content: syntheticPage(v, n) }));
  const { queries, common, rare } = corpusQueries(corpus, opts.queries);
  log(`engines: ${opts.pages} pages (${v.source}); ${queries.length} queries (${common} common words, ${rare} rare words to draw from)`);

  const out: Record<string, unknown> = {
    cpus: os.cpus().length,
    cpu_model: os.cpus()[0]?.model ?? 'unknown',
    load_average_1m_at_start: started,
    options: { ...opts, pgAdminUrl: undefined, query_timeout_ms: opts.queryTimeoutMs ?? 5_000 },
    corpus: {
      pages: corpus.length,
      vocabulary: v.source,
      content_bytes_mean: Math.round(corpus.reduce((a, p) => a + Buffer.byteLength(p.content), 0) / corpus.length),
      layout: '5 spaces × 20 folders (bench/search-scale.ts pagePath/syntheticPage)',
      query_kinds: 'a quarter each: one common word (top 50 by page frequency), one rare word (in ≤ 2 pages), a run of 2–4 words from one page, common + rare',
    },
    service: 'src/main.ts in a child process (tsx) per node; builtin embeddings; load generator in the bench process on the same machine',
    service_env: SERVICE_ENV,
  };

  // SQLite.
  {
    const dataDir = makeTempDir('engines-sqlite');
    let node: Node | undefined;
    try {
      node = await startNode('sqlite', 'sqlite-node', { DATA_DIR: dataDir });
      const n = node;
      const run = await measureEngine(
        'sqlite',
        n,
        corpus,
        queries,
        opts,
        async () => ({ journal: 'WAL, synchronous=NORMAL + group commit (src/store/db.ts, wal-sync.ts)', data_dir_bytes: dirBytes(dataDir) }),
        () => [],
      );
      out.sqlite = run.result;
    } finally {
      if (node) await node.server.stop();
      removeTempDir(dataDir);
    }
  }

  // PostgreSQL: one node, then two.
  {
    const db = await createDatabase(adminUrl);
    const dirA = makeTempDir('engines-pg-a');
    const dirB = makeTempDir('engines-pg-b');
    let a: Node | undefined;
    let b: Node | undefined;
    try {
      log(`postgres: fresh database ${db.name}`);
      benchDatabase = db.name;
      a = await startNode('postgres', 'pg-node-a', { DATABASE_URL: db.url, DATA_DIR: dirA });
      const na = a;
      const twoNodes = async (key: string, ids: string[]): Promise<Record<string, unknown>> => {
        let seq = 0;
        const fresh = (label: string) => () => {
          const k = ++seq;
          const n = opts.pages + k;
          return { path: `space${n % 5}/${label}/page-${String(n).padStart(6, '0')}.md`, content: syntheticPage(v, n) };
        };
        const cpuOne: Record<string, ReturnType<typeof cpuDelta>> = {};
        const cpuTwo: Record<string, ReturnType<typeof cpuDelta>> = {};
        const loads: Record<string, number> = { at_start: loadAverage() };

        log(`postgres: ONE node, ${opts.clients} writers POST for ${opts.windowS} s`);
        let c0 = cpuSnapshot([na.server.pgid]);
        const oneCreates = await runWriters({
          urls: [na.url],
          writersPerUrl: opts.clients,
          key,
          next: fresh('one-node'),
          deadlineMs: performance.now() + opts.windowS * 1000,
        });
        cpuOne.creates = cpuDelta(c0, cpuSnapshot([na.server.pgid]));
        log(`  ${oneCreates.pages_per_sec} pages/s`);
        log(`postgres: ONE node, ${opts.clients} read connections for ${opts.windowS} s`);
        await readLoad(na, key, ids, opts.clients, opts.warmupS, 13);
        c0 = cpuSnapshot([na.server.pgid]);
        const oneReads = await readLoad(na, key, ids, opts.clients, opts.windowS, 17);
        cpuOne.reads = cpuDelta(c0, cpuSnapshot([na.server.pgid]));
        log(`  ${oneReads.requests_per_sec} req/s`);
        loads.after_one_node = loadAverage();

        b = await startNode('postgres', 'pg-node-b', { DATABASE_URL: db.url, DATA_DIR: dirB });
        const nb = b;
        const half = Math.ceil(opts.clients / 2);
        // Node B's first requests (cold caches, JIT) are not measured.
        await runWriters({ urls: [nb.url], writersPerUrl: 1, key, next: fresh('warm-b'), deadlineMs: performance.now() + opts.warmupS * 1000 });
        log(`postgres: TWO nodes, ${half} + ${opts.clients - half} writers POST for ${opts.windowS} s`);
        c0 = cpuSnapshot([na.server.pgid, nb.server.pgid]);
        const deadline = performance.now() + opts.windowS * 1000;
        const nextTwo = fresh('two-nodes');
        const [wa, wb] = await Promise.all([
          runWriters({ urls: [na.url], writersPerUrl: half, key, next: nextTwo, deadlineMs: deadline }),
          runWriters({ urls: [nb.url], writersPerUrl: opts.clients - half, key, next: nextTwo, deadlineMs: deadline }),
        ]);
        cpuTwo.creates = cpuDelta(c0, cpuSnapshot([na.server.pgid, nb.server.pgid]));
        const twoCreatesPerSec = round(wa.pages_per_sec + wb.pages_per_sec, 1);
        log(`  ${twoCreatesPerSec} pages/s (${wa.pages_per_sec} + ${wb.pages_per_sec})`);
        log(`postgres: TWO nodes, ${half} + ${opts.clients - half} read connections for ${opts.windowS} s`);
        await readLoadTwo(na, nb, key, ids, opts.clients, opts.warmupS);
        c0 = cpuSnapshot([na.server.pgid, nb.server.pgid]);
        const twoReads = await readLoadTwo(na, nb, key, ids, opts.clients, opts.windowS);
        cpuTwo.reads = cpuDelta(c0, cpuSnapshot([na.server.pgid, nb.server.pgid]));
        log(`  ${String(twoReads.requests_per_sec)} req/s`);
        loads.after_two_nodes = loadAverage();

        return {
          cpus: os.cpus().length,
          note: 'the same client load (writers, read connections) against one node, then split over two node processes on one DATABASE_URL; everything (nodes, PostgreSQL, load generator) shares this machine',
          one_node: { creates: oneCreates, reads: oneReads, cpu_seconds: cpuOne },
          two_nodes: {
            creates: {
              writers: opts.clients,
              pages_per_sec: twoCreatesPerSec,
              created: wa.created + wb.created,
              failed: wa.failed + wb.failed,
              timed_out: wa.timed_out + wb.timed_out,
              per_node: [wa, wb],
            },
            reads: twoReads,
            cpu_seconds: cpuTwo,
          },
          ratio_two_over_one_creates: ratio(twoCreatesPerSec, oneCreates.pages_per_sec),
          ratio_two_over_one_reads: ratio(twoReads.requests_per_sec as number, oneReads.requests_per_sec),
          load_average_1m: loads,
        };
      };
      const run = await measureEngine(
        'postgres',
        na,
        corpus,
        queries,
        opts,
        () => pgFacts(db.url),
        () => [b?.server.pgid],
        { url: db.url, twoNodes },
      );
      const { two_nodes: two, ...pgOut } = run.result;
      out.postgres = pgOut;
      out.postgres_two_nodes = two;
    } finally {
      benchDatabase = undefined;
      if (b) await b.server.stop();
      if (a) await a.server.stop();
      await db.drop().catch((e: unknown) => log(`could not drop ${db.name}: ${e instanceof Error ? e.message : String(e)}`));
      removeTempDir(dirA);
      removeTempDir(dirB);
    }
  }

  const s = out.sqlite;
  const p = out.postgres;
  out.ratios = {
    note: 'PostgreSQL figure / SQLite figure: above 1 means PostgreSQL is faster for rates, slower for latencies',
    pg_over_sqlite_reads: ratio(num(p, 'reads_get_node', 'requests_per_sec'), num(s, 'reads_get_node', 'requests_per_sec')),
    pg_over_sqlite_commits_1_writer: ratio(num(p, 'commits_1_writer', 'commits_per_sec'), num(s, 'commits_1_writer', 'commits_per_sec')),
    pg_over_sqlite_creates_8_writers: ratio(num(p, 'creates_8_writers_seed', 'pages_per_sec'), num(s, 'creates_8_writers_seed', 'pages_per_sec')),
    pg_over_sqlite_keyword_p95: ratio(num(p, 'search_after_load', 'keyword_fts', 'p95_ms'), num(s, 'search_after_load', 'keyword_fts', 'p95_ms')),
    pg_over_sqlite_hybrid_p95: ratio(num(p, 'search_after_load', 'hybrid', 'p95_ms'), num(s, 'search_after_load', 'hybrid', 'p95_ms')),
    pg_over_sqlite_bundle_p95: ratio(num(p, 'search_after_load', 'bundle', 'p95_ms'), num(s, 'search_after_load', 'bundle', 'p95_ms')),
    pg_two_over_one_node_creates: num(out.postgres_two_nodes, 'ratio_two_over_one_creates'),
    pg_two_over_one_node_reads: num(out.postgres_two_nodes, 'ratio_two_over_one_reads'),
  };
  out.load_average_1m_at_end = loadAverage();
  return out;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  installCleanupHandlers();
  const quick = process.argv.includes('--quick');
  runStandalone(() => benchEngines(quick ? ENGINES_SIZES.quick : ENGINES_SIZES.full));
}
