import { sql, type Transaction } from 'kysely';
import type { DB, InboxEventsTable } from '../store/schema.js';
import { afterCommit } from '../store/tx.js';
import type { CoreContext } from './context.js';
import { Notifier } from './notifier.js';

export interface NewEvent {
  principalId: string;
  kind: InboxEventsTable['kind'];
  pageId?: string | null;
  proposalId?: string | null;
  payload: Record<string, unknown>;
}

/**
 * Places events in principals' inboxes inside the caller's transaction (so an event exists
 * exactly when the change that caused it does). Seqs grow per principal per workspace;
 * writers of a workspace are serialised, so max+1 cannot collide. Waiting long-polls are
 * woken after commit, here and (PostgreSQL) on every node through NOTIFY.
 */
export async function pushEvents(
  ctx: CoreContext,
  trx: Transaction<DB>,
  workspaceId: string,
  events: readonly NewEvent[],
  at = new Date(),
): Promise<Record<string, number>> {
  // The seq each principal's last event got, for callers that point at it (a digest).
  const seqs: Record<string, number> = {};
  for (const e of events) {
    const last = await trx
      .selectFrom('inbox_events')
      .select((eb) => eb.fn.max('seq').as('seq'))
      .where('workspace_id', '=', workspaceId)
      .where('principal_id', '=', e.principalId)
      .executeTakeFirst();
    await trx
      .insertInto('inbox_events')
      .values({
        workspace_id: workspaceId,
        principal_id: e.principalId,
        seq: (seqs[e.principalId] = (last?.seq ?? 0) + 1),
        kind: e.kind,
        state: 'unread',
        page_id: e.pageId ?? null,
        proposal_id: e.proposalId ?? null,
        payload: JSON.stringify(e.payload),
        created_at: at.toISOString(),
        read_at: null,
        done_at: null,
      })
      .execute();
  }
  await wakeInboxes(ctx, trx, workspaceId, Object.keys(seqs));
  return seqs;
}

/**
 * Wakes the long-polls of these principals' inboxes once the transaction commits (events placed
 * or updated in it); also used by watch delivery (watches.ts), which updates events in place.
 */
export async function wakeInboxes(ctx: CoreContext, trx: Transaction<DB>, workspaceId: string, principalIds: readonly string[]): Promise<void> {
  const woken = new Set(principalIds.map((id) => Notifier.key(workspaceId, id)));
  if (woken.size === 0) return;
  if (ctx.store.dialect === 'postgres') {
    // Delivered by PostgreSQL at commit, to every listening node (this one included); one round trip for all.
    await sql`select pg_notify('cv_inbox', k) from unnest(${[...woken]}::text[]) as k`.execute(trx);
  } else {
    afterCommit(trx, () => {
      for (const key of woken) ctx.notifier.wake(key);
    });
  }
}
