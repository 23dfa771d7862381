/**
 * `npm run bench [-- --quick] [-- --only=writes,bytes_per_commit,reads]`
 *
 * Runs the benchmarks in sequence and prints ONE JSON object to stdout; progress goes to stderr.
 * Every temp dir and child process is released on exit, also on failure or a signal.
 */
import os from 'node:os';
import { benchBytesPerCommit, snapshotBeforeSeed } from './bytes.js';
import { benchEngines, ENGINES_SIZES } from './engines.js';
import { benchGit } from './git.js';
import { benchImport } from './import.js';
import { benchMcp } from './mcp.js';
import { benchMcpSession } from './mcp-session.js';
import { benchReads } from './reads.js';
import { RETRIEVAL_NAMES, runRetrievalBenches } from './retrieval-suite.js';
import { cleanupAllSync, fsyncProbe, installCleanupHandlers, loadAverage, log, makeTempDir, removeTempDir, round } from './util.js';
import { benchCoreWrites, benchRestWrites, closeFixture, seedFolder, setupFixture, type Fixture } from './writes.js';

const NAMES = ['writes', 'bytes_per_commit', 'reads', 'mcp', 'mcp_session', 'git', 'import', 'engines', ...RETRIEVAL_NAMES] as const;
type Name = (typeof NAMES)[number];

class UsageError extends Error {}

function parseArgs(argv: string[]): { quick: boolean; only: Set<Name> } {
  let quick = false;
  let only = new Set<Name>(NAMES);
  for (const a of argv) {
    if (a === '--quick') quick = true;
    else if (a.startsWith('--only=')) {
      const wanted = a
        .slice('--only='.length)
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean);
      for (const w of wanted) if (!(NAMES as readonly string[]).includes(w)) throw new UsageError(`unknown benchmark ${w}; choose from ${NAMES.join(', ')}`);
      only = new Set(wanted as Name[]);
    } else if (a === '--help' || a === '-h') {
      process.stderr.write(`usage: tsx bench/run.ts [--quick] [--only=${NAMES.join(',')}]\n`);
      process.exit(0);
    } else throw new UsageError(`unknown argument ${a}; usage: tsx bench/run.ts [--quick] [--only=${NAMES.join(',')}]`);
  }
  return { quick, only };
}

const SIZES = {
  full: { seedPages: 10_000, seedMaxS: 1800, coreOps: 500, coreMaxS: 60, restS: 10, bytesCommits: 1000, bytesMaxS: 300, readS: 10, readWarmupS: 2 },
  quick: { seedPages: 1_000, seedMaxS: 300, coreOps: 50, coreMaxS: 20, restS: 2, bytesCommits: 100, bytesMaxS: 60, readS: 3, readWarmupS: 1 },
};

async function main(): Promise<void> {
  installCleanupHandlers();
  const { quick, only } = parseArgs(process.argv.slice(2));
  const size = quick ? SIZES.quick : SIZES.full;
  const started = new Date();
  const t0 = performance.now();
  const cpus = os.cpus();
  const probeDir = makeTempDir('probe');
  const fsync = fsyncProbe(probeDir);
  removeTempDir(probeDir);
  const loads: Record<string, number> = { at_start: loadAverage() };
  const out: Record<string, unknown> = {
    machine: {
      cpus: cpus.length,
      cpu_model: cpus[0]?.model ?? 'unknown',
      memory_bytes: os.totalmem(),
      node: process.version,
      platform: process.platform,
      arch: process.arch,
      tmpdir: os.tmpdir(),
      ...fsync,
      load_average_1m: loads,
    },
    quick,
    started_at: started.toISOString(),
  };

  if (only.has('writes') || only.has('bytes_per_commit')) {
    let fx: Fixture | undefined;
    try {
      fx = await setupFixture();
      const beforeSeed = await snapshotBeforeSeed(fx);
      await seedFolder(fx, { pages: size.seedPages, maxSeconds: size.seedMaxS });
      loads.after_seed = loadAverage();
      if (only.has('bytes_per_commit')) {
        out.bytes_per_commit = await benchBytesPerCommit(fx, { commits: size.bytesCommits, maxSeconds: size.bytesMaxS, beforeSeed });
        loads.after_bytes_per_commit = loadAverage();
      }
      if (only.has('writes')) {
        const core = await benchCoreWrites(fx, { ops: size.coreOps, maxSeconds: size.coreMaxS });
        loads.after_core_writes = loadAverage();
        const rest = await benchRestWrites(fx, { durationS: size.restS });
        loads.after_rest_writes = loadAverage();
        out.writes = { durability: fx.durability, seed: fx.seed, core, rest };
      } else {
        out.seed = fx.seed;
        out.durability = fx.durability;
      }
    } finally {
      if (fx) await closeFixture(fx);
    }
  }

  if (only.has('reads')) {
    out.reads = await benchReads({ durationS: size.readS, warmupS: size.readWarmupS, connections: 8 });
    loads.after_reads = loadAverage();
  }

  if (only.has('mcp')) {
    out.mcp = await benchMcp({ durationS: size.readS, warmupS: size.readWarmupS, connections: 8 });
    loads.after_mcp = loadAverage();
  }

  if (only.has('mcp_session')) {
    // Token figures of a scripted agent session; the same with --quick (it has no duration).
    out.mcp_session = await benchMcpSession();
    loads.after_mcp_session = loadAverage();
  }

  if (only.has('import')) {
    log('import: a zip of real markdown through POST /api/v1/import, to searchable');
    out.import = await benchImport({ files: quick ? 2_000 : 10_000 });
    loads.after_import = loadAverage();
  }

  if (only.has('git')) {
    // Seeds its own workspace of seedPages pages (the writes fixture is gone by now).
    out.git = await benchGit({ pages: size.seedPages, seedMaxS: size.seedMaxS });
    loads.after_git = loadAverage();
  }

  if (only.has('engines')) {
    // SQLite and PostgreSQL side by side (issue 18); {skipped} with a loud stderr line when PostgreSQL does not answer.
    out.engines = await benchEngines(quick ? ENGINES_SIZES.quick : ENGINES_SIZES.full);
    loads.after_engines = loadAverage();
  }

  await runRetrievalBenches(only, quick, out, loads);

  out.total_duration_s = round((performance.now() - t0) / 1000, 1);
  process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
}

main().then(
  () => {
    cleanupAllSync();
    process.exit(0);
  },
  (err: unknown) => {
    if (err instanceof UsageError) log(err.message);
    else log(`FAILED: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    cleanupAllSync();
    process.exit(1);
  },
);
