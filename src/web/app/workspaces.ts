import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { CoreContext } from '../../core/context.js';
import { listWorkspaces, type WorkspaceView } from '../../core/workspaces.js';
import { badRequest, notFound } from '../../core/errors.js';
import { html, type SafeHtml } from '../../http/shared/html.js';
import { resolvePageSession } from '../../http/shared/page-session.js';
import type { Principal } from '../../policy/principal.js';
import type { AppKit } from './routes.js';
import { field } from './forms.js';

/**
 * Which workspace the web app shows (issue 17): a person in several picks one in the navigation's
 * switcher (a select and a button, shown only with two or more), which POSTs to /app/workspace.
 * The choice is a cookie, `svc_ws`, scoped to /app: the app's principal resolution (routes.ts)
 * passes it to `authenticate()` as the workspace asked for, so membership is checked on every
 * request exactly as for REST's X-Service-Workspace. The session's own default workspace is not
 * changed: the REST API, MCP and git keep their contract (docs/decisions.md, issue 17).
 */

export const WORKSPACE_COOKIE = 'svc_ws';

/** Workspace ids are `ws_` and a ULID; anything else in the cookie is ignored (and cleared). */
const WORKSPACE_ID_RE = /^ws_[0-9a-z]{1,60}$/;

/** The workspace the browser chose, when its cookie holds a well-formed id (membership is checked by `authenticate()`). */
export function chosenWorkspace(req: FastifyRequest): string | undefined {
  const v = req.cookies[WORKSPACE_COOKIE];
  return v && WORKSPACE_ID_RE.test(v) ? v : undefined;
}

/** True when the request carries a workspace cookie at all (well-formed or not). */
export function hasWorkspaceCookie(req: FastifyRequest): boolean {
  return req.cookies[WORKSPACE_COOKIE] !== undefined;
}

/** HttpOnly (no script needs it), SameSite=Lax and Secure as the session cookies, sent to /app only. */
export function setWorkspaceCookie(ctx: CoreContext, reply: FastifyReply, workspaceId: string): void {
  reply.setCookie(WORKSPACE_COOKIE, workspaceId, { httpOnly: true, sameSite: 'lax', path: '/app', secure: ctx.config.publicUrl.startsWith('https://') });
}

export function clearWorkspaceCookie(reply: FastifyReply): void {
  reply.clearCookie(WORKSPACE_COOKIE, { path: '/app' });
}

/**
 * The navigation's switcher: nothing for a person in one workspace. `data-workspace` names the
 * workspace shown, for scripts that call the REST API (which knows only the session's own
 * workspace unless X-Service-Workspace names another).
 */
export function workspaceSwitcher(list: WorkspaceView[], csrf: string): SafeHtml {
  if (list.length < 2) return html``;
  const shown = list.find((w) => w.current)?.id ?? '';
  return html`<form class="ws-switch" method="post" action="/app/workspace" data-workspace="${shown}">
<input type="hidden" name="csrf" value="${csrf}">
<label class="visually-hidden" for="ws-pick">Workspace</label>
<select id="ws-pick" name="workspace">
${list.map((w) => html`<option value="${w.id}"${w.current ? html` selected` : ''}>${w.name}${w.role ? ` (${w.role})` : ''}</option>`)}
</select>
<button type="submit" class="linkish">Switch<span class="visually-hidden"> workspace</span></button>
</form>`;
}

/** The switcher for the navigation of `p`'s pages (one query: the person's memberships). */
export async function switcherFor(ctx: CoreContext, p: Principal, csrf: string): Promise<SafeHtml> {
  if (p.kind !== 'human') return html``;
  return workspaceSwitcher(await listWorkspaces(ctx, p), csrf);
}

export async function workspaceRoutes(app: FastifyInstance, kit: AppKit): Promise<void> {
  const { ctx } = kit;

  /**
   * Switch: the chosen workspace must be one the person belongs to. `authenticate()` decides that
   * (with the form's CSRF field), as it does for X-Service-Workspace; the current cookie is not
   * consulted, so a stale one never blocks choosing again.
   */
  app.post('/workspace', kit.opts, async (req, reply) => {
    const chosen = field(req.body, 'workspace') ?? '';
    const csrf = field(req.body, 'csrf') ?? '';
    // Signed in, with this page's form, before anything about the choice is answered: the session
    // in its own workspace (not the cookie's, which may be the stale one being replaced).
    if (!WORKSPACE_ID_RE.test(chosen)) {
      const own = await resolvePageSession(ctx, req, { csrf, unsafe: true });
      throw own.ok ? badRequest('Choose a workspace from the list.') : own.error;
    }
    const r = await resolvePageSession(ctx, req, { csrf, unsafe: true, workspace: chosen });
    if (!r.ok) {
      if (r.error.code === 'workspace_not_found') throw notFound('You are not a member of that workspace.', 'workspace_not_found');
      throw r.error;
    }
    setWorkspaceCookie(ctx, reply, r.p.workspaceId);
    return reply.code(303).header('location', '/app').send();
  });
}
