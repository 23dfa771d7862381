import { z } from 'zod';
import { MAX_BODY_CHARS, MAX_MENTIONS, THREAD_KINDS } from './threads.js';
import { SEQ_MAX } from './ids.js';

/**
 * The inputs of a thread post (`postMessage`), shared by REST `POST /nodes/:id/threads` and the
 * MCP tool `collab_post`. REST also refuses a blank body in its schema and trims mentions;
 * `collab_post` answers a blank body itself: each face keeps its own answer to those.
 */

/** The message text. */
export const MessageBody = z.string().min(1).max(MAX_BODY_CHARS);
/** What kind of message; a comment unless said. */
export const MessageKind = z.enum(THREAD_KINDS).default('comment');
/** A message id (`reply_to`). */
export const MessageId = z.string().min(1).max(100);

export const MENTION_MAX_CHARS = 200;
/** Principal ids or @names; `entry` is `z.string()` or, to trim each one first, `z.string().trim()`. */
export function mentionList(entry: z.ZodString = z.string()) {
  return z.array(entry.min(1).max(MENTION_MAX_CHARS)).max(MAX_MENTIONS);
}

/** Only thread messages after this seq (REST `after`, MCP `collab_thread`). */
export function threadAfter<N extends z.ZodNumber | z.ZodCoercedNumber>(base: N) {
  return base.int().min(0).max(SEQ_MAX).default(0);
}
