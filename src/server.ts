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

export interface RunningServer {
  app: FastifyInstance;
  ctx: CoreContext;
  /** The lifecycle job's timer (tests call its `tick` with their own clock). */
  lifecycle: LifecycleScheduler;
  url: string;
  close(): Promise<void>;
}

/** Opens the store, builds the app and listens; `close` drains requests, flushes and closes the store. */
export async function startServer(config: Config, opts: AppOptions = {}): Promise<RunningServer> {
  const store = await openStore({ dataDir: config.dataDir, databaseUrl: config.databaseUrl, cacheMb: config.sqliteCacheMb });
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
  retrieval.worker.onError = (message, err) => app.log.warn({ err }, `embeddings provider failed: ${message}`);
  await app.listen({ port: config.port, host: config.host });
  // Re-indexing an upgrade asked for runs in the background: the service serves meanwhile.
  retrieval.reindex.start(app.log);
  const lifecycle = new LifecycleScheduler(ctx);
  lifecycle.start();
  // Imports accepted before a crash or restart (or left by a node that stopped) are finished.
  const imports = importRunner(ctx);
  imports.start();
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : config.port;
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  // PUBLIC_URL unset on port 0 (tests, `PORT=0`): the default names the port actually bound.
  if (config.port === 0 && config.publicUrl === `http://${host}:0`) config.publicUrl = `http://${host}:${port}`;
  return {
    app,
    ctx,
    lifecycle,
    url: `http://${host}:${port}`,
    close: async () => {
      await app.close();
      await lifecycle.stop();
      await imports.stop();
      await retrieval.stop();
      await listener?.close();
      await touches.stop();
      await store.close();
    },
  };
}
