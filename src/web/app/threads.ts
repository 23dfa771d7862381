import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { isServiceError } from '../../core/errors.js';
import { readPage } from '../../core/pages/read.js';
import type { PageRecord } from '../../core/pages/record.js';
import { MessageId, MessageKind, mentionList } from '../../core/thread-input.js';
import { getThread, markThreadRead, MAX_BODY_CHARS, postMessage, THREAD_KINDS, unlockThread, type ThreadMessage, type ThreadView } from '../../core/threads.js';
import { html, type SafeHtml } from '../../http/shared/html.js';
import type { Principal } from '../../policy/principal.js';
import { decidePost, decideUnlock, MAX_AGENT_HOPS } from '../../policy/threads.js';
import { ago, principalNames } from './history.js';
import { sendAppPage, when } from './layout.js';
import { pageUrl } from './markdown.js';
import type { AppKit } from './routes.js';

/**
 * Talking on a page (issue 17): the page's discussion under /app.
 *   GET  /app/t/<path or page id>              the thread: messages with their replies, the lock
 *   POST /app/threads/:page/messages           post a message or a reply (csrf, body, kind, reply_to, mentions[])
 *   POST /app/threads/:page/unlock             lift the loop breaker's lock (csrf)
 *   POST /app/threads/:page/read               mark the thread read (csrf)
 * The same core functions as /api/v1/nodes/:id/threads (getThread, postMessage, unlockThread,
 * markThreadRead): who may read, post and unlock is the core's and policy's answer. A mention is
 * `@name` in the text (the core's bodyMentions); /assets/mentions.js offers the names as you type
 * and also sends the picked principals' ids as `mentions` (so a name two people share still
 * reaches the one picked). The forms are shown only where policy would allow them (decidePost,
 * decideUnlock); a forged POST meets the core's refusal.
 */

/** Messages of one thread shown at most (the core pages them; a thread this long is rare). */
const MESSAGES_MAX = 2000;
const MESSAGES_PAGE = 500;
/** Replies nest this deep; deeper ones are listed flat under the last level, naming whom they answer. */
const NEST_MAX = 4;

const segs = (path: string) => path.split('/').map(encodeURIComponent).join('/');
/** The discussion of a page, by path (or by page id: links from the inbox survive a move). */
export const threadUrl = (ref: string) => `/app/t/${segs(ref)}`;
const actionUrl = (pageId: string, what: 'messages' | 'unlock' | 'read') => `/app/threads/${encodeURIComponent(pageId)}/${what}`;
const messageAnchor = (id: string) => `m-${id}`;

/** The Discussion entry of a page view's side column (routes.ts pageBody). */
export function discussionLink(page: PageRecord): SafeHtml {
  return html`<section class="related discussion-link" aria-labelledby="discussion">
<h2 id="discussion">Discussion</h2>
<p><a href="${threadUrl(page.path)}">Open the discussion</a></p>
</section>`;
}

/* ------------------------------------------------------------- form input */

const PageIdParam = z.object({ page: z.string().regex(/^[A-Za-z0-9_-]{1,100}$/) });

/** A repeated form field arrives as an array, a single one as a string. */
const listField = z.preprocess((v) => (v === undefined || v === '' ? [] : Array.isArray(v) ? v : [v]), mentionList(z.string().trim()));

const PostForm = z.object({
  body: z.string().max(MAX_BODY_CHARS * 2),
  kind: MessageKind.catch('comment'),
  reply_to: z.preprocess((v) => (v === '' ? undefined : v), MessageId.optional()),
  mentions: listField,
});

const NOTICES = { unlocked: 'Unlocked: agents may post here again.', read: 'Marked read.', posted: 'Posted.' } as const;
type Notice = keyof typeof NOTICES;

/** Browsers send a textarea's line breaks as CRLF. */
const lf = (text: string) => text.replace(/\r\n?/g, '\n');

/* ------------------------------------------------------------------ views */

interface Problem {
  status: number;
  message: string;
  body: string;
  kind: string;
  replyTo: string | null;
}

type Names = Map<string, { name: string; kind: string }>;

const KIND_TEXT: Record<(typeof THREAD_KINDS)[number], string> = { comment: 'comment', question: 'question', answer: 'answer' };

function kindSelect(id: string, selected: string, label: string): SafeHtml {
  return html`<label for="${id}">${label}</label>
<select id="${id}" name="kind">
${THREAD_KINDS.map((k) => html`<option value="${k}"${k === selected ? html` selected` : ''}>${KIND_TEXT[k]}</option>`)}
</select>`;
}

/** A message form: a new message, or (replyTo) a reply to one. */
function postForm(pageId: string, selfId: string, csrf: string, opts: { replyTo: string | null; problem: Problem | null; idSuffix: string }): SafeHtml {
  const mine = opts.problem && opts.problem.replyTo === opts.replyTo ? opts.problem : null;
  const s = opts.idSuffix;
  return html`<form method="post" action="${actionUrl(pageId, 'messages')}" class="post-form">
<input type="hidden" name="csrf" value="${csrf}">
${opts.replyTo ? html`<input type="hidden" name="reply_to" value="${opts.replyTo}">` : ''}
${mine ? html`<p class="alert" role="alert" id="post-error${s}">${mine.message}</p>` : ''}
<label for="msg-body${s}">${opts.replyTo ? 'Your reply' : 'Message'}</label>
<p class="hint muted" id="msg-hint${s}">Type @ and a name to mention someone: they find it in their inbox.</p>
<textarea id="msg-body${s}" name="body" rows="${opts.replyTo ? 3 : 5}" maxlength="${MAX_BODY_CHARS}" required data-mentions data-self="${selfId}" aria-describedby="msg-hint${s}${mine ? ` post-error${s}` : ''}">
${mine?.body ?? ''}</textarea>
<div class="post-row">
${kindSelect(`msg-kind${s}`, mine?.kind ?? (opts.replyTo ? 'answer' : 'comment'), opts.replyTo ? 'Kind of reply' : 'Kind')}
<button type="submit">${opts.replyTo ? 'Reply' : 'Post'}</button>
</div>
</form>`;
}

/** The text of a message, line breaks kept, with the `@name` of each mentioned principal marked. */
function messageText(m: ThreadMessage, names: Names): SafeHtml {
  const mentioned = m.mentions.map((id) => names.get(id)?.name).filter((n): n is string => !!n && n.length > 0);
  if (mentioned.length === 0 || !m.body.includes('@')) return html`${m.body}`;
  const alts = [...new Set(mentioned)].sort((a, b) => b.length - a.length).map((n) => n.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  const re = new RegExp(`(@(?:${alts.join('|')}))(?![\\p{L}\\p{N}_-])`, 'giu');
  return html`${m.body.split(re).map((part, i) => (i % 2 === 1 ? html`<span class="mention">${part}</span>` : part))}`;
}

interface Shown {
  thread: ThreadView;
  names: Names;
  byId: Map<string, ThreadMessage>;
  children: Map<string, ThreadMessage[]>;
  mayPost: boolean;
  selfId: string;
  pageId: string;
  csrf: string;
  problem: Problem | null;
}

function messageItem(m: ThreadMessage, v: Shown, nested: SafeHtml, flatParent: ThreadMessage | null): SafeHtml {
  const anchor = messageAnchor(m.id);
  const isNew = m.seq > v.thread.last_read_seq && m.author.id !== v.selfId;
  const parent = m.reply_to ? v.byId.get(m.reply_to) : undefined;
  const replyOpen = v.problem?.replyTo === m.id;
  return html`<li class="msg-item">
<article class="msg msg-${m.kind}${m.author.kind === 'agent' ? ' msg-agent' : ''}" id="${anchor}" aria-labelledby="${anchor}-h">
<header class="msg-head">
<h3 class="msg-author" id="${anchor}-h">${m.author.name}${m.author.kind === 'agent' ? html` <span class="badge badge-agent">agent</span>` : ''}<span class="visually-hidden">, ${m.kind}</span></h3>
<span class="badge badge-kind badge-kind-${m.kind}" aria-hidden="true">${KIND_TEXT[m.kind]}</span>
<span class="muted">${ago(m.created_at)}</span>
${isNew ? html`<span class="badge badge-new">new</span>` : ''}
${flatParent ? html`<span class="muted">in reply to <a href="#${messageAnchor(flatParent.id)}">${flatParent.author.name}</a></span>` : ''}
${m.reply_to && !parent ? html`<span class="muted">in reply to an earlier message</span>` : ''}
</header>
<div class="msg-body">${messageText(m, v.names)}</div>
${
  v.mayPost
    ? html`<details class="msg-reply"${replyOpen ? html` open` : ''}>
<summary>Reply<span class="visually-hidden"> to ${m.author.name}</span></summary>
${postForm(v.pageId, v.selfId, v.csrf, { replyTo: m.id, problem: v.problem, idSuffix: `-${m.id}` })}
</details>`
    : ''
}
</article>
${nested}
</li>`;
}

/** The messages as a tree: replies under what they answer, NEST_MAX levels deep, deeper ones flat. */
function messageTree(roots: ThreadMessage[], v: Shown, depth: number): SafeHtml {
  const items: SafeHtml[] = [];
  for (const m of roots) {
    const kids = v.children.get(m.id) ?? [];
    if (depth < NEST_MAX || kids.length === 0) {
      items.push(
        messageItem(
          m,
          v,
          kids.length ? html`<ol class="replies" aria-label="Replies to ${m.author.name}">${messageTree(kids, v, depth + 1)}</ol>` : html``,
          null,
        ),
      );
      continue;
    }
    // Deepest level: the message, then everything below it in order, each naming whom it answers.
    items.push(messageItem(m, v, html``, null));
    const below: ThreadMessage[] = [];
    const stack = [...kids];
    while (stack.length) {
      const x = stack.shift()!;
      below.push(x);
      stack.push(...(v.children.get(x.id) ?? []));
    }
    below.sort((a, b) => a.seq - b.seq);
    for (const x of below) items.push(messageItem(x, v, html``, v.byId.get(x.reply_to ?? '') ?? null));
  }
  return html`${items}`;
}

function lockSection(t: ThreadView, p: Principal, pageId: string, csrf: string): SafeHtml {
  if (!t.locked) {
    if (t.agent_hops === 0) return html``;
    return html`<p class="notice hops">${t.agent_hops} consecutive agent message${t.agent_hops === 1 ? '' : 's'}: at ${MAX_AGENT_HOPS} the loop breaker locks the thread for agents.</p>`;
  }
  const canUnlock = decideUnlock(p).kind === 'allow';
  return html`<section class="lock-notice" aria-labelledby="lock-h">
<h2 id="lock-h">Locked by the loop breaker</h2>
<p>Agents wrote ${t.agent_hops} messages in a row${t.locked_at ? html` (locked ${when(t.locked_at)})` : ''}. Agents cannot post here until an editor or owner unlocks the thread; people can still post.</p>
${
  canUnlock
    ? html`<form method="post" action="${actionUrl(pageId, 'unlock')}">
<input type="hidden" name="csrf" value="${csrf}">
<button type="submit">Unlock</button>
</form>`
    : html`<p class="muted">Only an editor or owner can unlock it.</p>`
}
</section>`;
}

async function allMessages(kit: AppKit, p: Principal, pageId: string): Promise<{ view: ThreadView; more: boolean }> {
  let view = await getThread(kit.ctx, p, pageId, { limit: MESSAGES_PAGE });
  const messages = [...view.messages];
  while (view.next_after !== null && messages.length < MESSAGES_MAX) {
    view = await getThread(kit.ctx, p, pageId, { after: view.next_after, limit: MESSAGES_PAGE });
    messages.push(...view.messages);
  }
  return { view: { ...view, messages }, more: view.next_after !== null };
}

/* ----------------------------------------------------------------- routes */

export async function threadRoutes(app: FastifyInstance, kit: AppKit): Promise<void> {
  const { ctx, opts } = kit;

  async function showThread(req: FastifyRequest, reply: FastifyReply, p: Principal, ref: string, problem: Problem | null): Promise<FastifyReply> {
    const page = await readPage(ctx, p, ref);
    const [{ view: thread, more }, names, viewer] = await Promise.all([allMessages(kit, p, page.id), principalNames(ctx, p), kit.viewerOf(p, req)]);
    const byId = new Map(thread.messages.map((m) => [m.id, m]));
    const children = new Map<string, ThreadMessage[]>();
    const roots: ThreadMessage[] = [];
    for (const m of thread.messages) {
      if (m.reply_to && byId.has(m.reply_to)) children.set(m.reply_to, [...(children.get(m.reply_to) ?? []), m]);
      else roots.push(m);
    }
    const mayPost = decidePost(p, { path: page.path, sensitivity: page.sensitivity, blockLevel: null }).kind === 'allow';
    // A refused post is shown in the form it came from, its text kept; at the top when that form is not on the page.
    const alertTop = problem !== null && (!mayPost || (problem.replyTo !== null && !byId.has(problem.replyTo)));
    const shown: Shown = { thread, names, byId, children, mayPost, selfId: p.id, pageId: page.id, csrf: viewer.csrf, problem };
    const n = (req.query as Record<string, unknown> | undefined)?.notice;
    const notice = typeof n === 'string' && Object.hasOwn(NOTICES, n) ? html`<p class="notice notice-ok" role="status">${NOTICES[n as Notice]}</p>` : '';
    const folders = page.path.split('/').slice(1, -1);
    const count = thread.messages.length;
    const body = html`<nav class="crumbs" aria-label="Breadcrumb"><a href="/app/s/${encodeURIComponent(page.path.split('/')[0]!)}">${page.path.split('/')[0]}</a>${folders.map((f) => html` / <span>${f}</span>`)} / <a href="${pageUrl(page.path)}">${page.title}</a> / <span aria-current="page">Discussion</span></nav>
<div class="thread">
<h1>Discussion <span class="muted thread-of">on <a href="${pageUrl(page.path)}">${page.title}</a></span></h1>
${notice}
${alertTop ? html`<p class="alert" role="alert">${problem?.message}</p>` : ''}
${lockSection(thread, p, page.id, viewer.csrf)}
<section class="messages" aria-labelledby="messages-h">
<div class="messages-head">
<h2 id="messages-h">${count === 0 ? 'No messages yet' : `${count}${more ? '+' : ''} message${count === 1 ? '' : 's'}`}</h2>
${
  thread.unread > 0
    ? html`<form method="post" action="${actionUrl(page.id, 'read')}" class="inline-form">
<input type="hidden" name="csrf" value="${viewer.csrf}">
<button type="submit" class="linkish">Mark read<span class="visually-hidden"> (${thread.unread} new)</span></button>
</form>`
    : ''
}
</div>
${count === 0 ? html`<p class="empty">Start the discussion: ask a question or leave a comment. Mention someone with @ and their name.</p>` : html`<ol class="thread-list">${messageTree(roots, shown, 1)}</ol>`}
${more ? html`<p class="muted">Only the first ${MESSAGES_MAX} messages are shown.</p>` : ''}
</section>
${
  mayPost
    ? html`<section class="new-message" aria-labelledby="new-h">
<h2 id="new-h">New message</h2>
${postForm(page.id, p.id, viewer.csrf, { replyTo: null, problem, idSuffix: '' })}
</section>`
    : html`<p class="muted">You can read this discussion but not post in it.</p>`
}
</div>
<script type="module" src="/assets/mentions.js"></script>`;
    return sendAppPage(reply, problem?.status ?? 200, viewer, { title: `Discussion: ${page.title}`, body });
  }

  app.get('/t/*', opts, async (req, reply) => {
    const p = req.principal!;
    const ref = (req.params as { '*': string })['*'];
    if (!ref) return kit.notFoundPage(req, reply, 'Which page? The address names none.');
    return showThread(req, reply, p, ref, null);
  });

  /** Where to go after a change: the thread, by its current path. */
  async function backTo(p: Principal, pageId: string, suffix: string): Promise<string> {
    const page = await readPage(ctx, p, pageId);
    return `${threadUrl(page.path)}${suffix}`;
  }

  app.post('/threads/:page/messages', opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const { page } = PageIdParam.parse(req.params);
    const form = PostForm.safeParse(req.body ?? {});
    const raw = req.body as Record<string, unknown> | undefined;
    const replyTo = typeof raw?.reply_to === 'string' && raw.reply_to !== '' ? raw.reply_to : null;
    const text = typeof raw?.body === 'string' ? lf(raw.body) : '';
    const kind = typeof raw?.kind === 'string' ? raw.kind : 'comment';
    const problem = (status: number, message: string): Problem => ({ status, message, body: text, kind, replyTo });
    if (!form.success) return showThread(req, reply, p, page, problem(400, 'The message, its kind or its mentions are malformed.'));
    if (text.trim() === '' || text.length > MAX_BODY_CHARS) {
      return showThread(req, reply, p, page, problem(400, `Write a message (1 to ${MAX_BODY_CHARS} characters).`));
    }
    let posted;
    try {
      posted = await postMessage(ctx, p, page, { body: text, kind: form.data.kind, reply_to: form.data.reply_to ?? null, mentions: form.data.mentions });
    } catch (e) {
      // What the person can act on (an unknown or shared @name, a reply to a message that is gone, no right to post, the lock) is shown with the text kept.
      if (isServiceError(e) && (e.status === 400 || e.status === 403 || e.status === 423)) return showThread(req, reply, p, page, problem(e.status, e.message));
      throw e;
    }
    return reply
      .code(303)
      .header('location', await backTo(p, page, `#${messageAnchor(posted.id)}`))
      .send();
  });

  app.post('/threads/:page/unlock', opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const { page } = PageIdParam.parse(req.params);
    await unlockThread(ctx, p, page);
    return reply
      .code(303)
      .header('location', await backTo(p, page, '?notice=unlocked'))
      .send();
  });

  app.post('/threads/:page/read', opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const { page } = PageIdParam.parse(req.params);
    await markThreadRead(ctx, p, page);
    return reply
      .code(303)
      .header('location', await backTo(p, page, '?notice=read'))
      .send();
  });
}
