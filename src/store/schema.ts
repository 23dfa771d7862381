import type { Generated } from 'kysely';

/**
 * Table types shared by both engines. Timestamps are ISO-8601 UTC strings
 * (`Date#toISOString()`), which sort correctly as text on SQLite and PostgreSQL;
 * booleans are 0/1 integers; JSON is stored as text.
 */
export interface WorkspacesTable {
  id: string;
  slug: string;
  name: string;
  token_epoch: number;
  created_at: string;
  /** When the last lockdown happened; sessions older than it (but the locker's) are refused here. */
  locked_at?: string | null;
  locked_by_session?: string | null;
}

export interface PrincipalsTable {
  id: string;
  kind: 'human' | 'agent';
  name: string;
  email: string | null;
  password_hash: string | null;
  /** Agents live in exactly one workspace; humans join workspaces through `members`. */
  workspace_id: string | null;
  created_by: string | null;
  /** Agents only: the agent's own ceiling. */
  ceiling: string | null;
  created_at: string;
  deleted_at: string | null;
  totp_secret: string | null;
  totp_enabled_at: string | null;
  totp_last_step: number | null;
  /** Agents: set while suspended (its creator left the workspace) until an owner adopts it. */
  suspended_at?: string | null;
}

export interface MembersTable {
  workspace_id: string;
  principal_id: string;
  role: 'owner' | 'editor' | 'viewer';
  created_at: string;
}

export interface SessionsTable {
  id: string;
  token_hash: string;
  principal_id: string;
  workspace_id: string;
  csrf_token: string;
  created_at: string;
  last_seen_at: string;
  expires_at: string;
  revoked_at: string | null;
  stepup_at: string | null;
  /** Set while the session waits for its second factor: 'totp' or 'totp_enroll'. */
  pending: string | null;
}

/**
 * A secret minted for one principal in one workspace (agent keys, git tokens): stored as its
 * SHA-256 and shown by its hint; it holds while `epoch` is the workspace's token epoch.
 */
interface MintedTokenColumns {
  id: string;
  principal_id: string;
  workspace_id: string;
  name: string;
  token_hash: string;
  hint: string;
  epoch: number;
  created_at: string;
  revoked_at: string | null;
}

export interface AgentKeysTable extends MintedTokenColumns {
  ceiling: string | null;
  ip_pin: string | null;
  expires_at: string | null;
  last_used_at: string | null;
}

export interface GrantsTable {
  principal_id: string;
  position: number;
  action: string;
  scope: string;
  ceiling: string;
}

export interface SpacesTable {
  workspace_id: string;
  id: string;
  name: string;
  summary: string;
  created_at: string;
}

export interface FoldersTable {
  workspace_id: string;
  /** `<space>/<folder>[/<sub>…]` */
  path: string;
  space: string;
  summary: string;
  auto_archive_days: number | null;
  half_life_days: number | null;
  archived: number;
  created_at: string;
}

export interface PagesTable {
  id: string;
  workspace_id: string;
  path: string;
  space: string;
  cluster_path: string;
  title: string;
  content: string;
  content_hash: string;
  commit_sha: string;
  sensitivity: string;
  /** Highest level of any `::: level` block in the page, or null. */
  block_level: string | null;
  state: 'active' | 'archived';
  frontmatter: string;
  tags: string;
  links: string;
  created_at: string;
  updated_at: string;
  last_touched_at: string | null;
  created_by: string;
  updated_by: string;
  deleted_at: string | null;
}

export interface CommitsTable {
  workspace_id: string;
  seq: number;
  sha: string;
  parent_sha: string | null;
  principal_id: string;
  message: string;
  created_at: string;
}

export interface PageVersionsTable {
  workspace_id: string;
  page_id: string;
  commit_seq: number;
  commit_sha: string;
  path: string;
  /** null when this version deletes the page */
  blob_sha: string | null;
  action: string;
  sensitivity: string;
  block_level: string | null;
  principal_id: string;
  message: string;
  created_at: string;
}

export interface GitObjectsTable {
  workspace_id: string;
  sha: string;
  type: 'blob' | 'tree' | 'commit';
  /** zlib-deflated body; for a delta tree, the deflated delta against base_sha */
  data: Buffer;
  base_sha: string | null;
  depth: number;
}

export interface GitRefsTable {
  workspace_id: string;
  name: string;
  sha: string;
}

export interface AuditLogTable {
  workspace_id: string;
  seq: number;
  at: string;
  principal_id: string | null;
  action: string;
  node_id: string | null;
  detail: string;
  prev_hash: string;
  hash: string;
}

export interface InvitesTable {
  id: string;
  workspace_id: string;
  token_hash: string;
  role: 'owner' | 'editor' | 'viewer';
  email: string | null;
  created_by: string;
  created_at: string;
  expires_at: string;
  revoked_at: string | null;
  accepted_at: string | null;
  accepted_by: string | null;
}

export interface ElevationsTable {
  id: string;
  workspace_id: string;
  agent_id: string;
  granted_by: string;
  reason: string;
  created_at: string;
  expires_at: string;
  revoked_at: string | null;
}

export interface GitTokensTable extends MintedTokenColumns {
  expires_at: string;
}

export interface AuthFailuresTable {
  /** `email:<normalised email>` */
  account: string;
  failures: number;
  last_failure_ms: number | string;
  blocked_until_ms: number | string;
}

export interface RateLimitsTable {
  bucket: string;
  tokens: number;
  updated_ms: number;
}

export interface ProposalsTable {
  id: string;
  workspace_id: string;
  status: 'open' | 'accepted' | 'rejected' | 'superseded';
  kind: 'edit' | 'create' | 'archive' | 'move' | 'delete';
  origin: 'propose' | 'conflict' | 'no_write' | 'step_up';
  page_id: string | null;
  path: string;
  content: string | null;
  base_hash: string | null;
  base_commit: string | null;
  /** JSON: kind-specific parameters (archive reason, move target). */
  params: string;
  reason: string;
  sensitivity: string;
  proposer_id: string;
  created_at: string;
  decided_by: string | null;
  decided_at: string | null;
  decision_reason: string | null;
  result_commit: string | null;
  superseded_by: string | null;
}

export interface ThreadMessagesTable {
  id: string;
  workspace_id: string;
  page_id: string;
  seq: number;
  author_id: string;
  author_kind: 'human' | 'agent';
  kind: 'comment' | 'question' | 'answer';
  body: string;
  reply_to: string | null;
  /** JSON list of principal ids */
  mentions: string;
  created_at: string;
}

export interface ThreadsTable {
  page_id: string;
  workspace_id: string;
  agent_hops: number;
  locked_at: string | null;
  unlocked_by: string | null;
  unlocked_at: string | null;
}

export interface ThreadReadsTable {
  page_id: string;
  principal_id: string;
  last_seq: number;
  read_at: string;
}

export interface InboxEventsTable {
  workspace_id: string;
  principal_id: string;
  seq: number;
  /** page_changed and watch_digest: a watch's events (issue 13, src/core/watches.ts); lifecycle_digest: what a lifecycle run archived (issue 16). */
  kind: 'mention' | 'reply' | 'proposal' | 'conflict' | 'page_changed' | 'watch_digest' | 'thread_locked' | 'lifecycle_digest';
  state: 'unread' | 'read' | 'done';
  page_id: string | null;
  proposal_id: string | null;
  payload: string;
  created_at: string;
  read_at: string | null;
  done_at: string | null;
}

/** A chunk of a page (src/retrieval/chunking.ts); PostgreSQL adds a generated `tsv` column, SQLite an FTS5 table. */
export interface PageSectionsTable {
  id: Generated<number>;
  workspace_id: string;
  page_id: string;
  ord: number;
  title: string;
  heading: string;
  heading_level: number;
  text: string;
  /** The `::: level` of the block the chunk lies in, or null outside every block. */
  block_level: string | null;
  /** The section's reader level as a rank, 0 public … 3 secret (indexer.ts sectionLevel; migration 016). */
  level: number;
  /** 1 when the section's page is archived, else 0 (migration 021). */
  archived: number;
  /** Its length in words, title and heading included (keyword.ts countWords; migration 025). */
  tokens: Generated<number>;
}

export interface PageLinksTable {
  workspace_id: string;
  source_id: string;
  ord: number;
  target: string;
  kind: 'wiki' | 'markdown';
  text: string;
  /** The lowest reader level that sees the link: null outside every block above public. */
  block_level: string | null;
  target_key: string | null;
  target_id: string | null;
}

/** The lower-cased names a page answers to: path, path without `.md`, slug, title. */
export interface PageKeysTable {
  workspace_id: string;
  key: string;
  page_id: string;
}

export interface PageTagsTable {
  workspace_id: string;
  page_id: string;
  tag: string;
}

/** A page whose vectors are behind its content: the embedding backlog. */
export interface EmbedJobsTable {
  page_id: string;
  workspace_id: string;
  content_hash: string;
  queued_at: string;
  attempts: number;
  /** Retry no earlier than this (after a provider failure). */
  not_before: string | null;
  last_error: string | null;
}

export interface SectionVectorsTable {
  page_id: string;
  /** First and last section ord of the window the vector stands for. */
  ord: number;
  last_ord: number;
  workspace_id: string;
  model: string;
  text_hash: string;
  vec: Uint8Array;
}

export interface VectorLogTable {
  seq: Generated<number>;
  workspace_id: string;
  page_id: string;
  at: string;
}

/** A principal's watch on a page or a folder/Space (migration 011, src/core/watches.ts). */
export interface WatchesTable {
  id: string;
  workspace_id: string;
  principal_id: string;
  /** The agent key it was made with; null for a web session. */
  key_id: string | null;
  /** `page:<id>` or `path:<folder>`: what a change is matched on. */
  target: string;
  kind: 'page' | 'folder';
  page_id: string | null;
  path: string;
  created_at: string;
}

/** OAuth 2.1 (migration 012, src/auth/oauth/). */
export interface OAuthClientsTable {
  id: string;
  secret_hash: string | null;
  name: string;
  redirect_uris: string;
  auth_method: 'none' | 'client_secret_basic' | 'client_secret_post';
  metadata: string;
  created_at: string;
  used_at: string | null;
}

export interface OAuthGrantsTable {
  id: string;
  client_id: string;
  principal_id: string;
  workspace_id: string;
  resource: string;
  scope: string;
  epoch: number;
  created_at: string;
  revoked_at: string | null;
  revoked_reason: string | null;
}

export interface OAuthCodesTable {
  code_hash: string;
  grant_id: string;
  redirect_uri: string;
  redirect_uri_named: number;
  code_challenge: string;
  expires_at: string;
  used_at: string | null;
}

export interface OAuthTokensTable {
  id: string;
  grant_id: string;
  kind: 'access' | 'refresh';
  token_hash: string;
  expires_at: string;
  created_at: string;
  used_at: string | null;
  revoked_at: string | null;
}

/** One lifecycle run (migration 013, src/core/lifecycle.ts); `(workspace_id, slot)` is the claim. */
export interface LifecycleRunsTable {
  workspace_id: string;
  /** A scheduled slot's start (ISO), or `manual:<id>`. */
  slot: string;
  trigger: 'scheduled' | 'manual';
  mode: 'dry' | 'apply';
  principal_id: string | null;
  started_at: string;
  finished_at: string | null;
  archived: Generated<number>;
  commit_sha: string | null;
  /** JSON: `{pages: [{id, path, folder, age_days}], skipped, digest_seqs}`. */
  report: Generated<string>;
}

/** Migration 014: an import and its progress (src/core/import/). */
export interface ImportJobsTable {
  id: string;
  workspace_id: string;
  principal_id: string;
  via: string;
  key_id: string | null;
  key_ceiling: string | null;
  space: string;
  status: 'queued' | 'running' | 'done' | 'failed';
  total: number;
  done: number;
  /** JSON: see src/core/import/report.ts. */
  report: string;
  error: string | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  claimed_by: string | null;
  claimed_until: string | null;
}

/** Migration 014: a file of an import still to apply. */
export interface ImportFilesTable {
  job_id: string;
  ord: number;
  path: string;
  content: string;
}

export interface DB {
  import_jobs: ImportJobsTable;
  import_files: ImportFilesTable;
  lifecycle_runs: LifecycleRunsTable;
  oauth_clients: OAuthClientsTable;
  oauth_grants: OAuthGrantsTable;
  oauth_codes: OAuthCodesTable;
  oauth_tokens: OAuthTokensTable;
  watches: WatchesTable;
  workspaces: WorkspacesTable;
  principals: PrincipalsTable;
  members: MembersTable;
  sessions: SessionsTable;
  agent_keys: AgentKeysTable;
  grants: GrantsTable;
  spaces: SpacesTable;
  folders: FoldersTable;
  pages: PagesTable;
  commits: CommitsTable;
  page_versions: PageVersionsTable;
  git_objects: GitObjectsTable;
  git_refs: GitRefsTable;
  audit_log: AuditLogTable;
  auth_failures: AuthFailuresTable;
  invites: InvitesTable;
  elevations: ElevationsTable;
  git_tokens: GitTokensTable;
  rate_limits: RateLimitsTable;
  proposals: ProposalsTable;
  thread_messages: ThreadMessagesTable;
  threads: ThreadsTable;
  thread_reads: ThreadReadsTable;
  inbox_events: InboxEventsTable;
  page_sections: PageSectionsTable;
  page_links: PageLinksTable;
  page_keys: PageKeysTable;
  page_tags: PageTagsTable;
  embed_jobs: EmbedJobsTable;
  section_vectors: SectionVectorsTable;
  vector_log: VectorLogTable;
}
