import { badRequest } from './errors.js';

/** Documented limits for page paths (docs/api.md). */
export const PATH_LIMITS = { maxLength: 512, maxSegment: 100, maxSegmentBytes: 255, maxDepth: 12 } as const;

// Letters and digits of any script, and - _ . inside a name; no leading dot (hidden files, `..`).
const SEGMENT = /^[\p{L}\p{N}_][\p{L}\p{N}_.-]*$/u;

function checkSegment(seg: string, what: string): void {
  if (seg.length === 0) throw badRequest(`${what} has an empty segment`, 'invalid_path');
  if (seg.length > PATH_LIMITS.maxSegment) {
    throw badRequest(`${what} has a segment longer than ${PATH_LIMITS.maxSegment} characters`, 'invalid_path');
  }
  // Git's limit on a name: 100 characters of some scripts pass 255 bytes (3 or 4 bytes each).
  if (Buffer.byteLength(seg, 'utf8') > PATH_LIMITS.maxSegmentBytes) {
    throw badRequest(`${what} has a segment longer than ${PATH_LIMITS.maxSegmentBytes} bytes in UTF-8`, 'invalid_path');
  }
  if (seg === '.' || seg === '..' || !SEGMENT.test(seg) || seg.includes('..')) {
    throw badRequest(`${what} segment "${seg}" is not allowed: use letters, digits, '-', '_' and '.', not starting with '.' and without '..'`, 'invalid_path');
  }
}

function checkRaw(raw: string, what: string): void {
  if (raw.length === 0) throw badRequest(`${what} is empty`, 'invalid_path');
  if (raw.length > PATH_LIMITS.maxLength) throw badRequest(`${what} is longer than ${PATH_LIMITS.maxLength} characters`, 'invalid_path');
  if (/[\u0000-\u001f\u007f]/.test(raw)) throw badRequest(`${what} contains a control character`, 'invalid_path');
  if (raw.includes('\\')) throw badRequest(`${what} contains a backslash; use '/'`, 'invalid_path');
  if (raw.startsWith('/')) throw badRequest(`${what} must be relative (no leading '/')`, 'invalid_path');
  if (raw.endsWith('/')) throw badRequest(`${what} must not end with '/'`, 'invalid_path');
}

export interface PagePath {
  path: string;
  space: string;
  /** The folder holding the page: `<space>/<folder>…`, or `<space>` for a page at the Space's root. */
  folderPath: string;
  slug: string;
}

/** Validates a page path `<space>/[<folder>/…]<slug>.md` and splits it. */
export function parsePagePath(raw: string): PagePath {
  checkRaw(raw, 'Path');
  const segments = raw.split('/');
  if (segments.length < 2) throw badRequest('Path must be <space>/<folder>/<name>.md (at least a Space and a file)', 'invalid_path');
  if (segments.length > PATH_LIMITS.maxDepth) throw badRequest(`Path is deeper than ${PATH_LIMITS.maxDepth} levels`, 'invalid_path');
  const file = segments[segments.length - 1]!;
  for (const s of segments.slice(0, -1)) checkSegment(s, 'Path');
  // The likeliest slip (issue 13): the name without `.md`; say which path was meant.
  if (!file.endsWith('.md') && !file.includes('.') && SEGMENT.test(file) && file.length <= PATH_LIMITS.maxSegment - 3) {
    throw badRequest(`A page path must name a .md file: did you mean ${raw}.md?`, 'invalid_path');
  }
  checkSegment(file, 'Path');
  if (!file.endsWith('.md') || file.length <= 3) throw badRequest('A page path must name a .md file', 'invalid_path');
  return {
    path: raw,
    space: segments[0]!,
    folderPath: segments.slice(0, -1).join('/'),
    slug: file.slice(0, -3),
  };
}

/** Validates a folder or Space path (`<space>` or `<space>/<folder>…`). */
export function parseFolderPath(raw: string): { path: string; space: string } {
  checkRaw(raw, 'Folder path');
  const segments = raw.split('/');
  if (segments.length > PATH_LIMITS.maxDepth - 1) throw badRequest('Folder path is too deep', 'invalid_path');
  for (const s of segments) checkSegment(s, 'Folder path');
  return { path: raw, space: segments[0]! };
}

/** Validates a Space id: one path segment. */
export function parseSpaceId(raw: string): string {
  checkRaw(raw, 'Space id');
  if (raw.includes('/')) throw badRequest('A Space id is a single name without "/"', 'invalid_path');
  checkSegment(raw, 'Space id');
  return raw;
}

/** Turns a title into a file-name slug (`Release Notes 2.0` → `release-notes-2-0`). */
export function slugify(title: string): string {
  const slug = title
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]+/gu, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 80)
    .replace(/-+$/g, '');
  return slug || 'untitled';
}

/** Every folder path from the Space's first folder down to the given cluster path. */
export function folderChain(folderPath: string): string[] {
  const segs = folderPath.split('/');
  const out: string[] = [];
  for (let i = 2; i <= segs.length; i++) out.push(segs.slice(0, i).join('/'));
  return out;
}
