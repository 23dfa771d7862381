import { z } from 'zod';
import { SEQ_MAX } from './ids.js';
import { ACK_MAX_SEQS, INBOX_DEFAULT_LIMIT, INBOX_MAX_LIMIT } from './inbox.js';

/**
 * The inputs of the inbox (`listInbox`, `ackInbox`), shared by REST `GET /inbox`,
 * `POST /inbox/ack` and the MCP tools `collab_inbox` and `collab_ack`. A number field is a
 * function of its base: `z.number()` in JSON, `z.coerce.number()` in a query string. How long a
 * long-poll may wait differs per face (REST `wait` in seconds up to INBOX_MAX_WAIT_S, MCP
 * `wait_s` up to its own bound), so it stays with each face.
 */

/** Only events after this seq. */
export function inboxAfter<N extends z.ZodNumber | z.ZodCoercedNumber>(base: N) {
  return base.int().min(0).max(SEQ_MAX).default(0).describe('Only events with a greater seq');
}

/** How many events at most. */
export function inboxLimit<N extends z.ZodNumber | z.ZodCoercedNumber>(base: N) {
  return base.int().min(1).max(INBOX_MAX_LIMIT).default(INBOX_DEFAULT_LIMIT);
}

/** Ack every event with seq ≤ up_to. */
export const AckUpTo = z.number().int().min(0).max(SEQ_MAX);
/** Ack exactly these events. */
export const AckSeqs = z.array(z.number().int().min(1).max(SEQ_MAX)).max(ACK_MAX_SEQS);
