import type { Principal } from '../policy/principal.js';
import type { CoreContext } from './context.js';
import { listInbox } from './inbox.js';

/** Unread events counted, at most, for the navigation's count (the count then reads "n+"). */
export const UNREAD_COUNT_CAP = 99;

/**
 * How many unread events the caller's inbox holds (the web app's "Inbox (n)"): one look through
 * `listInbox`, so the count leaves out exactly the events the inbox itself leaves out (pages and
 * proposals the caller can no longer see) and never marks anything read. `capped` when there
 * are more than UNREAD_COUNT_CAP.
 */
export async function countUnreadInbox(ctx: CoreContext, p: Principal): Promise<{ count: number; capped: boolean }> {
  const page = await listInbox(ctx, p, { state: 'unread', limit: UNREAD_COUNT_CAP + 1, markRead: false });
  const capped = page.events.length > UNREAD_COUNT_CAP;
  return { count: capped ? UNREAD_COUNT_CAP : page.events.length, capped };
}
