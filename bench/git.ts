/**
 * The git face (issue 15, "Speed") on a workspace of N (10,000) pages in one folder:
 *   - clone: `git clone --bare` through the service (cold cache, then warm: median of 3), next to
 *     plain `git http-backend` serving an ordinary packed bare copy of the same repository behind
 *     a minimal CGI bridge (bench/git-bare-server.ts), clones alternating, same run;
 *   - incremental fetch: one REST write, then `git fetch` in an existing clone (median of 10);
 *   - push: one commit appending a line to 1,000 pages, `git push`, then a REST read showing the
 *     pushed commit id.
 * Both servers run as child processes started the same way (tsx), so each side pays the same.
 * Times are wall clock of the git CLI, process start included (on both sides).
 *
 * Standalone: `tsx bench/git.ts [--quick] [--cpu-prof=DIR]` (DIR gets the service's CPU profiles).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../src/config.js';
import { startServer } from '../src/server.js';
import { createAgentWithKey, signupHuman } from '../test/support/server.js';
import { rng } from './content.js';
import {
  agentPrincipal,
  installCleanupHandlers,
  log,
  makeTempDir,
  removeTempDir,
  round,
  runStandalone,
  SERVICE_ENV,
  startChild,
  summarizeMs,
  type ChildServer,
  ROOT,
} from './util.js';
import { FOLDER, readDurability, seedFolder, type Fixture } from './writes.js';

/** The service as the brief asks for this bench: rate limits off (git's default is 60/min per IP). */
const GIT_SERVICE_ENV: Record<string, string> = { ...SERVICE_ENV, RATE_LIMITS: 'off' };
const PASSWORD = 'correct horse battery';
const APPENDED = 'Appended by the git benchmark.';

interface GitRun {
  code: number;
  ms: number;
  stdout: string;
  stderr: string;
}

/** A sealed git client: own HOME and config, never prompting (as the git face's tests run it). */
class GitClient {
  readonly home: string;
  constructor(readonly root: string) {
    this.home = path.join(root, 'home');
    fs.mkdirSync(this.home, { recursive: true });
    fs.writeFileSync(
      path.join(this.home, '.gitconfig'),
      '[user]\n\tname = Git Bench\n\temail = git-bench@example.com\n[init]\n\tdefaultBranch = main\n[credential]\n\thelper =\n[advice]\n\tdetachedHead = false\n',
    );
  }

  run(args: string[], cwd: string = this.root): Promise<GitRun> {
    return new Promise((resolve, reject) => {
      const env = {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: this.home,
        XDG_CONFIG_HOME: path.join(this.home, '.config'),
        GIT_CONFIG_NOSYSTEM: '1',
        GIT_TERMINAL_PROMPT: '0',
        GIT_ASKPASS: '/bin/false',
        LANG: 'C',
        LC_ALL: 'C',
      };
      const s = performance.now();
      const child = spawn('git', args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      // Generous: a cold clone of 10,000 pages rebuilds the whole cache first.
      const timer = setTimeout(() => child.kill('SIGKILL'), 3_600_000);
      child.on('error', (e) => {
        clearTimeout(timer);
        reject(e);
      });
      child.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code: code ?? 128, ms: performance.now() - s, stdout, stderr });
      });
    });
  }

  async ok(args: string[], cwd?: string): Promise<GitRun> {
    const r = await this.run(args, cwd);
    if (r.code !== 0) throw new Error(`git ${args.join(' ')} failed (${r.code}):\n${r.stderr.slice(-2000)}`);
    return r;
  }
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

const ms = (xs: readonly number[]) => xs.map((x) => round(x, 1));

/** Packs, loose objects and bitmaps of a bare repository: what upload-pack has to work from. */
function repoShape(dir: string): { packs: number; bitmaps: number; loose_objects: number; pack_bytes: number } {
  const packDir = path.join(dir, 'objects', 'pack');
  const files = fs.existsSync(packDir) ? fs.readdirSync(packDir) : [];
  let loose = 0;
  for (const d of fs.readdirSync(path.join(dir, 'objects'))) if (/^[0-9a-f]{2}$/.test(d)) loose += fs.readdirSync(path.join(dir, 'objects', d)).length;
  const packs = files.filter((f) => f.endsWith('.pack'));
  return {
    packs: packs.length,
    bitmaps: files.filter((f) => f.endsWith('.bitmap')).length,
    loose_objects: loose,
    pack_bytes: packs.reduce((n, f) => n + fs.statSync(path.join(packDir, f)).size, 0),
  };
}

/** Median time of `GET info/refs?service=git-upload-pack` (one CGI round, no pack): per-request overhead. */
async function infoRefsMs(url: string, authorization: string | undefined, rounds: number): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const s = performance.now();
    const res = await fetch(`${url}/info/refs?service=git-upload-pack`, {
      headers: { 'git-protocol': 'version=2', ...(authorization ? { authorization } : {}) },
    });
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`info/refs answered ${res.status}`);
    samples.push(performance.now() - s);
  }
  return samples;
}

export async function benchGit(opts: {
  pages: number;
  seedMaxS: number;
  fetchRounds?: number;
  pushPages?: number;
  /** When set, the service child runs with --cpu-prof into this directory (to see where time goes). */
  cpuProfDir?: string;
}): Promise<Record<string, unknown>> {
  const fetchRounds = opts.fetchRounds ?? 10;
  const pushPages = Math.min(opts.pushPages ?? 1000, opts.pages);
  const dataDir = makeTempDir('git-data');
  const scratch = makeTempDir('git-clients');
  const children: ChildServer[] = [];
  try {
    // --- Seed in-process (as bench/writes.ts does), then serve the DATA_DIR from a child. ---
    const config = loadConfig({ ...GIT_SERVICE_ENV, PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir });
    const server = await startServer(config, { logger: false });
    let fx: Fixture;
    let gitToken: string;
    let slug: string;
    try {
      const human = await signupHuman(server.url, 'Bench');
      slug = human.workspace.slug;
      const agent = await createAgentWithKey(human.client, [{ action: 'read' }, { action: 'write' }], { name: 'bench-git' });
      const principal = await agentPrincipal(server.ctx, agent.key);
      const up = await human.client.post('/api/auth/stepup', { password: PASSWORD });
      if (up.status !== 200) throw new Error(`step-up failed: ${up.status} ${up.text}`);
      const minted = await human.client.post('/api/v1/me/git-tokens', { name: 'bench' });
      if (minted.status !== 201) throw new Error(`git token mint failed: ${minted.status} ${minted.text}`);
      gitToken = minted.body.token as string;
      fx = {
        dataDir,
        dbFile: path.join(dataDir, 'context-vault.sqlite'),
        server,
        ctx: server.ctx,
        principal,
        agentKey: agent.key,
        workspaceId: principal.workspaceId,
        pages: [],
        rev: new Map(),
        random: rng(4242),
        seed: {},
        durability: await readDurability(server.ctx),
      };
      await seedFolder(fx, { pages: opts.pages, maxSeconds: opts.seedMaxS });
    } finally {
      await server.close();
    }
    const cacheDir = path.join(dataDir, 'git-cache', `${fx.workspaceId}.git`);
    const cacheExistedBeforeClone = fs.existsSync(cacheDir);

    log('git: starting the service as a child process on the seeded DATA_DIR');
    const profEnv: Record<string, string> = opts.cpuProfDir
      ? { NODE_OPTIONS: `--import=${path.join(ROOT, 'bench', 'cpu-prof-preload.mjs')}`, CV_CPU_PROF_DIR: opts.cpuProfDir }
      : {};
    const svc = await startChild({ name: 'service', script: 'src/main.ts', env: { ...GIT_SERVICE_ENV, DATA_DIR: dataDir, ...profEnv }, readyPath: '/healthz' });
    children.push(svc);
    const git = new GitClient(scratch);
    const svcRepo = `${svc.url}/git/${slug}.git`;
    const svcUrl = (() => {
      const u = new URL(svcRepo);
      u.username = 'bench';
      u.password = gitToken;
      return u.toString();
    })();
    const basic = `Basic ${Buffer.from(`bench:${gitToken}`).toString('base64')}`;
    let n = 0;
    const fresh = (label: string) => path.join(scratch, `${label}-${++n}`);
    const rmClone = (dir: string) => fs.rmSync(dir, { recursive: true, force: true });

    // --- 1. Clones. ---
    log(`git: cold clone --bare of ${opts.pages} pages through the service (cache ${cacheExistedBeforeClone ? 'present!' : 'absent'})`);
    const coldDir = fresh('cold');
    const cold = await git.run(['clone', '--bare', '-q', svcUrl, coldDir]);
    log(`  cold clone ${round(cold.ms, 1)} ms, exit ${cold.code}`);
    let coldFailure: Record<string, unknown> | undefined;
    if (cold.code !== 0) {
      // Reported, not fatal: the cache keeps what the failed rebuild wrote (main set, objects
      // loose), so the bench packs it as an operator would and measures the warm clones on that.
      const before = repoShape(cacheDir);
      const repackStart = performance.now();
      await git.ok(['--git-dir', cacheDir, 'repack', '-a', '-d', '-q', '--write-bitmap-index']);
      coldFailure = {
        git_said: cold.stderr.trim().split('\n').slice(-3),
        service_log_tail: svc.tail().split('\n').slice(-8),
        cache_before_bench_repack: before,
        bench_repack_of_cache_ms: round(performance.now() - repackStart, 1),
      };
      log(`  cold clone FAILED; the bench repacked the cache itself in ${coldFailure.bench_repack_of_cache_ms} ms`);
      rmClone(coldDir);
      await git.ok(['clone', '--bare', '-q', svcUrl, coldDir]);
    }
    // The "one fetch first" of a warm cache: nothing changed, so this is a no-op round.
    await git.ok(['fetch', '-q', 'origin'], coldDir);
    const cacheShape = repoShape(cacheDir);

    // The ordinary repository: a bare clone of the service's, packed by git gc.
    const plainRoot = path.join(scratch, 'plain-root');
    fs.mkdirSync(plainRoot);
    const plainDir = path.join(plainRoot, 'ws.git');
    await git.ok(['clone', '--bare', '-q', coldDir, plainDir]);
    await git.ok(['gc', '-q'], plainDir);
    const plainShape = repoShape(plainDir);
    rmClone(coldDir);
    const bare = await startChild({ name: 'git-bare', script: 'bench/git-bare-server.ts', env: { GIT_PROJECT_ROOT: plainRoot }, readyPath: '/healthz' });
    children.push(bare);
    const plainUrl = `${bare.url}/ws.git`;

    log('git: warm clones --bare, service and plain http-backend alternating, 3 each');
    const svcClone: number[] = [];
    const plainClone: number[] = [];
    let svcHead = '';
    let plainHead = '';
    for (let i = 0; i < 3; i++) {
      const a = fresh('svc');
      svcClone.push((await git.ok(['clone', '--bare', '-q', svcUrl, a])).ms);
      svcHead = (await git.ok(['rev-parse', 'refs/heads/main'], a)).stdout.trim();
      rmClone(a);
      const b = fresh('plain');
      plainClone.push((await git.ok(['clone', '--bare', '-q', plainUrl, b])).ms);
      plainHead = (await git.ok(['rev-parse', 'refs/heads/main'], b)).stdout.trim();
      rmClone(b);
      log(`  round ${i + 1}: service ${round(svcClone[i]!, 1)} ms, plain ${round(plainClone[i]!, 1)} ms`);
    }
    if (svcHead !== plainHead) throw new Error(`service and plain clones differ: ${svcHead} vs ${plainHead}`);
    const cloneMs = median(svcClone);
    const plainCloneMs = median(plainClone);
    const svcInfoRefs = await infoRefsMs(svcRepo, basic, 10);
    const plainInfoRefs = await infoRefsMs(plainUrl, undefined, 10);

    // --- 2. Incremental fetch after one REST write, in an existing (working) clone. ---
    const work = fresh('work');
    const checkoutClone = await git.ok(['clone', '-q', svcUrl, work]);
    log(`git: working clone (with checkout) ${round(checkoutClone.ms, 1)} ms; ${fetchRounds} rounds of REST PUT + git fetch`);
    const rest = { authorization: `Bearer ${fx.agentKey}`, 'content-type': 'application/json' };
    const putOne = async (i: number): Promise<string> => {
      const page = fx.pages[(i * 7919) % fx.pages.length]!;
      const res = await fetch(`${svc.url}/api/v1/nodes/${page.id}`, {
        method: 'PUT',
        headers: rest,
        body: JSON.stringify({ content: `${fs.readFileSync(path.join(work, FOLDER, `p${String(page.n).padStart(5, '0')}.md`), 'utf8')}Fetch round ${i}.\n` }),
      });
      const body = (await res.json()) as { commit_sha?: string };
      if (res.status !== 200 || !body.commit_sha) throw new Error(`PUT answered ${res.status}: ${JSON.stringify(body).slice(0, 300)}`);
      return body.commit_sha;
    };
    const fetchMs: number[] = [];
    for (let i = 0; i <= fetchRounds; i++) {
      const sha = await putOne(i);
      const f = await git.ok(['fetch', '-q', 'origin'], work);
      const got = (await git.ok(['rev-parse', 'refs/remotes/origin/main'], work)).stdout.trim();
      if (got !== sha) throw new Error(`fetch after REST write got ${got}, the write answered ${sha}`);
      if (i > 0) fetchMs.push(f.ms); // round 0 warms the service's tree cache after the restart
    }
    const noopSvc: number[] = [];
    const plainWork = fresh('plain-work');
    await git.ok(['clone', '-q', '--no-checkout', plainUrl, plainWork]);
    const noopPlain: number[] = [];
    for (let i = 0; i < 5; i++) {
      noopSvc.push((await git.ok(['fetch', '-q', 'origin'], work)).ms);
      noopPlain.push((await git.ok(['fetch', '-q', 'origin'], plainWork)).ms);
    }
    rmClone(plainWork);
    // Where a fetch's time goes: one info/refs request right after a write (it syncs the cache)
    // against one with nothing to sync.
    const syncInfoRefs: number[] = [];
    for (let i = 0; i < 5; i++) {
      await putOne(100 + i);
      syncInfoRefs.push(...(await infoRefsMs(svcRepo, basic, 1)));
    }
    const idleInfoRefs = await infoRefsMs(svcRepo, basic, 5);
    log(
      `  fetch after one write: median ${round(median(fetchMs), 1)} ms; no-op fetch: service ${round(median(noopSvc), 1)} ms, plain ${round(median(noopPlain), 1)} ms`,
    );

    // --- 3. Push of one commit changing pushPages pages. ---
    await git.ok(['fetch', '-q', 'origin'], work);
    await git.ok(['merge', '-q', '--ff-only', 'origin/main'], work);
    const pushed = fx.pages.slice(0, pushPages);
    for (const p of pushed) fs.appendFileSync(path.join(work, FOLDER, `p${String(p.n).padStart(5, '0')}.md`), `\n${APPENDED}\n`);
    await git.ok(['commit', '-q', '-a', '-m', `Append a line to ${pushPages} pages`], work);
    const commit = (await git.ok(['rev-parse', 'HEAD'], work)).stdout.trim();
    const changed = (await git.ok(['diff', '--name-only', 'HEAD~1', 'HEAD'], work)).stdout.split('\n').filter(Boolean).length;
    log(`git: push of one commit changing ${changed} pages`);
    const push = await git.run(['push', '-q', 'origin', 'main'], work);
    if (push.code !== 0) throw new Error(`push refused (${push.code}):\n${push.stderr.slice(-3000)}`);
    log(`  push ${round(push.ms, 1)} ms (${round((changed * 1000) / push.ms, 1)} pages/s)`);
    const check = async (p: { id: string }) => {
      const res = await fetch(`${svc.url}/api/v1/nodes/${p.id}`, { headers: { authorization: rest.authorization } });
      const body = (await res.json()) as { commit_sha?: string; content?: string };
      return { status: res.status, commit_sha: body.commit_sha, has_line: body.content?.includes(APPENDED) ?? false };
    };
    const first = await check(pushed[0]!);
    const last = await check(pushed[pushed.length - 1]!);
    const ok = first.commit_sha === commit && last.commit_sha === commit && first.has_line && last.has_line;
    if (!ok) throw new Error(`REST does not show the push: pushed ${commit}, read ${JSON.stringify({ first, last })}`);
    const afterPush = await git.ok(['fetch', '-q', 'origin'], work);

    const ratio = cloneMs / plainCloneMs;
    return {
      pages: opts.pages,
      seed: fx.seed,
      clone_kind: 'git clone --bare (no checkout: the server side is what is measured)',
      clone_cold_ms: round(cold.ms, 1),
      ...(coldFailure ? { clone_cold_failed: coldFailure } : {}),
      // What the cold clone spends rebuilding the cache from the database (full export + repack).
      clone_cold_minus_warm_ms: round(cold.ms - cloneMs, 1),
      clone_ms: round(cloneMs, 1),
      plain_clone_ms: round(plainCloneMs, 1),
      ratio: round(ratio, 3),
      ratio_target_max: 1.3,
      clone_samples_ms: ms(svcClone),
      plain_clone_samples_ms: ms(plainClone),
      cache_repo: cacheShape,
      plain_repo: { made_by: 'git clone --bare of the service repo, then git gc', ...plainShape },
      info_refs_v2_ms: {
        service: summarizeMs(svcInfoRefs),
        plain: summarizeMs(plainInfoRefs),
        service_right_after_one_rest_write: summarizeMs(syncInfoRefs),
        service_idle_again: summarizeMs(idleInfoRefs),
      },
      working_clone_with_checkout_ms: round(checkoutClone.ms, 1),
      incremental_fetch_ms: round(median(fetchMs), 1),
      incremental_fetch_target_max_ms: 100,
      incremental_fetch_samples_ms: ms(fetchMs),
      noop_fetch_ms: { service: round(median(noopSvc), 1), plain: round(median(noopPlain), 1) },
      push_1000: {
        pages_changed: changed,
        push_ms: round(push.ms, 1),
        pages_per_s: round((changed * 1000) / push.ms, 1),
        commit,
        rest_check: { first, last, ok },
        fetch_after_push_ms: round(afterPush.ms, 1),
      },
      server: 'src/main.ts and bench/git-bare-server.ts, each a child process (tsx), RATE_LIMITS=off',
    };
  } finally {
    for (const c of children.reverse()) await c.stop();
    removeTempDir(scratch);
    removeTempDir(dataDir);
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  installCleanupHandlers();
  const quick = process.argv.includes('--quick');
  const prof = process.argv.find((a) => a.startsWith('--cpu-prof='));
  const cpuProfDir = prof ? path.resolve(prof.slice('--cpu-prof='.length)) : undefined;
  const t0 = performance.now();
  runStandalone(async () => ({
    git: await benchGit({ ...(quick ? { pages: 1_000, seedMaxS: 300 } : { pages: 10_000, seedMaxS: 1800 }), cpuProfDir }),
    quick,
    total_duration_s: round((performance.now() - t0) / 1000, 1),
  }));
}
