import crypto from 'node:crypto';
import { sql, type CompiledQuery } from 'kysely';
import { decideAuditRead } from '../policy/audit.js';
import type { Principal } from '../policy/principal.js';
import type { Executor } from '../store/db.js';
import { builtOnce } from '../store/built-once.js';
import { lockedState, noteLocked } from '../store/tx.js';
import type { AuditLogTable } from '../store/schema.js';
import { AUDIT_LIMITS, type AuditQuery } from './audit-input.js';
import type { CoreContext } from './context.js';
import { badRequest } from './errors.js';
import { SEQ_MAX } from './ids.js';

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
  await appendAuditMany(trx, workspaceId, [input], at);
}

/** Appends entries in order, chained, in a few statements (an import's batch); same transaction rule. */
export async function appendAuditMany(trx: Executor, workspaceId: string, inputs: readonly AuditInput[], at = new Date()): Promise<void> {
  for (const insert of await auditInserts(trx, workspaceId, inputs, at)) await trx.executeQuery(insert);
}

/**
 * The statements appending entries (appendAuditMany), for the caller to run before anything
 * else reads the log (store/carried.ts): the chain's tail moves on now, as if they had run.
 */
export async function auditInserts(trx: Executor, workspaceId: string, inputs: readonly AuditInput[], at = new Date()): Promise<CompiledQuery[]> {
  if (inputs.length === 0) return [];
  // Under PostgreSQL's workspace lock the tail was read with the lock (store/tx.ts).
  const locked = lockedState(trx, workspaceId);
  const last = locked ? (locked.auditTail ?? undefined) : await auditTail.first(trx, { workspaceId });
  let seq = last?.seq ?? 0;
  let prevHash = last?.hash ?? GENESIS;
  const rows = inputs.map((input) => {
    const entry = {
      seq: ++seq,
      at: at.toISOString(),
      principal_id: input.principalId,
      action: input.action,
      node_id: input.pageId ?? null,
      detail: JSON.stringify(input.detail ?? {}),
    };
    const row = { workspace_id: workspaceId, ...entry, prev_hash: prevHash, hash: auditHash(prevHash, entry) };
    prevHash = row.hash;
    return row;
  });
  const inserts: CompiledQuery[] = [];
  for (let i = 0; i < rows.length; i += 500) inserts.push(insertEntries.compiled(trx, rows.slice(i, i + 500)));
  noteLocked(trx, workspaceId, { auditTail: { seq, hash: prevHash } });
  return inserts;
}

const auditTail = builtOnce((db, v: { workspaceId: string }) =>
  db.selectFrom('audit_log').select(['seq', 'hash']).where('workspace_id', '=', v.workspaceId).orderBy('seq', 'desc').limit(1),
);
const insertEntries = builtOnce((db, rows: AuditLogTable[]) => db.insertInto('audit_log').values(rows));

/** Where a chain first breaks: the entry whose stored hashes do not follow from its predecessor. */
export interface BrokenLink {
  seq: number;
  at: string;
  action: string;
}

/**
 * Walks a workspace's chain oldest first, in keyset batches (a million entries are never in memory
 * at once). An edited entry breaks at itself; a removed one breaks at its successor (whose
 * prev_hash names the entry that is gone). Removing the newest entries leaves a shorter, intact
 * chain: only a copy of the last hash kept elsewhere shows that (docs/decisions.md "Audit log").
 */
export async function walkAuditChain(db: Executor, workspaceId: string): Promise<{ entries: number; firstBroken: BrokenLink | null }> {
  let prev = GENESIS;
  let prevSeq = 0;
  let entries = 0;
  let firstBroken: BrokenLink | null = null;
  for (;;) {
    const rows = await db
      .selectFrom('audit_log')
      .selectAll()
      .where('workspace_id', '=', workspaceId)
      .where('seq', '>', prevSeq)
      .orderBy('seq')
      .limit(AUDIT_LIMITS.verifyBatch)
      .execute();
    for (const r of rows) {
      entries += 1;
      if (!firstBroken && (r.prev_hash !== prev || auditHash(prev, r) !== r.hash)) firstBroken = { seq: r.seq, at: r.at, action: r.action };
      // Go on from what the entry says of itself, so each later entry is judged on its own link.
      prev = r.hash;
      prevSeq = r.seq;
    }
    if (rows.length < AUDIT_LIMITS.verifyBatch) return { entries, firstBroken };
  }
}

/** Walks the chain and returns the first broken seq, or null when it is intact. */
export async function verifyAuditChain(db: Executor, workspaceId: string): Promise<number | null> {
  return (await walkAuditChain(db, workspaceId)).firstBroken?.seq ?? null;
}

/** One entry as an owner reads it. */
export interface AuditEntryRecord {
  seq: number;
  at: string;
  /** Null for the service's own acts (an expired OAuth grant, a scheduled run). */
  actor: { id: string; kind: 'human' | 'agent' | null; name: string | null } | null;
  action: string;
  /** The page (by id) and/or the path the entry is about, when it is about one. */
  target: { node_id: string | null; path: string | null } | null;
  detail: Record<string, unknown>;
  prev_hash: string;
  hash: string;
}

export interface AuditPage {
  items: AuditEntryRecord[];
  next_cursor: string | null;
}

const CURSOR_PREFIX = 'a1:';

function encodeCursor(seq: number): string {
  return Buffer.from(`${CURSOR_PREFIX}${seq}`, 'utf8').toString('base64url');
}

function decodeCursor(cursor: string): number {
  const m = /^a1:(\d{1,15})$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  const seq = m ? Number(m[1]) : NaN;
  if (!/^[A-Za-z0-9_-]+$/.test(cursor) || !Number.isSafeInteger(seq) || seq > SEQ_MAX) {
    throw badRequest('cursor is not one this log returned: send next_cursor of your previous call as given, or omit it', 'invalid_cursor');
  }
  return seq;
}

/** The stored detail is JSON text; an entry edited into something else is shown as it is, not dropped. */
function parseDetail(text: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(text);
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    /* shown raw below */
  }
  return { unparsed: text };
}

function targetOf(nodeId: string | null, detail: Record<string, unknown>): AuditEntryRecord['target'] {
  const place = [detail.path, detail.cluster, detail.space].find((v): v is string => typeof v === 'string') ?? null;
  return nodeId === null && place === null ? null : { node_id: nodeId, path: place };
}

/**
 * The workspace's audit log, newest first, for its owners (spec GET /api/v1/audit). Filters
 * narrow by actor, action (exact, or a prefix ending in "." or ".*") and page; the cursor is the
 * last seq returned, so pages stay stable while new entries arrive.
 */
export async function listAudit(ctx: CoreContext, p: Principal, q: AuditQuery): Promise<AuditPage> {
  const d = decideAuditRead(p);
  if (d.kind === 'deny') throw d.error;
  let query = ctx.store.db
    .selectFrom('audit_log as a')
    .leftJoin('principals as pr', 'pr.id', 'a.principal_id')
    .select(['a.seq', 'a.at', 'a.principal_id', 'a.action', 'a.node_id', 'a.detail', 'a.prev_hash', 'a.hash', 'pr.kind', 'pr.name'])
    .where('a.workspace_id', '=', p.workspaceId);
  if (q.cursor !== undefined) query = query.where('a.seq', '<', decodeCursor(q.cursor));
  if (q.principal !== undefined) query = query.where('a.principal_id', '=', q.principal);
  if (q.node !== undefined) query = query.where('a.node_id', '=', q.node);
  if (q.action !== undefined) {
    const prefix = q.action.endsWith('*') ? q.action.slice(0, -1) : q.action.endsWith('.') ? q.action : null;
    // substr, not LIKE: `_` is a wildcard to LIKE, and SQLite's LIKE ignores case.
    query = prefix === null ? query.where('a.action', '=', q.action) : query.where(sql<string>`substr(a.action, 1, ${prefix.length})`, '=', prefix);
  }
  const rows = await query
    .orderBy('a.seq', 'desc')
    .limit(q.limit + 1)
    .execute();
  const page = rows.slice(0, q.limit);
  const items = page.map((r): AuditEntryRecord => {
    const detail = parseDetail(r.detail);
    return {
      seq: r.seq,
      at: r.at,
      actor: r.principal_id === null ? null : { id: r.principal_id, kind: r.kind ?? null, name: r.name ?? null },
      action: r.action,
      target: targetOf(r.node_id, detail),
      detail,
      prev_hash: r.prev_hash,
      hash: r.hash,
    };
  });
  const last = page.at(-1);
  return { items, next_cursor: rows.length > q.limit && last ? encodeCursor(last.seq) : null };
}

/** The owner's check of the whole chain (spec: "a verification walks the chain and names the first broken link"). */
export async function verifyAudit(ctx: CoreContext, p: Principal): Promise<{ ok: boolean; entries: number; first_broken: BrokenLink | null }> {
  const d = decideAuditRead(p);
  if (d.kind === 'deny') throw d.error;
  const { entries, firstBroken } = await walkAuditChain(ctx.store.db, p.workspaceId);
  return { ok: firstBroken === null, entries, first_broken: firstBroken };
}
