import { forbidden, ServiceError } from '../errors/index.js';
import { ceilingFor, hasStepUp, scopeCovers, visibleUnder } from './access.js';
import type { Principal } from './principal.js';
import { atOrBelow, isLevel, minLevel, type Level } from './sensitivity.js';

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

/**
 * A `+U` gate: humans step up in a signed-in session (POST /api/auth/stepup); agents never can,
 * and neither can a person connected over OAuth (a token has no session to step up): they are
 * told to do it signed in to the web app.
 */
export function stepUpNeeded(what: string, p?: Principal): Decision {
  const how =
    p?.via === 'oauth'
      ? 'which an OAuth connection cannot give: do it signed in to the web app or REST API, after a step-up (POST /api/auth/stepup)'
      : 'within the last 5 minutes (POST /api/auth/stepup)';
  return { kind: 'deny', error: forbidden(`${what} needs a step-up ${how}`, 'step_up_required') };
}
const deny = (message: string, code: Parameters<typeof forbidden>[1] = 'forbidden'): Decision => ({ kind: 'deny', error: forbidden(message, code) });

function level(v: string | null): Level | null {
  return isLevel(v) ? v : null;
}

/** A page above the caller's read ceiling does not exist for them (404, absent from every list). */
export function canReadPage(p: Principal, page: PageFacts): boolean {
  const ceiling = ceilingFor(p, 'read', page.path);
  const sens = level(page.sensitivity) ?? 'secret';
  return ceiling !== null && atOrBelow(sens, ceiling);
}

/**
 * The caller reads this page (or version) whole: the page itself and every block in it are at
 * or below the read ceiling for its path. Only such a version may serve as a merge base or a
 * diff side — anything derived from a redacted version would carry the hidden text.
 */
export function canReadInFull(p: Principal, page: PageFacts): boolean {
  if (!canReadPage(p, page)) return false;
  const block = level(page.blockLevel);
  if (page.blockLevel !== null && block === null) return false;
  return block === null || atOrBelow(block, ceilingFor(p, 'read', page.path) ?? 'public');
}

/** The predicate used to redact blocks of a page the caller can read. */
export function blockVisibility(p: Principal, path: string): (l: Level) => boolean {
  const ceiling = ceilingFor(p, 'read', path) ?? 'public';
  return visibleUnder(ceiling);
}

/**
 * May the caller write `next` at its path, replacing `current` (null for a new page)?
 * Needs the write grant over the path, a ceiling at or above what it writes, and — since
 * a caller may not overwrite what it cannot see — write and read ceilings (when it reads
 * there at all) at or above what it replaces.
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
    // What it may see of the page it replaces: an agent that writes above the level it reads
    // would otherwise erase blocks shown to it as [redacted] by writing back what it read.
    const writeCeiling = ceilingFor(p, 'write', current.path) ?? 'public';
    const readCeiling = ceilingFor(p, 'read', current.path);
    const curCeiling = readCeiling === null ? writeCeiling : minLevel(writeCeiling, readCeiling);
    const curSens = level(current.sensitivity) ?? 'secret';
    const curBlock = level(current.blockLevel);
    if (!atOrBelow(curSens, curCeiling) || (curBlock && !atOrBelow(curBlock, curCeiling))) {
      return deny('The page holds content above your ceiling; you cannot overwrite what you cannot see');
    }
  }
  return allow;
}

/**
 * Delete: a human who may write the page and stepped up in the last five minutes, or an
 * agent with an admin grant over it.
 */
export function decideDelete(p: Principal, page: PageFacts, now = new Date()): Decision {
  const human = p.kind === 'human';
  const ceiling = ceilingFor(p, human ? 'write' : 'admin', page.path);
  if (ceiling === null) return deny(human ? 'Deleting needs write access (editor or owner)' : `No admin grant covers ${page.path}`);
  if (human && !hasStepUp(p, now)) return stepUpNeeded('Deleting a page', p);
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

/**
 * A move widens the audience when some agent grant can read the new path but not the old
 * one. Humans see by role, not by path, so only agents' read grants matter.
 */
export function widensAudience(readGrantScopes: readonly string[], from: string, to: string): boolean {
  return readGrantScopes.some((scope) => scopeCovers(scope, to) && !scopeCovers(scope, from));
}

/** Moving to a wider audience needs a step-up (agents: refused here; proposals come later). */
export function decideMove(p: Principal, widens: boolean, now = new Date()): Decision {
  if (!widens) return allow;
  if (p.kind === 'human' && hasStepUp(p, now)) return allow;
  return stepUpNeeded('Moving a page where more agents can read it', p);
}
