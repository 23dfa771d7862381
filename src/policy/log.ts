import { forbidden } from '../errors/index.js';
import { ceilingFor } from './access.js';
import type { Decision, PageFacts } from './pages.js';
import type { Principal } from './principal.js';
import { atOrBelow, isLevel } from './sensitivity.js';

/**
 * Appending an entry to a Space's or folder's log.md (spec: POST /api/v1/log, context_log,
 * grant propose): the propose action over the log's path, at or above the log page's level.
 * An append replaces nothing, so content of the log above the caller's ceiling does not stop it.
 */
export function decideLogAppend(p: Principal, log: PageFacts): Decision {
  const ceiling = ceilingFor(p, 'propose', log.path);
  if (ceiling === null) return { kind: 'deny', error: forbidden(`No propose grant covers ${log.path}`) };
  if (!isLevel(log.sensitivity) || !atOrBelow(log.sensitivity, ceiling)) {
    return { kind: 'deny', error: forbidden(`${log.path} is ${log.sensitivity}, above your ceiling (${ceiling})`) };
  }
  return { kind: 'allow' };
}
