import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { appendLog, MAX_LOG_ENTRY_CHARS } from '../../core/log.js';
import { SCOPE_MAX_CHARS } from '../../retrieval/search-input.js';
import { caller } from '../shared/caller.js';
import { errors, route, type RestApp } from '../shared/schemas.js';

/** `POST /api/v1/log` (spec §4 "Operations"; grant propose): the REST twin of MCP `context_log`. */
export async function logRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  r.post(
    '/log',
    route(['operations'], 'Append a timestamped entry, in your name, to log.md of a Space or folder as one commit (propose grant)', {
      body: z.strictObject({
        scope: z.string().min(1).max(SCOPE_MAX_CHARS).describe('A Space, or space/folder'),
        entry: z.string().min(1).max(MAX_LOG_ENTRY_CHARS).describe('Plain text; a line may not open a ::: block'),
      }),
      response: {
        201: z.object({
          id: z.string(),
          path: z.string(),
          commit_sha: z.string(),
          content_hash: z.string().optional().describe("The log's validator; absent when you may append to the log but not read it"),
          appended: z.string().describe('The markdown appended'),
        }),
        ...errors(400, 401, 403, 404),
      },
    }),
    async (req, reply) => reply.code(201).send(await appendLog(ctx, caller(req), req.body)),
  );
}
