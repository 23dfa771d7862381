import { z } from 'zod';
import { listChanges } from '../../core/changes.js';
import { ChangesCursor, changesLimit } from '../../core/changes-input.js';
import { EditText, PatchText, SectionName } from '../../core/pages/edit-input.js';
import { editPage } from '../../core/pages/edit-modes.js';
import { CommitMessage, PageRef, PATH_MAX_CHARS, SECTION_MAX_CHARS, Sha } from '../../core/pages/input.js';
import { pageDiff, pageHistory, readPage } from '../../core/pages/read.js';
import { movePage } from '../../core/pages/write.js';
import { changesToolView, diffToolView, editToolView, historyToolView, moveToolView } from '../../presenters/extended.js';
import { readToolView } from '../../presenters/pages.js';
import { pageRef, Scope, tool, type ToolDef } from './define.js';

/**
 * The extended toolset's page calls (issue 13, beyond the spec; served at `/mcp?toolset=extended`):
 * edits that do not resend the page, move, history, diff, a read at a commit, and the changes
 * feed. Each parses its arguments and calls the same core function as its REST twin; the
 * decisions are core's and policy's.
 */

const Ref = {
  id: PageRef.optional(),
  node_id: PageRef.optional().describe('Alias of id'),
  path: PageRef.optional(),
};
const REF_NAMES = 'id, node_id or path';
const BaseSha = Sha.optional().describe('commit_sha or content_hash you read: edits by others since are merged, a clash becomes a proposal');
const PROPOSE_HINT = 'without write, use context_propose (it takes a patch too)';
/** The two kinds of tool here: edits (write grant; without it, point to context_propose) and reads. */
const WRITES = { grants: ['write'], readOnly: false, forbiddenHint: PROPOSE_HINT } as const satisfies Partial<ToolDef>;
const READS = { grants: ['read'], readOnly: true } as const satisfies Partial<ToolDef>;

export const EXTENDED_PAGE_TOOLS: ToolDef[] = [
  tool({
    name: 'context_append',
    description:
      'Add text at the end of a page, or at the end of a section (heading text) without resending the page. Same merge rules as context_write (pass base_sha).',
    schema: z.strictObject({
      ...Ref,
      text: EditText.min(1),
      section: SectionName.optional().describe('Heading text; the end of the page without it'),
      base_sha: BaseSha,
      message: CommitMessage,
    }),
    ...WRITES,
    run: async (a, { ctx, p }) =>
      editToolView(await editPage(ctx, p, pageRef(a, REF_NAMES), { kind: 'append', text: a.text, section: a.section }, { baseSha: a.base_sha }, a.message)),
  }),
  tool({
    name: 'context_replace_section',
    description:
      "Replace what is under a heading (its sub-sections included, as context_get's section shows it); the heading line stays. Same merge rules as context_write (pass base_sha).",
    schema: z.strictObject({
      ...Ref,
      section: SectionName,
      text: EditText.describe('New text under the heading; empty clears it'),
      base_sha: BaseSha,
      message: CommitMessage,
    }),
    ...WRITES,
    run: async (a, { ctx, p }) =>
      editToolView(
        await editPage(ctx, p, pageRef(a, REF_NAMES), { kind: 'replace_section', section: a.section, text: a.text }, { baseSha: a.base_sha }, a.message),
      ),
  }),
  tool({
    name: 'context_patch',
    description: 'Apply a unified diff to a page (made against the version you read: pass its base_sha; changes by others since are merged).',
    schema: z.strictObject({
      ...Ref,
      patch: PatchText.describe('Unified diff of the page content, frontmatter included'),
      base_sha: BaseSha,
      message: CommitMessage,
    }),
    ...WRITES,
    run: async (a, { ctx, p }) =>
      editToolView(await editPage(ctx, p, pageRef(a, REF_NAMES), { kind: 'patch', patch: a.patch }, { baseSha: a.base_sha }, a.message)),
  }),
  tool({
    name: 'context_move',
    description: 'Move a page to a new path (its id stays). A move that lets more agents read it becomes a proposal (proposed: true).',
    schema: z.strictObject({ ...Ref, to: z.string().min(1).max(PATH_MAX_CHARS).describe('New path: space/folder/name.md'), message: CommitMessage }),
    grants: ['write'],
    readOnly: false,
    run: async (a, { ctx, p }) => moveToolView(await movePage(ctx, p, pageRef(a, REF_NAMES), a.to, a.message)),
  }),
  tool({
    name: 'context_changes',
    description:
      'What changed since your last call: pages created, changed, moved, archived, restored or deleted, oldest first, with commit, time and author. Pass next as since to catch up.',
    schema: z.strictObject({ scope: Scope.optional(), since: ChangesCursor.optional(), limit: changesLimit(z.number()) }),
    ...READS,
    run: async (a, { ctx, p }) => changesToolView(await listChanges(ctx, p, { scope: a.scope, since: a.since, limit: a.limit })),
  }),
  tool({
    name: 'context_history',
    description: "A page's versions, newest first: commit, action, path, author, message. before pages back.",
    schema: z.strictObject({
      ...Ref,
      limit: z.number().int().min(1).max(200).default(20),
      before: Sha.optional().describe('next_before of the previous call'),
    }),
    ...READS,
    run: async (a, { ctx, p }) => historyToolView(await pageHistory(ctx, p, pageRef(a, REF_NAMES), { limit: a.limit, before: a.before })),
  }),
  tool({
    name: 'context_diff',
    description: 'Unified diff of a page between two commits (default: the latest change). Needs secret-level read.',
    schema: z.strictObject({
      ...Ref,
      from: Sha.optional().describe('Commit; default the version before to'),
      to: Sha.optional().describe('Commit; default the latest'),
    }),
    ...READS,
    run: async (a, { ctx, p }) => diffToolView(await pageDiff(ctx, p, pageRef(a, REF_NAMES), { from: a.from, to: a.to })),
  }),
  tool({
    name: 'context_get_at',
    description: 'A page as it was at a commit (from context_history or context_changes), redacted to your ceiling.',
    schema: z.strictObject({
      ...Ref,
      at: Sha.describe('Commit sha (7+ hex)'),
      section: z.string().min(1).max(SECTION_MAX_CHARS).optional().describe('Heading text'),
    }),
    ...READS,
    run: async (a, { ctx, p }) => readToolView(await readPage(ctx, p, pageRef(a, REF_NAMES), { at: a.at, section: a.section }), a.section),
  }),
];
