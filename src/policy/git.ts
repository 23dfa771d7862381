import { ceilingFor } from './access.js';
import type { Decision } from './pages.js';
import type { Principal } from './principal.js';
import { forbidden } from '../errors/index.js';

/**
 * Git access (spec §4 "Git"). A clone holds every page of the workspace with its whole history,
 * and commit ids cannot be kept if anything is left out, so fetching needs workspace-wide read
 * at secret; a push rewrites any page and its history, so it needs write and admin over the
 * whole workspace. In today's roles both mean a workspace owner.
 */
export function decideGitFetch(p: Principal): Decision {
  if (p.kind === 'human' && ceilingFor(p, 'read', '*') === 'secret') return { kind: 'allow' };
  return { kind: 'deny', error: forbidden('Fetching needs read access to every page, secret ones included (a workspace owner)', 'forbidden') };
}

export function decideGitPush(p: Principal): Decision {
  const fetch = decideGitFetch(p);
  if (fetch.kind === 'deny') return fetch;
  if (ceilingFor(p, 'write', '*') === 'secret' && ceilingFor(p, 'admin', '*') !== null) return { kind: 'allow' };
  return { kind: 'deny', error: forbidden('Pushing needs write and admin access to the whole workspace (a workspace owner)', 'forbidden') };
}
