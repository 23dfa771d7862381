import { hashSecret, newSecret, secretHint } from '../auth/secrets.js';
import { hasStepUp } from '../policy/access.js';
import type { Principal } from '../policy/principal.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { badRequest, forbidden, notFound, ServiceError } from './errors.js';
import { newId, nowIso } from './ids.js';
import { requireWorkspace } from './workspaces.js';

/** Workspace-level safety acts: lockdown, elevations, git tokens. All are `+U` for humans. */

function requireStepUp(p: Principal, what: string): void {
  if (!hasStepUp(p)) {
    throw new ServiceError(403, 'step_up_required', `${what} needs a step-up within the last 5 minutes (POST /api/auth/stepup)`);
  }
}

async function requireOwnerOf(ctx: CoreContext, p: Principal, wsRef: string) {
  if (p.kind !== 'human') throw forbidden('Only a signed-in owner may do this', 'session_required');
  const ws = await requireWorkspace(ctx.store.db, wsRef);
  const m = await ctx.store.db
    .selectFrom('members')
    .select('role')
    .where('workspace_id', '=', ws.id)
    .where('principal_id', '=', p.id)
    .executeTakeFirst();
  if (!m) throw notFound(`Workspace ${wsRef} not found`, 'workspace_not_found');
  if (m.role !== 'owner') throw forbidden('Only a workspace owner may do this');
  return ws;
}

/**
 * Lockdown: bumps the token epoch (every agent key, git token and OAuth token minted
 * before dies at once) and drops every session of the workspace's members but the caller's.
 */
export async function lockdown(ctx: CoreContext, p: Principal, wsRef: string): Promise<{ workspace: string; token_epoch: number; sessions_dropped: number }> {
  const ws = await requireOwnerOf(ctx, p, wsRef);
  requireStepUp(p, 'Lockdown');
  return inTransaction(ctx.store, ws.id, async (trx) => {
    const cur = await trx.selectFrom('workspaces').select('token_epoch').where('id', '=', ws.id).executeTakeFirstOrThrow();
    const epoch = cur.token_epoch + 1;
    await trx.updateTable('workspaces').set({ token_epoch: epoch }).where('id', '=', ws.id).execute();
    const now = nowIso();
    const dropped = await trx
      .updateTable('sessions')
      .set({ revoked_at: now })
      .where('revoked_at', 'is', null)
      .where('id', '!=', p.sessionId ?? '')
      .where('principal_id', 'in', (eb) => eb.selectFrom('members').select('principal_id').where('workspace_id', '=', ws.id))
      .executeTakeFirst();
    const n = Number(dropped.numUpdatedRows);
    await appendAudit(trx, ws.id, { principalId: p.id, action: 'workspace.lockdown', detail: { token_epoch: epoch, sessions_dropped: n } });
    return { workspace: ws.slug, token_epoch: epoch, sessions_dropped: n };
  });
}

/** Elevations are bounded (docs/decisions.md): 1 to 480 minutes, 60 by default. */
export const ELEVATION_MAX_MINUTES = 480;

export interface ElevationRecord {
  id: string;
  agent_id: string;
  reason: string;
  created_at: string;
  expires_at: string;
}

/** Raises one agent to secret until the stated time: the only way an agent reads secret. */
export async function elevate(
  ctx: CoreContext,
  p: Principal,
  input: { agent_id: string; minutes: number; reason: string },
): Promise<ElevationRecord> {
  await requireOwnerOf(ctx, p, p.workspaceId);
  requireStepUp(p, 'An elevation');
  if (input.minutes < 1 || input.minutes > ELEVATION_MAX_MINUTES) {
    throw badRequest(`minutes must be between 1 and ${ELEVATION_MAX_MINUTES}`);
  }
  const agent = await ctx.store.db
    .selectFrom('principals')
    .select('id')
    .where('id', '=', input.agent_id)
    .where('kind', '=', 'agent')
    .where('workspace_id', '=', p.workspaceId)
    .where('deleted_at', 'is', null)
    .executeTakeFirst();
  if (!agent) throw notFound(`Agent ${input.agent_id} not found`);
  const now = new Date();
  const rec = {
    id: `el_${newId.key().slice(3)}`,
    agent_id: agent.id,
    reason: input.reason,
    created_at: now.toISOString(),
    expires_at: new Date(now.getTime() + input.minutes * 60_000).toISOString(),
  };
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    await trx.insertInto('elevations').values({ ...rec, workspace_id: p.workspaceId, granted_by: p.id, revoked_at: null }).execute();
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'agent.elevate', detail: { agent: agent.id, until: rec.expires_at, reason: input.reason } });
  });
  return rec;
}

/** Git tokens live at most a year; 365 days is the default (spec §8). */
export const GIT_TOKEN_MAX_DAYS = 365;

export interface GitTokenRecord {
  id: string;
  name: string;
  hint: string;
  created_at: string;
  expires_at: string;
}

/** A human mints a git token for themselves in the current workspace; shown once. */
export async function mintGitToken(
  ctx: CoreContext,
  p: Principal,
  input: { name: string; expires_in_days: number },
): Promise<GitTokenRecord & { token: string }> {
  if (p.kind !== 'human') throw forbidden('Git tokens are for humans', 'session_required');
  requireStepUp(p, 'Minting a git token');
  if (input.expires_in_days < 1 || input.expires_in_days > GIT_TOKEN_MAX_DAYS) {
    throw badRequest(`expires_in_days must be between 1 and ${GIT_TOKEN_MAX_DAYS}`);
  }
  const token = newSecret('gt_');
  const now = new Date();
  const rec = {
    id: `gk_${newId.key().slice(3)}`,
    name: input.name,
    hint: secretHint(token),
    created_at: now.toISOString(),
    expires_at: new Date(now.getTime() + input.expires_in_days * 86_400_000).toISOString(),
  };
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const ws = await trx.selectFrom('workspaces').select('token_epoch').where('id', '=', p.workspaceId).executeTakeFirstOrThrow();
    await trx
      .insertInto('git_tokens')
      .values({ ...rec, principal_id: p.id, workspace_id: p.workspaceId, token_hash: hashSecret(token), epoch: ws.token_epoch, revoked_at: null })
      .execute();
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'git_token.mint', detail: { token: rec.id } });
  });
  return { ...rec, token };
}
