import { describe, expect, it } from 'vitest';
import { baseCeiling, canGrant, canManageAgent, ceilingFor, scopeCovers } from '../../src/policy/access.js';
import { canDiff, canReadPage, decideDelete, decideWrite } from '../../src/policy/pages.js';
import type { Grant, Principal, Role } from '../../src/policy/principal.js';
import { LEVELS, type Level } from '../../src/policy/sensitivity.js';
import { agent as agentOf, human } from './support.js';

const agent = (grants: Grant[], agentCeiling: Level = 'secret', keyCeiling: Level | null = null, elevatedUntil: string | null = null): Principal =>
  agentOf(grants, { agentCeiling, keyCeiling, elevatedUntil });

const page = (path: string, sensitivity: Level, blockLevel: Level | null = null) => ({ path, sensitivity, blockLevel });

describe('role ceilings and actions (humans)', () => {
  const table: [Role, Level, string[]][] = [
    ['owner', 'secret', ['read', 'write', 'admin', 'search', 'propose', 'collab']],
    ['editor', 'confidential', ['read', 'write', 'search', 'propose', 'collab']],
    ['viewer', 'internal', ['read', 'search', 'propose', 'collab']],
  ];
  it.each(table)('%s reads up to %s and may %j', (role, ceiling, actions) => {
    const p = human(role);
    for (const a of ['read', 'write', 'admin', 'search', 'propose', 'collab'] as const) {
      expect(ceilingFor(p, a, 'eng/x.md'), `${role} ${a}`).toBe(actions.includes(a) ? ceiling : null);
    }
    for (const level of LEVELS) {
      expect(canReadPage(p, page('eng/x.md', level)), `${role} reads ${level}`).toBe(LEVELS.indexOf(level) <= LEVELS.indexOf(ceiling));
    }
    expect(baseCeiling(p)).toBe(ceiling);
  });

  it('deletes need write and a fresh step-up; only owners diff', () => {
    const fresh = new Date(Date.now() - 60_000).toISOString();
    const stale = new Date(Date.now() - 6 * 60_000).toISOString();
    expect(decideDelete({ ...human('owner'), stepUpAt: fresh }, page('a/b.md', 'secret')).kind).toBe('allow');
    expect(decideDelete({ ...human('editor'), stepUpAt: fresh }, page('a/b.md', 'confidential')).kind).toBe('allow');
    expect(decideDelete({ ...human('editor'), stepUpAt: fresh }, page('a/b.md', 'secret')).kind).toBe('deny');
    const noStep = decideDelete(human('owner'), page('a/b.md', 'public'));
    expect(noStep.kind === 'deny' && noStep.error.code).toBe('step_up_required');
    expect(decideDelete({ ...human('owner'), stepUpAt: stale }, page('a/b.md', 'public')).kind).toBe('deny');
    expect(decideDelete({ ...human('viewer'), stepUpAt: fresh }, page('a/b.md', 'public')).kind).toBe('deny');
    expect(canDiff(human('owner'), 'a/b.md')).toBe(true);
    expect(canDiff(human('editor'), 'a/b.md')).toBe(false);
  });
});

describe('grants (agents)', () => {
  it('matches scopes by path segment, not by string prefix', () => {
    expect(scopeCovers('*', 'any/thing.md')).toBe(true);
    expect(scopeCovers('eng', 'eng/a.md')).toBe(true);
    expect(scopeCovers('eng', 'engineering/a.md')).toBe(false);
    expect(scopeCovers('eng/ops', 'eng/ops/x/y.md')).toBe(true);
    expect(scopeCovers('eng/ops', 'eng/opsx/y.md')).toBe(false);
  });

  it('takes the best matching grant, capped by agent and key ceilings and by confidential without elevation', () => {
    const grants: Grant[] = [
      { action: 'read', scope: '*', ceiling: 'internal' },
      { action: 'read', scope: 'eng', ceiling: 'secret' },
    ];
    expect(ceilingFor(agent(grants), 'read', 'hr/a.md')).toBe('internal');
    expect(ceilingFor(agent(grants), 'read', 'eng/a.md')).toBe('confidential');
    expect(ceilingFor(agent(grants, 'internal'), 'read', 'eng/a.md')).toBe('internal');
    expect(ceilingFor(agent(grants, 'secret', 'public'), 'read', 'eng/a.md')).toBe('public');
    expect(ceilingFor(agent(grants), 'write', 'eng/a.md')).toBeNull();
    const future = new Date(Date.now() + 60_000).toISOString();
    const past = new Date(Date.now() - 1).toISOString();
    expect(ceilingFor(agent(grants, 'secret', null, future), 'read', 'eng/a.md')).toBe('secret');
    expect(ceilingFor(agent(grants, 'secret', null, past), 'read', 'eng/a.md')).toBe('confidential');
  });

  it('never lets a human grant above their role', () => {
    const cases: [Role, Grant, boolean][] = [
      ['owner', { action: 'admin', scope: '*', ceiling: 'secret' }, true],
      ['editor', { action: 'write', scope: '*', ceiling: 'confidential' }, true],
      ['editor', { action: 'write', scope: '*', ceiling: 'secret' }, false],
      ['editor', { action: 'admin', scope: '*', ceiling: 'public' }, false],
      ['viewer', { action: 'read', scope: '*', ceiling: 'internal' }, true],
      ['viewer', { action: 'read', scope: '*', ceiling: 'confidential' }, false],
      ['viewer', { action: 'write', scope: 'eng', ceiling: 'public' }, false],
    ];
    for (const [role, g, ok] of cases) expect(canGrant(role, g), `${role} ${JSON.stringify(g)}`).toBe(ok);
  });

  it('lets only the creator or an owner manage an agent', () => {
    const a = { createdBy: 'pr_editor', workspaceId: 'ws_1' };
    expect(canManageAgent(human('editor'), a)).toBe(true);
    expect(canManageAgent(human('owner'), a)).toBe(true);
    expect(canManageAgent(human('viewer'), a)).toBe(false);
    expect(canManageAgent(human('owner'), { ...a, workspaceId: 'ws_2' })).toBe(false);
    expect(canManageAgent(agent([]), { createdBy: 'pr_agent', workspaceId: 'ws_1' })).toBe(false);
  });
});

describe('write decisions', () => {
  const writer = agent([{ action: 'write', scope: 'eng', ceiling: 'confidential' }]);
  it('allows within scope and ceiling', () => {
    expect(decideWrite(writer, null, page('eng/a.md', 'confidential')).kind).toBe('allow');
  });
  it('denies out of scope, above ceiling, blocks above ceiling, and overwriting unseen content', () => {
    expect(decideWrite(writer, null, page('hr/a.md', 'public')).kind).toBe('deny');
    expect(decideWrite(writer, null, page('eng/a.md', 'secret')).kind).toBe('deny');
    expect(decideWrite(writer, null, page('eng/a.md', 'internal', 'secret')).kind).toBe('deny');
    expect(decideWrite(writer, page('eng/a.md', 'internal', 'secret'), page('eng/a.md', 'internal')).kind).toBe('deny');
    expect(decideWrite(writer, page('hr/a.md', 'internal'), page('eng/a.md', 'internal')).kind).toBe('deny');
  });
  it('lets an agent delete only with admin over the path', () => {
    expect(decideDelete(writer, page('eng/a.md', 'public')).kind).toBe('deny');
    const admin = agent([{ action: 'admin', scope: 'eng', ceiling: 'internal' }]);
    expect(decideDelete(admin, page('eng/a.md', 'internal')).kind).toBe('allow');
    expect(decideDelete(admin, page('eng/a.md', 'confidential')).kind).toBe('deny');
    expect(decideDelete(admin, page('hr/a.md', 'public')).kind).toBe('deny');
  });
});
