import type { ChangesPage } from '../core/changes.js';
import type { HistoryEntry } from '../core/pages/read.js';
import type { PublicOutcome, UpdateResult } from '../core/pages/write.js';
import type { ProposalRecord } from '../core/proposals/record.js';
import { proposalToolView } from './proposals.js';

/**
 * What the extended MCP toolset (issue 13, beyond the spec) answers, cut from the same records
 * the REST routes send: only what an agent acts on next (ids, paths, commits, states).
 */

/** `context_append` / `context_replace_section` / `context_patch`: where the page is now and what the edit did. */
export function editToolView(r: UpdateResult) {
  const rec = r.record;
  return { id: rec.id, path: rec.path, changed: r.changed, merged: r.merged, commit_sha: rec.commit_sha, content_hash: rec.content_hash, state: rec.state };
}

/** `context_move`: the page at its new path, or (a move that widens who reads it) the proposal made instead, as a success. */
export function moveToolView(o: PublicOutcome) {
  if (o.record) return { id: o.record.id, path: o.record.path, commit_sha: o.record.commit_sha, proposed: false as const };
  return { proposed: true as const, ...proposalToolView(o.proposal!) };
}

/** `context_history`: the versions, newest first, with the cursor for older ones. */
export function historyToolView(h: { id: string; versions: HistoryEntry[]; next_before: string | null }) {
  return h;
}

/** `context_diff`: the unified diff and the two commits (the sides' full texts are left out: the diff holds the change). */
export function diffToolView(d: { id: string; from: string | null; to: string; diff: string }) {
  return { id: d.id, from: d.from, to: d.to, diff: d.diff };
}

/** `context_changes`: as REST sends it. */
export function changesToolView(c: ChangesPage) {
  return c;
}

/** `context_proposals` / `context_withdraw`: a proposal's state and outcome, without the texts. */
export function proposalStatusView(pr: ProposalRecord) {
  return {
    id: pr.id,
    status: pr.status,
    kind: pr.kind,
    origin: pr.origin,
    path: pr.path,
    node_id: pr.node_id,
    reason: pr.reason,
    created_at: pr.created_at,
    decided_at: pr.decided_at,
    decision_reason: pr.decision_reason,
    result_commit: pr.result_commit,
    superseded_by: pr.superseded_by,
  };
}
