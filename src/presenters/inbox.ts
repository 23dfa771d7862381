import type { InboxEvent, InboxPage } from '../core/inbox.js';

/**
 * Inbox events as the MCP face shows them. One source: the inbox page core lists
 * (core/inbox.ts, core/inbox-open.ts), which is the REST answer of `GET /api/v1/inbox` as it
 * is. `collab_inbox` cuts the repeats an LLM would read twice: a payload field that only
 * repeats the event's own (its `page_id`, its `proposal_id`), and the event's empty ones.
 */
export function inboxEventToolView(e: InboxEvent): Record<string, unknown> {
  const top: Record<string, unknown> = { seq: e.seq, kind: e.kind, state: e.state, created_at: e.created_at };
  if (e.page_id !== null) top.page_id = e.page_id;
  if (e.proposal_id !== null) top.proposal_id = e.proposal_id;
  const payload: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(e.payload)) {
    if ((k === 'page_id' || k === 'proposal_id') && (v === top[k] || v === null)) continue;
    payload[k] = v;
  }
  return { ...top, payload };
}

/** `collab_inbox`: the events, and the seq to pass as `after` next time. */
export function inboxToolView(page: InboxPage) {
  return { events: page.events.map(inboxEventToolView), next_after: page.next_after };
}
