import { z } from 'zod';
import { listChanges } from '../../core/changes.js';
import { ChangesCursor, changesLimit } from '../../core/changes-input.js';
import type { CoreContext } from '../../core/context.js';
import { SCOPE_MAX_CHARS } from '../../retrieval/search-input.js';
import { caller } from '../shared/caller.js';
import { errors, route, type RestApp } from '../shared/schemas.js';

const ChangeSchema = z.object({
  change: z.enum(['created', 'changed', 'moved', 'archived', 'restored', 'deleted']),
  id: z.string(),
  path: z.string().describe('Where the page was at that commit'),
  from: z.string().optional().describe('Moves: the path before, when you could see the page there'),
  commit_sha: z.string(),
  at: z.string(),
  author: z.object({ id: z.string(), name: z.string() }),
  message: z.string(),
});

/** The changes feed (issue 13, beyond the spec): REST twin of MCP `context_changes`. */
export async function changeRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  r.get(
    '/changes',
    route(['pages'], 'Pages created, changed, moved, archived, restored or deleted since a cursor, oldest first (only what you can see)', {
      querystring: z.object({
        scope: z.string().min(1).max(SCOPE_MAX_CHARS).optional().describe('Space or space/folder'),
        since: ChangesCursor.optional(),
        limit: changesLimit(z.coerce.number()),
      }),
      response: {
        200: z.object({
          changes: z.array(ChangeSchema),
          next: z.string().describe('Pass as since next time'),
          more: z.boolean().describe('More changes follow right away'),
        }),
        ...errors(400, 401, 404),
      },
    }),
    async (req) => listChanges(ctx, caller(req), req.query),
  );
}
