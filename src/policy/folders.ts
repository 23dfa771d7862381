import { forbidden } from '../errors/index.js';
import { ceilingFor, hasStepUp } from './access.js';
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

/**
 * Changing a folder's settings (spec: PUT /api/v1/clusters/<space>/<folder>/lifecycle, grant
 * admin): the admin action over the folder. Among humans only owners hold it; an agent needs an
 * admin grant whose scope covers the folder.
 */
export function decideFolderSettings(p: Principal, folderPath: string): Decision {
  if (ceilingFor(p, 'admin', folderPath) === null)
    return { kind: 'deny', error: forbidden(`No admin grant covers ${folderPath}: folder settings are for owners`) };
  return { kind: 'allow' };
}
