import type { CoreContext } from '../core/context.js';
import { unauthorized } from '../core/errors.js';
import type { Principal, Role } from '../policy/principal.js';
import { hashSecret } from './secrets.js';

/** What /git/<slug>.git gets from a request to identify the caller. */
export interface GitCredentials {
  authorization: string | undefined;
  /** The workspace slug named by the URL; the token must belong to it. */
  slug: string;
}

/**
 * Turns /git credentials into the human who minted the token, or throws 401. Only HTTP Basic
 * with a git token (`gt_…`) as the password is accepted (any user name); every other
 * credential, a token of another workspace, and an unknown slug get the same answer, so the
 * answer says nothing about which workspaces exist.
 */
export async function authenticateGit(ctx: CoreContext, c: GitCredentials): Promise<Principal> {
  const auth = c.authorization?.trim();
  if (!auth) throw unauthorized('Authentication required: use a git token (gt_…) as the password', 'unauthorized');
  const [scheme, value = ''] = auth.split(/\s+/, 2);
  if (scheme?.toLowerCase() !== 'basic') throw unauthorized('Git accepts HTTP Basic only, with a git token (gt_…) as the password', 'invalid_token');
  const decoded = Buffer.from(value, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  const secret = colon < 0 ? '' : decoded.slice(colon + 1);
  if (!secret.startsWith('gt_')) throw unauthorized('The password must be a git token (gt_…); mint one with POST /api/v1/me/git-tokens', 'invalid_token');

  const row = await ctx.store.db
    .selectFrom('git_tokens')
    .innerJoin('principals', 'principals.id', 'git_tokens.principal_id')
    .innerJoin('workspaces', 'workspaces.id', 'git_tokens.workspace_id')
    .leftJoin('members', (j) => j.onRef('members.workspace_id', '=', 'git_tokens.workspace_id').onRef('members.principal_id', '=', 'git_tokens.principal_id'))
    .select([
      'git_tokens.id as tokenId',
      'git_tokens.expires_at',
      'git_tokens.revoked_at',
      'git_tokens.epoch',
      'principals.id as principalId',
      'principals.name',
      'principals.kind',
      'principals.deleted_at',
      'workspaces.id as workspaceId',
      'workspaces.slug',
      'workspaces.token_epoch',
      'members.role',
    ])
    .where('git_tokens.token_hash', '=', hashSecret(secret))
    .executeTakeFirst();
  // One message for every dead token or foreign workspace: which check failed is nobody's business.
  const dead = () => unauthorized(`The git token is invalid, expired or revoked, or not valid for ${c.slug}.git`, 'invalid_token');
  if (!row || row.revoked_at || row.deleted_at || row.kind !== 'human' || row.epoch !== row.token_epoch || !row.role) throw dead();
  if (Date.parse(row.expires_at) <= Date.now()) throw dead();
  if (row.slug !== c.slug) throw dead();
  return {
    id: row.principalId,
    kind: 'human',
    name: row.name,
    workspaceId: row.workspaceId,
    workspaceSlug: row.slug,
    role: row.role as Role,
    grants: [],
    agentCeiling: null,
    keyCeiling: null,
    via: 'git',
    sessionId: null,
    keyId: row.tokenId,
    stepUpAt: null,
    elevatedUntil: null,
    createdBy: null,
  };
}
