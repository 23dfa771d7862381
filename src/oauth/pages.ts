import { html, type SafeHtml } from '../http/shared/html.js';

/**
 * The consent page of /oauth/authorize: what is asked, by whom, for which workspace, and the two
 * answers. Same look as the sign-in pages and the web app (src/http/shared/html.ts `layout`, the
 * app's stylesheet), no script: one form, two submit buttons.
 */
export interface ConsentView {
  clientName: string;
  clientId: string;
  /** The host of a metadata-document client's URL: the page says "client from <host>". */
  clientFrom: string | null;
  redirectHost: string;
  workspaceName: string;
  workspaceSlug: string;
  resource: string;
  role: string;
  ceiling: string;
  /** Why no code can be issued (a viewer); the page then offers only "go back". */
  refusal?: string | undefined;
  /** The request's parameters, sent back with the answer. */
  fields: Record<string, string>;
  /** For `/mcp`: the person's workspaces, one of which the connection is for. */
  choices: { slug: string; name: string; role: string; can_consent: boolean }[];
  csrf: string;
}

function hiddenFields(fields: Record<string, string>, except: string | null): SafeHtml[] {
  return Object.entries(fields)
    .filter(([k]) => k !== except)
    .map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}">`);
}

/** The workspace picker of a `/mcp` connection (a plain select: no script needed). */
function workspacePicker(v: ConsentView): SafeHtml {
  return html`<label for="workspace">Workspace</label>
<select id="workspace" name="workspace">
${v.choices.map((c) => html`<option value="${c.slug}"${c.slug === v.workspaceSlug ? html` selected` : ''}>${c.name} (${c.slug}) — ${c.role}${c.can_consent ? '' : ', cannot connect'}</option>`)}
</select>`;
}

export function consentBody(v: ConsentView): SafeHtml {
  const pick = v.choices.length > 1 && !v.refusal;
  const form = (buttons: SafeHtml) => html`<form method="post" action="/oauth/authorize">
${hiddenFields(v.fields, pick ? 'workspace' : null)}<input type="hidden" name="csrf_token" value="${v.csrf}">
${pick ? workspacePicker(v) : ''}
${buttons}
</form>`;
  const facts = html`<p class="label">Application</p>
<p><strong>${v.clientName}</strong><br><span class="muted">${v.clientFrom ? html`client from <strong>${v.clientFrom}</strong> (<code>${v.clientId}</code>)` : html`client <code>${v.clientId}</code>`}, returns you to <code>${v.redirectHost}</code></span></p>
${
  v.choices.length > 1 && !v.refusal
    ? ''
    : html`<p class="label">Workspace</p>
<p><strong>${v.workspaceName}</strong> <span class="muted">(${v.workspaceSlug})</span></p>`
}
<p class="label">Endpoint</p>
<p><code>${v.resource}</code></p>`;
  if (v.refusal) {
    return html`<h1>This application cannot be connected</h1>
<p class="alert" role="alert">${v.refusal}</p>
${facts}
${form(html`<button type="submit" name="decision" value="deny">Go back to the application</button>`)}`;
  }
  return html`<h1>Connect ${v.clientName}?</h1>
${facts}
<p class="label">It will be able to</p>
<p>act as you, <strong>${v.role}</strong> of this workspace, through its MCP tools: read and search the pages you can read (up to <strong>${v.ceiling}</strong>), write pages, propose changes and post in threads. It never gets more than your role allows, and acts that need a step-up stay closed to it.</p>
<p class="muted">You can disconnect it at any time under Connected applications on <a href="/app/account">your account page</a> (or with <code>DELETE /api/v1/me/oauth-clients/:id</code>). Only connect applications you trust.</p>
${form(html`<p><button type="submit" name="decision" value="approve">Allow</button></p>
<p><button type="submit" name="decision" value="deny" class="secondary">Deny</button></p>`)}`;
}
