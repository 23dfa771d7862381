import crypto from 'node:crypto';
import type { Executor } from '../store/db.js';
import type { AuditLogTable } from '../store/schema.js';

export interface AuditInput {
  principalId: string | null;
  action: string;
  pageId?: string | null;
  detail?: Record<string, unknown>;
}

const GENESIS = '0'.repeat(64);

/** The columns of an entry that its hash covers. */
type HashedEntry = Pick<AuditLogTable, 'seq' | 'at' | 'principal_id' | 'action' | 'node_id' | 'detail'>;

/** The hash of an entry covers its predecessor's hash, so any edit or removal breaks the chain. */
export function auditHash(prevHash: string, entry: HashedEntry): string {
  const canonical = JSON.stringify([prevHash, entry.seq, entry.at, entry.principal_id, entry.action, entry.node_id, entry.detail]);
  return crypto.createHash('sha256').update(canonical).digest('hex');
}

/** Appends one entry to the workspace's chain; call inside the mutation's transaction. */
export async function appendAudit(trx: Executor, workspaceId: string, input: AuditInput, at = new Date()): Promise<void> {
  const last = await trx
    .selectFrom('audit_log')
    .select(['seq', 'hash'])
    .where('workspace_id', '=', workspaceId)
    .orderBy('seq', 'desc')
    .limit(1)
    .executeTakeFirst();
  const entry = {
    seq: (last?.seq ?? 0) + 1,
    at: at.toISOString(),
    principal_id: input.principalId,
    action: input.action,
    node_id: input.pageId ?? null,
    detail: JSON.stringify(input.detail ?? {}),
  };
  const prevHash = last?.hash ?? GENESIS;
  await trx
    .insertInto('audit_log')
    .values({ workspace_id: workspaceId, ...entry, prev_hash: prevHash, hash: auditHash(prevHash, entry) })
    .execute();
}

/** Walks the chain and returns the first broken seq, or null when it is intact. */
export async function verifyAuditChain(db: Executor, workspaceId: string): Promise<number | null> {
  const rows = await db.selectFrom('audit_log').selectAll().where('workspace_id', '=', workspaceId).orderBy('seq').execute();
  let prev = GENESIS;
  for (const r of rows) {
    if (r.prev_hash !== prev || auditHash(prev, r) !== r.hash) return r.seq;
    prev = r.hash;
  }
  return null;
}
