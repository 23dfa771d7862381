import type {
  FastifyBaseLogger,
  FastifyContextConfig,
  FastifyInstance,
  RawReplyDefaultExpression,
  RawRequestDefaultExpression,
  RawServerDefault,
} from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';

/** Schema helpers of the JSON faces (REST and /api/auth); the OpenAPI document is generated from them. */

export const ErrorBody = z
  .object({
    error: z.object({ code: z.string(), message: z.string() }),
    code: z.string(),
  })
  .catchall(z.unknown())
  .describe('Every error: the code is repeated at the top level');

/** The REST face as its route groups see it: zod schemas type each handler's request and reply. */
export type RestApp = FastifyInstance<RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, FastifyBaseLogger, ZodTypeProvider>;

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

/**
 * A route's options: OpenAPI tags and summary first, then the rest of its schema (params, body,
 * response…), and the face config (who may call it) when there is one. Keeps each declaration to
 * what differs from its neighbours; the generated document is the same as spelling it out.
 */
export function route<S extends object>(tags: string[], summary: string | undefined, schema: S, config?: FastifyContextConfig) {
  const head = summary === undefined ? { tags } : { tags, summary };
  return { ...(config === undefined ? {} : { config }), schema: { ...head, ...schema } };
}
