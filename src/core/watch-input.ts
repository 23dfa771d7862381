import { z } from 'zod';
import { BODY_PATH_MAX_CHARS, PageRef } from './pages/input.js';

/**
 * The inputs and limits of watching (src/core/watches.ts), shared by REST `/watches` and the MCP
 * tools `context_watch`, `context_unwatch` and `context_watches` (extended toolset).
 */

export const WATCH_LIMITS = {
  /** Watches one principal may hold in a workspace. */
  perPrincipal: 200,
  /** New watch events one watcher gets per window; beyond it changes go into one digest event. */
  eventsPerWindow: 60,
  windowMs: 60 * 60 * 1000,
} as const;

/** Watch ids look like `wa_…` (a ULID). */
export const WATCH_ID = /^wa_[0-9a-z]{26}$/;
export const WatchId = z.string().min(1).max(100);

/** What to watch: a page by id, or a path (a page `….md`, a folder `<space>/<folder>…`, or a Space). */
export const WatchNodeId = PageRef.describe('A page id (pg_…); the watch follows the page through moves');
/** Paths longer than a path may be reach core/paths.ts, which says why they are refused. */
export const WatchPath = z.string().min(1).max(BODY_PATH_MAX_CHARS).describe('A page path (….md), a folder (<space>/<folder>) or a Space (<space>)');

export interface WatchTargetInput {
  node_id?: string | undefined;
  path?: string | undefined;
}
