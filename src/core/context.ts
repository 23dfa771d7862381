import type { Config } from '../config.js';
import type { RetrievalRuntime } from '../retrieval/runtime.js';
import type { Store } from '../store/db.js';
import type { Notifier } from './notifier.js';
import type { TouchBuffer } from './touches.js';

/** What every core function needs: the store and the configuration. Faces build it once. */
export interface CoreContext {
  store: Store;
  config: Config;
  touches: TouchBuffer;
  /** Wakes inbox long-polls when events arrive. */
  notifier: Notifier;
  /** Embeddings, the vector matrices and the worker that keeps them behind writes. */
  retrieval: RetrievalRuntime;
  /** Where security events are reported (the server log); set once the app is built. */
  log?: { warn(obj: object, msg: string): void };
}
