import { blockVisibility, canReadPage } from '../policy/pages.js';
import { isLevel } from '../policy/sensitivity.js';
import type { Principal } from '../policy/principal.js';
import type { PagesTable } from '../store/schema.js';
import type { RetrievalContext } from './context.js';
import { pageKeys } from './links.js';
import { findReadablePage } from './lookup.js';

/** A page in a backlinks or related list, with why it is there. */
export interface RelatedEntry {
  id: string;
  path: string;
  title: string;
  state: string;
  why: string;
}

export interface RelatedResult {
  id: string;
  path: string;
  links: RelatedEntry[];
  backlinks: RelatedEntry[];
  neighbours: RelatedEntry[];
  shared_tags: RelatedEntry[];
}

/** Entries per list of `related`. */
const RELATED_LIMIT = 20;

type Row = Pick<PagesTable, 'id' | 'path' | 'title' | 'state' | 'sensitivity' | 'block_level' | 'updated_at'>;
const COLS = ['pages.id', 'pages.path', 'pages.title', 'pages.state', 'pages.sensitivity', 'pages.block_level', 'pages.updated_at'] as const;

function readable(p: Principal, r: Row): boolean {
  return canReadPage(p, { path: r.path, sensitivity: r.sensitivity, blockLevel: r.block_level });
}

/** The caller sees the link itself: it is not inside a block of `sourcePath` above the caller's read ceiling. */
function linkVisible(p: Principal, sourcePath: string, level: string | null): boolean {
  if (level === null) return true;
  return isLevel(level) && blockVisibility(p, sourcePath)(level);
}

function entry(r: Row, why: string): RelatedEntry {
  return { id: r.id, path: r.path, title: r.title, state: r.state, why };
}

function quoteLink(l: { kind: string; target: string }): string {
  return l.kind === 'wiki' ? `[[${l.target}]]` : `(${l.target})`;
}

/** Entries for the rows that `keep` passes, in order, each page once, at most `limit`. */
function entries<R extends Row>(rows: readonly R[], keep: (r: R) => boolean, why: (r: R) => string, limit = Number.POSITIVE_INFINITY): RelatedEntry[] {
  const out: RelatedEntry[] = [];
  const seen = new Set<string>();
  for (const r of rows) {
    if (out.length >= limit) break;
    if (seen.has(r.id) || !keep(r)) continue;
    seen.add(r.id);
    out.push(entry(r, why(r)));
  }
  return out;
}

/** Links with the live page at one end (`source_id`: pages linking; `target_id`: pages linked to), and the link itself. */
function linksWithPages(ctx: RetrievalContext, end: 'source_id' | 'target_id') {
  return ctx.store.db
    .selectFrom('page_links')
    .innerJoin('pages', 'pages.id', end === 'source_id' ? 'page_links.source_id' : 'page_links.target_id')
    .select([...COLS, 'page_links.target', 'page_links.kind', 'page_links.block_level as link_level'])
    .where('pages.deleted_at', 'is', null);
}

/** Pages (readable by the caller) whose links reach `page`: by id, or by a name it answers to. */
async function backlinksOf(ctx: RetrievalContext, p: Principal, page: PagesTable, limit?: number): Promise<RelatedEntry[]> {
  const keys = pageKeys(page.path, page.title);
  const rows = await linksWithPages(ctx, 'source_id')
    .where('page_links.workspace_id', '=', p.workspaceId)
    .where('page_links.source_id', '!=', page.id)
    .where((eb) => eb.or([eb('page_links.target_id', '=', page.id), eb.and([eb('page_links.target_id', 'is', null), eb('page_links.target_key', 'in', keys)])]))
    .orderBy('pages.path')
    .execute();
  return entries(
    rows,
    (r) => readable(p, r) && linkVisible(p, r.path, r.link_level),
    (r) => `links here with ${quoteLink(r)}`,
    limit,
  );
}

/** GET /api/v1/nodes/:id/backlinks: pages linking to this one that the caller may read. */
export async function pageBacklinks(ctx: RetrievalContext, p: Principal, ref: string): Promise<{ id: string; path: string; backlinks: RelatedEntry[] }> {
  const page = await findReadablePage(ctx.store.db, p, ref);
  return { id: page.id, path: page.path, backlinks: await backlinksOf(ctx, p, page) };
}

/** GET /api/v1/nodes/:id/related: its links, backlinks, folder neighbours and pages sharing tags, each readable by the caller. */
export async function relatedPages(ctx: RetrievalContext, p: Principal, ref: string): Promise<RelatedResult> {
  const db = ctx.store.db;
  const page = await findReadablePage(db, p, ref);

  const linkRows = await linksWithPages(ctx, 'target_id')
    .where('page_links.source_id', '=', page.id)
    .where('pages.id', '!=', page.id)
    .orderBy('page_links.ord')
    .execute();
  const links = entries(
    linkRows,
    (r) => readable(p, r) && linkVisible(p, page.path, r.link_level),
    (r) => `linked from this page as ${quoteLink(r)}`,
    RELATED_LIMIT,
  );

  const backlinks = await backlinksOf(ctx, p, page, RELATED_LIMIT);

  const neighbourRows = await db
    .selectFrom('pages')
    .select([...COLS])
    .where('workspace_id', '=', p.workspaceId)
    .where('cluster_path', '=', page.cluster_path)
    .where('deleted_at', 'is', null)
    .where('id', '!=', page.id)
    .orderBy('updated_at', 'desc')
    .orderBy('id')
    .limit(RELATED_LIMIT * 5)
    .execute();
  const neighbours = entries(
    neighbourRows,
    (r) => readable(p, r),
    () => `in the same folder ${page.cluster_path}`,
    RELATED_LIMIT,
  );

  const tags = JSON.parse(page.tags) as string[];
  const shared_tags: RelatedEntry[] = [];
  if (tags.length > 0) {
    const tagRows = await db
      .selectFrom('page_tags')
      .innerJoin('pages', 'pages.id', 'page_tags.page_id')
      .select([...COLS, 'page_tags.tag'])
      .where('page_tags.workspace_id', '=', p.workspaceId)
      .where('page_tags.tag', 'in', tags)
      .where('pages.id', '!=', page.id)
      .where('pages.deleted_at', 'is', null)
      .execute();
    const byPage = new Map<string, { row: Row; tags: string[] }>();
    for (const r of tagRows) {
      const e = byPage.get(r.id) ?? { row: r, tags: [] };
      e.tags.push(r.tag);
      byPage.set(r.id, e);
    }
    const ranked = [...byPage.values()]
      .filter((e) => readable(p, e.row))
      .sort((a, b) => b.tags.length - a.tags.length || (a.row.updated_at < b.row.updated_at ? 1 : a.row.updated_at > b.row.updated_at ? -1 : 0));
    for (const e of ranked.slice(0, RELATED_LIMIT)) {
      const shared = tags.filter((t) => e.tags.includes(t));
      shared_tags.push(entry(e.row, `shares tag${shared.length > 1 ? 's' : ''} ${shared.join(', ')}`));
    }
  }
  return { id: page.id, path: page.path, links, backlinks, neighbours, shared_tags };
}
