import type { Transaction } from 'kysely';
import { parseDocument, serializeDocument } from '../../markdown/index.js';
import { assertFrontmatterDepth } from '../../markdown/frontmatter.js';
import { canReadInFull, decideWrite, enforce } from '../../policy/pages.js';
import { decidePartialEdit } from '../../policy/edits.js';
import { decideWriteOrPropose } from '../../policy/proposals.js';
import type { Principal } from '../../policy/principal.js';
import { findReadablePage } from '../../retrieval/lookup.js';
import type { DB, PagesTable } from '../../store/schema.js';
import { inTransaction } from '../../store/tx.js';
import type { CoreContext } from '../context.js';
import { conflict } from '../errors.js';
import { pushEvents } from '../inbox-events.js';
import { mergePage } from '../merge.js';
import { parsePagePath } from '../paths.js';
import { highest, insertProposal, presentProposal } from '../proposals/record.js';
import { invalidBase, readableBase, type BaseVersion } from './base.js';
import { analyzeContent } from './content.js';
import { conflictHunks, conflictMessage, conflictNextStep } from './conflict.js';
import { applyEdit, type EditMode } from './edit-apply.js';
import { commitPage, facts, rowFacts } from './persist.js';
import { presentPage } from './record.js';
import type { Proposed, WriteResult } from './write.js';

/** PUT and PATCH: preconditions, three-way merge of stale writes, conflicts as proposals. */

export interface Precondition {
  ifMatch?: string | undefined;
  baseSha?: string | undefined;
}

function unquote(tag: string): string {
  return tag
    .trim()
    .replace(/^W\//, '')
    .replace(/^"(.*)"$/, '$1');
}

/** Whether the writer's precondition names the head (true), an older state (false), or nothing (null). */
function preconditionMatches(current: PagesTable, pre: Precondition): boolean | null {
  let seen: boolean | null = null;
  if (pre.ifMatch !== undefined) {
    const tags = pre.ifMatch.split(',').map(unquote);
    seen = tags.includes('*') || tags.includes(current.content_hash);
  }
  if (pre.baseSha !== undefined) {
    const b = pre.baseSha.trim().toLowerCase();
    seen = (seen ?? true) && (b === current.content_hash || b === current.commit_sha);
  }
  return seen;
}

/**
 * The version the writer started from: the first named (If-Match tags, then base_sha) that is a
 * version of this page the caller may read in full. A stale precondition that names no such
 * version is refused (400 invalid_base) — never merged, never kept as a proposal — so an
 * unknown sha and a hidden version's sha answer alike, and hidden text never enters a merge.
 */
async function baseVersion(trx: Transaction<DB>, p: Principal, current: PagesTable, pre: Precondition): Promise<BaseVersion> {
  const candidates = [
    ...(pre.ifMatch ?? '')
      .split(',')
      .map(unquote)
      .filter((t) => t && t !== '*'),
    ...(pre.baseSha ? [pre.baseSha.trim().toLowerCase()] : []),
  ];
  for (const c of candidates) {
    const v = await readableBase(trx, p, current, c);
    if (v) return v;
  }
  throw invalidBase(candidates[0] ?? '');
}

export type PageUpdate =
  | { kind: 'replace'; content: string }
  /** An edit in place (append, replace a section, a unified diff): core/pages/edit-apply.ts. */
  | { kind: 'edit'; mode: EditMode }
  | {
      kind: 'fields';
      title?: string | undefined;
      body?: string | undefined;
      /** Keys to set; a null value removes the key. */
      frontmatter?: Record<string, unknown> | undefined;
      /** PUT with fields replaces the whole frontmatter; PATCH merges it. */
      mergeFrontmatter: boolean;
    };

export function applyUpdate(currentRaw: string, u: PageUpdate, where = 'the page'): string {
  if (u.kind === 'replace') return u.content;
  if (u.kind === 'edit') return applyEdit(currentRaw, u.mode, where);
  assertFrontmatterDepth(u.frontmatter);
  const doc = parseDocument(currentRaw);
  let fm: Record<string, unknown>;
  if (u.mergeFrontmatter) {
    fm = { ...doc.frontmatter };
    for (const [k, v] of Object.entries(u.frontmatter ?? {})) {
      if (v === null) delete fm[k];
      else fm[k] = v;
    }
  } else {
    fm = { ...(u.frontmatter ?? {}) };
  }
  if (u.title !== undefined) fm.title = u.title;
  else if (!u.mergeFrontmatter && doc.frontmatter.title !== undefined && u.frontmatter?.title === undefined) fm.title = doc.frontmatter.title;
  const body = u.body ?? doc.body;
  return serializeDocument(fm, body);
}

export interface UpdateResult extends WriteResult {
  /** True when a stale write was merged with the changes made since its base. */
  merged: boolean;
}

/**
 * PUT and PATCH. Without a precondition the last writer wins. With one that names the head
 * the write lands. With a stale one the write is merged three-way with what changed since
 * its base: a clean merge lands as a commit; a conflict lands nowhere but in a proposal
 * (holding the writer's content and base) and a `conflict` event for the writer, and the
 * caller gets 409 `conflict` carrying that proposal.
 */
export async function updatePage(ctx: CoreContext, p: Principal, ref: string, update: PageUpdate, pre: Precondition, message?: string): Promise<UpdateResult> {
  const r = await writeUpdate(ctx, p, ref, update, pre, message, { allowPropose: false });
  if ('proposal' in r) throw new Error('unreachable: a proposal where none was allowed');
  return r;
}

/** PUT and PATCH over REST: as updatePage, and an agent without write but with propose proposes (202). */
export function updateOrProposePage(
  ctx: CoreContext,
  p: Principal,
  ref: string,
  update: PageUpdate,
  pre: Precondition,
  message?: string,
): Promise<UpdateResult | Proposed> {
  return writeUpdate(ctx, p, ref, update, pre, message, { allowPropose: true });
}

async function writeUpdate(
  ctx: CoreContext,
  p: Principal,
  ref: string,
  update: PageUpdate,
  pre: Precondition,
  message: string | undefined,
  opts: { allowPropose: boolean },
): Promise<UpdateResult | Proposed> {
  const result = await inTransaction(ctx.store, p.workspaceId, async (trx) => {
    const current = await findReadablePage(trx, p, ref);
    const target = parsePagePath(current.path);
    // An edit in place works on the whole text: only on a page the caller reads whole.
    if (update.kind === 'edit') enforce(decidePartialEdit(p, rowFacts(current)));
    if (opts.allowPropose) {
      // An agent without write but with propose (REST): its change, built from the version it
      // read, becomes an `edit` proposal on that base; accepting merges it three-way.
      const stale = preconditionMatches(current, pre) === false;
      const base = stale ? await baseVersion(trx, p, current, pre) : { content: current.content, blobSha: current.content_hash, commitSha: current.commit_sha };
      const theirs = applyUpdate(base.content, update, `${current.path} at commit ${base.commitSha}`);
      const content = analyzeContent(theirs, target.slug);
      if (decideWriteOrPropose(p, rowFacts(current), facts(current.path, content), { proposers: 'agents', carriesContent: true }).kind === 'propose') {
        if (theirs === current.content) {
          throw conflict(`The change is identical to the current content of ${current.path} (commit ${current.commit_sha}); nothing to review`, 'no_change');
        }
        const proposal = await insertProposal(ctx, trx, p, {
          kind: 'edit',
          origin: 'no_write',
          pageId: current.id,
          path: current.path,
          content: theirs,
          baseHash: base.blobSha,
          baseCommit: base.commitSha,
          reason: message ?? `Edit ${current.path}`,
          sensitivity: highest(current.sensitivity, current.block_level, content.sensitivity, content.blockLevel),
        });
        return { kind: 'proposed' as const, proposal };
      }
    }
    let raw: string;
    let merged = false;
    if (preconditionMatches(current, pre) === false) {
      const base = await baseVersion(trx, p, current, pre);
      const theirs = applyUpdate(base.content, update, `${current.path} at commit ${base.commitSha}`);
      const content = analyzeContent(theirs, target.slug);
      // Only a writer may have a conflict kept as a proposal: check the write first.
      enforce(decideWrite(p, rowFacts(current), facts(current.path, content)));
      const m = mergePage(base.content, current.content, theirs);
      if (m.kind === 'conflict') {
        const proposal = await insertProposal(ctx, trx, p, {
          kind: 'edit',
          origin: 'conflict',
          pageId: current.id,
          path: current.path,
          content: theirs,
          baseHash: base.blobSha,
          baseCommit: base.commitSha,
          reason: m.reason,
          sensitivity: highest(current.sensitivity, current.block_level, content.sensitivity, content.blockLevel),
        });
        await pushEvents(ctx, trx, p.workspaceId, [
          {
            principalId: p.id,
            kind: 'conflict',
            pageId: current.id,
            proposalId: proposal.id,
            payload: { proposal_id: proposal.id, page_id: current.id, path: current.path, reason: proposal.reason },
          },
        ]);
        return {
          kind: 'conflict' as const,
          proposal,
          current,
          hunks: conflictHunks(m.conflicts, canReadInFull(p, rowFacts(current))),
          clashes: m.conflicts.length,
        };
      }
      raw = m.content;
      merged = true;
    } else {
      raw = applyUpdate(current.content, update, `${current.path} at commit ${current.commit_sha}`);
    }
    const content = analyzeContent(raw, target.slug);
    enforce(decideWrite(p, rowFacts(current), facts(current.path, content)));
    if (raw === current.content) return { kind: 'ok' as const, row: current, changed: false, merged };
    return {
      kind: 'ok' as const,
      row: await commitPage(ctx, trx, p, { action: 'update', existing: current, target, content, message }),
      changed: true,
      merged,
    };
  });
  if (result.kind === 'proposed') return { proposal: presentProposal(p, result.proposal) };
  if (result.kind === 'conflict') {
    const { proposal, current, hunks, clashes } = result;
    // Issue 13: the head, the clashing lines (redacted to the caller) and the next step.
    throw conflict(conflictMessage(current.commit_sha, hunks, clashes, proposal.id), 'conflict', {
      proposal: presentProposal(p, proposal),
      // The head's validator as this caller sees it (a redacted view's `r-…`, never the blob sha of hidden text).
      current: { content_hash: presentPage(p, current).content_hash, commit_sha: current.commit_sha },
      hunks,
      next_step: conflictNextStep(current.commit_sha, proposal.id),
    });
  }
  return { record: presentPage(p, result.row), changed: result.changed, merged: result.merged };
}

/** A change either landed, or (the spec's "else proposal") became a proposal. */
