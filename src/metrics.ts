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

let defaultsOn = false;

/** Node's own metrics (CPU, memory, event-loop lag, GC), under their usual names; once per process. */
export function enableProcessMetrics(): void {
  if (defaultsOn) return;
  defaultsOn = true;
  collectDefaultMetrics({ register: processRegistry });
}
