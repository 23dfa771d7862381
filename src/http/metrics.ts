import crypto from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { CoreContext } from '../core/context.js';
import { unauthorized } from '../core/errors.js';
import { importQueue } from '../core/import/index.js';
import { enableProcessMetrics, processRegistry } from '../metrics.js';
import { sendError } from './shared/errors.js';

/** Request latency buckets (seconds): API calls take milliseconds, inbox long-polls up to a minute. */
const REQUEST_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** The route label of a request no route matched: its URL may hold anything. */
const UNMATCHED = 'unmatched';

const REINDEX_STATES = ['none', 'pending', 'running', 'finished'] as const;

/** SHA-256 first, so the comparison is constant-time whatever the lengths. */
function digest(s: string): Buffer {
  return crypto.createHash('sha256').update(s).digest();
}

function bearerOf(req: FastifyRequest): string | undefined {
  const h = req.headers.authorization;
  const m = typeof h === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(h) : null;
  return m?.[1];
}

/** The metrics of one app: its requests and its view of the deployment (backlog, waiters, jobs). */
function appRegistry(ctx: CoreContext): { registry: Registry; requests: Counter<'method' | 'route' | 'status'>; seconds: Histogram<'method' | 'route'> } {
  const registry = new Registry();
  const requests = new Counter({
    name: 'cv_http_requests_total',
    help: 'HTTP requests answered, by method, route pattern (never the URL) and status',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const seconds = new Histogram({
    name: 'cv_http_request_duration_seconds',
    help: 'Time from receiving a request to the end of its answer, by method and route pattern',
    labelNames: ['method', 'route'] as const,
    buckets: REQUEST_BUCKETS,
    registers: [registry],
  });
  // Read at scrape time. A failing database leaves a gauge at its last value (the scrape still
  // answers; /readyz tells that the database is down).
  new Gauge({
    name: 'cv_embeddings_backlog',
    help: 'Pages waiting for their vectors (embed_jobs pending), in the whole deployment',
    registers: [registry],
    async collect() {
      try {
        this.set(await ctx.retrieval.worker.backlog());
      } catch {
        /* keep the last value */
      }
    },
  });
  new Gauge({
    name: 'cv_embeddings_degraded',
    help: '1 while the embeddings provider fails on this node (writes go on, vectors wait)',
    registers: [registry],
    collect() {
      this.set(ctx.retrieval.worker.status.lastError ? 1 : 0);
    },
  });
  new Gauge({
    name: 'cv_inbox_waiters',
    help: 'Inbox long-polls waiting on this node',
    registers: [registry],
    collect() {
      this.set(ctx.notifier.waiting);
    },
  });
  // Group commit (SQLite only): a ratio of commits to syncs above 1 is commits sharing a sync.
  const store = [
    ['cv_store_syncs_total', 'Syncs of the SQLite write-ahead log (each makes every commit before it durable)', 'syncs'],
    ['cv_store_checkpoints_total', 'Checkpoints of the SQLite write-ahead log run in the background (off the request thread)', 'checkpoints'],
    ['cv_store_synced_commits_total', 'Commits of the SQLite store made durable by those syncs (group commit: more commits than syncs)', 'commits'],
  ] as const;
  if (ctx.store.syncStats()) {
    for (const [name, help, figure] of store) {
      new Counter({
        name,
        help,
        registers: [registry],
        collect() {
          this.reset();
          this.inc(ctx.store.syncStats()?.[figure] ?? 0);
        },
      });
    }
  }
  const jobDone = new Gauge({
    name: 'cv_job_done',
    help: 'Items a background job has finished',
    labelNames: ['job'] as const,
    registers: [registry],
  });
  const jobTotal = new Gauge({
    name: 'cv_job_total',
    help: 'Items a background job has to do (absent while unknown)',
    labelNames: ['job'] as const,
    registers: [registry],
  });
  new Gauge({
    name: 'cv_job_state',
    help: 'Background jobs: 1 for the state each job is in, 0 for the others',
    labelNames: ['job', 'state'] as const,
    registers: [registry],
    async collect() {
      try {
        const s = await ctx.retrieval.reindex.status();
        for (const state of REINDEX_STATES) this.set({ job: 'reindex', state }, s.state === state ? 1 : 0);
        jobDone.set({ job: 'reindex' }, s.done);
        if (s.total === null) jobTotal.remove({ job: 'reindex' });
        else jobTotal.set({ job: 'reindex' }, s.total);
      } catch {
        /* keep the last values */
      }
    },
  });
  new Gauge({
    name: 'cv_imports',
    help: 'Imports waiting (queued) and running, in the whole deployment',
    labelNames: ['status'] as const,
    registers: [registry],
    async collect() {
      try {
        const q = await importQueue(ctx);
        this.set({ status: 'queued' }, q.queued);
        this.set({ status: 'running' }, q.running);
      } catch {
        /* keep the last values */
      }
    },
  });
  return { registry, requests, seconds };
}

/**
 * GET /metrics in Prometheus text format (spec §4 "Operations"), and the request metrics it
 * shows. Registered on the root by app.ts, so its hook counts every face and unknown URLs.
 *
 * Behind `METRICS_TOKEN` (a bearer token, compared in constant time): unset, nothing is
 * registered and /metrics is 404 like any unknown URL; set, a missing or wrong token is 401.
 * Hidden from the OpenAPI document (an operator's URL, not the API). Not under /api/v1, so no
 * per-principal limit spends on a scrape; the host check lets it through like the probes.
 */
export function registerMetrics(app: FastifyInstance, ctx: CoreContext): void {
  const token = ctx.config.metricsToken;
  if (!token) return;
  const expected = digest(token);
  enableProcessMetrics();
  const { registry, requests, seconds } = appRegistry(ctx);

  app.addHook('onResponse', async (req, reply) => {
    // The route's pattern (`/api/v1/nodes/:id`), never the URL: ids and tokens stay out of labels.
    const route = req.is404 ? UNMATCHED : (req.routeOptions.url ?? UNMATCHED);
    const method = req.method;
    requests.inc({ method, route, status: String(reply.statusCode) });
    seconds.observe({ method, route }, reply.elapsedTime / 1000);
  });

  app.get('/metrics', { config: { auth: 'public' }, schema: { hide: true } }, async (req, reply) => {
    const given = bearerOf(req);
    if (given === undefined || !crypto.timingSafeEqual(digest(given), expected)) {
      reply.header('WWW-Authenticate', 'Bearer realm="metrics"');
      return sendError(reply, unauthorized('GET /metrics needs Authorization: Bearer <METRICS_TOKEN>'));
    }
    const merged = Registry.merge([processRegistry, registry]);
    const body = await merged.metrics();
    return reply.type(merged.contentType).header('Cache-Control', 'no-store').send(body);
  });
}
