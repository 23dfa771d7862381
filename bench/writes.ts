/**
 * Page writes per second on a workspace holding N (10,000) pages in ONE folder, durable
 * (SQLite WAL, synchronous=NORMAL with group commit as openStore sets it: a write is answered after
 * an fdatasync of the log that covers it, src/store/wal-sync.ts):
 *   - through the core (createPage / updatePage called in-process), and
 *   - through REST (PUT /api/v1/nodes/:id, POST /api/v1/nodes) against the real service in a
 *     child process, over keep-alive connections, with 1 and 8 concurrent clients.
 */
import path from 'node:path';
import Database from 'better-sqlite3';
import { sql } from 'kysely';
import { loadConfig } from '../src/config.js';
import type { CoreContext } from '../src/core/context.js';
import { createPage, updatePage } from '../src/core/pages/write.js';
import type { Principal } from '../src/policy/principal.js';
import { startServer, type RunningServer } from '../src/server.js';
import { createAgentWithKey, signupHuman } from '../test/support/server.js';
import { bigFolderPage, rng } from './content.js';
import { agentPrincipal, load, log, makeTempDir, removeTempDir, round, SERVICE_ENV, startChild, summarizeMs, type LoadResult } from './util.js';

export const FOLDER = 'bench/big';
const DB_FILE = 'context-vault.sqlite';

export interface SeededPage {
  id: string;
  n: number;
}

/** A workspace seeded with `pages` pages in FOLDER, served in-process until `closeInProcess`. */
export interface Fixture {
  dataDir: string;
  dbFile: string;
  server: RunningServer | null;
  ctx: CoreContext;
  principal: Principal;
  agentKey: string;
  workspaceId: string;
  pages: SeededPage[];
  /** Next revision number per page (content must change for an update to commit). */
  rev: Map<string, number>;
  random: () => number;
  seed: Record<string, number | boolean | string>;
  durability: Record<string, string | number>;
}

export async function readDurability(ctx: CoreContext): Promise<Record<string, string | number>> {
  const one = async (pragma: string): Promise<unknown> => {
    const r = await sql.raw(`PRAGMA ${pragma}`).execute(ctx.store.db);
    const row = r.rows[0] as Record<string, unknown> | undefined;
    return row ? Object.values(row)[0] : undefined;
  };
  const sync = Number(await one('synchronous'));
  const names: Record<number, string> = { 0: 'OFF', 1: 'NORMAL', 2: 'FULL', 3: 'EXTRA' };
  return {
    engine: ctx.store.dialect,
    journal_mode: String(await one('journal_mode')),
    synchronous_pragma_value: sync,
    synchronous: names[sync] ?? 'unknown',
    page_size_bytes: Number(await one('page_size')),
  };
}

/** Starts the service in-process over a temp DATA_DIR, signs a human up and mints an agent key (read, write). */
export async function setupFixture(): Promise<Fixture> {
  const dataDir = makeTempDir('writes');
  try {
    const config = loadConfig({ ...SERVICE_ENV, PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir });
    // logger off: stdout carries the JSON result.
    const server = await startServer(config, { logger: false });
    const ctx = server.ctx;
    const human = await signupHuman(server.url, 'Bench');
    const agent = await createAgentWithKey(human.client, [{ action: 'read' }, { action: 'write' }], { name: 'bench-writer' });
    const principal = await agentPrincipal(ctx, agent.key);
    const fx: Fixture = {
      dataDir,
      dbFile: path.join(dataDir, DB_FILE),
      server,
      ctx,
      principal,
      agentKey: agent.key,
      workspaceId: principal.workspaceId,
      pages: [],
      rev: new Map(),
      random: rng(12345),
      seed: {},
      durability: await readDurability(ctx),
    };
    if (fx.durability.synchronous !== 'NORMAL') {
      await closeFixture(fx);
      throw new Error(`expected synchronous=NORMAL (group commit), read back ${JSON.stringify(fx.durability)}`);
    }
    return fx;
  } catch (e) {
    removeTempDir(dataDir);
    throw e;
  }
}

/** Seeds `pages` pages into FOLDER through createPage, one durable commit each, and times it. */
export async function seedFolder(fx: Fixture, opts: { pages: number; maxSeconds: number }): Promise<void> {
  log(`seeding ${opts.pages} pages into ${FOLDER}/ through createPage (durable, one commit each)`);
  const t0 = performance.now();
  const deadline = Date.now() + opts.maxSeconds * 1000;
  let lastLog = t0;
  let windowStart = t0;
  let windowCount = 0;
  const lastThousandMs: number[] = [];
  for (let n = 1; n <= opts.pages; n++) {
    if (Date.now() > deadline) throw new Error(`seeding exceeded ${opts.maxSeconds} s after ${fx.pages.length} pages`);
    const s = performance.now();
    const { record } = await createPage(fx.ctx, fx.principal, { path: `${FOLDER}/p${String(n).padStart(5, '0')}.md`, content: bigFolderPage(n, 0) });
    const e = performance.now();
    if (n > opts.pages - 1000) lastThousandMs.push(e - s);
    fx.pages.push({ id: record.id, n });
    windowCount++;
    if (e - lastLog > 10_000 || n === opts.pages) {
      log(`  seeded ${n}/${opts.pages} (${round((windowCount * 1000) / (e - windowStart), 1)} creates/s lately)`);
      lastLog = e;
      windowStart = e;
      windowCount = 0;
    }
  }
  const seconds = (performance.now() - t0) / 1000;
  const last = summarizeMs(lastThousandMs);
  fx.seed = {
    pages_in_folder: fx.pages.length,
    method: 'createPage in-process, one durable commit per page, sequential',
    duration_s: round(seconds, 2),
    creates_per_sec: round(fx.pages.length / seconds, 1),
    last_1000_creates_mean_ms: last.mean_ms,
    last_1000_creates_p99_ms: last.p99_ms,
  };
}

export async function closeFixture(fx: Fixture): Promise<void> {
  await closeInProcess(fx);
  removeTempDir(fx.dataDir);
}

async function closeInProcess(fx: Fixture): Promise<void> {
  if (fx.server) {
    const s = fx.server;
    fx.server = null;
    await s.close();
  }
}

export function nextUpdateContent(fx: Fixture, page: SeededPage): string {
  const rev = (fx.rev.get(page.id) ?? 0) + 1;
  fx.rev.set(page.id, rev);
  return bigFolderPage(page.n, rev);
}

export function randomPage(fx: Fixture): SeededPage {
  return fx.pages[Math.floor(fx.random() * fx.pages.length)]!;
}

export async function coreUpdate(fx: Fixture, page: SeededPage): Promise<{ content: string }> {
  const content = nextUpdateContent(fx, page);
  const res = await updatePage(fx.ctx, fx.principal, page.id, { kind: 'replace', content }, {});
  if (!res.changed) throw new Error(`update of ${page.id} did not commit`);
  return { content };
}

interface OpsResult {
  ops: number;
  duration_s: number;
  writes_per_sec: number;
  mean_ms: number;
  p50_ms: number;
  p99_ms: number;
  max_ms: number;
}

/** Runs op sequentially up to `count` times or `maxSeconds`, whichever comes first. */
async function timeOps(count: number, maxSeconds: number, op: (i: number) => Promise<void>): Promise<OpsResult> {
  const samples: number[] = [];
  const t0 = performance.now();
  const stopAt = t0 + maxSeconds * 1000;
  for (let i = 0; i < count && performance.now() < stopAt; i++) {
    const s = performance.now();
    await op(i);
    samples.push(performance.now() - s);
  }
  const secs = (performance.now() - t0) / 1000;
  return { ops: samples.length, duration_s: round(secs, 3), writes_per_sec: round(samples.length / secs, 1), ...summarizeMs(samples) };
}

async function folderSize(fx: Fixture, folder: string): Promise<number> {
  const r = await fx.ctx.store.db
    .selectFrom('pages')
    .select(sql<number>`count(*)`.as('n'))
    .where('workspace_id', '=', fx.workspaceId)
    .where('cluster_path', '=', folder)
    .where('deleted_at', 'is', null)
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

/** createPage / updatePage called directly, one at a time. */
export async function benchCoreWrites(fx: Fixture, opts: { ops: number; maxSeconds: number }): Promise<Record<string, unknown>> {
  const p = fx.principal;
  const before = await folderSize(fx, FOLDER);
  log(`core: ${opts.ops} updates of random pages in ${FOLDER}/ (${before} pages)`);
  // A few unmeasured writes so the JIT and the tree cache are warm, like a running server.
  for (let i = 0; i < 5; i++) await coreUpdate(fx, randomPage(fx));
  const updates = await timeOps(opts.ops, opts.maxSeconds, async () => {
    await coreUpdate(fx, randomPage(fx));
  });
  log(`  ${updates.writes_per_sec} updates/s (p50 ${updates.p50_ms} ms, p99 ${updates.p99_ms} ms)`);

  log(`core: ${opts.ops} creates of new pages in ${FOLDER}/`);
  const creates = await timeOps(opts.ops, opts.maxSeconds, async (i) => {
    await createPage(fx.ctx, p, { path: `${FOLDER}/core-new-${String(i).padStart(5, '0')}.md`, content: bigFolderPage(100_000 + i, 0) });
  });
  log(`  ${creates.writes_per_sec} creates/s (p50 ${creates.p50_ms} ms, p99 ${creates.p99_ms} ms)`);

  // Control: the same updates in a folder of 10 pages, to show what the big folder costs.
  const small: SeededPage[] = [];
  for (let i = 0; i < 10; i++) {
    const { record } = await createPage(fx.ctx, p, { path: `bench/small/s${i}.md`, content: bigFolderPage(200_000 + i, 0) });
    small.push({ id: record.id, n: 200_000 + i });
  }
  const r = rng(99);
  for (let i = 0; i < 5; i++) await coreUpdate(fx, small[i]!);
  const control = await timeOps(opts.ops, opts.maxSeconds, async () => {
    await coreUpdate(fx, small[Math.floor(r() * small.length)]!);
  });
  log(`  control (10-page folder): ${control.writes_per_sec} updates/s (p50 ${control.p50_ms} ms)`);

  return {
    pages_in_folder_before: before,
    pages_in_folder_after: await folderSize(fx, FOLDER),
    concurrency: 1,
    updates_random_existing: updates,
    creates_new_in_folder: creates,
    control_updates_in_10_page_folder: control,
  };
}

/**
 * Stops the in-process server (closing the store), serves the same DATA_DIR from a child
 * process running src/main.ts, and loads it with PUT and POST over keep-alive connections.
 */
export async function benchRestWrites(fx: Fixture, opts: { durationS: number }): Promise<Record<string, unknown>> {
  const commitsBefore = Number(
    (
      await fx.ctx.store.db
        .selectFrom('commits')
        .select(sql<number>`count(*)`.as('n'))
        .where('workspace_id', '=', fx.workspaceId)
        .executeTakeFirstOrThrow()
    ).n,
  );
  const pagesBefore = await folderSize(fx, FOLDER);
  await closeInProcess(fx);

  log('rest: starting the service as a child process on the seeded DATA_DIR');
  const child = await startChild({
    name: 'service',
    script: 'src/main.ts',
    env: { ...SERVICE_ENV, DATA_DIR: fx.dataDir },
    readyPath: '/healthz',
  });
  const headers = { authorization: `Bearer ${fx.agentKey}`, 'content-type': 'application/json' };
  const runs: Record<string, LoadResult> = {};
  let acknowledged = 0;
  const ackShas = new Set<string>();
  const onOk = (body: string) => {
    const sha = (JSON.parse(body) as { commit_sha?: string }).commit_sha;
    if (sha) ackShas.add(sha);
  };
  try {
    // Unmeasured warm-up: the first write rebuilds the 10,000-entry tree from its delta chain.
    const warm: number[] = [];
    for (let i = 0; i < 10; i++) {
      const page = randomPage(fx);
      const s = performance.now();
      const res = await fetch(`${child.url}/api/v1/nodes/${page.id}`, {
        method: 'PUT',
        headers,
        body: JSON.stringify({ content: nextUpdateContent(fx, page) }),
      });
      onOk(await res.text());
      warm.push(performance.now() - s);
      if (res.status !== 200) throw new Error(`warm-up PUT answered ${res.status}`);
      acknowledged++;
    }
    log(`  warm-up PUTs: first ${round(warm[0]!, 1)} ms (cold tree cache), then ${round(summarizeMs(warm.slice(1)).p50_ms, 1)} ms p50`);

    let createSeq = 0;
    for (const connections of [1, 8]) {
      log(`rest: PUT updates of random pages, ${connections} connection(s), ${opts.durationS} s`);
      const up = await load({
        url: child.url,
        connections,
        durationS: opts.durationS,
        method: 'PUT',
        headers,
        path: '/api/v1/nodes/x',
        onOk,
        request: () => {
          const page = randomPage(fx);
          return { path: `/api/v1/nodes/${page.id}`, body: JSON.stringify({ content: nextUpdateContent(fx, page) }) };
        },
      });
      runs[`updates_put_c${connections}`] = up;
      acknowledged += up.requests_2xx;
      log(`  ${up.requests_per_sec} updates/s (p50 ${up.latency_p50_ms} ms, p99 ${up.latency_p99_ms} ms, non-2xx ${up.requests_non2xx})`);
    }
    for (const connections of [1, 8]) {
      log(`rest: POST creates in ${FOLDER}/, ${connections} connection(s), ${opts.durationS} s`);
      const cr = await load({
        url: child.url,
        connections,
        durationS: opts.durationS,
        method: 'POST',
        headers,
        path: '/api/v1/nodes',
        onOk,
        request: () => {
          const k = ++createSeq;
          return {
            path: '/api/v1/nodes',
            body: JSON.stringify({ path: `${FOLDER}/rest-c${connections}-${String(k).padStart(6, '0')}.md`, content: bigFolderPage(300_000 + k, 0) }),
          };
        },
      });
      runs[`creates_post_c${connections}`] = cr;
      acknowledged += cr.requests_2xx;
      log(`  ${cr.requests_per_sec} creates/s (p50 ${cr.latency_p50_ms} ms, p99 ${cr.latency_p99_ms} ms, non-2xx ${cr.requests_non2xx})`);
    }
  } finally {
    await child.stop();
  }

  // Every acknowledged write must be a commit in the database (read after the service stopped).
  const db = new Database(fx.dbFile, { readonly: true });
  let commitsAfter: number;
  let pagesAfter: number;
  let missing = 0;
  try {
    const has = db.prepare('select 1 from commits where workspace_id = ? and sha = ?');
    for (const sha of ackShas) if (!has.get(fx.workspaceId, sha)) missing++;
    commitsAfter = (db.prepare('select count(*) as n from commits where workspace_id = ?').get(fx.workspaceId) as { n: number }).n;
    pagesAfter = (
      db.prepare('select count(*) as n from pages where workspace_id = ? and cluster_path = ? and deleted_at is null').get(fx.workspaceId, FOLDER) as {
        n: number;
      }
    ).n;
  } finally {
    db.close();
  }
  return {
    server: 'src/main.ts in a child process (tsx), same DATA_DIR as the core run',
    service_env: SERVICE_ENV,
    pages_in_folder_before: pagesBefore,
    pages_in_folder_after: pagesAfter,
    ...runs,
    check: {
      writes_acknowledged: acknowledged,
      distinct_acknowledged_commit_shas: ackShas.size,
      acknowledged_commits_missing_from_db: missing,
      commits_added: commitsAfter - commitsBefore,
      // Requests in flight when a timed run stops (at most 1 + 8 + 1 + 8) may commit unacknowledged.
      commits_added_minus_acknowledged: commitsAfter - commitsBefore - acknowledged,
    },
  };
}
