import { describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/core/errors.js';
import type { Level } from '../../src/policy/sensitivity.js';
import {
  extractLinks,
  extractSections,
  extractTags,
  extractTitle,
  findSection,
  findSensitiveBlocks,
  maxBlockLevel,
  parseDocument,
  redactBlocks,
  redactDocument,
  serializeDocument,
  setFrontmatterFields,
} from '../../src/markdown/index.js';

/** Joins lines with \n and a final \n, so fixtures read as the page would. */
const lines = (...ls: string[]) => ls.map((l) => `${l}\n`).join('');

function invalid(raw: string): ServiceError {
  try {
    parseDocument(raw);
  } catch (e) {
    expect(e).toBeInstanceOf(ServiceError);
    const err = e as ServiceError;
    expect(err.status).toBe(400);
    expect(err.code).toBe('invalid_frontmatter');
    return err;
  }
  throw new Error('expected invalid_frontmatter');
}

describe('parseDocument', () => {
  it('splits frontmatter from the body', () => {
    const raw = lines('---', 'title: Hello', 'tags: [a, b]', '---', '# Body', '', 'text');
    const doc = parseDocument(raw);
    expect(doc.frontmatter).toEqual({ title: 'Hello', tags: ['a', 'b'] });
    expect(doc.body).toBe(lines('# Body', '', 'text'));
    expect(doc.bodyLine).toBe(4);
    expect(raw.split('\n')[doc.bodyLine]).toBe('# Body');
  });

  it('returns the whole text as body when there is no frontmatter', () => {
    const raw = lines('# Title', '---', 'a: 1', '---');
    expect(parseDocument(raw)).toEqual({ frontmatter: {}, body: raw, bodyLine: 0 });
    expect(parseDocument('')).toEqual({ frontmatter: {}, body: '', bodyLine: 0 });
  });

  it('handles CRLF and keeps the body bytes', () => {
    const raw = '---\r\ntitle: Win\r\nn: 2\r\n---\r\nline one\r\nline two\r\n';
    const doc = parseDocument(raw);
    expect(doc.frontmatter).toEqual({ title: 'Win', n: 2 });
    expect(doc.body).toBe('line one\r\nline two\r\n');
    expect(doc.bodyLine).toBe(4);
  });

  it('accepts `...` as the closing fence, an empty block, and a body-less page', () => {
    expect(parseDocument('---\na: 1\n...\nbody').frontmatter).toEqual({ a: 1 });
    expect(parseDocument('---\n---\nbody')).toEqual({ frontmatter: {}, body: 'body', bodyLine: 2 });
    expect(parseDocument('---\na: 1\n---')).toEqual({ frontmatter: { a: 1 }, body: '', bodyLine: 3 });
  });

  it('keeps dates as strings (YAML 1.2 core schema)', () => {
    expect(parseDocument('---\nat: 2024-01-02\n---\n').frontmatter.at).toBe('2024-01-02');
  });

  it('rejects invalid YAML naming the page line', () => {
    const err = invalid(lines('---', 'title: ok', 'tags: [a, b', '---', 'body'));
    expect(err.message).toMatch(/line \d+/);
    const dup = invalid(lines('---', 'a: 1', 'a: 2', '---'));
    expect(dup.message).toContain('line 3');
  });

  it('rejects YAML that is not a mapping', () => {
    invalid(lines('---', '- a', '- b', '---', 'body'));
    invalid(lines('---', 'just a string', '---', 'body'));
  });

  it('rejects an unterminated block', () => {
    invalid(lines('---', 'title: x', 'body without end'));
    invalid('---');
  });
});

describe('serializeDocument', () => {
  it('round-trips with parseDocument', () => {
    const fm = { title: 'T', tags: ['a', 'b'], nested: { k: [1, 2] }, s: 'yes' };
    const body = '# T\r\nbody\n';
    const raw = serializeDocument(fm, body);
    expect(raw.startsWith('---\ntitle: T\n')).toBe(true);
    expect(parseDocument(raw)).toMatchObject({ frontmatter: fm, body });
  });

  it('writes no block for empty frontmatter unless the body would be mistaken for one', () => {
    expect(serializeDocument({}, '# x\n')).toBe('# x\n');
    const tricky = '---\na: 1\n---\nrest\n';
    expect(parseDocument(serializeDocument({}, tricky))).toEqual({ frontmatter: {}, body: tricky, bodyLine: 2 });
  });
});

describe('setFrontmatterFields', () => {
  const raw = lines(
    '---',
    '# page settings',
    'title: "Quoted"  # keep me',
    'tags: [a, b]',
    'state: active',
    'owner: me',
    '---',
    'Body with --- and trailing spaces   ',
    '',
  );

  it('sets and removes keys, keeping the body, other keys, order and comments', () => {
    const out = setFrontmatterFields(raw, { state: 'archived', archived_reason: 'old', owner: undefined });
    const doc = parseDocument(out);
    expect(doc.body).toBe(parseDocument(raw).body);
    expect(doc.frontmatter).toEqual({ title: 'Quoted', tags: ['a', 'b'], state: 'archived', archived_reason: 'old' });
    expect(Object.keys(doc.frontmatter)).toEqual(['title', 'tags', 'state', 'archived_reason']);
    expect(out).toContain('# page settings');
    expect(out).toContain('title: "Quoted" # keep me');
  });

  it('restores by removing the archive keys', () => {
    const archived = setFrontmatterFields(raw, { state: 'archived', archived_at: '2024-05-01T00:00:00Z' });
    const restored = setFrontmatterFields(archived, { state: 'active', archived_at: undefined });
    expect(parseDocument(restored).frontmatter).toEqual(parseDocument(raw).frontmatter);
  });

  it('adds a block to a page without one', () => {
    const out = setFrontmatterFields('# Plain\n', { state: 'archived' });
    expect(out).toBe('---\nstate: archived\n---\n# Plain\n');
    expect(setFrontmatterFields('# Plain\n', { state: undefined })).toBe('# Plain\n');
  });

  it('keeps CRLF pages in CRLF', () => {
    const crlf = '---\r\na: 1\r\n---\r\nbody\r\n';
    const out = setFrontmatterFields(crlf, { b: 2 });
    expect(out).toBe('---\r\na: 1\r\nb: 2\r\n---\r\nbody\r\n');
  });

  it('handles an empty block and removing the last key', () => {
    expect(parseDocument(setFrontmatterFields('---\n---\nx', { a: [1] })).frontmatter).toEqual({ a: [1] });
    expect(setFrontmatterFields('---\na: 1\n---\nx', { a: undefined })).toBe('---\n---\nx');
  });

  it('refuses to edit invalid frontmatter', () => {
    expect(() => setFrontmatterFields('---\na: [\n---\n', { a: 1 })).toThrow(ServiceError);
  });
});

describe('extractTitle', () => {
  it('prefers a non-empty frontmatter title', () => {
    expect(extractTitle({ title: '  FM title ' }, '# Heading\n', 'fb')).toBe('FM title');
  });

  it('falls back to the first level-1 heading, as plain text', () => {
    const body = lines('Intro', '## Not this', '# The *real* `title`', '# Second');
    expect(extractTitle({ title: '   ' }, body, 'fb')).toBe('The real title');
    expect(extractTitle({}, lines('Setext title', '============'), 'fb')).toBe('Setext title');
  });

  it('never takes the title from inside a sensitivity block', () => {
    expect(extractTitle({}, lines('::: secret', '# Merger with Acme', ':::', '# Plans'), 'fb')).toBe('Plans');
    expect(extractTitle({}, lines('::: internal', '# Only', ':::'), 'fb')).toBe('fb');
  });

  it('ignores headings in code and quotes and uses the fallback', () => {
    expect(extractTitle({}, lines('> # quoted', '', 'text'), 'fb')).toBe('fb');
    expect(extractTitle({ title: 3 }, lines('```', '# not a heading', '```', '## h2'), 'fallback')).toBe('fallback');
  });
});

describe('extractTags', () => {
  it('reads a YAML list', () => {
    expect(extractTags({ tags: [' Alpha', 'beta', 'Alpha', '', 3, null, 'gamma '] })).toEqual(['Alpha', 'beta', 'gamma']);
  });

  it('reads a comma-separated string', () => {
    expect(extractTags({ tags: 'one, Two,,one , three' })).toEqual(['one', 'Two', 'three']);
  });

  it('returns nothing for absent or odd tags', () => {
    expect(extractTags({})).toEqual([]);
    expect(extractTags({ tags: { a: 1 } })).toEqual([]);
  });
});

describe('extractLinks', () => {
  it('finds markdown links to .md pages, stripping fragments and queries and decoding', () => {
    const body = lines(
      'See [guide](docs/guide.md#install) and [root](/space/Home.md?v=1).',
      'Also [spaced](<my%20page.md>) and [up](../other.md).',
      'Reference [ref][r].',
      '',
      '[r]: ./ref.md',
    );
    expect(extractLinks(body)).toEqual([
      { target: 'docs/guide.md', kind: 'markdown', text: 'guide' },
      { target: '/space/Home.md', kind: 'markdown', text: 'root' },
      { target: 'my page.md', kind: 'markdown', text: 'spaced' },
      { target: '../other.md', kind: 'markdown', text: 'up' },
      { target: './ref.md', kind: 'markdown', text: 'ref' },
    ]);
  });

  it('skips external links, other schemes, anchors and non-.md files', () => {
    const body = lines(
      '[a](https://x.test/page.md) [b](http://x.test/a.md) [c](mailto:me@x.test)',
      '[d](#section) [e](ftp://h/f.md) [f](//cdn.test/x.md) [g](image.png) <https://x.test/y.md>',
    );
    expect(extractLinks(body)).toEqual([]);
  });

  it('finds wikilinks with and without labels, outside code', () => {
    const body = lines(
      'Go to [[Project Plan]] or [[ops/runbook|the runbook]], and [[Plan#Goals]].',
      '',
      'Inline `[[not a link]]` code.',
      '',
      '```',
      '[[Also not]]',
      '```',
      '',
      '    [[indented code]]',
      '',
      '| col |',
      '| --- |',
      '| [[cell\\|Cell]] |',
    );
    expect(extractLinks(body)).toEqual([
      { target: 'Project Plan', kind: 'wiki', text: 'Project Plan' },
      { target: 'ops/runbook', kind: 'wiki', text: 'the runbook' },
      { target: 'Plan', kind: 'wiki', text: 'Plan#Goals' },
      { target: 'cell', kind: 'wiki', text: 'Cell' },
    ]);
  });

  it('ignores markdown links inside code', () => {
    expect(extractLinks(lines('`[x](a.md)`', '', '```', '[y](b.md)', '```'))).toEqual([]);
  });

  it('deduplicates by target, keeping the first', () => {
    const body = lines('[[a.md|first]] [second](a.md) [[b]] [[b|again]]');
    expect(extractLinks(body)).toEqual([
      { target: 'a.md', kind: 'wiki', text: 'first' },
      { target: 'b', kind: 'wiki', text: 'b' },
    ]);
  });
});

describe('sections', () => {
  const body = lines(
    'Preamble text.',
    '',
    '# Guide',
    'intro',
    '## Setup',
    'install things',
    '### Linux',
    'apt',
    '```',
    '# not a heading',
    '```',
    'Usage',
    '-----',
    'run it',
    '# Appendix',
    'end',
  );

  it('chunks flat by heading of any level, with a preamble', () => {
    const sections = extractSections(body);
    expect(sections.map((s) => [s.heading, s.level, s.startLine, s.endLine])).toEqual([
      ['', 0, 0, 2],
      ['Guide', 1, 2, 4],
      ['Setup', 2, 4, 6],
      ['Linux', 3, 6, 11],
      ['Usage', 2, 11, 14],
      ['Appendix', 1, 14, 16],
    ]);
    expect(sections[3]!.text).toBe(lines('### Linux', 'apt', '```', '# not a heading', '```'));
    expect(sections.map((s) => s.text).join('')).toBe(body);
  });

  it('omits a blank preamble', () => {
    expect(extractSections('\n\n# A\nx\n').map((s) => s.heading)).toEqual(['A']);
    expect(extractSections('just text\n')).toEqual([{ heading: '', level: 0, startLine: 0, endLine: 1, text: 'just text\n' }]);
  });

  it('keeps CRLF text and does not section on headings inside quotes or lists', () => {
    const crlf = '# A\r\none\r\n> # quoted\r\n- # listed\r\n## B\r\ntwo';
    expect(extractSections(crlf)).toEqual([
      { heading: 'A', level: 1, startLine: 0, endLine: 4, text: '# A\r\none\r\n> # quoted\r\n- # listed\r\n' },
      { heading: 'B', level: 2, startLine: 4, endLine: 6, text: '## B\r\ntwo' },
    ]);
  });

  it('findSection includes nested sub-sections', () => {
    expect(findSection(body, 'setup')).toBe(lines('## Setup', 'install things', '### Linux', 'apt', '```', '# not a heading', '```'));
    expect(findSection(body, 'Guide')).toBe(body.slice(body.indexOf('# Guide'), body.indexOf('# Appendix')));
  });

  it('findSection matches setext headings, spacing, case and the `##` form', () => {
    expect(findSection(body, '  USAGE ')).toBe(lines('Usage', '-----', 'run it'));
    expect(findSection(body, '## Setup')).toBe(findSection(body, 'Setup'));
    expect(findSection(body, '### Linux ###')).toBe(lines('### Linux', 'apt', '```', '# not a heading', '```'));
    expect(findSection(lines('# Big   Picture', 'x'), 'big picture')).toBe(lines('# Big   Picture', 'x'));
    const marked = lines('## Run *now* with `npm` ![icon](i.png)', 'go');
    expect(findSection(marked, 'run now with npm icon')).toBe(marked);
    expect(findSection(marked, 'Run *now* with `npm` ![icon](i.png)')).toBe(marked);
  });

  it('findSection prefers the named level, and returns null when absent', () => {
    const twice = lines('# Notes', 'top', '## Notes', 'nested');
    expect(findSection(twice, '## Notes')).toBe(lines('## Notes', 'nested'));
    expect(findSection(twice, 'notes')).toBe(twice);
    expect(findSection(body, 'not a heading')).toBeNull();
    expect(findSection(body, 'Missing')).toBeNull();
    expect(findSection(body, '')).toBeNull();
  });
});

describe('sensitivity blocks', () => {
  const hideAbove =
    (ceiling: Level) =>
    (level: Level): boolean =>
      ['public', 'internal', 'confidential', 'secret'].indexOf(level) <= ['public', 'internal', 'confidential', 'secret'].indexOf(ceiling);

  it('finds blocks with line ranges covering the fences', () => {
    const body = lines('intro', '::: secret', 'pw', ':::', 'after');
    expect(findSensitiveBlocks(body)).toEqual([{ level: 'secret', startLine: 1, endLine: 4 }]);
    expect(maxBlockLevel(body)).toBe('secret');
    expect(maxBlockLevel('no blocks\n')).toBeNull();
  });

  it('pairs nested blocks and other containers by nesting', () => {
    const body = lines(
      '::: confidential', // 0
      'c1',
      '::: note',
      'n',
      ':::', // 4 closes note
      '::: secret', // 5
      's',
      ':::', // 7 closes secret
      'c2',
      ':::', // 9 closes confidential
      'public',
    );
    expect(findSensitiveBlocks(body)).toEqual([
      { level: 'confidential', startLine: 0, endLine: 10 },
      { level: 'secret', startLine: 5, endLine: 8 },
    ]);
    expect(maxBlockLevel(body)).toBe('secret');
  });

  it('runs an unclosed block to the end of the body', () => {
    const body = lines('a', '::: confidential', 'b', 'c');
    expect(findSensitiveBlocks(body)).toEqual([{ level: 'confidential', startLine: 1, endLine: 4 }]);
    expect(redactBlocks(body, hideAbove('internal'))).toBe(lines('a', '[redacted]'));
  });

  it('ignores fences inside code blocks', () => {
    const inCode = lines('```', '::: secret', 'shown', ':::', '```', '', '    ::: secret', '    shown too');
    expect(findSensitiveBlocks(inCode)).toEqual([]);
    expect(redactBlocks(inCode, () => false)).toBe(inCode);
    // Indented four columns it is paragraph text (a lazy continuation of the quote), not a fence.
    expect(findSensitiveBlocks(lines('> quote', '    ::: secret', 'text'))).toEqual([]);
  });

  it('does not end a block at a `:::` inside a nested code fence or container', () => {
    const body = lines('::: secret', '```', ':::', '```', 'still secret', ':::', 'public');
    expect(findSensitiveBlocks(body)).toEqual([{ level: 'secret', startLine: 0, endLine: 6 }]);
    expect(redactBlocks(body, hideAbove('confidential'))).toBe(lines('[redacted]', 'public'));
  });

  it('does not treat other container names as sensitivity blocks', () => {
    const body = lines('::: note', 'hello', ':::', '::: warning secret', 'x', ':::');
    expect(findSensitiveBlocks(body)).toEqual([]);
    expect(maxBlockLevel(body)).toBeNull();
    expect(redactBlocks(body, () => false)).toBe(body);
  });

  it('recognises a block that interrupts a paragraph, any case, and longer fences', () => {
    const body = lines('text', '::: SECRET', 'pw', ':::', '::::confidential::::', 'c', ':::', 'still c', '::::', 'end');
    expect(findSensitiveBlocks(body)).toEqual([
      { level: 'secret', startLine: 1, endLine: 4 },
      { level: 'confidential', startLine: 4, endLine: 9 },
    ]);
  });

  it('redacts the outermost hidden block and keeps the rest byte for byte', () => {
    const body = lines('Intro  with  spaces\t', '::: confidential', 'c1', '::: secret', 's', ':::', 'c2', ':::', '', '::: public', 'p', ':::', 'tail');
    expect(redactBlocks(body, hideAbove('internal'))).toBe(lines('Intro  with  spaces\t', '[redacted]', '', '::: public', 'p', ':::', 'tail'));
    expect(redactBlocks(body, hideAbove('confidential'))).toBe(
      lines('Intro  with  spaces\t', '::: confidential', 'c1', '[redacted]', 'c2', ':::', '', '::: public', 'p', ':::', 'tail'),
    );
    expect(redactBlocks(body, hideAbove('secret'))).toBe(body);
  });

  it('keeps CRLF line breaks and a missing final newline', () => {
    const body = 'a\r\n::: secret\r\npw\r\n:::\r\nb\r\n::: secret\r\nlast';
    expect(findSensitiveBlocks(body)).toEqual([
      { level: 'secret', startLine: 1, endLine: 4 },
      { level: 'secret', startLine: 5, endLine: 7 },
    ]);
    expect(redactBlocks(body, () => false)).toBe('a\r\n[redacted]\r\nb\r\n[redacted]');
  });

  it('keeps quote markup in front of a block inside a blockquote', () => {
    const body = lines('> quoted', '> ::: secret', '> pw', '> :::', '> more', 'out');
    expect(findSensitiveBlocks(body)).toEqual([{ level: 'secret', startLine: 1, endLine: 4 }]);
    expect(redactBlocks(body, () => false)).toBe(lines('> quoted', '> [redacted]', '> more', 'out'));
  });

  it('does not let a `:::` in a list item close a block opened outside it', () => {
    const body = lines('::: secret', '- item', '', '  :::', '- pw', ':::', 'public');
    expect(findSensitiveBlocks(body)).toEqual([{ level: 'secret', startLine: 0, endLine: 6 }]);
  });

  it('redacts overlapping ranges as one', () => {
    // The secret opened in the quote can never close there, so it runs to the end and overlaps
    // the confidential block's end.
    const body = lines('::: confidential', '> ::: secret', '> s', '', ':::', 'tail');
    expect(findSensitiveBlocks(body)).toEqual([
      { level: 'confidential', startLine: 0, endLine: 5 },
      { level: 'secret', startLine: 1, endLine: 6 },
    ]);
    expect(redactBlocks(body, () => false)).toBe(lines('[redacted]'));
    expect(redactBlocks(body, hideAbove('confidential'))).toBe(lines('::: confidential', '> [redacted]'));
  });

  it('redactDocument keeps the frontmatter and redacts the body', () => {
    const raw = lines('---', 'title: "::: secret"', 'sensitivity: internal', '---', 'x', '::: secret', 'pw', ':::', 'y');
    expect(redactDocument(raw, hideAbove('confidential'))).toBe(lines('---', 'title: "::: secret"', 'sensitivity: internal', '---', 'x', '[redacted]', 'y'));
    expect(redactDocument('no fm\n::: secret\n', () => false)).toBe('no fm\n[redacted]\n');
  });
});
