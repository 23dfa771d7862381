import { sql } from 'kysely';
import { canReadPage, enforce } from '../policy/pages.js';
import type { Principal } from '../policy/principal.js';
import { decideToolGrant } from '../policy/tools.js';
import { assertUsableScope } from '../retrieval/scope.js';
import type { Executor } from '../store/db.js';
import type { CoreContext } from './context.js';
import { badRequest } from './errors.js';
import { SEQ_MAX } from './ids.js';

/**
 * What changed in a scope since a cursor (issue 13, beyond the spec): the page versions
 * committed after it, oldest first, one entry per page per commit, so an agent catches up
 * with what others did. MCP `context_changes` and REST `GET /api/v1/changes`.
 *
 * Only what the caller may see is ever told: a version counts when the caller may read the
 * page at that version (its path and level then) and the page as it is now (a page moved out
 * of sight, raised above the ceiling or deleted at a hidden place is gone from the feed, its
 * old entries included, as it is gone from every read). The cursor names the last entry
 * returned, never a hidden one, so it moves only when the caller is told something: a commit
 * the caller cannot see leaves the answer — cursor included — exactly as it was.
 */

export type ChangeKind = 'created' | 'changed' | 'moved' | 'archived' | 'restored' | 'deleted';

export interface ChangeEntry {
  change: ChangeKind;
  id: string;
  path: string;
  /** Moves: the path before, when the caller could see the page there. */
  from?: string;
  commit_sha: string;
  at: string;
  author: { id: string; name: string };
  message: string;
}

export interface ChangesPage {
  changes: ChangeEntry[];
  /** Pass as `since` next time: after the last change returned (the same cursor when none). */
  next: string;
  /** True when more changes follow right away (call again with `next`). */
  more: boolean;
}

const KINDS: Record<string, ChangeKind> = {
  create: 'created',
  update: 'changed',
  move: 'moved',
  archive: 'archived',
  restore: 'restored',
  delete: 'deleted',
};

/** Version rows read per round while filling a page past ones the caller cannot see. */
const BATCH = 500;

interface Position {
  seq: number;
  pageId: string;
}

function encodeCursor(pos: Position): string {
  return Buffer.from(`${pos.seq}:${pos.pageId}`, 'utf8').toString('base64url');
}

function decodeCursor(cursor: string): Position {
  const m = /^(\d{1,15}):(pg_[0-9A-Za-z]{1,64})?$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!m || !/^[A-Za-z0-9_-]+$/.test(cursor)) {
    throw badRequest(
      'since is not a cursor this feed returned: send `next` of your previous call as given, or omit it to start from the beginning',
      'invalid_cursor',
    );
  }
  const seq = Number(m[1]);
  if (seq > SEQ_MAX) throw badRequest('since is not a cursor this feed returned: send `next` of your previous call as given', 'invalid_cursor');
  return { seq, pageId: m[2] ?? '' };
}

/** A Space (`eng`) or folder (`eng/ops`) filter on a path, on segment boundaries. */
function underScope(scope: string) {
  return sql<boolean>`substr(page_versions.path, 1, ${[...scope].length + 1}) = ${`${scope}/`}`;
}

async function previousPath(db: Executor, p: Principal, pageId: string, seq: number): Promise<string | undefined> {
  const v = await db
    .selectFrom('page_versions')
    .select(['path', 'sensitivity', 'block_level'])
    .where('workspace_id', '=', p.workspaceId)
    .where('page_id', '=', pageId)
    .where('commit_seq', '<', seq)
    .orderBy('commit_seq', 'desc')
    .limit(1)
    .executeTakeFirst();
  return v && canReadPage(p, { path: v.path, sensitivity: v.sensitivity, blockLevel: v.block_level }) ? v.path : undefined;
}

export async function listChanges(
  ctx: CoreContext,
  p: Principal,
  opts: { scope?: string | undefined; since?: string | undefined; limit: number },
): Promise<ChangesPage> {
  const db = ctx.store.db;
  // A read grant somewhere, as every read of pages needs (REST and MCP alike).
  enforce(decideToolGrant(p, ['read']));
  let scope: string | undefined;
  if (opts.scope !== undefined) {
    scope = opts.scope.trim().replace(/^\/+|\/+$/g, '');
    const space = scope.split('/')[0]!;
    await assertUsableScope(ctx, p, 'read', space, scope === space ? undefined : scope);
  }
  const start = opts.since !== undefined ? decodeCursor(opts.since) : { seq: 0, pageId: '' };
  let after = start;
  const found: { seq: number; pageId: string; entry: ChangeEntry }[] = [];
  for (;;) {
    const a = after;
    let q = db
      .selectFrom('page_versions')
      .innerJoin('pages', (j) => j.onRef('pages.id', '=', 'page_versions.page_id').onRef('pages.workspace_id', '=', 'page_versions.workspace_id'))
      .leftJoin('principals', 'principals.id', 'page_versions.principal_id')
      .select([
        'page_versions.commit_seq as seq',
        'page_versions.page_id as page_id',
        'page_versions.commit_sha as commit_sha',
        'page_versions.path as path',
        'page_versions.action as action',
        'page_versions.sensitivity as sensitivity',
        'page_versions.block_level as block_level',
        'page_versions.principal_id as principal_id',
        'page_versions.message as message',
        'page_versions.created_at as created_at',
        'pages.path as now_path',
        'pages.sensitivity as now_sensitivity',
        'pages.block_level as now_block_level',
        'principals.name as author_name',
      ])
      .where('page_versions.workspace_id', '=', p.workspaceId)
      .where((eb) =>
        eb.or([eb('page_versions.commit_seq', '>', a.seq), eb.and([eb('page_versions.commit_seq', '=', a.seq), eb('page_versions.page_id', '>', a.pageId)])]),
      );
    if (scope !== undefined) {
      const s = scope;
      q = q.where((eb) => eb.or([eb('page_versions.path', '=', s), underScope(s)]));
    }
    const batch = await q.orderBy('page_versions.commit_seq').orderBy('page_versions.page_id').limit(BATCH).execute();
    for (const v of batch) {
      const then = canReadPage(p, { path: v.path, sensitivity: v.sensitivity, blockLevel: v.block_level });
      const now = canReadPage(p, { path: v.now_path, sensitivity: v.now_sensitivity, blockLevel: v.now_block_level });
      if (!then || !now) continue;
      const entry: ChangeEntry = {
        change: KINDS[v.action] ?? 'changed',
        id: v.page_id,
        path: v.path,
        commit_sha: v.commit_sha,
        at: v.created_at,
        author: { id: v.principal_id, name: v.author_name ?? v.principal_id },
        message: v.message,
      };
      found.push({ seq: v.seq, pageId: v.page_id, entry });
      if (found.length > opts.limit) break;
    }
    if (found.length > opts.limit || batch.length < BATCH) break;
    const last = batch[batch.length - 1]!;
    after = { seq: last.seq, pageId: last.page_id };
  }
  const shown = found.slice(0, opts.limit);
  for (const f of shown) {
    if (f.entry.change !== 'moved') continue;
    const from = await previousPath(db, p, f.pageId, f.seq);
    if (from !== undefined) f.entry = { ...f.entry, from };
  }
  const last = shown[shown.length - 1];
  const next = last ? encodeCursor({ seq: last.seq, pageId: last.pageId }) : opts.since !== undefined ? opts.since : encodeCursor(start);
  return { changes: shown.map((f) => f.entry), next, more: found.length > opts.limit };
}
