import type { Principal } from '../../policy/principal.js';
import type { CoreContext } from '../context.js';
import { badRequest } from '../errors.js';
import { checkUnifiedPatch, type EditMode } from './edit-apply.js';
import { updateOrProposePage, updatePage, type Precondition, type UpdateResult } from './update.js';
import type { Proposed } from './write.js';

export type { EditMode } from './edit-apply.js';

function check(mode: EditMode): void {
  if (mode.kind === 'patch') checkUnifiedPatch(mode.patch);
  else if (mode.text.trim() === '' && mode.kind === 'append') throw badRequest('The text to append is blank');
}

/**
 * An edit in place (append, replace a section, apply a diff) through the one write path
 * (update.ts): with a precondition (base_sha) naming an older version, the edit is made on that
 * version and merged three-way with what changed since, or kept as a proposal on a conflict
 * (409 conflict carrying it), exactly as a full write. A caller without write is refused (MCP:
 * "use context_propose").
 */
export async function editPage(ctx: CoreContext, p: Principal, ref: string, mode: EditMode, pre: Precondition, message?: string): Promise<UpdateResult> {
  check(mode);
  return updatePage(ctx, p, ref, { kind: 'edit', mode }, pre, message);
}

/** As editPage over REST: an agent without write but with propose proposes the edited page (202). */
export async function editOrProposePage(
  ctx: CoreContext,
  p: Principal,
  ref: string,
  mode: EditMode,
  pre: Precondition,
  message?: string,
): Promise<UpdateResult | Proposed> {
  check(mode);
  return updateOrProposePage(ctx, p, ref, { kind: 'edit', mode }, pre, message);
}
