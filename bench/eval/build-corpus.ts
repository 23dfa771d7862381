/**
 * Builds the retrieval evaluation corpus from two Debian documentation packages:
 *   - debian-handbook (The Debian Administrator's Handbook, en-US HTML)
 *   - debian-reference-en (Debian Reference, English HTML)
 * Each DocBook section of depth ≤ 3 (chapter, x.y, x.y.z) becomes one markdown page:
 * `# Title`, its text, and its deeper headings as `##` / `###`. Navigation, tables of
 * contents and index anchors are dropped. Output: bench/.cache/eval/corpus.json
 * ({ packages, pages: [{ path, title, content, source }] }) and the pages as .md files
 * under bench/.cache/eval/pages/ (for reading when judging queries).
 *
 *   tsx bench/eval/build-corpus.ts [--force]
 *
 * Installs the packages with apt-get when they are missing and we run as root; otherwise
 * explains what to install. Deterministic for a given package version.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const CACHE_DIR = path.resolve(HERE, '..', '.cache', 'eval');
export const CORPUS_FILE = path.join(CACHE_DIR, 'corpus.json');

const PACKAGES = ['debian-handbook', 'debian-reference-en'] as const;
const HANDBOOK_DIR = '/usr/share/doc/debian-handbook/html/en-US';
const REFERENCE_DIR = '/usr/share/debian-reference';

export interface CorpusPage {
  path: string;
  title: string;
  content: string;
  /** Source file and anchor, e.g. `debian-handbook:sect.apt-get.html#sect.apt-update`. */
  source: string;
}

export interface Corpus {
  packages: { name: string; version: string; licence: string }[];
  pages: CorpusPage[];
}

function log(msg: string): void {
  process.stderr.write(`[eval corpus] ${msg}\n`);
}

/** The installed version of a Debian package, or null. */
export function installedVersion(pkg: string): string | null {
  try {
    const out = execFileSync('dpkg-query', ['-W', '-f=${Status}\t${Version}', pkg], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    const [status, version] = out.split('\t');
    return status?.includes('install ok installed') ? (version ?? null) : null;
  } catch {
    return null;
  }
}

function ensurePackages(): { name: string; version: string }[] {
  const missing = PACKAGES.filter((p) => installedVersion(p) === null);
  if (missing.length > 0) {
    if (process.getuid?.() !== 0) {
      throw new Error(`the evaluation corpus needs the Debian packages ${missing.join(', ')}: run as root, or \`sudo apt-get install ${missing.join(' ')}\``);
    }
    log(`installing ${missing.join(', ')} with apt-get`);
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    try {
      execFileSync('apt-get', ['install', '-y', '--no-install-recommends', ...missing], { stdio: ['ignore', 'ignore', 'inherit'], env });
    } catch {
      execFileSync('apt-get', ['update'], { stdio: ['ignore', 'ignore', 'inherit'], env });
      execFileSync('apt-get', ['install', '-y', '--no-install-recommends', ...missing], { stdio: ['ignore', 'ignore', 'inherit'], env });
    }
  }
  return PACKAGES.map((name) => ({ name, version: installedVersion(name)! }));
}

// ---------------------------------------------------------------------------------------------
// A small XHTML tree (the DocBook output of both packages is well-formed XML).
// ---------------------------------------------------------------------------------------------

interface El {
  tag: string;
  attrs: Record<string, string>;
  children: Node[];
}
type Node = El | string;

const VOID = new Set(['br', 'hr', 'img', 'meta', 'link', 'col', 'input', 'area', 'base', 'wbr']);

function decodeEntities(s: string): string {
  return s.replace(/&(#x[0-9a-f]+|#[0-9]+|[a-z]+);/gi, (m, e: string) => {
    if (e[0] === '#') {
      const cp = e[1] === 'x' || e[1] === 'X' ? Number.parseInt(e.slice(2), 16) : Number.parseInt(e.slice(1), 10);
      return Number.isFinite(cp) ? String.fromCodePoint(cp) : m;
    }
    const named: Record<string, string> = { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'", nbsp: '\u00a0' };
    return named[e.toLowerCase()] ?? m;
  });
}

function parseXhtml(src: string): El {
  const root: El = { tag: '#root', attrs: {}, children: [] };
  const stack: El[] = [root];
  const re =
    /<!--[\s\S]*?-->|<!\[CDATA\[[\s\S]*?\]\]>|<[!?][^>]*>|<\/([a-zA-Z0-9:]+)\s*>|<([a-zA-Z0-9:]+)((?:\s+[^\s=>/]+(?:\s*=\s*(?:"[^"]*"|'[^']*'))?)*)\s*(\/?)>/g;
  let last = 0;
  for (let m = re.exec(src); m; m = re.exec(src)) {
    if (m.index > last) stack[stack.length - 1]!.children.push(decodeEntities(src.slice(last, m.index)));
    last = re.lastIndex;
    if (m[1]) {
      const tag = m[1].toLowerCase();
      const at = stack.map((e) => e.tag).lastIndexOf(tag);
      if (at > 0) stack.length = at;
    } else if (m[2]) {
      const tag = m[2].toLowerCase();
      const attrs: Record<string, string> = {};
      for (const a of (m[3] ?? '').matchAll(/([^\s=>/]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'))?/g)) attrs[a[1]!.toLowerCase()] = decodeEntities(a[2] ?? a[3] ?? '');
      const el: El = { tag, attrs, children: [] };
      stack[stack.length - 1]!.children.push(el);
      if (!m[4] && !VOID.has(tag)) stack.push(el);
    }
  }
  if (last < src.length) stack[stack.length - 1]!.children.push(decodeEntities(src.slice(last)));
  return root;
}

function cls(el: El): string[] {
  return (el.attrs.class ?? '').split(/\s+/).filter(Boolean);
}

function textOf(n: Node): string {
  return typeof n === 'string' ? n : n.children.map(textOf).join('');
}

// ---------------------------------------------------------------------------------------------
// DocBook HTML → a stream of blocks (headings and markdown paragraphs).
// ---------------------------------------------------------------------------------------------

type Block = { kind: 'heading'; level: number; text: string; id: string } | { kind: 'md'; text: string };

const SKIP_CLASSES = new Set(['docnav', 'navheader', 'navfooter', 'toc', 'indexterm', 'list-of-tables', 'list-of-figures', 'list-of-examples', 'mediaobject']);
const SKIP_IDS = new Set(['banner', 'title', 'breadcrumbs', 'site_footer']);

function squash(s: string): string {
  return s.replace(/[\s\u00a0]+/g, ' ').trim();
}

/** Inline markdown of an element's content (code spans for literal-ish DocBook classes). */
function inline(n: Node): string {
  if (typeof n === 'string') return n.replace(/[\s\u00a0]+/g, ' ');
  if (n.tag === 'br') return ' ';
  if (n.tag === 'a' && cls(n).includes('indexterm')) return '';
  if (n.tag === 'sup' && cls(n).includes('footnote')) return '';
  const inner = n.children.map(inline).join('');
  if (n.tag === 'code' || n.tag === 'tt' || (n.tag === 'span' && cls(n).some((c) => c === 'command' || c === 'filename' || c === 'literal'))) {
    const t = inner.trim();
    if (t === '') return inner;
    const tick = t.includes('`') ? '``' : '`';
    return `${tick}${t}${tick}`;
  }
  if (n.tag === 'em' || n.tag === 'i') return inner.trim() ? `*${inner.trim()}*` : inner;
  if (n.tag === 'strong' || n.tag === 'b') return inner.trim() ? `**${inner.trim()}**` : inner;
  return inner;
}

function headingText(el: El): string {
  // Drop section numbers ("6.2.1. ", "Chapter 3. ") from titles.
  return squash(el.children.map(inline).join(''))
    .replace(/^Chapter\s+\d+\.\s*/i, '')
    .replace(/^Appendix\s+[A-Z]\.\s*/i, '')
    .replace(/^(\d+|[A-Z])(\.\d+)*\.\s+/, '');
}

function anchorId(el: El): string {
  const stack: Node[] = [el];
  while (stack.length) {
    const n = stack.shift()!;
    if (typeof n === 'string') continue;
    if (n.tag === 'a' && n.attrs.id) return n.attrs.id;
    stack.push(...n.children);
  }
  return '';
}

class Walker {
  blocks: Block[] = [];
  /** Section depth of the enclosing DocBook section element: chapter 1, x.y 2, x.y.z 3, … */
  private emit(text: string): void {
    const t = text.replace(/[ \t]+\n/g, '\n').trim();
    if (t !== '') this.blocks.push({ kind: 'md', text: t });
  }

  walk(n: Node, listDepth = 0): void {
    if (typeof n === 'string') {
      if (n.trim() !== '') this.emit(squash(n));
      return;
    }
    const c = cls(n);
    if (c.some((x) => SKIP_CLASSES.has(x)) || SKIP_IDS.has(n.attrs.id ?? '')) return;
    if (['script', 'style', 'head', 'img'].includes(n.tag)) return;
    const hm = /^h([1-6])$/.exec(n.tag);
    if (hm) {
      const text = headingText(n);
      if (text) this.blocks.push({ kind: 'heading', level: Number(hm[1]), text, id: anchorId(n) });
      return;
    }
    if (n.tag === 'div' && c.includes('titlepage')) {
      // Sidebar/admonition/table titles are <p class="title"> inside a titlepage: a bold line.
      for (const ch of n.children) this.walk(ch, listDepth);
      return;
    }
    if (n.tag === 'p' && c.includes('title')) {
      const t = squash(textOf(n));
      if (t) this.emit(`**${t}**`);
      return;
    }
    if (n.tag === 'pre') {
      const body = textOf(n).replace(/^\n+|\s+$/g, '');
      if (body) this.emit(`\`\`\`\n${body.replace(/```/g, "'''")}\n\`\`\``);
      return;
    }
    if (n.tag === 'p' || (n.tag === 'div' && (c.includes('para') || c.includes('simpara')))) {
      // A para may hold block children (lists, screens): split around them.
      let buf = '';
      const flush = () => {
        if (squash(buf)) this.emit(squash(buf));
        buf = '';
      };
      for (const ch of n.children) {
        if (typeof ch !== 'string' && ['pre', 'ul', 'ol', 'table', 'div', 'dl'].includes(ch.tag) && !(ch.tag === 'div' && cls(ch).includes('para'))) {
          flush();
          this.walk(ch, listDepth);
        } else buf += inline(ch);
      }
      flush();
      return;
    }
    if (n.tag === 'ul' || n.tag === 'ol') {
      let i = 1;
      for (const li of n.children) {
        if (typeof li === 'string' || li.tag !== 'li') continue;
        const sub = new Walker();
        for (const ch of li.children) sub.walk(ch, listDepth + 1);
        const text = sub.blocks.map((b) => (b.kind === 'md' ? b.text : `**${b.text}**`)).join('\n');
        const bullet = n.tag === 'ol' ? `${i++}.` : '-';
        const indent = '  '.repeat(listDepth);
        const lines = text.split('\n');
        this.emit(
          `${indent}${bullet} ${lines[0] ?? ''}${lines
            .slice(1)
            .map((l) => `\n${indent}  ${l}`)
            .join('')}`,
        );
      }
      return;
    }
    if (n.tag === 'dl') {
      for (const ch of n.children) {
        if (typeof ch === 'string') continue;
        if (ch.tag === 'dt') this.emit(`**${squash(ch.children.map(inline).join(''))}**`);
        else if (ch.tag === 'dd') for (const d of ch.children) this.walk(d, listDepth);
      }
      return;
    }
    if (n.tag === 'table') {
      this.emit(tableMd(n));
      return;
    }
    for (const ch of n.children) this.walk(ch, listDepth);
  }
}

function rowsOf(el: El, out: El[][] = []): El[][] {
  for (const ch of el.children) {
    if (typeof ch === 'string') continue;
    if (ch.tag === 'tr') out.push(ch.children.filter((x): x is El => typeof x !== 'string' && (x.tag === 'td' || x.tag === 'th')));
    else if (ch.tag !== 'table') rowsOf(ch, out);
  }
  return out;
}

function tableMd(t: El): string {
  const rows = rowsOf(t).map((r) => r.map((cell) => squash(cell.children.map(inline).join('')).replace(/\|/g, '\\|')));
  if (rows.length === 0) return '';
  const width = Math.max(...rows.map((r) => r.length));
  const pad = (r: string[]) => [...r, ...new Array<string>(width - r.length).fill('')];
  const lines = [`| ${pad(rows[0]!).join(' | ')} |`, `|${' --- |'.repeat(width)}`];
  for (const r of rows.slice(1)) lines.push(`| ${pad(r).join(' | ')} |`);
  return lines.join('\n');
}

// ---------------------------------------------------------------------------------------------
// Blocks → pages: a page per heading of level ≤ 3; deeper headings become ## / ###.
// ---------------------------------------------------------------------------------------------

function slug(s: string): string {
  return (
    s
      .normalize('NFKD')
      .replace(/[\u0300-\u036f]/g, '')
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-+|-+$/g, '')
      .slice(0, 80) || 'x'
  );
}

/** Minimum characters of body text for a page to be kept (short intros are navigation). */
const MIN_BODY = 200;

function toPages(space: string, chapterSlug: string, file: string, pkg: string, blocks: Block[], used: Set<string>): CorpusPage[] {
  const pages: CorpusPage[] = [];
  let cur: { title: string; id: string; parts: string[] } | null = null;
  let pageLevel = 0;
  const flush = () => {
    if (!cur) return;
    const body = cur.parts.join('\n\n');
    if (body.replace(/[#*`\s]/g, '').length >= MIN_BODY) {
      const name = slug(/^id[-.]/.test(cur.id) ? cur.title : cur.id.replace(/^_/, '') || cur.title);
      let p = `${space}/${chapterSlug}/${name}.md`;
      for (let k = 2; used.has(p); k++) p = `${space}/${chapterSlug}/${name}-${k}.md`;
      used.add(p);
      pages.push({ path: p, title: cur.title, content: `# ${cur.title}\n\n${body}\n`, source: `${pkg}:${file}${cur.id ? `#${cur.id}` : ''}` });
    }
    cur = null;
  };
  for (const b of blocks) {
    if (b.kind === 'heading' && b.level <= 3) {
      flush();
      cur = { title: b.text, id: b.id, parts: [] };
      pageLevel = b.level;
    } else if (cur) {
      if (b.kind === 'heading') cur.parts.push(`${'#'.repeat(Math.min(6, Math.max(2, b.level - pageLevel + 1)))} ${b.text}`);
      else cur.parts.push(b.text);
    }
  }
  flush();
  return pages;
}

function convertFile(file: string): Block[] {
  const tree = parseXhtml(fs.readFileSync(file, 'utf8'));
  const w = new Walker();
  w.walk(tree);
  return w.blocks;
}

function chapterSlugOf(blocks: Block[], fallback: string): string {
  const h1 = blocks.find((b) => b.kind === 'heading' && b.level === 1);
  return h1 && h1.kind === 'heading' ? slug(h1.text).split('-').slice(0, 5).join('-') : fallback;
}

function buildHandbook(used: Set<string>): CorpusPage[] {
  // Reading order: follow the `next` links from index.html so chapters group their sections.
  const order: string[] = [];
  let f: string | undefined = 'index.html';
  const seen = new Set<string>();
  while (f && !seen.has(f)) {
    seen.add(f);
    order.push(f);
    const html: string = fs.readFileSync(path.join(HANDBOOK_DIR, f), 'utf8');
    f = /<link rel="next" href="([^"#]+)"/.exec(html)?.[1];
  }
  for (const x of fs.readdirSync(HANDBOOK_DIR).sort()) if (x.endsWith('.html') && !seen.has(x)) order.push(x);
  const pages: CorpusPage[] = [];
  let chapter = 'front-matter';
  for (const file of order) {
    if (file === 'index.html') continue;
    const blocks = convertFile(path.join(HANDBOOK_DIR, file));
    if (blocks.some((b) => b.kind === 'heading' && b.level === 1)) chapter = chapterSlugOf(blocks, chapter);
    pages.push(...toPages('handbook', chapter, file, 'debian-handbook', blocks, used));
  }
  return pages;
}

function buildReference(used: Set<string>): CorpusPage[] {
  const files = fs
    .readdirSync(REFERENCE_DIR)
    .filter((x) => /^(ch\d+|apa)\.en\.html$/.test(x))
    .sort();
  const pages: CorpusPage[] = [];
  for (const file of files) {
    const blocks = convertFile(path.join(REFERENCE_DIR, file));
    pages.push(...toPages('reference', chapterSlugOf(blocks, file.replace(/\..*$/, '')), file, 'debian-reference-en', blocks, used));
  }
  return pages;
}

export function buildCorpus(): Corpus {
  const versions = ensurePackages();
  const licences: Record<string, string> = { 'debian-handbook': 'GPL-2.0+ or CC-BY-SA-3.0', 'debian-reference-en': 'GPL-2+' };
  const used = new Set<string>();
  const pages = [...buildHandbook(used), ...buildReference(used)];
  return { packages: versions.map((v) => ({ ...v, licence: licences[v.name] ?? 'see /usr/share/doc/<package>/copyright' })), pages };
}

/** The cached corpus, built when missing (or when `force`). */
export function loadCorpus(force = false): Corpus {
  if (!force && fs.existsSync(CORPUS_FILE)) return JSON.parse(fs.readFileSync(CORPUS_FILE, 'utf8')) as Corpus;
  const corpus = buildCorpus();
  fs.mkdirSync(CACHE_DIR, { recursive: true });
  const pagesDir = path.join(CACHE_DIR, 'pages');
  fs.rmSync(pagesDir, { recursive: true, force: true });
  for (const p of corpus.pages) {
    const f = path.join(pagesDir, p.path);
    fs.mkdirSync(path.dirname(f), { recursive: true });
    fs.writeFileSync(f, p.content);
  }
  fs.writeFileSync(CORPUS_FILE, JSON.stringify(corpus));
  return corpus;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const corpus = loadCorpus(process.argv.includes('--force'));
  const chars = corpus.pages.reduce((a, p) => a + p.content.length, 0);
  const out = {
    packages: corpus.packages,
    pages: corpus.pages.length,
    by_space: Object.fromEntries(['handbook', 'reference'].map((s) => [s, corpus.pages.filter((p) => p.path.startsWith(`${s}/`)).length])),
    chars_total: chars,
    chars_mean: Math.round(chars / Math.max(1, corpus.pages.length)),
    file: CORPUS_FILE,
  };
  process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
}
