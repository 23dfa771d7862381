import { diffLines } from 'diff';
import { html, type SafeHtml } from '../../http/shared/html.js';

/**
 * The web app's diff of two texts (issue 17: history and review), from the `diff` package's line
 * diff. Two views: INLINE (one column: both line numbers, removed and added lines marked) and
 * SPLIT (side by side: the old text left, the new right, changed runs paired line by line).
 * Unchanged runs longer than twice the context are collapsed to "n unchanged lines". Changes are
 * never told by colour alone: every changed line carries a +/− sign, sits in <ins>/<del>, and
 * starts with a visually hidden "added"/"removed" for screen readers.
 */

export const DIFF_VIEWS = ['inline', 'split'] as const;
export type DiffView = (typeof DIFF_VIEWS)[number];

/** Lines of unchanged text kept around each change. */
export const DIFF_CONTEXT = 3;

/** Past this many edits the line diff gives up and the texts are shown as one replaced block. */
const MAX_EDIT_LENGTH = 5000;

interface Line {
  kind: 'same' | 'add' | 'del';
  /** Line number in the old text (same, del). */
  old: number | null;
  /** Line number in the new text (same, add). */
  new: number | null;
  text: string;
}

type Piece = { kind: 'lines'; lines: Line[] } | { kind: 'skip'; count: number };

function splitLines(value: string): string[] {
  const lines = value.split('\n');
  if (lines.at(-1) === '') lines.pop();
  return lines;
}

/** Every line of both texts, in diff order, numbered. */
function diffRows(a: string, b: string): Line[] {
  // A last line without its newline is the same line as with it: not a change worth showing.
  const norm = (s: string) => (s === '' || s.endsWith('\n') ? s : `${s}\n`);
  const oldText = norm(a.replace(/\r\n/g, '\n'));
  const newText = norm(b.replace(/\r\n/g, '\n'));
  const changes = diffLines(oldText, newText, { maxEditLength: MAX_EDIT_LENGTH }) ?? [
    { value: oldText, removed: true, added: false, count: 0 },
    { value: newText, removed: false, added: true, count: 0 },
  ];
  const out: Line[] = [];
  let o = 1;
  let n = 1;
  for (const c of changes) {
    for (const text of splitLines(c.value)) {
      if (c.added) out.push({ kind: 'add', old: null, new: n++, text });
      else if (c.removed) out.push({ kind: 'del', old: o++, new: null, text });
      else out.push({ kind: 'same', old: o++, new: n++, text });
    }
  }
  return out;
}

/** The rows with long unchanged runs collapsed to `context` lines either side of a change. */
function collapse(rows: Line[], context: number): Piece[] {
  const out: Piece[] = [];
  let i = 0;
  while (i < rows.length) {
    if (rows[i]!.kind !== 'same') {
      let j = i;
      while (j < rows.length && rows[j]!.kind !== 'same') j++;
      out.push({ kind: 'lines', lines: rows.slice(i, j) });
      i = j;
      continue;
    }
    let j = i;
    while (j < rows.length && rows[j]!.kind === 'same') j++;
    const run = rows.slice(i, j);
    const keepHead = i === 0 ? 0 : context;
    const keepTail = j === rows.length ? 0 : context;
    if (run.length > keepHead + keepTail + 1) {
      if (keepHead) out.push({ kind: 'lines', lines: run.slice(0, keepHead) });
      out.push({ kind: 'skip', count: run.length - keepHead - keepTail });
      if (keepTail) out.push({ kind: 'lines', lines: run.slice(run.length - keepTail) });
    } else {
      out.push({ kind: 'lines', lines: run });
    }
    i = j;
  }
  return out;
}

export interface DiffStats {
  added: number;
  removed: number;
}

export function diffStats(a: string, b: string): DiffStats {
  const rows = diffRows(a, b);
  return { added: rows.filter((r) => r.kind === 'add').length, removed: rows.filter((r) => r.kind === 'del').length };
}

const SIGN = { add: '+', del: '−', same: '' } as const;

/** One line's text, marked for sight (sign, colour) and for screen readers (ins/del, "added"). */
function cell(l: Line): SafeHtml {
  // An empty line still needs height; a zero-width space keeps the row (and copies as nothing).
  const text = l.text === '' ? '\u200b' : l.text;
  if (l.kind === 'add') return html`<ins><span class="visually-hidden">added: </span>${text}</ins>`;
  if (l.kind === 'del') return html`<del><span class="visually-hidden">removed: </span>${text}</del>`;
  return html`${text}`;
}

function skipText(count: number): string {
  return `⋯ ${count} unchanged line${count === 1 ? '' : 's'}`;
}

function inlineRows(pieces: Piece[]): SafeHtml[] {
  return pieces.map((p) =>
    p.kind === 'skip'
      ? html`<tr class="d-skip"><td colspan="4">${skipText(p.count)}</td></tr>`
      : html`${p.lines.map(
          (l) =>
            html`<tr class="d-${l.kind}"><td class="ln">${l.old ?? ''}</td><td class="ln">${l.new ?? ''}</td><td class="sign s-${l.kind}" aria-hidden="true">${SIGN[l.kind]}</td><td class="code">${cell(l)}</td></tr>`,
        )}`,
  );
}

function half(l: Line | undefined, side: 'old' | 'new'): SafeHtml {
  if (!l) return html`<td class="ln"></td><td class="sign" aria-hidden="true"></td><td class="code d-none"></td>`;
  return html`<td class="ln">${side === 'old' ? l.old : l.new}</td><td class="sign s-${l.kind}" aria-hidden="true">${SIGN[l.kind]}</td><td class="code d-${l.kind}">${cell(l)}</td>`;
}

function splitRows(pieces: Piece[]): SafeHtml[] {
  const out: SafeHtml[] = [];
  for (const p of pieces) {
    if (p.kind === 'skip') {
      out.push(html`<tr class="d-skip"><td colspan="6">${skipText(p.count)}</td></tr>`);
      continue;
    }
    let i = 0;
    const lines = p.lines;
    while (i < lines.length) {
      const l = lines[i]!;
      if (l.kind === 'same') {
        out.push(html`<tr>${half(l, 'old')}${half(l, 'new')}</tr>`);
        i++;
        continue;
      }
      // A changed run: its removed lines on the left, its added lines on the right, paired.
      const dels: Line[] = [];
      const adds: Line[] = [];
      while (i < lines.length && lines[i]!.kind !== 'same') {
        (lines[i]!.kind === 'del' ? dels : adds).push(lines[i]!);
        i++;
      }
      for (let k = 0; k < Math.max(dels.length, adds.length); k++) out.push(html`<tr>${half(dels[k], 'old')}${half(adds[k], 'new')}</tr>`);
    }
  }
  return out;
}

export interface DiffOptions {
  view: DiffView;
  /** What each side is, for the table's caption and headers ("version abc1234", "current page"). */
  fromLabel: string;
  toLabel: string;
  context?: number;
}

/**
 * The diff of `a` (old) and `b` (new) as a table, or a note when they are the same. The table
 * sits in a scrollable region (long lines scroll, the page does not widen at phone width).
 */
export function renderDiff(a: string, b: string, opts: DiffOptions): SafeHtml {
  const rows = diffRows(a, b);
  const added = rows.filter((r) => r.kind === 'add').length;
  const removed = rows.filter((r) => r.kind === 'del').length;
  if (added === 0 && removed === 0) return html`<p class="notice diff-none">No differences: the two texts are the same.</p>`;
  const pieces = collapse(rows, opts.context ?? DIFF_CONTEXT);
  const summary = html`<p class="diff-stats"><span class="d-count-add">+${added} added</span> <span class="d-count-del">−${removed} removed</span></p>`;
  const caption = html`<caption class="visually-hidden">Changes from ${opts.fromLabel} to ${opts.toLabel}: ${added} line${added === 1 ? '' : 's'} added, ${removed} removed</caption>`;
  if (opts.view === 'split') {
    return html`${summary}<div class="diff-wrap" role="region" aria-label="Changes, side by side" tabindex="0">
<table class="diff diff-split">${caption}
<thead><tr><th scope="col" colspan="3">${opts.fromLabel}</th><th scope="col" colspan="3">${opts.toLabel}</th></tr></thead>
<tbody>${splitRows(pieces)}</tbody>
</table>
</div>`;
  }
  return html`${summary}<div class="diff-wrap" role="region" aria-label="Changes, inline" tabindex="0">
<table class="diff diff-inline">${caption}
<thead><tr><th scope="col" class="ln"><abbr title="line in ${opts.fromLabel}">old</abbr></th><th scope="col" class="ln"><abbr title="line in ${opts.toLabel}">new</abbr></th><th scope="col"><span class="visually-hidden">change</span></th><th scope="col">${opts.fromLabel} → ${opts.toLabel}</th></tr></thead>
<tbody>${inlineRows(pieces)}</tbody>
</table>
</div>`;
}

/** The inline / side by side switch: links keeping the rest of the address. */
export function viewSwitch(current: DiffView, hrefFor: (v: DiffView) => string): SafeHtml {
  return html`<nav class="view-switch" aria-label="Diff view">${DIFF_VIEWS.map(
    (v) => html`<a href="${hrefFor(v)}"${v === current ? html` aria-current="true"` : ''}>${v === 'inline' ? 'Inline' : 'Side by side'}</a>`,
  )}</nav>`;
}
