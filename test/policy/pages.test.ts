import { describe, expect, it } from 'vitest';
import {
  blockVisibility,
  canDiff,
  canReadInFull,
  canReadPage,
  decideDelete,
  decideMove,
  decideWrite,
  enforce,
  stepUpNeeded,
  widensAudience,
  type Decision,
  type PageFacts,
} from '../../src/policy/pages.js';
import type { Principal } from '../../src/policy/principal.js';
import { LEVELS, type Level } from '../../src/policy/sensitivity.js';
import { NOW, ago, FIVE_MIN, FUTURE, PAST, human, agent, g, outcome, ALLOW, forbid, type Outcome } from './support.js';

/**
 * Table-driven test of src/policy/pages.ts (issue 12). test/policy/access.test.ts touches a few
 * of these through ceilingFor; this file covers every export and branch. Pure; ceilingFor
 * reads the clock for elevations (far future / past here); step-up rows pass a pinned `now`.
 */

const page = (path: string, sensitivity: string, blockLevel: string | null = null): PageFacts => ({ path, sensitivity, blockLevel });
const FRESH = { stepUpAt: ago(60_000) };
const stepUp = (what: string) => forbid(`${what} needs a step-up within the last 5 minutes (POST /api/auth/stepup)`, 'step_up_required');

describe('stepUpNeeded: the +U gate', () => {
  it('is a 403 step_up_required naming the act and the route', () => {
    expect(outcome(stepUpNeeded('Doing a thing'))).toEqual(
      forbid('Doing a thing needs a step-up within the last 5 minutes (POST /api/auth/stepup)', 'step_up_required'),
    );
  });
});

describe('canReadPage: at or below the read ceiling for the path', () => {
  const rows: { name: string; actor: Principal; input: PageFacts; expected: boolean }[] = [
    { name: 'owner reads secret', actor: human('owner'), input: page('eng/a.md', 'secret'), expected: true },
    { name: 'editor reads confidential (equal)', actor: human('editor'), input: page('eng/a.md', 'confidential'), expected: true },
    { name: 'editor does not read secret', actor: human('editor'), input: page('eng/a.md', 'secret'), expected: false },
    { name: 'viewer reads internal (equal)', actor: human('viewer'), input: page('eng/a.md', 'internal'), expected: true },
    { name: 'viewer does not read confidential', actor: human('viewer'), input: page('eng/a.md', 'confidential'), expected: false },
    {
      name: 'viewer reads an internal page with a secret block (blocks are redacted, not hidden)',
      actor: human('viewer'),
      input: page('eng/a.md', 'internal', 'secret'),
      expected: true,
    },
    { name: 'human without a role reads nothing', actor: human(null), input: page('eng/a.md', 'public'), expected: false },
    { name: 'owner reads an unknown level (as secret)', actor: human('owner'), input: page('eng/a.md', 'bogus'), expected: true },
    { name: 'editor does not read an unknown level (as secret)', actor: human('editor'), input: page('eng/a.md', 'bogus'), expected: false },
    { name: 'editor does not read an empty level (as secret)', actor: human('editor'), input: page('eng/a.md', ''), expected: false },
    { name: 'agent read eng reads eng/a.md', actor: agent([g('read', 'eng', 'internal')]), input: page('eng/a.md', 'internal'), expected: true },
    {
      name: 'agent read eng does not read engineering/a.md',
      actor: agent([g('read', 'eng', 'internal')]),
      input: page('engineering/a.md', 'public'),
      expected: false,
    },
    { name: 'agent read * reads anywhere', actor: agent([g('read', '*', 'public')]), input: page('x/y/z.md', 'public'), expected: true },
    { name: 'agent with search but no read', actor: agent([g('search', '*', 'secret')]), input: page('eng/a.md', 'public'), expected: false },
    { name: 'agent secret read grant, not elevated: no secret', actor: agent([g('read', '*', 'secret')]), input: page('eng/a.md', 'secret'), expected: false },
    {
      name: 'elevated agent reads secret within its read grant',
      actor: agent([g('read', 'eng', 'public')], { elevatedUntil: FUTURE }),
      input: page('eng/a.md', 'secret'),
      expected: true,
    },
    {
      name: 'elevated agent capped by its key',
      actor: agent([g('read', 'eng', 'secret')], { elevatedUntil: FUTURE, keyCeiling: 'confidential' }),
      input: page('eng/a.md', 'secret'),
      expected: false,
    },
    { name: 'agent whose creator left', actor: agent([g('read', '*', 'internal')], { creatorRole: null }), input: page('eng/a.md', 'public'), expected: false },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    expect(canReadPage(actor, input)).toBe(expected);
  });
});

describe('canReadInFull: the page and every block at or below the read ceiling', () => {
  const rows: { name: string; actor: Principal; input: PageFacts; expected: boolean }[] = [
    { name: 'owner, secret page, secret block', actor: human('owner'), input: page('eng/a.md', 'secret', 'secret'), expected: true },
    { name: 'editor, confidential page, no block', actor: human('editor'), input: page('eng/a.md', 'confidential'), expected: true },
    { name: 'editor, confidential block (equal)', actor: human('editor'), input: page('eng/a.md', 'internal', 'confidential'), expected: true },
    { name: 'editor, secret block', actor: human('editor'), input: page('eng/a.md', 'internal', 'secret'), expected: false },
    { name: 'editor, unreadable page', actor: human('editor'), input: page('eng/a.md', 'secret'), expected: false },
    { name: 'owner, unknown block level', actor: human('owner'), input: page('eng/a.md', 'public', 'bogus'), expected: false },
    { name: 'owner, empty block level', actor: human('owner'), input: page('eng/a.md', 'public', ''), expected: false },
    {
      name: 'agent read eng@confidential, confidential block',
      actor: agent([g('read', 'eng', 'confidential')]),
      input: page('eng/a.md', 'public', 'confidential'),
      expected: true,
    },
    {
      name: 'agent read eng@internal, confidential block',
      actor: agent([g('read', 'eng', 'internal')]),
      input: page('eng/a.md', 'public', 'confidential'),
      expected: false,
    },
    {
      name: 'elevated agent, secret block',
      actor: agent([g('read', 'eng', 'internal')], { elevatedUntil: FUTURE }),
      input: page('eng/a.md', 'internal', 'secret'),
      expected: true,
    },
    { name: 'agent, page outside its grants', actor: agent([g('read', 'eng', 'secret')]), input: page('hr/a.md', 'public'), expected: false },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    expect(canReadInFull(actor, input)).toBe(expected);
  });
});

describe('blockVisibility: which block levels show under the read ceiling for the path', () => {
  const rows: { name: string; actor: Principal; input: string; expected: Level[] }[] = [
    { name: 'owner sees every block', actor: human('owner'), input: 'eng/a.md', expected: ['public', 'internal', 'confidential', 'secret'] },
    { name: 'editor up to confidential', actor: human('editor'), input: 'eng/a.md', expected: ['public', 'internal', 'confidential'] },
    { name: 'viewer up to internal', actor: human('viewer'), input: 'eng/a.md', expected: ['public', 'internal'] },
    { name: 'human without a role: public only', actor: human(null), input: 'eng/a.md', expected: ['public'] },
    { name: 'agent read eng@internal on eng', actor: agent([g('read', 'eng', 'internal')]), input: 'eng/a.md', expected: ['public', 'internal'] },
    {
      name: 'agent read eng on the sibling engineering: public only',
      actor: agent([g('read', 'eng', 'internal')]),
      input: 'engineering/a.md',
      expected: ['public'],
    },
    {
      name: 'agent secret grant not elevated: up to confidential',
      actor: agent([g('read', '*', 'secret')]),
      input: 'eng/a.md',
      expected: ['public', 'internal', 'confidential'],
    },
    {
      name: 'elevated agent: every block',
      actor: agent([g('read', '*', 'public')], { elevatedUntil: FUTURE }),
      input: 'eng/a.md',
      expected: ['public', 'internal', 'confidential', 'secret'],
    },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    const visible = blockVisibility(actor, input);
    expect(LEVELS.filter((l) => visible(l))).toEqual(expected);
  });
});

describe('decideWrite: write over the path, at or above what it writes and what it replaces', () => {
  const UNSEEN = forbid('The page holds content above your ceiling; you cannot overwrite what you cannot see');
  const rows: { name: string; actor: Principal; input: { current: PageFacts | null; next: PageFacts }; expected: Outcome }[] = [
    { name: 'owner creates secret', actor: human('owner'), input: { current: null, next: page('eng/a.md', 'secret') }, expected: ALLOW },
    { name: 'editor creates confidential (equal)', actor: human('editor'), input: { current: null, next: page('eng/a.md', 'confidential') }, expected: ALLOW },
    {
      name: 'editor may not create secret',
      actor: human('editor'),
      input: { current: null, next: page('eng/a.md', 'secret') },
      expected: forbid('Sensitivity secret is above your ceiling (confidential)'),
    },
    {
      name: 'editor may not write a secret block',
      actor: human('editor'),
      input: { current: null, next: page('eng/a.md', 'internal', 'secret') },
      expected: forbid('A ::: secret block is above your ceiling (confidential)'),
    },
    {
      name: 'editor writes a confidential block (equal)',
      actor: human('editor'),
      input: { current: null, next: page('eng/a.md', 'internal', 'confidential') },
      expected: ALLOW,
    },
    {
      name: 'editor may not write an unknown level (as secret)',
      actor: human('editor'),
      input: { current: null, next: page('eng/a.md', 'bogus') },
      expected: forbid('Sensitivity bogus is above your ceiling (confidential)'),
    },
    { name: 'owner writes an unknown level (as secret)', actor: human('owner'), input: { current: null, next: page('eng/a.md', 'bogus') }, expected: ALLOW },
    {
      name: 'viewer may not write',
      actor: human('viewer'),
      input: { current: null, next: page('eng/a.md', 'public') },
      expected: forbid('No write grant covers eng/a.md'),
    },
    {
      name: 'human without a role may not write',
      actor: human(null),
      input: { current: null, next: page('eng/a.md', 'public') },
      expected: forbid('No write grant covers eng/a.md'),
    },
    {
      name: 'editor overwrites a confidential page',
      actor: human('editor'),
      input: { current: page('eng/a.md', 'confidential'), next: page('eng/a.md', 'internal') },
      expected: ALLOW,
    },
    {
      name: 'editor may not overwrite a secret page',
      actor: human('editor'),
      input: { current: page('eng/a.md', 'secret'), next: page('eng/a.md', 'internal') },
      expected: UNSEEN,
    },
    {
      name: 'editor may not overwrite a page holding a secret block',
      actor: human('editor'),
      input: { current: page('eng/a.md', 'internal', 'secret'), next: page('eng/a.md', 'internal') },
      expected: UNSEEN,
    },
    {
      name: 'editor may not overwrite an unknown-level page (as secret)',
      actor: human('editor'),
      input: { current: page('eng/a.md', 'bogus'), next: page('eng/a.md', 'internal') },
      expected: UNSEEN,
    },
    {
      name: 'agent write eng@confidential creates eng/a.md',
      actor: agent([g('write', 'eng', 'confidential')]),
      input: { current: null, next: page('eng/a.md', 'confidential') },
      expected: ALLOW,
    },
    {
      // Issue 13 attack: it read the page with the block as [redacted]; writing that back would erase it.
      name: 'agent reading eng@internal, writing eng@confidential, may not overwrite a confidential block',
      actor: agent([g('read', 'eng', 'internal'), g('write', 'eng', 'confidential')]),
      input: { current: page('eng/a.md', 'internal', 'confidential'), next: page('eng/a.md', 'internal') },
      expected: UNSEEN,
    },
    {
      name: 'agent reading and writing eng@confidential overwrites a confidential block',
      actor: agent([g('read', 'eng', 'confidential'), g('write', 'eng', 'confidential')]),
      input: { current: page('eng/a.md', 'internal', 'confidential'), next: page('eng/a.md', 'internal') },
      expected: ALLOW,
    },
    {
      name: 'agent write eng does not cover engineering/a.md',
      actor: agent([g('write', 'eng', 'confidential')]),
      input: { current: null, next: page('engineering/a.md', 'public') },
      expected: forbid('No write grant covers engineering/a.md'),
    },
    {
      name: 'agent write eng moves eng/a.md to eng/b.md',
      actor: agent([g('write', 'eng', 'internal')]),
      input: { current: page('eng/a.md', 'internal'), next: page('eng/b.md', 'internal') },
      expected: ALLOW,
    },
    {
      name: 'agent write eng may not move hr/a.md in',
      actor: agent([g('write', 'eng', 'internal')]),
      input: { current: page('hr/a.md', 'public'), next: page('eng/a.md', 'public') },
      expected: forbid('No write grant covers hr/a.md'),
    },
    {
      name: 'agent moves hr (confidential grant) to eng (internal grant)',
      actor: agent([g('write', 'eng', 'internal'), g('write', 'hr', 'confidential')]),
      input: { current: page('hr/a.md', 'confidential'), next: page('eng/a.md', 'internal') },
      expected: ALLOW,
    },
    {
      name: 'agent may not move a page above its grant at the old path',
      actor: agent([g('write', 'eng', 'internal'), g('write', 'hr', 'public')]),
      input: { current: page('hr/a.md', 'internal'), next: page('eng/a.md', 'internal') },
      expected: UNSEEN,
    },
    {
      name: 'agent with read but no write',
      actor: agent([g('read', '*', 'secret')]),
      input: { current: null, next: page('eng/a.md', 'public') },
      expected: forbid('No write grant covers eng/a.md'),
    },
    {
      name: 'agent secret write grant, not elevated, capped at confidential',
      actor: agent([g('write', '*', 'secret')]),
      input: { current: null, next: page('eng/a.md', 'secret') },
      expected: forbid('Sensitivity secret is above your ceiling (confidential)'),
    },
    {
      name: 'elevated agent with a secret write grant writes secret',
      actor: agent([g('write', '*', 'secret')], { elevatedUntil: FUTURE }),
      input: { current: null, next: page('eng/a.md', 'secret') },
      expected: ALLOW,
    },
    {
      name: 'agent whose creator is a viewer may not write',
      actor: agent([g('write', '*', 'internal')], { creatorRole: 'viewer' }),
      input: { current: null, next: page('eng/a.md', 'public') },
      expected: forbid('No write grant covers eng/a.md'),
    },
    {
      name: 'agent whose creator is an editor is capped at confidential',
      actor: agent([g('write', '*', 'secret')], { creatorRole: 'editor', elevatedUntil: FUTURE }),
      input: { current: null, next: page('eng/a.md', 'secret') },
      expected: forbid('Sensitivity secret is above your ceiling (confidential)'),
    },
    {
      name: 'agent key ceiling internal',
      actor: agent([g('write', '*', 'confidential')], { keyCeiling: 'internal' }),
      input: { current: null, next: page('eng/a.md', 'confidential') },
      expected: forbid('Sensitivity confidential is above your ceiling (internal)'),
    },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    expect(outcome(decideWrite(actor, input.current, input.next))).toEqual(expected);
  });

  // LOOKS WRONG (fails open on an unknown block level): decideWrite checks the new block level
  // only when it parses (`nextBlock && …`), so a block level that is not a level is written by
  // an editor, whereas an unknown *sensitivity* reads as secret here, canReadInFull refuses an
  // unknown block level, and decidePropose refuses it. Same gap for `current.blockLevel` and in
  // decideDelete (row below). Not reachable while the markdown parser only yields real levels.
  it.skip('editor may not write a page whose block level is not a level', () => {
    expect(outcome(decideWrite(human('editor'), null, page('eng/a.md', 'internal', 'bogus'))).kind).toBe('deny');
  });
});

describe('decideDelete: humans need write and a fresh step-up; agents need admin', () => {
  const rows: { name: string; actor: Principal; input: PageFacts; expected: Outcome }[] = [
    { name: 'owner stepped up deletes secret', actor: human('owner', FRESH), input: page('eng/a.md', 'secret'), expected: ALLOW },
    { name: 'owner without step-up', actor: human('owner'), input: page('eng/a.md', 'public'), expected: stepUp('Deleting a page') },
    {
      name: 'owner stepped up exactly 5 min ago',
      actor: human('owner', { stepUpAt: ago(FIVE_MIN) }),
      input: page('eng/a.md', 'public'),
      expected: stepUp('Deleting a page'),
    },
    {
      name: 'owner stepped up 5 min minus 1 ms ago',
      actor: human('owner', { stepUpAt: ago(FIVE_MIN - 1) }),
      input: page('eng/a.md', 'public'),
      expected: ALLOW,
    },
    { name: 'editor stepped up deletes confidential (equal)', actor: human('editor', FRESH), input: page('eng/a.md', 'confidential'), expected: ALLOW },
    {
      name: 'editor stepped up may not delete secret',
      actor: human('editor', FRESH),
      input: page('eng/a.md', 'secret'),
      expected: forbid('The page holds content above your ceiling'),
    },
    {
      name: 'editor stepped up may not delete a page with a secret block',
      actor: human('editor', FRESH),
      input: page('eng/a.md', 'internal', 'secret'),
      expected: forbid('The page holds content above your ceiling'),
    },
    {
      name: 'editor stepped up may not delete an unknown level (as secret)',
      actor: human('editor', FRESH),
      input: page('eng/a.md', 'bogus'),
      expected: forbid('The page holds content above your ceiling'),
    },
    {
      name: 'viewer stepped up may not delete',
      actor: human('viewer', FRESH),
      input: page('eng/a.md', 'public'),
      expected: forbid('Deleting needs write access (editor or owner)'),
    },
    {
      name: 'viewer without step-up: write is checked first',
      actor: human('viewer'),
      input: page('eng/a.md', 'public'),
      expected: forbid('Deleting needs write access (editor or owner)'),
    },
    {
      name: 'human without a role',
      actor: human(null, FRESH),
      input: page('eng/a.md', 'public'),
      expected: forbid('Deleting needs write access (editor or owner)'),
    },
    {
      name: 'agent admin eng@internal deletes without step-up',
      actor: agent([g('admin', 'eng', 'internal')]),
      input: page('eng/a.md', 'internal'),
      expected: ALLOW,
    },
    {
      name: 'agent admin eng@internal may not delete confidential',
      actor: agent([g('admin', 'eng', 'internal')]),
      input: page('eng/a.md', 'confidential'),
      expected: forbid('The page holds content above your ceiling'),
    },
    {
      name: 'agent admin eng@internal may not delete a confidential block',
      actor: agent([g('admin', 'eng', 'internal')]),
      input: page('eng/a.md', 'public', 'confidential'),
      expected: forbid('The page holds content above your ceiling'),
    },
    {
      name: 'agent admin eng does not cover engineering/a.md',
      actor: agent([g('admin', 'eng', 'internal')]),
      input: page('engineering/a.md', 'public'),
      expected: forbid('No admin grant covers engineering/a.md'),
    },
    { name: 'agent admin * covers anywhere', actor: agent([g('admin', '*', 'internal')]), input: page('hr/x/a.md', 'public'), expected: ALLOW },
    {
      name: 'agent with write but no admin',
      actor: agent([g('write', '*', 'secret')]),
      input: page('eng/a.md', 'public'),
      expected: forbid('No admin grant covers eng/a.md'),
    },
    {
      name: 'agent whose creator is an editor has no admin',
      actor: agent([g('admin', '*', 'internal')], { creatorRole: 'editor' }),
      input: page('eng/a.md', 'public'),
      expected: forbid('No admin grant covers eng/a.md'),
    },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    expect(outcome(decideDelete(actor, input, NOW))).toEqual(expected);
  });

  // LOOKS WRONG: same fail-open as decideWrite above — an unknown block level is skipped.
  it.skip('editor may not delete a page whose block level is not a level', () => {
    expect(outcome(decideDelete(human('editor', FRESH), page('eng/a.md', 'internal', 'bogus'), NOW)).kind).toBe('deny');
  });
});

describe('canDiff: secret-level read on the path', () => {
  const rows: { name: string; actor: Principal; input: string; expected: boolean }[] = [
    { name: 'owner', actor: human('owner'), input: 'eng/a.md', expected: true },
    { name: 'owner behind a confidential key', actor: human('owner', { keyCeiling: 'confidential' }), input: 'eng/a.md', expected: false },
    { name: 'editor', actor: human('editor'), input: 'eng/a.md', expected: false },
    { name: 'viewer', actor: human('viewer'), input: 'eng/a.md', expected: false },
    { name: 'agent with a secret read grant, not elevated', actor: agent([g('read', '*', 'secret')]), input: 'eng/a.md', expected: false },
    { name: 'elevated agent within its read grant', actor: agent([g('read', 'eng', 'public')], { elevatedUntil: FUTURE }), input: 'eng/a.md', expected: true },
    {
      name: 'elevated agent on the sibling engineering',
      actor: agent([g('read', 'eng', 'public')], { elevatedUntil: FUTURE }),
      input: 'engineering/a.md',
      expected: false,
    },
    { name: 'agent whose elevation ended', actor: agent([g('read', 'eng', 'secret')], { elevatedUntil: PAST }), input: 'eng/a.md', expected: false },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    expect(canDiff(actor, input)).toBe(expected);
  });
});

describe('enforce: throws the decision error', () => {
  it('returns on allow', () => {
    expect(() => enforce(ALLOW as Decision)).not.toThrow();
  });
  it('throws the very error of a deny', () => {
    const d = stepUpNeeded('X');
    expect(d.kind).toBe('deny');
    if (d.kind === 'deny') expect(() => enforce(d)).toThrow(d.error);
  });
});

describe('widensAudience: some read scope covers the new path but not the old one', () => {
  const rows: { name: string; input: { scopes: string[]; from: string; to: string }; expected: boolean }[] = [
    { name: 'no agent read grants', input: { scopes: [], from: 'hr/a.md', to: 'eng/a.md' }, expected: false },
    { name: 'within one scope', input: { scopes: ['eng'], from: 'eng/a.md', to: 'eng/b.md' }, expected: false },
    { name: 'into a scope', input: { scopes: ['eng'], from: 'hr/a.md', to: 'eng/a.md' }, expected: true },
    { name: 'out of a scope (narrows)', input: { scopes: ['eng'], from: 'eng/a.md', to: 'hr/a.md' }, expected: false },
    { name: 'a * grant covers both', input: { scopes: ['*'], from: 'hr/a.md', to: 'eng/a.md' }, expected: false },
    { name: 'from the sibling engineering into eng', input: { scopes: ['eng'], from: 'engineering/a.md', to: 'eng/a.md' }, expected: true },
    { name: 'from eng to the sibling engineering', input: { scopes: ['eng'], from: 'eng/a.md', to: 'engineering/a.md' }, expected: false },
    { name: 'into a folder scope from its space', input: { scopes: ['eng/ops'], from: 'eng/a.md', to: 'eng/ops/a.md' }, expected: true },
    { name: 'two scopes, one widens', input: { scopes: ['hr', 'eng'], from: 'hr/a.md', to: 'eng/a.md' }, expected: true },
  ];
  it.each(rows)('$name', ({ input, expected }) => {
    expect(widensAudience(input.scopes, input.from, input.to)).toBe(expected);
  });
});

describe('decideMove: a widening move needs a human step-up', () => {
  const MOVE = stepUp('Moving a page where more agents can read it');
  const rows: { name: string; actor: Principal; input: boolean; expected: Outcome }[] = [
    { name: 'owner, not widening, no step-up', actor: human('owner'), input: false, expected: ALLOW },
    { name: 'agent, not widening', actor: agent([]), input: false, expected: ALLOW },
    { name: 'owner widening, stepped up', actor: human('owner', FRESH), input: true, expected: ALLOW },
    { name: 'viewer widening, stepped up (write is judged elsewhere)', actor: human('viewer', FRESH), input: true, expected: ALLOW },
    { name: 'owner widening, no step-up', actor: human('owner'), input: true, expected: MOVE },
    { name: 'editor widening, step-up exactly 5 min old', actor: human('editor', { stepUpAt: ago(FIVE_MIN) }), input: true, expected: MOVE },
    { name: 'agent widening', actor: agent([g('write', '*', 'secret')]), input: true, expected: MOVE },
    {
      name: 'elevated agent widening with a stepUpAt',
      actor: agent([g('write', '*', 'secret')], { elevatedUntil: FUTURE, stepUpAt: ago(1000) }),
      input: true,
      expected: MOVE,
    },
  ];
  it.each(rows)('$name', ({ actor, input, expected }) => {
    expect(outcome(decideMove(actor, input, NOW))).toEqual(expected);
  });
});
