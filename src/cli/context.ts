import os from 'node:os';
import { loadConfig, type Config } from '../config.js';
import type { CoreContext } from '../core/context.js';
import { Notifier } from '../core/notifier.js';
import type { OperatorActor } from '../core/operator.js';
import { TouchBuffer } from '../core/touches.js';
import { RetrievalRuntime } from '../retrieval/runtime.js';
import { openStore } from '../store/db.js';

/**
 * The deployment a command works on: configured from the environment exactly as the server is
 * (DATA_DIR, DATABASE_URL, ...), so it opens the same database, migrated the same way. The
 * SQLite file may be open by a running server meanwhile (WAL; a write waits for the other's
 * transaction, up to the busy timeout). Nothing runs in the background here: no embedding
 * worker, no lifecycle timer.
 */
export interface OperatorSession {
  ctx: CoreContext;
  config: Config;
  close(): Promise<void>;
}

export async function openDeployment(): Promise<OperatorSession> {
  const config = loadConfig();
  const store = await openStore({ dataDir: config.dataDir, databaseUrl: config.databaseUrl, cacheMb: config.sqliteCacheMb, poolMax: config.databasePoolMax });
  const ctx: CoreContext = {
    store,
    config,
    touches: new TouchBuffer(store),
    notifier: new Notifier(),
    retrieval: new RetrievalRuntime(store, config.embeddings),
  };
  return { ctx, config, close: () => store.close() };
}

/** Who runs the command, for audit entries: the OS user and host (OPERATOR overrides it). */
export function operatorActor(): OperatorActor {
  if (process.env.OPERATOR) return { operator: process.env.OPERATOR.slice(0, 200) };
  let user = 'unknown';
  try {
    user = os.userInfo().username;
  } catch {
    /* no passwd entry (a container's arbitrary uid) */
  }
  return { operator: `${user}@${os.hostname()}` };
}
