import { expect } from 'vitest';
import { ServiceError } from '../../src/errors/index.js';
import type { Decision } from '../../src/policy/pages.js';
import type { Grant, Principal, Role } from '../../src/policy/principal.js';
import type { Level } from '../../src/policy/sensitivity.js';

/**
 * What the table-driven policy tests share: principals as plain objects shaped like the ones
 * src/auth/resolve.ts builds, a fixed clock, and decisions flattened for comparison.
 */

export const NOW = new Date('2030-06-01T12:00:00.000Z');
export const ago = (ms: number) => new Date(NOW.getTime() - ms).toISOString();
export const FIVE_MIN = 5 * 60 * 1000;
/** Elevations read the real clock (through ceilingFor): far in the future, or long past. */
export const FUTURE = '2999-01-01T00:00:00.000Z';
export const PAST = '2000-01-01T00:00:00.000Z';

export function human(role: Role | null, over: Partial<Principal> = {}): Principal {
  return {
    id: `pr_${role ?? 'none'}`,
    kind: 'human',
    name: role ?? 'nobody',
    workspaceId: 'ws_1',
    workspaceSlug: 'w',
    role,
    grants: [],
    agentCeiling: null,
    keyCeiling: null,
    via: 'session',
    sessionId: 'se_1',
    keyId: null,
    stepUpAt: null,
    elevatedUntil: null,
    createdBy: null,
    ...over,
  };
}

export function agent(grants: Grant[], over: Partial<Principal> = {}): Principal {
  return {
    id: 'pr_agent',
    kind: 'agent',
    name: 'bot',
    workspaceId: 'ws_1',
    workspaceSlug: 'w',
    role: null,
    grants,
    agentCeiling: 'secret',
    keyCeiling: null,
    via: 'key',
    sessionId: null,
    keyId: 'tk_1',
    stepUpAt: null,
    elevatedUntil: null,
    createdBy: 'pr_owner',
    creatorRole: 'owner',
    ...over,
  };
}

export const g = (action: Grant['action'], scope: string, ceiling: Level): Grant => ({ action, scope, ceiling });

export type Outcome = { kind: 'allow' } | { kind: 'deny'; status: number; code: string; message: string };
export function outcome(d: Decision): Outcome {
  if (d.kind === 'allow') return { kind: 'allow' };
  expect(d.error).toBeInstanceOf(ServiceError);
  return { kind: 'deny', status: d.error.status, code: d.error.code, message: d.error.message };
}
export const ALLOW: Outcome = { kind: 'allow' };
export const forbid = (message: string, code = 'forbidden'): Outcome => ({ kind: 'deny', status: 403, code, message });
