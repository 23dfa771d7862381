import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import c from 'highlight.js/lib/languages/c';
import cpp from 'highlight.js/lib/languages/cpp';
import csharp from 'highlight.js/lib/languages/csharp';
import css from 'highlight.js/lib/languages/css';
import diff from 'highlight.js/lib/languages/diff';
import dockerfile from 'highlight.js/lib/languages/dockerfile';
import go from 'highlight.js/lib/languages/go';
import ini from 'highlight.js/lib/languages/ini';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import kotlin from 'highlight.js/lib/languages/kotlin';
import markdown from 'highlight.js/lib/languages/markdown';
import php from 'highlight.js/lib/languages/php';
import python from 'highlight.js/lib/languages/python';
import ruby from 'highlight.js/lib/languages/ruby';
import rust from 'highlight.js/lib/languages/rust';
import shell from 'highlight.js/lib/languages/shell';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';

/**
 * Server-side highlighting of fenced code blocks (issue 17): highlight.js's core with a fixed set
 * of common languages registered here (not the whole library: about 20 grammars instead of 190,
 * a fraction of the start-up time and memory; see docs/decisions.md). Its output is the code's
 * text escaped (& < > " ') inside <span class="hljs-…"> elements whose classes it chooses itself,
 * so a page cannot put markup into it. A language it does not know, or none, gives null: the
 * caller shows the block as plain escaped text.
 */

const LANGUAGES = {
  bash,
  c,
  cpp,
  csharp,
  css,
  diff,
  dockerfile,
  go,
  ini,
  java,
  javascript,
  json,
  kotlin,
  markdown,
  php,
  python,
  ruby,
  rust,
  shell,
  sql,
  typescript,
  xml,
  yaml,
};
for (const [name, fn] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, fn);
// Names people write after ``` that the grammars above do not already answer to.
hljs.registerAliases(['toml'], { languageName: 'ini' });
hljs.registerAliases(['tsx', 'mts', 'cts'], { languageName: 'typescript' });
hljs.registerAliases(['mjs', 'cjs', 'jsx'], { languageName: 'javascript' });

/**
 * Past this many characters a block is shown plain: highlighting is regex work on every page
 * view, and a pathological block should not hold the event loop (pages are up to MAX_PAGE_BYTES).
 */
export const HIGHLIGHT_MAX_CHARS = 50_000;

/** The block's code as highlighted HTML (escaped text in spans), or null for a language not registered here or a block too large. */
export function highlightCode(code: string, lang: string): string | null {
  const name = lang.trim().toLowerCase();
  if (!name || code.length > HIGHLIGHT_MAX_CHARS || !hljs.getLanguage(name)) return null;
  return hljs.highlight(code, { language: name, ignoreIllegals: true }).value;
}
