import { z } from 'zod';
import { PATH_LIMITS } from '../paths.js';
import { ARCHIVE_REASONS } from './content.js';

/**
 * The inputs of the page actions (read, write, move, archive, restore), one definition for every
 * face: the REST routes under `/nodes` and the MCP tools `context_get`, `context_write`,
 * `context_archive`, `fetch`… Where the spec gives a face its own field names or forms (REST
 * `id` in the URL, MCP `id`/`node_id`/`path`), the faces share these field schemas and limits,
 * not one object.
 */

/** Longest page reference: an id (`pg_…`) or a path. */
export const PAGE_REF_MAX_CHARS = 1000;
/** A page by id or path. */
export const PageRef = z.string().min(1).max(PAGE_REF_MAX_CHARS);

/** A version the caller read: a commit_sha or content_hash (a unique prefix of 7 or more). */
export const Sha = z.string().min(7).max(64);

export const COMMIT_MESSAGE_MAX_CHARS = 2000;
/** The commit message of a write. */
export const CommitMessage = z.string().max(COMMIT_MESSAGE_MAX_CHARS).optional().describe('Commit message');

export const TITLE_MAX_CHARS = 300;
/** A page title (trimmed, not blank). */
export const Title = z.string().trim().min(1).max(TITLE_MAX_CHARS);

/** A section is named by its heading text; headings are titles. */
export const SECTION_MAX_CHARS = TITLE_MAX_CHARS;

/** Why a page or folder is archived; `manual` unless said. */
export const ArchiveReasonInput = z.enum(ARCHIVE_REASONS).default('manual');

/** A page path or a folder path (`<space>/<folder>…`) as the tools take it: as long as a path may be (core/paths.ts). */
export const PATH_MAX_CHARS = PATH_LIMITS.maxLength;
/**
 * REST takes longer paths in bodies (create, move, propose) and lets core/paths.ts refuse them
 * with `invalid_path` and the reason.
 */
export const BODY_PATH_MAX_CHARS = 8192;
