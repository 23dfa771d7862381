/**
 * A second retrieval evaluation set, of a different kind of real text than the first (issue 20):
 * the Linux man-pages project's manual pages as Debian ships them (`manpages`, `manpages-dev`),
 * sections 2 (system calls), 4 (devices), 5 (file formats) and 7 (overviews).
 *
 * The queries are made from the pages' own structure, so nobody here can tune them: each page's
 * NAME line ("open, openat, creat - open and possibly create a file") gives one query, its
 * description after the dash, and the NAME section is removed from the page that is loaded. A
 * query's relevant pages are every page whose NAME line says exactly that. No query is written
 * or chosen by hand.
 *
 * Each page is rendered with `man -l -P cat` (groff, 100 columns, overstrikes removed by
 * `col -bx`) and becomes markdown: `# name(section)`, each manual section a `##` heading with its
 * text dedented. Output: bench/.cache/eval/man-corpus.json ({ packages, pages, queries }).
 *
 *   tsx bench/eval/build-man-corpus.ts [--force]
 *
 * Installs the packages (and man-db) with apt-get when missing and running as root; otherwise
 * says what to install. Deterministic for a given package version.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CACHE_DIR, installedVersion, type CorpusPage } from './build-corpus.js';

export const MAN_CORPUS_FILE = path.join(CACHE_DIR, 'man-corpus.json');
const PACKAGES = ['manpages', 'manpages-dev'] as const;
const SECTIONS = ['2', '4', '5', '7'];

export interface ManQuery {
  id: string;
  group: string;
  kind: 'description';
  q: string;
  relevant: string[];
}

export interface ManCorpus {
  packages: { name: string; version: string; licence: string }[];
  pages: CorpusPage[];
  queries: ManQuery[];
}

function log(msg: string): void {
  process.stderr.write(`[man corpus] ${msg}\n`);
}

function ensurePackages(): { name: string; version: string }[] {
  const missing = [...PACKAGES, 'man-db', 'groff-base'].filter((p) => installedVersion(p) === null);
  if (missing.length > 0) {
    if (process.getuid?.() !== 0) throw new Error(`the man-page evaluation set needs ${missing.join(', ')}: \`sudo apt-get install ${missing.join(' ')}\``);
    log(`installing ${missing.join(', ')}`);
    execFileSync('apt-get', ['install', '-y', '--no-install-recommends', ...missing], { stdio: 'inherit' });
  }
  return PACKAGES.map((name) => ({ name, version: installedVersion(name)! }));
}

/** The package's own man-page files of the chosen sections (no links: a link is another page's name). */
function pageFiles(): string[] {
  const files = execFileSync('dpkg', ['-L', ...PACKAGES], { encoding: 'utf8' })
    .split('\n')
    .filter((f) => SECTIONS.some((s) => f.startsWith(`/usr/share/man/man${s}/`)) && f.endsWith('.gz'));
  return [...new Set(files)].filter((f) => fs.existsSync(f) && !fs.lstatSync(f).isSymbolicLink()).sort();
}

function render(file: string): string {
  const raw = execFileSync('man', ['-l', '-P', 'cat', file], {
    encoding: 'utf8',
    env: { ...process.env, MANWIDTH: '100', LANG: 'C.UTF-8' },
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  return execFileSync('col', ['-bx'], { input: raw, encoding: 'utf8' });
}

/** Manual sections: a line at column 0 in capitals starts one; the text under it is indented. */
function sections(text: string): { heading: string; body: string }[] {
  const lines = text.split('\n');
  const out: { heading: string; body: string[] }[] = [];
  // The first and last lines are the running header and footer.
  for (const line of lines.slice(1, -2)) {
    if (/^[A-Z][A-Z0-9 ,/()-]+$/.test(line.trimEnd())) out.push({ heading: line.trim(), body: [] });
    else out.at(-1)?.body.push(line.replace(/^ {7}/, ''));
  }
  return out.map((s) => ({
    heading: s.heading,
    body: s.body
      .join('\n')
      .replace(/\n{3,}/g, '\n\n')
      .trim(),
  }));
}

export function buildManCorpus(): ManCorpus {
  const versions = ensurePackages();
  const files = pageFiles();
  log(`rendering ${files.length} pages`);
  const pages: CorpusPage[] = [];
  const described: { path: string; description: string }[] = [];
  for (const [i, file] of files.entries()) {
    const base = path.basename(file, '.gz');
    const sec = base.slice(base.lastIndexOf('.') + 1);
    const name = base.slice(0, base.lastIndexOf('.'));
    const parts = sections(render(file));
    const nameLine = parts.find((p) => p.heading === 'NAME')?.body.replace(/\s+/g, ' ') ?? '';
    const dash = nameLine.search(/ [-\u2010-\u2014] /);
    const description = dash < 0 ? '' : nameLine.slice(dash + 3).trim();
    const rest = parts.filter((p) => p.heading !== 'NAME' && p.body !== '');
    if (description === '' || rest.length === 0) continue;
    const pagePath = `man${sec}/${name.replace(/[^A-Za-z0-9_.-]/g, '_')}.md`;
    const content = [`# ${name}(${sec})`, '', ...rest.flatMap((p) => [`## ${p.heading[0]}${p.heading.slice(1).toLowerCase()}`, '', p.body, ''])].join('\n');
    pages.push({ path: pagePath, title: `${name}(${sec})`, content, source: `manpages:${file}` });
    described.push({ path: pagePath, description });
    if ((i + 1) % 200 === 0) log(`  ${i + 1}/${files.length}`);
  }
  // One query per distinct description; every page that says it is relevant.
  const byText = new Map<string, string[]>();
  for (const d of described) {
    const key = d.description.toLowerCase();
    byText.set(key, [...(byText.get(key) ?? []), d.path]);
  }
  const queries: ManQuery[] = [...byText.entries()].map(([, paths], i) => {
    const q = described.find((d) => d.path === paths[0])!.description;
    return { id: `m${String(i + 1).padStart(4, '0')}`, group: `m${i + 1}`, kind: 'description', q, relevant: paths };
  });
  return {
    packages: versions.map((v) => ({ ...v, licence: 'various free licences of the Linux man-pages project (/usr/share/doc/manpages/copyright)' })),
    pages,
    queries,
  };
}

export function loadManCorpus(force = false): ManCorpus {
  if (!force && fs.existsSync(MAN_CORPUS_FILE)) return JSON.parse(fs.readFileSync(MAN_CORPUS_FILE, 'utf8')) as ManCorpus;
  const c = buildManCorpus();
  fs.mkdirSync(CACHE_DIR, { recursive: true });
  fs.writeFileSync(MAN_CORPUS_FILE, JSON.stringify(c));
  return c;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const c = loadManCorpus(process.argv.includes('--force'));
  const chars = c.pages.reduce((a, p) => a + p.content.length, 0);
  process.stdout.write(
    `${JSON.stringify({ packages: c.packages, pages: c.pages.length, queries: c.queries.length, chars_total: chars, chars_mean: Math.round(chars / Math.max(1, c.pages.length)), file: MAN_CORPUS_FILE }, null, 2)}\n`,
  );
}
