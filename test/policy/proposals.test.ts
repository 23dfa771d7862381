import { describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/core/errors.js';
import type { PageFacts } from '../../src/policy/pages.js';
import type { Grant, Principal } from '../../src/policy/principal.js';
import {
  canSeeProposal,
  decideOnProposal,
  decidePropose,
  decideWriteOrPropose,
  seesProposalContent,
  type ProposalFacts,
  type ProposeRule,
} from '../../src/policy/proposals.js';
import type { Level } from '../../src/policy/sensitivity.js';
import { NOW, ago, FIVE_MIN, FUTURE, PAST, human, agent, g, outcome, ALLOW, forbid, type Outcome } from './support.js';

/**
 * Table-driven test of src/policy/proposals.ts (issue 12). Pure functions: principals are
 * plain objects shaped like the ones src/auth/resolve.ts builds. decidePropose and
 * canSeeProposal read the clock through ceilingFor (elevation), so elevations here are far in
 * the future or the past; decideOnProposal takes `now`, and the step-up rows pin it.
 */

const prop = (path: string, sensitivity: string, origin = 'agent', proposerId = 'pr_agent'): ProposalFacts => ({ path, sensitivity, origin, proposerId });
const page = (path: string, sensitivity: string, blockLevel: string | null = null): PageFacts => ({ path, sensitivity, blockLevel });

describe('canSeeProposal: a proposal exists for whoever could read what it touches', () => {
  const rows: { name: string; actor: Principal; input: ProposalFacts; expected: boolean }[] = [
    { name: 'owner sees a secret proposal', actor: human('owner'), input: prop('eng/a.md', 'secret'), expected: true },
    { name: 'editor sees confidential (ceiling equal)', actor: human('editor'), input: prop('eng/a.md', 'confidential'), expected: true },
    { name: 'editor does not see secret (ceiling above)', actor: human('editor'), input: prop('eng/a.md', 'secret'), expected: false },
    { name: 'viewer sees internal (ceiling equal)', actor: human('viewer'), input: prop('eng/a.md', 'internal'), expected: true },
    { name: 'viewer does not see confidential', actor: human('viewer'), input: prop('eng/a.md', 'confidential'), expected: false },
    { name: 'human without a role sees nothing, not even public', actor: human(null), input: prop('eng/a.md', 'public'), expected: false },
    {
      name: 'owner behind an internal key ceiling does not see confidential',
      actor: human('owner', { keyCeiling: 'internal' }),
      input: prop('eng/a.md', 'confidential'),
      expected: false,
    },
    { name: 'owner sees an unknown sensitivity (read as secret)', actor: human('owner'), input: prop('eng/a.md', 'top-secret'), expected: true },
    { name: 'editor does not see an unknown sensitivity (read as secret)', actor: human('editor'), input: prop('eng/a.md', 'top-secret'), expected: false },
    {
      name: 'agent read eng@confidential sees eng/a.md confidential',
      actor: agent([g('read', 'eng', 'confidential')]),
      input: prop('eng/a.md', 'confidential'),
      expected: true,
    },
    {
      name: 'agent read eng does not see the sibling engineering/a.md',
      actor: agent([g('read', 'eng', 'confidential')]),
      input: prop('engineering/a.md', 'public'),
      expected: false,
    },
    {
      name: 'agent read eng/ops sees eng/ops/x/y.md',
      actor: agent([g('read', 'eng/ops', 'internal')]),
      input: prop('eng/ops/x/y.md', 'internal'),
      expected: true,
    },
    {
      name: 'agent read eng/ops does not see eng/opsx/y.md',
      actor: agent([g('read', 'eng/ops', 'internal')]),
      input: prop('eng/opsx/y.md', 'internal'),
      expected: false,
    },
    { name: 'agent read * @internal sees hr/a.md internal', actor: agent([g('read', '*', 'internal')]), input: prop('hr/a.md', 'internal'), expected: true },
    {
      name: 'agent read * @internal does not see confidential',
      actor: agent([g('read', '*', 'internal')]),
      input: prop('hr/a.md', 'confidential'),
      expected: false,
    },
    {
      name: 'agent with only a propose grant does not see (needs read)',
      actor: agent([g('propose', '*', 'secret')]),
      input: prop('eng/a.md', 'public'),
      expected: false,
    },
    { name: 'agent with no grants sees nothing', actor: agent([]), input: prop('eng/a.md', 'public'), expected: false },
    {
      name: 'agent read secret grant, not elevated, is capped at confidential',
      actor: agent([g('read', 'eng', 'secret')]),
      input: prop('eng/a.md', 'secret'),
      expected: false,
    },
    {
      name: 'agent whose elevation ended is capped at confidential',
      actor: agent([g('read', 'eng', 'secret')], { elevatedUntil: PAST }),
      input: prop('eng/a.md', 'secret'),
      expected: false,
    },
    {
      name: 'elevated agent sees secret within its read grant (grant ceiling internal)',
      actor: agent([g('read', 'eng', 'internal')], { elevatedUntil: FUTURE }),
      input: prop('eng/a.md', 'secret'),
      expected: true,
    },
    {
      name: 'elevated agent does not see outside its read grants',
      actor: agent([g('read', 'eng', 'internal')], { elevatedUntil: FUTURE }),
      input: prop('hr/a.md', 'public'),
      expected: false,
    },
    {
      name: 'elevated agent is still capped by its key ceiling',
      actor: agent([g('read', 'eng', 'secret')], { elevatedUntil: FUTURE, keyCeiling: 'internal' }),
      input: prop('eng/a.md', 'confidential'),
      expected: false,
    },
    {
      name: 'agent ceiling internal caps a confidential grant',
      actor: agent([g('read', 'eng', 'confidential')], { agentCeiling: 'internal' }),
      input: prop('eng/a.md', 'confidential'),
      expected: false,
    },
    {
      name: 'agent key ceiling public caps an internal grant',
      actor: agent([g('read', 'eng', 'internal')], { keyCeiling: 'public' }),
      input: prop('eng/a.md', 'internal'),
      expected: false,
    },
    {
      name: 'agent whose creator left sees nothing',
      actor: agent([g('read', '*', 'confidential')], { creatorRole: null }),
      input: prop('eng/a.md', 'public'),
      expected: false,
    },
    {
      name: 'agent whose creator is a viewer is capped at internal',
      actor: agent([g('read', '*', 'confidential')], { creatorRole: 'viewer' }),
      input: prop('eng/a.md', 'confidential'),
      expected: false,
    },
    {
      name: 'agent whose creator is a viewer sees internal',
      actor: agent([g('read', '*', 'confidential')], { creatorRole: 'viewer' }),
      input: prop('eng/a.md', 'internal'),
      expected: true,
    },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    expect(canSeeProposal(actor, input)).toBe(expected);
  });
});

describe('seesProposalContent: the proposed text is for humans only', () => {
  const rows: { name: string; actor: Principal; expected: boolean }[] = [
    { name: 'owner', actor: human('owner'), expected: true },
    { name: 'viewer', actor: human('viewer'), expected: true },
    { name: 'human without a role', actor: human(null), expected: true },
    { name: 'agent with every grant', actor: agent([g('read', '*', 'secret'), g('propose', '*', 'secret')]), expected: false },
    { name: 'elevated agent', actor: agent([g('read', '*', 'secret')], { elevatedUntil: FUTURE }), expected: false },
  ];
  it.each(rows)('$name', ({ actor, expected }) => {
    expect(seesProposalContent(actor)).toBe(expected);
  });
});

describe('decidePropose: the propose grant over the path, at or above what the proposal holds', () => {
  const rows: { name: string; actor: Principal; input: PageFacts; expected: Outcome }[] = [
    { name: 'owner proposes secret', actor: human('owner'), input: page('eng/a.md', 'secret'), expected: ALLOW },
    { name: 'editor proposes confidential (equal)', actor: human('editor'), input: page('eng/a.md', 'confidential'), expected: ALLOW },
    {
      name: 'editor may not propose secret',
      actor: human('editor'),
      input: page('eng/a.md', 'secret'),
      expected: forbid('Content at secret is above your ceiling (confidential)'),
    },
    {
      name: 'editor may not propose a secret block in a confidential page',
      actor: human('editor'),
      input: page('eng/a.md', 'confidential', 'secret'),
      expected: forbid('Content at secret is above your ceiling (confidential)'),
    },
    { name: 'editor proposes a confidential block (equal)', actor: human('editor'), input: page('eng/a.md', 'internal', 'confidential'), expected: ALLOW },
    { name: 'viewer proposes internal (every role holds propose)', actor: human('viewer'), input: page('eng/a.md', 'internal'), expected: ALLOW },
    {
      name: 'viewer may not propose confidential',
      actor: human('viewer'),
      input: page('eng/a.md', 'confidential'),
      expected: forbid('Content at confidential is above your ceiling (internal)'),
    },
    {
      name: 'human without a role may not propose',
      actor: human(null),
      input: page('eng/a.md', 'public'),
      expected: forbid('No propose grant covers eng/a.md'),
    },
    {
      name: 'owner behind an internal key may not propose confidential',
      actor: human('owner', { keyCeiling: 'internal' }),
      input: page('eng/a.md', 'confidential'),
      expected: forbid('Content at confidential is above your ceiling (internal)'),
    },
    {
      name: 'unknown sensitivity is refused even for an owner',
      actor: human('owner'),
      input: page('eng/a.md', 'bogus'),
      expected: forbid('Content at bogus is above your ceiling (secret)'),
    },
    {
      name: 'unknown block level is refused even for an owner',
      actor: human('owner'),
      input: page('eng/a.md', 'public', 'bogus'),
      expected: forbid('Content at bogus is above your ceiling (secret)'),
    },
    {
      name: 'agent propose eng@confidential, eng/a.md confidential',
      actor: agent([g('propose', 'eng', 'confidential')]),
      input: page('eng/a.md', 'confidential'),
      expected: ALLOW,
    },
    {
      name: 'agent propose eng does not cover sibling engineering/a.md',
      actor: agent([g('propose', 'eng', 'confidential')]),
      input: page('engineering/a.md', 'public'),
      expected: forbid('No propose grant covers engineering/a.md'),
    },
    {
      name: 'agent propose eng/ops covers eng/ops/x.md',
      actor: agent([g('propose', 'eng/ops', 'internal')]),
      input: page('eng/ops/x.md', 'internal'),
      expected: ALLOW,
    },
    {
      name: 'agent propose eng/ops does not cover eng/opsx/y.md',
      actor: agent([g('propose', 'eng/ops', 'internal')]),
      input: page('eng/opsx/y.md', 'internal'),
      expected: forbid('No propose grant covers eng/opsx/y.md'),
    },
    {
      name: 'agent propose eng/ops does not cover the space root eng/a.md',
      actor: agent([g('propose', 'eng/ops', 'internal')]),
      input: page('eng/a.md', 'internal'),
      expected: forbid('No propose grant covers eng/a.md'),
    },
    {
      name: 'agent propose * @internal, anywhere internal',
      actor: agent([g('propose', '*', 'internal')]),
      input: page('hr/x/a.md', 'internal'),
      expected: ALLOW,
    },
    {
      name: 'agent propose * @internal, confidential above',
      actor: agent([g('propose', '*', 'internal')]),
      input: page('hr/a.md', 'confidential'),
      expected: forbid('Content at confidential is above your ceiling (internal)'),
    },
    {
      name: 'agent takes the best matching grant (* internal, eng confidential)',
      actor: agent([g('propose', '*', 'internal'), g('propose', 'eng', 'confidential')]),
      input: page('eng/a.md', 'confidential'),
      expected: ALLOW,
    },
    {
      name: 'agent with only read and write grants may not propose',
      actor: agent([g('read', '*', 'secret'), g('write', '*', 'secret')]),
      input: page('eng/a.md', 'public'),
      expected: forbid('No propose grant covers eng/a.md'),
    },
    {
      name: 'agent secret propose grant, not elevated, is capped at confidential',
      actor: agent([g('propose', 'eng', 'secret')]),
      input: page('eng/a.md', 'secret'),
      expected: forbid('Content at secret is above your ceiling (confidential)'),
    },
    {
      name: 'elevated agent with a secret propose grant proposes secret',
      actor: agent([g('propose', 'eng', 'secret')], { elevatedUntil: FUTURE }),
      input: page('eng/a.md', 'secret'),
      expected: ALLOW,
    },
    {
      name: 'elevated agent keeps its propose grant ceiling (confidential)',
      actor: agent([g('propose', 'eng', 'confidential')], { elevatedUntil: FUTURE }),
      input: page('eng/a.md', 'secret'),
      expected: forbid('Content at secret is above your ceiling (confidential)'),
    },
    {
      name: 'agent ceiling internal caps a confidential grant',
      actor: agent([g('propose', 'eng', 'confidential')], { agentCeiling: 'internal' }),
      input: page('eng/a.md', 'confidential'),
      expected: forbid('Content at confidential is above your ceiling (internal)'),
    },
    {
      name: 'agent key ceiling public caps an internal grant',
      actor: agent([g('propose', 'eng', 'internal')], { keyCeiling: 'public' }),
      input: page('eng/a.md', 'internal'),
      expected: forbid('Content at internal is above your ceiling (public)'),
    },
    {
      name: 'agent whose creator left may not propose',
      actor: agent([g('propose', '*', 'confidential')], { creatorRole: null }),
      input: page('eng/a.md', 'public'),
      expected: forbid('No propose grant covers eng/a.md'),
    },
    {
      name: 'agent whose creator is a viewer is capped at internal',
      actor: agent([g('propose', '*', 'confidential')], { creatorRole: 'viewer' }),
      input: page('eng/a.md', 'confidential'),
      expected: forbid('Content at confidential is above your ceiling (internal)'),
    },
    {
      name: 'agent built without creatorRole is not creator-capped',
      actor: agent([g('propose', '*', 'confidential')], { creatorRole: undefined }),
      input: page('eng/a.md', 'confidential'),
      expected: ALLOW,
    },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    expect(outcome(decidePropose(actor, input))).toEqual(expected);
  });

  // LOOKS WRONG: decidePropose skips a level that is falsy (`if (l && …)`), so an empty
  // sensitivity string is never checked and an editor may propose it — while decideWrite,
  // canReadPage and decidePost read an unknown sensitivity as secret, and decidePropose itself
  // refuses any other unknown string ('bogus' above). Fails closed everywhere else; here it
  // fails open. Expected (by the rest of the policy layer): deny. Actual: allow.
  it.skip('editor proposing an empty-string sensitivity is refused like any unknown level', () => {
    expect(outcome(decidePropose(human('editor'), page('eng/a.md', '')))).toEqual(forbid('Content at  is above your ceiling (confidential)'));
  });
});

describe('decideOnProposal: a signed-in editor or owner decides; a step-up origin needs the decider stepped up to accept', () => {
  const rows: { name: string; actor: Principal; input: { pr: ProposalFacts; action: 'accept' | 'reject' }; expected: Outcome }[] = [
    { name: 'owner accepts', actor: human('owner'), input: { pr: prop('eng/a.md', 'internal'), action: 'accept' }, expected: ALLOW },
    { name: 'owner rejects', actor: human('owner'), input: { pr: prop('eng/a.md', 'internal'), action: 'reject' }, expected: ALLOW },
    { name: 'editor accepts', actor: human('editor'), input: { pr: prop('eng/a.md', 'confidential'), action: 'accept' }, expected: ALLOW },
    { name: 'editor rejects', actor: human('editor'), input: { pr: prop('eng/a.md', 'internal'), action: 'reject' }, expected: ALLOW },
    {
      name: 'viewer may not accept',
      actor: human('viewer'),
      input: { pr: prop('eng/a.md', 'public'), action: 'accept' },
      expected: forbid('Only an editor or owner (signed in) decides on proposals'),
    },
    {
      name: 'viewer may not reject',
      actor: human('viewer'),
      input: { pr: prop('eng/a.md', 'public'), action: 'reject' },
      expected: forbid('Only an editor or owner (signed in) decides on proposals'),
    },
    {
      name: 'viewer who stepped up still may not accept',
      actor: human('viewer', { stepUpAt: ago(1000) }),
      input: { pr: prop('eng/a.md', 'public', 'step_up'), action: 'accept' },
      expected: forbid('Only an editor or owner (signed in) decides on proposals'),
    },
    {
      name: 'human without a role may not decide',
      actor: human(null),
      input: { pr: prop('eng/a.md', 'public'), action: 'reject' },
      expected: forbid('Only an editor or owner (signed in) decides on proposals'),
    },
    {
      name: 'agent with every grant may not accept',
      actor: agent([g('admin', '*', 'secret'), g('write', '*', 'secret'), g('propose', '*', 'secret')]),
      input: { pr: prop('eng/a.md', 'public'), action: 'accept' },
      expected: forbid('Only an editor or owner (signed in) decides on proposals'),
    },
    {
      name: 'elevated agent may not reject',
      actor: agent([g('read', '*', 'secret')], { elevatedUntil: FUTURE }),
      input: { pr: prop('eng/a.md', 'public'), action: 'reject' },
      expected: forbid('Only an editor or owner (signed in) decides on proposals'),
    },
    {
      name: 'agent that carries a role field is still an agent',
      actor: agent([], { role: 'owner' }),
      input: { pr: prop('eng/a.md', 'public'), action: 'accept' },
      expected: forbid('Only an editor or owner (signed in) decides on proposals'),
    },
    {
      name: 'owner without step-up may not accept a step_up proposal',
      actor: human('owner'),
      input: { pr: prop('eng/a.md', 'internal', 'step_up'), action: 'accept' },
      expected: forbid('This proposal passed a step-up gate: step up to accept it', 'step_up_required'),
    },
    {
      name: 'owner stepped up 1s ago accepts a step_up proposal',
      actor: human('owner', { stepUpAt: ago(1000) }),
      input: { pr: prop('eng/a.md', 'internal', 'step_up'), action: 'accept' },
      expected: ALLOW,
    },
    {
      name: 'owner stepped up this very moment accepts (age 0)',
      actor: human('owner', { stepUpAt: ago(0) }),
      input: { pr: prop('eng/a.md', 'internal', 'step_up'), action: 'accept' },
      expected: ALLOW,
    },
    {
      name: 'step-up 5 min minus 1 ms old is fresh',
      actor: human('editor', { stepUpAt: ago(FIVE_MIN - 1) }),
      input: { pr: prop('eng/a.md', 'internal', 'step_up'), action: 'accept' },
      expected: ALLOW,
    },
    {
      name: 'step-up exactly 5 min old is stale',
      actor: human('editor', { stepUpAt: ago(FIVE_MIN) }),
      input: { pr: prop('eng/a.md', 'internal', 'step_up'), action: 'accept' },
      expected: forbid('This proposal passed a step-up gate: step up to accept it', 'step_up_required'),
    },
    {
      name: 'step-up in the future does not count',
      actor: human('owner', { stepUpAt: ago(-1000) }),
      input: { pr: prop('eng/a.md', 'internal', 'step_up'), action: 'accept' },
      expected: forbid('This proposal passed a step-up gate: step up to accept it', 'step_up_required'),
    },
    {
      name: 'unparsable step-up time does not count',
      actor: human('owner', { stepUpAt: 'not a date' }),
      input: { pr: prop('eng/a.md', 'internal', 'step_up'), action: 'accept' },
      expected: forbid('This proposal passed a step-up gate: step up to accept it', 'step_up_required'),
    },
    {
      name: 'rejecting a step_up proposal needs no step-up',
      actor: human('editor'),
      input: { pr: prop('eng/a.md', 'internal', 'step_up'), action: 'reject' },
      expected: ALLOW,
    },
    {
      name: 'other origins need no step-up to accept',
      actor: human('editor'),
      input: { pr: prop('eng/a.md', 'internal', 'human'), action: 'accept' },
      expected: ALLOW,
    },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    expect(outcome(decideOnProposal(actor, input.pr, input.action, NOW))).toEqual(expected);
  });

  // LOOKS WRONG (in the pure function; the caller covers it): the doc comment says "a signed-in
  // editor or owner who can see the proposal", but decideOnProposal never checks visibility, so
  // an editor is allowed to accept a secret proposal that canSeeProposal hides from them. Today
  // core/proposals/service.ts loads the proposal through loadProposal → visibleTo (404) first,
  // so this is not reachable over HTTP/MCP; any new caller that forgets that gets a bypass.
  it.skip('editor may not accept a proposal they cannot see (secret)', () => {
    const pr = prop('eng/a.md', 'secret');
    expect(canSeeProposal(human('editor'), pr)).toBe(false);
    expect(outcome(decideOnProposal(human('editor'), pr, 'accept', NOW)).kind).toBe('deny');
  });
});

describe('decideWriteOrPropose', () => {
  const g = (action: Grant['action'], scope = '*', ceiling: Level = 'confidential'): Grant => ({ action, scope, ceiling });
  const page = (path: string, sensitivity: Level = 'internal', blockLevel: Level | null = null): PageFacts => ({ path, sensitivity, blockLevel });
  const content: ProposeRule = { proposers: 'agents', carriesContent: true };
  const archive: ProposeRule = { proposers: 'anyone', carriesContent: false };
  const rows: { name: string; p: Principal; current: PageFacts | null; next: PageFacts; rule: ProposeRule; want: 'allow' | 'deny' | 'propose' }[] = [
    { name: 'writer may write', p: agent([g('write'), g('propose')]), current: null, next: page('eng/a.md'), rule: content, want: 'allow' },
    {
      name: 'agent without write, with propose: propose',
      p: agent([g('read'), g('propose')]),
      current: null,
      next: page('eng/a.md'),
      rule: content,
      want: 'propose',
    },
    { name: 'agent without write or propose: deny', p: agent([g('read')]), current: null, next: page('eng/a.md'), rule: content, want: 'deny' },
    {
      name: 'propose grant elsewhere only: deny',
      p: agent([g('read'), g('propose', 'ops')]),
      current: null,
      next: page('eng/a.md'),
      rule: content,
      want: 'deny',
    },
    {
      name: 'propose on a sibling prefix does not cover: deny',
      p: agent([g('read'), g('propose', 'en')]),
      current: null,
      next: page('eng/a.md'),
      rule: content,
      want: 'deny',
    },
    {
      name: 'content above the propose ceiling: deny',
      p: agent([g('read'), g('propose', '*', 'internal')]),
      current: null,
      next: page('eng/a.md', 'confidential'),
      rule: content,
      want: 'deny',
    },
    {
      name: 'writer with content above its write ceiling is refused, not proposed',
      p: agent([g('write', '*', 'internal'), g('propose')]),
      current: null,
      next: page('eng/a.md', 'confidential'),
      rule: content,
      want: 'deny',
    },
    {
      name: 'write grant elsewhere, propose here: propose',
      p: agent([g('write', 'ops'), g('read'), g('propose')]),
      current: null,
      next: page('eng/a.md'),
      rule: content,
      want: 'propose',
    },
    {
      name: 'update of a page it reads whole: propose',
      p: agent([g('read'), g('propose')]),
      current: page('eng/a.md'),
      next: page('eng/a.md'),
      rule: content,
      want: 'propose',
    },
    {
      name: 'update of a page with a block above its read ceiling: deny',
      p: agent([g('read', '*', 'internal'), g('propose')]),
      current: page('eng/a.md', 'internal', 'secret'),
      next: page('eng/a.md'),
      rule: content,
      want: 'deny',
    },
    {
      name: 'archive of that page carries no text: propose',
      p: agent([g('read', '*', 'internal'), g('propose')]),
      current: page('eng/a.md', 'internal', 'confidential'),
      next: page('eng/a.md'),
      rule: archive,
      want: 'propose',
    },
    { name: 'human viewer, content rule (agents only): deny', p: human('viewer'), current: null, next: page('eng/a.md'), rule: content, want: 'deny' },
    {
      name: 'human viewer, archive rule (anyone): propose',
      p: human('viewer'),
      current: page('eng/a.md'),
      next: page('eng/a.md'),
      rule: archive,
      want: 'propose',
    },
    { name: 'human editor writes', p: human('editor'), current: page('eng/a.md'), next: page('eng/a.md'), rule: content, want: 'allow' },
  ];
  it.each(rows)('$name', ({ p, current, next, rule, want }) => {
    const d = decideWriteOrPropose(p, current, next, rule);
    expect(d.kind).toBe(want);
    if (d.kind === 'deny') expect(d.error).toBeInstanceOf(ServiceError);
    if (d.kind === 'propose') expect(d.origin).toBe('no_write');
  });
});
