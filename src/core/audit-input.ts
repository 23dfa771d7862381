import { z } from 'zod';

/** The inputs and limits of reading the audit log (src/core/audit.ts), for REST and the command line. */

export const AUDIT_LIMITS = {
  defaultPage: 100,
  maxPage: 500,
  /** Entries read per query while verifying, so a chain of millions is never in memory at once. */
  verifyBatch: 1000,
} as const;

/** An action as written (`page.update`), or a prefix ending in `.` or `.*` (`page.`, `agent.key.*`). */
export const AuditActionFilter = z
  .string()
  .min(1)
  .max(100)
  .regex(/^[a-z0-9_.]+\*?$/, 'an action such as page.update, or a prefix such as page. or page.*')
  .describe('An action (page.update), or every action under a prefix ending in "." or ".*" (page., agent.key.*)');

export const AuditQueryInput = z.object({
  limit: z.coerce.number().int().min(1).max(AUDIT_LIMITS.maxPage).default(AUDIT_LIMITS.defaultPage),
  cursor: z.string().min(1).max(40).optional().describe('next_cursor of the previous answer'),
  principal: z.string().min(1).max(100).optional().describe('Only entries by this principal (id)'),
  action: AuditActionFilter.optional(),
  node: z.string().min(1).max(100).optional().describe('Only entries about this page (id)'),
});
export type AuditQuery = z.infer<typeof AuditQueryInput>;
