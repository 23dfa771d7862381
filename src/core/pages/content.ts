import { extractLinks, extractTags, extractTitle, maxBlockLevel, parseDocument } from '../../markdown/index.js';
import { DEFAULT_LEVEL, isLevel, LEVELS, type Level } from '../../policy/sensitivity.js';
import { badRequest, tooLarge } from '../errors.js';

/** Maximum size of one page's raw markdown (docs/api.md). */
export const MAX_PAGE_BYTES = 1024 * 1024;
/** Characters a tag may have. */
export const MAX_TAG_CHARS = 200;

export const ARCHIVE_REASONS = ['closed', 'stale', 'superseded', 'manual'] as const;
export type ArchiveReason = (typeof ARCHIVE_REASONS)[number];

/** Everything the service derives from a page's raw markdown. */
export interface PageContent {
  raw: string;
  frontmatter: Record<string, unknown>;
  body: string;
  title: string;
  tags: string[];
  links: { target: string; kind: 'wiki' | 'markdown'; text: string }[];
  sensitivity: Level;
  blockLevel: Level | null;
  state: 'active' | 'archived';
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Parses and validates raw page content; `fallbackTitle` is used when it names none. */
export function analyzeContent(raw: string, fallbackTitle: string): PageContent {
  if (raw.trim().length === 0) throw badRequest('Page content is empty', 'empty_content');
  if (Buffer.byteLength(raw, 'utf8') > MAX_PAGE_BYTES) {
    throw tooLarge(`Page content is larger than ${MAX_PAGE_BYTES} bytes`);
  }
  if (raw.includes('\u0000')) throw badRequest('Page content contains a NUL character', 'invalid_content');
  // Half a surrogate pair (sent as a JSON escape) is not Unicode: the engines stored it
  // differently (SQLite three U+FFFD, PostgreSQL one), so what was served did not match the
  // content_hash. Refused like NUL.
  if (LONE_SURROGATE.test(raw)) throw badRequest('Page content contains an unpaired surrogate (not valid Unicode)', 'invalid_content');
  const { frontmatter, body } = parseDocument(raw);
  const sens = frontmatter.sensitivity ?? DEFAULT_LEVEL;
  if (!isLevel(sens)) {
    throw badRequest(`frontmatter sensitivity must be one of ${LEVELS.join(', ')}`, 'invalid_sensitivity');
  }
  const state = frontmatter.state ?? 'active';
  if (state !== 'active' && state !== 'archived') {
    throw badRequest('frontmatter state must be active or archived', 'invalid_frontmatter');
  }
  if (state === 'archived' && frontmatter.archived_reason !== undefined && !ARCHIVE_REASONS.includes(frontmatter.archived_reason as ArchiveReason)) {
    throw badRequest(`archived_reason must be one of ${ARCHIVE_REASONS.join(', ')}`, 'invalid_frontmatter');
  }
  const tags = extractTags(frontmatter);
  // A tag is a short label, and a key of an index on both engines (a B-tree row on PostgreSQL
  // holds at most 2,704 bytes: a 3 kB tag was a 500 there).
  const long = tags.find((t) => [...t].length > MAX_TAG_CHARS);
  if (long !== undefined) throw badRequest(`A tag is longer than ${MAX_TAG_CHARS} characters: ${[...long].slice(0, 40).join('')}…`, 'invalid_frontmatter');
  return {
    raw,
    frontmatter,
    body,
    title: extractTitle(frontmatter, body, fallbackTitle),
    tags,
    links: extractLinks(body),
    sensitivity: sens,
    blockLevel: maxBlockLevel(body),
    state,
  };
}
