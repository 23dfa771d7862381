import type { Identity } from '../core/identity.js';
import type { PrincipalSummary } from '../core/principals.js';

/**
 * The caller's identity as each endpoint shows it. One source (core/identity.ts), so
 * `/api/v1/me`, `/api/v1/whoami`, `/api/auth/me` and `context_whoami` never disagree: the
 * ceiling shown everywhere is the one in force (an agent's stored ceiling capped by its key, its
 * creator's role and an elevation), not the stored value.
 */

/** `GET /api/v1/whoami`. */
export function whoamiView(i: Identity) {
  return { id: i.id, name: i.name, kind: i.kind, workspace: i.workspace, role: i.role, via: i.via, ceiling: i.ceiling, grants: i.grants };
}

/** `GET /api/v1/me`: humans get email, role and totp; agents their grants (spec). */
export function meView(i: Identity) {
  if (i.kind === 'human') {
    return {
      id: i.id,
      kind: i.kind,
      name: i.name,
      email: i.account?.email ?? '',
      role: i.role ?? 'viewer',
      totp: i.account?.totp ?? false,
      workspace: i.workspace,
    };
  }
  return { id: i.id, kind: i.kind, name: i.name, grants: i.grants, ceiling: i.ceiling, workspace: i.workspace };
}

/** `GET /api/auth/me` (sessions): the user, their workspaces and the current one. */
export function sessionUserView(i: Identity) {
  return {
    user: { id: i.id, name: i.name, email: i.account?.email ?? '' },
    workspaces: i.account?.workspaces ?? [],
    workspace: { ...i.workspace, role: i.role ?? 'viewer' },
  };
}

/** `context_whoami`: whoami without `via`, with the principals the caller may mention (everyone listed but themselves). */
export function whoamiToolView(i: Identity, principals: PrincipalSummary[]) {
  const mentionable = principals.filter((x) => x.id !== i.id).map((x) => ({ id: x.id, name: x.name, kind: x.kind }));
  return { id: i.id, name: i.name, kind: i.kind, workspace: i.workspace, role: i.role, ceiling: i.ceiling, grants: i.grants, mentionable };
}
