import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { WatchId, WatchNodeId, WatchPath } from '../../core/watch-input.js';
import { listWatches, unwatch, watch } from '../../core/watches.js';
import { unwatchView, watchListView, watchResultView } from '../../presenters/watches.js';
import { caller } from '../shared/caller.js';
import { errors, route, type RestApp } from '../shared/schemas.js';
import { Timestamp } from '../schemas.js';

const WatchSchema = z.object({
  id: z.string(),
  kind: z.enum(['page', 'folder']),
  node_id: z.string().nullable().describe('The watched page (page watches); the watch follows it through moves'),
  path: z.string().describe('The folder or Space; for a page, where it is now'),
  created_at: Timestamp,
  delivering: z.boolean().describe('False when nothing will arrive: the key it was made with is dead, or the target is out of your sight'),
});

/** Watching pages and folders (issue 13): changes by others arrive in the inbox as `page_changed` events. */
export async function watchRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  const tags = ['watches'];

  r.get(
    '/watches',
    route(tags, 'Your watches in this workspace', {
      response: { 200: z.object({ watches: z.array(WatchSchema), limit: z.number().int().describe('How many watches you may hold') }), ...errors(401) },
    }),
    async (req) => watchListView(await listWatches(ctx, caller(req))),
  );

  r.put(
    '/watches',
    route(tags, 'Watch a page ({node_id}, or {path} ending .md), a folder or a Space ({path}); idempotent. Needs read on it', {
      body: z.strictObject({ node_id: WatchNodeId.optional(), path: WatchPath.optional() }),
      response: { 200: z.object({ watch: WatchSchema, created: z.boolean().describe('False: you already watched it') }), ...errors(400, 401, 404, 409) },
    }),
    async (req) => watchResultView(await watch(ctx, caller(req), req.body)),
  );

  r.delete(
    '/watches/:id',
    route(tags, 'Stop a watch of yours', {
      params: z.object({ id: WatchId }),
      response: { 200: z.object({ id: z.string(), removed: z.literal(true) }), ...errors(401, 404) },
    }),
    async (req) => unwatchView(await unwatch(ctx, caller(req), { watch_id: req.params.id })),
  );
}
