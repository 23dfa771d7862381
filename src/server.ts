import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { buildApp, type AppOptions } from './app.js';
import type { Config } from './config.js';
import type { CoreContext } from './core/context.js';
import { importRunner } from './core/import/index.js';
import { LifecycleScheduler } from './core/lifecycle-job.js';
import { TouchBuffer } from './core/touches.js';
import { Notifier } from './core/notifier.js';
import { openStore } from './store/db.js';
import { listen } from './store/listen.js';
import { RetrievalRuntime } from './retrieval/runtime.js';
import { StatisticsKeeper } from './store/statistics.js';
import { TermStatsFolder } from './retrieval/term-stats-fold.js';

export interface RunningServer {
  app: FastifyInstance;
  ctx: CoreContext;
  /** The lifecycle job's timer (tests call its `tick` with their own clock). */
  lifecycle: LifecycleScheduler;
  /** PostgreSQL's planner statistics kept current (tests call its `tick`). */
  statistics: StatisticsKeeper;
  /** PostgreSQL's pending word-statistics changes folded into term_stats (tests call its `fold`). */
  termStats: TermStatsFolder;
  url: string;
  /**
   * Shuts down gracefully: stops accepting connections, ends inbox long-polls with their empty
   * answer, lets requests in flight finish (at most `graceMs`, then their connections are cut),
   * stops the background jobs after their batch in hand and gives their leases back, flushes and
   * closes the store.
   */
  close(opts?: { graceMs?: number }): Promise<void>;
}

/** How long requests in flight may take to finish once shutdown begins. */
export const SHUTDOWN_GRACE_MS = 10_000;
/** While draining, connections whose answer went out are closed this often (see close). */
const REAP_IDLE_MS = 50;

/** Opens the store, builds the app and listens; `close` drains requests, flushes and closes the store. */
export async function startServer(config: Config, opts: AppOptions = {}): Promise<RunningServer> {
  // Set once the app's logger exists: a sync failure before that is thrown by openStore itself.
  let logSyncFailure = (_err: Error) => {};
  let logCheckpointError = (_err: Error) => {};
  const store = await openStore({
    dataDir: config.dataDir,
    databaseUrl: config.databaseUrl,
    cacheMb: config.sqliteCacheMb,
    poolMax: config.databasePoolMax,
    onSyncFailure: (err) => logSyncFailure(err),
    onCheckpointError: (err) => logCheckpointError(err),
  });
  const touches = new TouchBuffer(store);
  touches.start();
  const notifier = new Notifier();
  const listener = config.databaseUrl ? listen(config.databaseUrl, 'cv_inbox', (key) => notifier.wake(key)) : null;
  await listener?.ready;
  const retrieval = new RetrievalRuntime(store, config.embeddings);
  await retrieval.start();
  const ctx: CoreContext = { store, config, touches, notifier, retrieval };
  const app = await buildApp(ctx, opts);
  ctx.log = app.log;
  logCheckpointError = (err) => app.log.warn({ err }, 'the background checkpoint of the database log failed (commits checkpoint it again)');
  logSyncFailure = (err) => app.log.fatal({ err }, 'syncing the database log failed: this node acknowledges no more writes; restart it');
  retrieval.worker.onError = (message, err) => app.log.warn({ err }, `embeddings provider failed: ${message}`);
  // Answers still to be sent, so that shutdown can tell their clients not to reuse the connection.
  const inFlight = new Set<ServerResponse>();
  let closing = false;
  let closed: Promise<void> | undefined;
  app.server.on('request', (_req: IncomingMessage, res: ServerResponse) => {
    if (closing && !res.headersSent) res.setHeader('Connection', 'close');
    inFlight.add(res);
    res.once('close', () => inFlight.delete(res));
  });
  await app.listen({ port: config.port, host: config.host });
  // Re-indexing an upgrade asked for runs in the background: the service serves meanwhile.
  retrieval.reindex.start(app.log);
  const lifecycle = new LifecycleScheduler(ctx);
  lifecycle.start();
  // Imports accepted before a crash or restart (or left by a node that stopped) are finished.
  const imports = importRunner(ctx);
  imports.start();
  const statistics = new StatisticsKeeper(store, (err) => app.log.warn({ err }, 'refreshing the planner statistics failed'));
  statistics.start();
  const termStats = new TermStatsFolder(store, (err) => app.log.warn({ err }, 'folding the word statistics failed'));
  termStats.start();
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : config.port;
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  // PUBLIC_URL unset on port 0 (tests, `PORT=0`): the default names the port actually bound.
  if (config.port === 0 && config.publicUrl === `http://${host}:0`) config.publicUrl = `http://${host}:${port}`;
  return {
    app,
    ctx,
    lifecycle,
    statistics,
    termStats,
    url: `http://${host}:${port}`,
    close: ({ graceMs = SHUTDOWN_GRACE_MS } = {}) => (closed ??= shutdown(graceMs)),
  };

  async function shutdown(graceMs: number): Promise<void> {
    closing = true;
    // A keep-alive client would hold its connection (and the drain) for Fastify's 72 s
    // keep-alive timeout: every answer still to come says Connection: close, and connections
    // whose answer went out before shutdown began are closed as soon as they are idle.
    for (const res of inFlight) if (!res.headersSent) res.setHeader('Connection', 'close');
    const reap = setInterval(() => app.server.closeIdleConnections(), REAP_IDLE_MS);
    // The bound: whatever is still running then loses its connection (the client sees a reset,
    // as for any failed node, and nothing it was not answered counts as acknowledged).
    const cut = setTimeout(() => app.server.closeAllConnections(), graceMs);
    // Background jobs take no new batch from now on (their batches would compete with the
    // requests being drained) and give their leases back while the requests finish.
    const jobs = Promise.all([lifecycle.stop(), imports.stop(), statistics.stop(), termStats.stop()]);
    try {
      // Stops listening at once (new connections are refused); preClose hooks end long-polls.
      await app.close();
    } finally {
      clearInterval(reap);
      clearTimeout(cut);
      await jobs;
    }
    await retrieval.stop();
    await listener?.close();
    await touches.stop();
    await store.close();
  }
}
