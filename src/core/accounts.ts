import { hashPassword, verifyPassword } from '../auth/secrets.js';
import { inTransaction } from '../store/tx.js';
import { appendAudit } from './audit.js';
import type { CoreContext } from './context.js';
import { badRequest, conflict, forbidden, unauthorized } from './errors.js';
import { newId, nowIso } from './ids.js';
import { createWorkspace, type WorkspaceRow } from './workspaces.js';

export interface SignupInput {
  email: string;
  password: string;
  name: string;
  invite_token?: string | undefined;
}

/** Password policy (docs/decisions.md): 10 to 1024 characters, not all one character, not the email. */
export function checkPassword(password: string, email: string): void {
  if (password.length < 10) throw badRequest('Password must be at least 10 characters', 'weak_password');
  if (password.length > 1024) throw badRequest('Password must be at most 1024 characters', 'weak_password');
  if (new Set(password).size < 4) throw badRequest('Password must use at least 4 different characters', 'weak_password');
  if (password.toLowerCase() === email.toLowerCase()) throw badRequest('Password must not be the email address', 'weak_password');
}

export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

/** Creates a human account and its own workspace, the caller as owner. */
export async function signup(ctx: CoreContext, input: SignupInput): Promise<{ principalId: string; workspace: WorkspaceRow }> {
  if (ctx.config.signups === 'invite') {
    // Invites arrive with the identity issue; until then invite mode admits nobody.
    throw forbidden(
      input.invite_token ? 'This invite token is not valid' : 'Sign-ups need an invite on this deployment (SIGNUPS=invite)',
      input.invite_token ? 'invalid_invite' : 'invite_required',
    );
  }
  const email = normalizeEmail(input.email);
  checkPassword(input.password, email);
  const passwordHash = await hashPassword(input.password);
  const now = nowIso();
  return inTransaction(ctx.store, null, async (trx) => {
    const taken = await trx.selectFrom('principals').select('id').where('email', '=', email).executeTakeFirst();
    if (taken) throw conflict('An account with this email already exists', 'email_taken');
    const principalId = newId.principal();
    await trx
      .insertInto('principals')
      .values({
        id: principalId,
        kind: 'human',
        name: input.name.trim(),
        email,
        password_hash: passwordHash,
        workspace_id: null,
        created_by: null,
        ceiling: null,
        created_at: now,
        deleted_at: null,
      })
      .execute();
    const workspace = await createWorkspace(trx, input.name.trim() || email.split('@')[0]!, principalId, now);
    await appendAudit(trx, workspace.id, { principalId, action: 'account.signup', detail: { email } });
    return { principalId, workspace };
  });
}

// A hash to verify against when the email is unknown, so both paths take the same time.
let dummyHash: Promise<string> | undefined;

/** Checks email and password; the same error for an unknown email and a wrong password. */
export async function checkCredentials(ctx: CoreContext, emailRaw: string, password: string): Promise<string> {
  const email = normalizeEmail(emailRaw);
  const row = await ctx.store.db
    .selectFrom('principals')
    .select(['id', 'password_hash'])
    .where('email', '=', email)
    .where('kind', '=', 'human')
    .where('deleted_at', 'is', null)
    .executeTakeFirst();
  dummyHash ??= hashPassword('not-a-real-password-0');
  const ok = await verifyPassword(password, row?.password_hash ?? (await dummyHash));
  if (!row || !row.password_hash || !ok) throw unauthorized('Email or password is wrong', 'invalid_credentials');
  return row.id;
}
