import MarkdownIt, { type Token } from 'markdown-it';
import { findSensitiveBlocks } from './blocks.js';
import { lastOf, lineStarts } from './frontmatter.js';

export interface Link {
  /** The linked page as written, without `#fragment` or `?query`, URL-decoded; not resolved. */
  target: string;
  kind: 'wiki' | 'markdown';
  text: string;
}

export interface Section {
  /** Plain text of the heading; '' for text before the first heading. */
  heading: string;
  /** 1–6; 0 for text before the first heading. */
  level: number;
  /** 0-based body line of the heading, inclusive. */
  startLine: number;
  /** 0-based body line where the section stops, exclusive. */
  endLine: number;
  /** The section's lines, byte for byte, heading included. */
  text: string;
}

// Raw HTML is off so that an HTML block cannot swallow the markdown that follows it.
const md = new MarkdownIt('default', { html: false, linkify: false });

/**
 * The tokens of a body. Deriving a page's title, links, sections and blocks asks for the same
 * body several times in a row, and parsing is most of a write's CPU: the last answer is kept.
 * Callers only read the tokens.
 */
const tokensOf = lastOf((body: string): readonly Token[] => md.parse(body, {}));

/** Readable text of inline tokens: markup dropped, code and image alt text kept. */
function plainText(tokens: Token[] | null | undefined): string {
  const parts: string[] = [];
  const walk = (children: Token[] | null): void => {
    for (const t of children ?? []) {
      if (t.type === 'text' || t.type === 'code_inline') parts.push(t.content);
      else if (t.type === 'softbreak' || t.type === 'hardbreak') parts.push(' ');
      else if (t.type === 'image') walk(t.children);
    }
  };
  walk(tokens ?? null);
  return collapse(parts.join(''));
}

function collapse(s: string): string {
  return s.split(/\s+/).filter(Boolean).join(' ');
}

/**
 * Title: frontmatter `title`, else the first level-1 heading, else the fallback. Headings inside
 * `::: <level>` blocks are skipped: the title is shown wherever the page is, and must not carry
 * text the block hides.
 */
export function extractTitle(frontmatter: Record<string, unknown>, body: string, fallback: string): string {
  const title = frontmatter.title;
  if (typeof title === 'string' && title.trim() !== '') return title.trim();
  const tokens = tokensOf(body);
  const blocks = findSensitiveBlocks(body);
  const hidden = (line: number) => blocks.some((b) => line >= b.startLine && line < b.endLine);
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (t.type === 'heading_open' && t.tag === 'h1' && t.level === 0 && t.map && !hidden(t.map[0])) {
      const text = plainText(tokens[i + 1]?.children);
      if (text !== '') return text;
    }
  }
  return fallback;
}

/** Tags from frontmatter `tags`, as a YAML list or a comma-separated string. */
export function extractTags(frontmatter: Record<string, unknown>): string[] {
  const raw = frontmatter.tags;
  const items: unknown[] = typeof raw === 'string' ? raw.split(',') : Array.isArray(raw) ? raw : [];
  const out: string[] = [];
  for (const item of items) {
    if (typeof item !== 'string') continue;
    const tag = item.trim();
    if (tag !== '' && !out.includes(tag)) out.push(tag);
  }
  return out;
}

const SCHEME = /^[a-z][a-z0-9+.-]*:/i;

/** The page path a markdown href points at, or null when it is not a link to a .md page. */
function markdownTarget(href: string): string | null {
  // `//host/...` is protocol-relative, i.e. external, even though it has no scheme.
  if (SCHEME.test(href) || href.startsWith('//')) return null;
  let path = href;
  for (const sep of ['#', '?']) {
    const at = path.indexOf(sep);
    if (at >= 0) path = path.slice(0, at);
  }
  path = decode(path);
  return path.toLowerCase().endsWith('.md') ? path : null;
}

function decode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s; // a stray `%` is taken literally rather than dropping the link
  }
}

const WIKILINK = /\[\[([^[\]|\n]+)(?:\|([^[\]\n]*))?\]\]/g;

function wikiLinks(text: string, out: Link[]): void {
  for (const m of text.matchAll(WIKILINK)) {
    const inner = m[1]!.trim();
    const hash = inner.indexOf('#');
    const target = (hash >= 0 ? inner.slice(0, hash) : inner).trim();
    if (target === '') continue; // `[[#heading]]` points inside the same page
    const label = m[2]?.trim();
    out.push({ target, kind: 'wiki', text: label ? label : inner });
  }
}

/** Links to other pages: markdown links to .md files and [[wikilinks]], outside code. */
export function extractLinks(body: string): Link[] {
  const found: Link[] = [];
  for (const block of tokensOf(body)) {
    if (block.type !== 'inline' || !block.children) continue;
    const children = block.children;
    // Adjacent text tokens are one run of prose; wikilinks are looked for in each run, so code
    // spans (separate tokens) never contribute.
    let run = '';
    for (let i = 0; i < children.length; i++) {
      const t = children[i]!;
      if (t.type === 'text') {
        run += t.content;
        continue;
      }
      wikiLinks(run, found);
      run = '';
      if (t.type === 'link_open') {
        const target = markdownTarget(String(t.attrGet('href') ?? ''));
        if (target === null) continue;
        const label: Token[] = [];
        for (let j = i + 1; j < children.length && children[j]!.type !== 'link_close'; j++) label.push(children[j]!);
        found.push({ target, kind: 'markdown', text: plainText(label) });
      }
    }
    wikiLinks(run, found);
  }
  const seen = new Set<string>();
  return found.filter((l) => !seen.has(l.target) && (seen.add(l.target), true));
}

interface Heading {
  level: number;
  text: string;
  /** The heading's inline source, so `Setup *now*` can be found as written too. */
  source: string;
  line: number;
  /** 0-based body line after the heading (a setext heading spans two lines). */
  endLine: number;
}

/** Headings at the top level of the page (not inside lists or quotes), in order. */
function headings(body: string): Heading[] {
  const tokens = tokensOf(body);
  const out: Heading[] = [];
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (t.type !== 'heading_open' || t.level !== 0 || !t.map) continue;
    const inline = tokens[i + 1];
    out.push({ level: Number(t.tag.slice(1)), text: plainText(inline?.children), source: inline?.content ?? '', line: t.map[0], endLine: t.map[1] });
  }
  return out;
}

function sliceLines(body: string, starts: number[], from: number, to: number): string {
  return body.slice(starts[from] ?? body.length, starts[to] ?? body.length);
}

/** Flat chunks: each heading runs until the next heading of any level. */
export function extractSections(body: string): Section[] {
  const starts = lineStarts(body);
  const hs = headings(body);
  const out: Section[] = [];
  const firstLine = hs[0]?.line ?? starts.length;
  const preamble = sliceLines(body, starts, 0, firstLine);
  if (preamble.trim() !== '') {
    out.push({ heading: '', level: 0, startLine: 0, endLine: firstLine, text: preamble });
  }
  hs.forEach((h, i) => {
    const endLine = hs[i + 1]?.line ?? starts.length;
    out.push({ heading: h.text, level: h.level, startLine: h.line, endLine, text: sliceLines(body, starts, h.line, endLine) });
  });
  return out;
}

function normalizeHeading(s: string): string {
  return collapse(s).toLowerCase();
}

/**
 * The section under the heading named `heading` (case and spacing ignored; "## Setup" also
 * accepted, preferring a level-2 match), including its sub-sections. Null when absent.
 */
export function findSection(body: string, heading: string): string | null {
  const r = findSectionRange(body, heading);
  return r ? body.slice(r.start, r.end) : null;
}

/** Where a section lies in the body (offsets): its heading line(s) from `start`, its text from `textStart` to `end`. */
export interface SectionRange {
  start: number;
  textStart: number;
  end: number;
  level: number;
}

/** The offsets of the section findSection returns (edits in place: append to, or replace, a section). Null when absent. */
export function findSectionRange(body: string, heading: string): SectionRange | null {
  let query = collapse(heading);
  let wantLevel: number | null = null;
  // "## Setup" (and "## Setup ##") name the level too; "#tag" without a space is just text.
  let hashes = 0;
  while (query[hashes] === '#') hashes++;
  if (hashes > 0 && hashes <= 6 && query[hashes] === ' ') {
    wantLevel = hashes;
    query = query.slice(hashes).replace(/\s+#+$/, '');
  }
  query = normalizeHeading(query);
  if (query === '') return null;
  const hs = headings(body);
  const matches = hs.filter((h) => normalizeHeading(h.text) === query || normalizeHeading(h.source) === query);
  const hit = matches.find((h) => h.level === wantLevel) ?? matches[0];
  if (!hit) return null;
  const starts = lineStarts(body);
  const next = hs.find((h) => h.line > hit.line && h.level <= hit.level);
  const at = (line: number) => starts[line] ?? body.length;
  return { start: at(hit.line), textStart: at(hit.endLine), end: at(next?.line ?? starts.length), level: hit.level };
}
