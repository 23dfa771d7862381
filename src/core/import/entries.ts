import { ServiceError } from '../errors.js';
import { parsePagePath } from '../paths.js';
import { IMPORT_LIMITS } from './limits.js';

/**
 * Turning uploaded names and bytes into pages to write, whatever the form of the upload (zip,
 * JSON, a folder on the operator's disk). Nothing here touches a file system: a name is only
 * ever a page path under the import's Space, so `../` or `/etc/passwd` can reach nothing, but
 * such names are reported rather than repaired, since an archive that holds them was not made
 * by an export tool.
 */

/** A file that will be written: its page path and its markdown. */
export interface ImportFile {
  path: string;
  content: string;
}

/** A file left out, with why (shown in the report). */
export interface SkippedFile {
  path: string;
  reason: string;
}

/** A file whose name had to change to be a page path. */
export interface RenamedFile {
  path: string;
  imported_as: string;
}

/** What an upload became before anything is written. */
export interface StagedImport {
  files: ImportFile[];
  skipped: SkippedFile[];
  renamed: RenamedFile[];
}

const MARKDOWN = /\.(md|markdown)$/i;
const fatalUtf8 = new TextDecoder('utf-8', { fatal: true });

/** The page path (under `space`) an uploaded name becomes, `null` for a folder entry, or why it cannot. */
export function pagePathFor(space: string, uploaded: string): { path: string } | { reason: string } | null {
  // macOS writes names decomposed (NFD: e + U+0301); a page path is composed, so both spellings
  // of one name are one page.
  const name = uploaded.normalize('NFC');
  if (name.endsWith('/')) return null;
  if (name.includes('\\')) return { reason: 'unsafe name: contains a backslash' };
  if (name.startsWith('/') || /^[A-Za-z]:/.test(name)) return { reason: 'unsafe name: an absolute path' };
  const segments = name.split('/');
  if (segments.some((s) => s === '..')) return { reason: 'unsafe name: leaves the archive with ..' };
  if (segments.some((s) => s === '' || s === '.')) return { reason: 'unsafe name: an empty or . segment' };
  if (segments.some((s) => s.startsWith('.') || s === '__MACOSX')) return { reason: 'a hidden or system file' };
  if (!MARKDOWN.test(name)) return { reason: 'not a markdown file (.md or .markdown)' };
  // Spaces are the one thing export tools put in names that a page path does not take.
  const cleaned = segments
    .map((s) => s.trim().replace(/\s+/g, '-'))
    .join('/')
    .replace(/\.markdown$/i, '.md')
    .replace(/\.MD$/, '.md');
  try {
    return { path: parsePagePath(`${space}/${cleaned}`).path };
  } catch (e) {
    if (e instanceof ServiceError) return { reason: e.message };
    throw e;
  }
}

/** The text of an uploaded file, or why it cannot be a page. */
export function pageText(bytes: Buffer): { text: string } | { reason: string } {
  if (bytes.length > IMPORT_LIMITS.maxFileBytes) return { reason: `larger than ${IMPORT_LIMITS.maxFileBytes} bytes` };
  let text: string;
  try {
    text = fatalUtf8.decode(bytes);
  } catch {
    return { reason: 'not valid UTF-8 text' };
  }
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  if (text.trim() === '') return { reason: 'empty' };
  if (text.includes('\u0000')) return { reason: 'contains a NUL character (binary data)' };
  return { text };
}

/**
 * Collects an upload's entries in order: the first entry at a page path wins and later ones are
 * reported as duplicates (two names may also become one path once spaces are replaced).
 */
export class StagingList implements StagedImport {
  readonly files: ImportFile[] = [];
  readonly skipped: SkippedFile[] = [];
  readonly renamed: RenamedFile[] = [];
  private readonly taken = new Map<string, string>();

  constructor(private readonly space: string) {}

  /** Judges an entry by name alone; answers its page path when its bytes are worth reading. */
  admit(name: string): string | null {
    const target = pagePathFor(this.space, name);
    if (target === null) return null;
    if ('reason' in target) {
      this.skip(name, target.reason);
      return null;
    }
    const first = this.taken.get(target.path);
    if (first !== undefined) {
      this.skip(name, first === name ? 'duplicate entry in the archive' : `becomes ${target.path}, as ${first} does`);
      return null;
    }
    this.taken.set(target.path, name);
    return target.path;
  }

  /** Adds an admitted entry's bytes (or text, from a JSON upload). */
  add(name: string, path: string, bytes: Buffer | string): void {
    const text = typeof bytes === 'string' ? pageText(Buffer.from(bytes, 'utf8')) : pageText(bytes);
    if ('reason' in text) {
      this.skip(name, text.reason);
      return;
    }
    if (`${this.space}/${name}` !== path) this.renamed.push({ path: name, imported_as: path });
    this.files.push({ path, content: text.text });
  }

  skip(name: string, reason: string): void {
    this.skipped.push({ path: name, reason });
  }
}
