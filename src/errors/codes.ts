/**
 * The one registry of error codes (issue 12). Every `code` the service answers, on REST, on the
 * HTML pages' JSON fallbacks and on MCP, is a key here, with the HTTP status it carries.
 * `ServiceError` only takes a registered code, and the status it is given must be one the
 * registry allows for that code, so a misspelled or unregistered code, or a code sent with a
 * status of another, is a compile error. docs/errors.md lists exactly these codes with these
 * statuses; test/unit/error-registry.test.ts checks it.
 *
 * A value is the status, or the list of statuses when one code is legitimately answered with
 * more than one (the first is the usual one; the comment says when the others happen).
 */
export const ERROR_CODES = {
  // Request format (src/http/shared/errors.ts maps framework errors to these).
  /**
   * A schema or range error. Also the code of a framework 4xx whose status has no code of its
   * own (src/http/shared/errors.ts keeps the framework's status then, for example 414).
   */
  invalid_request: 400,
  invalid_json: 400,
  unsupported_media_type: 415,
  payload_too_large: 413,
  method_not_allowed: 405,
  not_acceptable: 406,
  not_found: 404,
  internal_error: 500,
  /** The database is out of reach for now, or the node is shutting down (MCP: the exchange closed before its answer). */
  unavailable: 503,

  // Host and rate limits.
  forbidden_host: 403,
  forbidden_origin: 403,
  rate_limited: 429,

  // Credentials and sessions.
  unauthorized: 401,
  invalid_token: 401,
  session_expired: 401,
  totp_required: 401,
  totp_enroll_required: 401,
  csrf_failed: 403,
  /** 403 from the auth layer; 401 from `stepUp` (not reachable over REST today). */
  session_required: [403, 401],
  workspace_not_found: 404,

  // Sign-up, login and second factor.
  weak_password: 400,
  password_required: 400,
  code_required: 400,
  totp_not_started: 400,
  /** 401 at login; 403 at step-up (the session itself is fine). */
  invalid_credentials: [401, 403],
  /** 401 at TOTP verify and enrol; 403 at step-up. */
  invalid_code: [401, 403],
  email_taken: 409,
  invite_required: 403,
  totp_already_enabled: 409,
  totp_not_enrolled: 409,

  // Permissions.
  forbidden: 403,
  step_up_required: 403,
  grant_exceeds_role: 403,
  invalid_grants: 400,

  // Members and invites.
  member_not_found: 404,
  last_owner: 409,
  not_pending: 409,
  invite_not_found: 404,
  invite_used: 409,
  invite_revoked: 410,
  invite_expired: 410,
  invite_email_mismatch: 403,
  already_member: 409,

  // Pages, paths and content.
  invalid_path: 400,
  empty_content: 400,
  invalid_content: 400,
  invalid_frontmatter: 400,
  invalid_sensitivity: 400,
  invalid_sha: 400,
  commit_not_found: 404,
  section_not_found: 404,
  object_missing: 404,
  invalid_object: 400,
  invalid_base: 400,
  no_change: 409,
  invalid_cursor: 400,
  agent_suspended: 409,
  elevation_ineffective: 409,
  unknown_scope: 404,
  invalid_entry: 400,
  invalid_patch: 400,
  patch_does_not_apply: 409,
  cluster_too_large: 400,
  /** A point-in-time answer (`at=`) would read more pages than it may (retrieval/snapshot.ts AT_MAX_PAGES). */
  snapshot_too_large: 400,
  /** POST /api/v1/import: the upload is not a zip archive that can be read. */
  invalid_archive: 400,
  /** POST /api/v1/import: the archive passes a limit (entries, unpacked size, compression ratio): a zip bomb is refused whole. */
  archive_refused: 400,

  // State conflicts and proposals.
  conflict: 409,
  already_exists: 409,
  already_archived: 409,
  not_archived: 409,
  proposal_closed: 409,

  // Threads.
  thread_locked: 423,
  unknown_mention: 400,
  ambiguous_mention: 400,
  unknown_reply_to: 400,

  // Watches (issue 13).
  watch_limit: 409,

  // Search and bundle.
  invalid_query: 400,
  invalid_intent: 400,
  invalid_scope: 400,

  // OAuth 2.1 (src/auth/oauth/): the /oauth endpoints answer these as `{error, error_description}`.
  /** RFC 6749 §5.2: unknown client, or its authentication failed. */
  invalid_client: 401,
  /** RFC 6749 §5.2: the code or refresh token is invalid, expired, used, or not this client's. */
  invalid_grant: 400,
  unsupported_grant_type: 400,
  /** RFC 6749 §5.2: a refresh by a client that did not register the refresh_token grant. */
  unauthorized_client: 400,
  /** RFC 8707: the resource is not /mcp or /w/<slug>/mcp of this server, or not the authorized one. */
  invalid_target: 400,
  /** RFC 7591 §3.2.2. */
  invalid_redirect_uri: 400,
  invalid_client_metadata: 400,

  // Git (/git/<slug>.git): a push the import refuses; git shows the message as `remote:` lines.
  push_refused: 400,
  /** A request body that stopped arriving (a push stalled for a minute). */
  request_timeout: 408,
} as const satisfies Record<string, number | readonly [number, ...number[]]>;

export type ErrorCode = keyof typeof ERROR_CODES;

type Entry<C extends ErrorCode> = (typeof ERROR_CODES)[C];

/** The statuses a code may be answered with (a union of number literals). */
export type StatusOf<C extends ErrorCode> = Entry<C> extends readonly (infer S)[] ? S : Entry<C>;

/** Every status some registered code carries. */
export type ErrorStatus = { [C in ErrorCode]: StatusOf<C> }[ErrorCode];

/** The codes that may be answered with status S, for the helpers (`forbidden(…, code)` and so on). */
export type CodeWithStatus<S extends ErrorStatus> = { [C in ErrorCode]: S extends StatusOf<C> ? C : never }[ErrorCode];

/**
 * The statuses allowed for every code of C at once: for one code its statuses; for a union of
 * codes only the statuses they share, so a code chosen at run time cannot sneak in another code's
 * status. When there is none (most often: the code is not registered, and TypeScript falls back
 * to every code), the type is a message, which the compiler shows at the status argument.
 */
export type StatusFor<C extends ErrorCode> = [SharedStatus<C>] extends [never] ? NoStatus : SharedStatus<C>;

type NoStatus = 'unregistered code (see ERROR_CODES in src/errors/codes.ts), or codes that share no status';

// Distributes over the codes; inferring from the union of functions intersects their statuses.
type SharedStatus<C extends ErrorCode> = (C extends ErrorCode ? (status: StatusOf<C>) => void : never) extends (status: infer S) => void ? S & number : never;

/** The statuses the registry allows for a code, the usual one first. */
export function statusesOf(code: ErrorCode): readonly number[] {
  const entry: number | readonly number[] = ERROR_CODES[code];
  return typeof entry === 'number' ? [entry] : entry;
}
