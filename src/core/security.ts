import { sql, type RawBuilder } from 'kysely';
import { hashSecret, newSecret, secretHint } from '../auth/secrets.js';
import { hasStepUp } from '../policy/access.js';
import type { Principal } from '../policy/principal.js';
import type { ElevationsTable, GitTokensTable } from '../store/schema.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { badRequest, conflict, forbidden, notFound, ServiceError } from './errors.js';
import { newId, nowIso } from './ids.js';
import { workspaceAgents } from './principal-loader.js';
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
  const m = await ctx.store.db.selectFrom('members').select('role').where('workspace_id', '=', ws.id).where('principal_id', '=', p.id).executeTakeFirst();
  if (!m) throw notFound(`Workspace ${wsRef} not found`, 'workspace_not_found');
  if (m.role !== 'owner') throw forbidden('Only a workspace owner may do this');
  return ws;
}

/**
 * Lockdown: bumps the token epoch (every agent key, git token and OAuth token minted
 * before dies at once), revokes pending invites and active elevations, and ends every other
 * session's access to THIS workspace: sessions created before the lockdown (but the caller's)
 * are refused here until their human signs in again, while the same sessions keep working in
 * the humans' other workspaces (sessions are per user, not per workspace).
 */
export async function lockdown(
  ctx: CoreContext,
  p: Principal,
  wsRef: string,
): Promise<{ workspace: string; token_epoch: number; sessions_dropped: number; invites_revoked: number; elevations_revoked: number }> {
  const ws = await requireOwnerOf(ctx, p, wsRef);
  requireStepUp(p, 'Lockdown');
  return inTransaction(ctx.store, ws.id, async (trx) => {
    const cur = await trx.selectFrom('workspaces').select('token_epoch').where('id', '=', ws.id).executeTakeFirstOrThrow();
    const epoch = cur.token_epoch + 1;
    const now = nowIso();
    await trx.updateTable('workspaces').set({ token_epoch: epoch, locked_at: now, locked_by_session: p.sessionId }).where('id', '=', ws.id).execute();
    // Sessions of this workspace's members that were live at the lockdown (for the audit).
    const affected = await trx
      .selectFrom('sessions')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('revoked_at', 'is', null)
      .where('expires_at', '>', now)
      .where('id', '!=', p.sessionId ?? '')
      .where('principal_id', 'in', (eb) => eb.selectFrom('members').select('principal_id').where('workspace_id', '=', ws.id))
      .executeTakeFirstOrThrow();
    // What is still live of the workspace's invites and elevations ends now too.
    const revokeLive = async (table: 'invites' | 'elevations', live: RawBuilder<unknown>) =>
      Number(
        (await sql`update ${sql.table(table)} set revoked_at = ${now} where workspace_id = ${ws.id} and revoked_at is null and ${live}`.execute(trx))
          .numAffectedRows ?? 0,
      );
    const invites = await revokeLive('invites', sql`accepted_at is null`);
    const elevations = await revokeLive('elevations', sql`expires_at > ${now}`);
    const n = Number(affected.n);
    const result = {
      workspace: ws.slug,
      token_epoch: epoch,
      sessions_dropped: n,
      invites_revoked: invites,
      elevations_revoked: elevations,
    };
    const { workspace: _w, ...detail } = result;
    await appendAudit(trx, ws.id, { principalId: p.id, action: 'workspace.lockdown', detail });
    return result;
  });
}

/** Elevations are bounded (docs/decisions.md): 1 to 480 minutes, 60 by default. */
export const ELEVATION_MAX_MINUTES = 480;

export type ElevationRecord = Pick<ElevationsTable, 'id' | 'agent_id' | 'reason' | 'created_at' | 'expires_at'>;

/**
 * An elevation must do what its name says (issue 11): while it lasts the agent reads at secret
 * within its read grants, capped only by a key's own ceiling. Refused, naming what stands in
 * the way, when it would change nothing: a suspended agent, no read grant, or keys that all
 * carry a ceiling below secret.
 */
async function assertElevationTakesEffect(ctx: CoreContext, agent: { id: string; suspended_at?: string | null }): Promise<void> {
  const ineffective = (why: string) => conflict(`The elevation would change nothing: ${why}`, 'elevation_ineffective');
  if (agent.suspended_at)
    throw ineffective(`agent ${agent.id} is suspended (its creator left the workspace); adopt it first (POST /api/v1/principals/${agent.id}/adopt)`);
  const reads = await ctx.store.db.selectFrom('grants').select('scope').where('principal_id', '=', agent.id).where('action', '=', 'read').execute();
  if (reads.length === 0)
    throw ineffective(
      `agent ${agent.id} holds no read grant, and an elevation raises reading within the agent's read grants; give it one (PUT /api/v1/principals/${agent.id}/grants)`,
    );
  const keys = await ctx.store.db
    .selectFrom('agent_keys')
    .select(['id', 'ceiling', 'expires_at'])
    .where('principal_id', '=', agent.id)
    .where('revoked_at', 'is', null)
    .execute();
  const live = keys.filter((k) => !k.expires_at || Date.parse(k.expires_at) > Date.now());
  if (live.length > 0 && live.every((k) => k.ceiling !== null && k.ceiling !== 'secret')) {
    throw ineffective(
      `every live key of agent ${agent.id} carries a ceiling below secret (${live.map((k) => `${k.id}: ${k.ceiling}`).join(', ')}); mint a key without one`,
    );
  }
}

/** Raises one agent to secret until the stated time: the only way an agent reads secret. */
export async function elevate(ctx: CoreContext, p: Principal, input: { agent_id: string; minutes: number; reason: string }): Promise<ElevationRecord> {
  await requireOwnerOf(ctx, p, p.workspaceId);
  requireStepUp(p, 'An elevation');
  if (input.minutes < 1 || input.minutes > ELEVATION_MAX_MINUTES) {
    throw badRequest(`minutes must be between 1 and ${ELEVATION_MAX_MINUTES}`);
  }
  const agent = await workspaceAgents(ctx.store.db, p.workspaceId).select(['id', 'suspended_at']).where('id', '=', input.agent_id).executeTakeFirst();
  if (!agent) throw notFound(`Agent ${input.agent_id} not found`);
  await assertElevationTakesEffect(ctx, agent);
  const now = new Date();
  const rec = {
    id: `el_${newId.key().slice(3)}`,
    agent_id: agent.id,
    reason: input.reason,
    created_at: now.toISOString(),
    expires_at: new Date(now.getTime() + input.minutes * 60_000).toISOString(),
  };
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    await trx
      .insertInto('elevations')
      .values({ ...rec, workspace_id: p.workspaceId, granted_by: p.id, revoked_at: null })
      .execute();
    await appendAudit(trx, p.workspaceId, {
      principalId: p.id,
      action: 'agent.elevate',
      detail: { agent: agent.id, until: rec.expires_at, reason: input.reason },
    });
  });
  return rec;
}

export type ElevationListing = ElevationRecord & { granted_by: string };

/**
 * The workspace's live elevations (not revoked, not yet ended), the soonest to end first. Who
 * may grant one may see them: a signed-in owner (the same check as `elevate`, no step-up: a
 * read changes nothing).
 */
export async function listElevations(ctx: CoreContext, p: Principal, now = new Date()): Promise<ElevationListing[]> {
  await requireOwnerOf(ctx, p, p.workspaceId);
  return ctx.store.db
    .selectFrom('elevations')
    .select(['id', 'agent_id', 'reason', 'created_at', 'expires_at', 'granted_by'])
    .where('workspace_id', '=', p.workspaceId)
    .where('revoked_at', 'is', null)
    .where('expires_at', '>', now.toISOString())
    .orderBy('expires_at')
    .orderBy('id')
    .execute();
}

/** Git tokens live at most a year; 365 days is the default (spec §8). */
export const GIT_TOKEN_MAX_DAYS = 365;

export type GitTokenRecord = Pick<GitTokensTable, 'id' | 'name' | 'hint' | 'created_at' | 'expires_at'>;

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

export type GitTokenListing = GitTokenRecord & { revoked_at: string | null };

/** The caller's own git tokens in the current workspace, newest first (hints only). */
export async function listGitTokens(ctx: CoreContext, p: Principal): Promise<GitTokenListing[]> {
  if (p.kind !== 'human') throw forbidden('Git tokens are for humans', 'session_required');
  return ctx.store.db
    .selectFrom('git_tokens')
    .select(['id', 'name', 'hint', 'created_at', 'expires_at', 'revoked_at'])
    .where('workspace_id', '=', p.workspaceId)
    .where('principal_id', '=', p.id)
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .execute();
}

/** Revokes one of the caller's git tokens, at once (no step-up: revoking only ever takes reach away). */
export async function revokeGitToken(ctx: CoreContext, p: Principal, tokenId: string): Promise<{ revoked: true; id: string }> {
  if (p.kind !== 'human') throw forbidden('Git tokens are for humans', 'session_required');
  await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const row = await trx
      .selectFrom('git_tokens')
      .select(['id', 'revoked_at'])
      .where('id', '=', tokenId)
      .where('workspace_id', '=', p.workspaceId)
      .where('principal_id', '=', p.id)
      .executeTakeFirst();
    if (!row) throw notFound(`Git token ${tokenId} not found`);
    if (row.revoked_at) return;
    await trx.updateTable('git_tokens').set({ revoked_at: nowIso() }).where('id', '=', tokenId).execute();
    await appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'git_token.revoke', detail: { token: tokenId } });
  });
  return { revoked: true, id: tokenId };
}
