import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { isServiceError, type ServiceError } from '../../core/errors.js';
import { readableLinkTargets } from '../../core/pages/link-targets.js';
import { ARCHIVE_REASONS, analyzeContent, MAX_PAGE_BYTES, type ArchiveReason } from '../../core/pages/content.js';
import { BODY_PATH_MAX_CHARS, CommitMessage, Sha } from '../../core/pages/input.js';
import { readPage } from '../../core/pages/read.js';
import type { PageRecord } from '../../core/pages/record.js';
import { archivePage, createOrProposePage, deletePage, movePage, restorePage, updateOrProposePage, type PublicOutcome } from '../../core/pages/write.js';
import { PROPOSAL_REASON_MAX_CHARS, ProposalReason } from '../../core/proposals/input.js';
import type { ProposalRecord } from '../../core/proposals/record.js';
import { createProposal } from '../../core/proposals/service.js';
import { listSpaces } from '../../core/spaces.js';
import { html, type SafeHtml } from '../../http/shared/html.js';
import { hasActionWithin } from '../../policy/access.js';
import { decideWrite, type PageFacts } from '../../policy/pages.js';
import { decidePropose } from '../../policy/proposals.js';
import type { Principal } from '../../policy/principal.js';
import { sendAppPage, when } from './layout.js';
import { linkKey, pageUrl, renderMarkdown } from './markdown.js';
import type { AppKit } from './routes.js';
import { field, csrfOf } from './forms.js';

/**
 * The web app's writing pages (issue 17): a new page, the editor (preview, save with the base
 * commit: a stale base merges or becomes a proposal, exactly as PUT /api/v1/nodes/:id), and the
 * page actions (move, archive / restore, delete). Every change calls the core function its REST
 * route calls (createOrProposePage, updateOrProposePage, movePage, archivePage, restorePage,
 * deletePage) with the principal of the form's session, whose `csrf` field kit.formPrincipal
 * checks. A step-up gate (403 step_up_required) sends the person to /app/stepup and back to the
 * action, which they confirm again.
 *
 * A person who may not write a page but may propose there (a viewer: ROLE_ACTIONS gives them
 * `propose`) gets "Propose an edit" (the editor, whose text goes to createProposal, as
 * POST /api/v1/proposals) and "Propose archiving" (the same archive form and archivePage as an
 * editor's: the core turns an archive without write into a proposal, as
 * POST /api/v1/nodes/:id/archive does).
 *
 * Showing a control is asked of policy (decideWrite, decidePropose, hasActionWithin) only to
 * spare a person a button that cannot work; the decision that counts is the core's when the form
 * is posted.
 */

/**
 * A page of up to MAX_PAGE_BYTES, form-encoded: every byte may become `%XX` (three bytes), plus
 * room for the other fields. The web face's default form limit (64 KiB) is for small forms.
 */
const EDIT_BODY_LIMIT = 3 * MAX_PAGE_BYTES + 64 * 1024;

const STARTER = '# Title\n\nWrite the page here in markdown.\n';

/** Where a page's editor, actions and view live in the app. */
const segs = (path: string) => path.split('/').map(encodeURIComponent).join('/');
export const editUrl = (path: string) => `/app/e/${segs(path)}`;
export const actionsUrl = (path: string) => `/app/a/${segs(path)}`;
const spaceUrl = (space: string) => `/app/s/${encodeURIComponent(space)}`;
const proposalUrl = (id: string) => `/app/proposals/${encodeURIComponent(id)}`;

/** The notices a page view shows after a change that redirected to it (`?notice=`). */
const NOTICES = {
  saved: 'Saved.',
  unchanged: 'Nothing changed: the text you saved is the page as it was.',
  merged: 'Saved, merged with changes made meanwhile: your edit and theirs are both in the page below.',
  created: 'Page created.',
  moved: 'Page moved. Its history and links moved with it.',
  archived: 'Page archived. It stays readable here and in its history; search leaves it out.',
  restored: 'Page restored: it is active again.',
} as const;
type Notice = keyof typeof NOTICES;

/* ------------------------------------------------------------- form input */

/** Browsers send a textarea's line breaks as CRLF; pages are stored with LF. */
const lf = (text: string) => text.replace(/\r\n?/g, '\n');

const Message = CommitMessage.transform((m) => (m?.trim() ? m.trim() : undefined));

/** The page a form names: its id (hidden field, survives a move) or else the path of the URL. */
const PageId = z.string().regex(/^[A-Za-z0-9_-]{1,100}$/);

function pathParam(req: FastifyRequest): string {
  return (req.params as { '*': string })['*'] ?? '';
}

/** A form field that failed its schema, as the message the form shows. */
const invalid = (what: string) => `${what} is too long or malformed.`;

/* ------------------------------------------------------------------ views */

function facts(page: PageRecord): PageFacts {
  return { path: page.path, sensitivity: page.sensitivity, blockLevel: null };
}

/** Whether to offer the editor: policy's write decision for the page as the person sees it, and no hidden block in it. */
export function mayEdit(p: Principal, page: PageRecord): boolean {
  return decideWrite(p, facts(page), facts(page)).kind === 'allow' && !page.redacted;
}

/**
 * Whether to offer proposing instead: a person who may not write the page but whose propose
 * grant covers it, reading it whole (a proposal made over hidden parts could not be judged).
 */
export function mayPropose(p: Principal, page: PageRecord): boolean {
  return p.kind === 'human' && !page.redacted && !mayEdit(p, page) && decidePropose(p, facts(page)).kind === 'allow';
}

/** The "New page" link of the Spaces and a Space's tree, for whoever may write there. */
export function newPageLink(p: Principal, space?: string): SafeHtml {
  if (!hasActionWithin(p, 'write', space ?? '*')) return html``;
  return html`<p class="tools"><a class="button" href="/app/new${space ? `?space=${encodeURIComponent(space)}` : ''}">New page</a></p>`;
}

/**
 * The header controls of a page view (routes.ts pageBody): the notice of the change that led
 * here, the Edit link and the Actions section (move, archive / restore, delete) for a person
 * who may write the page. A viewer gets the notice only.
 */
export function pageControls(p: Principal, page: PageRecord, csrf: string, query: unknown): SafeHtml {
  const n = field(query, 'notice');
  const notice = n && Object.hasOwn(NOTICES, n) ? html`<p class="notice notice-ok" role="status">${NOTICES[n as Notice]}</p>` : '';
  if (!mayEdit(p, page)) {
    if (!mayPropose(p, page)) return html`${notice}`;
    return html`${notice}<div class="page-tools">
<a class="button" href="${editUrl(page.path)}">Propose an edit</a>
${
  page.state !== 'archived'
    ? html`<details class="page-actions">
<summary>Propose archiving</summary>
<div class="actions">${proposeArchiveForm(page, csrf, '')}</div>
</details>`
    : ''
}
</div>`;
  }
  return html`${notice}<div class="page-tools">
<a class="button" href="${editUrl(page.path)}">Edit</a>
<details class="page-actions">
<summary>Actions</summary>
${actionForms(page, csrf, null)}
</details>
</div>`;
}

function errorAlert(message: string | null): SafeHtml {
  return message ? html`<p class="alert" role="alert" id="form-error">${message}</p>` : html``;
}

/** The source editor: a labelled textarea (the first newline after the tag is eaten by HTML parsers, so one is added). */
function sourceField(content: string, describedBy: string | null): SafeHtml {
  return html`<label for="content">Content (markdown, with optional frontmatter)</label>
<textarea id="content" name="content" class="source" rows="22" spellcheck="true"${describedBy ? html` aria-describedby="${describedBy}"` : ''} required>
${content}</textarea>`;
}

function previewSection(preview: SafeHtml | null): SafeHtml {
  if (!preview) return html``;
  return html`<section class="preview" aria-labelledby="preview-h">
<h2 id="preview-h">Preview <span class="muted">(not saved)</span></h2>
<div class="md">${preview}</div>
</section>`;
}

/** Renders posted markdown as the page would show it; a content error is the preview's message. */
function renderPreview(content: string, slug: string, links: Map<string, string>, redacted: boolean): { html: SafeHtml | null; error: string | null } {
  try {
    const c = analyzeContent(content, slug);
    return {
      html: html`<p class="preview-title"><strong>${c.title}</strong> <span class="muted">· ${c.sensitivity}</span></p>${renderMarkdown(c.body, { title: c.title, redacted, links })}`,
      error: null,
    };
  } catch (err) {
    if (isServiceError(err) && err.status < 500) return { html: null, error: err.message };
    throw err;
  }
}

interface NewForm {
  space: string;
  path: string;
  content: string;
  message: string;
  spaces: string[];
  error: string | null;
  preview: SafeHtml | null;
}

function newPageBody(v: NewForm, csrf: string): SafeHtml {
  return html`<nav class="crumbs" aria-label="Breadcrumb"><a href="/app">Spaces</a>${v.space ? html` / <a href="${spaceUrl(v.space)}">${v.space}</a>` : ''} / <span aria-current="page">New page</span></nav>
<h1>New page</h1>
${errorAlert(v.error)}
${previewSection(v.preview)}
<form class="editor" method="post" action="/app/new">
<input type="hidden" name="csrf" value="${csrf}">
<div class="field-row">
<div class="field">
<label for="space">Space</label>
<input id="space" name="space" type="text" required maxlength="100" value="${v.space}" list="space-list" autocomplete="off" aria-describedby="space-help">
<datalist id="space-list">${v.spaces.map((s) => html`<option value="${s}"></option>`)}</datalist>
<p class="help" id="space-help">An existing Space, or a new one (its first page creates it).</p>
</div>
<div class="field grow">
<label for="path">Path inside the Space</label>
<input id="path" name="path" type="text" required maxlength="1000" value="${v.path}" placeholder="folder/page-name.md" autocomplete="off" aria-describedby="path-help">
<p class="help" id="path-help">Folders separated by <code>/</code>; the file name ends in <code>.md</code> (added when left out).</p>
</div>
</div>
${sourceField(v.content, null)}
<label for="message">Commit message <span class="muted">(optional)</span></label>
<input id="message" name="message" type="text" maxlength="2000" value="${v.message}">
<div class="buttons">
<button type="submit" name="action" value="save">Create page</button>
<button type="submit" name="action" value="preview" class="secondary">Preview</button>
<a href="${v.space ? spaceUrl(v.space) : '/app'}">Cancel</a>
</div>
</form>`;
}

interface EditForm {
  page: PageRecord;
  content: string;
  base: string;
  message: string;
  /** The person may not write the page, only propose: the form proposes (with a reason) instead of saving. */
  propose: boolean;
  error: string | null;
  preview: SafeHtml | null;
}

function crumbs(path: string, last: string): SafeHtml {
  const s = path.split('/');
  return html`<nav class="crumbs" aria-label="Breadcrumb"><a href="${spaceUrl(s[0]!)}">${s[0]}</a> / <a href="${pageUrl(path)}">${s.slice(1).join('/')}</a> / <span aria-current="page">${last}</span></nav>`;
}

function editBody(v: EditForm, csrf: string): SafeHtml {
  if (v.propose) return proposeEditBody(v, csrf);
  const { page } = v;
  return html`${crumbs(page.path, 'Edit')}
<h1>Edit <span class="title-ref">${page.title}</span></h1>
${page.redacted ? html`<p class="alert" role="alert" id="redacted-note">Parts of this page are above your access level and shown as [redacted]. You cannot overwrite what you cannot see: saving will be refused. Ask someone who sees the whole page.</p>` : ''}
${errorAlert(v.error)}
${previewSection(v.preview)}
<form class="editor" method="post" action="${editUrl(page.path)}">
<input type="hidden" name="csrf" value="${csrf}">
<input type="hidden" name="id" value="${page.id}">
<input type="hidden" name="base_sha" value="${v.base}">
<p class="muted small">Editing the version of commit <span class="mono">${v.base.slice(0, 10)}</span>. If the page changes before you save, your edit is merged with that change; a clash becomes a proposal for review.</p>
${sourceField(v.content, page.redacted ? 'redacted-note' : null)}
<label for="message">Commit message <span class="muted">(optional)</span></label>
<input id="message" name="message" type="text" maxlength="2000" value="${v.message}">
<div class="buttons">
<button type="submit" name="action" value="save">Save</button>
<button type="submit" name="action" value="preview" class="secondary">Preview</button>
<a href="${pageUrl(page.path)}">Cancel</a>
</div>
</form>`;
}

/** The editor of a person who may only propose: their text becomes a proposal with their reason (createProposal). */
function proposeEditBody(v: EditForm, csrf: string): SafeHtml {
  const { page } = v;
  return html`${crumbs(page.path, 'Propose an edit')}
<h1>Propose an edit: <span class="title-ref">${page.title}</span></h1>
<p class="notice" role="note">You may read this page but not change it yourself. What you write here becomes a proposal: an editor or owner sees the difference and accepts or rejects it.</p>
${errorAlert(v.error)}
${previewSection(v.preview)}
<form class="editor" method="post" action="${editUrl(page.path)}">
<input type="hidden" name="csrf" value="${csrf}">
<input type="hidden" name="id" value="${page.id}">
<input type="hidden" name="base_sha" value="${v.base}">
<p class="muted small">Proposing changes to the version of commit <span class="mono">${v.base.slice(0, 10)}</span>. If the page changes meanwhile, accepting merges your changes into it.</p>
${sourceField(v.content, null)}
<label for="message">Why (shown to the reviewer)</label>
<textarea id="message" name="message" rows="3" maxlength="${PROPOSAL_REASON_MAX_CHARS}">${v.message}</textarea>
<div class="buttons">
<button type="submit" name="action" value="propose">Propose</button>
<button type="submit" name="action" value="preview" class="secondary">Preview</button>
<a href="${pageUrl(page.path)}">Cancel</a>
</div>
</form>`;
}

/** A proposer's archive form: the same action as an editor's, which the core makes a proposal; `why` becomes its reason. */
function proposeArchiveForm(page: PageRecord, csrf: string, why: string): SafeHtml {
  return html`<form class="action" method="post" action="${actionsUrl(page.path)}">
<input type="hidden" name="csrf" value="${csrf}"><input type="hidden" name="id" value="${page.id}"><input type="hidden" name="do" value="archive">
<p class="help">An editor or owner decides; the page stays as it is until then.</p>
<label for="reason">Kind of reason</label>
<select id="reason" name="reason">
${ARCHIVE_REASONS.map((r) => html`<option value="${r}"${r === 'manual' ? html` selected` : ''}>${r}</option>`)}
</select>
<label for="archive-why">Why (shown to the reviewer)</label>
<textarea id="archive-why" name="message" rows="3" maxlength="${PROPOSAL_REASON_MAX_CHARS}" required>${why}</textarea>
<button type="submit">Propose archiving</button>
</form>`;
}

/** The page actions as POST forms; `focus` names the one to confirm again (after a step-up), `moveTo` the path asked for then. */
function actionForms(page: PageRecord, csrf: string, focus: string | null, moveTo?: string): SafeHtml {
  const url = actionsUrl(page.path);
  const auto = (name: string) => (focus === name ? html` autofocus` : '');
  const hidden = html`<input type="hidden" name="csrf" value="${csrf}"><input type="hidden" name="id" value="${page.id}">`;
  const state =
    page.state === 'archived'
      ? html`<form class="action" method="post" action="${url}">
${hidden}<input type="hidden" name="do" value="restore">
<h3>Restore</h3>
<p class="help">Make the page active again.</p>
<button type="submit"${auto('restore')}>Restore page</button>
</form>`
      : html`<form class="action" method="post" action="${url}">
${hidden}<input type="hidden" name="do" value="archive">
<h3>Archive</h3>
<label for="reason">Reason</label>
<select id="reason" name="reason">
${ARCHIVE_REASONS.map((r) => html`<option value="${r}"${r === 'manual' ? html` selected` : ''}>${r}</option>`)}
</select>
<button type="submit"${auto('archive')}>Archive page</button>
</form>`;
  return html`<div class="actions">
<form class="action" method="post" action="${url}">
${hidden}<input type="hidden" name="do" value="move">
<h3>Move</h3>
<label for="move-to">New path</label>
<input id="move-to" name="to" type="text" required maxlength="1000" value="${moveTo ?? page.path}" autocomplete="off">
<button type="submit"${auto('move')}>Move page</button>
</form>
${state}
<form class="action action-danger" method="post" action="${url}">
${hidden}<input type="hidden" name="do" value="delete">
<h3>Delete</h3>
<p class="help">The page disappears; its history keeps every version. Needs a recent step-up.</p>
<p class="check"><input id="delete-confirm" name="confirm" type="checkbox" value="yes" required><label for="delete-confirm">Yes, delete this page</label></p>
<button type="submit" class="danger"${auto('delete')}>Delete page</button>
</form>
</div>`;
}

/** A proposer's archive form again, with what went wrong (the person may not see the editor's actions). */
function proposeActionsBody(page: PageRecord, csrf: string, error: string, why: string): SafeHtml {
  return html`${crumbs(page.path, 'Propose archiving')}
<h1>Propose archiving: <span class="title-ref">${page.title}</span></h1>
${errorAlert(error)}
<div class="actions">${proposeArchiveForm(page, csrf, why)}</div>
<p><a href="${pageUrl(page.path)}">Back to the page</a></p>`;
}

function actionsBody(page: PageRecord, csrf: string, error: string | null, confirm: string | null, moveTo?: string): SafeHtml {
  const again =
    confirm && ['move', 'archive', 'restore', 'delete'].includes(confirm)
      ? html`<p class="notice" role="status">You confirmed it is you. Now ${confirm} the page again below.</p>`
      : '';
  return html`${crumbs(page.path, 'Actions')}
<h1>Actions: <span class="title-ref">${page.title}</span></h1>
${again}
${errorAlert(error)}
${actionForms(page, csrf, error ? null : confirm, moveTo)}
<p><a href="${pageUrl(page.path)}">Back to the page</a></p>`;
}

function proposedBody(title: string, proposal: ProposalRecord): SafeHtml {
  return html`<h1>${title}</h1>
<p class="notice" role="status">You may not make this change yourself, so it was kept as a proposal for an editor or owner to review: <a href="${proposalUrl(proposal.id)}">proposal ${proposal.id}</a>.</p>
<p><a href="${pageUrl(proposal.path)}">Back to the page</a></p>`;
}

function conflictBody(path: string, details: Record<string, unknown>, mine: string, current: PageRecord | null, coreMessage: string): SafeHtml {
  const proposal = details.proposal as ProposalRecord | undefined;
  return html`${crumbs(path, 'Conflict')}
<h1>Your edit clashes with a change made meanwhile</h1>
<div class="alert" role="alert">
<p>Nothing was saved to the page. ${proposal ? html`Your version was kept as <a href="${proposalUrl(proposal.id)}">proposal ${proposal.id}</a> for review.` : ''}</p>
<details><summary>What clashed</summary><p>${coreMessage}</p></details>
</div>
<p class="buttons"><a class="button" href="${editUrl(current?.path ?? path)}">Edit the current version</a> <a href="${pageUrl(current?.path ?? path)}">View the page</a></p>
<div class="compare">
<section aria-labelledby="now-h">
<h2 id="now-h">The page now${current ? html` <span class="muted small">(commit <span class="mono">${current.commit_sha.slice(0, 10)}</span>, ${when(current.updated_at)})</span>` : ''}</h2>
${current ? html`<pre class="source" tabindex="0" aria-label="Current text">${current.content}</pre>` : html`<p class="muted">The page is no longer there.</p>`}
</section>
<section aria-labelledby="mine-h">
<h2 id="mine-h">Your version</h2>
<pre class="source" tabindex="0" aria-label="Your text">${mine}</pre>
</section>
</div>`;
}

/* ----------------------------------------------------------------- routes */

/** The session's CSRF token, which every form of the page carries (the layout's Viewer holds the same). */

export async function editRoutes(app: FastifyInstance, kit: AppKit): Promise<void> {
  const { ctx } = kit;
  const formOpts = { ...kit.opts, bodyLimit: EDIT_BODY_LIMIT };

  const send = async (reply: FastifyReply, req: FastifyRequest, p: Principal, status: number, title: string, body: SafeHtml) =>
    sendAppPage(reply, status, await kit.viewerOf(p, req), { title, body, current: 'spaces' });

  /** A refusal page in the app's look (a viewer at the editor's address). */
  const refuse = (reply: FastifyReply, req: FastifyRequest, p: Principal, message: string) =>
    send(reply, req, p, 403, 'Not allowed', html`<h1>Not allowed</h1><p role="alert">${message}</p><p><a href="/app">Back to the Spaces</a></p>`);

  /** The error a form shows itself (the person can fix it); 401, 404 and 5xx go to the app's error pages. */
  const formError = (err: unknown): ServiceError | null => {
    if (!isServiceError(err)) return null;
    if (err.status === 401 || err.status === 404 || err.status >= 500 || err.code === 'csrf_failed') return null;
    return err;
  };

  const spaceIds = async (p: Principal) => (await listSpaces(ctx, p)).map((s) => s.id);

  /* New page */

  app.get('/new', kit.opts, async (req, reply) => {
    const p = req.principal!;
    const space = (field(req.query, 'space') ?? '').slice(0, 100);
    const folder = (field(req.query, 'folder') ?? '').slice(0, 1000);
    if (!hasActionWithin(p, 'write', space || '*')) return refuse(reply, req, p, 'Your role lets you read here but not write pages.');
    const inside = folder && space && folder.startsWith(`${space}/`) ? folder.slice(space.length + 1) : folder;
    const form: NewForm = {
      space,
      path: inside ? `${inside.replace(/\/+$/, '')}/` : '',
      content: STARTER,
      message: '',
      spaces: await spaceIds(p),
      error: null,
      preview: null,
    };
    return send(reply, req, p, 200, 'New page', newPageBody(form, csrfOf(req)));
  });

  app.post('/new', formOpts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const csrf = csrfOf(req);
    const space = (field(req.body, 'space') ?? '').trim();
    const inside = (field(req.body, 'path') ?? '').trim().replace(/^\/+/, '');
    const content = lf(field(req.body, 'content') ?? '');
    const rawMessage = field(req.body, 'message') ?? '';
    const form: NewForm = { space, path: inside, content, message: rawMessage, spaces: await spaceIds(p), error: null, preview: null };
    const show = (status: number) => send(reply, req, p, status, 'New page', newPageBody(form, csrf));

    // The file name's `.md` may be left out (a person types a name, not a file).
    const last = inside.split('/').at(-1) ?? '';
    const path = `${space}/${last && !last.includes('.') ? `${inside}.md` : inside}`;
    if (field(req.body, 'action') === 'preview') {
      const r = renderPreview(content, last.replace(/\.md$/, '') || 'page', new Map(), false);
      form.preview = r.html;
      form.error = r.error;
      return show(r.error ? 400 : 200);
    }
    if (!space || !inside) {
      form.error = 'Name the Space and the path of the new page.';
      return show(400);
    }
    const message = Message.safeParse(rawMessage);
    if (!message.success || path.length > BODY_PATH_MAX_CHARS) {
      form.error = invalid(message.success ? 'The path' : 'The commit message');
      return show(400);
    }
    try {
      const o = await createOrProposePage(ctx, p, { path, content }, message.data);
      if ('proposal' in o) return send(reply, req, p, 202, 'Proposed', proposedBody('Your page became a proposal', o.proposal));
      return reply
        .code(303)
        .header('location', `${pageUrl(o.record.path)}?notice=created`)
        .send();
    } catch (err) {
      const e = formError(err);
      if (!e) throw err;
      form.error = e.message;
      return show(e.status);
    }
  });

  /* Edit */

  app.get('/e/*', kit.opts, async (req, reply) => {
    const p = req.principal!;
    const path = pathParam(req);
    if (!path) return kit.notFoundPage(req, reply, 'Which page? The address names none.');
    const page = await readPage(ctx, p, path);
    const propose = decideWrite(p, facts(page), facts(page)).kind !== 'allow';
    if (propose && !mayPropose(p, page)) return refuse(reply, req, p, 'Your role lets you read this page but not edit it.');
    const form: EditForm = { page, content: page.content, base: page.commit_sha, message: '', propose, error: null, preview: null };
    return send(reply, req, p, 200, `${propose ? 'Propose an edit:' : 'Edit'} ${page.title}`, editBody(form, csrfOf(req)));
  });

  app.post('/e/*', formOpts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const csrf = csrfOf(req);
    const id = PageId.safeParse(field(req.body, 'id'));
    const ref = id.success ? id.data : pathParam(req);
    const content = lf(field(req.body, 'content') ?? '');
    const rawMessage = field(req.body, 'message') ?? '';
    const base = Sha.safeParse(field(req.body, 'base_sha'));
    // The page as it is now (404 when it is gone or hidden): the form's frame, and the preview's links.
    const page = await readPage(ctx, p, ref);
    // Who may not write the page gets the proposing form back (the core decides what a post does).
    const propose = decideWrite(p, facts(page), facts(page)).kind !== 'allow';
    const form: EditForm = { page, content, base: base.success ? base.data : page.commit_sha, message: rawMessage, propose, error: null, preview: null };
    const show = (status: number) => send(reply, req, p, status, `${propose ? 'Propose an edit:' : 'Edit'} ${page.title}`, editBody(form, csrf));

    if (field(req.body, 'action') === 'preview') {
      const targets = await readableLinkTargets(ctx, p, page);
      const links = new Map(targets.map((t) => [linkKey(t.kind, t.target), pageUrl(t.path)]));
      const r = renderPreview(content, page.path.split('/').at(-1)!.replace(/\.md$/, ''), links, page.redacted);
      form.preview = r.html;
      form.error = r.error;
      return show(r.error ? 400 : 200);
    }
    if (field(req.body, 'action') === 'propose') {
      const reason = ProposalReason.safeParse(rawMessage.trim());
      if (!reason.success || !base.success) {
        form.error = reason.success ? invalid('The base version') : `The reason is up to ${PROPOSAL_REASON_MAX_CHARS} characters.`;
        return show(400);
      }
      try {
        // As POST /api/v1/proposals: an edit of this page from the version the person read.
        const proposal = await createProposal(ctx, p, { node_id: page.id, content, reason: reason.data, base_sha: base.data });
        return await send(reply, req, p, 202, 'Proposed', proposedBody('Your edit became a proposal', proposal));
      } catch (err) {
        const e = formError(err);
        if (!e) throw err;
        form.error = e.message;
        return show(e.status);
      }
    }
    const message = Message.safeParse(rawMessage);
    if (!message.success || !base.success) {
      form.error = invalid(message.success ? 'The base version' : 'The commit message');
      return show(400);
    }
    try {
      const o = await updateOrProposePage(ctx, p, ref, { kind: 'replace', content }, { baseSha: base.data }, message.data);
      if ('proposal' in o) return send(reply, req, p, 202, 'Proposed', proposedBody('Your edit became a proposal', o.proposal));
      const notice: Notice = o.merged ? 'merged' : o.changed ? 'saved' : 'unchanged';
      return reply
        .code(303)
        .header('location', `${pageUrl(o.record.path)}?notice=${notice}`)
        .send();
    } catch (err) {
      if (isServiceError(err) && err.code === 'conflict' && err.details?.proposal) {
        const current = await readPage(ctx, p, page.id).catch(() => null);
        return send(reply, req, p, 409, 'Conflict', conflictBody(page.path, err.details, content, current, err.message));
      }
      const e = formError(err);
      if (!e) throw err;
      form.error = e.message;
      return show(e.status);
    }
  });

  /* Actions: move, archive, restore, delete */

  app.get('/a/*', kit.opts, async (req, reply) => {
    const p = req.principal!;
    const path = pathParam(req);
    if (!path) return kit.notFoundPage(req, reply, 'Which page? The address names none.');
    const page = await readPage(ctx, p, path);
    if (!mayEdit(p, page)) return refuse(reply, req, p, 'Your role lets you read this page but not move, archive or delete it.');
    const confirm = field(req.query, 'confirm') ?? null;
    const to = field(req.query, 'to')?.slice(0, BODY_PATH_MAX_CHARS);
    return send(reply, req, p, 200, `Actions: ${page.title}`, actionsBody(page, csrfOf(req), null, confirm, to));
  });

  app.post('/a/*', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const csrf = csrfOf(req);
    const id = PageId.safeParse(field(req.body, 'id'));
    const ref = id.success ? id.data : pathParam(req);
    const action = field(req.body, 'do') ?? '';
    const to = (field(req.body, 'to') ?? '').trim().replace(/^\/+/, '');
    const page = await readPage(ctx, p, ref);
    const why = field(req.body, 'message') ?? '';
    const show = (status: number, error: string) =>
      mayEdit(p, page)
        ? send(reply, req, p, status, `Actions: ${page.title}`, actionsBody(page, csrf, error, null, to || undefined))
        : send(reply, req, p, status, `Propose archiving: ${page.title}`, proposeActionsBody(page, csrf, error, why));
    const done = (o: PublicOutcome, notice: Notice, what: string) => {
      if (o.proposal) return send(reply, req, p, 202, 'Proposed', proposedBody(`Your ${what} became a proposal`, o.proposal));
      return reply
        .code(303)
        .header('location', `${pageUrl(o.record!.path)}?notice=${notice}`)
        .send();
    };
    try {
      if (action === 'move') {
        if (!to || to.length > BODY_PATH_MAX_CHARS) return await show(400, 'Give the new path of the page (<space>/<folder>/<name>.md).');
        return await done(await movePage(ctx, p, page.id, to), 'moved', 'move');
      }
      if (action === 'archive') {
        const reason = field(req.body, 'reason') ?? 'manual';
        if (!ARCHIVE_REASONS.includes(reason as ArchiveReason)) return await show(400, `The reason is one of ${ARCHIVE_REASONS.join(', ')}.`);
        // The "why" of a proposer's form: the proposal's reason (or the commit message of an archive done at once).
        const message = Message.safeParse(why);
        if (!message.success) return await show(400, invalid('The reason'));
        return await done(await archivePage(ctx, p, page.id, reason as ArchiveReason, message.data), 'archived', 'archive');
      }
      if (action === 'restore') return await done(await restorePage(ctx, p, page.id, undefined, { allowPropose: true }), 'restored', 'restore');
      if (action === 'delete') {
        if (field(req.body, 'confirm') !== 'yes') return await show(400, 'Tick "Yes, delete this page" to delete it.');
        const r = await deletePage(ctx, p, page.id);
        const space = r.path.split('/')[0]!;
        return await send(
          reply,
          req,
          p,
          200,
          'Page deleted',
          html`<h1>Page deleted</h1>
<p class="notice notice-ok" role="status"><span class="mono">${r.path}</span> was deleted in commit <span class="mono">${r.commit_sha.slice(0, 10)}</span>. Its history keeps every version.</p>
<p><a href="${spaceUrl(space)}">Back to ${space}</a></p>`,
        );
      }
      return await show(400, 'Choose an action: move, archive, restore or delete.');
    } catch (err) {
      if (isServiceError(err) && err.code === 'step_up_required') {
        const back = `${actionsUrl(page.path)}?confirm=${encodeURIComponent(action)}${action === 'move' && to ? `&to=${encodeURIComponent(to)}` : ''}`;
        return reply
          .code(303)
          .header('location', `/app/stepup?next=${encodeURIComponent(back)}`)
          .send();
      }
      const e = formError(err);
      if (!e) throw err;
      return show(e.status, e.message);
    }
  });
}
