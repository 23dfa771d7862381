import { sql } from 'kysely';
import { canCreateSpace, ceilingFor, hasActionWithin } from '../policy/access.js';
import { canReadPage } from '../policy/pages.js';
import type { Principal } from '../policy/principal.js';
import { atOrBelow, LEVELS } from '../policy/sensitivity.js';
import { isSqlite, type Executor } from '../store/db.js';
import type { SpacesTable } from '../store/schema.js';
import { afterCommitIfAny, inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { conflict, forbidden, notFound } from './errors.js';
import { nowIso } from './ids.js';
import { folderChain, parseFolderPath, parseSpaceId } from './paths.js';
import { presentPage } from './pages/record.js';

export type SpaceRecord = Pick<SpacesTable, 'id' | 'name' | 'summary' | 'created_at'>;

/** A Space named by a page path that does not exist yet is created with it (docs/decisions.md). */
export async function ensureSpace(trx: Executor, workspaceId: string, space: string, now: string): Promise<void> {
  await trx
    .insertInto('spaces')
    .values({ workspace_id: workspaceId, id: space, name: space, summary: '', created_at: now })
    .onConflict((oc) => oc.columns(['workspace_id', 'id']).doNothing())
    .execute();
}

/**
 * Spaces and folder paths known to have their rows, by `workspaceId\0space\0folderPath`, learned
 * once the transaction that made or saw them committed (they are never deleted): a write into a
 * known folder skips the statements, which on PostgreSQL are round trips made under the
 * workspace's lock. Bounded: emptied when full.
 */
const placed = new Set<string>();
const PLACED_MAX = 10_000;

/**
 * The Space and the folder rows a page at `folderPath` needs (ensureSpace and ensureFolders),
 * skipped when this process has seen them committed, in one statement on PostgreSQL.
 */
export async function ensurePlace(trx: Executor, workspaceId: string, space: string, folderPath: string, now: string): Promise<void> {
  const key = `${workspaceId}\0${space}\0${folderPath}`;
  if (placed.has(key)) return;
  if (isSqlite(trx)) {
    await ensureSpace(trx, workspaceId, space, now);
    await ensureFolders(trx, workspaceId, folderPath, now);
  } else {
    const chain = folderChain(folderPath);
    await sql`with s as (
        insert into spaces (workspace_id, id, name, summary, created_at) values (${workspaceId}, ${space}, ${space}, '', ${now})
        on conflict (workspace_id, id) do nothing)
      insert into folders (workspace_id, path, space, summary, auto_archive_days, half_life_days, archived, created_at)
      select ${workspaceId}, p, ${space}, '', null, null, 0, ${now} from unnest(${chain}::text[]) as u(p)
      on conflict (workspace_id, path) do nothing`.execute(trx);
  }
  afterCommitIfAny(trx, () => {
    if (placed.size >= PLACED_MAX) placed.clear();
    placed.add(key);
  });
}

/** Folder rows hold settings (summary, lifecycle); they appear on first use. */
export async function ensureFolders(trx: Executor, workspaceId: string, folderPath: string, now: string): Promise<void> {
  const chain = folderChain(folderPath);
  if (chain.length === 0) return;
  const space = folderPath.split('/')[0]!;
  await trx
    .insertInto('folders')
    .values(
      chain.map((path) => ({
        workspace_id: workspaceId,
        path,
        space,
        summary: '',
        auto_archive_days: null,
        half_life_days: null,
        archived: 0,
        created_at: now,
      })),
    )
    .onConflict((oc) => oc.columns(['workspace_id', 'path']).doNothing())
    .execute();
}

/** A summary taken from an index page is cut to about this many characters. */
export const SUMMARY_MAX_CHARS = 200;

function clip(text: string): string {
  const t = text.replace(/\s+/g, ' ').trim();
  if (t.length <= SUMMARY_MAX_CHARS) return t;
  const cut = t.slice(0, SUMMARY_MAX_CHARS - 1);
  const space = cut.lastIndexOf(' ');
  return `${(space > SUMMARY_MAX_CHARS / 2 ? cut.slice(0, space) : cut).replace(/[\s,;:.]+$/, '')}…`;
}

/**
 * The first paragraph of a page body as plain-ish text: headings, code fences, HTML comments
 * and `::: <level>` blocks are skipped (a summary never comes from a marked block, whoever asks),
 * links keep their text.
 */
export function firstParagraph(body: string): string {
  const para: string[] = [];
  let fence = false;
  let block = 0;
  for (const raw of body.split('\n')) {
    const l = raw.trim();
    if (/^(```|~~~)/.test(l)) {
      if (para.length > 0) break;
      fence = !fence;
      continue;
    }
    if (fence) continue;
    if (/^:::\s*\S/.test(l)) {
      if (para.length > 0) break;
      block++;
      continue;
    }
    if (l === ':::') {
      if (para.length > 0) break;
      block = Math.max(0, block - 1);
      continue;
    }
    if (block > 0) continue;
    if (l === '' || l.startsWith('#') || l.startsWith('<!--') || l.includes('[redacted]')) {
      if (para.length > 0) break;
      continue;
    }
    para.push(l);
  }
  return para
    .join(' ')
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/\[\[([^\]|]*)(?:\|([^\]]*))?\]\]/g, (_m, target: string, label?: string) => label ?? target)
    .replace(/(\*\*|__|`)/g, '');
}

/**
 * Summaries of Spaces and folders taken from their `index.md` pages (docs/decisions.md, issue
 * 13): frontmatter `summary:` when present, else the first paragraph, cut to about 200
 * characters. Only index pages the caller may read count, read as the caller sees them
 * (redacted), so a hidden page's text never reaches a summary; the others' places fall back to
 * the stored summary. Keyed by the folder (or Space) path.
 */
export async function indexSummaries(db: Executor, p: Principal, places: readonly string[]): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  if (places.length === 0) return out;
  const rows = await db
    .selectFrom('pages')
    .selectAll()
    .where('workspace_id', '=', p.workspaceId)
    .where(
      'path',
      'in',
      places.map((f) => `${f}/index.md`),
    )
    .where('deleted_at', 'is', null)
    .where('state', '=', 'active')
    .execute();
  for (const r of rows) {
    if (!canReadPage(p, { path: r.path, sensitivity: r.sensitivity, blockLevel: r.block_level })) continue;
    const page = presentPage(p, r);
    const fm = page.frontmatter.summary;
    const text = clip(typeof fm === 'string' && fm.trim() !== '' ? fm : firstParagraph(page.body));
    if (text !== '') out.set(r.cluster_path, text);
  }
  return out;
}

/**
 * The Spaces the caller can read something in. A Space that holds pages, none of which the
 * caller may read, does not exist for them (issue 11: its name would tell). An empty Space
 * (made with POST /api/v1/spaces, nothing written yet) is listed to whoever may read in it.
 */
export async function listSpaces(ctx: CoreContext, p: Principal, db: Executor = ctx.store.db): Promise<SpaceRecord[]> {
  const rows = await db.selectFrom('spaces').select(['id', 'name', 'summary', 'created_at']).where('workspace_id', '=', p.workspaceId).orderBy('id').execute();
  const out: SpaceRecord[] = [];
  for (const s of rows) if (hasActionWithin(p, 'read', s.id) && (await spaceVisible(db, p, s.id))) out.push(s);
  const fromIndex = await indexSummaries(
    db,
    p,
    out.map((s) => s.id),
  );
  return out.map((s) => ({ ...s, summary: fromIndex.get(s.id) ?? s.summary }));
}

/**
 * True when the Space holds a live page the caller may read, or no live page at all. Asked per
 * place the caller's read reach starts (the Space, or each folder an agent's narrower read
 * grant names), with the levels readable there: one indexed existence query each. With
 * `action` propose, the same over the caller's propose reach (a log append by a caller that
 * proposes without reading, core/log.ts).
 */
export async function spaceVisible(db: Executor, p: Principal, spaceId: string, action: 'read' | 'propose' = 'read'): Promise<boolean> {
  const targets =
    ceilingFor(p, action, spaceId) !== null ? [spaceId] : p.grants.filter((g) => g.action === action && g.scope.startsWith(`${spaceId}/`)).map((g) => g.scope);
  for (const t of targets) {
    const ceiling = ceilingFor(p, action, t);
    if (ceiling === null) continue;
    const levels = LEVELS.filter((l) => atOrBelow(l, ceiling));
    let q = db
      .selectFrom('pages')
      .select('id')
      .where('workspace_id', '=', p.workspaceId)
      .where('space', '=', spaceId)
      .where('deleted_at', 'is', null)
      .where('sensitivity', 'in', levels);
    // Sub-folders by prefix on a segment boundary (no LIKE: `_` is a legal name character).
    if (t !== spaceId) q = q.where((eb) => eb.or([eb('cluster_path', '=', t), eb(sql<string>`substr(cluster_path, 1, ${[...t].length + 1})`, '=', `${t}/`)]));
    if (await q.limit(1).executeTakeFirst()) return true;
  }
  const any = await db
    .selectFrom('pages')
    .select('id')
    .where('workspace_id', '=', p.workspaceId)
    .where('space', '=', spaceId)
    .where('deleted_at', 'is', null)
    .limit(1)
    .executeTakeFirst();
  return any === undefined;
}

export async function createSpace(ctx: CoreContext, p: Principal, input: { id: string; name: string; summary?: string | undefined }): Promise<SpaceRecord> {
  if (!canCreateSpace(p)) throw forbidden('Creating a Space needs the admin grant over the whole workspace');
  const id = parseSpaceId(input.id);
  const now = nowIso();
  const record = { id, name: input.name.trim() || id, summary: input.summary ?? '', created_at: now };
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const exists = await trx.selectFrom('spaces').select('id').where('workspace_id', '=', p.workspaceId).where('id', '=', id).executeTakeFirst();
    if (exists) throw conflict(`Space ${id} already exists`, 'already_exists');
    await trx
      .insertInto('spaces')
      .values({ workspace_id: p.workspaceId, ...record })
      .execute();
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'space.create', detail: { space: id } });
  });
  return record;
}

export interface TreePage {
  id: string;
  path: string;
  title: string;
  state: string;
  sensitivity: string;
  updated_at: string;
}

export interface TreeFolder {
  path: string;
  name: string;
  summary: string;
  archived: boolean;
  /** Lifecycle settings of this folder (null: unset; a Space's own node never has them). */
  auto_archive_days: number | null;
  half_life_days: number | null;
  page_count: number;
  folders: TreeFolder[];
  pages: TreePage[];
  /** True when deeper levels exist but were cut by `depth`. */
  truncated?: boolean;
}

/**
 * The folder tree of a Space (or of a folder inside it), built from the pages the caller
 * can read, so a folder holding only invisible pages does not appear at all.
 */
export async function spaceTree(
  ctx: CoreContext,
  p: Principal,
  spaceId: string,
  opts: { path?: string | undefined; depth: number; includeArchived: boolean },
): Promise<{ space: SpaceRecord; tree: TreeFolder }> {
  const space = await ctx.store.db
    .selectFrom('spaces')
    .select(['id', 'name', 'summary', 'created_at'])
    .where('workspace_id', '=', p.workspaceId)
    .where('id', '=', spaceId)
    .executeTakeFirst();
  if (!space || !hasActionWithin(p, 'read', space.id) || !(await spaceVisible(ctx.store.db, p, space.id))) throw notFound(`Space ${spaceId} not found`);
  const root = opts.path ? parseFolderPath(opts.path.startsWith(`${spaceId}/`) ? opts.path : `${spaceId}/${opts.path}`).path : spaceId;
  let q = ctx.store.db
    .selectFrom('pages')
    .select(['id', 'path', 'title', 'state', 'sensitivity', 'block_level', 'cluster_path', 'updated_at'])
    .where('workspace_id', '=', p.workspaceId)
    .where('deleted_at', 'is', null)
    .where((eb) => eb.or([eb('cluster_path', '=', root), eb('cluster_path', 'like', `${root.replace(/[%_\\]/g, '\\$&')}/%`)]));
  if (!opts.includeArchived) q = q.where('state', '=', 'active');
  const pages = (await q.orderBy('path').execute()).filter((r) => canReadPage(p, { path: r.path, sensitivity: r.sensitivity, blockLevel: r.block_level }));
  if (root !== spaceId && pages.length === 0) throw notFound(`Folder ${root} not found`);

  const folderRows = await ctx.store.db
    .selectFrom('folders')
    .select(['path', 'summary', 'archived', 'auto_archive_days', 'half_life_days'])
    .where('workspace_id', '=', p.workspaceId)
    .where('space', '=', spaceId)
    .execute();
  const settings = new Map(folderRows.map((f) => [f.path, f]));
  // Index pages among the ones the caller can read here give their folder's summary.
  const indexed = await indexSummaries(ctx.store.db, p, [...new Set(pages.filter((r) => r.path === `${r.cluster_path}/index.md`).map((r) => r.cluster_path))]);
  if (root !== spaceId) {
    const own = await indexSummaries(ctx.store.db, p, [spaceId]);
    if (own.has(spaceId)) indexed.set(spaceId, own.get(spaceId)!);
  }
  const spaceSummary = indexed.get(spaceId) ?? space.summary;

  const make = (path: string): TreeFolder => ({
    path,
    name: path.split('/').pop() ?? path,
    summary: indexed.get(path) ?? (path === spaceId ? spaceSummary : settings.get(path)?.summary || ''),
    archived: (settings.get(path)?.archived ?? 0) === 1,
    auto_archive_days: settings.get(path)?.auto_archive_days ?? null,
    half_life_days: settings.get(path)?.half_life_days ?? null,
    page_count: 0,
    folders: [],
    pages: [],
  });
  const top = make(root);
  const index = new Map<string, TreeFolder>([[root, top]]);
  const rootDepth = root.split('/').length;
  const folderFor = (folderPath: string): TreeFolder => {
    const segs = folderPath.split('/');
    let node = top;
    for (let i = rootDepth + 1; i <= segs.length; i++) {
      const path = segs.slice(0, i).join('/');
      let child = index.get(path);
      if (!child) {
        child = make(path);
        index.set(path, child);
        node.folders.push(child);
      }
      node = child;
    }
    return node;
  };
  for (const r of pages) {
    const folder = folderFor(r.cluster_path);
    folder.pages.push({ id: r.id, path: r.path, title: r.title, state: r.state, sensitivity: r.sensitivity, updated_at: r.updated_at });
    for (let f: string = r.cluster_path; f.length >= root.length; f = f.slice(0, Math.max(f.lastIndexOf('/'), 0))) {
      const node = index.get(f);
      if (node) node.page_count++;
      if (f === root || !f.includes('/')) break;
    }
  }
  const cut = (node: TreeFolder, level: number): void => {
    node.folders.sort((a, b) => a.path.localeCompare(b.path));
    if (level >= opts.depth) {
      if (node.folders.length > 0) node.truncated = true;
      node.folders = [];
      return;
    }
    for (const f of node.folders) cut(f, level + 1);
  };
  cut(top, 0);
  return { space: { ...space, summary: spaceSummary }, tree: top };
}
