import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { badRequest, notFound } from '../../core/errors.js';
import { LifecycleBody } from '../../core/folder-input.js';
import { changeFolderState, setFolderLifecycle } from '../../core/folders.js';
import { ARCHIVE_REASONS } from '../../core/pages/content.js';
import { CommitMessage, PATH_MAX_CHARS } from '../../core/pages/input.js';
import { caller } from '../shared/caller.js';
import { ProposalSchema } from '../schemas.js';
import { errors, optionalBody, route, type RestApp } from '../shared/schemas.js';

/**
 * Folders (spec §4 "Spaces and folders"): `POST /clusters/<space>/<folder…>/archive|restore`
 * and `PUT /clusters/<space>/<folder…>/lifecycle`. A folder path has any depth, so each method
 * is one wildcard route whose last segment names the act; anything else under it is 404.
 */

const Wildcard = z.object({
  '*': z
    .string()
    .min(1)
    .max(PATH_MAX_CHARS + 20)
    .describe('<space>/<folder…>/<act>'),
});

const FolderChangeSchema = z.object({
  cluster_path: z.string(),
  commit_sha: z.string().nullable().describe('The one commit holding every page that changed; null when all became proposals'),
  pages: z.array(z.object({ id: z.string(), path: z.string(), commit_sha: z.string() })),
  proposals: z.array(ProposalSchema).describe('Pages you may not archive became archive proposals'),
  archived: z.boolean().describe("The folder's own flag after the change"),
});

const FolderSettingsSchema = z.object({
  path: z.string(),
  summary: z.string(),
  auto_archive_days: z.number().nullable(),
  half_life_days: z.number().nullable(),
  archived: z.boolean(),
});

/** Splits `<folder…>/<act>`; an act other than the route's is an unknown URL. */
function folderAct<A extends string>(method: string, raw: string, acts: readonly A[]): { folder: string; act: A } {
  const cut = raw.lastIndexOf('/');
  const act = raw.slice(cut + 1) as A;
  if (cut <= 0 || !acts.includes(act)) throw notFound(`No route ${method} /api/v1/clusters/${raw}: use <space>/<folder>/${acts.join(' or ')}`);
  return { folder: raw.slice(0, cut), act };
}

export async function folderRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  const tags = ['spaces'];

  r.post(
    '/clusters/*',
    route(
      tags,
      'Archive (…/archive; humans need a step-up) or restore (…/restore) every page of a folder and its sub-folders as one commit; without write, pages become archive proposals (202)',
      {
        params: Wildcard,
        body: optionalBody(
          z.strictObject({
            reason: z.enum(ARCHIVE_REASONS).optional().describe('Archive only; default manual'),
            message: CommitMessage,
          }),
        ),
        response: { 200: FolderChangeSchema, 202: FolderChangeSchema.extend({ proposed: z.literal(true) }), ...errors(400, 401, 403, 404, 409) },
      },
    ),
    async (req, reply) => {
      const { folder, act } = folderAct('POST', req.params['*'], ['archive', 'restore'] as const);
      if (act === 'restore' && req.body.reason !== undefined) throw badRequest('A restore takes no reason', 'invalid_request');
      const result = await changeFolderState(ctx, caller(req), folder, act, req.body.reason, req.body.message);
      // Nothing landed and something was proposed: the request as a whole became proposals.
      if (result.pages.length === 0 && result.proposals.length > 0) return reply.code(202).send({ proposed: true as const, ...result });
      return reply.send(result);
    },
  );

  r.put(
    '/clusters/*',
    route(tags, "Set a folder's lifecycle settings (…/lifecycle, admin): auto_archive_days and half_life_days, null clears one", {
      params: Wildcard,
      body: LifecycleBody,
      response: { 200: FolderSettingsSchema, ...errors(400, 401, 403, 404) },
    }),
    async (req) => {
      const { folder } = folderAct('PUT', req.params['*'], ['lifecycle'] as const);
      return setFolderLifecycle(ctx, caller(req), folder, req.body);
    },
  );
}
