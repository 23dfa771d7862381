import { z } from 'zod';

/** The body of POST /api/v1/lifecycle/run (core/lifecycle.ts runLifecycle). */
export const LifecycleRunBody = z.strictObject({
  mode: z.enum(['dry', 'apply']).describe('dry: list what would be archived, change nothing; apply: archive them (step-up)'),
});
