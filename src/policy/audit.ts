import { forbidden } from '../errors/index.js';
import type { Decision } from './pages.js';
import type { Principal } from './principal.js';

/**
 * Reading the audit log and verifying its chain (spec: GET /api/v1/audit, "S own"): a signed-in
 * owner of the workspace the request works in. Agents never (the log names every key, grant and
 * elevation, their own included), whatever their grants or an elevation say.
 */
export function decideAuditRead(p: Principal): Decision {
  if (p.kind !== 'human' || p.via !== 'session') return { kind: 'deny', error: forbidden('The audit log is for a signed-in owner', 'session_required') };
  if (p.role !== 'owner') return { kind: 'deny', error: forbidden('Only a workspace owner may read the audit log') };
  return { kind: 'allow' };
}
