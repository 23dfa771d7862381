import { notFound } from '../errors/index.js';
import { sql, type ExpressionBuilder } from 'kysely';
import { canReadPage } from '../policy/pages.js';
import { atOrBelow, LEVELS } from '../policy/sensitivity.js';
import type { Principal } from '../policy/principal.js';
import type { Executor } from '../store/db.js';
import { builtOnce } from '../store/built-once.js';
import type { DB, PagesTable } from '../store/schema.js';
import { widestCeiling } from './candidates.js';

/**
 * Finding one page by id or path, as the caller may see it. The core's page acts and retrieval's
 * related lists both start here; it sits in retrieval, below the core, so that retrieval need not
 * import the core.
 */

/** Page ids look like `pg_…`; anything else is taken as a path. */
export function isPageId(ref: string): boolean {
  return /^pg_[0-9a-z]{26}$/.test(ref);
}

/**
 * Loads a page the caller may read, by id or path, in the caller's workspace. A page in
 * another workspace, above the caller's ceiling, or (unless asked) deleted is 404: the
 * caller cannot tell those apart.
 */
export async function findReadablePage(db: Executor, p: Principal, ref: string, opts: { includeDeleted?: boolean } = {}): Promise<PagesTable> {
  const ws = p.workspaceId;
  // The text comes only with a page at or below the caller's widest read ceiling: read for a
  // page it cannot read, a large one answered "not found" as much later as it was large (on
  // PostgreSQL ~14 ms for 1 MB), telling that it exists (attack of session q).
  const widest = widestCeiling(p, 'read');
  const levels = widest === null ? [NO_LEVEL] : LEVELS.filter((l) => atOrBelow(l, widest));
  const row = isPageId(ref)
    ? await (opts.includeDeleted ? pageById : livePageById).first(db, { ws, id: ref, levels })
    : await livePageByPath.first(db, { ws, path: ref.replace(/^\/+/, ''), levels });
  return readableOrNotFound(p, ref, row);
}

/** Matches no page's level (a caller without any read grant). */
const NO_LEVEL = 'none';

/** Every column of a page, its text only at the levels given (else ''). */
function pageColumns(eb: ExpressionBuilder<DB, 'pages'>, levels: readonly string[]) {
  return [...PAGE_COLUMNS, eb.case().when('sensitivity', 'in', levels).then(eb.ref('content')).else(sql.lit('')).end().as('content')] as const;
}
const PAGE_COLUMNS = [
  'id',
  'workspace_id',
  'path',
  'space',
  'cluster_path',
  'title',
  'content_hash',
  'commit_sha',
  'sensitivity',
  'block_level',
  'state',
  'frontmatter',
  'tags',
  'links',
  'created_at',
  'updated_at',
  'last_touched_at',
  'created_by',
  'updated_by',
  'deleted_at',
] as const satisfies readonly Exclude<keyof PagesTable, 'content'>[];

// Every page act starts with one of these: built once (store/built-once.ts).
const pageById = builtOnce((db, v: { ws: string; id: string; levels: string[] }) =>
  db
    .selectFrom('pages')
    .select((eb) => pageColumns(eb, v.levels))
    .where('workspace_id', '=', v.ws)
    .where('id', '=', v.id),
);
const livePageById = builtOnce((db, v: { ws: string; id: string; levels: string[] }) =>
  db
    .selectFrom('pages')
    .select((eb) => pageColumns(eb, v.levels))
    .where('workspace_id', '=', v.ws)
    .where('id', '=', v.id)
    .where('deleted_at', 'is', null),
);
const livePageByPath = builtOnce((db, v: { ws: string; path: string; levels: string[] }) =>
  db
    .selectFrom('pages')
    .select((eb) => pageColumns(eb, v.levels))
    .where('workspace_id', '=', v.ws)
    .where('path', '=', v.path)
    .where('deleted_at', 'is', null),
);
const wholeLivePageById = builtOnce((db, v: { ws: string; id: string }) =>
  db.selectFrom('pages').selectAll().where('workspace_id', '=', v.ws).where('id', '=', v.id).where('deleted_at', 'is', null),
);
const wholeLivePageByPath = builtOnce((db, v: { ws: string; path: string }) =>
  db.selectFrom('pages').selectAll().where('workspace_id', '=', v.ws).where('path', '=', v.path).where('deleted_at', 'is', null),
);

/** The live page row found for `ref` (by findReadablePage or read with the caller's key), if the caller may read it; else 404. */
export function readableOrNotFound(p: Principal, ref: string, row: PagesTable | undefined | null): PagesTable {
  if (!row || !canReadPage(p, { path: row.path, sensitivity: row.sensitivity, blockLevel: row.block_level })) {
    throw notFound(`Page ${ref} not found`);
  }
  return row;
}

/** The live page at an id or path in the workspace, whoever may read it (callers judge). */
export async function loadLivePage(db: Executor, workspaceId: string, ref: { id?: string; path?: string }): Promise<PagesTable | undefined> {
  return ref.id ? wholeLivePageById.first(db, { ws: workspaceId, id: ref.id }) : wholeLivePageByPath.first(db, { ws: workspaceId, path: ref.path ?? '' });
}
