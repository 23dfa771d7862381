import MarkdownIt, { type StateBlock, type Token } from 'markdown-it';
import { LEVELS, rank, type Level } from '../policy/sensitivity.js';
import { documentBody, lastOf, lineStarts } from './frontmatter.js';

/** A `::: <level>` … `:::` block; lines are 0-based, endLine exclusive, fences included. */
export interface SensitiveBlock {
  level: Level;
  startLine: number;
  endLine: number;
}

/*
 * Why not markdown-it-container: it finds a container's end by scanning for the first bare
 * `:::` line before parsing the inside, so a `:::` inside a nested code fence or a nested
 * `::: note` ends a `::: secret` early and the rest of the secret is shown. Here every
 * `:::` line is its own token, produced by the block parser in order (so lines inside code
 * fences never become one), and openers and closers are paired afterwards with a stack.
 */

export type FenceMeta = {
  /** Number of colons. */
  markers: number;
  /** Container name (first word after the colons), or null for a closing `:::`. */
  name: string | null;
  /** Column of the first colon in its line; text before it is quote or list markup. */
  column: number;
};

export const FENCE_TOKEN = 'colon_fence';
const COLON = 0x3a;

function colonFence(state: StateBlock, startLine: number, _endLine: number, silent: boolean): boolean {
  // Four columns of indent make an indented code line, never a fence.
  if (state.sCount[startLine]! - state.blkIndent >= 4) return false;
  const start = state.bMarks[startLine]! + state.tShift[startLine]!;
  const max = state.eMarks[startLine]!;
  let pos = start;
  while (pos < max && state.src.charCodeAt(pos) === COLON) pos++;
  if (pos - start < 3) return false;
  if (silent) return true;

  // pandoc allows `::: secret :::`; trailing colons are decoration, not part of the name.
  let word = state.src.slice(pos, max).trim().split(/\s/)[0] ?? '';
  while (word.endsWith(':')) word = word.slice(0, -1);
  const token = state.push(FENCE_TOKEN, '', 0);
  token.block = true;
  token.map = [startLine, startLine + 1];
  const meta: FenceMeta = {
    markers: pos - start,
    name: word === '' ? null : word,
    column: start - (state.src.lastIndexOf('\n', start - 1) + 1),
  };
  token.meta = meta;
  state.line = startLine + 1;
  return true;
}

// Raw HTML is off so that an HTML block cannot hide a `::: secret` line from the parser; the
// fence rule may interrupt paragraphs, quotes, lists and tables, so `text\n::: secret` counts.
/**
 * Teaches a markdown-it instance the `:::` lines: each becomes a FENCE_TOKEN token of its own
 * (meta: FenceMeta); pairing openers with closers is the caller's (locateBlocks here, the web
 * app's renderer).
 */
export function colonFencePlugin(instance: InstanceType<typeof MarkdownIt>): void {
  instance.block.ruler.before('fence', FENCE_TOKEN, colonFence, { alt: ['paragraph', 'reference', 'blockquote', 'list'] });
}

const md = new MarkdownIt('default', { html: false, linkify: false });
colonFencePlugin(md);

function levelOf(name: string | null): Level | null {
  if (name === null) return null;
  const lower = name.toLowerCase(); // `::: SECRET` is meant as secret; failing closed is safer
  return LEVELS.find((l) => l === lower) ?? null;
}

interface Located extends SensitiveBlock {
  column: number;
}

/** The blocks of a body; the last answer is kept (see tokensOf in structure.ts), callers only read it. */
const locateBlocks = lastOf(findBlocks);

function findBlocks(body: string): readonly Located[] {
  // A block opens with a line of three colons: a body without them has none (and most have none).
  if (!body.includes(':::')) return [];
  const lineCount = lineStarts(body).length;
  const found: Located[] = [];
  interface Open {
    level: Level | null;
    markers: number;
    parent: Token | null;
    startLine: number;
    column: number;
  }
  const open: Open[] = [];
  const parents: Token[] = [];
  for (const t of md.parse(body, {})) {
    if (t.nesting === 1) parents.push(t);
    else if (t.nesting === -1) parents.pop();
    if (t.type !== FENCE_TOKEN || !t.map) continue;
    const meta = t.meta as FenceMeta;
    const parent = parents.at(-1) ?? null;
    if (meta.name !== null) {
      open.push({ level: levelOf(meta.name), markers: meta.markers, parent, startLine: t.map[0], column: meta.column });
      continue;
    }
    // A closer ends the innermost container opened in the same quote or list item, and only
    // when it is at least as long as that container's opener. A container whose quote or
    // list item has ended can no longer close, and so runs to the end of the body.
    for (let i = open.length - 1; i >= 0; i--) {
      const o = open[i]!;
      if (o.parent !== parent) continue;
      if (meta.markers >= o.markers) {
        open.splice(i, 1);
        if (o.level) found.push({ level: o.level, startLine: o.startLine, endLine: t.map[1], column: o.column });
      }
      break;
    }
  }
  for (const o of open) {
    if (o.level) found.push({ level: o.level, startLine: o.startLine, endLine: lineCount, column: o.column });
  }
  return found.sort((a, b) => a.startLine - b.startLine || b.endLine - a.endLine);
}

/** Every sensitivity block in the body, nested ones included, in order of their opening line. */
export function findSensitiveBlocks(body: string): SensitiveBlock[] {
  return locateBlocks(body).map(({ level, startLine, endLine }) => ({ level, startLine, endLine }));
}

/** The highest level of any block in the body, or null when it has none. */
export function maxBlockLevel(body: string): Level | null {
  let max: Level | null = null;
  for (const b of locateBlocks(body)) if (max === null || rank(b.level) > rank(max)) max = b.level;
  return max;
}

export const REDACTED = '[redacted]';

/**
 * Replaces each block the reader may not see with one `[redacted]` line; everything else stays
 * byte for byte. Blocks the reader may see are kept, with their hidden inner blocks redacted.
 */
export function redactBlocks(body: string, visible: (level: Level) => boolean): string {
  const hidden = locateBlocks(body).filter((b) => !visible(b.level));
  if (hidden.length === 0) return body;
  // Hidden ranges are merged rather than nested-checked: an unclosed block can overlap the end
  // of a closed one, and the union is what must disappear.
  const ranges: Located[] = [];
  for (const b of hidden) {
    const last = ranges.at(-1);
    if (last && b.startLine < last.endLine) last.endLine = Math.max(last.endLine, b.endLine);
    else ranges.push({ ...b });
  }
  const starts = lineStarts(body);
  let out = '';
  let cursor = 0;
  for (const r of ranges) {
    const from = starts[r.startLine]!;
    const to = starts[r.endLine] ?? body.length;
    // Keep the quote or list markup in front of the opening fence so the marker stays where the
    // block was, and keep the line break of the block's last line.
    const prefix = body.slice(from, from + r.column);
    const lastLine = body.slice(starts[r.endLine - 1]!, to);
    const eol = lastLine.endsWith('\r\n') ? '\r\n' : lastLine.endsWith('\n') ? '\n' : lastLine.endsWith('\r') ? '\r' : '';
    out += body.slice(cursor, from) + prefix + REDACTED + eol;
    cursor = to;
  }
  return out + body.slice(cursor);
}

/** redactBlocks over a whole page; the frontmatter is kept as it is. */
export function redactDocument(raw: string, visible: (level: Level) => boolean): string {
  // The body only: the frontmatter's YAML need not be parsed to keep it as it is.
  const body = documentBody(raw);
  return raw.slice(0, raw.length - body.length) + redactBlocks(body, visible);
}
