import { z } from 'zod';
import { WatchId, WatchNodeId, WatchPath } from '../../core/watch-input.js';
import { listWatches, unwatch, watch } from '../../core/watches.js';
import { unwatchView, watchListView, watchResultView } from '../../presenters/watches.js';
import { J, out, tool, type ToolDef } from './define.js';

/**
 * The extended toolset's watching calls (issue 13, beyond the spec): watch a page, folder or
 * Space; stop; list. Same core functions as REST (PUT, DELETE, GET /api/v1/watches). Changes by
 * others then arrive through collab_inbox as `page_changed` events (or a `watch_digest`).
 */

const WatchOut = { id: J.str, kind: J.str, node_id: J.strOrNull, path: J.str, created_at: J.str, delivering: J.bool };

export const WATCH_TOOLS: ToolDef[] = [
  tool({
    name: 'context_watch',
    description:
      "Watch a page (id, or a path ending .md; follows the page through moves), a folder or a Space (path). Others' changes under it then arrive in collab_inbox as page_changed events, one per page while unread; your own changes never do. Idempotent.",
    schema: z.strictObject({ id: WatchNodeId.optional(), path: WatchPath.optional() }),
    grants: ['read'],
    readOnly: false,
    output: out({ watch: { type: 'object', properties: WatchOut }, created: J.bool }),
    run: async (a, { ctx, p }) => watchResultView(await watch(ctx, p, { node_id: a.id, path: a.path })),
  }),
  tool({
    name: 'context_unwatch',
    description: 'Stop a watch: by watch_id (from context_watches), or by what it watches (id of a page, or path).',
    schema: z.strictObject({ watch_id: WatchId.optional(), id: WatchNodeId.optional(), path: WatchPath.optional() }),
    grants: [],
    readOnly: false,
    output: out({ id: J.str, removed: J.bool }),
    run: async (a, { ctx, p }) => unwatchView(await unwatch(ctx, p, { watch_id: a.watch_id, node_id: a.id, path: a.path })),
  }),
  tool({
    name: 'context_watches',
    description:
      'Your watches: what each is on and whether it still delivers (delivering false: the key it was made with is dead, or the target is out of your sight).',
    schema: z.strictObject({}),
    grants: [],
    readOnly: true,
    output: out({ watches: J.arr, limit: J.int }),
    run: async (_a, { ctx, p }) => watchListView(await listWatches(ctx, p)),
  }),
];
