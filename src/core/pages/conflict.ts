import type { MergeConflict } from '../merge.js';
import { REDACTED } from '../../markdown/index.js';

/**
 * What a writer whose stale write clashed is told (issue 13): the head commit, a short excerpt of
 * the clashing lines on each side, and the next step. The current side is shown only to a caller
 * who reads the page whole (else `[redacted]`): a hunk is a fragment, and a block above the
 * caller's ceiling may open outside it. The caller's own side is its own text.
 */

/** Hunks shown at most, and lines and characters of each side. */
const HUNKS_SHOWN = 3;
const LINES_SHOWN = 6;
const CHARS_SHOWN = 400;

export interface ConflictHunk {
  where: 'frontmatter' | 'body';
  key?: string;
  /** Your side of the hunk (excerpt). */
  yours: string;
  /** The page's side now (excerpt), `[redacted]` when you cannot read the page whole. */
  current: string;
}

function excerpt(text: string): string {
  const lines = text.replace(/\r\n?/g, '\n').replace(/\n$/, '').split('\n');
  let out = lines.slice(0, LINES_SHOWN).join('\n');
  if (lines.length > LINES_SHOWN) out += '\n…';
  if ([...out].length > CHARS_SHOWN) out = `${[...out].slice(0, CHARS_SHOWN - 1).join('')}…`;
  return out;
}

export function conflictHunks(conflicts: readonly MergeConflict[], seesCurrent: boolean): ConflictHunk[] {
  return conflicts.slice(0, HUNKS_SHOWN).map((c) => ({
    where: c.where,
    ...(c.key !== undefined ? { key: c.key } : {}),
    yours: excerpt(c.theirs),
    current: seesCurrent ? excerpt(c.ours) : REDACTED,
  }));
}

/** The 409 message: what clashed, where the change went, and what to do next. */
export function conflictMessage(head: string, hunks: readonly ConflictHunk[], total: number, proposalId: string): string {
  const first = hunks[0];
  const quote = (s: string) => JSON.stringify(s);
  const clash = first
    ? ` First clash (${first.where === 'frontmatter' ? `frontmatter key ${first.key ?? ''}` : 'body'}${total > 1 ? `, 1 of ${total}` : ''}): yours ${quote(first.yours)}, now ${quote(first.current)}.`
    : '';
  return (
    `The page changed since you read it (head is now commit ${head}) and your change clashes with it.${clash} ` +
    `Your change was kept as proposal ${proposalId} for review. ` +
    `Next: read the page again at commit ${head}, reapply your change to it, and write with base_sha ${head}; or leave proposal ${proposalId} to a reviewer.`
  );
}

/** The next step, as a field of the REST body. */
export function conflictNextStep(head: string, proposalId: string): string {
  return `Read the page again at commit ${head}, reapply your change, and write with base_sha ${head}; or leave proposal ${proposalId} to a reviewer.`;
}
