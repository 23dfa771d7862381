import { describe, expect, it } from 'vitest';
import type { PageFacts } from '../../src/policy/pages.js';
import type { Principal } from '../../src/policy/principal.js';
import { canWatchFolder, canWatchPage, revealsOldPath, watchDelivers, type FolderSight } from '../../src/policy/watches.js';
import { agent, FUTURE, g, human } from './support.js';

/**
 * Table-driven test of src/policy/watches.ts (issue 13): who may watch a page or a folder, and
 * who is told of a change. A target the caller cannot see answers as one that does not exist (the
 * core turns every `false` here into the same not_found).
 */

const page = (path: string, sensitivity = 'internal', blockLevel: string | null = null): PageFacts => ({ path, sensitivity, blockLevel });

describe('canWatchPage: whoever reads the page now', () => {
  const rows: { name: string; actor: Principal; page: PageFacts; expected: boolean }[] = [
    { name: 'viewer, internal page', actor: human('viewer'), page: page('eng/a.md'), expected: true },
    { name: 'viewer, confidential page (above the ceiling)', actor: human('viewer'), page: page('eng/a.md', 'confidential'), expected: false },
    { name: 'editor, confidential page', actor: human('editor'), page: page('eng/a.md', 'confidential'), expected: true },
    { name: 'editor, secret page', actor: human('editor'), page: page('eng/a.md', 'secret'), expected: false },
    { name: 'owner, secret page', actor: human('owner'), page: page('eng/a.md', 'secret'), expected: true },
    {
      name: 'owner through a key capped at internal, confidential page',
      actor: human('owner', { keyCeiling: 'internal' }),
      page: page('eng/a.md', 'confidential'),
      expected: false,
    },
    { name: 'human without a role', actor: human(null), page: page('eng/a.md', 'public'), expected: false },
    { name: 'a secret block does not hide the page (it is redacted)', actor: human('viewer'), page: page('eng/a.md', 'internal', 'secret'), expected: true },
    { name: 'agent with read on the Space', actor: agent([g('read', 'eng', 'internal')]), page: page('eng/x/a.md'), expected: true },
    { name: 'agent with read on another Space', actor: agent([g('read', 'ops', 'internal')]), page: page('eng/a.md'), expected: false },
    { name: 'agent with read on a folder, page outside it', actor: agent([g('read', 'eng/x', 'internal')]), page: page('eng/y/a.md'), expected: false },
    { name: 'agent with read on a folder, page inside it', actor: agent([g('read', 'eng/x', 'internal')]), page: page('eng/x/a.md'), expected: true },
    {
      name: 'agent with a prefix-alike folder grant (eng/x vs eng/xy)',
      actor: agent([g('read', 'eng/x', 'internal')]),
      page: page('eng/xy/a.md'),
      expected: false,
    },
    {
      name: 'agent with every grant but read',
      actor: agent([g('write', '*', 'confidential'), g('search', '*', 'confidential')]),
      page: page('eng/a.md'),
      expected: false,
    },
    { name: 'agent read grant below the page level', actor: agent([g('read', '*', 'internal')]), page: page('eng/a.md', 'confidential'), expected: false },
    {
      name: 'agent, secret page, not elevated (capped at confidential)',
      actor: agent([g('read', '*', 'secret')]),
      page: page('eng/a.md', 'secret'),
      expected: false,
    },
    {
      name: 'agent, secret page, elevated',
      actor: agent([g('read', '*', 'confidential')], { elevatedUntil: FUTURE }),
      page: page('eng/a.md', 'secret'),
      expected: true,
    },
    {
      name: 'agent whose creator left the workspace',
      actor: agent([g('read', '*', 'internal')], { creatorRole: null }),
      page: page('eng/a.md'),
      expected: false,
    },
    {
      name: 'agent whose creator is a viewer, confidential page',
      actor: agent([g('read', '*', 'confidential')], { creatorRole: 'viewer' }),
      page: page('eng/a.md', 'confidential'),
      expected: false,
    },
    { name: 'unknown sensitivity reads as secret', actor: human('editor'), page: page('eng/a.md', 'bogus'), expected: false },
  ];
  it.each(rows)('$name', ({ actor, page: pg, expected }) => {
    expect(canWatchPage(actor, pg)).toBe(expected);
  });
});

describe('canWatchFolder: a read grant over all of it, and it is there for the caller', () => {
  const seen: FolderSight = { exists: true, livePages: true, readablePage: true };
  const empty: FolderSight = { exists: true, livePages: false, readablePage: false };
  const hidden: FolderSight = { exists: true, livePages: true, readablePage: false };
  const absent: FolderSight = { exists: false, livePages: false, readablePage: false };
  const rows: { name: string; actor: Principal; path: string; sight: FolderSight; expected: boolean }[] = [
    { name: 'viewer, folder with a readable page', actor: human('viewer'), path: 'eng/notes', sight: seen, expected: true },
    { name: 'viewer, empty folder that exists', actor: human('viewer'), path: 'eng/notes', sight: empty, expected: true },
    { name: 'viewer, folder whose pages are all above the ceiling', actor: human('viewer'), path: 'eng/notes', sight: hidden, expected: false },
    { name: 'viewer, folder that does not exist', actor: human('viewer'), path: 'eng/none', sight: absent, expected: false },
    { name: 'owner, Space', actor: human('owner'), path: 'eng', sight: seen, expected: true },
    { name: 'human without a role', actor: human(null), path: 'eng', sight: seen, expected: false },
    { name: 'agent with read on the Space, its folder', actor: agent([g('read', 'eng', 'internal')]), path: 'eng/notes', sight: seen, expected: true },
    {
      name: 'agent with read on a folder, the Space above it (wider than its grant)',
      actor: agent([g('read', 'eng/notes', 'internal')]),
      path: 'eng',
      sight: seen,
      expected: false,
    },
    {
      name: 'agent with read on a folder, a sibling folder',
      actor: agent([g('read', 'eng/notes', 'internal')]),
      path: 'eng/other',
      sight: seen,
      expected: false,
    },
    {
      name: 'agent with read on a folder, a sub-folder',
      actor: agent([g('read', 'eng/notes', 'internal')]),
      path: 'eng/notes/sub',
      sight: seen,
      expected: true,
    },
    { name: 'agent without read', actor: agent([g('write', '*', 'confidential')]), path: 'eng', sight: seen, expected: false },
    { name: 'agent whose creator left', actor: agent([g('read', '*', 'internal')], { creatorRole: null }), path: 'eng', sight: seen, expected: false },
    { name: 'agent, folder of hidden pages', actor: agent([g('read', '*', 'internal')]), path: 'eng', sight: hidden, expected: false },
    { name: 'agent, empty existing folder', actor: agent([g('read', '*', 'internal')]), path: 'eng/new', sight: empty, expected: true },
    { name: 'agent, absent folder', actor: agent([g('read', '*', 'internal')]), path: 'eng/new', sight: absent, expected: false },
  ];
  it.each(rows)('$name', ({ actor, path, sight, expected }) => {
    expect(canWatchFolder(actor, path, sight)).toBe(expected);
  });
});

describe('watchDelivers: never your own change; only what you may read now', () => {
  const viewer = human('viewer', { id: 'pr_watcher' });
  const scoped = agent([g('read', 'eng/notes', 'internal')], { id: 'pr_watcher' });
  const rows: { name: string; watcher: Principal; actors: string[]; page: PageFacts; expected: boolean }[] = [
    { name: 'someone else changed a readable page', watcher: viewer, actors: ['pr_other'], page: page('eng/a.md'), expected: true },
    { name: 'the watcher changed it', watcher: viewer, actors: ['pr_watcher'], page: page('eng/a.md'), expected: false },
    { name: 'an accepted proposal credited to the watcher', watcher: viewer, actors: ['pr_other', 'pr_watcher'], page: page('eng/a.md'), expected: false },
    { name: 'the change raised the page above the ceiling', watcher: viewer, actors: ['pr_other'], page: page('eng/a.md', 'confidential'), expected: false },
    { name: 'path-scoped agent, page inside its grant', watcher: scoped, actors: ['pr_other'], page: page('eng/notes/a.md'), expected: true },
    { name: 'path-scoped agent, page moved out of its grant', watcher: scoped, actors: ['pr_other'], page: page('eng/private/a.md'), expected: false },
    {
      name: 'path-scoped agent, confidential page inside its grant',
      watcher: scoped,
      actors: ['pr_other'],
      page: page('eng/notes/a.md', 'confidential'),
      expected: false,
    },
    {
      name: 'watch made with a key capped at public, internal page',
      watcher: { ...scoped, keyCeiling: 'public' },
      actors: ['pr_other'],
      page: page('eng/notes/a.md'),
      expected: false,
    },
  ];
  it.each(rows)('$name', ({ watcher, actors, page: pg, expected }) => {
    expect(watchDelivers(watcher, actors, pg)).toBe(expected);
  });
});

describe('revealsOldPath: a move tells where from only to who could read it there', () => {
  const scoped = agent([g('read', 'eng/notes', 'internal')]);
  const rows: { name: string; watcher: Principal; before: PageFacts; expected: boolean }[] = [
    { name: 'old path inside the grant', watcher: scoped, before: page('eng/notes/a.md'), expected: true },
    { name: 'old path outside the grant (moved into sight)', watcher: scoped, before: page('eng/private/a.md'), expected: false },
    { name: 'old version above the ceiling', watcher: human('viewer'), before: page('eng/a.md', 'secret'), expected: false },
    { name: 'old version readable', watcher: human('viewer'), before: page('eng/a.md'), expected: true },
  ];
  it.each(rows)('$name', ({ watcher, before, expected }) => {
    expect(revealsOldPath(watcher, before)).toBe(expected);
  });
});
