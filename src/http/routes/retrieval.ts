import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { pageBacklinks, relatedPages } from '../../retrieval/related.js';
import { readBundle } from '../../core/bundle-read.js';
import { budgetTokens, bundleOptions, IntentText, type BundleParams } from '../../retrieval/bundle-input.js';
import { SEARCH_MODES, searchPages } from '../../retrieval/search.js';
import { AtCommit, QueryText, SCOPE_MAX_CHARS, SEARCH_MAX_TAGS, searchLimit } from '../../retrieval/search-input.js';
import { caller } from '../shared/caller.js';
import { PageRefParams, QueryBool } from '../schemas.js';
import { errors, route, type RestApp } from '../shared/schemas.js';

/** Filter values are compared with stored paths and tags; control characters never match one (and PostgreSQL refuses NUL). */
const NoControl = /^[^\u0000-\u001f\u007f]*$/;
const FilterText = (max: number) => z.string().max(max).regex(NoControl, 'must not contain control characters');

const Entry = z.object({ id: z.string(), path: z.string(), title: z.string(), state: z.string(), why: z.string() });

/** `tags=a,b` or `tags=a&tags=b`: every tag given must be on the page. */
const Tags = z.union([FilterText(2000), z.array(FilterText(2000)).max(SEARCH_MAX_TAGS)]).transform((v) =>
  [v]
    .flat()
    .flatMap((s) => s.split(','))
    .map((s) => s.trim())
    .filter((s) => s !== ''),
);

const BundleParams = {
  intent: IntentText.describe('What the context is for; ranks the sections'),
  scope: FilterText(SCOPE_MAX_CHARS).optional().describe('A Space, or space/folder'),
  at: AtCommit.optional().describe('Answer from the workspace as it was at this commit (sha or unique prefix)'),
};
const BundleBody = z
  .object({
    ...BundleParams,
    budget_tokens: budgetTokens(z.number()),
    include_links: z.boolean().default(false),
    include_archived: z.boolean().default(false),
  })
  .strict();
const BundleQuery = z.object({
  ...BundleParams,
  budget_tokens: budgetTokens(z.coerce.number()),
  include_links: QueryBool.default(false),
  include_archived: QueryBool.default(false),
});

const BundleResponse = z.object({
  intent: z.string(),
  budget_tokens: z.number(),
  used_tokens: z.number().describe('Tokens of `markdown`, never above budget_tokens'),
  tokenizer: z.string(),
  at: z.string().nullable().describe('The commit answered from, in full (pass it as `at` to replay); null before the first commit'),
  sections: z.array(
    z.object({
      id: z.string(),
      path: z.string(),
      title: z.string(),
      heading: z.string(),
      commit_sha: z.string(),
      state: z.string(),
      tokens: z.number(),
      score: z.number(),
      via: z.enum(['rank', 'link']),
      truncated: z.boolean(),
      text: z.string(),
    }),
  ),
  markdown: z.string(),
});

/** POST and GET /bundle answer alike. */
const BundleAnswers = { 200: BundleResponse, ...errors(400, 401, 403, 404, 429) };

/** `Accept: text/markdown` (preferred over JSON) asks for the bundle's markdown alone. */
function wantsMarkdown(accept: string | undefined): boolean {
  if (!accept) return false;
  const md = /text\/markdown/i.test(accept);
  const json = /application\/json/i.test(accept);
  if (!md) return false;
  if (!json) return true;
  return accept.toLowerCase().indexOf('text/markdown') < accept.toLowerCase().indexOf('application/json');
}

export async function retrievalRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  /** One handler for both forms: the parameters come from the body (POST) or the query (GET). */
  const answerBundle = async (params: BundleParams, req: FastifyRequest, reply: FastifyReply) => {
    const b = await readBundle(ctx, caller(req), bundleOptions(params));
    if (wantsMarkdown(req.headers.accept))
      return reply
        .type('text/markdown; charset=utf-8')
        .serializer((x: unknown) => String(x))
        .send(b.markdown);
    return b;
  };

  r.post(
    '/bundle',
    route(
      ['retrieval'],
      'Context bundle: ranked, deduplicated sections packed to budget_tokens (o200k tokens), each with its source; Accept: text/markdown for the markdown alone',
      {
        body: BundleBody,
        response: BundleAnswers,
      },
    ),
    async (req, reply) => answerBundle(req.body, req, reply),
  );

  r.get(
    '/bundle',
    route(['retrieval'], 'The context bundle with its parameters in the query string', {
      querystring: BundleQuery,
      response: BundleAnswers,
    }),
    async (req, reply) => answerBundle(req.query, req, reply),
  );

  r.get(
    '/search',
    route(['retrieval'], 'Search pages: one result per page with its best section as snippet; filters are exact', {
      querystring: z.object({
        q: QueryText.default('').describe('Words to look for; quotes and operators are read as plain words'),
        space: FilterText(100).optional(),
        cluster: FilterText(SCOPE_MAX_CHARS).optional().describe('A folder path; pages in it and in its sub-folders'),
        tags: Tags.optional(),
        mode: z
          .enum(SEARCH_MODES)
          .default('hybrid')
          .describe('hybrid (default): keyword and vector rankings fused; fts: keyword only; vector: embeddings only'),
        limit: searchLimit(z.coerce.number()),
        include_archived: QueryBool.default(false),
        at: AtCommit.optional().describe('Answer from the workspace as it was at this commit (sha or unique prefix)'),
      }),
      response: {
        200: z.object({
          mode: z.enum(SEARCH_MODES),
          mode_used: z.enum(SEARCH_MODES).describe('The ranking used: vector modes fall back to fts while embeddings are unavailable (note says why)'),
          note: z.string().optional(),
          at: z.string().optional().describe('The commit answered from, in full, when `at` was given'),
          results: z.array(
            z.object({
              id: z.string(),
              path: z.string(),
              title: z.string(),
              space: z.string(),
              cluster_path: z.string(),
              tags: z.array(z.string()),
              state: z.string(),
              score: z.number(),
              section: z.string().describe("The best section's heading"),
              snippet: z.string(),
            }),
          ),
        }),
        ...errors(400, 401, 403, 404),
      },
    }),
    async (req) => {
      const q = req.query;
      return searchPages(ctx, caller(req), {
        q: q.q,
        space: q.space,
        folder: q.cluster,
        tags: q.tags,
        mode: q.mode,
        limit: q.limit,
        includeArchived: q.include_archived,
        at: q.at,
      });
    },
  );

  r.get(
    '/nodes/:id/backlinks',
    route(['pages'], 'Pages linking to this one ([[wiki]] and relative markdown links), those you may read', {
      params: PageRefParams,
      response: { 200: z.object({ id: z.string(), path: z.string(), backlinks: z.array(Entry) }), ...errors(400, 401, 404) },
    }),
    async (req) => pageBacklinks(ctx, caller(req), req.params.id),
  );

  r.get(
    '/nodes/:id/related',
    route(['pages'], 'Links, backlinks, folder neighbours and pages sharing tags, each with why', {
      params: PageRefParams,
      response: {
        200: z.object({
          id: z.string(),
          path: z.string(),
          links: z.array(Entry),
          backlinks: z.array(Entry),
          neighbours: z.array(Entry),
          shared_tags: z.array(Entry),
        }),
        ...errors(400, 401, 404),
      },
    }),
    async (req) => relatedPages(ctx, caller(req), req.params.id),
  );
}
