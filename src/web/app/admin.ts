import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { isServiceError, type ServiceError } from '../../core/errors.js';
import { createInvite, INVITE_DEFAULT_DAYS, INVITE_MAX_DAYS, listInvites, revokeInvite, type InviteRecord } from '../../core/invites.js';
import { changeRole, listMembers, removeMember } from '../../core/members.js';
import {
  createAgent,
  deleteAgent,
  getAgent,
  KEY_MAX_DAYS,
  listKeys,
  listPrincipals,
  mintKey,
  revokeKey,
  type AgentRecord,
  type KeyRecord,
} from '../../core/principals.js';
import { html, type SafeHtml } from '../../http/shared/html.js';
import { ROLE_ACTIONS, ROLE_CEILING } from '../../policy/access.js';
import { ACTIONS, ROLES, type Action, type Grant, type Principal, type Role } from '../../policy/principal.js';
import { atOrBelow, LEVELS, type Level } from '../../policy/sensitivity.js';
import { badge, sendAppPage, when } from './layout.js';
import type { AppKit } from './routes.js';
import { field, stepUpRedirect, csrfOf } from './forms.js';

/**
 * The web app's administering screens (issue 17): agents (create with grants and a ceiling,
 * mint a key shown once with a Copy button and ready-made MCP client configurations, keys by
 * hint, revoke, delete) and members (roles, removal, invites). Every change calls the core
 * function its REST route calls (src/http/routes/principals.ts, workspaces.ts) with the
 * principal of the form's session (kit.formPrincipal checks the `csrf` field).
 *
 * Who may do what is the core's answer, as on the API (spec "Agents, grants and tokens",
 * "Identity and workspaces"): every signed-in person may create agents within their own role
 * and manage the ones they made, owners manage all; every member may see the members, only
 * owners change roles, remove others and manage invites. A control is shown only where it can
 * work; a forged form meets the core's refusal (403 page). Secrets (agent keys, invite tokens)
 * are only in the answer to the POST that made them: never stored, never in a URL.
 */

const agentUrl = (id: string) => `/app/agents/${encodeURIComponent(id)}`;

/** Empty grant rows on the create form: add up to this many without JavaScript. */
const GRANT_ROWS = 4;

const NOTICES: Record<string, string> = {
  created: 'Agent created. Mint a key for it below.',
  revoked: 'Key revoked: it stops working at once.',
  deleted: 'Agent deleted; its keys stopped working.',
  role: 'Role changed.',
  removed: 'Member removed.',
  invite_revoked: 'Invite revoked.',
};

function notice(query: unknown): SafeHtml {
  const n = field(query, 'notice');
  const text = n ? NOTICES[n] : undefined;
  return text ? html`<p class="notice notice-ok" role="status">${text}</p>` : html``;
}

const isLevel = (v: string | undefined): v is Level => (LEVELS as readonly string[]).includes(v ?? '');
const isAction = (v: string | undefined): v is Action => (ACTIONS as readonly string[]).includes(v ?? '');
const isRole = (v: string | undefined): v is Role => (ROLES as readonly string[]).includes(v ?? '');

/** A refusal the person can act on (4xx, not 401), shown on the form's page; anything else goes to the app's error page. */
function formError(err: unknown): ServiceError | null {
  return isServiceError(err) && err.status >= 400 && err.status < 500 && err.status !== 401 && err.code !== 'csrf_failed' ? err : null;
}

function levelOptions(levels: readonly Level[], selected: string): SafeHtml[] {
  return levels.map((l) => html`<option value="${l}"${l === selected ? html` selected` : ''}>${l}</option>`);
}

/** The levels a person may hand out: up to their role's ceiling (the core refuses more). */
function grantableLevels(p: Principal): Level[] {
  const top = p.role ? ROLE_CEILING[p.role] : 'public';
  return LEVELS.filter((l) => atOrBelow(l, top));
}

function grantText(g: Grant): SafeHtml {
  return html`<li><span class="mono">${g.action}</span> on <span class="mono">${g.scope}</span> up to ${badge('sensitivity', g.ceiling)}</li>`;
}

function keyState(k: KeyRecord, now = Date.now()): SafeHtml {
  if (k.revoked_at) return html`<span class="badge badge-key-revoked">revoked</span>`;
  if (k.expires_at && Date.parse(k.expires_at) <= now) return html`<span class="badge badge-key-expired">expired</span>`;
  return html`<span class="badge badge-key-active">active</span>`;
}

function keysTable(agent: AgentRecord, keys: KeyRecord[], csrf: string, actions: boolean): SafeHtml {
  if (keys.length === 0) return html`<p class="muted">No keys yet.</p>`;
  return html`<div class="table-wrap" tabindex="0" role="region" aria-label="Keys of ${agent.name}">
<table class="keys">
<thead><tr><th scope="col">Key</th><th scope="col">Name</th><th scope="col">State</th><th scope="col">Expires</th><th scope="col">Last used</th><th scope="col">Limits</th>${actions ? html`<th scope="col"><span class="visually-hidden">Actions</span></th>` : ''}</tr></thead>
<tbody>
${keys.map(
  (k) => html`<tr>
<td class="mono">${k.hint}</td>
<td>${k.name}</td>
<td>${keyState(k)}</td>
<td>${k.expires_at ? when(k.expires_at) : html`<span class="muted">never</span>`}</td>
<td>${k.last_used_at ? when(k.last_used_at) : html`<span class="muted">never</span>`}</td>
<td>${k.ceiling ? html`ceiling ${badge('sensitivity', k.ceiling)} ` : ''}${k.ip_pin ? html`IP <span class="mono">${k.ip_pin}</span>` : ''}${!k.ceiling && !k.ip_pin ? html`<span class="muted">none</span>` : ''}</td>
${
  actions
    ? html`<td>${
        k.revoked_at
          ? ''
          : html`<form method="post" action="${agentUrl(agent.id)}/keys/${encodeURIComponent(k.id)}/revoke">
<input type="hidden" name="csrf" value="${csrf}">
<button type="submit" class="danger">Revoke<span class="visually-hidden"> key ${k.hint}</span></button>
</form>`
      }</td>`
    : ''
}
</tr>`,
)}
</tbody>
</table>
</div>`;
}

/* ----------------------------------------------------------------- agents */

interface AgentForm {
  name: string;
  ceiling: string;
  grants: { action: string; scope: string; ceiling: string }[];
  error?: string | undefined;
}

function emptyAgentForm(): AgentForm {
  return {
    name: '',
    ceiling: 'internal',
    grants: [
      { action: 'read', scope: '*', ceiling: 'internal' },
      ...Array.from({ length: GRANT_ROWS - 1 }, () => ({ action: '', scope: '', ceiling: 'internal' })),
    ],
  };
}

function createAgentForm(p: Principal, csrf: string, f: AgentForm): SafeHtml {
  const levels = grantableLevels(p);
  const actions = p.role ? ROLE_ACTIONS[p.role] : [];
  return html`<section class="admin-form" aria-labelledby="new-agent">
<h2 id="new-agent">Create an agent</h2>
<p class="muted">An agent acts only through its grants, never above your own role (${p.role ?? 'none'}: up to ${p.role ? ROLE_CEILING[p.role] : 'public'}). Leave a row's action empty to skip it.</p>
${f.error ? html`<p class="alert" role="alert" id="agent-error">${f.error}</p>` : ''}
<form method="post" action="/app/agents" class="stack">
<input type="hidden" name="csrf" value="${csrf}">
<div class="field-row">
<div class="field grow"><label for="agent-name">Name</label>
<input id="agent-name" name="name" type="text" maxlength="100" required value="${f.name}"${f.error ? html` aria-describedby="agent-error"` : ''}></div>
<div class="field"><label for="agent-ceiling">Ceiling</label>
<select id="agent-ceiling" name="ceiling">${levelOptions(levels, f.ceiling)}</select></div>
</div>
<fieldset class="grants">
<legend>Grants</legend>
${f.grants.map(
  (g, i) => html`<div class="grant-row">
<div class="field"><label for="g${i}-action">Action ${i + 1}</label>
<select id="g${i}-action" name="g${i}_action"><option value=""${g.action === '' ? html` selected` : ''}>(none)</option>${actions.map((a) => html`<option value="${a}"${a === g.action ? html` selected` : ''}>${a}</option>`)}</select></div>
<div class="field grow"><label for="g${i}-scope">Scope ${i + 1}</label>
<input id="g${i}-scope" name="g${i}_scope" type="text" maxlength="512" placeholder="* or space or space/folder" value="${g.scope}"></div>
<div class="field"><label for="g${i}-ceiling">Up to ${i + 1}</label>
<select id="g${i}-ceiling" name="g${i}_ceiling">${levelOptions(levels, g.ceiling)}</select></div>
</div>`,
)}
</fieldset>
<div class="buttons"><button type="submit">Create agent</button></div>
</form>
</section>`;
}

function parseAgentForm(body: unknown): AgentForm {
  const grants: AgentForm['grants'] = [];
  for (let i = 0; i < GRANT_ROWS; i++) {
    grants.push({
      action: field(body, `g${i}_action`) ?? '',
      scope: (field(body, `g${i}_scope`) ?? '').trim(),
      ceiling: field(body, `g${i}_ceiling`) ?? 'internal',
    });
  }
  return { name: (field(body, 'name') ?? '').trim(), ceiling: field(body, 'ceiling') ?? 'internal', grants };
}

/** The form as the core's input, or the message that says what is wrong with it. */
function agentInput(f: AgentForm): { name: string; ceiling: Level; grants: Grant[] } | string {
  if (!f.name || f.name.length > 100) return 'Give the agent a name (1 to 100 characters).';
  if (!isLevel(f.ceiling)) return 'Choose a ceiling.';
  const grants: Grant[] = [];
  for (const [i, g] of f.grants.entries()) {
    if (!g.action) continue;
    if (!isAction(g.action)) return `Grant ${i + 1}: choose an action.`;
    if (!isLevel(g.ceiling)) return `Grant ${i + 1}: choose a level.`;
    const scope = g.scope || '*';
    if (scope.length > 512) return `Grant ${i + 1}: the scope is too long.`;
    grants.push({ action: g.action, scope, ceiling: g.ceiling });
  }
  return { name: f.name, ceiling: f.ceiling, grants };
}

interface AgentRow {
  id: string;
  name: string;
  ceiling: string;
  creator: string;
  suspended: boolean;
  grants: Grant[] | null;
  keys: KeyRecord[] | null;
}

function agentsBody(rows: AgentRow[], form: SafeHtml, note: SafeHtml): SafeHtml {
  const list = rows.length
    ? html`<ul class="agents">
${rows.map(
  (a) => html`<li class="agent-item">
<h2>${a.keys !== null ? html`<a href="${agentUrl(a.id)}">${a.name}</a>` : a.name} ${badge('sensitivity', a.ceiling)}${a.suspended ? html` <span class="badge badge-key-revoked">suspended</span>` : ''}</h2>
<p class="muted">Created by ${a.creator}</p>
${a.grants ? (a.grants.length ? html`<ul class="grant-list">${a.grants.map(grantText)}</ul>` : html`<p class="muted">No grants: it can do nothing yet.</p>`) : ''}
${
  a.keys === null
    ? html`<p class="muted">Managed by its creator or an owner.</p>`
    : a.keys.length
      ? html`<p class="key-hints"><span class="visually-hidden">Keys:</span> ${a.keys.map((k) => html`<span class="mono">${k.hint}</span> ${keyState(k)} `)}</p>`
      : html`<p class="muted">No keys yet.</p>`
}
</li>`,
)}
</ul>`
    : html`<p class="empty">No agents yet.</p>`;
  return html`<h1>Agents</h1>
${note}
${list}
${form}`;
}

function mcpConfigs(publicUrl: string, key: string, name: string): SafeHtml {
  const url = `${publicUrl}/mcp`;
  const id =
    name
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-|-$/g, '') || 'vault';
  const claudeCode = `claude mcp add --transport http ${id} ${url} --header "Authorization: Bearer ${key}"`;
  const json = JSON.stringify({ mcpServers: { [id]: { type: 'http', url, headers: { Authorization: `Bearer ${key}` } } } }, null, 2);
  const vscode = JSON.stringify({ servers: { [id]: { type: 'http', url, headers: { Authorization: `Bearer ${key}` } } } }, null, 2);
  const block = (bid: string, title: string, help: string, text: string) => html`<div class="snippet">
<h3 id="${bid}-h">${title}</h3>
<p class="muted">${help}</p>
<pre class="copyable" id="${bid}" tabindex="0" aria-labelledby="${bid}-h"><code>${text}</code></pre>
<button type="button" class="secondary copy" data-copy="${bid}" hidden>Copy<span class="visually-hidden"> ${title}</span></button>
</div>`;
  return html`<section aria-labelledby="mcp-h">
<h2 id="mcp-h">Connect an MCP client</h2>
${block('cfg-claude', 'Claude Code', 'Run in a terminal:', claudeCode)}
${block('cfg-json', 'Cursor, Claude Desktop bridges and other clients (mcpServers JSON)', 'For example ~/.cursor/mcp.json:', json)}
${block('cfg-vscode', 'VS Code', '.vscode/mcp.json:', vscode)}
</section>`;
}

function mintForm(p: Principal, agent: AgentRecord, csrf: string, error: string | null): SafeHtml {
  return html`<section class="admin-form" aria-labelledby="mint-h">
<h2 id="mint-h">Mint a key</h2>
<p class="muted">The key is shown once, on the next page. Store it in your client; it cannot be shown again.</p>
${error ? html`<p class="alert" role="alert" id="mint-error">${error}</p>` : ''}
<form method="post" action="${agentUrl(agent.id)}/keys" class="stack">
<input type="hidden" name="csrf" value="${csrf}">
<div class="field-row">
<div class="field grow"><label for="key-name">Key name</label>
<input id="key-name" name="name" type="text" maxlength="100" value="key" required></div>
<div class="field"><label for="key-days">Expires after (days, empty: never)</label>
<input id="key-days" name="expires_in_days" type="number" min="1" max="${KEY_MAX_DAYS}" value="90"></div>
</div>
<div class="field-row">
<div class="field"><label for="key-ceiling">Key ceiling</label>
<select id="key-ceiling" name="ceiling"><option value="">(the agent's)</option>${levelOptions(grantableLevels(p), '')}</select></div>
<div class="field grow"><label for="key-ip">Only from IP address (optional)</label>
<input id="key-ip" name="ip_pin" type="text" maxlength="64" placeholder="203.0.113.7"></div>
</div>
<div class="buttons"><button type="submit">Mint key</button></div>
</form>
</section>`;
}

function agentBody(p: Principal, agent: AgentRecord, creator: string, keys: KeyRecord[], csrf: string, note: SafeHtml, mintError: string | null): SafeHtml {
  return html`<nav class="crumbs" aria-label="Breadcrumb"><a href="/app/agents">Agents</a> / <span aria-current="page">${agent.name}</span></nav>
<h1>${agent.name}</h1>
${note}
<dl class="facts">
<dt>Ceiling</dt><dd>${badge('sensitivity', agent.ceiling)}</dd>
<dt>Created by</dt><dd>${creator}, ${when(agent.created_at)}</dd>
<dt>Id</dt><dd class="mono">${agent.id}</dd>
${agent.suspended_at ? html`<dt>Suspended</dt><dd>${when(agent.suspended_at)} (its creator left; an owner adopts it through the API)</dd>` : ''}
</dl>
<section aria-labelledby="grants-h">
<h2 id="grants-h">Grants</h2>
${agent.grants.length ? html`<ul class="grant-list">${agent.grants.map(grantText)}</ul>` : html`<p class="muted">No grants: it can do nothing yet.</p>`}
</section>
<section aria-labelledby="keys-h">
<h2 id="keys-h">Keys</h2>
${keysTable(agent, keys, csrf, true)}
</section>
${agent.suspended_at ? '' : mintForm(p, agent, csrf, mintError)}
<section class="admin-form danger-zone" aria-labelledby="del-h">
<h2 id="del-h">Delete this agent</h2>
<p class="muted">Its keys stop working at once. Pages it wrote keep their history.</p>
<form method="post" action="${agentUrl(agent.id)}/delete">
<input type="hidden" name="csrf" value="${csrf}">
<div class="check"><input id="del-confirm" name="confirm" type="checkbox" value="yes" required><label for="del-confirm">Yes, delete ${agent.name}</label></div>
<button type="submit" class="danger">Delete agent</button>
</form>
</section>`;
}

function keyShownBody(agent: AgentRecord, k: KeyRecord & { key: string }, publicUrl: string): SafeHtml {
  return html`<nav class="crumbs" aria-label="Breadcrumb"><a href="/app/agents">Agents</a> / <a href="${agentUrl(agent.id)}">${agent.name}</a> / <span aria-current="page">New key</span></nav>
<h1>Key for ${agent.name}</h1>
<div class="once" role="status">
<p><strong>Copy this key now: it is shown only this once.</strong> Only a hint (<span class="mono">${k.hint}</span>) is kept; if you lose it, revoke it and mint another.</p>
<pre class="copyable secret-text" id="new-key" tabindex="0" aria-label="The new key"><code>${k.key}</code></pre>
<button type="button" class="copy" data-copy="new-key" hidden>Copy key</button>
</div>
<dl class="facts">
<dt>Name</dt><dd>${k.name}</dd>
<dt>Expires</dt><dd>${k.expires_at ? when(k.expires_at) : 'never'}</dd>
${k.ceiling ? html`<dt>Ceiling</dt><dd>${badge('sensitivity', k.ceiling)}</dd>` : ''}
${k.ip_pin ? html`<dt>Only from</dt><dd class="mono">${k.ip_pin}</dd>` : ''}
</dl>
${mcpConfigs(publicUrl, k.key, agent.name)}
<p><a href="${agentUrl(agent.id)}">Back to ${agent.name}</a></p>`;
}

/* ---------------------------------------------------------------- members */

function inviteState(i: InviteRecord): SafeHtml {
  return html`<span class="badge badge-invite-${i.state}">${i.state}</span>`;
}

function membersBody(
  p: Principal,
  members: { id: string; name: string; email: string | null; role: Role; joined_at: string }[],
  invites: InviteRecord[] | null,
  csrf: string,
  note: SafeHtml,
  inviteError: string | null,
): SafeHtml {
  const owner = p.role === 'owner';
  const rows = members.map(
    (m) => html`<tr>
<td><span class="who-name">${m.name}</span>${m.id === p.id ? html` <span class="muted">(you)</span>` : ''}${m.email ? html`<br><span class="muted">${m.email}</span>` : ''}</td>
<td>${
      owner
        ? html`<form method="post" action="/app/members/${encodeURIComponent(m.id)}/role" class="inline-form">
<input type="hidden" name="csrf" value="${csrf}">
<label class="visually-hidden" for="role-${m.id}">Role of ${m.name}</label>
<select id="role-${m.id}" name="role">${ROLES.map((r) => html`<option value="${r}"${r === m.role ? html` selected` : ''}>${r}</option>`)}</select>
<button type="submit" class="secondary">Change<span class="visually-hidden"> role of ${m.name}</span></button>
</form>`
        : html`<span class="badge badge-role">${m.role}</span>`
    }</td>
<td>${when(m.joined_at)}</td>
${
  owner
    ? html`<td>${
        m.id === p.id
          ? ''
          : html`<form method="post" action="/app/members/${encodeURIComponent(m.id)}/remove">
<input type="hidden" name="csrf" value="${csrf}">
<button type="submit" class="danger">Remove<span class="visually-hidden"> ${m.name}</span></button>
</form>`
      }</td>`
    : ''
}
</tr>`,
  );
  const table = html`<div class="table-wrap" tabindex="0" role="region" aria-label="Members">
<table class="members">
<thead><tr><th scope="col">Member</th><th scope="col">Role</th><th scope="col">Joined</th>${owner ? html`<th scope="col"><span class="visually-hidden">Actions</span></th>` : ''}</tr></thead>
<tbody>${rows}</tbody>
</table>
</div>`;
  const invitesPart =
    invites === null
      ? html`<p class="muted">Only owners change roles, remove members and invite people.</p>`
      : html`<section aria-labelledby="invites-h">
<h2 id="invites-h">Invites</h2>
${
  invites.length
    ? html`<div class="table-wrap" tabindex="0" role="region" aria-label="Invites">
<table class="invites">
<thead><tr><th scope="col">Invite</th><th scope="col">Role</th><th scope="col">For</th><th scope="col">State</th><th scope="col">Expires</th><th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>
<tbody>
${[...invites].reverse().map(
  (i) => html`<tr>
<td class="mono">${i.hint}</td><td>${i.role}</td><td>${i.email ?? html`<span class="muted">anyone with the link</span>`}</td><td>${inviteState(i)}</td><td>${when(i.expires_at)}</td>
<td>${
    i.state === 'pending'
      ? html`<form method="post" action="/app/invites/${encodeURIComponent(i.id)}/revoke">
<input type="hidden" name="csrf" value="${csrf}">
<button type="submit" class="danger">Revoke<span class="visually-hidden"> invite ${i.hint}</span></button>
</form>`
      : ''
  }</td>
</tr>`,
)}
</tbody>
</table>
</div>`
    : html`<p class="muted">No invites yet.</p>`
}
<div class="admin-form">
<h3 id="invite-new">Invite someone</h3>
${inviteError ? html`<p class="alert" role="alert">${inviteError}</p>` : ''}
<form method="post" action="/app/invites" class="stack" aria-labelledby="invite-new">
<input type="hidden" name="csrf" value="${csrf}">
<div class="field-row">
<div class="field"><label for="invite-role">Role</label>
<select id="invite-role" name="role">${ROLES.map((r) => html`<option value="${r}"${r === 'viewer' ? html` selected` : ''}>${r}</option>`)}</select></div>
<div class="field"><label for="invite-days">Valid for (days)</label>
<input id="invite-days" name="expires_in_days" type="number" min="1" max="${INVITE_MAX_DAYS}" value="${INVITE_DEFAULT_DAYS}" required></div>
<div class="field grow"><label for="invite-email">Only for this email (optional)</label>
<input id="invite-email" name="email" type="email" maxlength="254" autocomplete="off"></div>
</div>
<div class="buttons"><button type="submit">Create invite link</button></div>
</form>
</div>
</section>`;
  return html`<h1>Members</h1>
${note}
${table}
${invitesPart}`;
}

/* ----------------------------------------------------------------- routes */

export async function adminRoutes(app: FastifyInstance, kit: AppKit): Promise<void> {
  const { ctx } = kit;

  async function send(reply: FastifyReply, req: FastifyRequest, p: Principal, status: number, title: string, body: SafeHtml, current?: 'agents' | 'members') {
    return sendAppPage(reply, status, await kit.viewerOf(p, req), { title, body, current });
  }

  const names = async (p: Principal) => new Map((await listPrincipals(ctx, p)).map((x) => [x.id, x.name]));

  async function agentsPage(req: FastifyRequest, reply: FastifyReply, p: Principal, status: number, form: AgentForm) {
    const all = await listPrincipals(ctx, p);
    const byId = new Map(all.map((x) => [x.id, x.name]));
    const rows: AgentRow[] = [];
    for (const a of all) {
      if (a.kind !== 'agent') continue;
      const mine = p.role === 'owner' || a.creator === p.id;
      const full = mine ? ((await getAgent(ctx, p, a.id)) as AgentRecord) : null;
      rows.push({
        id: a.id,
        name: a.name,
        ceiling: a.ceiling ?? 'internal',
        creator: a.creator ? (byId.get(a.creator) ?? 'a former member') : 'the operator',
        suspended: Boolean(a.suspended_at),
        grants: full ? full.grants : null,
        keys: mine ? await listKeys(ctx, p, a.id) : null,
      });
    }
    const csrf = csrfOf(req);
    return send(reply, req, p, status, 'Agents', agentsBody(rows, createAgentForm(p, csrf, form), notice(req.query)), 'agents');
  }

  app.get('/agents', kit.opts, async (req, reply) => agentsPage(req, reply, req.principal!, 200, emptyAgentForm()));

  app.post('/agents', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const form = parseAgentForm(req.body);
    const input = agentInput(form);
    if (typeof input === 'string') return agentsPage(req, reply, p, 400, { ...form, error: input });
    try {
      const a = await createAgent(ctx, p, input);
      return reply
        .code(303)
        .header('location', `${agentUrl(a.id)}?notice=created`)
        .send();
    } catch (err) {
      if (isServiceError(err) && err.code === 'step_up_required') return stepUpRedirect(reply, '/app/agents');
      const e = formError(err);
      if (!e) throw err;
      return agentsPage(req, reply, p, e.status, { ...form, error: e.message });
    }
  });

  /** An agent the person may manage (the core's 403 otherwise), with its keys. */
  async function agentPage(req: FastifyRequest, reply: FastifyReply, p: Principal, id: string, status: number, mintError: string | null) {
    const keys = await listKeys(ctx, p, id);
    const agent = (await getAgent(ctx, p, id)) as AgentRecord;
    const creator = agent.creator ? ((await names(p)).get(agent.creator) ?? 'a former member') : 'the operator';
    const csrf = csrfOf(req);
    return send(reply, req, p, status, agent.name, agentBody(p, agent, creator, keys, csrf, notice(req.query), mintError), 'agents');
  }

  const idOf = (req: FastifyRequest) => (req.params as { id: string }).id;

  app.get('/agents/:id', kit.opts, async (req, reply) => agentPage(req, reply, req.principal!, idOf(req), 200, null));

  app.post('/agents/:id/keys', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const id = idOf(req);
    const name = (field(req.body, 'name') ?? '').trim() || 'key';
    const daysText = (field(req.body, 'expires_in_days') ?? '').trim();
    const days = daysText === '' ? null : Number(daysText);
    const ceiling = field(req.body, 'ceiling') ?? '';
    const ip = (field(req.body, 'ip_pin') ?? '').trim();
    if (name.length > 100) return agentPage(req, reply, p, id, 400, 'The key name is at most 100 characters.');
    if (days !== null && (!Number.isInteger(days) || days < 1 || days > KEY_MAX_DAYS))
      return agentPage(req, reply, p, id, 400, `Expiry is a whole number of days from 1 to ${KEY_MAX_DAYS}, or empty for never.`);
    if (ceiling !== '' && !isLevel(ceiling)) return agentPage(req, reply, p, id, 400, 'Choose a key ceiling.');
    if (ip.length > 64) return agentPage(req, reply, p, id, 400, 'The IP address is too long.');
    try {
      const k = await mintKey(ctx, p, id, { name, expires_in_days: days, ceiling: ceiling === '' ? null : ceiling, ip_pin: ip || null });
      const agent = (await getAgent(ctx, p, id)) as AgentRecord;
      return await send(reply, req, p, 201, `Key for ${agent.name}`, keyShownBody(agent, k, ctx.config.publicUrl), 'agents');
    } catch (err) {
      if (isServiceError(err) && err.code === 'step_up_required') return stepUpRedirect(reply, agentUrl(id));
      const e = formError(err);
      if (!e || e.status === 403 || e.status === 404) throw err;
      return agentPage(req, reply, p, id, e.status, e.message);
    }
  });

  app.post('/agents/:id/keys/:kid/revoke', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const id = idOf(req);
    await revokeKey(ctx, p, id, (req.params as { kid: string }).kid);
    return reply
      .code(303)
      .header('location', `${agentUrl(id)}?notice=revoked`)
      .send();
  });

  app.post('/agents/:id/delete', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const id = idOf(req);
    if (field(req.body, 'confirm') !== 'yes') return agentPage(req, reply, p, id, 400, 'Tick "Yes, delete" to delete the agent.');
    await deleteAgent(ctx, p, id);
    return reply.code(303).header('location', '/app/agents?notice=deleted').send();
  });

  /* Members and invites */

  async function membersPage(req: FastifyRequest, reply: FastifyReply, p: Principal, status: number, inviteError: string | null) {
    const members = await listMembers(ctx, p);
    const invites = p.role === 'owner' ? await listInvites(ctx, p) : null;
    const csrf = csrfOf(req);
    return send(reply, req, p, status, 'Members', membersBody(p, members, invites, csrf, notice(req.query), inviteError), 'members');
  }

  app.get('/members', kit.opts, async (req, reply) => membersPage(req, reply, req.principal!, 200, null));

  app.post('/members/:id/role', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const role = field(req.body, 'role');
    if (!isRole(role)) return membersPage(req, reply, p, 400, null);
    await changeRole(ctx, p, undefined, idOf(req), role);
    return reply.code(303).header('location', '/app/members?notice=role').send();
  });

  app.post('/members/:id/remove', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    await removeMember(ctx, p, undefined, idOf(req));
    return reply.code(303).header('location', '/app/members?notice=removed').send();
  });

  app.post('/invites', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    const role = field(req.body, 'role');
    const days = Number(field(req.body, 'expires_in_days') ?? INVITE_DEFAULT_DAYS);
    const email = (field(req.body, 'email') ?? '').trim();
    if (!isRole(role)) return membersPage(req, reply, p, 400, 'Choose a role.');
    if (!Number.isInteger(days) || days < 1 || days > INVITE_MAX_DAYS)
      return membersPage(req, reply, p, 400, `An invite is valid for 1 to ${INVITE_MAX_DAYS} days.`);
    if (email.length > 254 || (email && !/^[^\s@]+@[^\s@]+$/.test(email))) return membersPage(req, reply, p, 400, 'That email address does not look right.');
    try {
      const inv = await createInvite(ctx, p, undefined, { role, email: email || null, expires_in_days: days });
      return await send(
        reply,
        req,
        p,
        201,
        'Invite created',
        html`<nav class="crumbs" aria-label="Breadcrumb"><a href="/app/members">Members</a> / <span aria-current="page">New invite</span></nav>
<h1>Invite created</h1>
<div class="once" role="status">
<p><strong>Send this link to the person you invite: it is shown only this once.</strong> No mail is sent. It lets ${email ? html`<span class="mono">${email}</span>` : 'anyone who has it'} join as ${inv.role} until ${when(inv.expires_at)}.</p>
<pre class="copyable secret-text" id="invite-url" tabindex="0" aria-label="Invite link"><code>${inv.accept_url}</code></pre>
<button type="button" class="copy" data-copy="invite-url" hidden>Copy link</button>
</div>
<p><a href="/app/members">Back to the members</a></p>`,
        'members',
      );
    } catch (err) {
      const e = formError(err);
      if (!e || e.status === 403) throw err;
      return membersPage(req, reply, p, e.status, e.message);
    }
  });

  app.post('/invites/:id/revoke', kit.opts, async (req, reply) => {
    const p = await kit.formPrincipal(req);
    await revokeInvite(ctx, p, undefined, idOf(req));
    return reply.code(303).header('location', '/app/members?notice=invite_revoked').send();
  });
}
