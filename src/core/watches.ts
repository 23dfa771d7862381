import { sql, type CompiledQuery, type Transaction } from 'kysely';
import { ulid } from 'ulid';
import { ceilingFor } from '../policy/access.js';
import { canReadPage, type PageFacts } from '../policy/pages.js';
import type { Principal } from '../policy/principal.js';
import { atOrBelow, LEVELS, rank, type Level } from '../policy/sensitivity.js';
import { canWatchFolder, canWatchPage, revealsOldPath, watchDelivers, type FolderSight } from '../policy/watches.js';
import { findReadablePage, isPageId } from '../retrieval/lookup.js';
import type { Executor } from '../store/db.js';
import { builtOnce } from '../store/built-once.js';
import { executeCarrying } from '../store/carried.js';
import type { DB, PagesTable, WatchesTable } from '../store/schema.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { badRequest, conflict, notFound } from './errors.js';
import { wakeInboxes } from './inbox-events.js';
import { parseFolderPath, parsePagePath } from './paths.js';
import { liveKeys, loadPrincipals } from './principal-loader.js';
import { WATCH_ID, WATCH_LIMITS, type WatchTargetInput } from './watch-input.js';

/**
 * Watching pages and folders (issue 13). A watch is a row per principal and target (`page:<id>`
 * or `path:<folder>`); a page change looks its watchers up with one indexed query over the page's
 * id and the ancestor folders of its old and new paths, and places an inbox event for each
 * watcher who may read the page now, in the change's own transaction (commitPage calls
 * `deliverWatchEvents`). Events coalesce per page while unread and are rate-bounded per watcher
 * (WATCH_LIMITS): beyond the bound, changes are counted in one digest event.
 */

export interface WatchRecord {
  id: string;
  kind: 'page' | 'folder';
  node_id: string | null;
  /** The folder or Space; for a page, where it is now (or was when watched, if it is out of sight now). */
  path: string;
  created_at: string;
  /** False when nothing will arrive: the key it was made with is dead, or the target is out of sight. */
  delivering: boolean;
}

/** The agent key a watch is bound to (agents only call with keys; a person's watch follows their membership). */
const keyOf = (p: Principal): string | null => (p.kind === 'agent' ? p.keyId : null);

const newWatchId = () => `wa_${ulid().toLowerCase()}`;

/** `path:<folder>` keys for every folder above a page path: `a`, `a/b`, `a/b/c` for `a/b/c/x.md`. */
function folderTargets(pagePath: string): string[] {
  const segs = pagePath.split('/').slice(0, -1);
  const out: string[] = [];
  for (let i = 1; i <= segs.length; i++) out.push(`path:${segs.slice(0, i).join('/')}`);
  return out;
}

function pageFacts(row: Pick<PagesTable, 'path' | 'sensitivity' | 'block_level'>): PageFacts {
  return { path: row.path, sensitivity: row.sensitivity, blockLevel: row.block_level };
}

/** A sub-path test on a segment boundary (no LIKE: `_` is a legal name character). */
function under(col: 'cluster_path', folder: string) {
  const prefix = `${folder}/`;
  return sql<boolean>`substr(${sql.ref(col)}, 1, ${[...prefix].length}) = ${prefix}`;
}

async function folderSight(db: Executor, p: Principal, path: string, ceiling: Level): Promise<FolderSight> {
  const isSpace = !path.includes('/');
  const live = () => {
    let q = db.selectFrom('pages').select('id').where('workspace_id', '=', p.workspaceId).where('deleted_at', 'is', null);
    q = isSpace ? q.where('space', '=', path) : q.where((eb) => eb.or([eb('cluster_path', '=', path), under('cluster_path', path)]));
    return q;
  };
  const readable = await live()
    .where(
      'sensitivity',
      'in',
      LEVELS.filter((l) => atOrBelow(l, ceiling)),
    )
    .limit(1)
    .executeTakeFirst();
  if (readable) return { exists: true, livePages: true, readablePage: true };
  const any = await live().limit(1).executeTakeFirst();
  const row = isSpace
    ? await db.selectFrom('spaces').select('id').where('workspace_id', '=', p.workspaceId).where('id', '=', path).executeTakeFirst()
    : await db.selectFrom('folders').select('path').where('workspace_id', '=', p.workspaceId).where('path', '=', path).executeTakeFirst();
  return { exists: row !== undefined, livePages: any !== undefined, readablePage: false };
}

/** The one answer for a target that is absent or that the caller may not watch: they cannot tell the two apart. */
const noTarget = (what: string) => notFound(`${what} not found: watch a page, folder or Space you can read`);

interface ResolvedTarget {
  target: string;
  kind: 'page' | 'folder';
  pageId: string | null;
  path: string;
}

/** Resolves {node_id} or {path} to a watch target the caller may watch (read now), or throws not_found. */
async function resolveTarget(db: Executor, p: Principal, input: WatchTargetInput): Promise<ResolvedTarget> {
  const given = [input.node_id, input.path].filter((x) => x !== undefined);
  if (given.length !== 1) throw badRequest('Name what to watch with exactly one of node_id (a page id) or path (a page, a folder or a Space)');
  if (input.node_id !== undefined) {
    if (!isPageId(input.node_id)) throw badRequest(`node_id must be a page id (pg_…); for a path use path`);
    const row = await findReadablePage(db, p, input.node_id).catch(() => {
      throw noTarget(`Page ${input.node_id}`);
    });
    return { target: `page:${row.id}`, kind: 'page', pageId: row.id, path: row.path };
  }
  const raw = input.path!.replace(/^\/+|\/+$/g, '');
  if (raw.endsWith('.md')) {
    parsePagePath(raw);
    const row = await findReadablePage(db, p, raw).catch(() => {
      throw noTarget(`Page ${raw}`);
    });
    if (!canWatchPage(p, pageFacts(row))) throw noTarget(`Page ${raw}`);
    return { target: `page:${row.id}`, kind: 'page', pageId: row.id, path: row.path };
  }
  const path = parseFolderPath(raw).path;
  const what = path.includes('/') ? `Folder ${path}` : `Space ${path}`;
  const ceiling = ceilingFor(p, 'read', path);
  if (ceiling === null) throw noTarget(what);
  if (!canWatchFolder(p, path, await folderSight(db, p, path, ceiling))) throw noTarget(what);
  return { target: `path:${path}`, kind: 'folder', pageId: null, path };
}

/**
 * Watches a page, folder or Space (idempotent: watching it again answers the same watch, now bound
 * to the credential used this time). At most WATCH_LIMITS.perPrincipal watches per principal.
 */
export async function watch(ctx: CoreContext, p: Principal, input: WatchTargetInput): Promise<{ watch: WatchRecord; created: boolean }> {
  return inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const t = await resolveTarget(trx, p, input);
    const existing = await trx
      .selectFrom('watches')
      .selectAll()
      .where('workspace_id', '=', p.workspaceId)
      .where('principal_id', '=', p.id)
      .where('target', '=', t.target)
      .executeTakeFirst();
    if (existing) {
      if (existing.key_id !== keyOf(p))
        await trx
          .updateTable('watches')
          .set({ key_id: keyOf(p) })
          .where('id', '=', existing.id)
          .execute();
      return { watch: { ...record(existing), path: t.path, delivering: true }, created: false };
    }
    const count = await trx
      .selectFrom('watches')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('workspace_id', '=', p.workspaceId)
      .where('principal_id', '=', p.id)
      .executeTakeFirstOrThrow();
    if (Number(count.n) >= WATCH_LIMITS.perPrincipal) {
      throw conflict(
        `You already hold ${WATCH_LIMITS.perPrincipal} watches, the most allowed; remove one (DELETE /api/v1/watches/:id or context_unwatch) or watch a folder that holds several of these pages`,
        'watch_limit',
      );
    }
    const row: WatchesTable = {
      id: newWatchId(),
      workspace_id: p.workspaceId,
      principal_id: p.id,
      key_id: keyOf(p),
      target: t.target,
      kind: t.kind,
      page_id: t.pageId,
      path: t.path,
      created_at: new Date().toISOString(),
    };
    await trx.insertInto('watches').values(row).execute();
    await appendAudit(trx, p.workspaceId, {
      principalId: p.id,
      action: 'watch.create',
      pageId: row.page_id,
      detail: { watch: row.id, kind: row.kind, path: row.path },
    });
    return { watch: record(row), created: true };
  });
}

function record(w: WatchesTable): WatchRecord {
  return { id: w.id, kind: w.kind, node_id: w.page_id, path: w.path, created_at: w.created_at, delivering: true };
}

/** The caller's watches in this workspace, oldest first, each saying whether it still delivers. */
export async function listWatches(ctx: CoreContext, p: Principal): Promise<WatchRecord[]> {
  const db = ctx.store.db;
  const rows = await db
    .selectFrom('watches')
    .selectAll()
    .where('workspace_id', '=', p.workspaceId)
    .where('principal_id', '=', p.id)
    .orderBy('created_at')
    .orderBy('id')
    .execute();
  const keys = await liveKeys(
    db,
    p.workspaceId,
    rows.map((r) => r.key_id).filter((k): k is string => k !== null),
    new Date(),
  );
  const pageIds = rows.map((r) => r.page_id).filter((x): x is string => x !== null);
  const pages = new Map<string, PagesTable>();
  if (pageIds.length > 0) {
    for (const pg of await db.selectFrom('pages').selectAll().where('workspace_id', '=', p.workspaceId).where('id', 'in', pageIds).execute())
      pages.set(pg.id, pg);
  }
  return rows.map((r) => {
    const keyOk = r.key_id === null || keys.has(r.key_id);
    if (r.kind === 'folder') return { ...record(r), delivering: keyOk && ceilingFor(p, 'read', r.path) !== null };
    const pg = r.page_id ? pages.get(r.page_id) : undefined;
    const sees = pg !== undefined && pg.deleted_at === null && canReadPage(p, pageFacts(pg));
    // Where the page is now, only when the caller may still see it there.
    return { ...record(r), path: sees ? pg.path : r.path, delivering: keyOk && sees };
  });
}

/**
 * Removes one of the caller's watches: by its id, or by what it watches (a page id or a path).
 * Someone else's watch, or a target the caller does not watch, is not_found.
 */
export async function unwatch(
  ctx: CoreContext,
  p: Principal,
  input: WatchTargetInput & { watch_id?: string | undefined },
): Promise<{ id: string; removed: true }> {
  const given = [input.watch_id, input.node_id, input.path].filter((x) => x !== undefined);
  if (given.length !== 1) throw badRequest('Name the watch with exactly one of watch_id, node_id (a page id) or path');
  return inTransaction(ctx.store, p.workspaceId, async (trx) => {
    let q = trx.selectFrom('watches').select(['id', 'target']).where('workspace_id', '=', p.workspaceId).where('principal_id', '=', p.id);
    let what: string;
    if (input.watch_id !== undefined) {
      if (!WATCH_ID.test(input.watch_id)) throw notFound(`Watch ${input.watch_id} not found`);
      q = q.where('id', '=', input.watch_id);
      what = `Watch ${input.watch_id}`;
    } else if (input.node_id !== undefined) {
      if (!isPageId(input.node_id)) throw badRequest('node_id must be a page id (pg_…); for a path use path');
      q = q.where('target', '=', `page:${input.node_id}`);
      what = `A watch on ${input.node_id}`;
    } else {
      const raw = input.path!.replace(/^\/+|\/+$/g, '');
      if (raw.endsWith('.md')) {
        parsePagePath(raw);
        const row = await findReadablePage(trx, p, raw).catch(() => {
          throw notFound(`A watch on ${raw} not found`);
        });
        q = q.where('target', '=', `page:${row.id}`);
      } else {
        q = q.where('target', '=', `path:${parseFolderPath(raw).path}`);
      }
      what = `A watch on ${raw}`;
    }
    const row = await q.executeTakeFirst();
    if (!row) throw notFound(`${what} not found (context_watches / GET /api/v1/watches lists yours)`);
    await trx.deleteFrom('watches').where('id', '=', row.id).execute();
    const pageId = row.target.startsWith('page:') ? row.target.slice('page:'.length) : null;
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'watch.delete', pageId, detail: { watch: row.id, target: row.target } });
    return { id: row.id, removed: true as const };
  });
}

// ---------------------------------------------------------------------------------------------
// Delivery, inside the page change's transaction.
// ---------------------------------------------------------------------------------------------

export interface WatchedChange {
  action: 'create' | 'update' | 'move' | 'archive' | 'restore' | 'delete';
  /** The page row after the change (for a delete: its last version, `deleted_at` set). */
  row: PagesTable;
  /** The page row before the change (null for a create). */
  before: PagesTable | null;
  /** Who applied it, and the author credited when that is someone else (an accepted proposal). */
  actor: Pick<Principal, 'id' | 'name' | 'kind'>;
  author?: { id: string; name: string } | undefined;
  at: Date;
}

interface ParsedPayload {
  [k: string]: unknown;
}

function parse(json: string): ParsedPayload {
  try {
    const v: unknown = JSON.parse(json);
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as ParsedPayload) : {};
  } catch {
    return {};
  }
}

/** What delivery needs of each watcher's inbox: its next seq, its unread event about the page, its watch events in the window. */
interface WatcherInbox {
  next: number;
  unread: { seq: number; payload: string } | undefined;
  recent: number;
}

/** Three queries whatever the number of watchers (each served by an index of inbox_events). */
async function inboxesOf(
  trx: Transaction<DB>,
  workspaceId: string,
  ids: readonly string[],
  pageId: string,
  windowStart: string,
): Promise<Map<string, WatcherInbox>> {
  const out = new Map<string, WatcherInbox>(ids.map((id) => [id, { next: 1, unread: undefined, recent: 0 }]));
  const events = () => trx.selectFrom('inbox_events').where('workspace_id', '=', workspaceId).where('principal_id', 'in', ids);
  for (const r of await events()
    .select(['principal_id', (eb) => eb.fn.max('seq').as('seq')])
    .groupBy('principal_id')
    .execute())
    out.get(r.principal_id)!.next = Number(r.seq ?? 0) + 1;
  for (const r of await events()
    .select(['principal_id', 'seq', 'payload'])
    .where('page_id', '=', pageId)
    .where('kind', '=', 'page_changed')
    .where('state', '=', 'unread')
    .execute()) {
    const w = out.get(r.principal_id)!;
    if (!w.unread || r.seq > w.unread.seq) w.unread = { seq: r.seq, payload: r.payload };
  }
  for (const r of await events()
    .select(['principal_id', (eb) => eb.fn.countAll<number>().as('n')])
    .where('kind', '=', 'page_changed')
    .where('created_at', '>=', windowStart)
    .groupBy('principal_id')
    .execute())
    out.get(r.principal_id)!.recent = Number(r.n);
  return out;
}

/**
 * Places (or folds into an unread one) the watcher's event about this change. An unread event
 * about the same page is updated and moved to the end of the inbox (a new seq, so a client
 * reading `after` its cursor sees it again); otherwise a new event, unless the watcher already got
 * WATCH_LIMITS.eventsPerWindow of them in the window, when the change is counted in the watcher's
 * unread digest event (a new one if none is unread). Nothing grows without bound, and nothing is
 * dropped without a trace.
 */
async function placeEvent(
  trx: Transaction<DB>,
  workspaceId: string,
  watcherId: string,
  watchId: string,
  change: WatchedChange,
  from: string | null,
  inbox: WatcherInbox,
): Promise<void> {
  const at = change.at.toISOString();
  const now: ParsedPayload = {
    path: change.row.path,
    title: change.row.title,
    action: change.action,
    commit_sha: change.row.commit_sha,
    actor: { id: change.actor.id, name: change.actor.name, kind: change.actor.kind },
    ...(change.author && change.author.id !== change.actor.id ? { author: change.author } : {}),
    ...(from ? { from } : {}),
    watch_id: watchId,
  };
  const { unread, next: seq } = inbox;
  if (unread) {
    const old = parse(unread.payload);
    const payload: ParsedPayload = {
      ...now,
      changes: (typeof old.changes === 'number' ? old.changes : 1) + 1,
      since: typeof old.since === 'string' ? old.since : at,
    };
    // A move's `from` is where the watcher last knew the page: keep the first one.
    if (typeof old.from === 'string') payload.from = old.from;
    await renewEvent(trx, { workspaceId, watcherId, seq, at }, unread.seq, payload);
    return;
  }
  if (inbox.recent < WATCH_LIMITS.eventsPerWindow) {
    await addEvent(trx, { workspaceId, watcherId, seq, at }, 'page_changed', change.row.id, { ...now, changes: 1, since: at });
    return;
  }
  // Over the bound: counted, never listed one by one (and no page named: it may be out of sight by the time it is read).
  const digest = await trx
    .selectFrom('inbox_events')
    .select(['seq', 'payload'])
    .where('workspace_id', '=', workspaceId)
    .where('principal_id', '=', watcherId)
    .where('kind', '=', 'watch_digest')
    .where('state', '=', 'unread')
    .orderBy('seq', 'desc')
    .limit(1)
    .executeTakeFirst();
  const old = digest ? parse(digest.payload) : {};
  const payload = {
    changes: (typeof old.changes === 'number' ? old.changes : 0) + 1,
    since: typeof old.since === 'string' ? old.since : at,
    first_commit: typeof old.first_commit === 'string' ? old.first_commit : change.row.commit_sha,
    last_commit: change.row.commit_sha,
    note: `More than ${WATCH_LIMITS.eventsPerWindow} watched changes arrived within an hour; these are counted here instead of one event each. Catch up from first_commit (page history or the changes since a cursor).`,
  };
  if (digest) await renewEvent(trx, { workspaceId, watcherId, seq, at }, digest.seq, payload);
  else await addEvent(trx, { workspaceId, watcherId, seq, at }, 'watch_digest', null, payload);
}

/** Where and when a watch event is written: the watcher's inbox, its next seq, the change's time. */
interface EventSlot {
  workspaceId: string;
  watcherId: string;
  seq: number;
  at: string;
}

/** An unread event absorbs one more change: new payload, and a new seq so a reader past its cursor sees it again. */
async function renewEvent(trx: Transaction<DB>, slot: EventSlot, oldSeq: number, payload: object): Promise<void> {
  await trx
    .updateTable('inbox_events')
    .set({ seq: slot.seq, payload: JSON.stringify(payload), created_at: slot.at })
    .where('workspace_id', '=', slot.workspaceId)
    .where('principal_id', '=', slot.watcherId)
    .where('seq', '=', oldSeq)
    .execute();
}

async function addEvent(trx: Transaction<DB>, slot: EventSlot, kind: 'page_changed' | 'watch_digest', pageId: string | null, payload: object): Promise<void> {
  await trx
    .insertInto('inbox_events')
    .values({
      workspace_id: slot.workspaceId,
      principal_id: slot.watcherId,
      seq: slot.seq,
      kind,
      state: 'unread',
      page_id: pageId,
      proposal_id: null,
      payload: JSON.stringify(payload),
      created_at: slot.at,
      read_at: null,
      done_at: null,
    })
    .execute();
}

/**
 * Tells the watchers of a page change, inside its transaction (called by commitPage). One indexed
 * query finds the watches on the page and on every folder above its old and new paths; nothing
 * else runs when there is none. Each watcher is judged with their access now: a deleted or
 * suspended principal, a watch made with a key that is dead now, a page they may not read (above
 * their ceiling, outside their grants, moved out of their sight) — no event. The actor (and the
 * credited author) are never told of their own change.
 */
/** Every page write asks this (store/built-once.ts: built once per number of targets). */
const watchesOn = builtOnce((db, v: { ws: string; targets: string[] }) =>
  db.selectFrom('watches').select(['id', 'principal_id', 'key_id']).where('workspace_id', '=', v.ws).where('target', 'in', v.targets),
);

/**
 * `carried`: the change's writes whose results nobody reads (its links, version row, audit
 * entry...), sent with the lookup of the watches, which reads none of them (store/carried.ts).
 */
export async function deliverWatchEvents(
  ctx: CoreContext,
  trx: Transaction<DB>,
  workspaceId: string,
  change: WatchedChange,
  carried: readonly CompiledQuery[] = [],
): Promise<void> {
  const targets = new Set([`page:${change.row.id}`, ...folderTargets(change.row.path)]);
  if (change.before && change.before.path !== change.row.path) for (const t of folderTargets(change.before.path)) targets.add(t);
  const watches = (await executeCarrying(trx, carried, watchesOn.compiled(trx, { ws: workspaceId, targets: [...targets] }))).rows;
  const actorIds = [change.actor.id, ...(change.author ? [change.author.id] : [])];
  const relevant = watches.filter((w) => !actorIds.includes(w.principal_id));
  if (relevant.length === 0) return;

  const keys = await liveKeys(
    trx,
    workspaceId,
    relevant.map((w) => w.key_id).filter((k): k is string => k !== null),
    change.at,
  );
  // Per watcher: the first of their matching watches that still holds, and the widest ceiling among them.
  const byWatcher = new Map<string, { watchId: string; keyCeiling: Level | null }>();
  for (const w of relevant) {
    if (w.key_id !== null && !keys.has(w.key_id)) continue;
    const ceiling = w.key_id === null ? null : keys.get(w.key_id)!;
    const prev = byWatcher.get(w.principal_id);
    if (!prev) byWatcher.set(w.principal_id, { watchId: w.id, keyCeiling: ceiling });
    else prev.keyCeiling = prev.keyCeiling === null || ceiling === null ? null : rank(ceiling) > rank(prev.keyCeiling) ? ceiling : prev.keyCeiling;
  }
  if (byWatcher.size === 0) return;
  const principals = await loadPrincipals(trx, workspaceId, [...byWatcher.keys()], change.at);
  const told: { id: string; watchId: string; from: string | null }[] = [];
  for (const [watcherId, w] of byWatcher) {
    const base = principals.get(watcherId);
    if (!base) continue;
    const watcher: Principal = { ...base, keyCeiling: w.keyCeiling };
    if (!watchDelivers(watcher, actorIds, pageFacts(change.row))) continue;
    const from = change.before && change.before.path !== change.row.path && revealsOldPath(watcher, pageFacts(change.before)) ? change.before.path : null;
    told.push({ id: watcherId, watchId: w.watchId, from });
  }
  if (told.length === 0) return;
  const windowStart = new Date(change.at.getTime() - WATCH_LIMITS.windowMs).toISOString();
  const inboxes = await inboxesOf(
    trx,
    workspaceId,
    told.map((t) => t.id),
    change.row.id,
    windowStart,
  );
  for (const t of told) await placeEvent(trx, workspaceId, t.id, t.watchId, change, t.from, inboxes.get(t.id)!);
  await wakeInboxes(
    ctx,
    trx,
    workspaceId,
    told.map((t) => t.id),
  );
}
