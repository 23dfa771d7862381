import type { AuditEntryRecord, AuditPage, BrokenLink } from '../core/audit.js';

/** The audit log as the REST face (and the command line) shows it; one source: core/audit.ts. */

export function auditEntryView(e: AuditEntryRecord) {
  return { seq: e.seq, at: e.at, actor: e.actor, action: e.action, target: e.target, detail: e.detail, prev_hash: e.prev_hash, hash: e.hash };
}

/** `GET /api/v1/audit`: newest first; `next_cursor` is null on the last page. */
export function auditPageView(p: AuditPage) {
  return { items: p.items.map(auditEntryView), next_cursor: p.next_cursor };
}

/** `GET /api/v1/audit/verify`. */
export function auditVerifyView(r: { ok: boolean; entries: number; first_broken: BrokenLink | null }) {
  return { ok: r.ok, entries: r.entries, first_broken: r.first_broken };
}
