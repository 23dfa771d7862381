import { forbidden } from '../errors/index.js';
import { hasStepUp } from './access.js';
import { stepUpNeeded, type Decision } from './pages.js';
import type { Principal } from './principal.js';

/**
 * Running the lifecycle job by hand (spec: POST /api/v1/lifecycle/run, "S own (+U for apply)"):
 * a signed-in owner of the workspace; an apply (it archives pages) also needs a step-up. Agents
 * never: the scheduled run is the automatic path, and an agent archiving a whole workspace's
 * stale pages at once is an owner's call.
 */
export function decideLifecycleRun(p: Principal, mode: 'dry' | 'apply', now = new Date()): Decision {
  if (p.kind !== 'human' || p.via !== 'session') return { kind: 'deny', error: forbidden('Lifecycle runs are for a signed-in owner', 'session_required') };
  if (p.role !== 'owner') return { kind: 'deny', error: forbidden('Only a workspace owner may run the lifecycle job') };
  if (mode === 'apply' && !hasStepUp(p, now)) return stepUpNeeded('Applying the lifecycle job', p);
  return { kind: 'allow' };
}
