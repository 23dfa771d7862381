import type { CoreContext } from '../core/context.js';
import { newId } from '../core/ids.js';
import { hashSecret, newSecret } from './secrets.js';

/** Session lifetime (docs/decisions.md): 7 days absolute. */
export const SESSION_TTL_MS = 7 * 24 * 3600 * 1000;

export const SESSION_COOKIE = 'svc_session';
export const CSRF_COOKIE = 'svc_csrf';

export interface NewSession {
  id: string;
  token: string;
  csrf: string;
  expiresAt: Date;
}

/** Opens a server-side session; the opaque token goes in an HttpOnly cookie, only its hash is stored. */
export async function openSession(ctx: CoreContext, principalId: string, workspaceId: string): Promise<NewSession> {
  const token = newSecret('ss_');
  const csrf = newSecret('');
  const now = new Date();
  const expiresAt = new Date(now.getTime() + SESSION_TTL_MS);
  const id = newId.session();
  await ctx.store.db
    .insertInto('sessions')
    .values({
      id,
      token_hash: hashSecret(token),
      principal_id: principalId,
      workspace_id: workspaceId,
      csrf_token: csrf,
      created_at: now.toISOString(),
      last_seen_at: now.toISOString(),
      expires_at: expiresAt.toISOString(),
      revoked_at: null,
      stepup_at: null,
    })
    .execute();
  return { id, token, csrf, expiresAt };
}

export async function closeSession(ctx: CoreContext, sessionId: string): Promise<void> {
  await ctx.store.db
    .updateTable('sessions')
    .set({ revoked_at: new Date().toISOString() })
    .where('id', '=', sessionId)
    .where('revoked_at', 'is', null)
    .execute();
}
