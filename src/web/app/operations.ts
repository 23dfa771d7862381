import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { listAudit, verifyAudit, type AuditEntryRecord, type AuditPage } from '../../core/audit.js';
import { AuditQueryInput } from '../../core/audit-input.js';
import { badRequest, isServiceError, type ServiceError } from '../../core/errors.js';
import { listInvites } from '../../core/invites.js';
import { lifecycleReport, runLifecycle, type LifecycleCandidate, type LifecycleReport, type LifecycleRunResult } from '../../core/lifecycle.js';
import { listPrincipals, type PrincipalSummary } from '../../core/principals.js';
import { elevate, ELEVATION_MAX_MINUTES, listElevations, lockdown, type ElevationListing } from '../../core/security.js';
import { html, type SafeHtml } from '../../http/shared/html.js';
import type { Principal } from '../../policy/principal.js';
import { findReadablePage } from '../../retrieval/lookup.js';
import { sendAppPage, when } from './layout.js';
import { pageUrl } from './markdown.js';
import type { AppKit } from './routes.js';
import { field, stepUpRedirect, csrfOf } from './forms.js';

/**
 * The owner's operations screens of the web app (issue 17): lockdown, elevations, the audit log
 * (filters, paging, chain verification) and the lifecycle job, with an index at /app/admin.
 * Each calls the core function its REST route calls (src/http/routes/security.ts, audit.ts,
 * lifecycle.ts) with the principal of the session; who may do what is the core's answer, so a
 * member who is not an owner gets the core's 403 page on the owners' screens, and a forged form
 * meets the same refusal. Lockdown, elevations and applying the lifecycle job need a step-up:
 * the core's `step_up_required` sends the person to /app/stepup and back to the screen.
 */

/** Audit entries on one screen (the REST default is 100; a page of 50 stays readable). */
const AUDIT_PAGE = 50;
/** The compact detail of an audit entry is cut here (the full entry is on GET /api/v1/audit). */
const DETAIL_CHARS = 240;
/** The REST route's bound on an elevation's reason (POST /api/v1/elevations). */
const REASON_MAX = 500;

/** A refusal the person can act on (4xx but 401, 403 and CSRF), shown on the form; anything else goes to the error page. */
function formError(err: unknown): ServiceError | null {
  return isServiceError(err) && err.status >= 400 && err.status < 500 && err.status !== 401 && err.status !== 403 ? err : null;
}

const isStepUp = (err: unknown) => isServiceError(err) && err.code === 'step_up_required';

const crumbs = (here: string) =>
  html`<nav class="crumbs" aria-label="Breadcrumb"><a href="/app/admin">Admin</a> / <span aria-current="page">${here}</span></nav>`;

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/* ------------------------------------------------------------------ index */

function indexBody(owner: boolean): SafeHtml {
  const card = (href: string, title: string, text: string) => html`<li class="card"><h2><a href="${href}">${title}</a></h2><p>${text}</p></li>`;
  return html`<h1>Admin</h1>
<ul class="cards">
${
  owner
    ? html`${card('/app/audit', 'Audit log', 'Who did what, newest first; filter by person, agent, action or page, and verify the hash chain.')}
${card('/app/elevations', 'Elevations', 'Let one agent read secret pages for a bounded time, with a reason.')}
${card('/app/lockdown', 'Lockdown', 'If a key or a session may be in the wrong hands: stop every key and token, and sign everyone else out.')}`
    : ''
}
${card('/app/lifecycle', 'Lifecycle', 'Pages untouched for longer than their folder allows, which the lifecycle job archives.')}
</ul>
${owner ? '' : html`<p class="muted">The audit log, elevations and lockdown are for the workspace's owners.</p>`}`;
}

/* --------------------------------------------------------------- lockdown */

function lockdownBody(csrf: string, facts: { agents: number; invites: number; elevations: number }, error: string | null): SafeHtml {
  return html`${crumbs('Lockdown')}
<h1>Lockdown</h1>
<section class="admin-form danger-zone" aria-labelledby="lock-h">
<h2 id="lock-h">What a lockdown does, at once</h2>
<ul class="lock-effects">
<li><strong>Every agent key</strong> of this workspace stops working (${plural(facts.agents, 'agent')}). Agents need new keys afterwards.</li>
<li><strong>Every git token and every OAuth token</strong> of this workspace stops working, yours included.</li>
<li><strong>Pending invites</strong> are revoked (${plural(facts.invites, 'pending invite')}).</li>
<li><strong>Elevations</strong> end (${plural(facts.elevations, 'active elevation')}).</li>
<li><strong>Everyone else is signed out</strong> of this workspace, other owners too; they sign in again. Only this browser stays signed in.</li>
</ul>
<p>Use it when a key, a token or a session may be in the wrong hands. It cannot be undone; nothing is deleted (pages, agents, members and the audit log stay).</p>
${error ? html`<p class="alert" role="alert" id="lock-error">${error}</p>` : ''}
<form method="post" action="/app/lockdown" class="stack">
<input type="hidden" name="csrf" value="${csrf}">
<div class="check"><input id="lock-confirm" name="confirm" type="checkbox" value="yes" required${error ? html` aria-describedby="lock-error"` : ''}><label for="lock-confirm">Yes, lock this workspace down now</label></div>
<div class="buttons"><button type="submit" class="danger">Lock down</button></div>
</form>
</section>`;
}

function lockdownDoneBody(r: Awaited<ReturnType<typeof lockdown>>): SafeHtml {
  return html`${crumbs('Lockdown')}
<h1>Workspace locked down</h1>
<div class="once" role="status">
<p><strong>Done.</strong> Every agent key, git token and OAuth token of workspace <span class="mono">${r.workspace}</span> has stopped working.</p>
</div>
<dl class="facts">
<dt>Sessions signed out</dt><dd>${r.sessions_dropped}</dd>
<dt>Invites revoked</dt><dd>${r.invites_revoked}</dd>
<dt>Elevations ended</dt><dd>${r.elevations_revoked}</dd>
<dt>Token epoch</dt><dd>${r.token_epoch}</dd>
</dl>
<p>Next: mint new keys for the agents you trust on the <a href="/app/agents">Agents</a> page, and a new git token on your <a href="/app/account">Account</a> page.</p>`;
}

/* ------------------------------------------------------------- elevations */

interface ElevationForm {
  agent: string;
  minutes: string;
  reason: string;
  error?: string | undefined;
}

function elevationsBody(
  csrf: string,
  agents: { id: string; name: string }[],
  names: Map<string, string>,
  live: ElevationListing[],
  f: ElevationForm,
  done: ElevationListing | null,
): SafeHtml {
  const table = live.length
    ? html`<div class="table-wrap" tabindex="0" role="region" aria-label="Active elevations">
<table class="elevations">
<thead><tr><th scope="col">Agent</th><th scope="col">Until</th><th scope="col">Reason</th><th scope="col">Granted by</th><th scope="col">Since</th></tr></thead>
<tbody>
${live.map(
  (e) => html`<tr>
<td><a href="/app/agents/${encodeURIComponent(e.agent_id)}">${names.get(e.agent_id) ?? e.agent_id}</a></td>
<td>${when(e.expires_at)}</td>
<td class="reason">${e.reason}</td>
<td>${names.get(e.granted_by) ?? 'a former member'}</td>
<td>${when(e.created_at)}</td>
</tr>`,
)}
</tbody>
</table>
</div>`
    : html`<p class="muted">No agent is elevated now.</p>`;
  const form = agents.length
    ? html`<form method="post" action="/app/elevations" class="stack">
<input type="hidden" name="csrf" value="${csrf}">
<div class="field-row">
<div class="field grow"><label for="el-agent">Agent</label>
<select id="el-agent" name="agent_id" required>
<option value=""${f.agent === '' ? html` selected` : ''}>(choose an agent)</option>
${agents.map((a) => html`<option value="${a.id}"${a.id === f.agent ? html` selected` : ''}>${a.name}</option>`)}
${f.agent !== '' && !agents.some((a) => a.id === f.agent) ? html`<option value="${f.agent}" selected>${f.agent}</option>` : ''}
</select></div>
<div class="field"><label for="el-minutes">For how long (minutes, 1 to ${ELEVATION_MAX_MINUTES})</label>
<input id="el-minutes" name="minutes" type="number" min="1" max="${ELEVATION_MAX_MINUTES}" required value="${f.minutes}"></div>
</div>
<div class="field-row"><div class="field"><label for="el-reason">Reason (kept in the audit log)</label>
<input id="el-reason" name="reason" type="text" maxlength="${REASON_MAX}" required value="${f.reason}"${f.error ? html` aria-describedby="el-error"` : ''}></div></div>
<div class="buttons"><button type="submit">Elevate</button></div>
</form>`
    : html`<p class="muted">There is no agent to elevate. Create one on the <a href="/app/agents">Agents</a> page.</p>`;
  return html`${crumbs('Elevations')}
<h1>Elevations</h1>
${done ? html`<p class="notice notice-ok" role="status">${names.get(done.agent_id) ?? done.agent_id} reads at secret until ${when(done.expires_at)}.</p>` : ''}
<section aria-labelledby="live-h">
<h2 id="live-h">Active now</h2>
${table}
</section>
<section class="admin-form" aria-labelledby="elevate-h">
<h2 id="elevate-h">Elevate an agent</h2>
<p class="muted">An elevation is the only way an agent reads secret pages: while it lasts the agent reads at secret within its read grants (a key's own ceiling still applies). It ends by itself; a lockdown ends it early.</p>
${f.error ? html`<p class="alert" role="alert" id="el-error">${f.error}</p>` : ''}
${form}
</section>`;
}

/** The form as the core's input, or what is wrong with it (the REST route's bounds). */
function elevationInput(f: ElevationForm): { agent_id: string; minutes: number; reason: string } | string {
  if (f.agent === '' || f.agent.length > 100) return 'Choose an agent.';
  const minutes = Number(f.minutes.trim());
  if (f.minutes.trim() === '' || !Number.isInteger(minutes) || minutes < 1 || minutes > ELEVATION_MAX_MINUTES)
    return `The time is a whole number of minutes from 1 to ${ELEVATION_MAX_MINUTES}.`;
  const reason = f.reason.trim();
  if (reason === '' || reason.length > REASON_MAX) return `Give a reason (1 to ${REASON_MAX} characters): it is kept in the audit log.`;
  return { agent_id: f.agent, minutes, reason };
}

/* ------------------------------------------------------------------ audit */

interface AuditFilters {
  principal: string;
  action: string;
  node: string;
  limit: string;
}

function auditHref(f: AuditFilters, cursor?: string): string {
  const q = new URLSearchParams();
  for (const k of ['principal', 'action', 'node', 'limit'] as const) if (f[k] !== '') q.set(k, f[k]);
  if (cursor) q.set('cursor', cursor);
  const s = q.toString();
  return s ? `/app/audit?${s}` : '/app/audit';
}

/** The entry's detail as short `key: value` text (strings bare, the rest as JSON), cut at DETAIL_CHARS. */
function compactDetail(d: Record<string, unknown>): string {
  const text = Object.entries(d)
    .map(([k, v]) => `${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`)
    .join(' · ');
  return text.length > DETAIL_CHARS ? `${text.slice(0, DETAIL_CHARS - 1)}…` : text;
}

function actorText(e: AuditEntryRecord): SafeHtml {
  if (!e.actor) return html`<span class="muted">the service</span>`;
  return html`${e.actor.name ?? e.actor.id}${e.actor.kind === 'agent' ? html` <span class="badge badge-agent">agent</span>` : ''}`;
}

function targetText(e: AuditEntryRecord, readable: Map<string, string>): SafeHtml {
  if (!e.target) return html``;
  const path = e.target.node_id ? readable.get(e.target.node_id) : undefined;
  if (path) return html`<a href="${pageUrl(path)}">${path}</a>`;
  return html`<span class="mono">${e.target.path ?? e.target.node_id}</span>`;
}

function auditForm(f: AuditFilters, people: PrincipalSummary[], error: string | null): SafeHtml {
  const humans = people.filter((x) => x.kind === 'human');
  const agents = people.filter((x) => x.kind === 'agent');
  const opt = (x: PrincipalSummary) => html`<option value="${x.id}"${x.id === f.principal ? html` selected` : ''}>${x.name}</option>`;
  return html`<form class="audit-filters" method="get" action="/app/audit" aria-label="Filter the audit log">
${error ? html`<p class="alert" role="alert" id="audit-error">${error}</p>` : ''}
<div class="field-row">
<div class="field"><label for="au-principal">Who</label>
<select id="au-principal" name="principal">
<option value=""${f.principal === '' ? html` selected` : ''}>(anyone)</option>
${humans.length ? html`<optgroup label="People">${humans.map(opt)}</optgroup>` : ''}
${agents.length ? html`<optgroup label="Agents">${agents.map(opt)}</optgroup>` : ''}
${f.principal !== '' && !people.some((x) => x.id === f.principal) ? html`<option value="${f.principal}" selected>${f.principal}</option>` : ''}
</select></div>
<div class="field"><label for="au-action">Action (exact, or a prefix such as page.)</label>
<input id="au-action" name="action" type="text" maxlength="100" placeholder="page." value="${f.action}"${error ? html` aria-describedby="audit-error"` : ''}></div>
<div class="field"><label for="au-node">Page id</label>
<input id="au-node" name="node" type="text" maxlength="100" value="${f.node}"></div>
</div>
${f.limit !== '' ? html`<input type="hidden" name="limit" value="${f.limit}">` : ''}
<div class="buttons"><button type="submit">Filter</button>${f.principal || f.action || f.node ? html` <a href="/app/audit">Clear the filters</a>` : ''}</div>
</form>`;
}

function auditBody(
  f: AuditFilters,
  people: PrincipalSummary[],
  page: AuditPage | null,
  readable: Map<string, string>,
  cursor: boolean,
  error: string | null,
): SafeHtml {
  const filtered = Boolean(f.principal || f.action || f.node);
  const list = !page
    ? html``
    : page.items.length === 0
      ? html`<p class="empty" role="status">${filtered ? 'No entry matches these filters.' : 'No entries.'}</p>`
      : html`<div class="table-wrap" tabindex="0" role="region" aria-label="Audit entries">
<table class="audit">
<thead><tr><th scope="col">#</th><th scope="col">Time</th><th scope="col">Who</th><th scope="col">Action</th><th scope="col">About</th><th scope="col">Detail</th></tr></thead>
<tbody>
${page.items.map(
  (e) => html`<tr>
<td class="mono">${e.seq}</td>
<td>${when(e.at)}</td>
<td>${actorText(e)}</td>
<td class="mono">${e.action}</td>
<td>${targetText(e, readable)}</td>
<td class="mono detail">${compactDetail(e.detail)}</td>
</tr>`,
)}
</tbody>
</table>
</div>`;
  const paging =
    page && (page.next_cursor || cursor)
      ? html`<nav class="paging" aria-label="Audit pages">${cursor ? html`<a href="${auditHref(f)}">Newest</a>` : ''}${
          page.next_cursor ? html`<a href="${auditHref(f, page.next_cursor)}" rel="next">Older</a>` : ''
        }</nav>`
      : html``;
  return html`${crumbs('Audit log')}
<div class="audit-head">
<h1>Audit log</h1>
<form method="get" action="/app/audit/verify"><button type="submit" class="secondary">Verify chain</button></form>
</div>
<p class="muted">Every change in this workspace, newest first. Each entry carries the hash of the one before it, so an edited or removed entry breaks the chain.</p>
${auditForm(f, people, error)}
${list}
${paging}`;
}

/* -------------------------------------------------------------- lifecycle */

const MODE_TEXT: Record<LifecycleReport['mode'], string> = {
  off: 'off: the job does not run by itself',
  dry: 'dry: scheduled runs only list what they would archive',
  apply: 'apply: scheduled runs archive the candidates',
};

function candidatesTable(label: string, items: LifecycleCandidate[]): SafeHtml {
  return html`<div class="table-wrap" tabindex="0" role="region" aria-label="${label}">
<table class="candidates">
<thead><tr><th scope="col">Page</th><th scope="col">Untouched for</th><th scope="col">Last read</th><th scope="col">Folder rule</th><th scope="col">Freshness</th></tr></thead>
<tbody>
${items.map(
  (c) => html`<tr>
<td><a href="${pageUrl(c.path)}">${c.title}</a><br><span class="muted mono">${c.path}</span></td>
<td>${c.why.age_days} days</td>
<td>${c.why.last_touched_at ? when(c.why.last_touched_at) : html`<span class="muted">never since written</span>`}</td>
<td><span class="mono">${c.why.folder}</span>: after ${plural(c.why.auto_archive_days, 'day')}</td>
<td>${c.why.half_life_score === null ? html`<span class="muted">no half-life</span>` : html`${c.why.half_life_score} <span class="muted">(half-life ${plural(c.why.half_life_days ?? 0, 'day')})</span>`}</td>
</tr>`,
)}
</tbody>
</table>
</div>`;
}

function runResult(r: LifecycleRunResult): SafeHtml {
  const head =
    r.mode === 'dry'
      ? r.pages.length
        ? `Dry run: an apply would archive ${plural(r.pages.length, 'page')} now. Nothing was changed.`
        : 'Dry run: nothing to archive now. Nothing was changed.'
      : r.archived
        ? `Applied: ${plural(r.archived, 'page')} archived with reason stale.`
        : 'Applied: nothing was stale, nothing was archived.';
  return html`<section class="outcome${r.mode === 'apply' && r.archived ? ' outcome-accepted' : ''}" aria-labelledby="run-h" role="status">
<h2 id="run-h">${head}</h2>
${r.commit_sha ? html`<p>Commit <span class="mono">${r.commit_sha}</span></p>` : ''}
${r.remaining ? html`<p>${plural(r.remaining, 'more candidate')} wait for the next run.</p>` : ''}
${r.pages.length ? candidatesTable(r.mode === 'dry' ? 'Would be archived' : 'Archived', r.pages) : ''}
</section>`;
}

function lifecycleBody(owner: boolean, csrf: string, rep: LifecycleReport, result: LifecycleRunResult | null): SafeHtml {
  const last = rep.last_run;
  return html`${owner ? crumbs('Lifecycle') : ''}
<h1>Lifecycle</h1>
<p class="muted">Pages nobody read or changed for longer than their folder's auto-archive setting are candidates; the lifecycle job archives them with reason stale, in one commit, and tells the owners.</p>
${result ? runResult(result) : ''}
<dl class="facts">
<dt>Scheduled runs</dt><dd>${MODE_TEXT[rep.mode]}</dd>
<dt>Next run</dt><dd>${rep.next_run_at ? when(rep.next_run_at) : html`<span class="muted">none</span>`}</dd>
<dt>Last run</dt><dd>${
    last
      ? html`${when(last.at)}, ${last.trigger} ${last.mode}: ${plural(last.archived, 'page')} archived${last.commit_sha ? html` (commit <span class="mono">${last.commit_sha.slice(0, 10)}</span>)` : ''}`
      : html`<span class="muted">never</span>`
  }</dd>
</dl>
<section aria-labelledby="cand-h">
<h2 id="cand-h">Candidates (${rep.total})</h2>
${rep.candidates.length ? candidatesTable('Candidates', rep.candidates) : html`<p class="empty">No page you may read is stale now.</p>`}
</section>
${
  owner
    ? html`<section class="admin-form" aria-labelledby="runnow-h">
<h2 id="runnow-h">Run now</h2>
<p class="muted">A dry run lists what would be archived and changes nothing. Apply archives the candidates now, whatever the scheduled mode; it asks you to confirm it is you.</p>
<form method="post" action="/app/lifecycle/run" class="buttons">
<input type="hidden" name="csrf" value="${csrf}">
<button type="submit" name="mode" value="dry" class="secondary">Dry run</button>
<button type="submit" name="mode" value="apply" class="danger">Apply</button>
</form>
</section>`
    : ''
}`;
}

/* ----------------------------------------------------------------- routes */

export async function operationsRoutes(app: FastifyInstance, kit: AppKit): Promise<void> {
  const { ctx } = kit;

  async function send(req: FastifyRequest, reply: FastifyReply, p: Principal, status: number, title: string, body: SafeHtml) {
    return sendAppPage(reply, status, await kit.viewerOf(p, req), { title, body, current: 'operations' });
  }

  app.get('/admin', kit.opts, async (req, reply) => {
    const p = req.principal!;
    return send(req, reply, p, 200, 'Admin', indexBody(p.role === 'owner'));
  });

  /* Lockdown */

  async function lockdownPage(req: FastifyRequest, reply: FastifyReply, p: Principal, status: number, error: string | null) {
    // The owners' readers refuse everyone else (the core's 403 page), as the lockdown itself would.
    const elevations = await listElevations(ctx, p);
    const invites = (await listInvites(ctx, p)).filter((i) => i.state === 'pending');
    const agents = (await listPrincipals(ctx, p)).filter((x) => x.kind === 'agent');
    const body = lockdownBody(csrfOf(req), { agents: agents.length, invites: invites.length, elevations: elevations.length }, error);
    return send(req, reply, p, status, 'Lockdown', body);
  }

  app.get('/lockdown', kit.opts, async (req, reply) => lockdownPage(req, reply, req.principal!, 200, null));

  app.post('/lockdown', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    if (field(req.body, 'confirm') !== 'yes') {
      // The core decides who may; an unticked form from someone else is still their 403.
      return lockdownPage(req, reply, p, 400, 'Tick "Yes, lock this workspace down now" to lock down.');
    }
    try {
      const r = await lockdown(ctx, p, p.workspaceId);
      // Shown once, from the answer (the counts are not kept elsewhere but in the audit log).
      return await send(req, reply, p, 200, 'Workspace locked down', lockdownDoneBody(r));
    } catch (err) {
      if (isStepUp(err)) return stepUpRedirect(reply, '/app/lockdown');
      throw err;
    }
  });

  /* Elevations */

  async function elevationsPage(req: FastifyRequest, reply: FastifyReply, p: Principal, status: number, f: ElevationForm, done: ElevationListing | null) {
    const live = await listElevations(ctx, p);
    const all = await listPrincipals(ctx, p);
    const names = new Map(all.map((x) => [x.id, x.name]));
    // Suspended agents are left out: the core refuses to elevate them (adopt first, on the API).
    const agents = all.filter((x) => x.kind === 'agent' && !('suspended_at' in x && x.suspended_at));
    return send(req, reply, p, status, 'Elevations', elevationsBody(csrfOf(req), agents, names, live, f, done));
  }

  const emptyElevation = (): ElevationForm => ({ agent: '', minutes: '60', reason: '' });

  app.get('/elevations', kit.opts, async (req, reply) => elevationsPage(req, reply, req.principal!, 200, emptyElevation(), null));

  app.post('/elevations', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const f: ElevationForm = { agent: field(req.body, 'agent_id') ?? '', minutes: field(req.body, 'minutes') ?? '', reason: field(req.body, 'reason') ?? '' };
    const input = elevationInput(f);
    if (typeof input === 'string') return elevationsPage(req, reply, p, 400, { ...f, error: input }, null);
    try {
      const el = await elevate(ctx, p, input);
      return await elevationsPage(req, reply, p, 201, emptyElevation(), { ...el, granted_by: p.id });
    } catch (err) {
      if (isStepUp(err)) return stepUpRedirect(reply, '/app/elevations');
      const e = formError(err);
      if (!e) throw err;
      return elevationsPage(req, reply, p, e.status, { ...f, error: e.message }, null);
    }
  });

  /* Audit log */

  async function auditPage(req: FastifyRequest, reply: FastifyReply, p: Principal) {
    const raw = (req.query ?? {}) as Record<string, unknown>;
    const text = (k: string) => {
      const v = raw[k];
      return typeof v === 'string' ? v.trim() : '';
    };
    const f: AuditFilters = { principal: text('principal'), action: text('action'), node: text('node'), limit: text('limit') };
    const cursor = text('cursor');
    // Empty fields of the GET form mean "no filter"; the rest goes through the REST route's schema.
    const given = Object.fromEntries(Object.entries({ ...f, cursor }).filter(([, v]) => v !== ''));
    const people = await listPrincipals(ctx, p);
    const parsed = AuditQueryInput.safeParse({ limit: AUDIT_PAGE, ...given });
    let page: AuditPage | null = null;
    let error: string | null = null;
    let status = 200;
    if (!parsed.success) {
      // The owners' check first: someone else gets the core's 403 page, not a filter message.
      await verifyAccess(p);
      error = `These filters do not work: ${parsed.error.issues.map((i) => `${i.path.join('.') || 'query'}: ${i.message}`).join('; ')}.`;
      status = 400;
    } else {
      try {
        page = await listAudit(ctx, p, parsed.data);
      } catch (err) {
        const e = formError(err);
        if (!e) throw err;
        error = e.message;
        status = e.status;
      }
    }
    const readable = new Map<string, string>();
    for (const id of new Set((page?.items ?? []).map((e) => e.target?.node_id).filter((x): x is string => Boolean(x)))) {
      // A link only where the owner may open the page now (at its current path); a lookup, not a read.
      const row = await findReadablePage(ctx.store.db, p, id).catch(() => null);
      if (row) readable.set(id, row.path);
    }
    return send(req, reply, p, status, 'Audit log', auditBody(f, people, page, readable, cursor !== '', error));
  }

  /** The core's audit-log check, for a request whose filters never reach listAudit. */
  async function verifyAccess(p: Principal) {
    await listAudit(ctx, p, { limit: 1 });
  }

  app.get('/audit', kit.opts, async (req, reply) => auditPage(req, reply, req.principal!));

  app.get('/audit/verify', kit.opts, async (req, reply) => {
    const p = req.principal!;
    const r = await verifyAudit(ctx, p);
    const body = html`<nav class="crumbs" aria-label="Breadcrumb"><a href="/app/admin">Admin</a> / <a href="/app/audit">Audit log</a> / <span aria-current="page">Verify</span></nav>
<h1>Audit chain</h1>
${
  r.ok
    ? html`<p class="notice notice-ok" role="status">The chain is intact: all ${plural(r.entries, 'entry', 'entries')} follow from the ones before them.</p>`
    : html`<div class="alert" role="alert"><p><strong>The chain is broken</strong> at entry #${r.first_broken!.seq} (${r.first_broken!.action}, ${when(r.first_broken!.at)}): it does not follow from the entry before it, so it or its predecessor was edited or removed.</p><p>${plural(r.entries, 'entry', 'entries')} checked.</p></div>`
}
<p><a href="/app/audit">Back to the audit log</a></p>`;
    return send(req, reply, p, 200, 'Audit chain', body);
  });

  /* Lifecycle */

  async function lifecyclePage(req: FastifyRequest, reply: FastifyReply, p: Principal, result: LifecycleRunResult | null) {
    const rep = await lifecycleReport(ctx, p);
    return send(req, reply, p, 200, 'Lifecycle', lifecycleBody(p.role === 'owner', csrfOf(req), rep, result));
  }

  app.get('/lifecycle', kit.opts, async (req, reply) => lifecyclePage(req, reply, req.principal!, null));

  app.post('/lifecycle/run', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const mode = field(req.body, 'mode');
    if (mode !== 'dry' && mode !== 'apply') throw badRequest('Choose Dry run or Apply.');
    try {
      return await lifecyclePage(req, reply, p, await runLifecycle(ctx, p, mode));
    } catch (err) {
      if (isStepUp(err)) return stepUpRedirect(reply, '/app/lifecycle');
      throw err;
    }
  });
}
