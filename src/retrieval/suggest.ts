import { distance } from 'fastest-levenshtein';
import { canReadPage } from '../policy/pages.js';
import type { Principal } from '../policy/principal.js';
import type { Executor } from '../store/db.js';
import { livePagesOfSpace } from './live-pages.js';

/**
 * "Did you mean …?" for names a caller got slightly wrong (issue 13): a page path without
 * `.md` or with a typo, a scope. Suggestions come only from what the caller can see, so a
 * suggestion never tells of a hidden page; the look-up is one bounded query.
 */

/** Levenshtein distance (fastest-levenshtein), or `max + 1` when it exceeds `max` or the lengths alone say it must. */
export function editDistance(a: string, b: string, max: number): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  return Math.min(distance(a, b), max + 1);
}

/** The most edits a name of this length may be off by and still be suggested. */
export function tolerance(name: string): number {
  return Math.min(3, Math.max(1, Math.floor(name.length / 5)));
}

/** The candidates closest to `wanted` within its tolerance, best first (at most `n`). */
export function closest(wanted: string, candidates: Iterable<string>, n = 1): string[] {
  const max = tolerance(wanted);
  const w = wanted.toLowerCase();
  const scored: { c: string; d: number }[] = [];
  for (const c of candidates) {
    const d = editDistance(w, c.toLowerCase(), max);
    if (d <= max) scored.push({ c, d });
  }
  return scored
    .sort((x, y) => x.d - y.d || x.c.localeCompare(y.c))
    .slice(0, n)
    .map((x) => x.c);
}

/** Pages of a Space read at most for a suggestion. */
const SUGGEST_ROWS = 2000;

/**
 * The path of a page the caller can read that `ref` most likely meant: `ref` + `.md`, or a path
 * of its Space a few edits away. Null when there is none (or `ref` names no Space).
 */
export async function suggestPagePath(db: Executor, p: Principal, ref: string): Promise<string | null> {
  const path = ref.trim().replace(/^\/+/, '');
  const space = path.split('/')[0];
  if (!space || !path.includes('/') || path.length > 512) return null;
  const rows = await livePagesOfSpace(db, p.workspaceId, space).select(['path', 'sensitivity', 'block_level']).orderBy('path').limit(SUGGEST_ROWS).execute();
  const seen = rows.filter((r) => canReadPage(p, { path: r.path, sensitivity: r.sensitivity, blockLevel: r.block_level })).map((r) => r.path);
  const wanted = path.endsWith('.md') ? path : `${path}.md`;
  if (wanted !== path && seen.includes(wanted)) return wanted;
  return closest(wanted, seen)[0] ?? null;
}
