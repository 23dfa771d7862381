import { describe, expect, it } from 'vitest';
import type { Action, Principal } from '../../src/policy/principal.js';
import { decideToolGrant } from '../../src/policy/tools.js';
import { FUTURE, PAST, human, agent, g, outcome, ALLOW, forbid, type Outcome } from './support.js';

/**
 * Table-driven test of src/policy/tools.ts (issue 12): the MCP tool table's Grant column. A
 * tool needs one of its actions somewhere in the workspace; the exact path is judged later by
 * the core. Pure; hasActionWithin reads the clock for elevations, so those are far in the
 * future or the past.
 */

describe('decideToolGrant: one of the actions, anywhere in the workspace', () => {
  const rows: { name: string; actor: Principal; input: readonly Action[]; expected: Outcome }[] = [
    { name: 'no actions: an agent without grants', actor: agent([]), input: [], expected: ALLOW },
    { name: 'no actions: a human without a role', actor: human(null), input: [], expected: ALLOW },
    { name: 'no actions: an agent whose creator left', actor: agent([], { creatorRole: null }), input: [], expected: ALLOW },
    { name: 'owner, admin', actor: human('owner'), input: ['admin'], expected: ALLOW },
    { name: 'editor, write', actor: human('editor'), input: ['write'], expected: ALLOW },
    { name: 'editor, admin', actor: human('editor'), input: ['admin'], expected: forbid('No admin grant') },
    { name: 'viewer, read', actor: human('viewer'), input: ['read'], expected: ALLOW },
    { name: 'viewer, collab', actor: human('viewer'), input: ['collab'], expected: ALLOW },
    { name: 'viewer, write', actor: human('viewer'), input: ['write'], expected: forbid('No write grant') },
    { name: 'viewer, write or read: one is enough', actor: human('viewer'), input: ['write', 'read'], expected: ALLOW },
    { name: 'viewer, write or admin', actor: human('viewer'), input: ['write', 'admin'], expected: forbid('No write or admin grant') },
    { name: 'human without a role, read', actor: human(null), input: ['read'], expected: forbid('No read grant') },
    { name: 'owner behind a public key still has the action', actor: human('owner', { keyCeiling: 'public' }), input: ['admin'], expected: ALLOW },
    { name: 'agent read *, read', actor: agent([g('read', '*', 'internal')]), input: ['read'], expected: ALLOW },
    { name: 'agent read on a folder only (eng/ops), read', actor: agent([g('read', 'eng/ops', 'public')]), input: ['read'], expected: ALLOW },
    { name: 'agent write *, read', actor: agent([g('write', '*', 'secret')]), input: ['read'], expected: forbid('No read grant') },
    {
      name: 'agent read and search, propose or collab',
      actor: agent([g('read', '*', 'secret'), g('search', '*', 'secret')]),
      input: ['propose', 'collab'],
      expected: forbid('No propose or collab grant'),
    },
    { name: 'agent collab, propose or collab', actor: agent([g('collab', 'eng', 'internal')]), input: ['propose', 'collab'], expected: ALLOW },
    { name: 'agent without grants, search', actor: agent([]), input: ['search'], expected: forbid('No search grant') },
    {
      name: 'grant ceilings do not matter here (public grant, public key)',
      actor: agent([g('search', '*', 'public')], { keyCeiling: 'public', agentCeiling: 'public' }),
      input: ['search'],
      expected: ALLOW,
    },
    {
      name: 'agent whose creator left, read',
      actor: agent([g('read', '*', 'internal')], { creatorRole: null }),
      input: ['read'],
      expected: forbid('No read grant'),
    },
    {
      name: 'agent whose creator is a viewer, write',
      actor: agent([g('write', '*', 'internal')], { creatorRole: 'viewer' }),
      input: ['write'],
      expected: forbid('No write grant'),
    },
    { name: 'agent whose creator is a viewer, read', actor: agent([g('read', '*', 'internal')], { creatorRole: 'viewer' }), input: ['read'], expected: ALLOW },
    {
      name: 'agent whose creator is an editor, admin',
      actor: agent([g('admin', '*', 'internal')], { creatorRole: 'editor' }),
      input: ['admin'],
      expected: forbid('No admin grant'),
    },
    {
      name: 'agent whose creator is an owner, admin',
      actor: agent([g('admin', 'eng', 'internal')], { creatorRole: 'owner' }),
      input: ['admin'],
      expected: ALLOW,
    },
    {
      name: 'agent built without creatorRole, admin',
      actor: agent([g('admin', 'eng', 'internal')], { creatorRole: undefined }),
      input: ['admin'],
      expected: ALLOW,
    },
    {
      name: 'elevated agent whose creator left still reads (elevation lifts the cap for reading)',
      actor: agent([g('read', 'eng', 'internal')], { creatorRole: null, elevatedUntil: FUTURE }),
      input: ['read'],
      expected: ALLOW,
    },
    {
      name: 'elevated agent whose creator left does not write',
      actor: agent([g('write', 'eng', 'internal')], { creatorRole: null, elevatedUntil: FUTURE }),
      input: ['write'],
      expected: forbid('No write grant'),
    },
    {
      name: 'agent whose elevation ended and creator left does not read',
      actor: agent([g('read', 'eng', 'internal')], { creatorRole: null, elevatedUntil: PAST }),
      input: ['read'],
      expected: forbid('No read grant'),
    },
    {
      name: 'elevated agent without a read grant does not read',
      actor: agent([g('write', '*', 'secret')], { elevatedUntil: FUTURE }),
      input: ['read'],
      expected: forbid('No read grant'),
    },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    expect(outcome(decideToolGrant(actor, input))).toEqual(expected);
  });
});
