import type { FastifyReply } from 'fastify';
import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { serializerCompiler } from 'fastify-type-provider-zod';
import { keptRecord, pageDiff, pageHistory, readPage } from '../../core/pages/read.js';
import type { PageRecord } from '../../core/pages/record.js';
import {
  archivePage,
  createOrProposePage,
  deletePage,
  movePage,
  restorePage,
  updateOrProposePage,
  type PageUpdate,
  type PublicOutcome,
} from '../../core/pages/write.js';
import { ArchiveReasonInput, BODY_PATH_MAX_CHARS, CommitMessage, PATH_MAX_CHARS, SECTION_MAX_CHARS, Sha, Title } from '../../core/pages/input.js';
import { proposedView } from '../../presenters/proposals.js';
import { writeResultView } from '../../presenters/pages.js';
import { caller } from '../shared/caller.js';
import { touchedJson } from '../shared/touched-json.js';
import { PageRefParams, ProposedSchema, PageRecordSchema, WriteResultSchema, Timestamp } from '../schemas.js';
import { errors, optionalBody, route, type RestApp } from '../shared/schemas.js';

const Frontmatter = z.record(z.string(), z.unknown());

const CreateBody = z.union([
  z.strictObject({ path: z.string().max(BODY_PATH_MAX_CHARS), content: z.string(), message: CommitMessage }),
  z.strictObject({
    space: z.string().min(1).max(100),
    cluster_path: z.string().max(PATH_MAX_CHARS).optional(),
    title: Title,
    body: z.string(),
    frontmatter: Frontmatter.optional(),
    message: CommitMessage,
  }),
]);

const UpdateBody = z
  .strictObject({
    content: z.string().optional(),
    title: Title.optional(),
    body: z.string().optional(),
    frontmatter: Frontmatter.optional(),
    base_sha: Sha.optional().describe('The content_hash or commit_sha you read'),
    message: CommitMessage,
  })
  .refine((b) => b.content === undefined || (b.title === undefined && b.body === undefined && b.frontmatter === undefined), {
    message: 'Send either content, or title/body/frontmatter, not both',
  })
  .refine((b) => b.content !== undefined || b.title !== undefined || b.body !== undefined || b.frontmatter !== undefined, {
    message: 'Nothing to change: send content, or title/body/frontmatter',
  });

/** A change that landed answers the record (200); one that became a proposal answers 202. */
function sendOutcome(reply: FastifyReply, o: PublicOutcome): FastifyReply {
  if (o.record) return withEtag(reply, o.record).send(o.record);
  return reply.code(202).send(proposedView(o.proposal));
}

function withEtag(reply: FastifyReply, record: PageRecord): FastifyReply {
  return reply.header('ETag', `"${record.content_hash}"`);
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.join(',') : v;
}

/** The JSON of a page record exactly as the routes answering PageRecordSchema write it. */
const serializeRecord = serializerCompiler({ schema: PageRecordSchema, method: 'GET', url: '/api/v1/nodes/:id', httpStatus: '200' }) as (
  r: PageRecord,
) => string;

export async function nodeRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  const tags = ['pages'];

  r.post(
    '/nodes',
    route(tags, 'Create a page from {path, content} or {space, cluster_path, title, body, frontmatter}', {
      body: CreateBody,
      response: { 201: PageRecordSchema, 202: ProposedSchema, ...errors(400, 401, 403, 409, 413) },
    }),
    async (req, reply) => {
      const { message, ...input } = req.body;
      const o = await createOrProposePage(ctx, caller(req), input, message);
      if ('proposal' in o) return sendOutcome(reply, o);
      return withEtag(reply.code(201), o.record).send(o.record);
    },
  );

  r.get(
    '/nodes/:id',
    route(
      tags,
      'Read a page by id or path, redacted to your ceiling; counts as a read',
      {
        params: PageRefParams,
        querystring: z.object({
          format: z.enum(['json', 'md']).default('json'),
          at: Sha.optional().describe('Read the version in force at this commit'),
          section: z.string().max(SECTION_MAX_CHARS).optional().describe('Heading text: return that section too'),
        }),
        response: { 200: PageRecordSchema, ...errors(400, 401, 404) },
      },
      { prefetch: 'page' },
    ),
    async (req, reply) => {
      const record = await readPage(ctx, caller(req), req.params.id, { at: req.query.at, section: req.query.section, prefetched: req.prefetchedPage });
      withEtag(reply, record);
      const raw = reply as FastifyReply;
      if (req.query.format === 'md') {
        // Raw markdown bypasses the JSON serializer on purpose.
        return raw
          .type('text/markdown; charset=utf-8')
          .serializer((x: unknown) => String(x))
          .send(record.section ?? record.content);
      }
      // A read served from what was kept since the last commit: its JSON too (touched-json.ts),
      // made by the route's own serializer.
      const kept = keptRecord(record);
      if (!kept) return record;
      return raw
        .type('application/json; charset=utf-8')
        .serializer((x: unknown) => String(x))
        .send(touchedJson(record, kept, serializeRecord));
    },
  );

  const update = (method: 'put' | 'patch') =>
    r[method](
      '/nodes/:id',
      route(
        tags,
        method === 'put'
          ? 'Replace a page; If-Match or base_sha make it conditional, without them last writer wins'
          : 'Change part of a page (frontmatter keys merge; null removes a key); same conditions as PUT',
        {
          params: PageRefParams,
          headers: z.object({ 'if-match': z.string().max(200).optional() }),
          body: UpdateBody,
          response: { 200: WriteResultSchema, 202: ProposedSchema, ...errors(400, 401, 403, 404, 409, 413) },
        },
      ),
      async (req, reply) => {
        const b = req.body;
        const change: PageUpdate =
          b.content !== undefined
            ? { kind: 'replace', content: b.content }
            : { kind: 'fields', title: b.title, body: b.body, frontmatter: b.frontmatter, mergeFrontmatter: method === 'patch' };
        const pre = { ifMatch: headerValue(req.headers['if-match']), baseSha: b.base_sha };
        const o = await updateOrProposePage(ctx, caller(req), req.params.id, change, pre, b.message);
        if ('proposal' in o) return sendOutcome(reply, o);
        return withEtag(reply, o.record).send(writeResultView(o));
      },
    );
  update('put');
  update('patch');

  r.delete(
    '/nodes/:id',
    route(tags, 'Delete a page as a commit; history keeps it (human owner, or agent with admin)', {
      params: PageRefParams,
      response: { 200: z.object({ deleted: z.literal(true), id: z.string(), path: z.string(), commit_sha: z.string() }), ...errors(401, 403, 404) },
    }),
    async (req) => ({ deleted: true as const, ...(await deletePage(ctx, caller(req), req.params.id)) }),
  );

  r.get(
    '/nodes/:id/history',
    route(tags, 'Versions of a page, newest first', {
      params: PageRefParams,
      querystring: z.object({ limit: z.coerce.number().int().min(1).max(200).default(50), before: Sha.optional() }),
      response: {
        200: z.object({
          id: z.string(),
          versions: z.array(
            z.object({
              commit_sha: z.string(),
              action: z.string(),
              path: z.string(),
              content_hash: z.string().nullable(),
              message: z.string(),
              principal_id: z.string(),
              created_at: Timestamp,
            }),
          ),
          next_before: z.string().nullable().describe('Pass as before= for the next page'),
        }),
        ...errors(400, 401, 404),
      },
    }),
    async (req) => pageHistory(ctx, caller(req), req.params.id, req.query),
  );

  r.get(
    '/nodes/:id/diff',
    route(tags, 'Unified diff between two versions (secret-level read)', {
      params: PageRefParams,
      querystring: z.object({ from: Sha.optional(), to: Sha.optional() }),
      response: {
        200: z.object({ id: z.string(), from: z.string().nullable(), to: z.string(), diff: z.string(), from_content: z.string(), to_content: z.string() }),
        ...errors(400, 401, 403, 404),
      },
    }),
    async (req) => pageDiff(ctx, caller(req), req.params.id, req.query),
  );

  /** Move, archive and restore: a page named in the URL, a small body, and the record or (202) a proposal. */
  const change = <B extends z.ZodType>(summary: string, body: B) =>
    route(tags, summary, { params: PageRefParams, body, response: { 200: PageRecordSchema, 202: ProposedSchema, ...errors(400, 401, 403, 404, 409) } });

  r.post(
    '/nodes/:id/move',
    change('Move a page to a new path (its id stays)', z.strictObject({ to: z.string().max(BODY_PATH_MAX_CHARS), message: CommitMessage })),
    async (req, reply) => sendOutcome(reply, await movePage(ctx, caller(req), req.params.id, req.body.to, req.body.message)),
  );

  r.post(
    '/nodes/:id/archive',
    change('Archive a page (reason closed, stale, superseded or manual)', optionalBody(z.strictObject({ reason: ArchiveReasonInput, message: CommitMessage }))),
    async (req, reply) => sendOutcome(reply, await archivePage(ctx, caller(req), req.params.id, req.body.reason, req.body.message)),
  );

  r.post('/nodes/:id/restore', change('Return an archived page to active', optionalBody(z.strictObject({ message: CommitMessage }))), async (req, reply) =>
    sendOutcome(reply, await restorePage(ctx, caller(req), req.params.id, req.body.message, { allowPropose: true })),
  );
}
