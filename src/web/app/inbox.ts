import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { CSRF_COOKIE } from '../../auth/sessions.js';
import { ackInbox, INBOX_MAX_LIMIT, listInbox, type InboxEvent, type InboxStateFilter } from '../../core/inbox.js';
import { UNREAD_COUNT_CAP } from '../../core/inbox-count.js';
import { AckUpTo, inboxAfter } from '../../core/inbox-input.js';
import { html, setAppPageHeaders, type SafeHtml } from '../../http/shared/html.js';
import type { Principal } from '../../policy/principal.js';
import { ago } from './history.js';
import { sendAppPage } from './layout.js';
import { pageUrl } from './markdown.js';
import type { AppKit } from './routes.js';
import { threadUrl } from './threads.js';

/**
 * The inbox (issue 17), under /app:
 *   GET  /app/inbox                 unread events first (newest on top), then the ones seen elsewhere (read, not yet done)
 *   GET  /app/inbox?show=done       the latest cleared (done) events
 *   GET  /app/inbox/items?after=n   the unread events after seq n as list items (what /assets/inbox.js inserts)
 *   GET  /app/inbox/count           JSON {count, capped, after}: the navigation's "Inbox (n)" and the seq to
 *                                   long-poll after (what /assets/inbox-count.js reads on every other page)
 *   POST /app/inbox/ack             csrf and `seq` (one event) or `up_to` (every event up to it): they become done
 * The same core functions as GET /api/v1/inbox and POST /api/v1/inbox/ack (listInbox, which
 * leaves out events about pages and proposals the person can no longer see, and ackInbox).
 * Listing never marks anything read (as REST). Live updates: /assets/inbox.js long-polls
 * GET /api/v1/inbox?after=<seq>&wait=25 with the session cookie and, when events arrive,
 * fetches their list items from /app/inbox/items, so each event has one renderer: this module.
 */

/** Events shown per list at most; older ones are reached by clearing newer ones. */
const SHOWN_MAX = 300;
/** listInbox calls per list at most (each looks at up to 1000 events). */
const CALLS_MAX = 10;

const AckForm = z.union([z.object({ seq: z.coerce.number().int().min(1).max(Number.MAX_SAFE_INTEGER) }), z.object({ up_to: z.coerce.number().pipe(AckUpTo) })]);
const ItemsQuery = z.object({ after: inboxAfter(z.coerce.number()) });
const ShowQuery = z.object({ show: z.enum(['todo', 'done']).catch('todo').default('todo') });

const NOTICES = { one: 'Marked read.', all: 'All marked read.', none: 'Nothing to mark: already done.' } as const;
type Notice = keyof typeof NOTICES;

/** The events of one state after `after`, oldest first (the newest `max` kept), and the highest seq looked at. */
async function collect(
  kit: AppKit,
  p: Principal,
  state: InboxStateFilter,
  after: number,
  max: number,
): Promise<{ events: InboxEvent[]; last: number; more: boolean }> {
  const out: InboxEvent[] = [];
  let cursor = after;
  for (let i = 0; i < CALLS_MAX; i++) {
    const r = await listInbox(kit.ctx, p, { state, after: cursor, limit: INBOX_MAX_LIMIT, markRead: false });
    out.push(...r.events);
    if (r.next_after <= cursor) break;
    cursor = r.next_after;
  }
  return { events: out.slice(-max), last: cursor, more: out.length > max };
}

/* ------------------------------------------------------------------ views */

const str = (o: Record<string, unknown>, k: string): string | null => (typeof o[k] === 'string' ? (o[k] as string) : null);
const num = (o: Record<string, unknown>, k: string): number | null => (typeof o[k] === 'number' ? (o[k] as number) : null);
function nameOf(o: Record<string, unknown>, k: string): { name: string; agent: boolean } | null {
  const v = o[k];
  if (!v || typeof v !== 'object') return null;
  const r = v as Record<string, unknown>;
  return typeof r.name === 'string' ? { name: r.name, agent: r.kind === 'agent' } : null;
}

function person(x: { name: string; agent: boolean } | null): SafeHtml {
  if (!x) return html`Someone`;
  return html`<strong>${x.name}</strong>${x.agent ? html` <span class="badge badge-agent">agent</span>` : ''}`;
}

const proposalUrl = (id: string) => `/app/proposals/${encodeURIComponent(id)}`;

/** What happened, where it leads, and a plain-text summary (the Mark read button's accessible name). */
function describe(e: InboxEvent): { what: SafeHtml; excerpt: string | null; link: { href: string; text: string } | null; summary: string } {
  const o = e.payload;
  const path = str(o, 'path') ?? '';
  const page = e.page_id ?? str(o, 'page_id');
  const pathRef = html`<span class="mono">${path}</span>`;
  switch (e.kind) {
    case 'mention':
    case 'reply': {
      const author = nameOf(o, 'author');
      const msg = str(o, 'message_id');
      const href = page ? `${threadUrl(page)}${msg ? `#m-${msg}` : ''}` : null;
      const alsoMentioned = e.kind === 'reply' && o.mentioned === true;
      return {
        what:
          e.kind === 'mention'
            ? html`${person(author)} mentioned you in the discussion on ${pathRef}`
            : html`${person(author)} replied to your message on ${pathRef}${alsoMentioned ? ' and mentioned you' : ''}`,
        excerpt: str(o, 'excerpt'),
        link: href ? { href, text: 'Open the discussion' } : null,
        summary: `${e.kind === 'mention' ? 'mention' : 'reply'} by ${author?.name ?? 'someone'} on ${path}`,
      };
    }
    case 'thread_locked': {
      const hops = num(o, 'agent_hops');
      return {
        what: html`The discussion on ${pathRef} was locked by the loop breaker after ${hops ?? 'several'} agent messages in a row. You can unlock it.`,
        excerpt: null,
        link: page ? { href: threadUrl(page), text: 'Open the discussion' } : null,
        summary: `discussion locked on ${path}`,
      };
    }
    case 'proposal': {
      const id = str(o, 'proposal_id') ?? e.proposal_id;
      const event = str(o, 'event') ?? 'created';
      const kind = str(o, 'kind') ?? 'change';
      const reason = str(o, 'reason');
      const link = id ? { href: proposalUrl(id), text: 'Open the proposal' } : null;
      if (event === 'created') {
        return {
          what: html`${person(nameOf(o, 'proposer'))} proposed to ${kind} ${pathRef}`,
          excerpt: reason,
          link,
          summary: `proposal to ${kind} ${path}`,
        };
      }
      const by = nameOf(o, 'by');
      return {
        what: html`Your proposal to ${kind} ${pathRef} was <strong>${event}</strong>${by ? html` by ${person(by)}` : ''}`,
        excerpt: reason,
        link,
        summary: `your proposal on ${path} ${event}`,
      };
    }
    case 'conflict': {
      const id = str(o, 'proposal_id') ?? e.proposal_id;
      return {
        what: html`Your edit of ${pathRef} clashed with a newer version; it was kept as a proposal`,
        excerpt: str(o, 'reason'),
        link: id ? { href: proposalUrl(id), text: 'Open the proposal' } : null,
        summary: `edit conflict on ${path}`,
      };
    }
    case 'page_changed': {
      const action = str(o, 'action') ?? 'changed';
      const changes = num(o, 'changes') ?? 1;
      const title = str(o, 'title');
      return {
        what: html`${person(nameOf(o, 'actor'))} ${action === 'update' ? 'updated' : action} ${title ? html`<span class="title-ref">${title}</span> ` : ''}(${pathRef}), a page you watch${changes > 1 ? ` (${changes} changes)` : ''}`,
        excerpt: null,
        link: page ? { href: pageUrl(page), text: 'Open the page' } : null,
        summary: `${path} ${action}`,
      };
    }
    case 'watch_digest': {
      const changes = num(o, 'changes') ?? 0;
      return {
        what: html`${changes} changes to pages you watch arrived too fast to list one by one`,
        excerpt: str(o, 'note'),
        link: null,
        summary: `${changes} watched changes`,
      };
    }
    case 'lifecycle_digest': {
      const archived = num(o, 'archived') ?? 0;
      return {
        what: html`The lifecycle run archived ${archived} page${archived === 1 ? '' : 's'}`,
        excerpt: Array.isArray(o.pages)
          ? (o.pages as unknown[])
              .map((x) =>
                x && typeof x === 'object' && typeof (x as Record<string, unknown>).path === 'string' ? ((x as Record<string, unknown>).path as string) : null,
              )
              .filter((x): x is string => !!x)
              .slice(0, 10)
              .join(', ') || null
          : null,
        link: null,
        summary: `lifecycle run archived ${archived} pages`,
      };
    }
    default:
      return { what: html`${e.kind}`, excerpt: null, link: null, summary: e.kind };
  }
}

function eventItem(e: InboxEvent, csrf: string | null): SafeHtml {
  const d = describe(e);
  return html`<li class="event event-${e.state}" data-seq="${e.seq}" id="e-${e.seq}">
<div class="event-main">
<p class="event-what"><span class="badge badge-event badge-event-${e.kind}">${e.kind.replace('_', ' ')}</span> ${d.what}</p>
${d.excerpt ? html`<p class="event-excerpt">${d.excerpt}</p>` : ''}
<p class="event-meta muted">${ago(e.created_at)}${d.link ? html` · <a href="${d.link.href}">${d.link.text}<span class="visually-hidden">: ${d.summary}</span></a>` : ''}</p>
</div>
${
  csrf !== null && e.state !== 'done'
    ? html`<form method="post" action="/app/inbox/ack" class="event-ack">
<input type="hidden" name="csrf" value="${csrf}">
<input type="hidden" name="seq" value="${e.seq}">
<button type="submit" class="secondary">Mark read<span class="visually-hidden">: ${d.summary}</span></button>
</form>`
    : ''
}
</li>`;
}

const newestFirst = (events: InboxEvent[]) => [...events].sort((a, b) => b.seq - a.seq);

/* ----------------------------------------------------------------- routes */

export async function inboxRoutes(app: FastifyInstance, kit: AppKit): Promise<void> {
  async function todo(req: FastifyRequest, reply: FastifyReply, p: Principal): Promise<FastifyReply> {
    const viewer = await kit.viewerOf(p, req);
    const [unread, seen] = await Promise.all([collect(kit, p, 'unread', 0, SHOWN_MAX), collect(kit, p, 'read', 0, SHOWN_MAX)]);
    const latest = Math.max(0, ...unread.events.map((e) => e.seq), ...seen.events.map((e) => e.seq));
    const n = (req.query as Record<string, unknown> | undefined)?.notice;
    const notice = typeof n === 'string' && Object.hasOwn(NOTICES, n) ? html`<p class="notice notice-ok" role="status">${NOTICES[n as Notice]}</p>` : '';
    const count = unread.events.length;
    const body = html`<div class="inbox">
<div class="inbox-head">
<h1>Inbox</h1>
<form method="post" action="/app/inbox/ack" class="ack-all" id="ack-all"${latest === 0 ? html` hidden` : ''}>
<input type="hidden" name="csrf" value="${viewer.csrf}">
<input type="hidden" name="up_to" value="${latest}">
<button type="submit">Mark all read</button>
</form>
</div>
${tabs('todo')}
${notice}
<p class="muted" id="inbox-summary">${summaryText(count, unread.more)}</p>
<section aria-labelledby="unread-h">
<h2 id="unread-h">Unread</h2>
<ol class="events" id="inbox-unread" data-after="${unread.last}" aria-live="off">
${newestFirst(unread.events).map((e) => eventItem(e, viewer.csrf))}
</ol>
<p class="empty" id="inbox-empty"${count > 0 ? html` hidden` : ''}>Nothing new. Mentions, replies, proposals and changes to pages you watch arrive here as they happen.</p>
${unread.more ? html`<p class="muted">Only the newest ${SHOWN_MAX} are listed; mark them read to see older ones.</p>` : ''}
</section>
${
  seen.events.length
    ? html`<section aria-labelledby="seen-h">
<h2 id="seen-h">Seen elsewhere</h2>
<p class="muted">Read through an agent connection (MCP) but not marked read yet.</p>
<ol class="events">${newestFirst(seen.events).map((e) => eventItem(e, viewer.csrf))}</ol>
</section>`
    : ''
}
<p class="visually-hidden" id="inbox-live" role="status" aria-live="polite"></p>
</div>
<script type="module" src="/assets/inbox.js"></script>`;
    return sendAppPage(reply, 200, viewer, { title: count ? `Inbox (${count})` : 'Inbox', body, current: 'inbox' });
  }

  function tabs(current: 'todo' | 'done'): SafeHtml {
    return html`<nav class="tabs" aria-label="Inbox view"><a href="/app/inbox"${current === 'todo' ? html` aria-current="page"` : ''}>To read</a><a href="/app/inbox?show=done"${current === 'done' ? html` aria-current="page"` : ''}>Marked read</a></nav>`;
  }

  function summaryText(count: number, more: boolean): string {
    return count === 0 ? 'No unread events.' : `${count}${more ? '+' : ''} unread event${count === 1 ? '' : 's'}.`;
  }

  async function done(req: FastifyRequest, reply: FastifyReply, p: Principal): Promise<FastifyReply> {
    const viewer = await kit.viewerOf(p, req);
    const { events, more } = await collect(kit, p, 'done', 0, 100);
    const body = html`<div class="inbox">
<h1>Inbox</h1>
${tabs('done')}
<section aria-labelledby="done-h">
<h2 id="done-h">Marked read</h2>
${events.length ? html`<ol class="events">${newestFirst(events).map((e) => eventItem(e, null))}</ol>` : html`<p class="empty">Nothing marked read yet.</p>`}
${more ? html`<p class="muted">The latest 100 are listed.</p>` : ''}
</section>
</div>`;
    return sendAppPage(reply, 200, viewer, { title: 'Inbox: marked read', body, current: 'inbox' });
  }

  app.get('/inbox', kit.opts, async (req, reply) => {
    const p = req.principal!;
    const { show } = ShowQuery.parse(req.query ?? {});
    return show === 'done' ? done(req, reply, p) : todo(req, reply, p);
  });

  /** The unread events after a seq, newest first, as <li> items (inbox.js inserts them); nothing else on the page. */
  app.get('/inbox/items', kit.opts, async (req, reply) => {
    const p = req.principal!;
    const q = ItemsQuery.safeParse(req.query ?? {});
    if (!q.success) return reply.code(400).type('text/plain; charset=utf-8').send('after must be a whole number');
    const { events } = await collect(kit, p, 'unread', q.data.after, SHOWN_MAX);
    setAppPageHeaders(reply);
    return reply
      .code(200)
      .type('text/html; charset=utf-8')
      .header('cache-control', 'no-store')
      .send(html`${newestFirst(events).map((e) => eventItem(e, req.cookies[CSRF_COOKIE] ?? ''))}`.value);
  });

  /**
   * The unread count as the navigation shows it (at most UNREAD_COUNT_CAP, `capped` past it) and
   * the highest seq looked at, from which /assets/inbox-count.js long-polls GET /api/v1/inbox.
   */
  app.get('/inbox/count', kit.opts, async (req, reply) => {
    const p = req.principal!;
    const { events, last, more } = await collect(kit, p, 'unread', 0, UNREAD_COUNT_CAP);
    return reply
      .code(200)
      .header('cache-control', 'no-store')
      .type('application/json; charset=utf-8')
      .send({ count: events.length, capped: more, after: last });
  });

  app.post('/inbox/ack', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const form = AckForm.safeParse(req.body ?? {});
    if (!form.success) return reply.code(303).header('location', '/app/inbox').send();
    const r = 'seq' in form.data ? await ackInbox(kit.ctx, p, { seqs: [form.data.seq] }) : await ackInbox(kit.ctx, p, { up_to: form.data.up_to });
    const notice: Notice = r.done === 0 ? 'none' : 'seq' in form.data ? 'one' : 'all';
    return reply.code(303).header('location', `/app/inbox?notice=${notice}`).send();
  });
}
