import fastifyMultipart from '@fastify/multipart';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { badRequest, ServiceError } from '../../core/errors.js';
import { getImport, IMPORT_LIMITS, ImportJsonBody, ImportParams, ImportQuery, startImport, type ImportUpload } from '../../core/import/index.js';
import { importView } from '../../presenters/import.js';
import { caller } from '../shared/caller.js';
import { errors, route, type RestApp } from '../shared/schemas.js';

const ZIP_TYPES = ['application/zip', 'application/x-zip-compressed'];
const MB = IMPORT_LIMITS.maxUploadBytes / (1024 * 1024);

const ImportView = z.object({
  id: z.string(),
  status: z.enum(['queued', 'running', 'done', 'failed']),
  space: z.string(),
  total: z.number().int().describe('Files to write (after the skipped ones)'),
  done: z.number().int().describe('Files applied so far'),
  created: z.number().int(),
  updated: z.number().int(),
  unchanged: z.number().int(),
  skipped: z.array(z.object({ path: z.string(), reason: z.string() })),
  skipped_count: z.number().int(),
  renamed: z.array(z.object({ path: z.string(), imported_as: z.string() })),
  renamed_count: z.number().int(),
  commits: z.array(z.string()),
  error: z.string().nullable(),
  created_at: z.string(),
  started_at: z.string().nullable(),
  finished_at: z.string().nullable(),
  status_url: z.string(),
});

/** The upload of a multipart request: field `file` (the zip) and field `space`. */
async function multipartUpload(parts: () => AsyncIterableIterator<import('@fastify/multipart').Multipart>): Promise<ImportUpload> {
  let space = '';
  let data: Buffer | null = null;
  try {
    for await (const part of parts()) {
      if (part.type === 'file') {
        if (part.fieldname !== 'file' || data !== null) throw badRequest('Send one file, in the field named file', 'invalid_request');
        data = await part.toBuffer();
      } else if (part.fieldname === 'space') {
        space = String(part.value);
      }
    }
  } catch (e) {
    // The parser's own refusals carry a 4xx status (413 for a file over the limit); a body it
    // cannot read at all (no or wrong boundary, cut short) throws a plain error: the client's.
    if (e instanceof ServiceError || (typeof (e as { statusCode?: unknown }).statusCode === 'number' && (e as { statusCode: number }).statusCode < 500))
      throw e;
    throw badRequest(`The multipart body cannot be read: ${e instanceof Error ? e.message : String(e)}`, 'invalid_request');
  }
  if (data === null) throw badRequest('The multipart upload has no field named file', 'invalid_request');
  return { kind: 'zip', space, data };
}

/**
 * `POST /api/v1/import` in the spec's three forms and `GET /api/v1/import/:id`. The upload's
 * parsers (multipart, raw zip) and its 50 MB limit live in this group's own plugin: every other
 * route keeps the small global body limit and refuses those content types.
 */
export async function importRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  await r.register(async (plugin) => {
    const sub = plugin.withTypeProvider<ZodTypeProvider>();
    await sub.register(fastifyMultipart, {
      limits: { fileSize: IMPORT_LIMITS.maxUploadBytes, files: 1, fields: 4, fieldSize: 1024, parts: 5 },
      throwFileSizeLimit: true,
    });
    sub.addContentTypeParser(ZIP_TYPES, { parseAs: 'buffer', bodyLimit: IMPORT_LIMITS.maxUploadBytes }, (_req, body, done) => done(null, body));
    sub.post(
      '/import',
      {
        bodyLimit: IMPORT_LIMITS.maxUploadBytes,
        ...route(
          ['operations'],
          `Import markdown: multipart (field file: a zip, field space), raw application/zip with ?space=, or JSON {space, files: [{path, content}]}; at most ${MB} MB, 5 per hour`,
          {
            querystring: ImportQuery,
            response: {
              200: ImportView.describe('Finished (imports of at most one batch)'),
              202: ImportView.describe('Accepted; runs in the background: poll status_url'),
              ...errors(400, 401, 403, 413, 415, 429),
            },
          },
        ),
      },
      async (req, reply) => {
        const p = caller(req);
        const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
        let upload: ImportUpload;
        if (req.isMultipart()) {
          upload = await multipartUpload(() => req.parts());
        } else if (ZIP_TYPES.includes(type)) {
          upload = { kind: 'zip', space: req.query.space ?? '', data: req.body as Buffer };
        } else {
          const body = ImportJsonBody.safeParse(req.body);
          if (!body.success)
            throw badRequest(`body: ${body.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`, 'invalid_request');
          upload = { kind: 'files', space: body.data.space, files: body.data.files };
        }
        const { job, finished } = await startImport(ctx, p, upload);
        return reply.code(finished ? 200 : 202).send(importView(job));
      },
    );
  });

  r.get(
    '/import/:id',
    route(['operations'], "An import's progress, and its report once done (the importer or an owner)", {
      params: ImportParams,
      response: { 200: ImportView, ...errors(401, 404) },
    }),
    async (req) => importView(await getImport(ctx, caller(req), req.params.id)),
  );
}
