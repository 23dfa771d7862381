import { describe, expect, it } from 'vitest';
import { decideLogAppend } from '../../src/policy/log.js';
import type { PageFacts } from '../../src/policy/pages.js';
import type { Principal } from '../../src/policy/principal.js';
import { FUTURE, PAST, human, agent, g, outcome, ALLOW, forbid, type Outcome } from './support.js';

/**
 * Table-driven test of src/policy/log.ts (issue 12): appending to a Space's or folder's log.md
 * needs propose over the log's path, at or above the log page's level; the blocks already in
 * the log do not matter. Pure; ceilingFor reads the clock for elevations, so those are far in
 * the future or the past.
 */

const log = (path: string, sensitivity: string, blockLevel: string | null = null): PageFacts => ({ path, sensitivity, blockLevel });

describe('decideLogAppend: propose over the log path, at or above its level', () => {
  const rows: { name: string; actor: Principal; input: PageFacts; expected: Outcome }[] = [
    { name: 'owner appends to a secret log', actor: human('owner'), input: log('eng/log.md', 'secret'), expected: ALLOW },
    { name: 'editor appends to a confidential log (equal)', actor: human('editor'), input: log('eng/log.md', 'confidential'), expected: ALLOW },
    {
      name: 'editor may not append to a secret log',
      actor: human('editor'),
      input: log('eng/log.md', 'secret'),
      expected: forbid('eng/log.md is secret, above your ceiling (confidential)'),
    },
    { name: 'viewer appends to an internal log (every role holds propose)', actor: human('viewer'), input: log('eng/log.md', 'internal'), expected: ALLOW },
    {
      name: 'viewer may not append to a confidential log',
      actor: human('viewer'),
      input: log('eng/log.md', 'confidential'),
      expected: forbid('eng/log.md is confidential, above your ceiling (internal)'),
    },
    {
      name: 'viewer appends to an internal log holding a secret block',
      actor: human('viewer'),
      input: log('eng/log.md', 'internal', 'secret'),
      expected: ALLOW,
    },
    {
      name: 'human without a role may not append',
      actor: human(null),
      input: log('eng/log.md', 'public'),
      expected: forbid('No propose grant covers eng/log.md'),
    },
    {
      name: 'owner behind an internal key may not append to confidential',
      actor: human('owner', { keyCeiling: 'internal' }),
      input: log('eng/log.md', 'confidential'),
      expected: forbid('eng/log.md is confidential, above your ceiling (internal)'),
    },
    {
      name: 'unknown log level is refused even for an owner',
      actor: human('owner'),
      input: log('eng/log.md', 'bogus'),
      expected: forbid('eng/log.md is bogus, above your ceiling (secret)'),
    },
    {
      name: 'empty log level is refused even for an owner',
      actor: human('owner'),
      input: log('eng/log.md', ''),
      expected: forbid('eng/log.md is , above your ceiling (secret)'),
    },
    { name: 'agent propose eng@internal, space log', actor: agent([g('propose', 'eng', 'internal')]), input: log('eng/log.md', 'internal'), expected: ALLOW },
    {
      name: 'agent propose eng@internal, folder log below',
      actor: agent([g('propose', 'eng', 'internal')]),
      input: log('eng/ops/log.md', 'public'),
      expected: ALLOW,
    },
    {
      name: 'agent propose eng does not cover the sibling engineering',
      actor: agent([g('propose', 'eng', 'internal')]),
      input: log('engineering/log.md', 'public'),
      expected: forbid('No propose grant covers engineering/log.md'),
    },
    {
      name: 'agent propose eng/ops does not cover the space log eng/log.md',
      actor: agent([g('propose', 'eng/ops', 'internal')]),
      input: log('eng/log.md', 'public'),
      expected: forbid('No propose grant covers eng/log.md'),
    },
    {
      name: 'agent propose eng/ops covers its own folder log',
      actor: agent([g('propose', 'eng/ops', 'internal')]),
      input: log('eng/ops/log.md', 'internal'),
      expected: ALLOW,
    },
    { name: 'agent propose * @public, public log', actor: agent([g('propose', '*', 'public')]), input: log('hr/log.md', 'public'), expected: ALLOW },
    {
      name: 'agent propose * @public, internal log',
      actor: agent([g('propose', '*', 'public')]),
      input: log('hr/log.md', 'internal'),
      expected: forbid('hr/log.md is internal, above your ceiling (public)'),
    },
    {
      name: 'agent with write and read but no propose',
      actor: agent([g('write', '*', 'secret'), g('read', '*', 'secret')]),
      input: log('eng/log.md', 'public'),
      expected: forbid('No propose grant covers eng/log.md'),
    },
    {
      name: 'agent secret propose grant, not elevated, capped at confidential',
      actor: agent([g('propose', '*', 'secret')]),
      input: log('eng/log.md', 'secret'),
      expected: forbid('eng/log.md is secret, above your ceiling (confidential)'),
    },
    {
      name: 'elevated agent with a secret propose grant appends to secret',
      actor: agent([g('propose', '*', 'secret')], { elevatedUntil: FUTURE }),
      input: log('eng/log.md', 'secret'),
      expected: ALLOW,
    },
    {
      name: 'agent whose elevation ended is capped at confidential',
      actor: agent([g('propose', '*', 'secret')], { elevatedUntil: PAST }),
      input: log('eng/log.md', 'secret'),
      expected: forbid('eng/log.md is secret, above your ceiling (confidential)'),
    },
    {
      name: 'agent ceiling internal caps a confidential grant',
      actor: agent([g('propose', '*', 'confidential')], { agentCeiling: 'internal' }),
      input: log('eng/log.md', 'confidential'),
      expected: forbid('eng/log.md is confidential, above your ceiling (internal)'),
    },
    {
      name: 'agent key ceiling public caps an internal grant',
      actor: agent([g('propose', '*', 'internal')], { keyCeiling: 'public' }),
      input: log('eng/log.md', 'internal'),
      expected: forbid('eng/log.md is internal, above your ceiling (public)'),
    },
    {
      name: 'agent whose creator left may not append',
      actor: agent([g('propose', '*', 'internal')], { creatorRole: null }),
      input: log('eng/log.md', 'public'),
      expected: forbid('No propose grant covers eng/log.md'),
    },
    {
      name: 'agent whose creator is a viewer is capped at internal',
      actor: agent([g('propose', '*', 'confidential')], { creatorRole: 'viewer' }),
      input: log('eng/log.md', 'confidential'),
      expected: forbid('eng/log.md is confidential, above your ceiling (internal)'),
    },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    expect(outcome(decideLogAppend(actor, input))).toEqual(expected);
  });
});
