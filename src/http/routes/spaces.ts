import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { PATH_MAX_CHARS } from '../../core/pages/input.js';
import { createSpace, listSpaces, spaceTree } from '../../core/spaces.js';
import { treeDepth } from '../../core/tree-input.js';
import { spacesView } from '../../presenters/spaces.js';
import { caller } from '../shared/caller.js';
import { QueryBool, SpaceSchema, TreeFolderSchema } from '../schemas.js';
import { errors, route, type RestApp } from '../shared/schemas.js';

export async function spaceRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  const tags = ['spaces'];

  r.get(
    '/spaces',
    { schema: { tags, summary: 'Spaces visible to you', response: { 200: z.object({ spaces: z.array(SpaceSchema) }), ...errors(401) } } },
    async (req) => spacesView(await listSpaces(ctx, caller(req))),
  );

  r.post(
    '/spaces',
    route(tags, 'Create a Space (admin)', {
      body: z.strictObject({ id: z.string().min(1).max(100), name: z.string().max(200).default(''), summary: z.string().max(2000).optional() }),
      response: { 201: SpaceSchema, ...errors(400, 401, 403, 409) },
    }),
    async (req, reply) => reply.code(201).send(await createSpace(ctx, caller(req), req.body)),
  );

  r.get(
    '/spaces/:s/tree',
    route(tags, 'Folder tree of a Space with summaries and the pages you can read', {
      params: z.object({ s: z.string().min(1).max(100) }),
      querystring: z.object({
        path: z.string().max(PATH_MAX_CHARS).optional(),
        depth: treeDepth(z.coerce.number()),
        include_archived: QueryBool.default(false),
      }),
      response: { 200: z.object({ space: SpaceSchema, tree: TreeFolderSchema }), ...errors(400, 401, 404) },
    }),
    async (req) => spaceTree(ctx, caller(req), req.params.s, { path: req.query.path, depth: req.query.depth, includeArchived: req.query.include_archived }),
  );
}
