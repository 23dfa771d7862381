import { enforce } from '../../policy/pages.js';
import type { Principal } from '../../policy/principal.js';
import { decidePropose } from '../../policy/proposals.js';
import { findReadablePage } from '../../retrieval/lookup.js';
import { inTransaction } from '../../store/tx.js';
import type { CoreContext } from '../context.js';
import { conflict, forbidden } from '../errors.js';
import { analyzeContent } from '../pages/content.js';
import { applyUnifiedPatch, checkUnifiedPatch } from '../pages/edit-apply.js';
import { invalidBase, readableBase } from '../pages/base.js';
import { facts } from '../pages/persist.js';
import { presentPage } from '../pages/record.js';
import { parsePagePath } from '../paths.js';
import { highest, insertProposal, presentProposal, type ProposalRecord } from './record.js';

export { MAX_PATCH_CHARS } from '../pages/edit-apply.js';

/**
 * A proposal given as a unified diff (MCP context_propose with `patch`), applied in the same
 * transaction that records the proposal: to the version the proposer read (`baseSha`, which
 * must be one they may read in full, else 400 invalid_base) or, without it, to the current
 * content; that version is the proposal's base, and accepting merges from it. A page holding
 * blocks above the caller's ceiling cannot be patched (the caller never saw that text). Text
 * that is not a unified diff (no hunk at all) is refused, and so is a patch that changes nothing.
 */
export async function createPatchProposal(
  ctx: CoreContext,
  p: Principal,
  input: { ref: string; patch: string; reason?: string | undefined; baseSha?: string | undefined },
): Promise<ProposalRecord> {
  checkUnifiedPatch(input.patch);
  const row = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const page = await findReadablePage(trx, p, input.ref);
    if (presentPage(p, page).redacted) {
      throw forbidden('The page holds content above your ceiling; a patch cannot apply to text you cannot see');
    }
    let base = { blobSha: page.content_hash, commitSha: page.commit_sha, content: page.content };
    if (input.baseSha !== undefined) {
      const read = await readableBase(trx, p, page, input.baseSha);
      if (!read) throw invalidBase(input.baseSha);
      base = read;
    }
    const patched = applyUnifiedPatch(base.content, input.patch);
    if (patched === false) {
      throw conflict(`The patch does not apply to ${page.path} at commit ${base.commitSha}; read it again`, 'patch_does_not_apply');
    }
    if (patched === base.content || patched === page.content) {
      throw conflict(`The patch changes nothing in ${page.path}; nothing to review`, 'no_change');
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
      baseHash: base.blobSha,
      baseCommit: base.commitSha,
      reason: input.reason ?? '',
      sensitivity: highest(page.sensitivity, page.block_level, content.sensitivity, content.blockLevel),
    });
  });
  return presentProposal(p, row);
}
