import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { MessageBody, MessageId, MessageKind, mentionList, threadAfter } from '../../core/thread-input.js';
import { getThread, markThreadRead, postMessage, THREAD_KINDS, unlockThread } from '../../core/threads.js';
import { caller } from '../shared/caller.js';
import { PageRefParams, Timestamp } from '../schemas.js';
import { errors, optionalBody, route, type RestApp } from '../shared/schemas.js';

const AuthorSchema = z.object({ id: z.string(), name: z.string(), kind: z.enum(['human', 'agent']) });

const MessageSchema = z.object({
  id: z.string(),
  seq: z.number().int(),
  author: AuthorSchema,
  kind: z.enum(THREAD_KINDS),
  body: z.string(),
  reply_to: z.string().nullable(),
  mentions: z.array(z.string()).describe('Principal ids mentioned'),
  created_at: Timestamp,
});

const ThreadStateSchema = z.object({
  page_id: z.string(),
  path: z.string(),
  locked: z.boolean().describe('Locked by the loop breaker: agents cannot post until an editor or owner unlocks it'),
  locked_at: Timestamp.nullable(),
  agent_hops: z.number().int().describe('Consecutive agent-authored messages; the 4th locks the thread'),
  unread: z.number().int().describe('Messages by others after your last read'),
  last_read_seq: z.number().int(),
});

const PostBody = z.strictObject({
  body: MessageBody.refine((s) => s.trim().length > 0, { message: 'The body must not be blank' }),
  kind: MessageKind,
  reply_to: MessageId.nullable().optional().describe('Id of a message of this page'),
  mentions: mentionList(z.string().trim()).default([]).describe('Principal ids or @names (display name, case-insensitive)'),
});

const PostResultSchema = MessageSchema.extend({
  thread: z.object({ locked: z.boolean(), locked_at: Timestamp.nullable(), agent_hops: z.number().int() }),
});

export async function threadRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  const tags = ['threads'];

  r.get(
    '/nodes/:id/threads',
    route(tags, "The page's thread: messages in order and its state (read access to the page)", {
      params: PageRefParams,
      querystring: z.object({
        after: threadAfter(z.coerce.number()).describe('Only messages with a greater seq'),
        limit: z.coerce.number().int().min(1).max(500).default(200),
      }),
      response: {
        200: ThreadStateSchema.extend({
          messages: z.array(MessageSchema),
          next_after: z.number().int().nullable().describe('Pass as after= for more; null when there are no more'),
        }),
        ...errors(400, 401, 404),
      },
    }),
    async (req) => getThread(ctx, caller(req), req.params.id, req.query),
  );

  for (const url of ['/nodes/:id/threads', '/nodes/:id/threads/messages']) {
    r.post(
      url,
      route(tags, undefined, {
        summary: url.endsWith('/messages')
          ? 'Alias of POST /api/v1/nodes/:id/threads'
          : 'Post a message (collab grant for agents; any member for humans); mentions and replies reach those who can read the page',
        params: PageRefParams,
        body: PostBody,
        response: { 201: PostResultSchema, ...errors(400, 401, 403, 404, 423) },
      }),
      async (req, reply) => reply.code(201).send(await postMessage(ctx, caller(req), req.params.id, req.body)),
    );
  }

  r.post(
    '/nodes/:id/threads/read',
    route(tags, 'Mark the thread read up to its latest message', {
      params: PageRefParams,
      body: optionalBody(z.strictObject({})),
      response: { 200: ThreadStateSchema, ...errors(400, 401, 404) },
    }),
    async (req) => markThreadRead(ctx, caller(req), req.params.id),
  );

  r.post(
    '/nodes/:id/threads/unlock',
    route(
      tags,
      'Unlock a thread the loop breaker locked (editor or owner, session)',
      {
        params: PageRefParams,
        body: optionalBody(z.strictObject({})),
        response: {
          200: ThreadStateSchema.extend({
            changed: z.boolean().describe('false when the thread was not locked'),
            unlocked_by: z.string().nullable(),
            unlocked_at: Timestamp.nullable(),
          }),
          ...errors(400, 401, 403, 404),
        },
      },
      { auth: 'session' },
    ),
    async (req) => unlockThread(ctx, caller(req), req.params.id),
  );
}
