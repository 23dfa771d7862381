import { sql } from 'kysely';
import { checkPassword } from '../auth/password-policy.js';
import { hashPassword } from '../auth/secrets.js';
import type { Principal } from '../policy/principal.js';
import type { Level } from '../policy/sensitivity.js';
import type { Executor } from '../store/db.js';
import { inTransaction } from '../store/tx.js';
import { hasAnyHuman, normalizeEmail, signup, type SignupResult } from './accounts.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { badRequest, conflict, notFound } from './errors.js';
import { nowIso } from './ids.js';
import { loadPrincipals, workspaceAgents } from './principal-loader.js';
import { mintKey, type KeyRecord } from './principals.js';
import { requireWorkspace, type WorkspaceRow } from './workspaces.js';

/**
 * What the operator's command line (src/cli/) does to accounts and keys: the acts of whoever
 * runs the service, not of a principal. They have no principal to ask policy about: holding
 * the database (the environment the server reads) is the authority. Each is audited, with the
 * operator named as `operator` in the entry's detail (the OS user and host running the CLI), so a
 * workspace's owners see in their log what was done to their members from outside.
 */
export interface OperatorActor {
  /** Who ran the command, as the audit entry records it (e.g. `root@vault-1`). */
  operator: string;
}

/** The first owner of a fresh deployment: the ordinary sign-up, refused once any human exists. */
export async function createFirstOwner(ctx: CoreContext, input: { email: string; name: string; password: string }): Promise<SignupResult> {
  if (await hasAnyHuman(ctx)) {
    throw conflict('This deployment already has an account: the first owner exists (people join by sign-up or invite)', 'conflict');
  }
  return signup(ctx, { email: input.email, name: input.name, password: input.password });
}

/** The live human with this email, or not_found naming it (the CLI asks before prompting for a password). */
export async function findHuman(db: Executor, emailRaw: string) {
  const email = normalizeEmail(emailRaw);
  const row = await db
    .selectFrom('principals')
    .select(['id', 'email', 'name', 'totp_enabled_at'])
    .where('email', '=', email)
    .where('kind', '=', 'human')
    .where('deleted_at', 'is', null)
    .executeTakeFirst();
  if (!row) throw notFound(`No account with the email ${email}`);
  return { ...row, email };
}

/**
 * Runs an operator's change to one person in one transaction that also appends an audit entry to
 * every workspace they belong to (each chain's writers locked, in id order, on PostgreSQL).
 */
async function changePerson(
  ctx: CoreContext,
  principalId: string,
  entry: { action: string; detail: Record<string, unknown> },
  change: (trx: Executor) => Promise<Record<string, unknown>>,
): Promise<{ workspaces: string[]; detail: Record<string, unknown> }> {
  return inTransaction(ctx.store, null, async (trx) => {
    const ws = await trx.selectFrom('members').select('workspace_id').where('principal_id', '=', principalId).orderBy('workspace_id').execute();
    const ids = ws.map((w) => w.workspace_id);
    if (ctx.store.dialect === 'postgres' && ids.length > 0) {
      await sql`select id from workspaces where id in (${sql.join(ids)}) order by id for update`.execute(trx);
    }
    const extra = await change(trx);
    const detail = { ...entry.detail, ...extra };
    for (const id of ids) await appendAudit(trx, id, { principalId: null, action: entry.action, detail: { ...detail, principal: principalId } });
    return { workspaces: ids, detail };
  });
}

/** Ends every live session of the person; returns how many. */
async function revokeSessions(trx: Executor, principalId: string, now: string): Promise<number> {
  const res = await trx
    .updateTable('sessions')
    .set({ revoked_at: now })
    .where('principal_id', '=', principalId)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
  return Number(res.numUpdatedRows);
}

export interface PersonReset {
  principal_id: string;
  email: string;
  sessions_revoked: number;
  /** The workspaces whose audit log got the entry. */
  audited_in: number;
}

/**
 * A locked-out person gets a new password: the password policy of sign-up applies, every session
 * of theirs ends, and the per-account back-off is cleared so they can sign in at once.
 */
export async function operatorResetPassword(ctx: CoreContext, actor: OperatorActor, emailRaw: string, password: string): Promise<PersonReset> {
  const who = await findHuman(ctx.store.db, emailRaw);
  checkPassword(password, who.email);
  const hash = await hashPassword(password);
  const now = nowIso();
  const out = await changePerson(ctx, who.id, { action: 'operator.password_reset', detail: { email: who.email, operator: actor.operator } }, async (trx) => {
    await trx.updateTable('principals').set({ password_hash: hash }).where('id', '=', who.id).execute();
    await trx.deleteFrom('auth_failures').where('account', '=', `email:${who.email}`).execute();
    return { sessions_revoked: await revokeSessions(trx, who.id, now) };
  });
  return { principal_id: who.id, email: who.email, sessions_revoked: Number(out.detail.sessions_revoked), audited_in: out.workspaces.length };
}

/**
 * A person who lost their second factor: TOTP is switched off (they enrol again after signing in,
 * or at sign-in when REQUIRE_TOTP=on) and every session of theirs ends.
 */
export async function operatorResetTotp(ctx: CoreContext, actor: OperatorActor, emailRaw: string): Promise<PersonReset> {
  const who = await findHuman(ctx.store.db, emailRaw);
  if (!who.totp_enabled_at) throw conflict(`TOTP is not enabled for ${who.email}: nothing to reset`, 'totp_not_enrolled');
  const now = nowIso();
  const out = await changePerson(ctx, who.id, { action: 'operator.totp_reset', detail: { email: who.email, operator: actor.operator } }, async (trx) => {
    await trx.updateTable('principals').set({ totp_secret: null, totp_enabled_at: null, totp_last_step: null }).where('id', '=', who.id).execute();
    await trx.deleteFrom('auth_failures').where('account', '=', `email:${who.email}`).execute();
    return { sessions_revoked: await revokeSessions(trx, who.id, now) };
  });
  return { principal_id: who.id, email: who.email, sessions_revoked: Number(out.detail.sessions_revoked), audited_in: out.workspaces.length };
}

/** An agent of the workspace by id, or by name when exactly one agent has it. */
async function findAgent(ctx: CoreContext, ws: WorkspaceRow, idOrName: string) {
  const rows = await workspaceAgents(ctx.store.db, ws.id)
    .select(['id', 'name'])
    .where((eb) => eb.or([eb('id', '=', idOrName), eb('name', '=', idOrName)]))
    .execute();
  const byId = rows.find((r) => r.id === idOrName);
  if (byId) return byId;
  if (rows.length === 0) throw notFound(`No agent ${JSON.stringify(idOrName)} in workspace ${ws.slug}`);
  if (rows.length > 1)
    throw badRequest(`${rows.length} agents of ${ws.slug} are named ${JSON.stringify(idOrName)}: name one by id (${rows.map((r) => r.id).join(', ')})`);
  return rows[0]!;
}

/**
 * The principal an operator's command acts as in a workspace: its earliest owner (an owner may
 * do everything an operator asks of a workspace, so no rule is bypassed and no second path
 * exists; the audit entries say it was the operator).
 */
export async function workspaceOwner(ctx: CoreContext, ws: WorkspaceRow): Promise<Principal> {
  const owner = await ctx.store.db
    .selectFrom('members')
    .innerJoin('principals', 'principals.id', 'members.principal_id')
    .select('principals.id')
    .where('members.workspace_id', '=', ws.id)
    .where('members.role', '=', 'owner')
    .where('principals.deleted_at', 'is', null)
    .orderBy('members.created_at')
    .orderBy('principals.id')
    .limit(1)
    .executeTakeFirst();
  const p = owner ? (await loadPrincipals(ctx.store.db, ws.id, [owner.id])).get(owner.id) : undefined;
  if (!p) throw conflict(`Workspace ${ws.slug} has no owner to act as`, 'conflict');
  return p;
}

/**
 * Mints an agent key for the operator. The key is minted by the workspace's earliest owner, as
 * if they had done it (the same checks and the same `agent.key.mint` entry, marked
 * `via: operator` and naming the operator): an owner may manage every agent of the workspace, so
 * no rule is bypassed and no second minting path exists.
 */
export async function operatorMintKey(
  ctx: CoreContext,
  actor: OperatorActor,
  input: { workspace: string; agent: string; name: string; expires_in_days?: number | null; ceiling?: Level | null },
): Promise<{ workspace: WorkspaceRow; agent: { id: string; name: string }; owner: string; key: KeyRecord & { key: string } }> {
  const ws = await requireWorkspace(ctx.store.db, input.workspace);
  const agent = await findAgent(ctx, ws, input.agent);
  const p = await workspaceOwner(ctx, ws);
  const key = await mintKey(
    ctx,
    p,
    agent.id,
    { name: input.name, expires_in_days: input.expires_in_days ?? null, ceiling: input.ceiling ?? null },
    { via: 'operator', operator: actor.operator },
  );
  return { workspace: ws, agent, owner: p.id, key };
}

/** Records in the workspace's audit chain that an operator started an import (its pages are audited as the owner's). */
export async function auditOperatorImport(
  ctx: CoreContext,
  actor: OperatorActor,
  p: Principal,
  detail: { import: string; space: string; source: string },
): Promise<void> {
  await inTransaction(ctx.store, p.workspaceId, (trx) =>
    appendAudit(trx, p.workspaceId, { principalId: p.id, action: 'operator.import', detail: { ...detail, operator: actor.operator } }),
  );
}
