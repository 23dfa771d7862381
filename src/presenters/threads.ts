import type { PostResult } from '../core/threads.js';

/**
 * Thread posts as each face shows them. One source: `postMessage` (core/threads.ts), whose
 * result is the REST answer of `POST /nodes/:id/threads` as it is (`PostResultSchema`).
 */

/** `collab_post`: the message's id and seq, whom it reached, and the thread's loop-breaker state. */
export function postToolView(m: PostResult) {
  return { id: m.id, seq: m.seq, mentions: m.mentions, thread: m.thread };
}
