import { extractSections, findSensitiveBlocks } from '../markdown/index.js';
import { lineStarts } from '../markdown/frontmatter.js';
import { LEVELS, rank, type Level } from '../policy/sensitivity.js';

/** Characters a chunk aims to stay under; a code fence longer than this stays whole. */
export const CHUNK_CAP = 1500;

/** One indexed piece of a page: part of one heading section, at one sensitivity. */
export interface Chunk {
  /** 0-based position in the page. */
  ord: number;
  /** The section's heading text; '' before the first heading, or when the heading sits in a block above this chunk's level. */
  heading: string;
  /** Heading level 1–6; 0 before the first heading. */
  headingLevel: number;
  /** The chunk's markdown, byte for byte from the body. */
  text: string;
  /**
   * The highest `::: level` block covering any of its lines, or null. Chunks are cut at block
   * boundaries, so a chunk is either wholly inside blocks of this level or outside every block:
   * a reader below this level gets nothing of it, and loses nothing else.
   */
  blockLevel: Level | null;
}

const FENCE_OPEN = /^ {0,3}(`{3,}|~{3,})/;

/**
 * The highest block level covering each line, in one sweep over the lines: a body of many
 * (unclosed) blocks must cost lines + blocks, not lines × blocks.
 */
function lineLevels(blocks: readonly { level: Level; startLine: number; endLine: number }[], lines: number): (Level | null)[] {
  const open = LEVELS.map(() => new Int32Array(lines + 1));
  for (const b of blocks) {
    const start = Math.min(b.startLine, lines);
    const end = Math.min(b.endLine, lines);
    if (start >= end) continue;
    open[rank(b.level)]![start]! += 1;
    open[rank(b.level)]![end]! -= 1;
  }
  const depth = LEVELS.map(() => 0);
  const out: (Level | null)[] = new Array<Level | null>(lines).fill(null);
  for (let i = 0; i < lines; i++) {
    for (let r = 0; r < LEVELS.length; r++) depth[r]! += open[r]![i]!;
    for (let r = LEVELS.length - 1; r >= 0; r--) {
      if (depth[r]! > 0) {
        out[i] = LEVELS[r]!;
        break;
      }
    }
  }
  return out;
}

/**
 * Splits lines into units that may not be separated: paragraphs (runs between blank lines)
 * and whole code fences. `lines` are the lines' texts with their line breaks.
 */
function units(lines: string[]): { text: string; fence: boolean }[] {
  const out: { text: string; fence: boolean }[] = [];
  let cur = '';
  let curFence = false;
  let fence: { ch: string; len: number } | null = null;
  for (const line of lines) {
    const bare = line.replace(/\r?\n$|\r$/, '');
    if (fence) {
      cur += line;
      const m = /^ {0,3}(`{3,}|~{3,})\s*$/.exec(bare);
      if (m && m[1]![0] === fence.ch && m[1]!.length >= fence.len) fence = null;
      continue;
    }
    const open = FENCE_OPEN.exec(bare);
    if (open) {
      fence = { ch: open[1]![0]!, len: open[1]!.length };
      cur += line;
      curFence = true;
      continue;
    }
    if (bare.trim() === '') {
      cur += line;
      if (cur.trim() !== '') {
        out.push({ text: cur, fence: curFence });
        cur = '';
        curFence = false;
      }
      continue;
    }
    cur += line;
  }
  if (cur !== '') out.push({ text: cur, fence: curFence });
  return out;
}

/** Packs units greedily into pieces of at most `cap` characters; a long paragraph is cut at line ends, a fence never. */
function pack(us: { text: string; fence: boolean }[], cap: number): string[] {
  const pieces: string[] = [];
  let cur = '';
  const flush = () => {
    if (cur.trim() !== '') pieces.push(cur);
    else if (cur !== '' && pieces.length > 0) pieces[pieces.length - 1] += cur;
    cur = '';
  };
  for (const u of us) {
    if (cur !== '' && cur.length + u.text.length > cap) flush();
    if (u.text.length > cap && !u.fence) {
      for (const line of u.text.match(/[^\n]*\n|[^\n]+$/g) ?? []) {
        if (cur !== '' && cur.length + line.length > cap) flush();
        cur += line;
      }
      continue;
    }
    cur += u.text;
  }
  flush();
  return pieces;
}

/**
 * Chunks a page body by heading into sections of at most about `cap` characters, cut on
 * paragraph boundaries (never inside a code fence) and at the edges of `::: level` blocks.
 */
export function chunkBody(body: string, cap = CHUNK_CAP): Chunk[] {
  const starts = lineStarts(body);
  const lineText = (i: number) => body.slice(starts[i]!, starts[i + 1] ?? body.length);
  const levels = lineLevels(findSensitiveBlocks(body), starts.length);
  const chunks: Chunk[] = [];
  for (const s of extractSections(body)) {
    const headingLine = s.level > 0 ? (levels[s.startLine] ?? null) : null;
    let i = s.startLine;
    while (i < s.endLine) {
      const level = levels[i] ?? null;
      const lines: string[] = [];
      while (i < s.endLine && (levels[i] ?? null) === level) lines.push(lineText(i++));
      // The heading is shown with a chunk only to readers who may see the heading's own line.
      const showHeading = headingLine === null || (level !== null && rank(headingLine) <= rank(level));
      for (const text of pack(units(lines), cap)) {
        chunks.push({ ord: chunks.length, heading: showHeading ? s.heading : '', headingLevel: s.level, text, blockLevel: level });
      }
    }
  }
  return chunks;
}
