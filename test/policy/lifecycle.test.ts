import { describe, expect, it } from 'vitest';
import { decideLifecycleRun } from '../../src/policy/lifecycle.js';
import type { Principal } from '../../src/policy/principal.js';
import { ACTIONS } from '../../src/policy/principal.js';
import { agent, ALLOW, FUTURE, forbid, g, human, outcome, type Outcome } from './support.js';

/** Table-driven test of src/policy/lifecycle.ts (issue 16): runs are a signed-in owner's; an apply needs a step-up. */

const NOT_OWNER = forbid('Only a workspace owner may run the lifecycle job');
const NO_SESSION = forbid('Lifecycle runs are for a signed-in owner', 'session_required');
const STEP_UP = forbid('Applying the lifecycle job needs a step-up within the last 5 minutes (POST /api/auth/stepup)', 'step_up_required');
const everything = ACTIONS.map((a) => g(a, '*', 'secret'));
const now = new Date();
const recent = new Date(now.getTime() - 60_000).toISOString();
const stale = new Date(now.getTime() - 10 * 60_000).toISOString();

describe('decideLifecycleRun', () => {
  const rows: { name: string; actor: Principal; mode: 'dry' | 'apply'; expected: Outcome }[] = [
    { name: 'owner, dry', actor: human('owner'), mode: 'dry', expected: ALLOW },
    { name: 'owner, apply without step-up', actor: human('owner'), mode: 'apply', expected: STEP_UP },
    { name: 'owner, apply after an old step-up', actor: human('owner', { stepUpAt: stale }), mode: 'apply', expected: STEP_UP },
    { name: 'owner, apply after a step-up', actor: human('owner', { stepUpAt: recent }), mode: 'apply', expected: ALLOW },
    { name: 'editor, dry', actor: human('editor'), mode: 'dry', expected: NOT_OWNER },
    { name: 'stepped-up editor, apply', actor: human('editor', { stepUpAt: recent }), mode: 'apply', expected: NOT_OWNER },
    { name: 'viewer, dry', actor: human('viewer'), mode: 'dry', expected: NOT_OWNER },
    { name: 'human with no role here', actor: human(null), mode: 'dry', expected: NOT_OWNER },
    { name: 'owner through an OAuth token', actor: human('owner', { via: 'oauth', sessionId: null }), mode: 'dry', expected: NO_SESSION },
    { name: 'owner through a git token, apply', actor: human('owner', { via: 'git', sessionId: null }), mode: 'apply', expected: NO_SESSION },
    { name: 'agent with every grant', actor: agent(everything), mode: 'dry', expected: NO_SESSION },
    { name: 'elevated agent with every grant, apply', actor: agent(everything, { elevatedUntil: FUTURE }), mode: 'apply', expected: NO_SESSION },
  ];
  it.each(rows)('$name', ({ actor, mode, expected }) => {
    expect(outcome(decideLifecycleRun(actor, mode, now))).toEqual(expected);
  });
});
