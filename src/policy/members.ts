import { conflict, forbidden, ServiceError } from '../errors/index.js';
import type { Role } from './principal.js';

/**
 * Pure decisions about membership: who may change roles, remove members, and manage
 * invites, and the last-owner rule. The core loads the facts (inside the mutation's
 * transaction, so they are current) and asks here; nothing in this file queries.
 */

/** One member as these decisions see them. */
export interface MemberFacts {
  id: string;
  role: Role;
}

export type MemberDecision = { kind: 'allow' } | { kind: 'deny'; error: ServiceError };

const allow: MemberDecision = { kind: 'allow' };
const deny = (error: ServiceError): MemberDecision => ({ kind: 'deny', error });

const ownerOnly = (what: string) => deny(forbidden(`Only a workspace owner may ${what}`));
const lastOwner = (what: string) => deny(conflict(`The last owner cannot ${what}; make another member owner first`, 'last_owner'));

/** Any member may list the members of a workspace they belong to. */
export function canListMembers(actor: MemberFacts | null): boolean {
  return actor !== null;
}

/**
 * Changing a role: owners only (an owner may also change their own role). Taking the owner
 * role away from the only owner is refused, so a workspace always keeps an owner.
 */
export function decideRoleChange(actor: MemberFacts, target: MemberFacts, next: Role, owners: number): MemberDecision {
  if (actor.role !== 'owner') return ownerOnly('change roles');
  if (target.role === 'owner' && next !== 'owner' && owners <= 1) return lastOwner('be demoted');
  return allow;
}

/**
 * Removing a member: owners may remove anyone; every member may remove themselves (leave).
 * The last owner can neither leave nor be removed.
 */
export function decideRemoval(actor: MemberFacts, target: MemberFacts, owners: number): MemberDecision {
  const self = actor.id === target.id;
  if (!self && actor.role !== 'owner') return ownerOnly('remove other members');
  if (target.role === 'owner' && owners <= 1) return lastOwner(self ? 'leave the workspace' : 'be removed');
  return allow;
}

/** Creating, listing and revoking invites is for owners (the spec's "S own"). */
export function decideInviteManagement(actor: MemberFacts): MemberDecision {
  return actor.role === 'owner' ? allow : ownerOnly('manage invites');
}

/** An invite's state, judged at a moment; accepted and revoked are final, expiry is by the clock. */
export type InviteState = 'pending' | 'accepted' | 'revoked' | 'expired';

export interface InviteFacts {
  expiresAt: string;
  revokedAt: string | null;
  acceptedAt: string | null;
  email: string | null;
}

export function inviteState(inv: InviteFacts, now = new Date()): InviteState {
  if (inv.acceptedAt) return 'accepted';
  if (inv.revokedAt) return 'revoked';
  if (Date.parse(inv.expiresAt) <= now.getTime()) return 'expired';
  return 'pending';
}

/**
 * May this human (by email) take this invite? Checked in the order a user can act on:
 * used, revoked, expired, then the addressee. Membership is checked by the caller
 * (409 already_member) because it needs the workspace's member list.
 */
export function decideInviteUse(inv: InviteFacts, email: string, now = new Date()): MemberDecision {
  switch (inviteState(inv, now)) {
    case 'accepted':
      return deny(conflict('This invite has already been used', 'invite_used'));
    case 'revoked':
      return deny(goneError('This invite was revoked; ask for a new one', 'invite_revoked'));
    case 'expired':
      return deny(goneError('This invite has expired; ask for a new one', 'invite_expired'));
    case 'pending':
      break;
  }
  if (inv.email !== null && inv.email !== email.trim().toLowerCase()) {
    return deny(forbidden('This invite is for another email address', 'invite_email_mismatch'));
  }
  return allow;
}

/** Revoking: pending and expired invites can be revoked (again: a no-op); a used one cannot. */
export function decideInviteRevoke(inv: InviteFacts): MemberDecision {
  if (inv.acceptedAt) return deny(conflict('This invite has already been used; remove the member instead', 'invite_used'));
  return allow;
}

/** 410 Gone: the invite existed but can never be used again. */
function goneError(message: string, code: 'invite_revoked' | 'invite_expired'): ServiceError {
  return new ServiceError(410, code, message);
}

/** Creating a workspace is for signed-in humans; an agent lives in exactly one workspace. */
export function canCreateWorkspace(p: { kind: 'human' | 'agent' }): boolean {
  return p.kind === 'human';
}
