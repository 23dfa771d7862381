import { z } from 'zod';
import { changeFolderState } from '../../core/folders.js';
import { badRequest } from '../../core/errors.js';
import { ackInbox } from '../../core/inbox.js';
import { AckSeqs, AckUpTo, inboxAfter, inboxLimit } from '../../core/inbox-input.js';
import { listInboxUnreadFirst } from '../../core/inbox-open.js';
import { appendLog, MAX_LOG_ENTRY_CHARS } from '../../core/log.js';
import { ArchiveReasonInput, CommitMessage, PageRef, PATH_MAX_CHARS, SECTION_MAX_CHARS, Sha } from '../../core/pages/input.js';
import { readPage } from '../../core/pages/read.js';
import { writePageAt } from '../../core/pages/upsert.js';
import { archivePage, restorePage, type PublicOutcome } from '../../core/pages/write.js';
import { describeCaller } from '../../core/identity.js';
import { listPrincipals } from '../../core/principals.js';
import { ProposalReason } from '../../core/proposals/input.js';
import { createPatchProposal } from '../../core/proposals/patch.js';
import { createProposal } from '../../core/proposals/service.js';
import { listSpaces, spaceTree } from '../../core/spaces.js';
import { MessageBody, MessageId, MessageKind, mentionList } from '../../core/thread-input.js';
import { postMessage } from '../../core/threads.js';
import { treeDepth } from '../../core/tree-input.js';
import { readBundle } from '../../core/bundle-read.js';
import { budgetTokens, bundleOptions, IntentText } from '../../retrieval/bundle-input.js';
import { relatedPages } from '../../retrieval/related.js';
import { searchPages } from '../../retrieval/search.js';
import { AtCommit, QueryText, SEARCH_DEFAULT_LIMIT, SEARCH_MAX_TAGS, searchLimit, TAG_MAX_CHARS } from '../../retrieval/search-input.js';
import { whoamiToolView } from '../../presenters/identity.js';
import { inboxToolView } from '../../presenters/inbox.js';
import { fetchToolView, readToolView, stateToolView, writeToolView } from '../../presenters/pages.js';
import { proposalToolView, proposedToolView } from '../../presenters/proposals.js';
import { searchConnectorView, searchToolView } from '../../presenters/search.js';
import { spacesView } from '../../presenters/spaces.js';
import { postToolView } from '../../presenters/threads.js';
import { INBOX_MAX_WAIT_MCP_S, J, out, pageRef, Scope, splitScope, tool, type ToolDef } from './define.js';

/**
 * The spec's 16 MCP tools: names, arguments, ranges, defaults and grants exactly as its
 * table says. Each tool parses its arguments (zod, shared JSON Schema built once) and calls
 * the same core function as the REST route; nothing here decides who may do what. The field
 * schemas and limits are the actions' own (beside their core functions: core/pages/input.ts,
 * retrieval/search-input.ts, …), shared with the REST routes; the answers are cut by the
 * presenters (src/presenters/).
 */

/**
 * An archive (or restore) that became a proposal is a success: the change is queued for review
 * as the spec's "else proposal" says, and the agent reads `proposed: true` and the proposal,
 * not an error it might retry.
 */
function landedOrProposed(o: PublicOutcome): unknown {
  if (o.record) return stateToolView(o.record);
  if (o.proposal) return proposedToolView(o.proposal);
  // Cannot happen (the core answers one or the other); logged as unexpected if it ever does.
  throw new Error('The change neither landed nor became a proposal');
}

/** Archive and restore act on one page (id, or its alias node_id) or on every page of a folder. */
const PageOrFolder = {
  id: PageRef.optional(),
  node_id: PageRef.optional().describe('Alias of id'),
  cluster_path: z.string().min(1).max(PATH_MAX_CHARS).optional(),
};

export const SPEC_TOOLS: ToolDef[] = [
  tool({
    name: 'context_bundle',
    description:
      'Start here: markdown of the sections most relevant to an intent, ranked, deduplicated, within budget_tokens (tokens used shown); grouped by page under one source line (path, id, short commit) to cite.',
    schema: z.strictObject({
      intent: IntentText.min(1),
      budget_tokens: budgetTokens(z.number()),
      scope: Scope.optional(),
      include_links: z.boolean().default(false),
      include_archived: z.boolean().default(false),
      at: AtCommit.optional().describe('Answer from the workspace as it was at this commit (the bundle states the commit it used)'),
    }),
    grants: ['read'],
    readOnly: true,
    // The markdown alone: every section already carries its source line (path, id, commit).
    run: async (a, { ctx, p, spendBundle }) => {
      await spendBundle();
      return (await readBundle(ctx, p, bundleOptions(a))).markdown;
    },
  }),
  tool({
    name: 'context_search',
    description:
      'Hybrid search; one result per page with id, path, title, state, score and snippet. Archived pages only with include_archived. Prefer it to search.',
    schema: z.strictObject({
      query: QueryText.min(1),
      scope: Scope.optional(),
      tags: z.array(z.string().min(1).max(TAG_MAX_CHARS)).max(SEARCH_MAX_TAGS).optional().describe('All must match'),
      limit: searchLimit(z.number()),
      include_archived: z.boolean().default(false),
      at: AtCommit.optional().describe('Search the workspace as it was at this commit'),
    }),
    grants: ['search'],
    readOnly: true,
    output: out({ results: J.arr }),
    run: async (a, { ctx, p }) =>
      searchToolView(
        await searchPages(ctx, p, {
          q: a.query,
          ...splitScope(a.scope),
          tags: a.tags,
          mode: 'hybrid',
          limit: a.limit,
          includeArchived: a.include_archived,
          at: a.at,
        }),
      ),
  }),
  tool({
    name: 'context_get',
    description:
      'A page by id or path (space/folder/page.md): markdown redacted to your ceiling, with state and commit_sha (pass it as base_sha when writing); with section, only that section. Prefer it to fetch.',
    schema: z.strictObject({
      id: PageRef.optional(),
      node_id: PageRef.optional().describe('Alias of id'),
      path: PageRef.optional(),
      section: z.string().min(1).max(SECTION_MAX_CHARS).optional().describe('Heading text'),
    }),
    grants: ['read'],
    readOnly: true,
    output: out({ id: J.str, path: J.str, commit_sha: J.str }),
    run: async (a, { ctx, p }) => {
      const r = await readPage(ctx, p, pageRef(a, 'id, node_id or path'), { section: a.section });
      return readToolView(r, a.section);
    },
  }),
  tool({
    name: 'context_tree',
    description: 'Folder tree with summaries and pages under a Space or space/folder path; without path, the Spaces.',
    schema: z.strictObject({
      path: z.string().min(1).max(PATH_MAX_CHARS).optional(),
      depth: treeDepth(z.number()),
      include_archived: z.boolean().default(false),
    }),
    grants: ['read'],
    readOnly: true,
    run: async (a, { ctx, p }) => {
      if (a.path === undefined) return spacesView(await listSpaces(ctx, p));
      const s = a.path.replace(/^\/+|\/+$/g, '');
      const space = s.split('/')[0]!;
      const rest = s.slice(space.length + 1);
      return spaceTree(ctx, p, space, { path: rest || undefined, depth: a.depth, includeArchived: a.include_archived });
    },
  }),
  tool({
    name: 'context_related',
    description: "A page's links, backlinks, folder neighbours and pages sharing tags.",
    schema: z.strictObject({ id: PageRef.optional(), node_id: PageRef.optional().describe('Alias of id') }),
    grants: ['read'],
    readOnly: true,
    output: out({ links: J.arr, backlinks: J.arr }),
    run: async (a, { ctx, p }) => relatedPages(ctx, p, pageRef(a, 'id or node_id')),
  }),
  tool({
    name: 'context_propose',
    description:
      'Queue a change for human review: full content, or a unified-diff patch of an existing page. A free path proposes a new page. Pass base_sha (the commit_sha or content_hash you read): the reviewer then merges your change with what others changed since; without it, your content is taken as a change of the page as it is now.',
    schema: z.strictObject({
      path: PageRef.optional(),
      id: PageRef.optional(),
      content: z.string().min(1).optional(),
      patch: z.string().min(1).optional().describe('Unified diff against the version you read (base_sha), else the current content'),
      reason: ProposalReason.optional(),
      base_sha: Sha.optional().describe('commit_sha or content_hash of the version you read'),
    }),
    grants: ['propose'],
    readOnly: false,
    output: out({ proposal: J.obj }),
    run: async (a, { ctx, p }) => {
      const ref = pageRef(a, 'path or id');
      const exactlyOne = badRequest('Send exactly one of content or patch');
      if (a.patch !== undefined) {
        if (a.content !== undefined) throw exactlyOne;
        return proposalToolView(await createPatchProposal(ctx, p, { ref, patch: a.patch, reason: a.reason, baseSha: a.base_sha }));
      }
      if (a.content === undefined) throw exactlyOne;
      const pr = await createProposal(ctx, p, {
        ...(a.id !== undefined ? { node_id: a.id } : { path: a.path }),
        content: a.content,
        reason: a.reason,
        base_sha: a.base_sha,
      });
      return proposalToolView(pr);
    },
  }),
  tool({
    name: 'context_write',
    description:
      'Commit full markdown (frontmatter included) to a path like space/folder/page.md, creating or replacing the page; a Space or folder that does not exist yet is created with it. Pass base_sha (the commit_sha you read): concurrent edits then merge, or become a proposal. Without write use context_propose.',
    schema: z.strictObject({
      path: z.string().min(1).max(PATH_MAX_CHARS),
      content: z.string().min(1),
      message: CommitMessage,
      base_sha: Sha.optional(),
    }),
    grants: ['write'],
    readOnly: false,
    forbiddenHint: 'use context_propose',
    output: out({ id: J.str, path: J.str, commit_sha: J.str }),
    run: async (a, { ctx, p }) => writeToolView(await writePageAt(ctx, p, { path: a.path, content: a.content, baseSha: a.base_sha, message: a.message })),
  }),
  tool({
    name: 'context_log',
    description: 'Append one entry to log.md of a Space or space/folder.',
    schema: z.strictObject({ entry: z.string().min(1).max(MAX_LOG_ENTRY_CHARS), scope: Scope }),
    grants: ['propose'],
    readOnly: false,
    run: async (a, { ctx, p }) => appendLog(ctx, p, { scope: a.scope, entry: a.entry }),
  }),
  tool({
    name: 'context_archive',
    description: 'Archive a page (id) or every page of a folder (cluster_path space/folder). Without write it becomes a proposal (result: proposed: true).',
    schema: z.strictObject({
      ...PageOrFolder,
      reason: ArchiveReasonInput,
    }),
    grants: ['write', 'propose'],
    readOnly: false,
    run: async (a, { ctx, p }) => {
      if (a.cluster_path !== undefined) {
        if (a.id !== undefined || a.node_id !== undefined) throw badRequest('Send either id/node_id or cluster_path');
        return changeFolderState(ctx, p, a.cluster_path, 'archive', a.reason);
      }
      return landedOrProposed(await archivePage(ctx, p, pageRef(a, 'id, node_id or cluster_path'), a.reason));
    },
  }),
  tool({
    name: 'context_restore',
    description: 'Return an archived page (id) or every archived page of a folder (cluster_path) to active.',
    schema: z.strictObject({
      ...PageOrFolder,
    }),
    grants: ['write'],
    readOnly: false,
    run: async (a, { ctx, p }) => {
      if (a.cluster_path !== undefined) {
        if (a.id !== undefined || a.node_id !== undefined) throw badRequest('Send either id/node_id or cluster_path');
        return changeFolderState(ctx, p, a.cluster_path, 'restore');
      }
      return landedOrProposed(await restorePage(ctx, p, pageRef(a, 'id, node_id or cluster_path')));
    },
  }),
  tool({
    name: 'collab_post',
    description: "Post to a page's thread. Mentions (principal id or @name) reach their inbox; after 4 agent hops the thread locks.",
    schema: z.strictObject({
      node: PageRef.describe('Page id or path'),
      body: MessageBody,
      kind: MessageKind,
      reply_to: MessageId.optional().describe('Message id'),
      mentions: mentionList().optional(),
    }),
    grants: ['collab'],
    readOnly: false,
    output: out({ id: J.str }),
    run: async (a, { ctx, p }) => {
      if (a.body.trim() === '') throw badRequest('The body must not be blank');
      return postToolView(await postMessage(ctx, p, a.node, { body: a.body, kind: a.kind, reply_to: a.reply_to, mentions: a.mentions ?? [] }));
    },
  }),
  tool({
    name: 'collab_inbox',
    description:
      'Your events (mentions, replies, proposals, conflicts), unread first; returned ones become read, and read ones keep coming back until you collab_ack them. wait_s long-polls.',
    schema: z.strictObject({
      after: inboxAfter(z.number()),
      wait_s: z.number().int().min(0).max(INBOX_MAX_WAIT_MCP_S).default(0),
      limit: inboxLimit(z.number()),
    }),
    grants: [],
    readOnly: true,
    output: out({ events: J.arr, next_after: J.int }),
    run: async (a, { ctx, p, signal }) =>
      inboxToolView(await listInboxUnreadFirst(ctx, p, { after: a.after, limit: a.limit, waitMs: a.wait_s * 1000, signal })),
  }),
  tool({
    name: 'collab_ack',
    description: 'Mark inbox events done: up_to (every seq up to it) or seqs.',
    schema: z.strictObject({
      up_to: AckUpTo.optional(),
      seqs: AckSeqs.optional(),
    }),
    grants: [],
    readOnly: false,
    output: out({ done: J.int }),
    run: async (a, { ctx, p }) => ackInbox(ctx, p, { up_to: a.up_to, seqs: a.seqs }),
  }),
  tool({
    name: 'context_whoami',
    description: 'Your identity, workspace, ceiling and grants, and the principals you can mention.',
    schema: z.strictObject({}),
    grants: [],
    readOnly: true,
    output: out({ id: J.str, grants: J.arr }),
    run: async (_a, { ctx, p }) => whoamiToolView(await describeCaller(ctx, p), await listPrincipals(ctx, p)),
  }),
  tool({
    name: 'search',
    description: 'Connector search (for clients expecting search/fetch): id, title and url per page; fetch gives the text. Agents: prefer context_search.',
    schema: z.strictObject({ query: QueryText.min(1) }),
    grants: ['search'],
    readOnly: true,
    output: out({ results: J.arr }),
    run: async (a, { ctx, p }) =>
      searchConnectorView(ctx.config.publicUrl, await searchPages(ctx, p, { q: a.query, mode: 'hybrid', limit: SEARCH_DEFAULT_LIMIT, includeArchived: false })),
  }),
  tool({
    name: 'fetch',
    description: 'Connector fetch: full text of a page by the id search returned, redacted to your ceiling. Agents: prefer context_get.',
    schema: z.strictObject({ id: PageRef }),
    grants: ['read'],
    readOnly: true,
    output: out({ id: J.str, text: J.str }),
    run: async (a, { ctx, p }) => fetchToolView(ctx.config.publicUrl, await readPage(ctx, p, a.id)),
  }),
];
