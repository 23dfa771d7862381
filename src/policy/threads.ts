import { ServiceError, forbidden } from '../errors/index.js';
import { ceilingFor } from './access.js';
import type { Decision, PageFacts } from './pages.js';
import type { Principal } from './principal.js';
import { atOrBelow, isLevel } from './sensitivity.js';

/**
 * Threads on pages: who may post, who may unlock, and the loop breaker (spec §3 Thread, §6,
 * §8 "agent hops in a thread before lock: 4"). Pure functions; the core loads the facts.
 */

/** Consecutive agent-authored messages that lock a thread; the one that reaches it is accepted. */
export const MAX_AGENT_HOPS = 4;

const allow: Decision = { kind: 'allow' };

/** The thread's loop-breaker state as stored. */
export interface ThreadFacts {
  agentHops: number;
  locked: boolean;
}

/**
 * Posting needs the `collab` action over the page's path, at or above the page's level
 * (agents: a collab grant; humans: their role — viewers included, since every role holds
 * collab). Reading the page is checked before (an unreadable page is 404, not 403).
 */
export function decidePost(p: Principal, page: PageFacts): Decision {
  const ceiling = ceilingFor(p, 'collab', page.path);
  if (ceiling === null) {
    return { kind: 'deny', error: forbidden(p.kind === 'agent' ? `No collab grant covers ${page.path}` : 'Your role may not post in threads') };
  }
  const sens = isLevel(page.sensitivity) ? page.sensitivity : 'secret';
  if (!atOrBelow(sens, ceiling)) {
    return { kind: 'deny', error: forbidden(`The page is ${page.sensitivity}, above your collab ceiling (${ceiling})`) };
  }
  return allow;
}

/** The answer when an agent posts to a locked thread: 423 Locked, code `thread_locked`. */
export function threadLocked(): ServiceError {
  return new ServiceError(
    423,
    'thread_locked',
    `The thread is locked after ${MAX_AGENT_HOPS} consecutive agent messages, until a person unlocks it: stop posting here and do not retry. ` +
      'The editors and owners who can read the page have been told; one of them must unlock it (POST /api/v1/nodes/{id}/threads/unlock).',
  );
}

/**
 * A locked thread refuses agents only. Humans may still post: the lock stops agents talking
 * to each other without end, and a human is how the conversation goes on. A human's post
 * resets the hop count but does not lift the lock; only an unlock does (spec §6).
 */
export function decidePostWhenLocked(p: Principal, t: ThreadFacts): Decision {
  if (t.locked && p.kind === 'agent') return { kind: 'deny', error: threadLocked() };
  return allow;
}

/**
 * The loop breaker: the state after a message by `authorKind`. Agent messages count up; a
 * human message resets the count to 0. The message that brings the count to
 * MAX_AGENT_HOPS is accepted and locks the thread.
 */
export function afterPost(t: ThreadFacts, authorKind: Principal['kind']): { agentHops: number; lockNow: boolean } {
  if (authorKind === 'human') return { agentHops: 0, lockNow: false };
  const agentHops = t.agentHops + 1;
  return { agentHops, lockNow: !t.locked && agentHops >= MAX_AGENT_HOPS };
}

/** Unlocking is for a signed-in editor or owner (spec: "S (editor+)"); viewers and agents get 403. */
export function decideUnlock(p: Principal): Decision {
  if (p.kind !== 'human' || p.via !== 'session') {
    return { kind: 'deny', error: forbidden('Only a signed-in editor or owner may unlock a thread', 'session_required') };
  }
  if (p.role !== 'editor' && p.role !== 'owner') {
    return { kind: 'deny', error: forbidden('Only an editor or owner may unlock a thread') };
  }
  return allow;
}
