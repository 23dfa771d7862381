import { z } from 'zod';

/**
 * The inputs and limits of a folder's lifecycle settings (core/folders.ts setFolderLifecycle),
 * for REST `PUT /api/v1/clusters/<space>/<folder>/lifecycle`.
 */

export const LIFECYCLE_LIMITS = {
  /** Whole days; ten years is far beyond any sensible "stale after". */
  minDays: 1,
  maxDays: 3650,
} as const;

const Days = (what: string) =>
  z
    .number()
    .int()
    .min(LIFECYCLE_LIMITS.minDays)
    .max(LIFECYCLE_LIMITS.maxDays)
    .nullable()
    .optional()
    .describe(`${what}: whole days ${LIFECYCLE_LIMITS.minDays}..${LIFECYCLE_LIMITS.maxDays}; null clears it, leaving it out keeps it`);

/** The body: at least one of the two fields; unknown fields are refused. */
export const LifecycleBody = z
  .strictObject({
    auto_archive_days: Days('Pages untouched this long become auto-archive candidates'),
    half_life_days: Days('Search freshness halves over this many days'),
  })
  .refine((b) => b.auto_archive_days !== undefined || b.half_life_days !== undefined, {
    message: 'Nothing to change: send auto_archive_days and/or half_life_days (null clears one)',
  });
