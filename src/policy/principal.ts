import type { Level } from './sensitivity.js';

export const ROLES = ['owner', 'editor', 'viewer'] as const;
export type Role = (typeof ROLES)[number];

export const ACTIONS = ['read', 'write', 'admin', 'search', 'propose', 'collab'] as const;
export type Action = (typeof ACTIONS)[number];

/** A right given to an agent: an action, over a scope (`*`, `<space>` or `<space>/<folder>`), up to a ceiling. */
export interface Grant {
  action: Action;
  scope: string;
  ceiling: Level;
}

/**
 * Who is calling, as the policy functions see it. Built by auth/ from a credential;
 * policy never queries, so everything a decision needs is here.
 */
export interface Principal {
  id: string;
  kind: 'human' | 'agent';
  name: string;
  workspaceId: string;
  workspaceSlug: string;
  /** Humans: their role in the current workspace. */
  role: Role | null;
  /** Agents: their grants. */
  grants: Grant[];
  /** Agents: the agent's own ceiling. */
  agentCeiling: Level | null;
  /** The presenting key's ceiling, if it carries one. */
  keyCeiling: Level | null;
  /** `git`: a git token on /git, which acts only through a push (src/core/git/). */
  via: 'session' | 'key' | 'oauth' | 'git';
  sessionId: string | null;
  keyId: string | null;
  /** When step-up was last granted (ISO), humans only. */
  stepUpAt: string | null;
  /** Agents: end of an active elevation to secret (ISO). */
  elevatedUntil: string | null;
  /** The created_by of an agent (who may manage it). */
  createdBy: string | null;
  /**
   * Agents: their creator's role in the workspace NOW (null when the creator is no longer a
   * member). An agent never reaches further than its creator's current role (issue 11).
   * Omitted for humans.
   */
  creatorRole?: Role | null;
}
