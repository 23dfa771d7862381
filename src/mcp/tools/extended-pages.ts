import { z } from 'zod';
import { listChanges } from '../../core/changes.js';
import { ChangesCursor, changesLimit } from '../../core/changes-input.js';
import { EditText, PatchText, SectionName } from '../../core/pages/edit-input.js';
import { editPage, type EditMode } from '../../core/pages/edit-modes.js';
import { CommitMessage, PageRef, PATH_MAX_CHARS, SECTION_MAX_CHARS, Sha } from '../../core/pages/input.js';
import { pageDiff, pageHistory, readPage } from '../../core/pages/read.js';
import { movePage } from '../../core/pages/write.js';
import { changesToolView, diffToolView, editToolView, historyToolView, moveToolView } from '../../presenters/extended.js';
import { readToolView } from '../../presenters/pages.js';
import { pageRef, Scope, tool, type ToolCall, type ToolDef } from './define.js';

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

/**
 * A tool on one page: the page is named by id, node_id or path (the schema's first fields), and
 * `run` gets the one named, with the tool's own arguments.
 */
function pageTool<F extends z.ZodRawShape>(
  t: Omit<ToolDef, 'schema' | 'run'> & {
    fields: F;
    run(ref: string, args: z.infer<z.ZodObject<typeof Ref & F>>, call: ToolCall): Promise<unknown>;
  },
): ToolDef {
  const { fields, run, ...rest } = t;
  // The parsed arguments hold Ref's fields; TypeScript cannot see that through the generic F.
  const named = (a: object) => pageRef(a as z.infer<z.ZodObject<typeof Ref>>, REF_NAMES);
  return tool({ ...rest, schema: z.strictObject({ ...Ref, ...fields }), run: (a, call) => run(named(a), a, call) });
}

/** What every edit takes after its own fields. */
const EDIT_FIELDS = { base_sha: BaseSha, message: CommitMessage };

/**
 * An edit of one page without resending it: the edit's own fields, then base_sha and message;
 * `edit` turns the arguments into editPage's mode.
 */
function editTool<F extends z.ZodRawShape>(t: { name: string; description: string; fields: F; edit(args: z.infer<z.ZodObject<F>>): EditMode }): ToolDef {
  return pageTool({
    name: t.name,
    description: t.description,
    fields: { ...t.fields, ...EDIT_FIELDS },
    ...WRITES,
    run: async (ref, a, { ctx, p }) => {
      // The parsed arguments are F's and EDIT_FIELDS'; TypeScript cannot follow that through the generic F.
      const args = a as z.infer<z.ZodObject<F>> & z.infer<z.ZodObject<typeof EDIT_FIELDS>>;
      return editToolView(await editPage(ctx, p, ref, t.edit(args), { baseSha: args.base_sha }, args.message));
    },
  });
}

export const EXTENDED_PAGE_TOOLS: ToolDef[] = [
  editTool({
    name: 'context_append',
    description:
      'Add text at the end of a page, or at the end of a section (heading text) without resending the page. Same merge rules as context_write (pass base_sha).',
    fields: { text: EditText.min(1), section: SectionName.optional().describe('Heading text; the end of the page without it') },
    edit: (a) => ({ kind: 'append', text: a.text, section: a.section }),
  }),
  editTool({
    name: 'context_replace_section',
    description:
      "Replace what is under a heading (its sub-sections included, as context_get's section shows it); the heading line stays. Same merge rules as context_write (pass base_sha).",
    fields: { section: SectionName, text: EditText.describe('New text under the heading; empty clears it') },
    edit: (a) => ({ kind: 'replace_section', section: a.section, text: a.text }),
  }),
  editTool({
    name: 'context_patch',
    description: 'Apply a unified diff to a page (made against the version you read: pass its base_sha; changes by others since are merged).',
    fields: { patch: PatchText.describe('Unified diff of the page content, frontmatter included') },
    edit: (a) => ({ kind: 'patch', patch: a.patch }),
  }),
  pageTool({
    name: 'context_move',
    description: 'Move a page to a new path (its id stays). A move that lets more agents read it becomes a proposal (proposed: true).',
    fields: { to: z.string().min(1).max(PATH_MAX_CHARS).describe('New path: space/folder/name.md'), message: CommitMessage },
    grants: ['write'],
    readOnly: false,
    run: async (ref, a, { ctx, p }) => moveToolView(await movePage(ctx, p, ref, a.to, a.message)),
  }),
  tool({
    name: 'context_changes',
    description:
      'What changed since your last call: pages created, changed, moved, archived, restored or deleted, oldest first, with commit, time and author. Pass next as since to catch up.',
    schema: z.strictObject({ scope: Scope.optional(), since: ChangesCursor.optional(), limit: changesLimit(z.number()) }),
    ...READS,
    run: async (a, { ctx, p }) => changesToolView(await listChanges(ctx, p, { scope: a.scope, since: a.since, limit: a.limit })),
  }),
  pageTool({
    name: 'context_history',
    description: "A page's versions, newest first: commit, action, path, author, message. before pages back.",
    fields: {
      limit: z.number().int().min(1).max(200).default(20),
      before: Sha.optional().describe('next_before of the previous call'),
    },
    ...READS,
    run: async (ref, a, { ctx, p }) => historyToolView(await pageHistory(ctx, p, ref, { limit: a.limit, before: a.before })),
  }),
  pageTool({
    name: 'context_diff',
    description: 'Unified diff of a page between two commits (default: the latest change). Needs secret-level read.',
    fields: {
      from: Sha.optional().describe('Commit; default the version before to'),
      to: Sha.optional().describe('Commit; default the latest'),
    },
    ...READS,
    run: async (ref, a, { ctx, p }) => diffToolView(await pageDiff(ctx, p, ref, { from: a.from, to: a.to })),
  }),
  pageTool({
    name: 'context_get_at',
    description: 'A page as it was at a commit (from context_history or context_changes), redacted to your ceiling.',
    fields: {
      at: Sha.describe('Commit sha (7+ hex)'),
      section: z.string().min(1).max(SECTION_MAX_CHARS).optional().describe('Heading text'),
    },
    ...READS,
    run: async (ref, a, { ctx, p }) => readToolView(await readPage(ctx, p, ref, { at: a.at, section: a.section }), a.section),
  }),
];
