import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { authenticate } from '../src/auth/resolve.js';
import type { CoreContext } from '../src/core/context.js';
import type { Principal } from '../src/policy/principal.js';

/** The repository root (bench/..). */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * Environment for every service the benchmarks start (in-process and child). Rate limits stay on
 * (their per-request cost is part of serving) but are raised far above what a run can reach, so
 * no benchmark request is refused; LOG_LEVEL=warn as asked. Keys the config does not know are
 * ignored by loadConfig.
 */
export const SERVICE_ENV: Record<string, string> = {
  LOG_LEVEL: 'warn',
  RATE_LIMITS: 'on',
  RATE_LIMIT_API_PER_MIN: '1000000000',
  RATE_LIMIT_API_BURST: '1000000000',
  RATE_LIMIT_LOGIN_PER_MIN: '1000000000',
};

/**
 * With CV_CPU_PROF_DIR=<dir> set for the benchmark, the env that makes a service child record a
 * V8 CPU profile there (bench/cpu-prof-preload.mjs); else nothing.
 */
export function cpuProfileEnv(): Record<string, string> {
  const dir = process.env.CV_CPU_PROF_DIR;
  return dir ? { NODE_OPTIONS: `--import=${path.join(ROOT, 'bench', 'cpu-prof-preload.mjs')}`, CV_CPU_PROF_DIR: dir } : {};
}

/** Human progress: stderr only, stdout carries the one JSON result. */
export function log(msg: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
}

// ---------------------------------------------------------------------------------------------
// Cleanup registry: temp dirs and child process groups, released on normal exit and on failure.
// ---------------------------------------------------------------------------------------------

const tempDirs = new Set<string>();
const children = new Set<ChildProcess>();

/**
 * A watchdog in its own process group (bench/reaper.mjs): if this process dies without cleaning
 * up (SIGKILL, e.g. from tsx's signal relay under load), it kills the registered child groups
 * and removes the registered temp dirs when our end of its stdin closes.
 */
let reaper: ChildProcess | undefined;
function startReaper(): void {
  if (reaper) return;
  reaper = spawn(process.execPath, [path.join(ROOT, 'bench', 'reaper.mjs')], { stdio: ['pipe', 'ignore', 'ignore'], detached: true });
  reaper.on('error', () => {});
  reaper.stdin?.on('error', () => {});
  reaper.unref();
  (reaper.stdin as unknown as { unref?: () => void } | null)?.unref?.();
}
function tellReaper(line: string): void {
  reaper?.stdin?.write(`${line}\n`);
}

export function makeTempDir(label: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `cv-bench-${label}-`));
  tempDirs.add(dir);
  tellReaper(`+dir ${dir}`);
  return dir;
}

export function removeTempDir(dir: string): void {
  fs.rmSync(dir, { recursive: true, force: true });
  tempDirs.delete(dir);
  tellReaper(`-dir ${dir}`);
}

function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  try {
    // The child leads its own process group (detached), so this reaches tsx's node child too.
    process.kill(-child.pid, signal);
  } catch {
    try {
      child.kill(signal);
    } catch {
      /* already gone */
    }
  }
}

/** Synchronous last-resort cleanup (process 'exit', signals). */
export function cleanupAllSync(): void {
  for (const c of children) {
    killGroup(c, 'SIGKILL');
    if (c.pid !== undefined) tellReaper(`-pg ${c.pid}`);
  }
  children.clear();
  for (const d of tempDirs) {
    try {
      fs.rmSync(d, { recursive: true, force: true });
    } catch {
      /* best effort */
    }
  }
  tempDirs.clear();
  reaper?.stdin?.end();
}

let handlersInstalled = false;
export function installCleanupHandlers(): void {
  if (handlersInstalled) return;
  handlersInstalled = true;
  startReaper();
  process.on('exit', cleanupAllSync);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(sig, () => {
      log(`${sig}: cleaning up`);
      cleanupAllSync();
      process.exit(130);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------------------

export interface ChildServer {
  url: string;
  port: number;
  /** The child's process group (tsx and the node process it starts). */
  pgid: number | undefined;
  /** Last lines of the child's output, for error messages. */
  tail(): string;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Starts `tsx <script>` (or, with `plainNode`, `node <nodeArgs> <script>`: the built service)
 * from the repository root as a child process group listening on 127.0.0.1:<free port>, and
 * waits (bounded) until `readyPath` answers 2xx.
 */
export async function startChild(opts: {
  name: string;
  script: string;
  env: Record<string, string>;
  readyPath: string;
  readyTimeoutMs?: number;
  plainNode?: { nodeArgs: string[] };
}): Promise<ChildServer> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const lines: string[] = [];
  const keep = (chunk: Buffer) => {
    for (const l of chunk.toString('utf8').split('\n')) if (l.trim()) lines.push(l);
    if (lines.length > 200) lines.splice(0, lines.length - 200);
  };
  const [command, args] = opts.plainNode
    ? [process.execPath, [...opts.plainNode.nodeArgs, opts.script]]
    : [path.join(ROOT, 'node_modules', '.bin', 'tsx'), [opts.script]];
  const child = spawn(command, args, {
    cwd: ROOT,
    env: { ...process.env, ...opts.env, PORT: String(port), HOST: '127.0.0.1' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  children.add(child);
  if (child.pid !== undefined) tellReaper(`+pg ${child.pid}`);
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const tail = () => lines.slice(-30).join('\n');

  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      killGroup(child, 'SIGTERM');
      const done = await Promise.race([exited.then(() => true), sleep(10_000).then(() => false)]);
      if (!done) {
        log(`${opts.name}: no exit 10 s after SIGTERM, sending SIGKILL`);
        killGroup(child, 'SIGKILL');
        await Promise.race([exited, sleep(5_000)]);
      }
    }
    // tsx relays the signal to its node child; make sure nothing of the group is left.
    if (child.pid !== undefined) {
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        /* group already gone */
      }
    }
    children.delete(child);
    if (child.pid !== undefined) tellReaper(`-pg ${child.pid}`);
  };

  const deadline = Date.now() + (opts.readyTimeoutMs ?? 60_000);
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      await stop();
      throw new Error(`${opts.name} exited before it was ready (code ${child.exitCode}, signal ${child.signalCode}):\n${tail()}`);
    }
    try {
      const res = await fetch(url + opts.readyPath, { signal: AbortSignal.timeout(2_000) });
      await res.arrayBuffer();
      if (res.ok) break;
    } catch {
      /* not listening yet */
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`${opts.name} not ready after ${opts.readyTimeoutMs ?? 60_000} ms:\n${tail()}`);
    }
    await sleep(100);
  }
  return { url, port, pgid: child.pid, tail, stop };
}

// ---------------------------------------------------------------------------------------------
// Statistics and load
// ---------------------------------------------------------------------------------------------

/** Peak resident memory (VmHWM, bytes) of the largest process of a process group (Linux; null elsewhere). */
export function peakRssOfGroup(pgid: number | undefined): number | null {
  if (pgid === undefined || !fs.existsSync('/proc/self/status')) return null;
  let peak: number | null = null;
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      // Fields after the command (which may hold spaces): state, ppid, pgrp, …
      const pgrp = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
      if (pgrp !== pgid) continue;
      const hwm = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (hwm) peak = Math.max(peak ?? 0, Number(hwm[1]) * 1024);
    } catch {
      /* the process ended meanwhile */
    }
  }
  return peak;
}

export function round(n: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[idx]!;
}

/** Latency of a set of samples in ms: count, percentiles (50, 95, 99), mean and max. */
export function latency(samples: readonly number[]): { n: number; p50_ms: number; p95_ms: number; p99_ms: number; mean_ms: number; max_ms: number } {
  const s = [...samples].sort((a, b) => a - b);
  return {
    n: s.length,
    p50_ms: round(percentile(s, 50), 2),
    p95_ms: round(percentile(s, 95), 2),
    p99_ms: round(percentile(s, 99), 2),
    mean_ms: round(s.reduce((a, b) => a + b, 0) / Math.max(1, s.length), 2),
    max_ms: round(s[s.length - 1] ?? Number.NaN, 2),
  };
}

export function summarizeMs(samples: readonly number[]): { mean_ms: number; p50_ms: number; p99_ms: number; max_ms: number } {
  const s = [...samples].sort((a, b) => a - b);
  const mean = s.reduce((a, b) => a + b, 0) / Math.max(1, s.length);
  return { mean_ms: round(mean, 3), p50_ms: round(percentile(s, 50), 3), p99_ms: round(percentile(s, 99), 3), max_ms: round(s[s.length - 1] ?? Number.NaN, 3) };
}

export interface LoadResult {
  connections: number;
  duration_s: number;
  requests_total: number;
  requests_2xx: number;
  requests_non2xx: number;
  errors: number;
  timeouts: number;
  /** 2xx responses per second of the run. */
  requests_per_sec: number;
  latency_mean_ms: number;
  latency_p50_ms: number;
  latency_p99_ms: number;
  latency_max_ms: number;
  /** Bytes read per response, status line and headers included. */
  response_bytes_with_headers_mean: number;
  first_non2xx?: string;
}

/**
 * Runs autocannon (keep-alive connections, no pipelining) against a 127.0.0.1 URL for a fixed
 * duration. `request` builds each request (path, body) when given. Latencies are taken from
 * autocannon's per-response hrtime (its own histogram keeps only whole milliseconds).
 */
export async function load(opts: {
  url: string;
  connections: number;
  durationS: number;
  headers?: Record<string, string>;
  method?: 'GET' | 'PUT' | 'POST';
  path: string;
  request?: () => { path: string; body?: string };
  /** Called with the body of every 2xx response. */
  onOk?: (body: string) => void;
}): Promise<LoadResult> {
  const u = new URL(opts.url);
  if (u.hostname !== '127.0.0.1') throw new Error(`load generator refuses non-loopback target ${opts.url}`);
  let firstBad: string | undefined;
  const build = opts.request;
  const latencies: number[] = [];
  let bytes = 0;
  let responses = 0;
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const inst = autocannon(
      {
        url: opts.url + opts.path,
        connections: opts.connections,
        pipelining: 1,
        duration: opts.durationS,
        timeout: 30,
        method: opts.method ?? 'GET',
        headers: opts.headers ?? {},
        requests: [
          {
            ...(build
              ? {
                  setupRequest: (req: autocannon.Request) => {
                    const r = build();
                    return { ...req, path: r.path, ...(r.body !== undefined ? { body: r.body } : {}) };
                  },
                }
              : {}),
            onResponse: (status: number, body: string) => {
              if (status >= 200 && status <= 299) opts.onOk?.(body);
              else if (firstBad === undefined) firstBad = `${status} ${String(body).slice(0, 300)}`;
            },
          },
        ],
      },
      (err, res) => (err ? reject(err) : resolve(res)),
    );
    inst.on('response', (_client, status, resBytes, responseTime) => {
      responses++;
      bytes += resBytes;
      if (status >= 200 && status <= 299) latencies.push(responseTime);
    });
  });
  const total = result['1xx'] + result['2xx'] + result['3xx'] + result['4xx'] + result['5xx'];
  const lat = summarizeMs(latencies);
  const out: LoadResult = {
    connections: opts.connections,
    duration_s: round(result.duration, 3),
    requests_total: total,
    requests_2xx: result['2xx'],
    requests_non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    requests_per_sec: round(result['2xx'] / result.duration, 1),
    latency_mean_ms: lat.mean_ms,
    latency_p50_ms: lat.p50_ms,
    latency_p99_ms: lat.p99_ms,
    latency_max_ms: lat.max_ms,
    response_bytes_with_headers_mean: responses > 0 ? Math.round(bytes / responses) : 0,
  };
  if (firstBad !== undefined) out.first_non2xx = firstBad;
  return out;
}

/** fsync latency of 4 KiB appends in `dir`: what one durable commit must wait for at least. */
export function fsyncProbe(dir: string, count = 100): { fsync_4k_p50_ms: number; fsync_4k_p99_ms: number } {
  const file = path.join(dir, 'fsync-probe.bin');
  const fd = fs.openSync(file, 'w');
  const buf = Buffer.alloc(4096, 1);
  const samples: number[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const s = performance.now();
      fs.writeSync(fd, buf);
      fs.fsyncSync(fd);
      samples.push(performance.now() - s);
    }
  } finally {
    fs.closeSync(fd);
    fs.rmSync(file, { force: true });
  }
  const sorted = samples.sort((a, b) => a - b);
  return { fsync_4k_p50_ms: round(percentile(sorted, 50), 3), fsync_4k_p99_ms: round(percentile(sorted, 99), 3) };
}

/** 1-minute load average, rounded: other work on the machine skews every figure. */
export function loadAverage(): number {
  return round(os.loadavg()[0] ?? 0, 2);
}

/** Runs a benchmark as a script: prints its JSON, removes temp dirs and exits 0, or 1 with the error. */
export function runStandalone(run: () => Promise<unknown>): void {
  run().then(
    (out) => {
      process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
      cleanupAllSync();
      process.exit(0);
    },
    (err: unknown) => {
      log(`FAILED: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
      cleanupAllSync();
      process.exit(1);
    },
  );
}

/** The principal an agent key resolves to, as the REST face would resolve it (benchmarks call the core directly). */
export function agentPrincipal(ctx: CoreContext, key: string): Promise<Principal> {
  return authenticate(ctx, {
    authorization: `Bearer ${key}`,
    sessionToken: undefined,
    csrfHeader: undefined,
    csrfCookie: undefined,
    unsafe: true,
    ip: '127.0.0.1',
    workspace: undefined,
  });
}
