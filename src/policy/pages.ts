import { forbidden, ServiceError } from '../core/errors.js';
import { ceilingFor, visibleUnder } from './access.js';
import type { Principal } from './principal.js';
import { atOrBelow, isLevel, type Level } from './sensitivity.js';

/** The parts of a page (or of one version of it) that access decisions look at. */
export interface PageFacts {
  path: string;
  sensitivity: string;
  blockLevel: string | null;
}

/**
 * The outcome of a write decision. `propose` is the seam for the spec's "else proposal"
 * outcomes (a later issue turns it into a proposal instead of an error).
 */
export type Decision = { kind: 'allow' } | { kind: 'deny'; error: ServiceError };

const allow: Decision = { kind: 'allow' };
const deny = (message: string, code = 'forbidden'): Decision => ({ kind: 'deny', error: forbidden(message, code) });

function level(v: string | null): Level | null {
  return isLevel(v) ? v : null;
}

/** A page above the caller's read ceiling does not exist for them (404, absent from every list). */
export function canReadPage(p: Principal, page: PageFacts): boolean {
  const ceiling = ceilingFor(p, 'read', page.path);
  const sens = level(page.sensitivity) ?? 'secret';
  return ceiling !== null && atOrBelow(sens, ceiling);
}

/** The predicate used to redact blocks of a page the caller can read. */
export function blockVisibility(p: Principal, path: string): (l: Level) => boolean {
  const ceiling = ceilingFor(p, 'read', path) ?? 'public';
  return visibleUnder(ceiling);
}

/**
 * May the caller write `next` at its path, replacing `current` (null for a new page)?
 * Needs the write grant over the path, a ceiling at or above what it writes, and — since
 * a caller may not overwrite what it cannot see — at or above what it replaces.
 */
export function decideWrite(p: Principal, current: PageFacts | null, next: PageFacts): Decision {
  const ceiling = ceilingFor(p, 'write', next.path);
  if (ceiling === null) return deny(`No write grant covers ${next.path}`);
  const nextSens = level(next.sensitivity) ?? 'secret';
  if (!atOrBelow(nextSens, ceiling)) return deny(`Sensitivity ${next.sensitivity} is above your ceiling (${ceiling})`);
  const nextBlock = level(next.blockLevel);
  if (nextBlock && !atOrBelow(nextBlock, ceiling)) {
    return deny(`A ::: ${nextBlock} block is above your ceiling (${ceiling})`);
  }
  if (current) {
    if (current.path !== next.path && ceilingFor(p, 'write', current.path) === null) {
      return deny(`No write grant covers ${current.path}`);
    }
    const curCeiling = ceilingFor(p, 'write', current.path) ?? 'public';
    const curSens = level(current.sensitivity) ?? 'secret';
    const curBlock = level(current.blockLevel);
    if (!atOrBelow(curSens, curCeiling) || (curBlock && !atOrBelow(curBlock, curCeiling))) {
      return deny('The page holds content above your ceiling; you cannot overwrite what you cannot see');
    }
  }
  return allow;
}

/** Delete: a human owner (step-up arrives with the identity issue), or an agent with an admin grant. */
export function decideDelete(p: Principal, page: PageFacts): Decision {
  if (p.kind === 'human') {
    return p.role === 'owner' ? allow : deny('Only a workspace owner may delete pages');
  }
  const ceiling = ceilingFor(p, 'admin', page.path);
  if (ceiling === null) return deny(`No admin grant covers ${page.path}`);
  const sens = level(page.sensitivity) ?? 'secret';
  const block = level(page.blockLevel);
  if (!atOrBelow(sens, ceiling) || (block && !atOrBelow(block, ceiling))) {
    return deny('The page holds content above your ceiling');
  }
  return allow;
}

/** A diff shows raw content of two versions, so it needs secret-level read. */
export function canDiff(p: Principal, path: string): boolean {
  return ceilingFor(p, 'read', path) === 'secret';
}

/** Throws the decision's error when it is not an allow. */
export function enforce(d: Decision): void {
  if (d.kind === 'deny') throw d.error;
}
