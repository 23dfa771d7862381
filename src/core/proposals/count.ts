import { canReadPage } from '../../policy/pages.js';
import { canSeeProposal } from '../../policy/proposals.js';
import type { Principal } from '../../policy/principal.js';
import type { CoreContext } from '../context.js';
import { proposalFacts } from './record.js';

/** Open proposals looked at, at most, for the navigation's count (the count then reads "n+"). */
export const OPEN_COUNT_CAP = 500;

/**
 * How many open proposals the caller can see (the web app's "Review (n)"): the same visibility
 * as `listProposals` (the proposal's own path and level, and its page as it is now), read from
 * the few columns it needs rather than the proposals' content. `capped` when there are more
 * than OPEN_COUNT_CAP open proposals in the workspace.
 */
export async function countOpenProposals(ctx: CoreContext, p: Principal): Promise<{ count: number; capped: boolean }> {
  const db = ctx.store.db;
  const rows = await db
    .selectFrom('proposals')
    .select(['id', 'path', 'sensitivity', 'origin', 'proposer_id', 'page_id'])
    .where('workspace_id', '=', p.workspaceId)
    .where('status', '=', 'open')
    .orderBy('created_at', 'desc')
    .limit(OPEN_COUNT_CAP + 1)
    .execute();
  const capped = rows.length > OPEN_COUNT_CAP;
  const seen = rows.slice(0, OPEN_COUNT_CAP).filter((r) => canSeeProposal(p, proposalFacts(r)));
  const pageIds = [...new Set(seen.map((r) => r.page_id).filter((x): x is string => x !== null))];
  const readable = new Set<string>();
  for (let i = 0; i < pageIds.length; i += 500) {
    const pages = await db
      .selectFrom('pages')
      .select(['id', 'path', 'sensitivity', 'block_level'])
      .where('workspace_id', '=', p.workspaceId)
      .where('id', 'in', pageIds.slice(i, i + 500))
      .execute();
    for (const pg of pages) if (canReadPage(p, { path: pg.path, sensitivity: pg.sensitivity, blockLevel: pg.block_level })) readable.add(pg.id);
  }
  return { count: seen.filter((r) => r.page_id === null || readable.has(r.page_id)).length, capped };
}
