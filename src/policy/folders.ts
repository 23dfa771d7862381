import { hasStepUp } from './access.js';
import { stepUpNeeded, type Decision } from './pages.js';
import type { Principal } from './principal.js';

/**
 * Archiving a whole folder (spec §3: "write grant; humans need step-up"). This is the gate
 * for the folder as a whole; every page in it is then decided on its own (decideWrite, and
 * without write the spec's proposal instead). Restoring a folder has no gate of its own.
 */
export function decideFolderArchive(p: Principal, now = new Date()): Decision {
  if (p.kind === 'human' && !hasStepUp(p, now)) return stepUpNeeded('Archiving a folder', p);
  return { kind: 'allow' };
}
