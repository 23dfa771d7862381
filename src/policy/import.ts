import { forbidden, notFound } from '../errors/index.js';
import { ceilingFor, scopeCovers } from './access.js';
import type { Decision } from './pages.js';
import type { Principal } from './principal.js';

/**
 * Importing (spec: POST /api/v1/import, "S K (write)"): a caller who may write somewhere in the
 * Space: a human editor or owner, or an agent with a write grant over the Space or a folder in
 * it. Each file is then judged like any write (decideWrite: grant scope, ceiling, what it
 * overwrites); a file the caller may not write is skipped and reported, not proposed (a proposal
 * per file of a 10,000-file archive would bury the reviewers).
 */
export function decideImport(p: Principal, space: string): Decision {
  if (p.via === 'git') return { kind: 'deny', error: forbidden('A git token acts only through git') };
  if (p.kind === 'human') {
    return ceilingFor(p, 'write', space) === null ? { kind: 'deny', error: forbidden('Importing needs the editor or owner role') } : { kind: 'allow' };
  }
  // Where a grant reaches into the Space: the Space itself, or the folder the grant names.
  const targets = p.grants
    .filter((g) => g.action === 'write' && (scopeCovers(g.scope, space) || scopeCovers(space, g.scope)))
    .map((g) => (scopeCovers(g.scope, space) ? space : g.scope));
  if (!targets.some((t) => ceilingFor(p, 'write', t) !== null))
    return { kind: 'deny', error: forbidden(`No write grant covers the Space ${space} or a folder in it`) };
  return { kind: 'allow' };
}

/** An import's progress and report: the importer, or an owner of the workspace; to others it does not exist. */
export function decideImportRead(p: Principal, job: { principalId: string }): Decision {
  if (p.id === job.principalId || (p.kind === 'human' && p.role === 'owner' && p.via !== 'git')) return { kind: 'allow' };
  return { kind: 'deny', error: notFound('No such import') };
}
