import { conflict, forbidden } from '../errors/index.js';
import { ceilingFor, hasStepUp } from './access.js';
import { canReadInFull, canReadPage, decideWrite, type Decision, type PageFacts } from './pages.js';
import type { Principal } from './principal.js';
import { atOrBelow, isLevel } from './sensitivity.js';

/** The parts of a proposal access decisions look at. */
export interface ProposalFacts {
  path: string;
  /** The highest level involved: the page's and the proposed content's (blocks included). */
  sensitivity: string;
  origin: string;
  proposerId: string;
}

const allow: Decision = { kind: 'allow' };

/** A proposal exists for whoever could read what it touches (like the page itself). */
export function canSeeProposal(p: Principal, pr: ProposalFacts): boolean {
  return canReadPage(p, { path: pr.path, sensitivity: pr.sensitivity, blockLevel: null });
}

/** The proposed text itself is shown to humans only (spec: "full content only for humans"). */
export function seesProposalContent(p: Principal): boolean {
  return p.kind === 'human';
}

/** Proposing needs the propose grant over the path, at or above what the proposal holds. */
export function decidePropose(p: Principal, next: PageFacts): Decision {
  const ceiling = ceilingFor(p, 'propose', next.path);
  if (ceiling === null) return { kind: 'deny', error: forbidden(`No propose grant covers ${next.path}`) };
  for (const l of [next.sensitivity, next.blockLevel]) {
    if (l && (!isLevel(l) || !atOrBelow(l, ceiling))) {
      return { kind: 'deny', error: forbidden(`Content at ${l} is above your ceiling (${ceiling})`) };
    }
  }
  return allow;
}

/**
 * Accepting or rejecting: a signed-in editor or owner who can see the proposal. A proposal
 * born at a step-up gate needs the decider's own step-up to accept.
 */
export function decideOnProposal(p: Principal, pr: ProposalFacts, action: 'accept' | 'reject', now = new Date()): Decision {
  if (p.kind !== 'human' || (p.role !== 'editor' && p.role !== 'owner')) {
    return { kind: 'deny', error: forbidden('Only an editor or owner (signed in) decides on proposals') };
  }
  if (action === 'accept' && pr.origin === 'step_up' && !hasStepUp(p, now)) {
    return { kind: 'deny', error: forbidden('This proposal passed a step-up gate: step up to accept it', 'step_up_required') };
  }
  return allow;
}

/**
 * Withdrawing (issue 13, beyond the spec): only the proposal's own author, and only while it
 * is open. Anyone else who can see it is refused; one they cannot see never reaches here (404).
 */
export function decideWithdraw(p: Principal, pr: ProposalFacts & { status: string }): Decision {
  if (pr.proposerId !== p.id) return { kind: 'deny', error: forbidden('Only the author of a proposal may withdraw it') };
  if (pr.status !== 'open') return { kind: 'deny', error: conflict(`The proposal is ${pr.status}; only an open one can be withdrawn`, 'proposal_closed') };
  return allow;
}

/** A write's outcome: done, refused, or (the spec's "an agent action that lacks permission") a proposal. */
export type WriteDecision = Decision | { kind: 'propose'; origin: 'no_write' };

export interface ProposeRule {
  /** Who may have a refused write turned into a proposal: agents only (create, update, restore) or anyone (archive). */
  proposers: 'agents' | 'anyone';
  /** The proposal carries page text: the caller must read the current page whole, as a writer must. */
  carriesContent: boolean;
}

/**
 * May the caller write `next` over `current`; if not, may it propose it instead? A write
 * becomes a proposal only when no write grant covers the path (a writer whose content is above
 * its ceiling is refused, not turned into a proposal) and the propose grant covers what it
 * would hold. Otherwise the write's own refusal stands.
 */
export function decideWriteOrPropose(p: Principal, current: PageFacts | null, next: PageFacts, rule: ProposeRule): WriteDecision {
  const write = decideWrite(p, current, next);
  if (write.kind === 'allow') return write;
  if (rule.proposers === 'agents' && p.kind !== 'agent') return write;
  if (ceilingFor(p, 'write', next.path) !== null) return write;
  if (rule.carriesContent && current && !canReadInFull(p, current)) return write;
  const subject = rule.carriesContent ? next : (current ?? next);
  return decidePropose(p, subject).kind === 'allow' ? { kind: 'propose', origin: 'no_write' } : write;
}
