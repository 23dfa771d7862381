import type { Principal } from '../policy/principal.js';
import type { CoreContext } from './context.js';
import { listInbox, type InboxEvent, type InboxPage } from './inbox.js';

/**
 * MCP's collab_inbox (spec: "unread first; returned unread items become read; wait_s
 * long-polls"): the unread events after `after` (waiting for one when asked and there is
 * none), marked read as they are returned, then — while `limit` allows — the events already
 * read but not done, so an item stays in view until it is acknowledged. Each event carries
 * the state it had when listed. `next_after` is the unread scan's, as for REST.
 */
export async function listInboxUnreadFirst(
  ctx: CoreContext,
  p: Principal,
  opts: { after: number; limit: number; waitMs: number; signal?: AbortSignal | undefined },
): Promise<InboxPage> {
  const unread = await listInbox(ctx, p, { state: 'unread', after: opts.after, limit: opts.limit, waitMs: opts.waitMs, signal: opts.signal, markRead: true });
  const events: InboxEvent[] = [...unread.events];
  if (events.length < opts.limit) {
    const seen = new Set(events.map((e) => e.seq));
    const read = await listInbox(ctx, p, { state: 'read', after: opts.after, limit: opts.limit });
    for (const e of read.events) {
      if (events.length >= opts.limit) break;
      if (!seen.has(e.seq)) events.push(e);
    }
  }
  return { events, next_after: unread.next_after };
}
