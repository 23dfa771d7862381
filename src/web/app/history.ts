import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { Sha } from '../../core/pages/input.js';
import { pageHistory, readPage, type HistoryEntry } from '../../core/pages/read.js';
import { listPrincipals } from '../../core/principals.js';
import { html, type SafeHtml } from '../../http/shared/html.js';
import type { Principal } from '../../policy/principal.js';
import { DIFF_VIEWS, renderDiff, viewSwitch, type DiffView } from './diff.js';
import { badge, sendAppPage, when } from './layout.js';
import { pageUrl } from './markdown.js';
import type { AppKit } from './routes.js';

/**
 * A page's history and the diff between two of its versions (issue 17), under /app:
 *   GET /app/h/<path>                                  the versions, newest first, with compare controls
 *   GET /app/diff/<path>?from=<sha>&to=<sha>&view=…    the diff, inline or side by side
 * The list is the core's `pageHistory` (as GET /api/v1/nodes/:id/history: versions above the
 * reader's ceiling are left out); each side of a diff is `readPage` at that commit (as GET
 * /api/v1/nodes/:id?at=), redacted to the reader like any read, so a diff never shows a block the
 * reader could not read on the page itself.
 */

const HISTORY_LIMIT = 50;

const encPath = (path: string) => path.split('/').map(encodeURIComponent).join('/');
export const historyUrl = (path: string) => `/app/h/${encPath(path)}`;
export function diffUrl(path: string, q: { from?: string | null | undefined; to: string; view?: DiffView }): string {
  const params = new URLSearchParams();
  if (q.from) params.set('from', q.from);
  params.set('to', q.to);
  if (q.view && q.view !== 'inline') params.set('view', q.view);
  return `/app/diff/${encPath(path)}?${params.toString()}`;
}

/** Names of the workspace's people and agents by id (the same list GET /api/v1/principals answers). */
export async function principalNames(ctx: CoreContext, p: Principal): Promise<Map<string, { name: string; kind: string }>> {
  const all = await listPrincipals(ctx, p);
  return new Map(all.map((x) => [x.id, { name: x.name, kind: x.kind }]));
}

/** Who did it: a name (agents marked), or the bare id of someone no longer in the workspace. */
export function who(names: Map<string, { name: string; kind: string }>, id: string | null): SafeHtml {
  if (!id) return html`<span class="muted">nobody</span>`;
  const n = names.get(id);
  if (!n) return html`<span class="mono">${id}</span>`;
  return html`<span class="who-ref">${n.name}</span>${n.kind === 'agent' ? html` <span class="badge badge-agent">agent</span>` : ''}`;
}

/** "5 minutes ago" next to the exact time. */
export function ago(iso: string, now = Date.now()): SafeHtml {
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  const text =
    s < 60
      ? 'just now'
      : s < 3600
        ? `${Math.floor(s / 60)} min ago`
        : s < 86_400
          ? `${Math.floor(s / 3600)} h ago`
          : `${Math.floor(s / 86_400)} day${Math.floor(s / 86_400) === 1 ? '' : 's'} ago`;
  return html`<time datetime="${iso}" title="${iso}">${text}</time>`;
}

const HistoryQuery = z.object({ before: Sha.optional() });
const DiffQuery = z.object({
  from: Sha.optional().or(z.literal('')),
  to: Sha,
  view: z.enum(DIFF_VIEWS).catch('inline').default('inline'),
});

function historyBody(path: string, versions: HistoryEntry[], names: Map<string, { name: string; kind: string }>, nextBefore: string | null): SafeHtml {
  const live = versions.filter((v) => v.content_hash !== null);
  const defaultTo = live[0]?.commit_sha;
  const defaultFrom = live[1]?.commit_sha;
  const rows = versions.map((v, i) => {
    const prev = versions.slice(i + 1).find((x) => x.content_hash !== null);
    const short = v.commit_sha.slice(0, 10);
    const compare =
      v.content_hash === null
        ? html`<td class="pick"></td><td class="pick"></td>`
        : html`<td class="pick"><input type="radio" name="from" value="${v.commit_sha}" id="from-${short}"${v.commit_sha === defaultFrom ? html` checked` : ''}><label class="visually-hidden" for="from-${short}">Compare from ${short}</label></td>
<td class="pick"><input type="radio" name="to" value="${v.commit_sha}" id="to-${short}"${v.commit_sha === defaultTo ? html` checked` : ''}><label class="visually-hidden" for="to-${short}">Compare to ${short}</label></td>`;
    const changes =
      v.content_hash === null
        ? ''
        : html`<a href="${diffUrl(path, { from: prev?.commit_sha, to: v.commit_sha })}">changes<span class="visually-hidden"> in ${short}</span></a>`;
    return html`<tr>
${compare}
<td><span class="mono" title="${v.commit_sha}">${short}</span></td>
<td>${badge('state', v.action)}</td>
<td>${who(names, v.principal_id)}</td>
<td>${when(v.created_at)}</td>
<td class="msg">${v.message || html`<span class="muted">no message</span>`}${v.path !== path ? html` <span class="muted">(as <span class="mono">${v.path}</span>)</span>` : ''}</td>
<td>${changes}</td>
</tr>`;
  });
  return html`<nav class="crumbs" aria-label="Breadcrumb"><a href="${pageUrl(path)}">${path}</a> / <span aria-current="page">history</span></nav>
<h1>History</h1>
<p class="muted">Versions of <span class="mono">${path}</span>, newest first. Choose two to compare.</p>
<form class="history" method="get" action="/app/diff/${encPath(path)}">
<div class="table-wrap" role="region" aria-label="Versions" tabindex="0">
<table class="versions">
<thead><tr><th scope="col">From</th><th scope="col">To</th><th scope="col">Commit</th><th scope="col">Action</th><th scope="col">Who</th><th scope="col">When</th><th scope="col">Message</th><th scope="col"><span class="visually-hidden">Changes</span></th></tr></thead>
<tbody>${rows}</tbody>
</table>
</div>
<div class="row compare-row">
<label for="diff-view">View</label>
<select id="diff-view" name="view"><option value="inline">Inline</option><option value="split">Side by side</option></select>
<button type="submit"${live.length < 1 ? html` disabled` : ''}>Compare</button>
</div>
</form>
${nextBefore ? html`<p><a href="${historyUrl(path)}?before=${nextBefore}">Older versions</a></p>` : ''}`;
}

export async function historyRoutes(app: FastifyInstance, kit: AppKit): Promise<void> {
  const { ctx, opts } = kit;

  app.get('/h/*', opts, async (req, reply) => {
    const p = req.principal!;
    const path = (req.params as { '*': string })['*'];
    if (!path) return kit.notFoundPage(req, reply, 'Which page? The address names none.');
    const q = HistoryQuery.safeParse(req.query);
    const h = await pageHistory(ctx, p, path, { limit: HISTORY_LIMIT, before: q.success ? q.data.before : undefined });
    const names = await principalNames(ctx, p);
    const shown = h.versions[0]?.path ?? path;
    return sendAppPage(reply, 200, await kit.viewerOf(p, req), {
      title: `History: ${shown}`,
      body: historyBody(path, h.versions, names, h.next_before),
    });
  });

  app.get('/diff/*', opts, async (req, reply) => {
    const p = req.principal!;
    const path = (req.params as { '*': string })['*'];
    if (!path) return kit.notFoundPage(req, reply, 'Which page? The address names none.');
    const parsed = DiffQuery.safeParse(req.query);
    if (!parsed.success) {
      return sendAppPage(reply, 400, await kit.viewerOf(p, req), {
        title: 'Compare versions',
        body: html`<h1>Compare versions</h1>
<p class="alert" role="alert">Choose two versions to compare (a commit for "from" and one for "to").</p>
<p><a href="${historyUrl(path)}">Back to the history</a></p>`,
      });
    }
    const { from, to, view } = parsed.data;
    const newer = await readPage(ctx, p, path, { at: to });
    const older = from ? await readPage(ctx, p, path, { at: from }) : null;
    const fromLabel = older ? `version ${older.commit_sha.slice(0, 10)}` : 'nothing (before the page existed)';
    const toLabel = `version ${newer.commit_sha.slice(0, 10)}`;
    const body = html`<nav class="crumbs" aria-label="Breadcrumb"><a href="${pageUrl(path)}">${path}</a> / <a href="${historyUrl(path)}">history</a> / <span aria-current="page">compare</span></nav>
<h1>Compare versions</h1>
<dl class="diff-sides">
<div><dt>From</dt><dd>${older ? html`<span class="mono">${older.commit_sha.slice(0, 10)}</span> · ${when(older.updated_at)}` : html`<span class="muted">the empty page</span>`}</dd></div>
<div><dt>To</dt><dd><span class="mono">${newer.commit_sha.slice(0, 10)}</span> · ${when(newer.updated_at)}</dd></div>
</dl>
${older?.redacted || newer.redacted ? html`<p class="notice">Parts of these versions are above your access level and are shown as [redacted].</p>` : ''}
<section class="changes" aria-label="Changes">
${viewSwitch(view, (v) => diffUrl(path, { from, to, view: v }))}
${renderDiff(older?.content ?? '', newer.content, { view, fromLabel, toLabel })}
</section>`;
    return sendAppPage(reply, 200, await kit.viewerOf(p, req), { title: `Compare: ${path}`, body });
  });
}
