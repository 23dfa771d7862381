import { baseCeiling } from '../policy/access.js';
import type { Grant, Principal, Role } from '../policy/principal.js';
import type { Level } from '../policy/sensitivity.js';
import type { CoreContext } from './context.js';
import { findWorkspace, workspacesOf } from './workspaces.js';

/** Who the caller is, as every face shows it (presenters/identity.ts shapes it per face). */
export interface Identity {
  id: string;
  name: string;
  kind: 'human' | 'agent';
  workspace: { id: string; slug: string };
  role: Role | null;
  via: Principal['via'];
  /** The ceiling in force before any grant narrows it: the same number on every face. */
  ceiling: Level;
  grants: Grant[];
  /** Humans only. */
  account?: { email: string; totp: boolean; workspaces: { id: string; slug: string; name: string; role: string }[] };
}

/** The caller's identity; a human's account details are read only when asked for (`account`). */
export async function describeCaller(ctx: CoreContext, p: Principal, opts: { account?: boolean } = {}): Promise<Identity> {
  const base: Identity = {
    id: p.id,
    name: p.name,
    kind: p.kind,
    workspace: { id: p.workspaceId, slug: p.workspaceSlug },
    role: p.role,
    via: p.via,
    ceiling: baseCeiling(p),
    grants: p.kind === 'agent' ? p.grants : [],
  };
  if (!opts.account || p.kind !== 'human') return base;
  const who = await ctx.store.db.selectFrom('principals').select(['name', 'email', 'totp_enabled_at']).where('id', '=', p.id).executeTakeFirstOrThrow();
  return {
    ...base,
    name: who.name,
    account: { email: who.email ?? '', totp: who.totp_enabled_at !== null, workspaces: await workspacesOf(ctx.store.db, p.id) },
  };
}

/**
 * Whom a session belongs to, as the login answers name them (`POST /api/auth/totp/verify`, once
 * the second step is done): the account's name and email, and the session's workspace.
 */
export async function signedInAs(
  ctx: CoreContext,
  p: Principal,
): Promise<{ principal: { id: string; name: string; email: string }; workspace: { id: string; slug: string; name: string } }> {
  const who = await ctx.store.db.selectFrom('principals').select(['name', 'email']).where('id', '=', p.id).executeTakeFirstOrThrow();
  const ws = await findWorkspace(ctx.store.db, p.workspaceId);
  return {
    principal: { id: p.id, name: who.name, email: who.email ?? '' },
    workspace: { id: p.workspaceId, slug: p.workspaceSlug, name: ws?.name ?? p.workspaceSlug },
  };
}

/** The display name of the workspace a human's session works in, among their memberships (its slug when it is not one of them). */
export async function currentWorkspaceName(ctx: CoreContext, p: Principal): Promise<string> {
  const ws = (await workspacesOf(ctx.store.db, p.id)).find((w) => w.id === p.workspaceId);
  return ws?.name ?? p.workspaceSlug;
}
