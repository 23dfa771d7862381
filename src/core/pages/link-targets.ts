import { blockVisibility, canReadPage } from '../../policy/pages.js';
import type { Principal } from '../../policy/principal.js';
import { isLevel } from '../../policy/sensitivity.js';
import type { CoreContext } from '../context.js';

/** A link of a page, resolved to the page it reaches (one the caller may read). */
export interface LinkTarget {
  kind: 'wiki' | 'markdown';
  /** The link as stored (core/pages/record.ts `links[].target`): `[[Target]]`'s text, or the decoded `.md` href. */
  target: string;
  id: string;
  path: string;
  title: string;
  state: string;
}

/**
 * Where the links of a page lead, for a caller who may read the page (the record came from
 * `readPage`, so that was checked): the stored resolution of each link (`page_links.target_id`,
 * kept up to date by the indexer), limited to links the caller sees (not inside a block above
 * their ceiling) that reach a live page they may read. A link to a page they cannot see is
 * left out, exactly like a link to no page: its existence is not told. Used by the web face to
 * turn `[[wiki links]]` and relative `.md` links into page URLs.
 */
export async function readableLinkTargets(ctx: CoreContext, p: Principal, page: { id: string; path: string }): Promise<LinkTarget[]> {
  const rows = await ctx.store.db
    .selectFrom('page_links')
    .innerJoin('pages', 'pages.id', 'page_links.target_id')
    .select([
      'page_links.target',
      'page_links.kind',
      'page_links.block_level as link_level',
      'pages.id',
      'pages.path',
      'pages.title',
      'pages.state',
      'pages.sensitivity',
      'pages.block_level',
    ])
    .where('page_links.workspace_id', '=', p.workspaceId)
    .where('page_links.source_id', '=', page.id)
    .where('pages.workspace_id', '=', p.workspaceId)
    .where('pages.deleted_at', 'is', null)
    .orderBy('page_links.ord')
    .execute();
  const sees = blockVisibility(p, page.path);
  const out: LinkTarget[] = [];
  for (const r of rows) {
    if (r.link_level !== null && !(isLevel(r.link_level) && sees(r.link_level))) continue;
    if (!canReadPage(p, { path: r.path, sensitivity: r.sensitivity, blockLevel: r.block_level })) continue;
    out.push({ kind: r.kind, target: r.target, id: r.id, path: r.path, title: r.title, state: r.state });
  }
  return out;
}
