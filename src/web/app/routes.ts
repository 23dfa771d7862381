import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { closeSession, CSRF_COOKIE, SESSION_COOKIE } from '../../auth/sessions.js';
import type { CoreContext } from '../../core/context.js';
import { currentWorkspaceName } from '../../core/identity.js';
import { readableLinkTargets } from '../../core/pages/link-targets.js';
import { readPage } from '../../core/pages/read.js';
import type { PageRecord } from '../../core/pages/record.js';
import { listSpaces, spaceTree, type TreeFolder } from '../../core/spaces.js';
import { TREE_MAX_DEPTH } from '../../core/tree-input.js';
import { setAppPageHeaders, html, type SafeHtml } from '../../http/shared/html.js';
import { sendError, toServiceError } from '../../http/shared/errors.js';
import { resolvePageSession } from '../../http/shared/page-session.js';
import { pageBacklinks, relatedPages, type RelatedEntry } from '../../retrieval/related.js';
import { SEARCH_MODES, searchPages, type SearchResult } from '../../retrieval/search.js';
import { MAX_QUERY_CHARS } from '../../retrieval/search-input.js';
import type { Principal } from '../../policy/principal.js';
import { badge, sendAppPage, when, type Viewer } from './layout.js';
import { linkKey, pageUrl, renderMarkdown, slugify as slugOf } from './markdown.js';
import { historyRoutes, historyUrl } from './history.js';
import { reviewRoutes } from './review.js';
import { editRoutes, newPageLink, pageControls } from './edit.js';
import { stepUpRoutes } from './stepup.js';
import { adminRoutes } from './admin.js';
import { accountRoutes } from './account.js';
import { countOpenProposals } from '../../core/proposals/count.js';
import { countUnreadInbox } from '../../core/inbox-count.js';
import { discussionLink, threadRoutes } from './threads.js';
import { inboxRoutes } from './inbox.js';
import { chosenWorkspace, clearWorkspaceCookie, hasWorkspaceCookie, switcherFor, workspaceRoutes } from './workspaces.js';
import { notFound } from '../../core/errors.js';
import { operationsRoutes } from './operations.js';

/**
 * The web app's reading pages (issue 17, first slice), under /app: the Spaces, a Space's tree, a
 * page, search, and sign-out. Every page is built from the same core functions the REST routes
 * call (listSpaces, spaceTree, readPage, pageBacklinks, relatedPages, searchPages), with the
 * principal of the session cookie: what a person sees here is what the API answers them.
 * Signed out (or a session still waiting for its second factor) → 303 to /login?next=<here>.
 */

const SearchQuery = z.object({
  q: z.string().max(MAX_QUERY_CHARS).default(''),
  mode: z.enum(SEARCH_MODES).catch('hybrid').default('hybrid'),
});

const spaceUrl = (id: string) => `/app/s/${encodeURIComponent(id)}`;

function loginRedirect(req: FastifyRequest, reply: FastifyReply): FastifyReply {
  return reply
    .code(303)
    .header('location', `/login?next=${encodeURIComponent(req.url)}`)
    .send();
}

/* ------------------------------------------------------------------ views */

function spacesBody(spaces: { id: string; name: string; summary: string }[]): SafeHtml {
  if (spaces.length === 0) {
    return html`<h1>Spaces</h1>
<p class="empty">No Spaces yet. A Space appears when its first page is written (through the API, MCP, git or an import).</p>`;
  }
  return html`<h1>Spaces</h1>
<ul class="cards">
${spaces.map(
  (s) => html`<li class="card">
<h2><a href="${spaceUrl(s.id)}">${s.name}</a></h2>
${s.name !== s.id ? html`<p class="muted mono">${s.id}</p>` : ''}
${s.summary ? html`<p>${s.summary}</p>` : html`<p class="muted">No summary.</p>`}
</li>`,
)}
</ul>`;
}

function folderBody(f: TreeFolder): SafeHtml {
  const pages = f.pages.length
    ? html`<ul class="pages">
${f.pages.map(
  (p) =>
    html`<li><a href="${pageUrl(p.path)}">${p.title}</a> ${p.state !== 'active' ? badge('state', p.state) : ''}${
      p.sensitivity !== 'internal' ? html` ${badge('sensitivity', p.sensitivity)}` : ''
    }</li>`,
)}
</ul>`
    : '';
  const folders = f.folders.map(
    (c) => html`<li class="folder">
<details open>
<summary><span class="folder-name">${c.name}/</span> <span class="muted">${c.page_count} page${c.page_count === 1 ? '' : 's'}</span>${c.archived ? html` ${badge('state', 'archived')}` : ''}</summary>
${c.summary ? html`<p class="summary">${c.summary}</p>` : ''}
${folderBody(c)}
</details>
</li>`,
  );
  const truncated = f.truncated ? html`<p class="muted">Deeper folders are not shown.</p>` : '';
  return html`${f.folders.length ? html`<ul class="folders">${folders}</ul>` : ''}${pages}${truncated}`;
}

function entryList(title: string, id: string, entries: RelatedEntry[], empty?: string): SafeHtml {
  if (entries.length === 0 && !empty) return html``;
  return html`<section class="related" aria-labelledby="${id}">
<h2 id="${id}">${title}</h2>
${
  entries.length
    ? html`<ul>
${entries.map((e) => html`<li><a href="${pageUrl(e.path)}">${e.title}</a>${e.state !== 'active' ? html` ${badge('state', e.state)}` : ''}</li>`)}
</ul>`
    : html`<p class="muted">${empty}</p>`
}
</section>`;
}

function crumbs(path: string): SafeHtml {
  const segs = path.split('/');
  const folders = segs.slice(1, -1);
  return html`<nav class="crumbs" aria-label="Breadcrumb"><a href="${spaceUrl(segs[0]!)}">${segs[0]}</a>${folders.map((f) => html` / <span>${f}</span>`)} / <span aria-current="page">${segs.at(-1)}</span></nav>`;
}

function pageBody(
  page: PageRecord,
  rendered: SafeHtml,
  backlinks: RelatedEntry[],
  related: { links: RelatedEntry[]; neighbours: RelatedEntry[]; shared_tags: RelatedEntry[] },
  controls: SafeHtml = html``,
): SafeHtml {
  return html`${crumbs(page.path)}
<article class="page">
<header class="page-head">
<h1>${page.title}</h1>
<p class="meta">
<span class="visually-hidden">Sensitivity:</span> ${badge('sensitivity', page.sensitivity)}
${page.state !== 'active' ? html`<span class="visually-hidden">State:</span> ${badge('state', page.state)}` : ''}
${page.redacted ? html`<span class="badge badge-redacted" title="Parts of this page are above your access level">partly redacted</span>` : ''}
${page.tags.length ? html`<span class="tags"><span class="visually-hidden">Tags:</span> ${page.tags.map((t) => html`${badge('tag', t)} `)}</span>` : ''}
</p>
${page.state === 'archived' && page.archived_reason ? html`<p class="notice">Archived: ${page.archived_reason}</p>` : ''}
${controls}
</header>
<div class="md">
${rendered}
</div>
<footer class="page-foot muted">
<span class="mono">${page.path}</span> · <a href="${historyUrl(page.path)}">History</a> · last commit <span class="mono" title="${page.commit_sha}">${page.commit_sha.slice(0, 10)}</span> · updated ${when(page.updated_at)}
</footer>
</article>
<aside class="side">
${discussionLink(page)}
${entryList('Backlinks', 'backlinks', backlinks, 'No page links here.')}
${entryList('Links', 'links', related.links)}
${entryList('In the same folder', 'neighbours', related.neighbours)}
${entryList('Shared tags', 'shared-tags', related.shared_tags)}
</aside>`;
}

/** The snippet as text with the query's words marked (each piece escaped by `html`). */
function marked(snippet: string, q: string): SafeHtml {
  const words = [
    ...new Set(
      q
        .toLowerCase()
        .split(/[^\p{L}\p{N}]+/u)
        .filter((w) => w.length >= 2),
    ),
  ];
  if (words.length === 0) return html`${snippet}`;
  const re = new RegExp(`(${words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|')})`, 'giu');
  return html`${snippet.split(re).map((part, i) => (i % 2 === 1 ? html`<mark>${part}</mark>` : part))}`;
}

function searchBody(q: string, mode: string, r: SearchResult | null, error: string | null): SafeHtml {
  const form = html`<form class="search-page" role="search" aria-label="Search with options" method="get" action="/app/search">
<label for="search-q">Search for</label>
<div class="row">
<input id="search-q" name="q" type="search" maxlength="4000" value="${q}">
<label class="visually-hidden" for="search-mode">Mode</label>
<select id="search-mode" name="mode">
${SEARCH_MODES.map((m) => html`<option value="${m}"${m === mode ? html` selected` : ''}>${m === 'hybrid' ? 'hybrid (keyword + meaning)' : m === 'fts' ? 'keyword' : 'meaning (vector)'}</option>`)}
</select>
<button type="submit">Search</button>
</div>
</form>`;
  if (error) return html`<h1>Search</h1>${form}<p class="alert" role="alert">${error}</p>`;
  if (!r) return html`<h1>Search</h1>${form}`;
  return html`<h1>Search</h1>
${form}
${r.note ? html`<p class="muted">${r.note}</p>` : ''}
<p class="muted" role="status">${r.results.length === 0 ? 'No page matches.' : `${r.results.length} page${r.results.length === 1 ? '' : 's'}`}</p>
<ol class="results">
${r.results.map(
  (h) => html`<li>
<h2><a href="${pageUrl(h.path)}${h.section && h.section !== h.title ? `#${encodeURIComponent(slugOf(h.section))}` : ''}">${h.title}</a> ${h.state !== 'active' ? badge('state', h.state) : ''}</h2>
<p class="muted mono">${h.path}${h.section ? html` › ${h.section}` : ''}</p>
<p class="snippet">${marked(h.snippet.replace(/^#{1,6}\s+/, ''), q)}</p>
</li>`,
)}
</ol>`;
}

/* ----------------------------------------------------------------- routes */

/**
 * What a group of app routes in its own module needs (review.ts, edit.ts, …): the core context,
 * the route options, the viewer for the layout, the app's 404 page, and the principal of a form
 * POST (its CSRF field checked against the session's token).
 */
export interface AppKit {
  ctx: CoreContext;
  opts: { config: { auth: 'public' }; schema: { hide: true } };
  viewerOf(p: Principal, req: FastifyRequest): Promise<Viewer>;
  notFoundPage(req: FastifyRequest, reply: FastifyReply, message: string): Promise<FastifyReply>;
  /** The signed-in person of a form POST whose `csrf` field matches; throws the ServiceError otherwise (401 → login, 403 csrf_failed → the error page). */
  formPrincipal(req: FastifyRequest): Promise<Principal>;
}

/** Groups of routes in their own modules, registered after the reading pages (each adds its module here). */
const ROUTE_GROUPS: ((app: FastifyInstance, kit: AppKit) => Promise<void>)[] = [
  reviewRoutes,
  historyRoutes,
  editRoutes,
  stepUpRoutes,
  adminRoutes,
  accountRoutes,
  threadRoutes,
  inboxRoutes,
  workspaceRoutes,
  operationsRoutes,
];

export async function appRoutes(app: FastifyInstance, ctx: CoreContext): Promise<void> {
  const opts = { config: { auth: 'public' as const }, schema: { hide: true as const } };
  // The app's forms are url-encoded: a JSON or text body is refused (415) rather than read as a
  // form, so nothing but a form (CSRF field and all) changes anything here.
  app.removeContentTypeParser(['application/json', 'text/plain']);

  /**
   * The person behind the session (GET pages: no CSRF check), or null when there is none usable,
   * in the workspace the browser chose (the `svc_ws` cookie, workspaces.ts) when it has one;
   * `authenticate()` checks the membership. A choice that no longer works (the person left or
   * was removed, or a lockdown there ended this session's access to it) falls back to the
   * session's own workspace and the cookie is cleared (with a `reply` to clear it on): the next
   * page is a normal one, never an error loop through the sign-in page.
   */
  async function principal(req: FastifyRequest, reply?: FastifyReply): Promise<Principal | null> {
    const ws = chosenWorkspace(req);
    if (hasWorkspaceCookie(req) && ws === undefined && reply) clearWorkspaceCookie(reply);
    const r = await resolvePageSession(ctx, req, { unsafe: false, workspace: ws });
    if (r.ok) return r.p;
    if (ws === undefined) return null;
    const own = await resolvePageSession(ctx, req, { unsafe: false });
    if (!own.ok) return null;
    if (reply) clearWorkspaceCookie(reply);
    return own.p;
  }

  async function viewerOf(p: Principal, req: FastifyRequest): Promise<Viewer> {
    // Editors and owners see how many open proposals wait for them ("Review (n)" in the navigation).
    const reviews = p.role === 'editor' || p.role === 'owner' ? await countOpenProposals(ctx, p) : null;
    // Everyone has an inbox: "Inbox (n)" counts the unread events (the same visibility as GET /api/v1/inbox).
    const inbox = await countUnreadInbox(ctx, p);
    return {
      name: p.name,
      role: p.role,
      workspace: await currentWorkspaceName(ctx, p),
      csrf: req.cookies[CSRF_COOKIE] ?? '',
      switcher: await switcherFor(ctx, p, req.cookies[CSRF_COOKIE] ?? ''),
      ...(reviews ? { reviews: reviews.count, reviewsCapped: reviews.capped } : {}),
      inbox: inbox.count,
      inboxCapped: inbox.capped,
    };
  }

  /** Every /app page needs a signed-in person; the others go to the login page and come back. */
  app.addHook('onRequest', async (req, reply) => {
    setAppPageHeaders(reply);
    if (req.method !== 'GET' && req.method !== 'HEAD') return;
    const p = await principal(req, reply);
    if (!p) return loginRedirect(req, reply);
  });

  async function notFoundPage(req: FastifyRequest, reply: FastifyReply, message: string) {
    const p = req.principal ?? (await principal(req, reply));
    if (!p) return loginRedirect(req, reply);
    return sendAppPage(reply, 404, await viewerOf(p, req), {
      title: 'Not found',
      body: html`<h1>Not found</h1>
<p role="alert">${message}</p>
<p><a href="/app">Back to the Spaces</a></p>`,
    });
  }

  app.setNotFoundHandler(async (req, reply) => notFoundPage(req, reply, 'There is no page at this address, or you do not have access to it.'));

  app.setErrorHandler(async (err, req, reply) => {
    const e = toServiceError(err, req);
    // A page for a browser; the usual JSON error body for anything else (as the login pages do).
    if (!/\btext\/html\b/i.test(req.headers.accept ?? '')) return sendError(reply, e);
    if (e.status === 401) return loginRedirect(req, reply);
    if (e.status === 404) return notFoundPage(req, reply, e.message);
    const p = req.principal;
    const message = e.status >= 500 ? 'Something went wrong on our side. It has been logged; please try again.' : e.message;
    return sendAppPage(reply, e.status, p ? await viewerOf(p, req) : null, {
      title: 'Something went wrong',
      body: html`<h1>Something went wrong</h1>
<p role="alert">${message}</p>
<p><a href="/app">Back to the Spaces</a></p>`,
    });
  });

  app.get('/', opts, async (req, reply) => {
    const p = req.principal!;
    const spaces = await listSpaces(ctx, p);
    return sendAppPage(reply, 200, await viewerOf(p, req), { title: 'Spaces', body: html`${spacesBody(spaces)}${newPageLink(p)}`, current: 'spaces' });
  });

  app.get('/s/:space', opts, async (req, reply) => {
    const p = req.principal!;
    const id = (req.params as { space: string }).space;
    const { space, tree } = await spaceTree(ctx, p, id, { depth: TREE_MAX_DEPTH, includeArchived: false });
    const body = html`<nav class="crumbs" aria-label="Breadcrumb"><a href="/app">Spaces</a> / <span aria-current="page">${space.id}</span></nav>
<h1>${space.name}</h1>
${space.summary ? html`<p class="lead">${space.summary}</p>` : ''}
<p class="muted">${tree.page_count} page${tree.page_count === 1 ? '' : 's'}</p>
${newPageLink(p, space.id)}
<div class="tree">${folderBody(tree)}</div>`;
    return sendAppPage(reply, 200, await viewerOf(p, req), { title: space.name, body, current: 'spaces' });
  });

  app.get('/p/*', opts, async (req, reply) => {
    const p = req.principal!;
    const path = (req.params as { '*': string })['*'];
    if (!path) return notFoundPage(req, reply, 'Which page? The address names none.');
    const page = await readPage(ctx, p, path);
    const [targets, back, related] = await Promise.all([readableLinkTargets(ctx, p, page), pageBacklinks(ctx, p, page.id), relatedPages(ctx, p, page.id)]);
    const links = new Map(targets.map((t) => [linkKey(t.kind, t.target), pageUrl(t.path)]));
    const rendered = renderMarkdown(page.body, { title: page.title, redacted: page.redacted, links });
    const viewer = await viewerOf(p, req);
    const controls = pageControls(p, page, viewer.csrf, req.query);
    return sendAppPage(reply, 200, viewer, { title: page.title, body: pageBody(page, rendered, back.backlinks, related, controls) });
  });

  app.get('/search', opts, async (req, reply) => {
    const p = req.principal!;
    const parsed = SearchQuery.safeParse(req.query);
    const q = parsed.success ? parsed.data.q : '';
    const mode = parsed.success ? parsed.data.mode : 'hybrid';
    let result: SearchResult | null = null;
    let error: string | null = parsed.success ? null : 'The search was too long or malformed.';
    let status = parsed.success ? 200 : 400;
    if (!error && q.trim() !== '') {
      try {
        result = await searchPages(ctx, p, { q, mode, limit: 20, includeArchived: false });
      } catch (err) {
        const e = toServiceError(err, req);
        if (e.status >= 500) throw err;
        error = e.message;
        status = e.status;
      }
    }
    return sendAppPage(reply, status, await viewerOf(p, req), {
      title: q ? `Search: ${q}` : 'Search',
      body: searchBody(q, mode, result, error),
      query: q,
      current: 'search',
    });
  });

  /** Sign out: the form's CSRF field must match the session's token (as the header would on POST /api/auth/logout). */
  app.post('/logout', opts, async (req, reply) => {
    const csrf = (req.body as Record<string, unknown> | undefined)?.csrf;
    const r = await resolvePageSession(ctx, req, { csrf: typeof csrf === 'string' ? csrf : '', unsafe: true, allowPending: true });
    if (r.ok) await closeSession(ctx, r.p.sessionId!);
    else if (r.error.code === 'csrf_failed') {
      return sendAppPage(reply, 403, null, {
        title: 'Form expired',
        body: html`<h1>Form expired</h1>
<p role="alert">This sign-out form did not come from this page. Go back and use the Sign out button again.</p>
<p><a href="/app">Back</a></p>`,
      });
    }
    reply.clearCookie(SESSION_COOKIE, { path: '/' });
    reply.clearCookie(CSRF_COOKIE, { path: '/' });
    clearWorkspaceCookie(reply);
    return reply.code(303).header('location', '/login').send();
  });

  const kit: AppKit = {
    ctx,
    opts,
    viewerOf,
    notFoundPage,
    async formPrincipal(req) {
      const csrf = (req.body as Record<string, unknown> | undefined)?.csrf;
      const ws = chosenWorkspace(req);
      const r = await resolvePageSession(ctx, req, { csrf: typeof csrf === 'string' ? csrf : '', unsafe: true, workspace: ws });
      if (r.ok) return r.p;
      // The form was made for a workspace the person no longer belongs to: refused, never applied
      // to another one; the 404 page that answers falls back to their own workspace (see principal).
      if (ws !== undefined && r.error.code === 'workspace_not_found') {
        throw notFound(
          'You are no longer a member of the workspace this form was for, so it was not sent. The app shows your own workspace again.',
          'workspace_not_found',
        );
      }
      throw r.error;
    },
  };
  for (const group of ROUTE_GROUPS) await group(app, kit);
}
