/**
 * Shared set-up for the retrieval benchmarks: the service in-process over a temp DATA_DIR (or a
 * throwaway PostgreSQL database), a principal that may read, write and search, and access to
 * the retrieval runtime (`ctx.retrieval`) when the build has one.
 */
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { loadConfig } from '../../src/config.js';
import type { CoreContext } from '../../src/core/context.js';
import type { Principal } from '../../src/policy/principal.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { createAgentWithKey, signupHuman } from '../../test/support/server.js';
import { agentPrincipal, log, makeTempDir, removeTempDir, SERVICE_ENV } from '../util.js';

export interface Harness {
  server: RunningServer;
  ctx: CoreContext;
  principal: Principal;
  engine: 'sqlite' | 'postgres';
  /** Where the store lives and the agent key of `principal`, for a second process on the same store. */
  dataDir: string;
  databaseUrl: string | undefined;
  key: string;
  /** Stops the in-process service, keeping the store until close(). */
  stopServer(): Promise<void>;
  close(): Promise<void>;
}

/**
 * The retrieval runtime as the lead planned it (`ctx.retrieval = { provider, vectors, worker }`),
 * looked up loosely so this file compiles before and after it lands.
 */
export interface RuntimeView {
  provider?: { provider: string; model: string; dimensions: number };
  vectors?: unknown;
  worker?: { drain?: () => Promise<unknown>; backlog?: () => Promise<number> | number };
}

export function runtimeOf(ctx: CoreContext): RuntimeView | undefined {
  return (ctx as unknown as { retrieval?: RuntimeView }).retrieval;
}

/** Waits until the embedding worker has embedded everything queued (no-op without a runtime). */
export async function drainEmbeddings(ctx: CoreContext, maxMs = 30 * 60_000): Promise<{ waited_ms: number; runtime: boolean }> {
  const rt = runtimeOf(ctx);
  const t0 = performance.now();
  if (!rt?.worker?.drain) return { waited_ms: 0, runtime: false };
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    rt.worker.drain(),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`embedding backlog not drained after ${maxMs} ms`)), maxMs);
    }),
  ]).finally(() => clearTimeout(timer));
  return { waited_ms: performance.now() - t0, runtime: true };
}

/** A throwaway PostgreSQL database on the server of `adminUrl`; dropped by the returned function. */
export async function throwawayPg(adminUrl: string, label: string): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `cv_bench_${label}_${process.pid}_${Date.now()}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    drop: async () => {
      const c = new pg.Client({ connectionString: adminUrl });
      await c.connect();
      await c.query(`drop database if exists ${name} with (force)`);
      await c.end();
    },
  };
}

/** A database kept between bench runs (`cv_bench_keep_<label>`), created when missing. */
async function keptPg(adminUrl: string, label: string): Promise<string> {
  const name = `cv_bench_keep_${label}`.toLowerCase();
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    const have = await admin.query('select 1 from pg_database where datname = $1', [name]);
    if (have.rowCount === 0) await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  return u.toString();
}

/** Starts the service in-process and returns a principal (an agent with read, write and search). */
export async function openHarness(opts: {
  label: string;
  pgAdminUrl?: string | undefined;
  env?: Record<string, string>;
  keepDir?: string | undefined;
}): Promise<Harness> {
  // keepDir: a SQLite store kept between runs (loaded once, measured many times); the bench key is saved beside it.
  const dataDir = opts.keepDir ?? makeTempDir(opts.label);
  const keyFile = path.join(dataDir, 'bench-agent-key');
  let dropPg: (() => Promise<void>) | undefined;
  let databaseUrl: string | undefined;
  if (opts.pgAdminUrl && opts.keepDir) {
    // Kept between runs like the SQLite store: a database named for the label, never dropped.
    databaseUrl = await keptPg(opts.pgAdminUrl, opts.label.replace(/[^a-z0-9]/gi, '_'));
  } else if (opts.pgAdminUrl) {
    const db = await throwawayPg(opts.pgAdminUrl, opts.label.replace(/[^a-z0-9]/gi, '_'));
    databaseUrl = db.url;
    dropPg = db.drop;
  }
  try {
    const config = loadConfig({
      ...SERVICE_ENV,
      ...(opts.env ?? {}),
      PORT: '0',
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
    });
    const server = await startServer(config, { logger: false });
    const ctx = server.ctx;
    let key: string;
    if (opts.keepDir && fs.existsSync(keyFile)) key = fs.readFileSync(keyFile, 'utf8').trim();
    else {
      const human = await signupHuman(server.url, 'Bench');
      key = (await createAgentWithKey(human.client, [{ action: 'read' }, { action: 'write' }, { action: 'search' }], { name: 'bench-retrieval' })).key;
      if (opts.keepDir) fs.writeFileSync(keyFile, key, { mode: 0o600 });
    }
    const principal = await agentPrincipal(ctx, key);
    const rt = runtimeOf(ctx);
    log(
      `service up (${ctx.store.dialect}); retrieval runtime: ${rt ? `${rt.provider?.provider ?? '?'}:${rt.provider?.model ?? '?'}:${rt.provider?.dimensions ?? '?'}` : 'absent (vector/hybrid fall back to fts)'}`,
    );
    let stopped: Promise<void> | undefined;
    const stopServer = () => (stopped ??= server.close());
    return {
      server,
      ctx,
      principal,
      engine: ctx.store.dialect,
      dataDir,
      databaseUrl,
      key,
      stopServer,
      close: async () => {
        await stopServer();
        if (!opts.keepDir) removeTempDir(dataDir);
        if (dropPg) await dropPg();
      },
    };
  } catch (e) {
    if (!opts.keepDir) removeTempDir(dataDir);
    if (dropPg) await dropPg();
    throw e;
  }
}
