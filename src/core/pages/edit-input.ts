import { z } from 'zod';
import { MAX_PAGE_BYTES } from './content.js';
import { MAX_PATCH_CHARS } from './edit-apply.js';
import { SECTION_MAX_CHARS } from './input.js';

/**
 * The inputs of the edits in place (issue 13: append, replace a section, apply a unified diff),
 * shared by the MCP tools (context_append, context_replace_section, context_patch) and the REST
 * routes (POST /nodes/:id/append, /section, /patch). The page they produce is held to the page
 * limits by analyzeContent (1 MiB, 413 payload_too_large).
 */

/** Text to add or to put under a heading: at most a page's size. */
export const EditText = z.string().max(MAX_PAGE_BYTES);

/** A section named by its heading text ("Rollback", or "## Rollback" to prefer that level). */
export const SectionName = z.string().trim().min(1).max(SECTION_MAX_CHARS);

/** A unified diff of the page (one file, at least one hunk). */
export const PatchText = z.string().min(1).max(MAX_PATCH_CHARS);
