import { sql } from 'kysely';
import { badRequest } from '../errors/index.js';
import { extractLinks, extractTags, extractTitle, parseDocument } from '../markdown/index.js';
import type { Principal } from '../policy/principal.js';
import type { Level } from '../policy/sensitivity.js';
import { resolveCommit, type CommitRef } from '../store/commits.js';
import { ObjectStore } from '../store/git/object-store.js';
import { allowedLevels, folderPath, reachSql, visible, type Scope } from './candidates.js';
import { chunkBody, type Chunk } from './chunking.js';
import type { RetrievalContext } from './context.js';
import { linkLevels } from './indexer.js';

/**
 * Point-in-time retrieval (issue 20, `at=<sha>` on search and the bundle): the pages of a
 * workspace as a commit left them, read from `page_versions` and the object store, not from
 * the live index (which holds only today's text). A page is in the snapshot when a version of
 * it at or before the commit holds text (created since: absent; deleted since: present as it
 * was; moved since: at its path then), and the caller may see it by today's rules twice over:
 * the version's own path and level, and the page's today (as GET /nodes/:id?at= judges a
 * version, DESIGN.md §4). Sections inside `::: level` blocks above the caller's ceiling are
 * judged one by one by the ranking (snapshot-rank.ts), as the live index judges them.
 */

/** At most this many pages in the caller's reach and scope at a commit are read for one answer. */
export const AT_MAX_PAGES = 10_000;

/**
 * Parsed page texts kept (by workspace and blob sha: a blob never changes), up to this many
 * characters of markdown in all; an entry holds about five bytes a character (the body, its
 * chunks and their stems' counts), so about 40 MB.
 */
const PARSED_CACHE_CHARS = 8_000_000;

export interface SnapshotLink {
  target: string;
  kind: 'wiki' | 'markdown';
  blockLevel: Level | null;
}

/** One blob's markdown as retrieval reads it, parsed once. */
export interface ParsedBlob {
  frontmatter: Record<string, unknown>;
  body: string;
  chunks: Chunk[];
  links: SnapshotLink[];
  chars: number;
  /** The title the text gives itself (frontmatter or first heading), '' when none: the page's file name then. */
  ownTitle: string;
  /**
   * The chunks' words as the keyword ranking reads them (snapshot-rank.ts fills it on first use):
   * each stem's weighted count per chunk (heading 4, text 1), and each chunk's length in words.
   */
  terms?: { counts: Map<string, Map<number, number>>; lens: number[] };
  /** The embedding windows of the chunks and their text hashes, under a title (snapshot-rank.ts). */
  windows?: { title: string; list: { first: number; last: number; idx: number[]; hash: string }[] };
}

const parsedCache = new Map<string, ParsedBlob>();
let parsedChars = 0;

/**
 * The parsed text of a blob of a workspace. Keyed by workspace too: a cache shared across
 * workspaces would answer faster for a text another workspace holds (a timing oracle).
 */
function parseBlob(key: string, raw: string): ParsedBlob {
  const hit = parsedCache.get(key);
  if (hit) {
    parsedCache.delete(key);
    parsedCache.set(key, hit);
    return hit;
  }
  const { frontmatter, body } = parseDocument(raw);
  const parsed: ParsedBlob = {
    frontmatter,
    body,
    chunks: chunkBody(body),
    links: linkLevels(body, extractLinks(body)).map((l) => ({ target: l.target, kind: l.kind, blockLevel: l.blockLevel })),
    chars: raw.length,
    ownTitle: extractTitle(frontmatter, body, ''),
  };
  parsedCache.set(key, parsed);
  parsedChars += parsed.chars;
  for (const [k, v] of parsedCache) {
    if (parsedChars <= PARSED_CACHE_CHARS) break;
    parsedCache.delete(k);
    parsedChars -= v.chars;
  }
  return parsed;
}

/** A page as the commit left it. */
export interface SnapshotPage {
  id: string;
  path: string;
  space: string;
  cluster_path: string;
  title: string;
  tags: string[];
  state: 'active' | 'archived';
  sensitivity: string;
  block_level: string | null;
  /** The commit that wrote this version of the page (what a reader cites). */
  commit_sha: string;
  updated_at: string;
  parsed: ParsedBlob;
}

export interface Snapshot {
  commit: CommitRef;
  /** The pages the caller may see at the commit, within the scope, by id. */
  pages: SnapshotPage[];
  /** Every page's path at the commit, seen or not: links resolve against all of them, as the live index resolves them. */
  paths: { id: string; path: string }[];
}

interface VersionRow {
  page_id: string;
  path: string;
  blob_sha: string;
  sensitivity: string;
  block_level: string | null;
  commit_sha: string;
  created_at: string;
  now_path: string;
  now_sensitivity: string;
  /** Today's text is still this version's: read from `pages`, no blob to inflate. */
  same: number | boolean;
}

function inScope(scope: Scope, path: string): boolean {
  const space = path.split('/')[0]!;
  if (scope.space && space !== scope.space) return false;
  if (!scope.folder) return true;
  const cluster = path.split('/').slice(0, -1).join('/');
  const c = folderPath(scope.space, scope.folder);
  return cluster === c || cluster.startsWith(`${c}/`);
}

/**
 * The workspace at commit `at` (a sha or a unique prefix of at least 7), as the caller may see
 * it within `scope`: 404 `commit_not_found` for a commit the workspace does not have, 400
 * `snapshot_too_large` when more than AT_MAX_PAGES pages would have to be read.
 */
export async function loadSnapshot(ctx: RetrievalContext, p: Principal, scope: Scope, at: string, maxPages = AT_MAX_PAGES): Promise<Snapshot> {
  const db = ctx.store.db;
  const ws = p.workspaceId;
  const commit = await resolveCommit(db, ws, at);
  const rows = (
    await sql<VersionRow>`
    select v.page_id, v.path, v.blob_sha, v.sensitivity, v.block_level, v.commit_sha, v.created_at,
      pg.path as now_path, pg.sensitivity as now_sensitivity,
      (pg.content_hash = v.blob_sha and pg.deleted_at is null) as same
    from (select page_id, max(commit_seq) as seq from page_versions
          where workspace_id = ${ws} and commit_seq <= ${commit.seq} group by page_id) l
    join page_versions v on v.workspace_id = ${ws} and v.page_id = l.page_id and v.commit_seq = l.seq
    join pages pg on pg.id = l.page_id
    where v.blob_sha is not null
    order by v.page_id`.execute(db)
  ).rows;
  const paths = rows.map((r) => ({ id: r.page_id, path: r.path }));
  const seen = rows.filter(
    (r) =>
      inScope(scope, r.path) &&
      visible(p, scope.action, { path: r.path, sensitivity: r.sensitivity, block_level: null }) &&
      visible(p, scope.action, { path: r.now_path, sensitivity: r.now_sensitivity, block_level: null }),
  );
  if (seen.length > maxPages) {
    throw badRequest(
      `At that commit ${seen.length} pages are in reach; a point-in-time answer reads at most ${maxPages}: narrow the scope`,
      'snapshot_too_large',
    );
  }
  const key = (sha: string) => `${ws}\u0000${sha}`;
  // Texts not parsed yet: today's from `pages` where unchanged since, the others from their blobs.
  const todo = seen.filter((r) => !parsedCache.has(key(r.blob_sha)));
  const texts = new Map<string, string>();
  const current = todo.filter((r) => r.same === true || r.same === 1).map((r) => r.page_id);
  for (let i = 0; i < current.length; i += 500) {
    const rows = await db
      .selectFrom('pages')
      .select(['content', 'content_hash'])
      .where('workspace_id', '=', ws)
      .where('id', 'in', current.slice(i, i + 500))
      .execute();
    for (const r of rows) texts.set(r.content_hash, r.content);
  }
  const rest = todo.filter((r) => !texts.has(r.blob_sha)).map((r) => r.blob_sha);
  if (rest.length > 0) for (const [sha, body] of await new ObjectStore(db, ws).getBlobs(rest)) texts.set(sha, body.toString('utf8'));
  const pages: SnapshotPage[] = [];
  const tags = [...new Set(scope.tags ?? [])];
  for (const r of seen) {
    const raw = texts.get(r.blob_sha);
    const parsed = raw === undefined ? parsedCache.get(key(r.blob_sha)) : parseBlob(key(r.blob_sha), raw);
    // A blob missing from the store leaves its page out rather than failing the whole answer.
    if (!parsed) continue;
    const file = r.path.split('/').pop()!;
    const page: SnapshotPage = {
      id: r.page_id,
      path: r.path,
      space: r.path.split('/')[0]!,
      cluster_path: r.path.split('/').slice(0, -1).join('/'),
      title: parsed.ownTitle || file.replace(/\.md$/i, ''),
      tags: extractTags(parsed.frontmatter),
      state: parsed.frontmatter.state === 'archived' ? 'archived' : 'active',
      sensitivity: r.sensitivity,
      block_level: r.block_level,
      commit_sha: r.commit_sha,
      updated_at: r.created_at,
      parsed,
    };
    if (!scope.includeArchived && page.state !== 'active') continue;
    if (tags.some((t) => !page.tags.includes(t))) continue;
    pages.push(page);
  }
  return { commit, pages, paths };
}

/**
 * The commit a live answer is "as of" for this caller: the newest that changed a page the
 * caller may see today (the snapshot's test on the page as it is now; deleted pages count, as
 * the snapshot shows them as they were). A page hidden today is in no snapshot of theirs, so
 * every commit from this one on replays the same pages for them; naming the workspace's newest
 * instead would move with writes they cannot see and tell them when those happen. Null when no
 * commit changed a page they may see. One statement: the versions are walked newest first by
 * their index and judged in SQL (judged in rounds here, the time of an answer grew with the
 * hidden versions written since the caller's last visible one, an attack found).
 */
export async function newestVisibleCommit(ctx: RetrievalContext, p: Principal, action: Scope['action']): Promise<CommitRef | null> {
  const levels = allowedLevels(p, action);
  if (levels === null) return null;
  const reach = reachSql(p, action);
  const ws = p.workspaceId;
  // reachSql judges sections (`s`); a page's own test is a section outside every block.
  const row = (
    await sql<{ sha: string; seq: number | string; created_at: string }>`
    select c.sha, c.seq, c.created_at from commits c
    where c.workspace_id = ${ws} and c.seq = (
      select v.commit_seq from page_versions v
      join pages p on p.id = v.page_id and p.workspace_id = v.workspace_id
      cross join (select cast(null as text) as block_level) s
      where v.workspace_id = ${ws} and p.sensitivity in (${sql.join(levels)}) ${reach ? sql`and ${reach}` : sql``}
      order by v.commit_seq desc limit 1)`.execute(ctx.store.db)
  ).rows[0];
  return row ? { sha: row.sha, seq: Number(row.seq), created_at: row.created_at } : null;
}
