import path from 'node:path/posix';

/** How links name pages: the lower-cased keys a page answers to, and the key a link asks for. */

function norm(s: string): string {
  return s.normalize('NFC').trim().split(/\s+/).join(' ').toLowerCase();
}

/**
 * A key longer than a path may be (in characters) names no page: such a title is not a link
 * target by title (its path still is), and such a link resolves to nothing. Keys are B-tree keys
 * on PostgreSQL, whose rows hold at most 2,704 bytes: a 3 kB title was a 500 (an attack,
 * test/http/attack-session-i.test.ts).
 */
export const MAX_KEY_CHARS = 512;

/** The names a page answers to: its path, its path without `.md`, its slug and its title. */
export function pageKeys(pagePath: string, title: string): string[] {
  const noExt = pagePath.replace(/\.md$/i, '');
  const slug = noExt.split('/').pop() ?? noExt;
  const keys = new Set([norm(pagePath), norm(noExt), norm(slug), norm(title)]);
  keys.delete('');
  return [...keys].filter((k) => k.length <= MAX_KEY_CHARS);
}

/**
 * The key a link asks for, or null when it can never name a page. `[[Target]]` names a page by
 * title, slug or path; a markdown link is a path relative to the linking page's folder (or to
 * the workspace root with a leading `/`).
 */
export function linkKey(link: { target: string; kind: 'wiki' | 'markdown' }, sourceFolder: string): string | null {
  if (link.kind === 'wiki') {
    const k = norm(link.target);
    return k === '' || k.length > MAX_KEY_CHARS ? null : k;
  }
  const t = link.target.trim();
  if (t === '') return null;
  const joined = t.startsWith('/') ? path.normalize(t.slice(1)) : path.normalize(path.join(sourceFolder, t));
  if (joined.startsWith('..') || joined.startsWith('/') || joined === '.') return null;
  const k = norm(joined);
  return k.length > MAX_KEY_CHARS ? null : k;
}

/** Among pages answering to a key, the one a link from `sourcePath` means: exact path, then nearest folder, then shortest path. */
export function pickTarget<T extends { path: string }>(candidates: T[], key: string, sourcePath: string): T | null {
  if (candidates.length === 0) return null;
  const folder = sourcePath.split('/').slice(0, -1);
  const shared = (p: string) => {
    const f = p.split('/').slice(0, -1);
    let n = 0;
    while (n < f.length && n < folder.length && f[n] === folder[n]) n++;
    return n;
  };
  return [...candidates].sort((a, b) => {
    const ea = norm(a.path) === key || norm(a.path.replace(/\.md$/i, '')) === key ? 0 : 1;
    const eb = norm(b.path) === key || norm(b.path.replace(/\.md$/i, '')) === key ? 0 : 1;
    return ea - eb || shared(b.path) - shared(a.path) || a.path.length - b.path.length || (a.path < b.path ? -1 : 1);
  })[0]!;
}
