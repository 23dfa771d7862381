import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { isServiceError, type ServiceError } from '../../core/errors.js';
import { readPage } from '../../core/pages/read.js';
import type { PageRecord } from '../../core/pages/record.js';
import { PROPOSAL_REASON_MAX_CHARS } from '../../core/proposals/input.js';
import type { ProposalRecord } from '../../core/proposals/record.js';
import { acceptProposal, getProposal, listProposals, PROPOSAL_STATUSES, rejectProposal } from '../../core/proposals/service.js';
import { html, type SafeHtml } from '../../http/shared/html.js';
import type { Principal } from '../../policy/principal.js';
import { DIFF_VIEWS, renderDiff, viewSwitch, type DiffView } from './diff.js';
import { ago, diffUrl, historyUrl, principalNames, who } from './history.js';
import { sendAppPage, when } from './layout.js';
import { pageUrl } from './markdown.js';
import type { AppKit } from './routes.js';

/**
 * Review (issue 17): the proposal queue and one proposal, under /app.
 *   GET  /app/proposals?status=open|accepted|rejected|superseded|all[&cursor=]   the proposals the person sees, LIST_LIMIT a page
 *   GET  /app/proposals/:id?view=inline|split                           one, as a diff, with Accept / Reject
 *   POST /app/proposals/:id/accept   (csrf, optional content: accept after editing)
 *   POST /app/proposals/:id/reject   (csrf, reason)
 * The same core functions as /api/v1/proposals (listProposals, getProposal, acceptProposal,
 * rejectProposal): who may see and who may decide is the core's and policy's answer, not this
 * module's. The decide forms are shown to editors and owners only (a viewer's forged POST meets
 * the core's 403). A stale proposal whose changes clash answers the core's 409 `conflict`,
 * shown on the proposal's page with the edit-before-accepting form open.
 */

const STATUS_FILTERS = [...PROPOSAL_STATUSES, 'all'] as const;
const ListQuery = z.object({
  status: z.enum(STATUS_FILTERS).catch('open').default('open'),
  // The core's next_cursor, handed back as given (GET /api/v1/proposals?cursor= takes the same).
  cursor: z.string().min(1).max(200).optional(),
});
const ViewQuery = z.object({ view: z.enum(DIFF_VIEWS).catch('inline').default('inline') });
const AcceptForm = z.object({ content: z.string().optional() });
const RejectForm = z.object({ reason: z.string().trim().min(1).max(PROPOSAL_REASON_MAX_CHARS) });
const LIST_LIMIT = 100;

const proposalUrl = (id: string) => `/app/proposals/${encodeURIComponent(id)}`;

type Names = Map<string, { name: string; kind: string }>;

const KIND_VERB: Record<ProposalRecord['kind'], string> = {
  edit: 'Edit',
  create: 'Create',
  archive: 'Archive',
  move: 'Move',
  delete: 'Delete',
};

const ORIGIN_TEXT: Record<ProposalRecord['origin'], string> = {
  propose: 'proposed for review',
  conflict: 'an edit that clashed with a newer version',
  no_write: 'a change made without the right to write',
  step_up: 'a change that needed a step-up',
};

/** May this person decide on proposals at all (the forms are shown)? The core decides each one again. */
const decides = (p: Principal) => p.kind === 'human' && (p.role === 'editor' || p.role === 'owner');

function statusBadge(status: string): SafeHtml {
  return html`<span class="badge badge-status badge-status-${status}">${status}</span>`;
}

/** The list's address for a status filter, optionally from a cursor on. */
function listUrl(status: (typeof STATUS_FILTERS)[number], cursor?: string): string {
  const q = new URLSearchParams();
  if (status !== 'open') q.set('status', status);
  if (cursor) q.set('cursor', cursor);
  const qs = q.toString();
  return `/app/proposals${qs ? `?${qs}` : ''}`;
}

function listBody(
  status: (typeof STATUS_FILTERS)[number],
  list: ProposalRecord[],
  names: Names,
  paging: { next: string | null; paged: boolean },
  canDecide: boolean,
): SafeHtml {
  const tabs = html`<nav class="tabs" aria-label="Proposal status">${STATUS_FILTERS.map(
    (s) => html`<a href="${listUrl(s)}"${s === status ? html` aria-current="page"` : ''}>${s}</a>`,
  )}</nav>`;
  const items = list.map(
    (r) => html`<li class="proposal-item">
<h2><a href="${proposalUrl(r.id)}">${KIND_VERB[r.kind]} <span class="mono">${r.path}</span></a> ${statusBadge(r.status)}</h2>
<p class="muted">by ${who(names, r.proposer)} · ${ago(r.created_at)}${r.kind === 'move' && typeof r.params.to === 'string' ? html` · to <span class="mono">${r.params.to}</span>` : ''}</p>
${r.reason ? html`<p class="reason">${r.reason}</p>` : ''}
</li>`,
  );
  return html`<h1>${canDecide ? 'Review' : 'Proposals'}</h1>
<p class="muted">${canDecide ? 'Changes proposed by agents and people, waiting for an editor or owner to accept or reject them.' : 'Proposals you can see. Only editors and owners decide on them.'}</p>
${tabs}
${
  list.length === 0
    ? html`<p class="empty">${status === 'open' ? 'Nothing to review: no open proposals.' : `No ${status === 'all' ? '' : `${status} `}proposals.`}</p>`
    : html`<ul class="proposals">${items}</ul>`
}
${
  paging.next || paging.paged
    ? html`<nav class="paging" aria-label="More proposals">${paging.paged ? html`<a href="${listUrl(status)}">Newest</a>` : ''}${
        paging.next ? html`<a href="${listUrl(status, paging.next)}" rel="next">Older proposals</a>` : ''
      }</nav>`
    : ''
}`;
}

/** The current page as the person reads it, or null when it is gone (deleted or moved out of sight). */
async function currentPage(kit: AppKit, p: Principal, id: string | null): Promise<PageRecord | null> {
  if (!id) return null;
  try {
    return await readPage(kit.ctx, p, id);
  } catch (e) {
    if (isServiceError(e) && e.status === 404) return null;
    throw e;
  }
}

/** The version the proposal was based on, as the person reads it (null when it cannot be read). */
async function baseVersion(kit: AppKit, p: Principal, r: ProposalRecord): Promise<PageRecord | null> {
  if (!r.node_id || !r.base_commit) return null;
  try {
    return await readPage(kit.ctx, p, r.node_id, { at: r.base_commit });
  } catch (e) {
    if (isServiceError(e) && (e.status === 404 || e.status === 400)) return null;
    throw e;
  }
}

/** What accepting does: the diff for edit and create, a sentence for the others. */
async function changeSection(kit: AppKit, p: Principal, r: ProposalRecord, view: DiffView): Promise<SafeHtml> {
  const switcher = viewSwitch(view, (v) => `${proposalUrl(r.id)}${v === 'inline' ? '' : `?view=${v}`}`);
  if (r.kind === 'create') {
    if (r.content === null) return html`<p class="muted">The proposed text is shown to people only.</p>`;
    return html`<h2>The new page</h2>${switcher}${renderDiff('', r.content, { view, fromLabel: 'nothing (a new page)', toLabel: 'the proposed page' })}`;
  }
  const current = await currentPage(kit, p, r.node_id);
  if (r.kind === 'archive') {
    const why = typeof r.params.reason === 'string' ? r.params.reason : null;
    return html`<h2>What it does</h2><p>Archives <span class="mono">${r.path}</span>${why ? html` (reason: ${why})` : ''}: the page stays readable and in its history, marked archived, and is left out of search by default.</p>`;
  }
  if (r.kind === 'move') {
    return html`<h2>What it does</h2><p>Moves <span class="mono">${r.path}</span> to <span class="mono">${typeof r.params.to === 'string' ? r.params.to : '?'}</span>; the page keeps its id and history.</p>`;
  }
  if (r.kind === 'delete') {
    return html`<h2>What it does</h2><p>Deletes <span class="mono">${r.path}</span> (its history keeps every version).</p>`;
  }
  // edit
  if (r.content === null) return html`<p class="muted">The proposed text is shown to people only.</p>`;
  if (!current && r.status === 'open') return html`<p class="alert" role="alert">The page no longer exists; this proposal cannot be applied.</p>`;
  const base = await baseVersion(kit, p, r);
  const stale = r.status === 'open' && current !== null && base !== null && base.commit_sha !== current.commit_sha;
  if (r.status === 'open' && current && !stale) {
    return html`<h2>Changes against the current page</h2>${switcher}${renderDiff(current.content, r.content, {
      view,
      fromLabel: `the current page (${current.commit_sha.slice(0, 10)})`,
      toLabel: 'the proposal',
    })}`;
  }
  const from = base ?? current;
  const note = stale
    ? html`<p class="notice">The page has changed since the version this proposal was based on (<span class="mono">${base.commit_sha.slice(0, 10)}</span> → now <span class="mono">${current.commit_sha.slice(0, 10)}</span>, <a href="${diffUrl(r.path, { from: base.commit_sha, to: current.commit_sha })}">see what changed</a>). Below is what the proposer changed; accepting merges it into the current page, or reports a clash.</p>`
    : '';
  return html`<h2>Proposed changes</h2>${note}${switcher}${renderDiff(from?.content ?? '', r.content, {
    view,
    fromLabel: from ? `the version it was based on (${from.commit_sha.slice(0, 10)})` : 'nothing',
    toLabel: 'the proposal',
  })}`;
}

function outcome(r: ProposalRecord, names: Names): SafeHtml {
  if (r.status === 'open') return html``;
  const by = html`${who(names, r.decided_by)}${r.decided_at ? html` · ${when(r.decided_at)}` : ''}`;
  if (r.status === 'accepted') {
    return html`<section class="outcome outcome-accepted" aria-labelledby="outcome-h">
<h2 id="outcome-h">Accepted</h2>
<p>Accepted by ${by}.${r.result_commit ? html` Applied as commit <span class="mono">${r.result_commit.slice(0, 10)}</span>, credited to the proposer.` : ''}</p>
<p><a href="${pageUrl(r.kind === 'move' && typeof r.params.to === 'string' ? r.params.to : r.path)}">Open the page</a> · <a href="${historyUrl(r.path)}">its history</a></p>
</section>`;
  }
  if (r.status === 'rejected') {
    return html`<section class="outcome outcome-rejected" aria-labelledby="outcome-h">
<h2 id="outcome-h">Rejected</h2>
<p>Rejected by ${by}.</p>
${r.decision_reason ? html`<blockquote class="reason">${r.decision_reason}</blockquote>` : ''}
</section>`;
  }
  return html`<section class="outcome" aria-labelledby="outcome-h"><h2 id="outcome-h">Superseded</h2>
<p>A newer proposal replaced this one${r.superseded_by ? html`: <a href="${proposalUrl(r.superseded_by)}">${r.superseded_by}</a>` : ''}.</p></section>`;
}

interface Problem {
  status: number;
  message: string;
  /** The acceptor's edited text, kept in the form when the accept failed. */
  content?: string | undefined;
  /** A clash on accept: open the edit form. */
  conflict?: boolean;
}

function decideForms(r: ProposalRecord, csrf: string, problem: Problem | null): SafeHtml {
  const editable = (r.kind === 'edit' || r.kind === 'create') && r.content !== null;
  const action = proposalUrl(r.id);
  return html`<section class="decide" aria-labelledby="decide-h">
<h2 id="decide-h">Decide</h2>
<div class="decide-forms">
<form method="post" action="${action}/accept" class="accept-form">
<input type="hidden" name="csrf" value="${csrf}">
<button type="submit">Accept</button>
</form>
${
  editable
    ? html`<details class="edit-accept"${problem?.conflict || problem?.content !== undefined ? html` open` : ''}>
<summary>Edit before accepting</summary>
<form method="post" action="${action}/accept">
<input type="hidden" name="csrf" value="${csrf}">
<label for="accept-content">The text to apply (replaces the page as it is now)</label>
<textarea id="accept-content" name="content" rows="16" spellcheck="false">${problem?.content ?? r.content}</textarea>
<button type="submit">Accept with these edits</button>
</form>
</details>`
    : ''
}
<form method="post" action="${action}/reject" class="reject-form">
<input type="hidden" name="csrf" value="${csrf}">
<label for="reject-reason">Reason for rejecting</label>
<textarea id="reject-reason" name="reason" rows="3" maxlength="${PROPOSAL_REASON_MAX_CHARS}" required></textarea>
<button type="submit" class="danger">Reject</button>
</form>
</div>
</section>`;
}

export async function reviewRoutes(app: FastifyInstance, kit: AppKit): Promise<void> {
  const { ctx, opts } = kit;

  app.get('/proposals', opts, async (req, reply) => {
    const p = req.principal!;
    const q = ListQuery.safeParse(req.query ?? {});
    const status = q.success ? q.data.status : 'open';
    const viewer = await kit.viewerOf(p, req);
    /** A cursor that is not one the core gave out (edited, cut short, too long): a 400 page, never a 500. */
    const badCursor = () =>
      sendAppPage(reply, 400, viewer, {
        title: 'Proposals',
        body: html`<h1>${decides(p) ? 'Review' : 'Proposals'}</h1>
<p class="alert" role="alert">This link to a later part of the list is not valid (it was changed or cut short).</p>
<p><a href="${listUrl(status)}">Back to the newest proposals</a></p>`,
        current: 'review',
      });
    if (!q.success) return badCursor();
    let r: Awaited<ReturnType<typeof listProposals>>;
    try {
      r = await listProposals(ctx, p, { status: status === 'all' ? undefined : status, limit: LIST_LIMIT, cursor: q.data.cursor });
    } catch (e) {
      if (isServiceError(e) && e.code === 'invalid_cursor') return badCursor();
      throw e;
    }
    const names = await principalNames(ctx, p);
    return sendAppPage(reply, 200, viewer, {
      title: decides(p) ? 'Review' : 'Proposals',
      body: listBody(status, r.proposals, names, { next: r.next_cursor, paged: q.data.cursor !== undefined }, decides(p)),
      current: 'review',
    });
  });

  async function showProposal(req: FastifyRequest, reply: FastifyReply, p: Principal, id: string, problem: Problem | null): Promise<FastifyReply> {
    const r = await getProposal(ctx, p, id);
    const { view } = ViewQuery.parse(req.query ?? {});
    const names = await principalNames(ctx, p);
    const viewer = await kit.viewerOf(p, req);
    const target = r.kind === 'create' ? html`<span class="mono">${r.path}</span>` : html`<a class="mono" href="${pageUrl(r.path)}">${r.path}</a>`;
    const body = html`<nav class="crumbs" aria-label="Breadcrumb"><a href="/app/proposals">${decides(p) ? 'Review' : 'Proposals'}</a> / <span aria-current="page">${r.id}</span></nav>
<h1>${KIND_VERB[r.kind]} ${r.path.split('/').at(-1)} ${statusBadge(r.status)}</h1>
<dl class="facts">
<div><dt>Target</dt><dd>${target}</dd></div>
<div><dt>Proposed by</dt><dd>${who(names, r.proposer)} · ${ago(r.created_at)}</dd></div>
<div><dt>Why</dt><dd>${r.reason || html`<span class="muted">no reason given</span>`}</dd></div>
<div><dt>Origin</dt><dd>${ORIGIN_TEXT[r.origin]}</dd></div>
</dl>
${problem ? html`<div class="alert" role="alert"><p>${problem.conflict ? 'Not accepted: ' : ''}${problem.message}</p></div>` : ''}
${outcome(r, names)}
<section class="changes">${await changeSection(kit, p, r, view)}</section>
${r.status === 'open' && decides(p) ? decideForms(r, viewer.csrf, problem) : ''}
${r.status === 'open' && !decides(p) ? html`<p class="muted">Waiting for an editor or owner to decide.</p>` : ''}`;
    return sendAppPage(reply, problem?.status ?? 200, viewer, { title: `Proposal: ${r.path}`, body, current: 'review' });
  }

  app.get('/proposals/:id', opts, async (req, reply) => {
    const p = req.principal!;
    return showProposal(req, reply, p, (req.params as { id: string }).id, null);
  });

  /** A decision the core refused for a reason the person can act on: shown on the proposal's page. */
  const actionable = (e: unknown): e is ServiceError => isServiceError(e) && (e.status === 409 || e.status === 400);

  app.post('/proposals/:id/accept', opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const id = (req.params as { id: string }).id;
    const form = AcceptForm.safeParse(req.body ?? {});
    // A textarea sends CRLF line ends: the text is applied with the page's own LF ends.
    const content = form.success && form.data.content !== undefined ? form.data.content.replace(/\r\n/g, '\n') : undefined;
    try {
      await acceptProposal(ctx, p, id, { content });
    } catch (e) {
      if (!actionable(e)) throw e;
      return showProposal(req, reply, p, id, { status: e.status, message: e.message, content, conflict: e.code === 'conflict' });
    }
    return reply.code(303).header('location', proposalUrl(id)).send();
  });

  app.post('/proposals/:id/reject', opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const id = (req.params as { id: string }).id;
    const form = RejectForm.safeParse(req.body ?? {});
    if (!form.success) {
      return showProposal(req, reply, p, id, { status: 400, message: `Give a reason for rejecting (1 to ${PROPOSAL_REASON_MAX_CHARS} characters).` });
    }
    try {
      await rejectProposal(ctx, p, id, form.data.reason);
    } catch (e) {
      if (!actionable(e)) throw e;
      return showProposal(req, reply, p, id, { status: e.status, message: e.message });
    }
    return reply.code(303).header('location', proposalUrl(id)).send();
  });
}
