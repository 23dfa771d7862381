import { describe, expect, it } from 'vitest';
import { chunkBody } from '../../src/retrieval/chunking.js';
import { fts5Match, queryTerms } from '../../src/retrieval/keyword.js';
import { linkKey, pageKeys, pickTarget } from '../../src/retrieval/links.js';
import { makeSnippet } from '../../src/retrieval/search.js';

describe('chunkBody', () => {
  it('chunks by heading, keeps the text byte for byte and numbers the chunks', () => {
    const body = 'Intro line.\n\n# One\n\nFirst.\n\n## Two\n\nSecond.\n';
    const chunks = chunkBody(body);
    expect(chunks.map((c) => [c.ord, c.heading, c.headingLevel])).toEqual([
      [0, '', 0],
      [1, 'One', 1],
      [2, 'Two', 2],
    ]);
    expect(chunks.map((c) => c.text).join('')).toBe(body);
    expect(chunks.every((c) => c.blockLevel === null)).toBe(true);
  });

  it('caps a long section, cutting on paragraph boundaries', () => {
    const paras = Array.from({ length: 30 }, (_, i) => `Paragraph ${i} ${'word '.repeat(20)}\n`);
    const body = `# Long\n\n${paras.join('\n')}`;
    const chunks = chunkBody(body, 500);
    expect(chunks.length).toBeGreaterThan(3);
    for (const c of chunks) {
      expect(c.text.length).toBeLessThanOrEqual(500);
      expect(c.heading).toBe('Long');
      // Every chunk starts at a paragraph start (or the heading).
      expect(c.text).toMatch(/^(# Long|Paragraph \d+)/);
    }
    expect(chunks.map((c) => c.text).join('')).toBe(body);
  });

  it('never splits a code fence, even one longer than the cap', () => {
    const code = Array.from({ length: 80 }, (_, i) => `line ${i}\n\nstill code ${i}`).join('\n');
    const body = `# Code\n\nBefore.\n\n\`\`\`sh\n${code}\n\`\`\`\n\nAfter.\n`;
    const chunks = chunkBody(body, 300);
    const withFence = chunks.filter((c) => c.text.includes('```'));
    expect(withFence).toHaveLength(1);
    expect(withFence[0]!.text).toContain('```sh');
    expect(withFence[0]!.text.match(/```/g)).toHaveLength(2);
    expect(chunks.map((c) => c.text).join('')).toBe(body);
  });

  it('cuts at sensitivity blocks and records their level; a hidden heading stays hidden', () => {
    const body = [
      '# Ops',
      '',
      'Public words.',
      '',
      '::: secret',
      'The vault combination is swordfish.',
      ':::',
      '',
      'More public words.',
      '',
      '::: confidential',
      '## Hidden heading',
      '',
      'Confidential text.',
      ':::',
      '',
    ].join('\n');
    const chunks = chunkBody(body);
    const secret = chunks.filter((c) => c.text.includes('swordfish'));
    expect(secret).toHaveLength(1);
    expect(secret[0]!.blockLevel).toBe('secret');
    expect(secret[0]!.text).not.toContain('Public words');
    for (const c of chunks.filter((x) => x.blockLevel === null)) {
      expect(c.text).not.toContain('swordfish');
      expect(c.text).not.toContain('Confidential text');
      expect(c.heading).not.toBe('Hidden heading');
    }
    const conf = chunks.filter((c) => c.text.includes('Confidential text'));
    expect(conf.every((c) => c.blockLevel === 'confidential' && c.heading === 'Hidden heading')).toBe(true);
    expect(chunks.map((c) => c.text).join('')).toBe(body);
  });

  it('gives a nested block the highest level around it', () => {
    const body = '::: confidential\nouter\n::: secret\ninner\n:::\nouter again\n:::\n';
    const chunks = chunkBody(body);
    expect(chunks.find((c) => c.text.includes('inner'))!.blockLevel).toBe('secret');
    expect(chunks.filter((c) => c.text.includes('outer')).every((c) => c.blockLevel === 'confidential')).toBe(true);
  });

  it('handles empty and whitespace-only bodies', () => {
    expect(chunkBody('')).toEqual([]);
    expect(chunkBody('\n\n  \n')).toEqual([]);
  });
});

describe('query parsing', () => {
  it('reads quotes, operators and punctuation as separators, never as syntax', () => {
    expect(queryTerms('"deploy" AND (rollback OR NEAR(x y)) -foo* ^bar col:val')).toEqual([
      'deploy',
      'and',
      'rollback',
      'or',
      'near',
      'x',
      'y',
      'foo',
      'bar',
      'col',
      'val',
    ]);
    expect(queryTerms('  ')).toEqual([]);
    expect(queryTerms('!!! *** """')).toEqual([]);
    expect(queryTerms('Ünïcödé 東京 ＤＥＰＬＯＹ')).toEqual(['ünïcödé', '東京', 'deploy']);
    expect(queryTerms('a '.repeat(10) + Array.from({ length: 100 }, (_, i) => `w${i}`).join(' '))).toHaveLength(32);
  });

  it('quotes every term in the FTS5 match string', () => {
    expect(fts5Match(['deploy', 'near'], 'AND')).toBe('"deploy" AND "near"');
    expect(fts5Match(['a', 'b'], 'OR')).toBe('"a" OR "b"');
  });

  it('makes a snippet around the first term', () => {
    const text = `${'filler '.repeat(100)}the rollback procedure is here ${'tail '.repeat(100)}`;
    const s = makeSnippet(text, ['rollback']);
    expect(s).toContain('rollback');
    expect(s.startsWith('…')).toBe(true);
    expect(s.length).toBeLessThanOrEqual(260);
    expect(makeSnippet('short text', ['x'])).toBe('short text');
  });
});

describe('link keys', () => {
  it('names a page by path, path without .md, slug and title', () => {
    expect(pageKeys('eng/ops/Deploy-Guide.md', 'Deploy  Guide').sort()).toEqual(
      ['deploy guide', 'deploy-guide', 'eng/ops/deploy-guide', 'eng/ops/deploy-guide.md'].sort(),
    );
  });

  it('resolves markdown links against the folder and wiki links as written', () => {
    expect(linkKey({ target: '../setup/install.md', kind: 'markdown' }, 'eng/ops')).toBe('eng/setup/install.md');
    expect(linkKey({ target: 'sub/x.md', kind: 'markdown' }, 'eng')).toBe('eng/sub/x.md');
    expect(linkKey({ target: '/hr/leave.md', kind: 'markdown' }, 'eng/ops')).toBe('hr/leave.md');
    expect(linkKey({ target: '../../../x.md', kind: 'markdown' }, 'eng/ops')).toBeNull();
    expect(linkKey({ target: ' Run  Book ', kind: 'wiki' }, 'eng')).toBe('run book');
  });

  it('prefers the exact path, then the nearest folder', () => {
    const c = [{ path: 'hr/runbook.md' }, { path: 'eng/ops/runbook.md' }, { path: 'eng/runbook.md' }];
    expect(pickTarget(c, 'runbook', 'eng/ops/deploy.md')!.path).toBe('eng/ops/runbook.md');
    expect(pickTarget(c, 'hr/runbook', 'eng/ops/deploy.md')!.path).toBe('hr/runbook.md');
    expect(pickTarget([], 'x', 'a/b.md')).toBeNull();
  });
});
