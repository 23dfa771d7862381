import { describe, expect, it } from 'vitest';
import { decideFolderArchive, decideFolderSettings } from '../../src/policy/folders.js';
import type { Principal } from '../../src/policy/principal.js';
import { NOW, ago, FIVE_MIN, FUTURE, human, agent, g, outcome, ALLOW, forbid, type Outcome } from './support.js';

/**
 * Table-driven test of src/policy/clusters.ts (issue 12): the folder-archive gate. Humans
 * need a step-up in the last five minutes; agents pass this gate, and every page is then
 * decided on its own by the core (decideWrite, or a proposal) — not tested here.
 */

const STEP_UP = forbid('Archiving a folder needs a step-up within the last 5 minutes (POST /api/auth/stepup)', 'step_up_required');

describe('decideFolderArchive: humans step up; agents pass to the per-page decisions', () => {
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
    expect(outcome(decideFolderArchive(actor, NOW))).toEqual(expected);
  });
});

const NO_ADMIN = (path: string) => forbid(`No admin grant covers ${path}: folder settings are for owners`);

describe('decideFolderSettings: the admin action over the folder (owners; agents with an admin grant there)', () => {
  const rows: { name: string; actor: Principal; path: string; expected: Outcome }[] = [
    { name: 'owner', actor: human('owner'), path: 'eng/legacy', expected: ALLOW },
    { name: 'owner needs no step-up', actor: human('owner', { stepUpAt: null }), path: 'eng/legacy/deep', expected: ALLOW },
    { name: 'editor', actor: human('editor', { stepUpAt: ago(1000) }), path: 'eng/legacy', expected: NO_ADMIN('eng/legacy') },
    { name: 'viewer', actor: human('viewer'), path: 'eng/legacy', expected: NO_ADMIN('eng/legacy') },
    { name: 'human without a role', actor: human(null), path: 'eng/legacy', expected: NO_ADMIN('eng/legacy') },
    { name: 'agent with admin over the workspace', actor: agent([g('admin', '*', 'internal')]), path: 'eng/legacy', expected: ALLOW },
    { name: 'agent with admin over the Space', actor: agent([g('admin', 'eng', 'public')]), path: 'eng/legacy', expected: ALLOW },
    {
      name: 'agent with admin over a sibling folder',
      actor: agent([g('admin', 'eng/legacyx', 'internal')]),
      path: 'eng/legacy',
      expected: NO_ADMIN('eng/legacy'),
    },
    {
      name: 'agent with admin over a sub-folder only',
      actor: agent([g('admin', 'eng/legacy/sub', 'internal')]),
      path: 'eng/legacy',
      expected: NO_ADMIN('eng/legacy'),
    },
    {
      name: 'agent with every other grant',
      actor: agent([g('read', '*', 'internal'), g('write', '*', 'internal'), g('propose', '*', 'internal')]),
      path: 'eng/legacy',
      expected: NO_ADMIN('eng/legacy'),
    },
    {
      name: 'agent whose creator is an editor (no admin in that role)',
      actor: agent([g('admin', '*', 'internal')], { creatorRole: 'editor' }),
      path: 'eng/legacy',
      expected: NO_ADMIN('eng/legacy'),
    },
    {
      name: 'agent whose creator left',
      actor: agent([g('admin', '*', 'internal')], { creatorRole: null }),
      path: 'eng/legacy',
      expected: NO_ADMIN('eng/legacy'),
    },
  ];
  it.each(rows)('$name', ({ actor, path, expected }) => {
    expect(outcome(decideFolderSettings(actor, path))).toEqual(expected);
  });
});
