import { describe, expect, it } from 'vitest';
import { decideAuditRead } from '../../src/policy/audit.js';
import type { Principal } from '../../src/policy/principal.js';
import { ACTIONS } from '../../src/policy/principal.js';
import { agent, ALLOW, FUTURE, forbid, g, human, outcome, type Outcome } from './support.js';

/** Table-driven test of src/policy/audit.ts (issue 16): the audit log is for a signed-in owner only. */

const NOT_OWNER = forbid('Only a workspace owner may read the audit log');
const NO_AGENT = forbid('The audit log is for a signed-in owner', 'session_required');
const everything = ACTIONS.map((a) => g(a, '*', 'secret'));

describe('decideAuditRead: owners with a web session', () => {
  const rows: { name: string; actor: Principal; expected: Outcome }[] = [
    { name: 'owner', actor: human('owner'), expected: ALLOW },
    { name: 'owner with a recent step-up', actor: human('owner', { stepUpAt: new Date().toISOString() }), expected: ALLOW },
    { name: 'editor', actor: human('editor'), expected: NOT_OWNER },
    { name: 'viewer', actor: human('viewer'), expected: NOT_OWNER },
    { name: 'human with no role here', actor: human(null), expected: NOT_OWNER },
    { name: 'owner through an OAuth token', actor: human('owner', { via: 'oauth', sessionId: null }), expected: NO_AGENT },
    { name: 'owner through a git token', actor: human('owner', { via: 'git', sessionId: null }), expected: NO_AGENT },
    { name: 'agent with every grant', actor: agent(everything), expected: NO_AGENT },
    { name: 'elevated agent with every grant', actor: agent(everything, { elevatedUntil: FUTURE }), expected: NO_AGENT },
  ];
  it.each(rows)('$name', ({ actor, expected }) => {
    expect(outcome(decideAuditRead(actor))).toEqual(expected);
  });
});
