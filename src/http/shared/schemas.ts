import { z } from 'zod';

/** Schema helpers of the JSON faces (REST and /api/auth); the OpenAPI document is generated from them. */

export const ErrorBody = z
  .object({
    error: z.object({ code: z.string(), message: z.string() }),
    code: z.string(),
  })
  .catchall(z.unknown())
  .describe('Every error: the code is repeated at the top level');

/** Errors a route may answer, for the OpenAPI document. */
export function errors(...statuses: number[]): Record<number, typeof ErrorBody> {
  const out: Record<number, typeof ErrorBody> = {};
  for (const s of statuses) out[s] = ErrorBody;
  return out;
}

/** A body that may be left out entirely (no content): it is then read as `{}`. */
export function optionalBody<T extends z.ZodType>(schema: T) {
  return z.preprocess((v) => v ?? {}, schema);
}
