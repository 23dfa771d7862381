import { z } from 'zod';
import { BUNDLE_DEFAULT_TOKENS, BUNDLE_MAX_TOKENS, BUNDLE_MIN_TOKENS, type BundleOptions } from './bundle.js';
import { MAX_QUERY_CHARS } from './search-input.js';

/**
 * The inputs of a context bundle (`buildBundle`), one definition for every face: REST
 * `POST /bundle` (JSON body) and `GET /bundle` (query string), the MCP tool `context_bundle` and
 * the prompt `load_project_context` (whose string argument is checked against the same bounds).
 * The scope's limit is the search scope's (search-input.ts).
 */

export { BUNDLE_DEFAULT_TOKENS, BUNDLE_MAX_TOKENS, BUNDLE_MIN_TOKENS };

/** What the context is for: ranks the sections, as long as a search query may be. */
export const IntentText = z.string().max(MAX_QUERY_CHARS);

/** The token budget: `z.number()` in JSON, `z.coerce.number()` in a query string. */
export function budgetTokens<N extends z.ZodNumber | z.ZodCoercedNumber>(base: N) {
  return base.int().min(BUNDLE_MIN_TOKENS).max(BUNDLE_MAX_TOKENS).default(BUNDLE_DEFAULT_TOKENS);
}

/** The bundle's parameters as both faces name them (REST body or query string, tool arguments). */
export interface BundleParams {
  intent: string;
  budget_tokens: number;
  scope?: string | undefined;
  include_links: boolean;
  include_archived: boolean;
  at?: string | undefined;
}

/** The parameters as `buildBundle` takes them. */
export function bundleOptions(a: BundleParams): BundleOptions {
  return { intent: a.intent, budgetTokens: a.budget_tokens, scope: a.scope, includeLinks: a.include_links, includeArchived: a.include_archived, at: a.at };
}
