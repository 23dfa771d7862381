import type { Store } from '../store/db.js';
import type { RetrievalRuntime } from './runtime.js';

/**
 * What retrieval needs from its caller: the store and the vector runtime. The core's
 * `CoreContext` has both, so a face passes its context straight through, and retrieval does not
 * import the core (DESIGN.md §1: core → retrieval, never back).
 */
export interface RetrievalContext {
  store: Store;
  /** Embeddings, the vector matrices and the worker that keeps them behind writes. */
  retrieval: RetrievalRuntime;
}
