import { ulid } from 'ulid';
import { canReadPage, enforce, type PageFacts } from '../policy/pages.js';
import type { Principal } from '../policy/principal.js';
import { afterPost, decidePost, decidePostWhenLocked, decideUnlock } from '../policy/threads.js';
import { findReadablePage } from '../retrieval/lookup.js';
import type { Executor } from '../store/db.js';
import type { PagesTable, ThreadMessagesTable } from '../store/schema.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { badRequest } from './errors.js';
import { pushEvents, type NewEvent } from './inbox-events.js';
import { withSuggestion } from './pages/read.js';
import { liveMembers, loadPrincipals, workspacePrincipals, type WorkspacePrincipal } from './principal-loader.js';

/**
 * Threads on pages (spec §3 Thread, §4 "Threads and inbox"): one thread per page, messages
 * numbered per page, mentions and replies delivered as inbox events to those who can read the
 * page, and the loop breaker of policy/threads.ts. Everything attached to a page follows the
 * page's visibility: a page the caller cannot read has no thread for them (404).
 */

export const THREAD_KINDS = ['comment', 'question', 'answer'] as const;
export type ThreadKind = (typeof THREAD_KINDS)[number];

export const MAX_BODY_CHARS = 20_000;
export const MAX_MENTIONS = 50;
/** Length of the body excerpt carried by mention and reply events. */
export const EXCERPT_CHARS = 200;

export interface Author {
  id: string;
  name: string;
  kind: 'human' | 'agent';
}

export interface ThreadMessage {
  id: string;
  seq: number;
  author: Author;
  kind: ThreadKind;
  body: string;
  reply_to: string | null;
  /** Principal ids, as resolved when the message was posted. */
  mentions: string[];
  created_at: string;
}

export interface ThreadState {
  page_id: string;
  path: string;
  locked: boolean;
  locked_at: string | null;
  agent_hops: number;
  /** Messages by others after the caller's last read. */
  unread: number;
  last_read_seq: number;
}

export interface ThreadView extends ThreadState {
  messages: ThreadMessage[];
  /** Pass as `after` for the next messages; null when there are no more. */
  next_after: number | null;
}

export interface PostInput {
  body: string;
  kind?: ThreadKind | undefined;
  reply_to?: string | null | undefined;
  mentions?: readonly string[] | undefined;
}

const newMessageId = () => `tm_${ulid().toLowerCase()}`;

const facts = (page: PagesTable): PageFacts => ({ path: page.path, sensitivity: page.sensitivity, blockLevel: page.block_level });

function parseMentions(json: string): string[] {
  try {
    const v: unknown = JSON.parse(json);
    return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
  } catch {
    return [];
  }
}

/** The first EXCERPT_CHARS characters of the body, whitespace collapsed. */
export function excerptOf(body: string): string {
  const flat = body.replace(/\s+/g, ' ').trim();
  const chars = [...flat];
  return chars.length <= EXCERPT_CHARS ? flat : `${chars.slice(0, EXCERPT_CHARS - 1).join('')}…`;
}

const foldName = (s: string) => s.normalize('NFC').trim().toLowerCase();

/**
 * Resolves mentions (principal ids, or `@name` matching a display name case-insensitively)
 * against the workspace's live principals. Unknown → 400 `unknown_mention`; a name that
 * more than one principal carries → 400 `ambiguous_mention` (mention by id instead).
 * Membership of the workspace is no secret to its members (GET /api/v1/principals).
 */
export function resolveMentions(entries: readonly string[], people: readonly WorkspacePrincipal[]): string[] {
  const byId = new Map(people.map((x) => [x.id, x]));
  const out: string[] = [];
  for (const raw of entries) {
    const entry = raw.trim();
    let id: string;
    if (entry.startsWith('@')) {
      const name = foldName(entry.slice(1));
      const hits = people.filter((x) => foldName(x.name) === name);
      if (hits.length === 0) throw badRequest(`No one in this workspace is called ${entry}`, 'unknown_mention', { mention: raw });
      if (hits.length > 1) {
        throw badRequest(`${hits.length} principals are called ${entry}; mention them by id (${hits.map((h) => h.id).join(', ')})`, 'ambiguous_mention', {
          mention: raw,
        });
      }
      id = hits[0]!.id;
    } else {
      if (!byId.has(entry)) {
        throw badRequest(`Mention ${entry} is not a principal id of this workspace (use an id, or @name)`, 'unknown_mention', { mention: raw });
      }
      id = entry;
    }
    if (!out.includes(id)) out.push(id);
  }
  return out;
}

/** `@` tokens looked at in one body at most (a body is up to MAX_BODY_CHARS long). */
const BODY_MENTIONS_SCANNED = 200;

/**
 * The principals a body names with `@name` (a display name, case-insensitive, ending at a
 * character that cannot continue a name; a longer name wins, so `@Ann Lee` is not `@Ann`).
 * An `@` right after a letter or digit (an e-mail address) is no mention, and a name that is
 * unknown or that several principals carry is just text.
 */
export function bodyMentions(body: string, people: readonly WorkspacePrincipal[]): string[] {
  if (people.length === 0 || !body.includes('@')) return [];
  const byName = new Map<string, string[]>();
  for (const x of people) {
    const n = foldName(x.name);
    if (n !== '') byName.set(n, [...(byName.get(n) ?? []), x.id]);
  }
  const names = [...byName.keys()].sort((a, b) => b.length - a.length);
  const text = body.normalize('NFC').toLowerCase();
  const out: string[] = [];
  let scanned = 0;
  for (let at = text.indexOf('@'); at >= 0 && scanned < BODY_MENTIONS_SCANNED; at = text.indexOf('@', at + 1), scanned++) {
    if (at > 0 && /[\p{L}\p{N}_.@]/u.test(text[at - 1]!)) continue;
    for (const n of names) {
      if (!text.startsWith(n, at + 1)) continue;
      const after = text.slice(at + 1 + n.length, at + 3 + n.length);
      if (after !== '' && /^[\p{L}\p{N}_-]/u.test(after)) continue;
      const ids = byName.get(n)!;
      if (ids.length === 1 && !out.includes(ids[0]!)) out.push(ids[0]!);
      break;
    }
  }
  return out;
}

/**
 * `thread_locked` events for the people who can unlock the thread: the workspace's editors and
 * owners who can read the page.
 */
async function lockEvents(db: Executor, p: Principal, page: PagesTable, author: Author, at: string, agentHops: number): Promise<NewEvent[]> {
  const unlockers = await liveMembers(db, p.workspaceId).select('principals.id').where('members.role', 'in', ['editor', 'owner']).execute();
  const loaded = await loadPrincipals(
    db,
    p.workspaceId,
    unlockers.map((u) => u.id),
  );
  const out: NewEvent[] = [];
  for (const who of loaded.values()) {
    if (who.kind !== 'human' || !canReadPage(who, facts(page))) continue;
    out.push({
      principalId: who.id,
      kind: 'thread_locked',
      pageId: page.id,
      payload: {
        page_id: page.id,
        path: page.path,
        locked_at: at,
        agent_hops: agentHops,
        last_author: author,
        unlock: `POST /api/v1/nodes/${page.id}/threads/unlock`,
      },
    });
  }
  return out;
}

async function threadRow(db: Executor, pageId: string) {
  return db.selectFrom('threads').selectAll().where('page_id', '=', pageId).executeTakeFirst();
}

async function lastSeq(db: Executor, pageId: string): Promise<number> {
  const r = await db
    .selectFrom('thread_messages')
    .select((eb) => eb.fn.max('seq').as('seq'))
    .where('page_id', '=', pageId)
    .executeTakeFirst();
  return Number(r?.seq ?? 0);
}

async function stateOf(db: Executor, p: Principal, page: PagesTable): Promise<ThreadState> {
  const t = await threadRow(db, page.id);
  const read = await db.selectFrom('thread_reads').select('last_seq').where('page_id', '=', page.id).where('principal_id', '=', p.id).executeTakeFirst();
  const lastRead = read?.last_seq ?? 0;
  const unread = await db
    .selectFrom('thread_messages')
    .select((eb) => eb.fn.countAll().as('n'))
    .where('page_id', '=', page.id)
    .where('seq', '>', lastRead)
    .where('author_id', '!=', p.id)
    .executeTakeFirst();
  return {
    page_id: page.id,
    path: page.path,
    locked: !!t?.locked_at,
    locked_at: t?.locked_at ?? null,
    agent_hops: t?.agent_hops ?? 0,
    unread: Number(unread?.n ?? 0),
    last_read_seq: lastRead,
  };
}

async function present(db: Executor, rows: ThreadMessagesTable[]): Promise<ThreadMessage[]> {
  const ids = [...new Set(rows.map((r) => r.author_id))];
  const names = new Map<string, string>();
  if (ids.length > 0) {
    for (const a of await db.selectFrom('principals').select(['id', 'name']).where('id', 'in', ids).execute()) names.set(a.id, a.name);
  }
  return rows.map((r) => ({
    id: r.id,
    seq: r.seq,
    author: { id: r.author_id, name: names.get(r.author_id) ?? r.author_id, kind: r.author_kind },
    kind: r.kind,
    body: r.body,
    reply_to: r.reply_to,
    mentions: parseMentions(r.mentions),
    created_at: r.created_at,
  }));
}

/** The page's thread: messages in order (paged by seq) and the state, with the caller's unread count. */
export async function getThread(ctx: CoreContext, p: Principal, ref: string, opts: { after?: number; limit?: number } = {}): Promise<ThreadView> {
  const db = ctx.store.db;
  const page = await findReadablePage(db, p, ref);
  const limit = opts.limit ?? 200;
  const rows = await db
    .selectFrom('thread_messages')
    .selectAll()
    .where('page_id', '=', page.id)
    .where('seq', '>', opts.after ?? 0)
    .orderBy('seq')
    .limit(limit + 1)
    .execute();
  const more = rows.length > limit;
  const shown = rows.slice(0, limit);
  return {
    ...(await stateOf(db, p, page)),
    messages: await present(db, shown),
    next_after: more ? shown[shown.length - 1]!.seq : null,
  };
}

export interface PostResult extends ThreadMessage {
  thread: { locked: boolean; locked_at: string | null; agent_hops: number };
}

/**
 * Posts a message. One transaction holds the message, the thread's loop-breaker state, the
 * mention and reply events and the audit entry. Events go only to principals who can read
 * the page; the author is never told who got one.
 */
export async function postMessage(ctx: CoreContext, p: Principal, ref: string, input: PostInput): Promise<PostResult> {
  const kind = input.kind ?? 'comment';
  const mentionsIn = input.mentions ?? [];
  if (mentionsIn.length > MAX_MENTIONS) throw badRequest(`At most ${MAX_MENTIONS} mentions per message`);
  if (input.body.trim().length === 0 || input.body.length > MAX_BODY_CHARS) {
    throw badRequest(`A message body has 1 to ${MAX_BODY_CHARS} characters and is not blank`);
  }
  const now = new Date();
  const at = now.toISOString();
  return inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const page = await findReadablePage(trx, p, ref).catch((e: unknown) => withSuggestion(trx, p, ref, e));
    const pf = facts(page);
    enforce(decidePost(p, pf));
    const t = await threadRow(trx, page.id);
    const state = { agentHops: t?.agent_hops ?? 0, locked: !!t?.locked_at };
    enforce(decidePostWhenLocked(p, state));

    let repliedAuthor: string | null = null;
    if (input.reply_to) {
      const parent = await trx
        .selectFrom('thread_messages')
        .select(['id', 'author_id'])
        .where('id', '=', input.reply_to)
        .where('page_id', '=', page.id)
        .executeTakeFirst();
      if (!parent) throw badRequest(`reply_to ${input.reply_to} is not a message of this page's thread`, 'unknown_reply_to');
      repliedAuthor = parent.author_id;
    }
    // mentions[] is checked strictly; `@name` in the body mentions too, unknown names being just text (issue 13).
    const people = mentionsIn.length > 0 || input.body.includes('@') ? await workspacePrincipals(trx, p.workspaceId) : [];
    const mentions = mentionsIn.length > 0 ? resolveMentions(mentionsIn, people) : [];
    for (const id of bodyMentions(input.body, people)) if (!mentions.includes(id) && mentions.length < MAX_MENTIONS) mentions.push(id);

    const seq = (await lastSeq(trx, page.id)) + 1;
    const id = newMessageId();
    await trx
      .insertInto('thread_messages')
      .values({
        id,
        workspace_id: p.workspaceId,
        page_id: page.id,
        seq,
        author_id: p.id,
        author_kind: p.kind,
        kind,
        body: input.body,
        reply_to: input.reply_to ?? null,
        mentions: JSON.stringify(mentions),
        created_at: at,
      })
      .execute();

    const next = afterPost(state, p.kind);
    const lockedAt = next.lockNow ? at : (t?.locked_at ?? null);
    if (t) {
      await trx.updateTable('threads').set({ agent_hops: next.agentHops, locked_at: lockedAt }).where('page_id', '=', page.id).execute();
    } else {
      await trx
        .insertInto('threads')
        .values({ page_id: page.id, workspace_id: p.workspaceId, agent_hops: next.agentHops, locked_at: lockedAt, unlocked_by: null, unlocked_at: null })
        .execute();
    }

    // One event per recipient and message: `reply` for the author replied to (flagged when
    // also mentioned), `mention` for the others; never to the author; only if they can read
    // the page. Someone who cannot read it gets nothing, and the author is not told.
    const recipients = new Map<string, 'reply' | 'mention'>();
    if (repliedAuthor && repliedAuthor !== p.id) recipients.set(repliedAuthor, 'reply');
    for (const m of mentions) if (m !== p.id && !recipients.has(m)) recipients.set(m, 'mention');
    const loaded = await loadPrincipals(trx, p.workspaceId, [...recipients.keys()], now);
    const author: Author = { id: p.id, name: p.name, kind: p.kind };
    const excerpt = excerptOf(input.body);
    const events: NewEvent[] = [];
    for (const [rid, ekind] of recipients) {
      const who = loaded.get(rid);
      if (!who || !canReadPage(who, pf)) continue;
      events.push({
        principalId: rid,
        kind: ekind,
        pageId: page.id,
        payload: {
          page_id: page.id,
          path: page.path,
          message_id: id,
          seq,
          author,
          kind,
          excerpt,
          ...(ekind === 'reply' ? { reply_to: input.reply_to, mentioned: mentions.includes(rid) } : {}),
        },
      });
    }
    // The post that locks the thread tells the people who can unlock it, once per lock.
    if (next.lockNow) events.push(...(await lockEvents(trx, p, page, { id: p.id, name: p.name, kind: p.kind }, at, next.agentHops)));
    await pushEvents(ctx, trx, p.workspaceId, events, now);
    await appendAudit(
      trx,
      p.workspaceId,
      {
        principalId: p.id,
        action: 'thread.post',
        pageId: page.id,
        detail: { message: id, seq, kind, ...(input.reply_to ? { reply_to: input.reply_to } : {}), ...(next.lockNow ? { locked: true } : {}) },
      },
      now,
    );
    return {
      id,
      seq,
      author,
      kind,
      body: input.body,
      reply_to: input.reply_to ?? null,
      mentions,
      created_at: at,
      thread: { locked: lockedAt !== null, locked_at: lockedAt, agent_hops: next.agentHops },
    };
  });
}

/** Marks the thread read for the caller up to its latest message. */
export async function markThreadRead(ctx: CoreContext, p: Principal, ref: string): Promise<ThreadState> {
  const page = await findReadablePage(ctx.store.db, p, ref);
  const at = new Date().toISOString();
  return inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const seq = await lastSeq(trx, page.id);
    await trx
      .insertInto('thread_reads')
      .values({ page_id: page.id, principal_id: p.id, last_seq: seq, read_at: at })
      .onConflict((oc) => oc.columns(['page_id', 'principal_id']).doUpdateSet({ last_seq: seq, read_at: at }))
      .execute();
    return stateOf(trx, p, page);
  });
}

/**
 * Lifts the loop breaker's lock and resets the hop count (editor or owner, signed in).
 * Unlocking a thread that is not locked changes nothing and answers `changed: false`.
 */
export async function unlockThread(
  ctx: CoreContext,
  p: Principal,
  ref: string,
): Promise<ThreadState & { changed: boolean; unlocked_by: string | null; unlocked_at: string | null }> {
  enforce(decideUnlock(p));
  const now = new Date();
  return inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const page = await findReadablePage(trx, p, ref);
    const t = await threadRow(trx, page.id);
    let changed = false;
    if (t?.locked_at) {
      await trx
        .updateTable('threads')
        .set({ locked_at: null, agent_hops: 0, unlocked_by: p.id, unlocked_at: now.toISOString() })
        .where('page_id', '=', page.id)
        .execute();
      await appendAudit(
        trx,
        p.workspaceId,
        { principalId: p.id, action: 'thread.unlock', pageId: page.id, detail: { locked_at: t.locked_at, agent_hops: t.agent_hops } },
        now,
      );
      changed = true;
    }
    const after = await threadRow(trx, page.id);
    return { ...(await stateOf(trx, p, page)), changed, unlocked_by: after?.unlocked_by ?? null, unlocked_at: after?.unlocked_at ?? null };
  });
}
