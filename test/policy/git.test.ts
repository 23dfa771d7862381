import { describe, expect, it } from 'vitest';
import { hasStepUp } from '../../src/policy/access.js';
import { decideGitFetch, decideGitPush } from '../../src/policy/git.js';
import { decideDelete, decideMove } from '../../src/policy/pages.js';
import type { Principal } from '../../src/policy/principal.js';
import { agent, FUTURE, g, human, NOW } from './support.js';

/**
 * Table-driven test of src/policy/git.ts (issue 15): a clone holds every page with its history,
 * so fetching needs read at secret over the whole workspace; pushing also needs write and admin.
 * In today's roles both are a workspace owner's.
 */

const rows: { name: string; actor: Principal; fetch: boolean; push: boolean }[] = [
  { name: 'owner', actor: human('owner', { via: 'git' }), fetch: true, push: true },
  { name: 'editor (reads up to confidential)', actor: human('editor', { via: 'git' }), fetch: false, push: false },
  { name: 'viewer', actor: human('viewer', { via: 'git' }), fetch: false, push: false },
  { name: 'human without a role (left the workspace)', actor: human(null, { via: 'git' }), fetch: false, push: false },
  { name: 'owner through a key capped at confidential', actor: human('owner', { keyCeiling: 'confidential' }), fetch: false, push: false },
  {
    name: 'agent with every grant at secret, elevated (git is for people)',
    actor: agent([g('read', '*', 'secret'), g('write', '*', 'secret'), g('admin', '*', 'secret')], { elevatedUntil: FUTURE }),
    fetch: false,
    push: false,
  },
  { name: 'agent with read everywhere', actor: agent([g('read', '*', 'confidential')]), fetch: false, push: false },
];

describe('decideGitFetch and decideGitPush', () => {
  for (const r of rows) {
    it(`${r.name}: fetch ${r.fetch ? 'allowed' : 'denied'}, push ${r.push ? 'allowed' : 'denied'}`, () => {
      expect(decideGitFetch(r.actor).kind).toBe(r.fetch ? 'allow' : 'deny');
      expect(decideGitPush(r.actor).kind).toBe(r.push ? 'allow' : 'deny');
    });
  }

  it('a refusal says what is needed, as git shows it to the person', () => {
    const fetch = decideGitFetch(human('editor'));
    const push = decideGitPush(human('viewer'));
    expect(fetch.kind === 'deny' && fetch.error.message).toMatch(/secret/);
    expect(push.kind === 'deny' && push.error.message).toMatch(/read access to every page|write and admin/);
    expect(fetch.kind === 'deny' && fetch.error.status).toBe(403);
  });
});

describe('a push counts as stepped up for the deletes and moves it carries', () => {
  const page = { path: 'eng/a.md', sensitivity: 'secret', blockLevel: null };
  it('an owner through git may delete and move without a session step-up', () => {
    const p = human('owner', { via: 'git', stepUpAt: null });
    expect(hasStepUp(p, NOW)).toBe(true);
    expect(decideDelete(p, page, NOW).kind).toBe('allow');
    expect(decideMove(p, true, NOW).kind).toBe('allow');
  });
  it('the same owner in a session without a step-up is still asked for one', () => {
    const p = human('owner', { via: 'session', stepUpAt: null });
    expect(hasStepUp(p, NOW)).toBe(false);
    expect(decideDelete(p, page, NOW).kind).toBe('deny');
  });
  it('an agent never counts as stepped up', () => {
    expect(hasStepUp(agent([g('admin', '*', 'confidential')], { via: 'key' }), NOW)).toBe(false);
  });
});
