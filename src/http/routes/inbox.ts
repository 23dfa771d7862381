import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { ackInbox, INBOX_MAX_WAIT_S, INBOX_STATES, listInbox } from '../../core/inbox.js';
import { AckSeqs, AckUpTo, inboxAfter, inboxLimit } from '../../core/inbox-input.js';
import { caller } from '../shared/caller.js';
import { errors, route, type RestApp } from '../shared/schemas.js';
import { Timestamp } from '../schemas.js';

const EventSchema = z.object({
  seq: z.number().int().describe('Grows per principal'),
  kind: z.enum(['mention', 'reply', 'proposal', 'conflict', 'thread_locked', 'page_changed', 'watch_digest', 'lifecycle_digest']),
  state: z.enum(['unread', 'read', 'done']),
  created_at: Timestamp,
  page_id: z.string().nullable(),
  proposal_id: z.string().nullable(),
  payload: z.record(z.string(), z.unknown()),
});

const AckBody = z
  .strictObject({
    up_to: AckUpTo.optional().describe('Mark every event with seq ≤ up_to done'),
    seqs: AckSeqs.optional().describe('Mark exactly these events done'),
  })
  .refine((b) => (b.up_to === undefined) !== (b.seqs === undefined), { message: 'Send exactly one of up_to or seqs' });

export async function inboxRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  const tags = ['inbox'];

  // Long-polls in flight end (empty) when the server closes, instead of holding it open. A poll
  // still being authenticated when the close began is not in the set yet: `closing` ends it
  // as soon as it gets here.
  const polls = new Set<AbortController>();
  let closing = false;
  r.addHook('preClose', async () => {
    closing = true;
    for (const ac of polls) ac.abort();
  });

  r.get(
    '/inbox',
    route(tags, 'Your events in this workspace after a seq; wait= long-polls. Listing does not mark events read (ack marks them done)', {
      querystring: z.object({
        state: z.enum(INBOX_STATES).default('unread'),
        after: inboxAfter(z.coerce.number()),
        limit: inboxLimit(z.coerce.number()),
        wait: z.coerce.number().min(0).max(INBOX_MAX_WAIT_S).default(0).describe('Seconds to wait for an event when there is none (0 to 25)'),
      }),
      response: {
        200: z.object({ events: z.array(EventSchema), next_after: z.number().int().describe('Pass as after= next time') }),
        ...errors(400, 401),
      },
    }),
    async (req, reply) => {
      const p = caller(req);
      const q = req.query;
      const ac = new AbortController();
      // The response's socket closing before we answered means the client gave up waiting.
      const onClose = () => {
        if (!reply.raw.writableFinished) ac.abort();
      };
      reply.raw.on('close', onClose);
      polls.add(ac);
      if (closing) ac.abort();
      try {
        return await listInbox(ctx, p, {
          state: q.state,
          after: q.after,
          limit: q.limit,
          waitMs: Math.round(q.wait * 1000),
          signal: ac.signal,
          markRead: false,
        });
      } finally {
        polls.delete(ac);
        reply.raw.off('close', onClose);
      }
    },
  );

  r.post(
    '/inbox/ack',
    route(tags, 'Mark events done: {up_to} (every seq ≤ up_to) or {seqs} (at most 1000)', {
      body: AckBody,
      response: { 200: z.object({ done: z.number().int().describe('Events that became done') }), ...errors(400, 401) },
    }),
    async (req) => ackInbox(ctx, caller(req), req.body),
  );
}
