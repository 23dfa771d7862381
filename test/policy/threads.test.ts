import { describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/core/errors.js';
import type { PageFacts } from '../../src/policy/pages.js';
import type { Principal } from '../../src/policy/principal.js';
import { afterPost, decidePost, decidePostWhenLocked, decideUnlock, MAX_AGENT_HOPS, threadLocked, type ThreadFacts } from '../../src/policy/threads.js';
import { FUTURE, PAST, human, agent, g, outcome, ALLOW, forbid, type Outcome } from './support.js';

/**
 * Table-driven test of src/policy/threads.ts (issue 12): posting (collab), the lock, the loop
 * breaker and unlocking. Pure functions; principals are plain objects shaped like those of
 * src/auth/resolve.ts. decidePost reads the clock through ceilingFor (elevation), so
 * elevations are far in the future or the past.
 */

const page = (path: string, sensitivity: string): PageFacts => ({ path, sensitivity, blockLevel: null });

const LOCKED_MESSAGE =
  'The thread is locked after 4 consecutive agent messages, until a person unlocks it: stop posting here and do not retry. ' +
  'The editors and owners who can read the page have been told; one of them must unlock it (POST /api/v1/nodes/{id}/threads/unlock).';
const LOCKED: Outcome = { kind: 'deny', status: 423, code: 'thread_locked', message: LOCKED_MESSAGE };

describe('decidePost: collab over the page path, at or above the page level', () => {
  const rows: { name: string; actor: Principal; input: PageFacts; expected: Outcome }[] = [
    { name: 'owner posts on a secret page', actor: human('owner'), input: page('eng/a.md', 'secret'), expected: ALLOW },
    { name: 'editor posts on confidential (equal)', actor: human('editor'), input: page('eng/a.md', 'confidential'), expected: ALLOW },
    {
      name: 'editor may not post on secret',
      actor: human('editor'),
      input: page('eng/a.md', 'secret'),
      expected: forbid('The page is secret, above your collab ceiling (confidential)'),
    },
    { name: 'viewer posts on internal (every role holds collab)', actor: human('viewer'), input: page('eng/a.md', 'internal'), expected: ALLOW },
    {
      name: 'viewer may not post on confidential',
      actor: human('viewer'),
      input: page('eng/a.md', 'confidential'),
      expected: forbid('The page is confidential, above your collab ceiling (internal)'),
    },
    { name: 'human without a role may not post', actor: human(null), input: page('eng/a.md', 'public'), expected: forbid('Your role may not post in threads') },
    {
      name: 'owner behind an internal key may not post on confidential',
      actor: human('owner', { keyCeiling: 'internal' }),
      input: page('eng/a.md', 'confidential'),
      expected: forbid('The page is confidential, above your collab ceiling (internal)'),
    },
    { name: 'unknown sensitivity reads as secret: owner may post', actor: human('owner'), input: page('eng/a.md', 'bogus'), expected: ALLOW },
    {
      name: 'unknown sensitivity reads as secret: editor may not',
      actor: human('editor'),
      input: page('eng/a.md', 'bogus'),
      expected: forbid('The page is bogus, above your collab ceiling (confidential)'),
    },
    {
      name: 'empty sensitivity reads as secret: editor may not',
      actor: human('editor'),
      input: page('eng/a.md', ''),
      expected: forbid('The page is , above your collab ceiling (confidential)'),
    },
    {
      name: 'agent collab eng@internal posts on eng/a.md internal',
      actor: agent([g('collab', 'eng', 'internal')]),
      input: page('eng/a.md', 'internal'),
      expected: ALLOW,
    },
    {
      name: 'agent collab eng@internal may not post on confidential',
      actor: agent([g('collab', 'eng', 'internal')]),
      input: page('eng/a.md', 'confidential'),
      expected: forbid('The page is confidential, above your collab ceiling (internal)'),
    },
    {
      name: 'agent collab eng does not cover sibling engineering/a.md',
      actor: agent([g('collab', 'eng', 'internal')]),
      input: page('engineering/a.md', 'public'),
      expected: forbid('No collab grant covers engineering/a.md'),
    },
    {
      name: 'agent collab eng/ops covers eng/ops/deep/a.md',
      actor: agent([g('collab', 'eng/ops', 'internal')]),
      input: page('eng/ops/deep/a.md', 'public'),
      expected: ALLOW,
    },
    {
      name: 'agent collab eng/ops does not cover eng/a.md',
      actor: agent([g('collab', 'eng/ops', 'internal')]),
      input: page('eng/a.md', 'public'),
      expected: forbid('No collab grant covers eng/a.md'),
    },
    { name: 'agent collab * covers any page', actor: agent([g('collab', '*', 'confidential')]), input: page('hr/x/a.md', 'confidential'), expected: ALLOW },
    {
      name: 'agent with read but no collab may not post',
      actor: agent([g('read', '*', 'secret')]),
      input: page('eng/a.md', 'public'),
      expected: forbid('No collab grant covers eng/a.md'),
    },
    { name: 'agent with no grants may not post', actor: agent([]), input: page('eng/a.md', 'public'), expected: forbid('No collab grant covers eng/a.md') },
    {
      name: 'agent secret collab grant, not elevated, capped at confidential',
      actor: agent([g('collab', '*', 'secret')]),
      input: page('eng/a.md', 'secret'),
      expected: forbid('The page is secret, above your collab ceiling (confidential)'),
    },
    {
      name: 'agent whose elevation ended is capped at confidential',
      actor: agent([g('collab', '*', 'secret')], { elevatedUntil: PAST }),
      input: page('eng/a.md', 'secret'),
      expected: forbid('The page is secret, above your collab ceiling (confidential)'),
    },
    {
      name: 'elevated agent with a secret collab grant posts on secret',
      actor: agent([g('collab', '*', 'secret')], { elevatedUntil: FUTURE }),
      input: page('eng/a.md', 'secret'),
      expected: ALLOW,
    },
    {
      name: 'elevated agent keeps its collab grant ceiling',
      actor: agent([g('collab', '*', 'internal')], { elevatedUntil: FUTURE }),
      input: page('eng/a.md', 'confidential'),
      expected: forbid('The page is confidential, above your collab ceiling (internal)'),
    },
    {
      name: 'elevated agent with only a read grant may not post',
      actor: agent([g('read', '*', 'secret')], { elevatedUntil: FUTURE }),
      input: page('eng/a.md', 'public'),
      expected: forbid('No collab grant covers eng/a.md'),
    },
    {
      name: 'agent ceiling public caps an internal grant',
      actor: agent([g('collab', '*', 'internal')], { agentCeiling: 'public' }),
      input: page('eng/a.md', 'internal'),
      expected: forbid('The page is internal, above your collab ceiling (public)'),
    },
    {
      name: 'agent key ceiling internal caps a confidential grant',
      actor: agent([g('collab', '*', 'confidential')], { keyCeiling: 'internal' }),
      input: page('eng/a.md', 'confidential'),
      expected: forbid('The page is confidential, above your collab ceiling (internal)'),
    },
    {
      name: 'agent whose creator left may not post',
      actor: agent([g('collab', '*', 'internal')], { creatorRole: null }),
      input: page('eng/a.md', 'public'),
      expected: forbid('No collab grant covers eng/a.md'),
    },
    {
      name: 'agent whose creator is a viewer is capped at internal',
      actor: agent([g('collab', '*', 'confidential')], { creatorRole: 'viewer' }),
      input: page('eng/a.md', 'confidential'),
      expected: forbid('The page is confidential, above your collab ceiling (internal)'),
    },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    expect(outcome(decidePost(actor, input))).toEqual(expected);
  });
});

describe('threadLocked: 423 thread_locked', () => {
  it('names the hop limit and the unlock route', () => {
    const e = threadLocked();
    expect(e).toBeInstanceOf(ServiceError);
    expect({ status: e.status, code: e.code, message: e.message }).toEqual({ status: 423, code: 'thread_locked', message: LOCKED_MESSAGE });
  });
});

describe('decidePostWhenLocked: a locked thread refuses agents only', () => {
  const rows: { name: string; actor: Principal; input: ThreadFacts; expected: Outcome }[] = [
    { name: 'agent on a locked thread', actor: agent([g('collab', '*', 'secret')]), input: { agentHops: 4, locked: true }, expected: LOCKED },
    {
      name: 'elevated agent on a locked thread',
      actor: agent([g('collab', '*', 'secret')], { elevatedUntil: FUTURE }),
      input: { agentHops: 4, locked: true },
      expected: LOCKED,
    },
    {
      name: 'agent on a locked thread whose count a human reset',
      actor: agent([g('collab', '*', 'secret')]),
      input: { agentHops: 0, locked: true },
      expected: LOCKED,
    },
    { name: 'agent on an unlocked thread at 3 hops', actor: agent([g('collab', '*', 'secret')]), input: { agentHops: 3, locked: false }, expected: ALLOW },
    { name: 'viewer on a locked thread', actor: human('viewer'), input: { agentHops: 4, locked: true }, expected: ALLOW },
    { name: 'owner on a locked thread', actor: human('owner'), input: { agentHops: 4, locked: true }, expected: ALLOW },
    { name: 'editor on an unlocked thread', actor: human('editor'), input: { agentHops: 0, locked: false }, expected: ALLOW },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    expect(outcome(decidePostWhenLocked(actor, input))).toEqual(expected);
  });
});

describe('afterPost: the loop breaker', () => {
  it('locks at 4 consecutive agent messages', () => {
    expect(MAX_AGENT_HOPS).toBe(4);
  });
  const rows: { name: string; input: { t: ThreadFacts; author: Principal['kind'] }; expected: { agentHops: number; lockNow: boolean } }[] = [
    { name: 'human post resets the count', input: { t: { agentHops: 3, locked: false }, author: 'human' }, expected: { agentHops: 0, lockNow: false } },
    {
      name: 'human post on a locked thread resets the count, does not lock again',
      input: { t: { agentHops: 4, locked: true }, author: 'human' },
      expected: { agentHops: 0, lockNow: false },
    },
    { name: 'first agent message', input: { t: { agentHops: 0, locked: false }, author: 'agent' }, expected: { agentHops: 1, lockNow: false } },
    {
      name: 'third agent message (below the limit)',
      input: { t: { agentHops: 2, locked: false }, author: 'agent' },
      expected: { agentHops: 3, lockNow: false },
    },
    {
      name: 'fourth agent message reaches the limit and locks',
      input: { t: { agentHops: 3, locked: false }, author: 'agent' },
      expected: { agentHops: 4, lockNow: true },
    },
    {
      name: 'a count already past the limit on an unlocked thread locks',
      input: { t: { agentHops: 7, locked: false }, author: 'agent' },
      expected: { agentHops: 8, lockNow: true },
    },
    {
      name: 'an already locked thread is not locked again',
      input: { t: { agentHops: 4, locked: true }, author: 'agent' },
      expected: { agentHops: 5, lockNow: false },
    },
    {
      name: 'locked thread below the limit: counts, no new lock',
      input: { t: { agentHops: 0, locked: true }, author: 'agent' },
      expected: { agentHops: 1, lockNow: false },
    },
  ];
  it.each(rows)('$name', ({ input, expected }) => {
    expect(afterPost(input.t, input.author)).toEqual(expected);
  });
});

describe('decideUnlock: a signed-in editor or owner', () => {
  const rows: { name: string; actor: Principal; expected: Outcome }[] = [
    { name: 'owner, session', actor: human('owner'), expected: ALLOW },
    { name: 'editor, session', actor: human('editor'), expected: ALLOW },
    { name: 'viewer, session', actor: human('viewer'), expected: forbid('Only an editor or owner may unlock a thread') },
    { name: 'human without a role, session', actor: human(null), expected: forbid('Only an editor or owner may unlock a thread') },
    {
      name: 'owner presenting a key, not a session',
      actor: human('owner', { via: 'key', sessionId: null, keyId: 'tk_h' }),
      expected: forbid('Only a signed-in editor or owner may unlock a thread', 'session_required'),
    },
    {
      name: 'agent with every grant',
      actor: agent([g('admin', '*', 'secret'), g('collab', '*', 'secret')]),
      expected: forbid('Only a signed-in editor or owner may unlock a thread', 'session_required'),
    },
    {
      name: 'elevated agent',
      actor: agent([g('collab', '*', 'secret')], { elevatedUntil: FUTURE }),
      expected: forbid('Only a signed-in editor or owner may unlock a thread', 'session_required'),
    },
    {
      name: 'agent carrying a session and an owner role is still an agent',
      actor: agent([], { via: 'session', role: 'owner' }),
      expected: forbid('Only a signed-in editor or owner may unlock a thread', 'session_required'),
    },
  ];
  it.each(rows)('$name', ({ actor, expected }) => {
    expect(outcome(decideUnlock(actor))).toEqual(expected);
  });
});
