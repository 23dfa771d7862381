import MarkdownIt, { type StateInline, type Token } from 'markdown-it';
import { colonFencePlugin, FENCE_TOKEN, REDACTED, type FenceMeta } from '../../markdown/index.js';
import { isLevel } from '../../policy/sensitivity.js';
import { SafeHtml } from '../../http/shared/html.js';
import { highlightCode } from './highlight.js';

/**
 * Page markdown as HTML for the web app. markdown-it with `html: false`: raw HTML in a page is
 * shown as text, never as markup, and markdown-it's own link check drops `javascript:`,
 * `vbscript:`, `file:` and non-image `data:` URLs. On top of it:
 *  - `[[Wiki links]]` and relative `.md` links go to the page they resolve to (the page's stored
 *    links, core/pages/link-targets.ts); one that leads nowhere the reader can go is shown as
 *    plain text marked "missing" (a hidden page and no page look the same);
 *  - external links get rel="noopener noreferrer";
 *  - `::: <level>` … `:::` blocks the reader may see are framed and labelled with their level,
 *    and the `[redacted]` lines the core put in place of the others are marked as such;
 *  - a fenced code block in a language highlight.ts knows is highlighted here, on the server
 *    (escaped text in `hljs-…` spans, coloured by app.css); any other stays plain escaped text;
 *    either keeps its language as `class="language-x"`;
 *  - headings get ids, so `#anchors` work; a first `# Title` equal to the page title is dropped
 *    (the page shows the title already).
 */

export interface RenderEnv {
  /** The page's title (a leading h1 repeating it is dropped). */
  title: string;
  /** True when the core replaced blocks by `[redacted]` for this reader. */
  redacted: boolean;
  /** `kind\0target` of a stored link → the page URL it resolves to. */
  links: Map<string, string>;
  /** Heading ids handed out so far. */
  ids?: Set<string>;
}

export const linkKey = (kind: 'wiki' | 'markdown', target: string) => `${kind}\0${target}`;

/** The web app's URL of a page path: each segment percent-encoded. */
export function pageUrl(path: string): string {
  return `/app/p/${path.split('/').map(encodeURIComponent).join('/')}`;
}

const SCHEME = /^[a-z][a-z0-9+.-]*:/i;

function decode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** The stored target of a markdown href (as src/markdown/structure.ts derives it), or null when it is not a page link. */
function markdownTarget(href: string): { target: string; fragment: string } | null {
  if (SCHEME.test(href) || href.startsWith('//')) return null;
  const hash = href.indexOf('#');
  const fragment = hash >= 0 ? href.slice(hash) : '';
  let path = hash >= 0 ? href.slice(0, hash) : href;
  const q = path.indexOf('?');
  if (q >= 0) path = path.slice(0, q);
  path = decode(path);
  return path.toLowerCase().endsWith('.md') ? { target: path, fragment } : null;
}

/** A heading or fragment id: lower-case words joined by `-`. */
export function slugify(text: string): string {
  return (
    text
      .normalize('NFKD')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s-]/gu, '')
      .trim()
      .replace(/\s+/g, '-')
      .slice(0, 80) || 'section'
  );
}

/* ------------------------------------------------------ `:::` containers */

function containerOpen(state: { Token: typeof Token }, name: string): Token {
  const t = new state.Token('container_open', 'div', 1);
  t.block = true;
  const lower = name.toLowerCase();
  if (isLevel(lower)) {
    t.attrSet('class', `sblock sblock-${lower}`);
    t.meta = { label: lower };
  } else {
    t.attrSet('class', /^[a-z][a-z0-9-]{0,30}$/.test(lower) ? `callout callout-${lower}` : 'callout');
    t.meta = { label: null };
  }
  return t;
}

function containerClose(state: { Token: typeof Token }): Token {
  const t = new state.Token('container_close', 'div', -1);
  t.block = true;
  return t;
}

/**
 * Pairs `:::` lines into containers: a closer ends the innermost container opened in the same
 * quote or list item when it is at least as long as its opener (the rule of blocks.ts, so the
 * frame drawn is the block the core judged). A container left open ends with its quote, list
 * item or the page; a stray closer disappears.
 */
function pairContainers(state: { tokens: Token[]; Token: typeof Token }): void {
  const out: Token[] = [];
  const parents: (Token | null)[] = [null];
  interface Open {
    parent: Token | null;
    markers: number;
  }
  const open: Open[] = [];
  const closeAllOf = (parent: Token | null) => {
    for (let i = open.length - 1; i >= 0; i--) {
      if (open[i]!.parent !== parent) continue;
      open.splice(i, 1);
      out.push(containerClose(state));
    }
  };
  for (const t of state.tokens) {
    if (t.type === FENCE_TOKEN) {
      const meta = t.meta as unknown as FenceMeta;
      const parent = parents.at(-1) ?? null;
      if (meta.name !== null) {
        open.push({ parent, markers: meta.markers });
        out.push(containerOpen(state, meta.name));
        continue;
      }
      for (let i = open.length - 1; i >= 0; i--) {
        const o = open[i]!;
        if (o.parent !== parent) continue;
        if (meta.markers >= o.markers) {
          open.splice(i, 1);
          out.push(containerClose(state));
        }
        break;
      }
      continue;
    }
    if (t.nesting === -1) closeAllOf(parents.at(-1) ?? null);
    out.push(t);
    if (t.nesting === 1) parents.push(t);
    else if (t.nesting === -1) parents.pop();
  }
  while (open.length > 0) {
    open.pop();
    out.push(containerClose(state));
  }
  state.tokens = out;
}

/* ----------------------------------------------------------- wiki links */

const WIKILINK = /^\[\[([^[\]|\n]+)(?:\|([^[\]\n]*))?\]\]/;

function wikiLink(state: StateInline, silent: boolean): boolean {
  if (state.src.charCodeAt(state.pos) !== 0x5b || state.src.charCodeAt(state.pos + 1) !== 0x5b) return false;
  const m = WIKILINK.exec(state.src.slice(state.pos));
  if (!m) return false;
  if (!silent) {
    const inner = m[1]!.trim();
    const hash = inner.indexOf('#');
    const target = (hash >= 0 ? inner.slice(0, hash) : inner).trim();
    const heading = hash >= 0 ? inner.slice(hash + 1).trim() : '';
    const label = m[2]?.trim() || inner;
    const env = state.env as unknown as RenderEnv;
    const url = target === '' ? '' : env.links.get(linkKey('wiki', target));
    const fragment = heading ? `#${slugify(heading)}` : '';
    if (target === '' || url) {
      const open = state.push('link_open', 'a', 1);
      open.attrSet('href', target === '' ? fragment || '#' : url + fragment);
      open.attrSet('class', 'wikilink');
      open.meta = { resolved: true };
    } else {
      const open = state.push('missing_open', 'span', 1);
      open.attrSet('class', 'missing-link');
      open.attrSet('title', `No page "${target}" that you can open`);
    }
    const text = state.push('text', '', 0);
    text.content = label;
    state.push(target === '' || url ? 'link_close' : 'missing_close', target === '' || url ? 'a' : 'span', -1);
  }
  state.pos += m[0].length;
  return true;
}

/* ------------------------------------- links, redaction marks, headings */

function rewrite(state: { tokens: Token[]; env: RenderEnv; Token: typeof Token }): void {
  const env = state.env;
  const ids = (env.ids ??= new Set());
  const tokens = state.tokens;
  // The first `# Title` repeating the title shown above the page.
  if (tokens[0]?.type === 'heading_open' && tokens[0].tag === 'h1' && tokens[1]?.content.trim() === env.title.trim()) tokens.splice(0, 3);
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (t.type === 'heading_open') {
      const base = slugify(tokens[i + 1]?.content ?? '');
      let id = base;
      for (let n = 2; ids.has(id); n++) id = `${base}-${n}`;
      ids.add(id);
      t.attrSet('id', id);
    }
    if (t.type === 'paragraph_open' && env.redacted && tokens[i + 1]?.content.trim() === REDACTED) t.attrJoin('class', 'redacted-block');
    if (t.type !== 'inline' || !t.children) continue;
    const children: Token[] = [];
    for (let j = 0; j < t.children.length; j++) {
      const c = t.children[j]!;
      if (c.type === 'link_open' && !(c.meta as { resolved?: boolean } | null)?.resolved) {
        const href = String(c.attrGet('href') ?? '');
        const md = markdownTarget(href);
        if (SCHEME.test(href) || href.startsWith('//')) {
          c.attrSet('rel', 'noopener noreferrer');
          c.attrJoin('class', 'external');
        } else if (md) {
          const url = env.links.get(linkKey('markdown', md.target));
          if (url) c.attrSet('href', url + md.fragment);
          else {
            // No page the reader can open: the link becomes text marked missing.
            let depth = 0;
            for (let k = j; k < t.children.length; k++) {
              const d = t.children[k]!;
              if (d.type === 'link_open') depth++;
              if (d.type === 'link_close' && --depth === 0) {
                d.type = 'missing_close';
                d.tag = 'span';
                break;
              }
            }
            c.type = 'missing_open';
            c.tag = 'span';
            c.attrs = [
              ['class', 'missing-link'],
              ['title', `No page "${md.target}" that you can open`],
            ];
          }
        }
      }
      if (env.redacted && c.type === 'text' && c.content.includes(REDACTED)) {
        const parts = c.content.split(REDACTED);
        parts.forEach((part, k) => {
          if (k > 0) {
            const mark = new state.Token('redacted', 'span', 0);
            children.push(mark);
          }
          if (part !== '') {
            const text = new state.Token('text', '', 0);
            text.content = part;
            children.push(text);
          }
        });
        continue;
      }
      children.push(c);
    }
    t.children = children;
  }
}

// `highlight` answering '' leaves markdown-it to escape the block itself (an unknown language).
const md = new MarkdownIt('default', { html: false, linkify: true, typographer: false, highlight: (code, lang) => highlightCode(code, lang) ?? '' });
colonFencePlugin(md);
md.core.ruler.after('block', 'containers', (state) => pairContainers(state as unknown as Parameters<typeof pairContainers>[0]));
md.inline.ruler.before('link', 'wikilink', wikiLink);
md.core.ruler.push('rewrite', (state) => rewrite(state as unknown as Parameters<typeof rewrite>[0]));

md.renderer.rules.container_open = (tokens, idx, options, _env, self) => {
  const t = tokens[idx]!;
  const label = (t.meta as { label: string | null }).label;
  return `<div${self.renderAttrs(t)}>${label ? `<p class="sblock-label">${md.utils.escapeHtml(label)} block</p>` : ''}\n`;
};
md.renderer.rules.container_close = () => '</div>\n';
// A code block wider than the screen scrolls sideways: focusable, so the keyboard can scroll it too.
const fence = md.renderer.rules.fence!;
md.renderer.rules.fence = (...args) => fence(...args).replace(/^<pre>/, '<pre tabindex="0">');
md.renderer.rules.missing_open = (tokens, idx, _o, _e, self) => `<span${self.renderAttrs(tokens[idx]!)}>`;
md.renderer.rules.missing_close = () => '</span>';
md.renderer.rules.redacted = () => '<span class="redacted" title="Hidden: above your access level">[redacted]</span>';

/** The page body (markdown, already redacted by the core for this reader) as safe HTML. */
export function renderMarkdown(body: string, env: RenderEnv): SafeHtml {
  return new SafeHtml(md.render(body, { ...env, ids: new Set() }));
}
