import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { pageTotals } from '../core/pages/read.js';
import { databaseHealth } from '../core/health.js';
import { GIT_SHA, VERSION } from '../version.js';
import { route } from './shared/schemas.js';
import { Timestamp } from './schemas.js';

/**
 * A background failure as an anonymous caller sees it: a fixed sentence, never the error's own
 * text (it may name an upstream host, a key, SQL or data; the server log has it), or null.
 */
const RedactedError = z.string().nullable();

/** Vectors trail writes: `backlog` pages wait for them; `degraded` while the provider fails (writes go on). */
const Embeddings = z.object({
  status: z.enum(['ok', 'degraded', 'starting', 'unknown']),
  provider: z.string(),
  model: z.string(),
  dimensions: z.number(),
  backlog: z.number().nullable(),
  last_error: RedactedError,
  last_error_at: Timestamp.nullable(),
});

/**
 * Re-indexing an upgrade asked for (src/retrieval/reindex-job.ts). The service is ready while it
 * runs; keyword search, backlinks and vectors miss the pages it has not reached yet.
 */
const Reindex = z.object({
  state: z.enum(['none', 'pending', 'running', 'finished', 'unknown']),
  done: z.number(),
  total: z.number().nullable(),
  started_at: Timestamp.nullable(),
  finished_at: Timestamp.nullable(),
  last_error: RedactedError,
});

/** How long /healthz waits for the database before answering with the last figures. */
const HEALTH_DB_WAIT_MS = 1000;

/** `/readyz`, ready (200) or not (503). */
const Readiness = z.object({
  status: z.enum(['ready', 'unavailable']),
  version: z.string(),
  git_sha: z.string(),
  database: z.object({ ok: z.boolean(), engine: z.string() }),
  embeddings: Embeddings,
  reindex: Reindex,
});

/**
 * The probes (spec §4 "Health"): GET /healthz and /readyz at the root, registered by app.ts
 * without a prefix. Public; the root's host check exempts them from the Host test only, so a
 * load balancer may call them by the node's IP.
 */
export async function healthFace(face: FastifyInstance): Promise<void> {
  const ctx = face.ctx;
  const r = face.withTypeProvider<ZodTypeProvider>();
  /** The figures of the last /healthz that reached the database. */
  let last: { nodes: number; indexed_at: string | null } = { nodes: 0, indexed_at: null };

  r.get(
    '/healthz',
    route(
      ['health'],
      undefined,
      {
        response: {
          200: z.object({
            status: z.literal('ok'),
            version: z.string(),
            nodes: z.number().describe('Live pages across the deployment (the last figure read while the database is out of reach)'),
            indexed_at: Timestamp.nullable(),
            database: z.enum(['ok', 'unavailable']).describe('unavailable: this node is alive but cannot reach its database now; see /readyz'),
          }),
        },
      },
      { auth: 'public' },
    ),
    async () => {
      // Liveness, not readiness: while the database is out of reach the process is still alive
      // and recovers by itself (issue 18), so a probe must not restart it. The last figures read
      // are answered, with `database: 'unavailable'`; /readyz is the one that says 503.
      // A pool waiting for a connection that will not come would hold a probe for seconds: one
      // second is the bound (probes commonly time out at 1-2 s).
      let timer: NodeJS.Timeout | undefined;
      const slow = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), HEALTH_DB_WAIT_MS)));
      try {
        const totals = await Promise.race([pageTotals(ctx), slow]);
        if (totals) {
          last = totals;
          return { status: 'ok' as const, version: VERSION, ...last, database: 'ok' as const };
        }
      } catch {
        /* answered below */
      } finally {
        clearTimeout(timer);
      }
      return { status: 'ok' as const, version: VERSION, ...last, database: 'unavailable' as const };
    },
  );

  r.get(
    '/readyz',
    route(
      ['health'],
      undefined,
      {
        response: { '2xx': Readiness, 503: Readiness },
      },
      { auth: 'public' },
    ),
    async (_req, reply) => {
      const database = await databaseHealth(ctx);
      // A draining node is alive but must get no new traffic.
      const ok = database.ok && !face.isDraining();
      const embeddings = ok ? await ctx.retrieval.status().catch(() => null) : null;
      // The provider's error text may name an upstream URL, a host or part of a key: it goes
      // to the server log (where the worker writes it), never to an anonymous caller.
      if (embeddings?.last_error) embeddings.last_error = 'the embeddings provider failed; details are in the server log';
      const reindex = ok ? await ctx.retrieval.reindex.status().catch(() => null) : null;
      // Likewise a failed batch's error (it may quote SQL or data): the log has it.
      if (reindex?.last_error) reindex.last_error = 'a re-index batch failed and is retried; details are in the server log';
      const body = {
        status: ok ? ('ready' as const) : ('unavailable' as const),
        version: VERSION,
        git_sha: GIT_SHA,
        database,
        embeddings: embeddings ?? {
          status: 'unknown',
          provider: ctx.retrieval.provider.provider,
          model: ctx.retrieval.provider.model,
          dimensions: ctx.retrieval.provider.dimensions,
          backlog: null,
          last_error: null,
          last_error_at: null,
        },
        reindex: reindex ?? { state: 'unknown' as const, done: 0, total: null, started_at: null, finished_at: null, last_error: null },
      };
      return reply.code(ok ? 200 : 503).send(body);
    },
  );
}
