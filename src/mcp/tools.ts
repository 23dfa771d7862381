import { z } from 'zod';
import { changeClusterState } from '../core/clusters.js';
import type { CoreContext } from '../core/context.js';
import { badRequest, ServiceError } from '../core/errors.js';
import { ackInbox, ACK_MAX_SEQS, INBOX_MAX_LIMIT } from '../core/inbox.js';
import { listInboxUnreadFirst } from '../core/inbox-open.js';
import { appendLog } from '../core/log.js';
import { ARCHIVE_REASONS } from '../core/pages/content.js';
import { readPage } from '../core/pages/read.js';
import type { PageRecord } from '../core/pages/record.js';
import { writePageAt } from '../core/pages/upsert.js';
import { archivePage, restorePage, type PublicOutcome } from '../core/pages/write.js';
import { describeCaller } from '../core/identity.js';
import { listPrincipals } from '../core/principals.js';
import { createPatchProposal } from '../core/proposals/patch.js';
import { createProposal } from '../core/proposals/service.js';
import { listSpaces, spaceTree } from '../core/spaces.js';
import { MAX_BODY_CHARS, MAX_MENTIONS, postMessage, THREAD_KINDS } from '../core/threads.js';
import type { Action, Principal } from '../policy/principal.js';
import { BUNDLE_DEFAULT_TOKENS, BUNDLE_MAX_TOKENS, BUNDLE_MIN_TOKENS, buildBundle } from '../retrieval/bundle.js';
import { relatedPages } from '../retrieval/related.js';
import { searchPages } from '../retrieval/search.js';
import { whoamiToolView } from '../presenters/identity.js';

/**
 * The spec's 16 MCP tools: names, arguments, ranges, defaults and grants exactly as its
 * table says. Each tool parses its arguments (zod, shared JSON Schema built once) and calls
 * the same core function as the REST route; nothing here decides who may do what.
 */

/** What a tool handler gets besides its arguments. */
export interface ToolCall {
  ctx: CoreContext;
  p: Principal;
  /** Ends long-polls when the client goes away or the server closes. */
  signal: AbortSignal | undefined;
  /** Spends the caller's bundle bucket; throws 429 `rate_limited` when it is empty. */
  spendBundle: () => Promise<void>;
}

export interface ToolDef {
  name: string;
  description: string;
  schema: z.ZodObject;
  /** The spec's Grant column; empty: any caller. */
  grants: readonly Action[];
  readOnly: boolean;
  /** Appended to a `forbidden` error of this tool (e.g. where to go instead). */
  forbiddenHint?: string;
  run(args: any, call: ToolCall): Promise<unknown>;
}

const Ref = z.string().min(1).max(1000);
const Scope = z.string().min(1).max(512).describe('Space or space/folder');

export const INBOX_MAX_WAIT_MCP_S = 20;
export const SEARCH_DEFAULT_LIMIT = 10;
export const TREE_DEFAULT_DEPTH = 3;

/** One page reference out of id / node_id / path (the spec's alternatives). */
function pageRef(a: { id?: string | undefined; node_id?: string | undefined; path?: string | undefined }, names: string): string {
  const given = [a.id, a.node_id, a.path].filter((x): x is string => x !== undefined);
  if (given.length !== 1) throw badRequest(`Name the page with exactly one of ${names}`);
  return given[0]!;
}

/** A Space or `space/folder…` scope, split as the search filters take it. */
function splitScope(scope: string | undefined): { space?: string; cluster?: string } {
  if (scope === undefined) return {};
  const s = scope.replace(/^\/+|\/+$/g, '');
  const space = s.split('/')[0]!;
  return s.includes('/') ? { space, cluster: s } : { space };
}

export function pageUrl(ctx: CoreContext, id: string): string {
  return `${ctx.config.publicUrl.replace(/\/+$/, '')}/api/v1/nodes/${encodeURIComponent(id)}`;
}

/** The page record without `body` (the content holds it already). */
function pageOut(r: PageRecord): Omit<PageRecord, 'body'> {
  const { body: _body, ...rest } = r;
  return rest;
}

/** An archive that became a proposal is reported as the spec's "else proposal" error. */
function landedOrProposed(o: PublicOutcome, what: string): unknown {
  if (o.record) return { id: o.record.id, path: o.record.path, state: o.record.state, commit_sha: o.record.commit_sha };
  throw new ServiceError(403, 'forbidden', `${what} needs the write grant; it was turned into a proposal`, { proposal: o.proposal });
}

export const TOOLS: ToolDef[] = [
  {
    name: 'context_bundle',
    description: 'Markdown bundle of the sections most relevant to an intent, ranked, deduplicated, within a token budget; one source line per section.',
    schema: z.strictObject({
      intent: z.string().min(1).max(4000),
      budget_tokens: z.number().int().min(BUNDLE_MIN_TOKENS).max(BUNDLE_MAX_TOKENS).default(BUNDLE_DEFAULT_TOKENS),
      scope: Scope.optional(),
      include_links: z.boolean().default(false),
      include_archived: z.boolean().default(false),
    }),
    grants: ['read'],
    readOnly: true,
    // The markdown alone: every section already carries its source line (path, id, commit).
    run: async (a, { ctx, p, spendBundle }) => {
      await spendBundle();
      return (await buildBundle(ctx, p, { intent: a.intent, budgetTokens: a.budget_tokens, scope: a.scope, includeLinks: a.include_links, includeArchived: a.include_archived })).markdown;
    },
  },
  {
    name: 'context_search',
    description: 'Hybrid search; one result per page with id, path, title, state, score and snippet. Archived pages only with include_archived.',
    schema: z.strictObject({
      query: z.string().min(1).max(4000),
      scope: Scope.optional(),
      tags: z.array(z.string().min(1).max(200)).max(50).optional().describe('All must match'),
      limit: z.number().int().min(1).max(50).default(SEARCH_DEFAULT_LIMIT),
      include_archived: z.boolean().default(false),
    }),
    grants: ['search'],
    readOnly: true,
    run: async (a, { ctx, p }) => {
      const r = await searchPages(ctx, p, { q: a.query, ...splitScope(a.scope), tags: a.tags, mode: 'hybrid', limit: a.limit, includeArchived: a.include_archived });
      return {
        mode_used: r.mode_used,
        results: r.results.map((h) => ({ id: h.id, path: h.path, title: h.title, state: h.state, score: h.score, section: h.section, snippet: h.snippet })),
      };
    },
  },
  {
    name: 'context_get',
    description: 'A page by id or path: full markdown redacted to your ceiling, with state, last_touched_at and commit_sha (pass it as base_sha when writing).',
    schema: z.strictObject({
      id: Ref.optional(),
      node_id: Ref.optional().describe('Alias of id'),
      path: Ref.optional(),
      section: z.string().min(1).max(300).optional().describe('Heading text'),
    }),
    grants: ['read'],
    readOnly: true,
    run: async (a, { ctx, p }) => pageOut(await readPage(ctx, p, pageRef(a, 'id, node_id or path'), { section: a.section })),
  },
  {
    name: 'context_tree',
    description: 'Folder tree with summaries and pages under a Space or space/folder path; without path, the Spaces.',
    schema: z.strictObject({
      path: z.string().min(1).max(512).optional(),
      depth: z.number().int().min(0).max(10).default(TREE_DEFAULT_DEPTH),
      include_archived: z.boolean().default(false),
    }),
    grants: ['read'],
    readOnly: true,
    run: async (a, { ctx, p }) => {
      if (a.path === undefined) return { spaces: await listSpaces(ctx, p) };
      const s = a.path.replace(/^\/+|\/+$/g, '');
      const space = s.split('/')[0]!;
      const rest = s.slice(space.length + 1);
      return spaceTree(ctx, p, space, { path: rest || undefined, depth: a.depth, includeArchived: a.include_archived });
    },
  },
  {
    name: 'context_related',
    description: "A page's links, backlinks, folder neighbours and pages sharing tags.",
    schema: z.strictObject({ id: Ref.optional(), node_id: Ref.optional().describe('Alias of id') }),
    grants: ['read'],
    readOnly: true,
    run: async (a, { ctx, p }) => relatedPages(ctx, p, pageRef(a, 'id or node_id')),
  },
  {
    name: 'context_propose',
    description:
      'Queue a change for human review: full content, or a unified-diff patch of an existing page. A free path proposes a new page. Pass base_sha (the commit_sha or content_hash you read): the reviewer then merges your change with what others changed since; without it, your content is taken as a change of the page as it is now.',
    schema: z.strictObject({
      path: Ref.optional(),
      id: Ref.optional(),
      content: z.string().min(1).optional(),
      patch: z.string().min(1).optional().describe('Unified diff against the version you read (base_sha), else the current content'),
      reason: z.string().max(2000).optional(),
      base_sha: z.string().min(7).max(64).optional().describe('commit_sha or content_hash of the version you read'),
    }),
    grants: ['propose'],
    readOnly: false,
    run: async (a, { ctx, p }) => {
      const ref = pageRef(a, 'path or id');
      if ((a.content === undefined) === (a.patch === undefined)) throw badRequest('Send exactly one of content or patch');
      const pr =
        a.patch !== undefined
          ? await createPatchProposal(ctx, p, { ref, patch: a.patch, reason: a.reason, baseSha: a.base_sha })
          : await createProposal(ctx, p, { ...(a.id !== undefined ? { node_id: a.id } : { path: a.path }), content: a.content, reason: a.reason, base_sha: a.base_sha });
      return { proposal: { id: pr.id, status: pr.status, kind: pr.kind, path: pr.path, node_id: pr.node_id, base_hash: pr.base_hash, base_commit: pr.base_commit } };
    },
  },
  {
    name: 'context_write',
    description: 'Commit full markdown (frontmatter included) to a path, creating or replacing the page. Pass base_sha (content_hash or commit_sha you read): concurrent edits then merge, or become a proposal.',
    schema: z.strictObject({
      path: z.string().min(1).max(512),
      content: z.string().min(1),
      message: z.string().max(2000).optional().describe('Commit message'),
      base_sha: z.string().min(7).max(64).optional(),
    }),
    grants: ['write'],
    readOnly: false,
    forbiddenHint: 'use context_propose',
    run: async (a, { ctx, p }) => {
      const r = await writePageAt(ctx, p, { path: a.path, content: a.content, baseSha: a.base_sha, message: a.message });
      const rec = r.record;
      return { id: rec.id, path: rec.path, created: r.created, changed: r.changed, merged: r.merged, commit_sha: rec.commit_sha, content_hash: rec.content_hash, state: rec.state };
    },
  },
  {
    name: 'context_log',
    description: 'Append one entry to log.md of a Space or space/folder.',
    schema: z.strictObject({ entry: z.string().min(1).max(10_000), scope: Scope }),
    grants: ['propose'],
    readOnly: false,
    run: async (a, { ctx, p }) => appendLog(ctx, p, { scope: a.scope, entry: a.entry }),
  },
  {
    name: 'context_archive',
    description: 'Archive a page (id) or every page of a folder (cluster_path space/folder). Without write it becomes a proposal.',
    schema: z.strictObject({
      id: Ref.optional(),
      node_id: Ref.optional().describe('Alias of id'),
      cluster_path: z.string().min(1).max(512).optional(),
      reason: z.enum(ARCHIVE_REASONS).default('manual'),
    }),
    grants: ['write', 'propose'],
    readOnly: false,
    run: async (a, { ctx, p }) => {
      if (a.cluster_path !== undefined) {
        if (a.id !== undefined || a.node_id !== undefined) throw badRequest('Send either id/node_id or cluster_path');
        return changeClusterState(ctx, p, a.cluster_path, 'archive', a.reason);
      }
      return landedOrProposed(await archivePage(ctx, p, pageRef(a, 'id, node_id or cluster_path'), a.reason), 'Archiving');
    },
  },
  {
    name: 'context_restore',
    description: 'Return an archived page (id) or every archived page of a folder (cluster_path) to active.',
    schema: z.strictObject({ id: Ref.optional(), node_id: Ref.optional().describe('Alias of id'), cluster_path: z.string().min(1).max(512).optional() }),
    grants: ['write'],
    readOnly: false,
    run: async (a, { ctx, p }) => {
      if (a.cluster_path !== undefined) {
        if (a.id !== undefined || a.node_id !== undefined) throw badRequest('Send either id/node_id or cluster_path');
        return changeClusterState(ctx, p, a.cluster_path, 'restore');
      }
      return landedOrProposed(await restorePage(ctx, p, pageRef(a, 'id, node_id or cluster_path')), 'Restoring');
    },
  },
  {
    name: 'collab_post',
    description: "Post to a page's thread. Mentions (principal id or @name) reach their inbox; after 4 agent hops the thread locks.",
    schema: z.strictObject({
      node: Ref.describe('Page id or path'),
      body: z.string().min(1).max(MAX_BODY_CHARS),
      kind: z.enum(THREAD_KINDS).default('comment'),
      reply_to: z.string().min(1).max(100).optional().describe('Message id'),
      mentions: z.array(z.string().min(1).max(200)).max(MAX_MENTIONS).optional(),
    }),
    grants: ['collab'],
    readOnly: false,
    run: async (a, { ctx, p }) => {
      if (a.body.trim() === '') throw badRequest('The body must not be blank');
      const m = await postMessage(ctx, p, a.node, { body: a.body, kind: a.kind, reply_to: a.reply_to, mentions: a.mentions ?? [] });
      return { id: m.id, seq: m.seq, mentions: m.mentions, thread: m.thread };
    },
  },
  {
    name: 'collab_inbox',
    description: 'Your events (mentions, replies, proposals, conflicts), unread first; unread ones returned become read. wait_s long-polls.',
    schema: z.strictObject({
      after: z.number().int().min(0).default(0).describe('Only events with a greater seq'),
      wait_s: z.number().int().min(0).max(INBOX_MAX_WAIT_MCP_S).default(0),
      limit: z.number().int().min(1).max(INBOX_MAX_LIMIT).default(50),
    }),
    grants: [],
    readOnly: true,
    run: async (a, { ctx, p, signal }) => listInboxUnreadFirst(ctx, p, { after: a.after, limit: a.limit, waitMs: a.wait_s * 1000, signal }),
  },
  {
    name: 'collab_ack',
    description: 'Mark inbox events done: up_to (every seq up to it) or seqs.',
    schema: z.strictObject({
      up_to: z.number().int().min(0).optional(),
      seqs: z.array(z.number().int().min(1)).max(ACK_MAX_SEQS).optional(),
    }),
    grants: [],
    readOnly: false,
    run: async (a, { ctx, p }) => ackInbox(ctx, p, { up_to: a.up_to, seqs: a.seqs }),
  },
  {
    name: 'context_whoami',
    description: 'Your identity, workspace, ceiling and grants, and the principals you can mention.',
    schema: z.strictObject({}),
    grants: [],
    readOnly: true,
    run: async (_a, { ctx, p }) =>
      whoamiToolView(
        await describeCaller(ctx, p),
        (await listPrincipals(ctx, p)).filter((x) => x.id !== p.id).map((x) => ({ id: x.id, name: x.name, kind: x.kind })),
      ),
  },
  {
    name: 'search',
    description: 'Search pages; one result per page with id, title and url. Use fetch with the id for the text.',
    schema: z.strictObject({ query: z.string().min(1).max(4000) }),
    grants: ['search'],
    readOnly: true,
    run: async (a, { ctx, p }) => {
      const r = await searchPages(ctx, p, { q: a.query, mode: 'hybrid', limit: SEARCH_DEFAULT_LIMIT, includeArchived: false });
      return { results: r.results.map((h) => ({ id: h.id, title: h.title, url: pageUrl(ctx, h.id) })) };
    },
  },
  {
    name: 'fetch',
    description: 'Full text of a page by the id search returned, redacted to your ceiling.',
    schema: z.strictObject({ id: Ref }),
    grants: ['read'],
    readOnly: true,
    run: async (a, { ctx, p }) => {
      const r = await readPage(ctx, p, a.id);
      return {
        id: r.id,
        title: r.title,
        text: r.content,
        url: pageUrl(ctx, r.id),
        metadata: { path: r.path, state: r.state, commit_sha: r.commit_sha, last_touched_at: r.last_touched_at, redacted: r.redacted },
      };
    },
  },
];
