import type { Action, Grant, Principal, Role } from './principal.js';
import { atOrBelow, minLevel, rank, type Level } from './sensitivity.js';

/** The highest level each role may see (DESIGN.md §4). */
export const ROLE_CEILING: Record<Role, Level> = { owner: 'secret', editor: 'confidential', viewer: 'internal' };

/** What each role may do. Agents get rights only through grants, never beyond their creator's role. */
export const ROLE_ACTIONS: Record<Role, readonly Action[]> = {
  owner: ['read', 'write', 'admin', 'search', 'propose', 'collab'],
  editor: ['read', 'write', 'search', 'propose', 'collab'],
  viewer: ['read', 'search', 'propose', 'collab'],
};

/** Without an elevation an agent never reaches secret, whatever its grants say. */
export const AGENT_CAP: Level = 'confidential';

/** True when a grant scope (`*`, `space`, `space/folder`) covers a path (`space/folder/page.md`) or scope. */
export function scopeCovers(scope: string, target: string): boolean {
  if (scope === '*') return true;
  return target === scope || target.startsWith(`${scope}/`);
}

export function isElevated(p: Principal, now: Date = new Date()): boolean {
  return p.elevatedUntil !== null && Date.parse(p.elevatedUntil) > now.getTime();
}

/**
 * The caller's effective ceiling for an action on a target (a page path, a folder, a
 * space, or `*` for workspace-wide), or null when the action is not allowed there at all.
 * = min(role or agent ceiling, best matching grant, key ceiling), agents capped below
 * secret unless elevated. An agent never exceeds its creator's current role: an action the
 * creator's role lacks is refused, and the ceiling is capped at the role's.
 *
 * An elevation (issue 11) does what its name says: while it lasts the agent READS at secret
 * wherever a read grant of its covers the target, whatever that grant's or the agent's own
 * ceiling says; only the key's ceiling still caps. The elevation is an owner's act, so it
 * also lifts the creator's cap for reading. Other actions keep their grants' ceilings.
 */
export function ceilingFor(p: Principal, action: Action, target: string, now = new Date()): Level | null {
  if (p.kind === 'human') {
    if (!p.role || !ROLE_ACTIONS[p.role].includes(action)) return null;
    return minLevel(ROLE_CEILING[p.role], p.keyCeiling);
  }
  let best: Level | null = null;
  for (const g of p.grants) {
    if (g.action !== action || !scopeCovers(g.scope, target)) continue;
    if (best === null || rank(g.ceiling) > rank(best)) best = g.ceiling;
  }
  if (best === null) return null;
  const elevated = isElevated(p, now);
  if (elevated && action === 'read') return minLevel('secret', p.keyCeiling);
  const creator = creatorCap(p);
  if (creator === null || !ROLE_ACTIONS[creator].includes(action)) return null;
  const cap = elevated ? 'secret' : AGENT_CAP;
  return minLevel(best, p.agentCeiling, p.keyCeiling, cap, ROLE_CEILING[creator]);
}

/** The time-independent part of readViewKey, per principal (principals are never changed). */
const viewBases = new WeakMap<Principal, string>();

/**
 * Everything ceilingFor reads of a principal for `read`, at `now`, as one string: two callers
 * with the same key see every page the same way, so a rendered read may be kept for it
 * (core/pages/read.ts). Keep it in step with ceilingFor.
 */
export function readViewKey(p: Principal, now = new Date()): string {
  let base = viewBases.get(p);
  if (base === undefined) {
    base = JSON.stringify([p.workspaceId, p.kind, p.role, p.grants, p.agentCeiling, p.keyCeiling, p.creatorRole === undefined ? 0 : p.creatorRole]);
    viewBases.set(p, base);
  }
  return p.kind === 'agent' && isElevated(p, now) ? `${base}+` : base;
}

/**
 * The role an agent's reach is capped at: its creator's current role. `undefined` (a principal
 * built without it, e.g. by a unit test) means no cap beyond the grants; null means the
 * creator is gone and the agent can do nothing.
 */
function creatorCap(p: Principal): Role | null {
  if (p.creatorRole === undefined) return 'owner';
  return p.creatorRole;
}

/** The grants an agent keeps when its creator's role becomes `role`: actions the role lacks go, ceilings fall to the role's. */
export function capGrantsToRole(grants: readonly Grant[], role: Role): Grant[] {
  return grants.filter((g) => ROLE_ACTIONS[role].includes(g.action)).map((g) => ({ ...g, ceiling: minLevel(g.ceiling, ROLE_CEILING[role]) }));
}

/** True when the caller may perform the action somewhere inside the target (used for listings). */
export function hasActionWithin(p: Principal, action: Action, target: string): boolean {
  if (p.kind === 'human') return ceilingFor(p, action, target) !== null;
  const creator = creatorCap(p);
  const readsElevated = action === 'read' && isElevated(p, new Date());
  if (!readsElevated && (creator === null || !ROLE_ACTIONS[creator].includes(action))) return false;
  return p.grants.some((g) => g.action === action && (scopeCovers(g.scope, target) || scopeCovers(target, g.scope)));
}

/** Renders a level predicate for redaction: is this block level visible under the ceiling? */
export function visibleUnder(ceiling: Level): (level: Level) => boolean {
  return (level) => atOrBelow(level, ceiling);
}

/** The grants a human with this role may hand to an agent. */
export function canGrant(role: Role, grant: Grant): boolean {
  return ROLE_ACTIONS[role].includes(grant.action) && atOrBelow(grant.ceiling, ROLE_CEILING[role]);
}

/** Who may manage (grants, keys, delete) an agent: its creator, or a workspace owner. */
export function canManageAgent(p: Principal, agent: { createdBy: string | null; workspaceId: string }): boolean {
  if (p.kind !== 'human' || agent.workspaceId !== p.workspaceId) return false;
  return p.role === 'owner' || agent.createdBy === p.id;
}

/** Agents see other principals with id, name and kind only. */
export function seesPrincipalDetails(p: Principal): boolean {
  return p.kind === 'human';
}

/** Creating a Space is an admin act over the whole workspace. */
export function canCreateSpace(p: Principal): boolean {
  return ceilingFor(p, 'admin', '*') !== null;
}

export type { Grant };

/** The caller's ceiling before any grant narrows it (what whoami reports). */
export function baseCeiling(p: Principal, now = new Date()): Level {
  if (p.kind === 'human') return minLevel(p.role ? ROLE_CEILING[p.role] : 'public', p.keyCeiling);
  // Elevated: it reads at secret (within its read grants), capped only by the key.
  if (isElevated(p, now)) return minLevel('secret', p.keyCeiling);
  const creator = creatorCap(p);
  return minLevel(p.agentCeiling ?? 'internal', p.keyCeiling, AGENT_CAP, creator ? ROLE_CEILING[creator] : 'public');
}

/** Step-up lasts five minutes (spec §8). */
export const STEP_UP_MS = 5 * 60 * 1000;

/** True when a human stepped up within the last five minutes; agents never can. */
export function hasStepUp(p: Principal, now = new Date()): boolean {
  // A push is an owner's deliberate act with a token minted under step-up (policy/git.ts):
  // the deletes and moves it carries are not asked for a second factor it cannot give.
  if (p.kind === 'human' && p.via === 'git') return true;
  if (p.kind !== 'human' || !p.stepUpAt) return false;
  const age = now.getTime() - Date.parse(p.stepUpAt);
  return age >= 0 && age < STEP_UP_MS;
}

/** Granting secret reach (a secret grant or agent ceiling) is a `+U` act. */
export function grantingNeedsStepUp(grants: readonly Grant[], agentCeiling?: Level | null): boolean {
  return agentCeiling === 'secret' || grants.some((g) => g.ceiling === 'secret');
}
