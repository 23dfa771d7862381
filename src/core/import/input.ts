import { z } from 'zod';
import { PATH_LIMITS } from '../paths.js';
import { IMPORT_LIMITS } from './limits.js';

/** `POST /api/v1/import` as JSON: `{space, files: [{path, content}]}` (paths relative to the Space). */
export const ImportJsonBody = z.strictObject({
  space: z.string().min(1).max(PATH_LIMITS.maxSegment).describe('The Space to import into (created when missing)'),
  files: z
    .array(
      z.strictObject({
        path: z.string().min(1).max(PATH_LIMITS.maxLength).describe('Path inside the Space, e.g. guides/setup.md'),
        content: z.string().describe('The markdown, frontmatter included'),
      }),
    )
    .max(IMPORT_LIMITS.maxEntries)
    .describe(`At most ${IMPORT_LIMITS.maxEntries} files`),
});

/** The Space of a raw zip upload, in the query. */
export const ImportQuery = z.strictObject({
  space: z.string().min(1).max(PATH_LIMITS.maxSegment).optional().describe('The Space to import into (raw application/zip uploads)'),
});

export const ImportParams = z.strictObject({ id: z.string().min(1).max(100) });
