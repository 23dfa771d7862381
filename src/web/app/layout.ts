import type { FastifyReply } from 'fastify';
import { html, setAppPageHeaders, type SafeHtml } from '../../http/shared/html.js';

/** Who the page is for: shown in the navigation bar, with the sign-out form's CSRF token. */
export interface Viewer {
  name: string;
  role: string | null;
  workspace: string;
  csrf: string;
  /** Editors and owners: open proposals they can see (the navigation shows "Review (n)"). */
  reviews?: number;
  /** More open proposals than were counted: shown as "n+". */
  reviewsCapped?: boolean;
  /** Unread inbox events (the navigation shows "Inbox (n)"; /assets/inbox.js keeps it current). */
  inbox?: number;
  /** More unread events than were counted: shown as "n+". */
  inboxCapped?: boolean;
  /** The workspace switcher (workspaces.ts): empty for a person in one workspace. */
  switcher?: SafeHtml;
}

export interface AppPage {
  title: string;
  body: SafeHtml;
  /** The search box's current text (the search page keeps the query in it). */
  query?: string | undefined;
  /** Which navigation entry is the current page. */
  current?: 'spaces' | 'search' | 'review' | 'inbox' | 'agents' | 'members' | 'account' | 'operations' | undefined;
}

/**
 * The web app's page: a top navigation bar (brand, Spaces, the search box, who is signed in,
 * sign out as a POST form with its CSRF token) and the content. Styles and scripts come from
 * /assets only (APP_PAGE_HEADERS' CSP forbids inline ones); every page works without scripts.
 */
export function appLayout(v: Viewer | null, page: AppPage): SafeHtml {
  const nav = v
    ? html`<header class="topbar">
<nav class="nav" aria-label="Main">
<a class="brand" href="/app">Context Vault</a>
<a class="navlink" href="/app"${page.current === 'spaces' ? html` aria-current="page"` : ''}>Spaces</a>
${v.reviews !== undefined ? html`<a class="navlink" href="/app/proposals"${page.current === 'review' ? html` aria-current="page"` : ''}>Review <span class="count${v.reviews > 0 ? ' count-some' : ''}">(${v.reviews}${v.reviewsCapped ? '+' : ''})</span><span class="visually-hidden"> open proposals</span></a>` : ''}
${v.inbox !== undefined ? html`<a class="navlink" href="/app/inbox"${page.current === 'inbox' ? html` aria-current="page"` : ''}>Inbox <span class="count${v.inbox > 0 ? ' count-some' : ''}" data-inbox-count="${v.inbox}${v.inboxCapped ? '+' : ''}">(${v.inbox}${v.inboxCapped ? '+' : ''})</span><span class="visually-hidden"> unread</span></a>` : ''}
<form class="search" role="search" aria-label="Site search" method="get" action="/app/search">
<label class="visually-hidden" for="q">Search pages</label>
<input id="q" name="q" type="search" placeholder="Search  ( / )" maxlength="4000" value="${page.query ?? ''}" autocomplete="off">
</form>
${v.role ? html`<a class="navlink" href="/app/agents"${page.current === 'agents' ? html` aria-current="page"` : ''}>Agents</a>` : ''}
${v.role ? html`<a class="navlink" href="/app/members"${page.current === 'members' ? html` aria-current="page"` : ''}>Members</a>` : ''}
${v.role === 'owner' ? html`<a class="navlink" href="/app/admin"${page.current === 'operations' ? html` aria-current="page"` : ''}>Admin</a>` : ''}
<a class="navlink" href="/app/account"${page.current === 'account' ? html` aria-current="page"` : ''}>Account</a>
<span class="who" title="Workspace ${v.workspace}${v.role ? ` · ${v.role}` : ''}"><span class="who-name">${v.name}</span>${
        // With a switcher its select names the workspace; the text would say it twice.
        v.switcher?.value ? '' : html` <span class="who-ws">· workspace ${v.workspace}</span>`
      }</span>
${v.switcher ?? ''}
<form class="signout" method="post" action="/app/logout">
<input type="hidden" name="csrf" value="${v.csrf}">
<button type="submit" class="linkish">Sign out</button>
</form>
</nav>
</header>`
    : html`<header class="topbar"><nav class="nav" aria-label="Main"><a class="brand" href="/app">Context Vault</a></nav></header>`;
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${page.title} · Context Vault</title>
<link rel="stylesheet" href="/assets/app.css">
<script type="module" src="/assets/app.js"></script>
<script type="module" src="/assets/copy.js"></script>
<script type="module" src="/assets/inbox-count.js"></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
${nav}
<main id="main">
${page.body}
</main>
</body>
</html>
`;
}

export function sendAppPage(reply: FastifyReply, status: number, v: Viewer | null, page: AppPage): FastifyReply {
  setAppPageHeaders(reply);
  return reply.code(status).type('text/html; charset=utf-8').send(appLayout(v, page).value);
}

/** A badge: sensitivity levels and page states, each with its own class. */
export function badge(kind: 'sensitivity' | 'state' | 'tag', value: string): SafeHtml {
  const cls = /^[a-z0-9-]{1,40}$/.test(value) ? `badge badge-${kind} badge-${kind}-${value}` : `badge badge-${kind}`;
  return html`<span class="${cls}">${value}</span>`;
}

/** A time as text a person reads, with the machine-readable value kept in <time>. */
export function when(iso: string): SafeHtml {
  const d = new Date(iso);
  const text = Number.isNaN(d.getTime()) ? iso : d.toISOString().replace('T', ' ').slice(0, 16) + ' UTC';
  return html`<time datetime="${iso}">${text}</time>`;
}
