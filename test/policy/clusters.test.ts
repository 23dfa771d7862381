import { describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/core/errors.js';
import { decideClusterArchive } from '../../src/policy/clusters.js';
import type { Decision } from '../../src/policy/pages.js';
import type { Grant, Principal, Role } from '../../src/policy/principal.js';
import type { Level } from '../../src/policy/sensitivity.js';

/**
 * Table-driven test of src/policy/clusters.ts (issue 12): the folder-archive gate. Humans
 * need a step-up in the last five minutes; agents pass this gate, and every page is then
 * decided on its own by the core (decideWrite, or a proposal) — not tested here.
 */

const NOW = new Date('2030-06-01T12:00:00.000Z');
const ago = (ms: number) => new Date(NOW.getTime() - ms).toISOString();
const FIVE_MIN = 5 * 60 * 1000;
const FUTURE = '2999-01-01T00:00:00.000Z';

function human(role: Role | null, over: Partial<Principal> = {}): Principal {
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

function agent(grants: Grant[], over: Partial<Principal> = {}): Principal {
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

const g = (action: Grant['action'], scope: string, ceiling: Level): Grant => ({ action, scope, ceiling });

type Outcome = { kind: 'allow' } | { kind: 'deny'; status: number; code: string; message: string };
function outcome(d: Decision): Outcome {
  if (d.kind === 'allow') return { kind: 'allow' };
  expect(d.error).toBeInstanceOf(ServiceError);
  return { kind: 'deny', status: d.error.status, code: d.error.code, message: d.error.message };
}
const ALLOW: Outcome = { kind: 'allow' };
const forbid = (message: string, code = 'forbidden'): Outcome => ({ kind: 'deny', status: 403, code, message });

const STEP_UP = forbid('Archiving a folder needs a step-up within the last 5 minutes (POST /api/auth/stepup)', 'step_up_required');

describe('decideClusterArchive: humans step up; agents pass to the per-page decisions', () => {
  const rows: { name: string; actor: Principal; expected: Outcome }[] = [
    { name: 'owner without step-up', actor: human('owner'), expected: STEP_UP },
    { name: 'owner stepped up 1 min ago', actor: human('owner', { stepUpAt: ago(60_000) }), expected: ALLOW },
    { name: 'owner stepped up this moment (age 0)', actor: human('owner', { stepUpAt: ago(0) }), expected: ALLOW },
    { name: 'editor stepped up 5 min minus 1 ms ago', actor: human('editor', { stepUpAt: ago(FIVE_MIN - 1) }), expected: ALLOW },
    { name: 'editor stepped up exactly 5 min ago', actor: human('editor', { stepUpAt: ago(FIVE_MIN) }), expected: STEP_UP },
    { name: 'editor stepped up an hour ago', actor: human('editor', { stepUpAt: ago(60 * 60_000) }), expected: STEP_UP },
    { name: 'owner with a step-up in the future', actor: human('owner', { stepUpAt: ago(-1000) }), expected: STEP_UP },
    { name: 'owner with an unparsable step-up time', actor: human('owner', { stepUpAt: 'yesterday' }), expected: STEP_UP },
    // The gate is only the step-up; a viewer's pages then become archive proposals page by page.
    { name: 'viewer stepped up passes the folder gate', actor: human('viewer', { stepUpAt: ago(1000) }), expected: ALLOW },
    { name: 'viewer without step-up', actor: human('viewer'), expected: STEP_UP },
    { name: 'human without a role stepped up passes the folder gate', actor: human(null, { stepUpAt: ago(1000) }), expected: ALLOW },
    { name: 'agent without grants passes the folder gate', actor: agent([]), expected: ALLOW },
    { name: 'agent with a write grant', actor: agent([g('write', 'eng', 'internal')]), expected: ALLOW },
    { name: 'elevated agent', actor: agent([g('read', '*', 'secret')], { elevatedUntil: FUTURE }), expected: ALLOW },
    { name: 'agent whose creator left (pages decide)', actor: agent([g('write', '*', 'internal')], { creatorRole: null }), expected: ALLOW },
    { name: 'agent carrying a stale stepUpAt is not asked for one', actor: agent([], { stepUpAt: ago(FIVE_MIN * 10) }), expected: ALLOW },
  ];
  it.each(rows)('$name', ({ actor, expected }) => {
    expect(outcome(decideClusterArchive(actor, NOW))).toEqual(expected);
  });
});
