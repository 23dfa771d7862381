import { collectDefaultMetrics, Counter, Histogram, Registry } from 'prom-client';

/**
 * The process-wide Prometheus metrics that code below the faces records (commits in core, search
 * and bundle latency in retrieval). A leaf, like config.ts: any layer may import it, and it
 * imports nothing of ours, so core and retrieval count without knowing that /metrics exists.
 * The HTTP face (src/http/metrics.ts) adds its per-app metrics and serves them merged.
 *
 * Labels take a small fixed set of values only (modes, never ids, paths or queries): every label
 * value is a time series kept forever.
 */
export const processRegistry = new Registry();

/** Latency buckets (seconds) for work that should take milliseconds and may take seconds. */
export const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** Commits made on any workspace's main line by this process (REST, MCP, git push, folder acts). */
export const commitsMade = new Counter({
  name: 'cv_commits_total',
  help: 'Commits made by this process, counted once their transaction committed',
  registers: [processRegistry],
});

export const searchSeconds = new Histogram({
  name: 'cv_search_duration_seconds',
  help: 'Time to answer a search (REST and MCP), by the mode asked for',
  labelNames: ['mode'] as const,
  buckets: LATENCY_BUCKETS,
  registers: [processRegistry],
});

export const bundleSeconds = new Histogram({
  name: 'cv_bundle_duration_seconds',
  help: 'Time to build a context bundle (REST, MCP tool and prompt)',
  buckets: LATENCY_BUCKETS,
  registers: [processRegistry],
});

/** Files of imports applied by this process, by what became of them. */
export const importFiles = new Counter({
  name: 'cv_import_files_total',
  help: 'Files of imports applied by this process, by outcome (created, updated, unchanged, skipped)',
  labelNames: ['outcome'] as const,
  registers: [processRegistry],
});

/** Imports this process finished, by their end (done, failed). */
export const importsFinished = new Counter({
  name: 'cv_imports_total',
  help: 'Imports finished by this process, by final status',
  labelNames: ['status'] as const,
  registers: [processRegistry],
});

/** Lifecycle runs this process made, by trigger and mode, and the pages they archived. */
export const lifecycleRuns = new Counter({
  name: 'cv_lifecycle_runs_total',
  help: 'Lifecycle job runs made by this process, by trigger (scheduled, manual) and mode (dry, apply)',
  labelNames: ['trigger', 'mode'] as const,
  registers: [processRegistry],
});

export const lifecycleArchived = new Counter({
  name: 'cv_lifecycle_archived_pages_total',
  help: 'Pages archived as stale by lifecycle runs of this process',
  registers: [processRegistry],
});

let defaultsOn = false;

/** Node's own metrics (CPU, memory, event-loop lag, GC), under their usual names; once per process. */
export function enableProcessMetrics(): void {
  if (defaultsOn) return;
  defaultsOn = true;
  collectDefaultMetrics({ register: processRegistry });
}
