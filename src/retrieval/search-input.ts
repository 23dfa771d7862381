import { z } from 'zod';

/**
 * The inputs of a search (`searchPages`), one definition for every face: REST `GET /search`
 * and the MCP tools `context_search` and `search`. The spec names the fields per face (REST
 * `q`, MCP `query`), so the faces share these field schemas and limits, not one object. A
 * number field is a function of its base: `z.number()` in a JSON body or tool arguments,
 * `z.coerce.number()` in a query string.
 */

/** Longest accepted query; longer queries are 400 (only the first terms are used anyway). */
export const MAX_QUERY_CHARS = 4000;
export const SEARCH_MAX_LIMIT = 50;
export const SEARCH_DEFAULT_LIMIT = 10;
/** At most this many tags in one search (every one must match)… */
export const SEARCH_MAX_TAGS = 50;
/** … each at most this long (REST also takes them comma-joined, in a longer string). */
export const TAG_MAX_CHARS = 200;
/** A scope (`<space>` or `<space>/<folder>…`) is a folder path: at most this long. */
export const SCOPE_MAX_CHARS = 512;

/** The words to look for. REST's `q` may be empty (the core answers `invalid_query`); tools require one character. */
export const QueryText = z.string().max(MAX_QUERY_CHARS);

/** How many pages to answer. */
export function searchLimit<N extends z.ZodNumber | z.ZodCoercedNumber>(base: N) {
  return base.int().min(1).max(SEARCH_MAX_LIMIT).default(SEARCH_DEFAULT_LIMIT);
}

/**
 * `at`: answer from the workspace as it was at this commit (a sha, or a unique prefix of at least
 * 7 hexadecimal digits; anything else is 400 `invalid_sha`, an unknown commit 404
 * `commit_not_found`). The bundle's `at` field gives the commit a bundle answered from.
 */
export const AtCommit = z.string().min(7).max(64);
