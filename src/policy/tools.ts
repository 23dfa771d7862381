import { forbidden } from '../errors/index.js';
import { hasActionWithin } from './access.js';
import type { Decision } from './pages.js';
import type { Action, Principal } from './principal.js';

/**
 * The Grant column of the spec's MCP tool table: a tool needs one of these actions somewhere
 * in the workspace (agents: a grant of that action, any scope; humans: their role). The
 * action is then judged again, exactly, on what the tool touches by the core function it
 * calls. An empty list means any authenticated caller.
 */
export function decideToolGrant(p: Principal, actions: readonly Action[]): Decision {
  if (actions.length === 0 || actions.some((a) => hasActionWithin(p, a, '*'))) return { kind: 'allow' };
  return { kind: 'deny', error: forbidden(`No ${actions.join(' or ')} grant`) };
}
