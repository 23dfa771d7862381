import { z } from 'zod';
import { ACTIONS } from '../policy/principal.js';
import { LEVELS } from '../policy/sensitivity.js';
import { PageRef } from '../core/pages/input.js';
import type { TreeFolder } from '../core/spaces.js';

/**
 * Shared request and response schemas of the REST face; the OpenAPI document is generated from them.
 * The error body and the body helpers every JSON face uses are in shared/schemas.ts. The fields of
 * an action's input and their limits are the action's own, beside its core function (e.g.
 * core/pages/input.ts, retrieval/search-input.ts), shared with the MCP tools.
 */

export const Level = z.enum(LEVELS);

/** A time, as the service writes every one: ISO 8601 in UTC (`2025-01-31T12:00:00.000Z`). */
export const Timestamp = z.string();

/** `:id` of the page routes. */
export const PageRefParams = z.object({ id: PageRef.describe('A page id (pg_…) or its URL-encoded path') });

/** The id of a record (an agent, a key, a proposal, a session, a workspace…). */
export const RecordId = z.string().min(1).max(100);

/** `:id` of a record named by its id. */
export const IdParams = z.object({ id: RecordId });

/** What revoking a key or a session answers. */
export const RevokedSchema = z.object({ revoked: z.literal(true), id: z.string() });

export const GrantSchema = z.strictObject({
  action: z.enum(ACTIONS),
  scope: z.string().min(1).max(512).describe('`*`, `<space>` or `<space>/<folder>`'),
  ceiling: Level.default('internal'),
});

export const LinkSchema = z.object({
  target: z.string(),
  kind: z.enum(['wiki', 'markdown']),
  text: z.string(),
});

export const PageRecordSchema = z.object({
  id: z.string(),
  path: z.string(),
  space: z.string(),
  cluster_path: z.string(),
  title: z.string(),
  content: z.string().describe('Full markdown including frontmatter, redacted to your ceiling'),
  body: z.string(),
  frontmatter: z.record(z.string(), z.unknown()),
  tags: z.array(z.string()),
  links: z.array(LinkSchema),
  sensitivity: z.string(),
  state: z.string(),
  archived_reason: z.string().nullable(),
  archived_at: Timestamp.nullable(),
  commit_sha: z.string(),
  content_hash: z.string().describe('git blob sha of the raw content (of a redacted view: `r-` and a hash of what you see); the ETag is this value quoted'),
  redacted: z.boolean(),
  created_at: Timestamp,
  updated_at: Timestamp,
  last_touched_at: Timestamp.nullable(),
  created_by: z.string(),
  updated_by: z.string(),
  section: z.string().optional(),
});

export const WriteResultSchema = PageRecordSchema.extend({
  changed: z.boolean().describe('false when the write changed nothing and made no commit'),
  merged: z.boolean().describe('true when a stale write was merged three-way with the changes made since its base'),
});

export const ProposalSchema = z.object({
  id: z.string(),
  status: z.enum(['open', 'accepted', 'rejected', 'superseded']),
  kind: z.enum(['edit', 'create', 'archive', 'move', 'delete']),
  origin: z.enum(['propose', 'conflict', 'no_write', 'step_up']),
  target: z.object({ node_id: z.string().nullable(), path: z.string() }),
  node_id: z.string().nullable(),
  path: z.string(),
  content: z.string().nullable().describe('The proposed markdown; null for agents (full content only for humans)'),
  base_hash: z.string().nullable(),
  base_commit: z.string().nullable().describe('The version the proposal was based on (what its proposer read); accepting merges from it'),
  params: z.record(z.string(), z.unknown()),
  reason: z.string(),
  proposer: z.string(),
  created_at: Timestamp,
  decided_by: z.string().nullable(),
  decided_at: Timestamp.nullable(),
  decision_reason: z.string().nullable(),
  result_commit: z.string().nullable(),
  superseded_by: z.string().nullable(),
});

/** What an action that the caller may only propose answers (202). */
export const ProposedSchema = z.object({
  proposed: z.literal(true),
  proposal: ProposalSchema,
});

export const AgentSchema = z.object({
  id: z.string(),
  kind: z.literal('agent'),
  name: z.string(),
  ceiling: z.string(),
  creator: z.string().nullable(),
  grants: z.array(z.object({ action: z.string(), scope: z.string(), ceiling: z.string() })),
  created_at: Timestamp,
  suspended_at: Timestamp.nullable().describe('Set while suspended: its creator left the workspace; an owner adopts it'),
});

export const PrincipalSummarySchema = z.object({
  id: z.string(),
  name: z.string(),
  kind: z.enum(['human', 'agent']),
  email: z.string().nullable().optional(),
  role: z.string().optional(),
  ceiling: z.string().nullable().optional(),
  creator: z.string().nullable().optional(),
  created_at: Timestamp.optional(),
  suspended_at: Timestamp.nullable().optional(),
});

export const KeySchema = z.object({
  id: z.string(),
  name: z.string(),
  hint: z.string(),
  ceiling: z.string().nullable(),
  ip_pin: z.string().nullable(),
  expires_at: Timestamp.nullable(),
  revoked_at: Timestamp.nullable(),
  created_at: Timestamp,
  last_used_at: Timestamp.nullable(),
});

export const SpaceSchema = z.object({ id: z.string(), name: z.string(), summary: z.string(), created_at: Timestamp });

/** The tree's folder as core builds it (core/spaces.ts); the schema below describes it for OpenAPI. */
export type TreeFolderShape = TreeFolder;

export const TreeFolderSchema: z.ZodType<TreeFolderShape> = z.lazy(() =>
  z.object({
    path: z.string(),
    name: z.string(),
    summary: z.string(),
    archived: z.boolean(),
    auto_archive_days: z.number().nullable().describe('Lifecycle: untouched this many days makes a page an auto-archive candidate; null unset'),
    half_life_days: z.number().nullable().describe('Search freshness half-life of this folder; null unset (the nearest ancestor that sets one applies)'),
    page_count: z.number(),
    folders: z.array(TreeFolderSchema),
    pages: z.array(z.object({ id: z.string(), path: z.string(), title: z.string(), state: z.string(), sensitivity: z.string(), updated_at: Timestamp })),
    truncated: z.boolean().optional(),
  }),
);

/** Query-string booleans: `true`/`1` and `false`/`0`. */
export const QueryBool = z.enum(['true', 'false', '1', '0']).transform((v) => v === 'true' || v === '1');
