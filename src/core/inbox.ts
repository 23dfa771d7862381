import { canReadPage } from '../policy/pages.js';
import type { Principal } from '../policy/principal.js';
import { canSeeProposal } from '../policy/proposals.js';
import type { Executor } from '../store/db.js';
import type { InboxEventsTable } from '../store/schema.js';
import { inTransaction } from '../store/tx.js';
import type { CoreContext } from './context.js';
import { badRequest } from './errors.js';
import { Notifier } from './notifier.js';

/**
 * Each principal's inbox in a workspace (spec §3 Inbox item, §6): events with a seq that
 * grows per principal, states unread → read → done, long-poll woken by the notifier. Shared
 * by the REST face (which only peeks) and MCP's collab_inbox (which marks what it returns
 * read). Events are created by pushEvents (inbox-events.ts) inside the change that causes them.
 */

export const INBOX_STATES = ['unread', 'read', 'done', 'all'] as const;
export type InboxStateFilter = (typeof INBOX_STATES)[number];

export const INBOX_MAX_LIMIT = 100;
export const INBOX_DEFAULT_LIMIT = 50;
/** REST long-poll bound (spec §8); MCP's is 20 s and is checked by its face. */
export const INBOX_MAX_WAIT_S = 25;
export const ACK_MAX_SEQS = 1000;
/** Events looked at per call at most, hidden ones included, so a long run of invisible events cannot make one call slow. */
const SCAN_MAX = 1000;

export interface InboxEvent {
  seq: number;
  kind: InboxEventsTable['kind'];
  /** The state when the event was listed (before a `markRead` listing marked it read). */
  state: InboxEventsTable['state'];
  created_at: string;
  page_id: string | null;
  proposal_id: string | null;
  payload: Record<string, unknown>;
}

export interface InboxPage {
  events: InboxEvent[];
  /** The highest seq looked at (hidden events included): pass it as `after` next time. */
  next_after: number;
}

export interface ListInboxOptions {
  state?: InboxStateFilter | undefined;
  after?: number | undefined;
  limit?: number | undefined;
  /** Long-poll: when nothing is there, wait up to this long for an event (0: answer at once). */
  waitMs?: number | undefined;
  /** Ends the wait early (the client went away, the server is closing). */
  signal?: AbortSignal | undefined;
  /** Mark the unread events returned as read (MCP's collab_inbox); REST leaves them unread. */
  markRead?: boolean | undefined;
}

function parsePayload(json: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(json);
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/**
 * Which of these events the caller may see now: an event about a page (or a proposal) the
 * caller can no longer read is left out, judged at read time with the caller's current
 * grants, role and key ceiling. A deleted page is judged by its last version (history by id
 * stays readable), so a proposal's outcome on a page deleted since still arrives.
 */
async function visibleFilter(db: Executor, p: Principal, rows: InboxEventsTable[]): Promise<(r: InboxEventsTable) => boolean> {
  const pageIds = [...new Set(rows.map((r) => r.page_id).filter((x): x is string => !!x))];
  const proposalIds = [...new Set(rows.map((r) => r.proposal_id).filter((x): x is string => !!x))];
  const pages = new Map<string, boolean>();
  if (pageIds.length > 0) {
    const found = await db
      .selectFrom('pages')
      .select(['id', 'path', 'sensitivity', 'block_level'])
      .where('workspace_id', '=', p.workspaceId)
      .where('id', 'in', pageIds)
      .execute();
    for (const pg of found) pages.set(pg.id, canReadPage(p, { path: pg.path, sensitivity: pg.sensitivity, blockLevel: pg.block_level }));
  }
  const proposals = new Map<string, boolean>();
  if (proposalIds.length > 0) {
    const found = await db
      .selectFrom('proposals')
      .select(['id', 'path', 'sensitivity', 'origin', 'proposer_id'])
      .where('workspace_id', '=', p.workspaceId)
      .where('id', 'in', proposalIds)
      .execute();
    for (const pr of found) {
      proposals.set(pr.id, canSeeProposal(p, { path: pr.path, sensitivity: pr.sensitivity, origin: pr.origin, proposerId: pr.proposer_id }));
    }
  }
  return (r) => (!r.page_id || pages.get(r.page_id) === true) && (!r.proposal_id || proposals.get(r.proposal_id) === true);
}

/** One look at the inbox: up to `limit` visible events after `after`. */
async function scan(
  ctx: CoreContext,
  p: Principal,
  state: InboxStateFilter,
  after: number,
  limit: number,
): Promise<{ rows: InboxEventsTable[]; next_after: number }> {
  const db = ctx.store.db;
  const out: InboxEventsTable[] = [];
  let cursor = after;
  let scanned = 0;
  for (;;) {
    const batch = Math.min(Math.max(limit, 50), SCAN_MAX - scanned);
    let q = db.selectFrom('inbox_events').selectAll().where('workspace_id', '=', p.workspaceId).where('principal_id', '=', p.id).where('seq', '>', cursor);
    if (state !== 'all') q = q.where('state', '=', state);
    const rows = await q.orderBy('seq').limit(batch).execute();
    const visible = await visibleFilter(db, p, rows);
    for (const r of rows) {
      cursor = r.seq;
      scanned++;
      if (visible(r)) out.push(r);
      if (out.length >= limit) return { rows: out, next_after: cursor };
    }
    if (rows.length < batch || scanned >= SCAN_MAX) return { rows: out, next_after: cursor };
  }
}

/** Marks the listed unread events read, in one transaction. */
async function markListedRead(ctx: CoreContext, p: Principal, seqs: number[]): Promise<void> {
  if (seqs.length === 0) return;
  const at = new Date().toISOString();
  await inTransaction(ctx.store, p.workspaceId, (trx) =>
    trx
      .updateTable('inbox_events')
      .set({ state: 'read', read_at: at })
      .where('workspace_id', '=', p.workspaceId)
      .where('principal_id', '=', p.id)
      .where('seq', 'in', seqs)
      .where('state', '=', 'unread')
      .execute(),
  );
}

/** An AbortController that also aborts when `outer` does. */
function linked(outer: AbortSignal | undefined): AbortController {
  const ac = new AbortController();
  if (outer?.aborted) ac.abort();
  else outer?.addEventListener('abort', () => ac.abort(), { once: true });
  return ac;
}

/**
 * The caller's events in this workspace with seq > after, in seq order, filtered by state
 * (default unread). With `waitMs` and nothing to answer, waits on the notifier (no polling)
 * and answers as soon as an event arrives, or empty when the wait runs out. The waiter is
 * registered before each look, so an event committed between the look and the wait is not
 * missed.
 */
export async function listInbox(ctx: CoreContext, p: Principal, opts: ListInboxOptions = {}): Promise<InboxPage> {
  const state = opts.state ?? 'unread';
  const limit = opts.limit ?? INBOX_DEFAULT_LIMIT;
  if (!Number.isInteger(limit) || limit < 1 || limit > INBOX_MAX_LIMIT) throw badRequest(`limit must be 1 to ${INBOX_MAX_LIMIT}`);
  let after = opts.after ?? 0;
  if (!Number.isInteger(after) || after < 0) throw badRequest('after must be a whole number, 0 or more');
  const waitMs = Math.max(0, opts.waitMs ?? 0);
  const deadline = Date.now() + waitMs;
  const key = Notifier.key(p.workspaceId, p.id);

  for (;;) {
    const remaining = deadline - Date.now();
    const waiter = remaining > 0 && !opts.signal?.aborted ? linked(opts.signal) : null;
    const woken = waiter ? ctx.notifier.wait(key, remaining, waiter.signal) : null;
    let found: Awaited<ReturnType<typeof scan>>;
    try {
      found = await scan(ctx, p, state, after, limit);
    } catch (e) {
      waiter?.abort();
      throw e;
    }
    after = found.next_after;
    if (found.rows.length > 0 || !woken) {
      waiter?.abort();
      if (opts.markRead)
        await markListedRead(
          ctx,
          p,
          found.rows.filter((r) => r.state === 'unread').map((r) => r.seq),
        );
      return {
        events: found.rows.map((r) => ({
          seq: r.seq,
          kind: r.kind,
          state: r.state,
          created_at: r.created_at,
          page_id: r.page_id,
          proposal_id: r.proposal_id,
          payload: parsePayload(r.payload),
        })),
        next_after: found.next_after,
      };
    }
    // Nothing yet: sleep until an event for this principal is committed, the time is up, or the client leaves.
    if (!(await woken)) return { events: [], next_after: after };
  }
}

/**
 * Marks events done: every event with seq ≤ up_to, or exactly the listed seqs (give one of
 * the two). Answers how many events became done (already done ones are not counted).
 */
export async function ackInbox(
  ctx: CoreContext,
  p: Principal,
  input: { up_to?: number | undefined; seqs?: readonly number[] | undefined },
): Promise<{ done: number }> {
  const hasUpTo = input.up_to !== undefined && input.up_to !== null;
  const hasSeqs = input.seqs !== undefined && input.seqs !== null;
  if (hasUpTo === hasSeqs) throw badRequest('Send exactly one of up_to or seqs');
  if (hasUpTo && (!Number.isInteger(input.up_to) || input.up_to! < 0)) throw badRequest('up_to must be a whole number, 0 or more');
  const seqs = [...new Set(input.seqs ?? [])];
  if (hasSeqs && (seqs.length > ACK_MAX_SEQS || seqs.some((s) => !Number.isInteger(s) || s < 1))) {
    throw badRequest(`seqs holds at most ${ACK_MAX_SEQS} whole numbers, each 1 or more`);
  }
  if (hasSeqs && seqs.length === 0) return { done: 0 };
  const at = new Date().toISOString();
  const res = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    let q = trx
      .updateTable('inbox_events')
      .set({ state: 'done', done_at: at })
      .where('workspace_id', '=', p.workspaceId)
      .where('principal_id', '=', p.id)
      .where('state', '!=', 'done');
    q = hasUpTo ? q.where('seq', '<=', input.up_to!) : q.where('seq', 'in', seqs);
    return q.executeTakeFirst();
  });
  return { done: Number(res.numUpdatedRows) };
}
