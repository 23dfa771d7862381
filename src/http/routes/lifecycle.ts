import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { lifecycleReport, runLifecycle } from '../../core/lifecycle.js';
import { LifecycleRunBody } from '../../core/lifecycle-input.js';
import { Timestamp } from '../schemas.js';
import { caller } from '../shared/caller.js';
import { errors, route, type RestApp } from '../shared/schemas.js';

const CandidateSchema = z.object({
  id: z.string(),
  path: z.string(),
  title: z.string(),
  why: z.object({
    last_touched_at: Timestamp.nullable().describe('Last recorded read; null when never read since written'),
    updated_at: Timestamp,
    age_days: z.number().describe('Days since the later of the last read and the last write'),
    folder: z.string().describe('The folder whose auto_archive_days applies (the nearest up the path that sets one)'),
    auto_archive_days: z.number().int(),
    half_life_days: z.number().int().nullable(),
    half_life_score: z.number().nullable().describe('0.5^(age_days / half_life_days); null without a half-life'),
  }),
});

const RunSummarySchema = z.object({
  at: Timestamp,
  trigger: z.enum(['scheduled', 'manual']),
  mode: z.enum(['dry', 'apply']),
  archived: z.number().int(),
  commit_sha: z.string().nullable(),
  digest_event: z.object({ seq: z.number().int() }).optional().describe('Your lifecycle_digest inbox event of that run'),
});

/** The lifecycle job (spec §4 Operations): its report and a run by hand. */
export async function lifecycleRoutes(r: RestApp, ctx: CoreContext): Promise<void> {
  const tags = ['operations'];

  r.get(
    '/lifecycle/candidates',
    route(tags, 'Auto-archive candidates you may read (oldest first, with why), the scheduled mode, the next run and the last run', {
      response: {
        200: z.object({
          mode: z.enum(['off', 'dry', 'apply']).describe('LIFECYCLE_MODE of scheduled runs'),
          next_run_at: Timestamp.nullable().describe('null when scheduled runs are off'),
          last_run: RunSummarySchema.nullable(),
          candidates: z.array(CandidateSchema),
          total: z.number().int(),
        }),
        ...errors(401),
      },
    }),
    async (req) => lifecycleReport(ctx, caller(req)),
  );

  r.post(
    '/lifecycle/run',
    route(
      tags,
      'Owner: run the lifecycle job now; dry lists what would be archived, apply (step-up) archives it with reason stale in one commit and sends the owners a digest',
      {
        body: LifecycleRunBody,
        response: {
          200: z.object({
            mode: z.enum(['dry', 'apply']),
            pages: z.array(CandidateSchema),
            archived: z.number().int(),
            commit_sha: z.string().nullable(),
            remaining: z.number().int().describe('Candidates left for a later run'),
          }),
          ...errors(400, 401, 403),
        },
      },
      { auth: 'session' },
    ),
    async (req) => runLifecycle(ctx, caller(req), req.body.mode),
  );
}
