import { Document, isMap, parseDocument as parseYaml, stringify as stringifyYaml } from 'yaml';
import { badRequest } from '../errors/index.js';

/** A page split into its YAML frontmatter and its markdown body. */
export interface ParsedDocument {
  frontmatter: Record<string, unknown>;
  /** The raw text after the closing fence, byte for byte. */
  body: string;
  /** 0-based line of the raw document where the body starts. */
  bodyLine: number;
}

/**
 * Offsets where each line of `text` starts. Line breaks are `\r\n`, `\r` or `\n`, the same
 * ones markdown-it splits on, so its token line maps index into this array. A trailing line
 * break does not open an extra empty line (again as markdown-it counts).
 */
/** `fn` remembering its last argument and answer (for pure functions of a string). */
export function lastOf<T>(fn: (text: string) => T): (text: string) => T {
  let lastText: string | undefined;
  let lastValue: T | undefined;
  return (text) => {
    if (text !== lastText) {
      lastValue = fn(text);
      lastText = text;
    }
    return lastValue as T;
  };
}

export function lineStarts(text: string): number[] {
  const starts: number[] = [];
  if (text.length > 0) starts.push(0);
  for (let i = 0; i < text.length; i++) {
    const ch = text.charCodeAt(i);
    if (ch === 0x0d && text.charCodeAt(i + 1) === 0x0a) i++;
    else if (ch !== 0x0d && ch !== 0x0a) continue;
    if (i + 1 < text.length) starts.push(i + 1);
  }
  return starts;
}

/** A line's text without its line break. */
function lineContent(text: string, start: number, next: number | undefined): string {
  let end = next ?? text.length;
  if (end > start && text.charCodeAt(end - 1) === 0x0a) end--;
  if (end > start && text.charCodeAt(end - 1) === 0x0d) end--;
  return text.slice(start, end);
}

/** `---`, tolerating trailing blanks, which editors leave behind. */
function isFence(line: string, marker: '---' | '...'): boolean {
  return line.startsWith(marker) && line.slice(3).trim() === '';
}

interface FrontmatterSpan {
  /** Text before the YAML: the opening fence line (and a BOM if any). */
  open: string;
  yaml: string;
  /** The closing fence line with its line break. */
  close: string;
  /** Line where the YAML starts (1, after the opening fence). */
  yamlLine: number;
  bodyStart: number;
  bodyLine: number;
}

/** Locates a frontmatter block without interpreting it; null when the document has none. */
function locate(raw: string): FrontmatterSpan | null {
  const bom = raw.charCodeAt(0) === 0xfeff ? 1 : 0;
  const starts = lineStarts(raw);
  const first = starts.length > 0 ? lineContent(raw, bom, starts[1]) : '';
  if (!isFence(first, '---')) return null;
  for (let i = 1; i < starts.length; i++) {
    const start = starts[i]!;
    const line = lineContent(raw, start, starts[i + 1]);
    if (isFence(line, '---') || isFence(line, '...')) {
      const bodyStart = starts[i + 1] ?? raw.length;
      return {
        open: raw.slice(0, starts[1]),
        yaml: raw.slice(starts[1], start),
        close: raw.slice(start, bodyStart),
        yamlLine: 1,
        bodyStart,
        bodyLine: i + 1,
      };
    }
  }
  throw badRequest('Frontmatter starts on line 1 but has no closing --- line', 'invalid_frontmatter');
}

/** Deepest nesting frontmatter may have: far beyond any real page, far below what costs CPU. */
export const MAX_FRONTMATTER_DEPTH = 32;

const tooDeep = (where: string) => badRequest(`Invalid frontmatter: nested deeper than ${MAX_FRONTMATTER_DEPTH} levels${where}`, 'invalid_frontmatter');

/**
 * A cheap upper bound of the YAML's nesting, checked BEFORE the parser runs: the depth of flow
 * brackets (`[`, `{`, outside quotes) plus the depth of block indentation and compact `- - -`
 * sequences. A 100,000-deep `[[[…` would otherwise cost seconds of parsing or overflow the
 * stack into a 500.
 */
function yamlDepthBound(yaml: string): number {
  let max = 0;
  let flow = 0;
  let quote: string | null = null;
  const indents: number[] = [];
  for (const line of yaml.split('\n')) {
    const trimmed = line.replace(/^\s+/, '');
    if (trimmed !== '' && !trimmed.startsWith('#') && flow === 0 && quote === null) {
      const indent = line.length - trimmed.length;
      while (indents.length > 0 && indents[indents.length - 1]! >= indent) indents.pop();
      indents.push(indent);
      const dashes = /^(?:-\s+)+/.exec(trimmed)?.[0].split('-').length ?? 1;
      max = Math.max(max, indents.length + dashes - 1);
    }
    for (let i = 0; i < line.length; i++) {
      const c = line[i]!;
      if (quote !== null) {
        if (c === '\\' && quote === '"') i++;
        else if (c === quote) quote = null;
      } else if (c === '"' || c === "'") quote = c;
      else if (c === '#' && (i === 0 || /\s/.test(line[i - 1]!))) break;
      else if (c === '[' || c === '{') max = Math.max(max, indents.length + ++flow);
      else if ((c === ']' || c === '}') && flow > 0) flow--;
    }
    if (quote === "'") quote = null;
  }
  return max;
}

/** Refuses a frontmatter value (from a JSON body) nested deeper than MAX_FRONTMATTER_DEPTH. */
export function assertFrontmatterDepth(value: unknown, depth = 0): void {
  if (depth > MAX_FRONTMATTER_DEPTH) throw tooDeep('');
  if (value !== null && typeof value === 'object') {
    for (const v of Object.values(value as Record<string, unknown>)) assertFrontmatterDepth(v, depth + 1);
  }
}

/** Parses the YAML of a located block, keeping the Document so edits can preserve comments. */
function loadYaml(span: FrontmatterSpan): Document {
  if (yamlDepthBound(span.yaml) > MAX_FRONTMATTER_DEPTH) throw tooDeep(` (line ${span.yamlLine + 1} onwards)`);
  const doc = parseYaml(span.yaml, { prettyErrors: true });
  const err = doc.errors[0];
  if (err) {
    // yaml reports lines relative to the YAML text; the reader wants the line of the page.
    const rel = err.linePos?.[0]?.line;
    const where = rel === undefined ? '' : ` at line ${span.yamlLine + rel}`;
    const cut = err.message.indexOf(' at line ');
    const what = (cut >= 0 ? err.message.slice(0, cut) : err.message.split('\n')[0]) ?? 'parse error';
    throw badRequest(`Invalid frontmatter YAML${where}: ${what}`, 'invalid_frontmatter');
  }
  if (doc.contents !== null && !isMap(doc.contents)) {
    throw badRequest(`Invalid frontmatter at line ${span.yamlLine + 1}: expected a mapping of keys to values`, 'invalid_frontmatter');
  }
  return doc;
}

function toRecord(doc: Document): Record<string, unknown> {
  // Aliases expand on conversion: a few anchors referenced many times ("billion laughs") are refused.
  let value: unknown;
  try {
    value = doc.toJS({ maxAliasCount: 100 });
  } catch (e) {
    throw badRequest(`Invalid frontmatter: ${e instanceof Error ? e.message.split('\n')[0] : 'aliases expand too far'}`, 'invalid_frontmatter');
  }
  return value !== null && typeof value === 'object' ? (value as Record<string, unknown>) : {};
}

/** Splits a page into frontmatter and body; throws `invalid_frontmatter` on a bad block. */
export function parseDocument(raw: string): ParsedDocument {
  const span = locate(raw);
  if (!span) return { frontmatter: {}, body: raw, bodyLine: 0 };
  return { frontmatter: toRecord(loadYaml(span)), body: raw.slice(span.bodyStart), bodyLine: span.bodyLine };
}

/** The body alone, without parsing the YAML: for callers that already hold the parsed frontmatter. */
export function documentBody(raw: string): string {
  const span = locate(raw);
  return span ? raw.slice(span.bodyStart) : raw;
}

/** Does the body's first line look like an opening fence, so it would be read as frontmatter? */
function startsWithFence(body: string): boolean {
  const starts = lineStarts(body);
  return starts.length > 0 && isFence(lineContent(body, 0, starts[1]), '---');
}

const YAML_OPTIONS = { lineWidth: 0 } as const;

/** Joins frontmatter and body; the inverse of parseDocument. */
export function serializeDocument(frontmatter: Record<string, unknown>, body: string): string {
  const yaml = Object.keys(frontmatter).length > 0 ? stringifyYaml(frontmatter, YAML_OPTIONS) : '';
  // An empty block is still written when the body itself opens with `---`; otherwise the body
  // would be mistaken for frontmatter when read back.
  if (yaml === '' && !startsWithFence(body)) return body;
  return `---\n${yaml}---\n${body}`;
}

function isScalarValue(v: unknown): boolean {
  return v === null || (typeof v !== 'object' && typeof v !== 'function');
}

/**
 * Sets (or, for undefined, removes) frontmatter keys and leaves everything else alone: the body
 * byte for byte, other keys in their order, comments and quoting where yaml can keep them.
 */
export function setFrontmatterFields(raw: string, fields: Record<string, unknown | undefined>): string {
  const span = locate(raw);
  if (!span) {
    const added = Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined));
    if (Object.keys(added).length === 0) return raw;
    return `---\n${stringifyYaml(added, YAML_OPTIONS)}---\n${raw}`;
  }
  const doc = loadYaml(span);
  for (const [key, value] of Object.entries(fields)) {
    if (value === undefined) {
      doc.delete(key);
    } else if (doc.contents === null) {
      doc.contents = doc.createNode({ [key]: value });
    } else {
      // A plain scalar replaces only the value of an existing node, so its comment and style stay.
      doc.set(key, isScalarValue(value) ? value : doc.createNode(value));
    }
  }
  const empty = doc.contents === null || (isMap(doc.contents) && doc.contents.items.length === 0);
  let yaml = empty ? '' : doc.toString(YAML_OPTIONS);
  // Keep the page's line-break style inside the block it already had.
  if (span.open.endsWith('\r\n')) yaml = yaml.split('\n').join('\r\n');
  return span.open + yaml + span.close + raw.slice(span.bodyStart);
}
