import { applyPatch } from 'diff';
import { enforce } from '../../policy/pages.js';
import type { Principal } from '../../policy/principal.js';
import { decidePropose } from '../../policy/proposals.js';
import { inTransaction } from '../../store/tx.js';
import type { CoreContext } from '../context.js';
import { badRequest, conflict, forbidden } from '../errors.js';
import { analyzeContent } from '../pages/content.js';
import { findReadablePage } from '../pages/lookup.js';
import { facts } from '../pages/persist.js';
import { presentPage } from '../pages/record.js';
import { parsePagePath } from '../paths.js';
import { highest, insertProposal, presentProposal, type ProposalRecord } from './record.js';

/** Longest accepted patch text. */
export const MAX_PATCH_CHARS = 1024 * 1024;

/**
 * A proposal given as a unified diff against the page's current content (MCP
 * context_propose with `patch`): the patch is applied in the same transaction that records
 * the proposal, so its base is exactly the content it was applied to. A page holding blocks
 * above the caller's ceiling cannot be patched (the caller never saw that text).
 */
export async function createPatchProposal(
  ctx: CoreContext,
  p: Principal,
  input: { ref: string; patch: string; reason?: string | undefined },
): Promise<ProposalRecord> {
  if (input.patch.length > MAX_PATCH_CHARS) throw badRequest(`A patch holds at most ${MAX_PATCH_CHARS} characters`, 'invalid_patch');
  const row = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const page = await findReadablePage(trx, p, input.ref);
    if (presentPage(p, page).redacted) {
      throw forbidden('The page holds content above your ceiling; a patch cannot apply to text you cannot see');
    }
    let patched: string | false;
    try {
      patched = applyPatch(page.content, input.patch);
    } catch (e) {
      throw badRequest(`The patch is not a unified diff of one file: ${e instanceof Error ? e.message : String(e)}`, 'invalid_patch');
    }
    if (patched === false) {
      throw conflict(`The patch does not apply to the current content of ${page.path} (commit ${page.commit_sha}); read it again`, 'patch_does_not_apply');
    }
    const target = parsePagePath(page.path);
    const content = analyzeContent(patched, target.slug);
    enforce(decidePropose(p, facts(target.path, content)));
    return insertProposal(ctx, trx, p, {
      kind: 'edit',
      origin: 'propose',
      pageId: page.id,
      path: page.path,
      content: patched,
      baseHash: page.content_hash,
      baseCommit: page.commit_sha,
      reason: input.reason ?? '',
      sensitivity: highest(page.sensitivity, page.block_level, content.sensitivity, content.blockLevel),
    });
  });
  return presentProposal(p, row);
}
