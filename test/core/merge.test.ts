import { describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/core/errors.js';
import { mergePage, type MergeResult } from '../../src/core/merge.js';
import { parseDocument } from '../../src/markdown/index.js';
import { prng } from '../support/random.js';

/** Joins lines with \n and a final \n, so fixtures read as the page would. */
const lines = (...ls: string[]) => ls.map((l) => `${l}\n`).join('');

function clean(r: MergeResult): string {
  if (r.kind !== 'clean') throw new Error(`expected a clean merge, got: ${r.reason} ${JSON.stringify(r.conflicts)}`);
  return r.content;
}

function conflicts(r: MergeResult) {
  if (r.kind !== 'conflict') throw new Error(`expected a conflict, got clean:\n${r.content}`);
  expect(r.reason).not.toBe('');
  return r.conflicts;
}

const BODY = lines('# Title', '', 'Intro paragraph.', '', '## Section A', '', 'Alpha one.', 'Alpha two.', '', '## Section B', '', 'Beta one.', 'Beta two.');

describe('mergePage: trivial cases', () => {
  it('returns ours when theirs is the base, theirs when ours is the base, either when they agree', () => {
    const base = lines('a', 'b');
    const ours = lines('a', 'B');
    const theirs = lines('A', 'b');
    expect(mergePage(base, ours, base)).toEqual({ kind: 'clean', content: ours });
    expect(mergePage(base, base, theirs)).toEqual({ kind: 'clean', content: theirs });
    expect(mergePage(base, ours, ours)).toEqual({ kind: 'clean', content: ours });
  });

  it('does not touch the text in the trivial cases (not even re-serializing frontmatter)', () => {
    const base = '---\ntitle:   "x"   # comment\n---\nbody\n';
    const ours = '---\ntitle:   "x"   # comment\n---\nbody changed\n';
    expect(clean(mergePage(base, ours, base))).toBe(ours);
    expect(clean(mergePage(base, base, ours))).toBe(ours);
  });
});

describe('mergePage: body', () => {
  it('merges non-overlapping edits at the top and the bottom with both', () => {
    const ours = BODY.replace('Intro paragraph.', 'Intro paragraph, edited by ours.');
    const theirs = BODY.replace('Beta two.', 'Beta two, edited by theirs.');
    expect(clean(mergePage(BODY, ours, theirs))).toBe(
      BODY.replace('Intro paragraph.', 'Intro paragraph, edited by ours.').replace('Beta two.', 'Beta two, edited by theirs.'),
    );
  });

  it('is deterministic and symmetric in content for non-overlapping edits', () => {
    const ours = BODY.replace('# Title', '# Better title');
    const theirs = BODY.replace('Alpha two.', 'Alpha two.\nAlpha three.');
    const one = clean(mergePage(BODY, ours, theirs));
    expect(clean(mergePage(BODY, ours, theirs))).toBe(one);
    expect(clean(mergePage(BODY, theirs, ours))).toBe(one);
    expect(one).toContain('# Better title\n');
    expect(one).toContain('Alpha two.\nAlpha three.\n');
  });

  it('reports overlapping edits as a body conflict with the three sides of the hunk', () => {
    const ours = BODY.replace('Alpha two.', 'Alpha two (ours).');
    const theirs = BODY.replace('Alpha two.', 'Alpha two (theirs).');
    const r = mergePage(BODY, ours, theirs);
    expect(conflicts(r)).toEqual([{ where: 'body', ours: 'Alpha two (ours).\n', base: 'Alpha two.\n', theirs: 'Alpha two (theirs).\n' }]);
  });

  it('reports each conflicting hunk separately and still names them in the reason', () => {
    const ours = BODY.replace('# Title', '# Ours').replace('Beta two.', 'Beta ours.');
    const theirs = BODY.replace('# Title', '# Theirs').replace('Beta two.', 'Beta theirs.');
    const r = mergePage(BODY, ours, theirs);
    const cs = conflicts(r);
    expect(cs.map((c) => [c.ours, c.base, c.theirs])).toEqual([
      ['# Ours\n', '# Title\n', '# Theirs\n'],
      ['Beta ours.\n', 'Beta two.\n', 'Beta theirs.\n'],
    ]);
    expect(r.kind === 'conflict' && r.reason).toMatch(/2 body hunks/);
  });

  it('merges identical edits made on both sides (false conflicts resolved)', () => {
    const edited = BODY.replace('Alpha one.', 'Alpha one, fixed.');
    const ours = edited.replace('# Title', '# Title (ours)');
    const theirs = edited;
    expect(clean(mergePage(BODY, ours, theirs))).toBe(ours);
    // The same change on both sides and nothing else.
    const both = BODY.replace('Beta one.', 'Beta 1.');
    expect(clean(mergePage(BODY, both, both + ''))).toBe(both);
    // The same insertion at the same place next to a different edit elsewhere.
    const ins = BODY.replace('Alpha two.\n', 'Alpha two.\nAlpha inserted.\n');
    const r = clean(mergePage(BODY, ins.replace('Intro paragraph.', 'Intro!'), ins.replace('Beta two.', 'Beta 2.')));
    expect(r).toBe(ins.replace('Intro paragraph.', 'Intro!').replace('Beta two.', 'Beta 2.'));
    expect(r.match(/Alpha inserted\./g)).toHaveLength(1);
  });

  it('removes a paragraph one side deleted and the other left alone', () => {
    const ours = BODY.replace('## Section A\n\nAlpha one.\nAlpha two.\n\n', '');
    const theirs = BODY.replace('Beta two.', 'Beta two, edited.');
    const r = clean(mergePage(BODY, ours, theirs));
    expect(r).toBe(lines('# Title', '', 'Intro paragraph.', '', '## Section B', '', 'Beta one.', 'Beta two, edited.'));
    expect(r).not.toContain('Alpha');
    // The same with the roles swapped.
    expect(clean(mergePage(BODY, theirs, ours))).toBe(r);
  });

  it('conflicts when one side deletes a paragraph the other edited', () => {
    const ours = BODY.replace('## Section A\n\nAlpha one.\nAlpha two.\n\n', '');
    const theirs = BODY.replace('Alpha one.', 'Alpha one, edited.');
    const cs = conflicts(mergePage(BODY, ours, theirs));
    expect(cs).toHaveLength(1);
    expect(cs[0]!.where).toBe('body');
    expect(cs[0]!.theirs).toContain('Alpha one, edited.');
    expect(cs[0]!.base).toContain('Alpha one.');
    expect(cs[0]!.ours).not.toContain('Alpha');
  });

  // node-diff3 places an insertion at the end of the file (offset = length of base) from both
  // sides in the same region, so two different appends conflict, like GNU diff3 and git do.
  // Identical appends are a false conflict and merge.
  it('treats appends by both sides at the end as a conflict (diff3 behaviour)', () => {
    const ours = BODY + 'Appended by ours.\n';
    const theirs = BODY + 'Appended by theirs.\n';
    expect(conflicts(mergePage(BODY, ours, theirs))).toEqual([{ where: 'body', ours: 'Appended by ours.\n', base: '', theirs: 'Appended by theirs.\n' }]);
    expect(clean(mergePage(BODY, ours, ours.replace('# Title', '# T')))).toBe(ours.replace('# Title', '# T'));
  });

  // diff3 joins hunks that touch (the next one starts where the previous one ends in base), so
  // edits of two adjacent lines conflict; one untouched line between them is enough to merge.
  it('conflicts on edits of adjacent lines and merges with one untouched line between (diff3 behaviour)', () => {
    const base = lines('a', 'b', 'c', 'd', 'e');
    expect(conflicts(mergePage(base, lines('a', 'B', 'c', 'd', 'e'), lines('a', 'b', 'C', 'd', 'e')))).toEqual([
      { where: 'body', ours: 'B\nc\n', base: 'b\nc\n', theirs: 'b\nC\n' },
    ]);
    expect(clean(mergePage(base, lines('a', 'B', 'c', 'd', 'e'), lines('a', 'b', 'c', 'D', 'e')))).toBe(lines('a', 'B', 'c', 'D', 'e'));
    // An insertion right after a line the other side changed touches it, too.
    expect(conflicts(mergePage(base, lines('a', 'B', 'c', 'd', 'e'), lines('a', 'b', 'new', 'c', 'd', 'e')))).toHaveLength(1);
  });

  it('merges insertions at different places, even of the same text', () => {
    const base = lines('a', 'b', 'c', 'd', 'e');
    expect(clean(mergePage(base, lines('a', 'X', 'b', 'c', 'd', 'e'), lines('a', 'b', 'c', 'd', 'X', 'e')))).toBe(lines('a', 'X', 'b', 'c', 'd', 'X', 'e'));
  });

  it('keeps CRLF line breaks and merges CRLF content line by line', () => {
    const crlf = (...ls: string[]) => ls.map((l) => `${l}\r\n`).join('');
    const base = crlf('---', 'title: T', '---', 'one', 'two', 'three', 'four', 'five');
    const ours = crlf('---', 'title: T', '---', 'ONE', 'two', 'three', 'four', 'five');
    const theirs = crlf('---', 'title: T', '---', 'one', 'two', 'three', 'four', 'FIVE', 'six');
    const r = clean(mergePage(base, ours, theirs));
    expect(r).toBe(crlf('---', 'title: T', '---', 'ONE', 'two', 'three', 'four', 'FIVE', 'six'));
    expect(r.replace(/\r\n/g, '')).not.toMatch(/[\r\n]/);
    // Overlapping CRLF edits report the hunk with its CRLF breaks.
    const theirs2 = crlf('---', 'title: T', '---', 'uno', 'two', 'three', 'four', 'five');
    expect(conflicts(mergePage(base, ours, theirs2))).toEqual([{ where: 'body', ours: 'ONE\r\n', base: 'one\r\n', theirs: 'uno\r\n' }]);
  });

  it('merges CRLF content that has no final line break', () => {
    const base = 'a\r\nb\r\nc';
    expect(clean(mergePage(base, 'A\r\nb\r\nc', 'a\r\nb\r\nc\r\nd'))).toBe('A\r\nb\r\nc\r\nd');
  });

  describe('missing final newline', () => {
    it('does not turn an append after a last line without a break into a conflict', () => {
      // Split naively, theirs would change the line "b" into "b\n" + "c", touching ours's hunk.
      expect(clean(mergePage('a\nb', 'A\nb', 'a\nb\nc'))).toBe('A\nb\nc');
      expect(clean(mergePage('a\nb', 'a\nb\nc', 'A\nb'))).toBe('A\nb\nc');
    });

    it('merges adding the final break on one side with an edit of the last line on the other', () => {
      expect(clean(mergePage('a\nb\nc', 'a\nb\nc\n', 'a\nb\nC'))).toBe('a\nb\nC\n');
      expect(clean(mergePage('a\nb\nc', 'a\nb\nC', 'a\nb\nc\n'))).toBe('a\nb\nC\n');
    });

    it('merges removing the final break on one side with an append on the other', () => {
      expect(clean(mergePage('a\nb\n', 'a\nb', 'a\nb\nc\n'))).toBe('a\nb\nc');
      expect(clean(mergePage('a\nb\n', 'A\nb\n', 'a\nb'))).toBe('A\nb');
    });

    it('keeps a missing final break that neither side changed', () => {
      expect(clean(mergePage('a\nb\nc\nd', 'A\nb\nc\nd', 'a\nb\nc\nD'))).toBe('A\nb\nc\nD');
    });

    it('reports a conflicting last line as each side had it', () => {
      expect(conflicts(mergePage('a\nb\nc', 'a\nb\nX', 'a\nb\nY\n'))).toEqual([{ where: 'body', ours: 'X', base: 'c', theirs: 'Y\n' }]);
    });

    it('handles empty bodies', () => {
      expect(clean(mergePage('', 'a\n', ''))).toBe('a\n');
      expect(conflicts(mergePage('', 'a\n', 'b\n'))).toEqual([{ where: 'body', ours: 'a\n', base: '', theirs: 'b\n' }]);
      expect(clean(mergePage('a\nb\nc\nd\n', '', 'a\nb\nc\nd\n'))).toBe('');
      expect(clean(mergePage('a\n', 'a\nb\n', 'a\nb\n'))).toBe('a\nb\n');
    });
  });
});

describe('mergePage: frontmatter', () => {
  const doc = (fm: string, body = BODY) => `---\n${fm}---\n${body}`;
  const base = doc(lines('title: Page', 'status: draft', 'tags: [a, b]', 'owner: ann'));

  const fmOf = (raw: string) => parseDocument(raw).frontmatter;

  it('merges different keys changed on each side, with the body edits too', () => {
    const ours = doc(lines('title: Page v2', 'status: draft', 'tags: [a, b]', 'owner: ann'), BODY.replace('# Title', '# T2'));
    const theirs = doc(lines('title: Page', 'status: review', 'tags: [a, b]', 'owner: ann'), BODY.replace('Beta two.', 'B2.'));
    const r = clean(mergePage(base, ours, theirs));
    expect(r).toBe(
      doc(lines('title: Page v2', 'status: review', 'tags:', '  - a', '  - b', 'owner: ann'), BODY.replace('# Title', '# T2').replace('Beta two.', 'B2.')),
    );
  });

  it('conflicts on the same key changed differently, naming the key', () => {
    const ours = doc(lines('title: Ours', 'status: draft', 'tags: [a, b]', 'owner: ann'));
    const theirs = doc(lines('title: Theirs', 'status: draft', 'tags: [a, b]', 'owner: ann'));
    const r = mergePage(base, ours, theirs);
    expect(conflicts(r)).toEqual([{ where: 'frontmatter', key: 'title', ours: 'title: Ours\n', base: 'title: Page\n', theirs: 'title: Theirs\n' }]);
    expect(r.kind === 'conflict' && r.reason).toContain("'title'");
  });

  it('reports frontmatter and body conflicts together', () => {
    const ours = doc(lines('title: Ours', 'status: draft', 'tags: [a, b]', 'owner: ann'), BODY.replace('Alpha one.', 'A1 ours'));
    const theirs = doc(lines('title: Theirs', 'status: draft', 'tags: [a, b]', 'owner: ann'), BODY.replace('Alpha one.', 'A1 theirs'));
    const cs = conflicts(mergePage(base, ours, theirs));
    expect(cs.map((c) => [c.where, c.key])).toEqual([
      ['frontmatter', 'title'],
      ['body', undefined],
    ]);
  });

  it('merges the same key changed to the same value on both sides', () => {
    const ours = doc(lines('title: Same', 'status: draft', 'tags: [a, b]', 'owner: ann'), BODY.replace('# Title', '# T'));
    const theirs = doc(lines('title: "Same"', 'status: draft', 'tags: [a, b]', 'owner: bob'));
    expect(fmOf(clean(mergePage(base, ours, theirs)))).toEqual({ title: 'Same', status: 'draft', tags: ['a', 'b'], owner: 'bob' });
  });

  it('compares values structurally, not by their text', () => {
    // Ours rewrites tags in block style (same value); theirs really changes them: theirs wins.
    const ours = doc(lines('title: Page', 'status: draft', 'tags:', '  - a', '  - b', 'owner: ann'));
    const theirs = doc(lines('title: Page', 'status: draft', 'tags: [a, c]', 'owner: ann'));
    expect(fmOf(clean(mergePage(base, ours, theirs))).tags).toEqual(['a', 'c']);
    expect(fmOf(clean(mergePage(base, theirs, ours))).tags).toEqual(['a', 'c']);
    // Nested values equal in structure but written differently on both sides merge.
    // (Mapping key order differs on all three sides, so any textual comparison would conflict.)
    const b2 = doc(lines('meta: {x: 1, y: [1, 2], z: 0}', 'n: 1'));
    const o2 = doc(lines('meta:', '  y: [1, 2]', '  x: 1', '  z: 0', 'n: 2'));
    const t2 = doc(lines("meta: {z: 0, y: [1, 2], 'x': 1.0}", 'n: 1', 'm: 3'));
    expect(fmOf(clean(mergePage(b2, o2, t2)))).toEqual({ meta: { x: 1, y: [1, 2], z: 0 }, n: 2, m: 3 });
    // A nested change on both sides is a conflict on the top-level key.
    const o3 = doc(lines('meta: {x: 2, y: [1, 2], z: 0}', 'n: 1'));
    const t3 = doc(lines('meta: {x: 1, y: [1, 3], z: 0}', 'n: 1'));
    expect(conflicts(mergePage(b2, o3, t3)).map((c) => c.key)).toEqual(['meta']);
  });

  it('removes a key removed on one side and unchanged on the other', () => {
    const ours = doc(lines('title: Page', 'status: draft', 'tags: [a, b]'), BODY.replace('# Title', '# T'));
    const theirs = doc(lines('title: Page', 'status: draft', 'tags: [a, b]', 'owner: ann'), BODY.replace('Beta two.', 'B2.'));
    const r = clean(mergePage(base, ours, theirs));
    expect(r).toBe(doc(lines('title: Page', 'status: draft', 'tags: [a, b]'), BODY.replace('# Title', '# T').replace('Beta two.', 'B2.')));
    expect(fmOf(r)).toEqual({ title: 'Page', status: 'draft', tags: ['a', 'b'] });
    // Either way round, the merged frontmatter is the remover's, whose block is kept as written.
    expect(clean(mergePage(base, theirs, ours))).toBe(r);
  });

  it('conflicts when a key is removed on one side and changed on the other', () => {
    const ours = doc(lines('title: Page', 'status: draft', 'tags: [a, b]'));
    const theirs = doc(lines('title: Page', 'status: draft', 'tags: [a, b]', 'owner: bob'));
    expect(conflicts(mergePage(base, ours, theirs))).toEqual([{ where: 'frontmatter', key: 'owner', ours: '', base: 'owner: ann\n', theirs: 'owner: bob\n' }]);
    expect(conflicts(mergePage(base, theirs, ours))).toEqual([{ where: 'frontmatter', key: 'owner', ours: 'owner: bob\n', base: 'owner: ann\n', theirs: '' }]);
  });

  it('distinguishes a key set to null from a removed key', () => {
    const ours = doc(lines('title: Page', 'status: draft', 'tags: [a, b]', 'owner: null'));
    const theirs = doc(lines('title: Page', 'status: draft', 'tags: [a, b]'));
    expect(conflicts(mergePage(base, ours, theirs)).map((c) => c.key)).toEqual(['owner']);
  });

  it('keeps new keys from both sides: ours order first, then theirs new keys in theirs order', () => {
    const ours = doc(lines('zeta: 1', 'title: Page', 'status: draft', 'tags: [a, b]', 'owner: ann', 'ours_new: x'));
    const theirs = doc(lines('title: Page', 'theirs_b: 2', 'status: draft', 'tags: [a, b]', 'theirs_a: 1', 'owner: ann'));
    const r = clean(mergePage(base, ours, theirs));
    expect(Object.keys(fmOf(r))).toEqual(['zeta', 'title', 'status', 'tags', 'owner', 'ours_new', 'theirs_b', 'theirs_a']);
    expect(fmOf(r)).toMatchObject({ zeta: 1, ours_new: 'x', theirs_b: 2, theirs_a: 1 });
    // The same new key added with different values conflicts; with the same value it merges.
    const t2 = doc(lines('title: Page', 'status: draft', 'tags: [a, b]', 'owner: ann', 'ours_new: y'));
    expect(conflicts(mergePage(base, ours, t2))).toEqual([{ where: 'frontmatter', key: 'ours_new', ours: 'ours_new: x\n', base: '', theirs: 'ours_new: y\n' }]);
    const t3 = doc(lines('title: Page', 'status: draft', 'tags: [a, b]', 'owner: ann', 'ours_new: x', 'k: 1'));
    expect(fmOf(clean(mergePage(base, ours, t3)))).toMatchObject({ ours_new: 'x', k: 1 });
  });

  it('merges frontmatter added where the base had none', () => {
    const plain = BODY;
    // One side adds frontmatter, the other edits the body.
    const ours = doc(lines('title: New'), BODY);
    const theirs = BODY.replace('Beta two.', 'B2.');
    expect(clean(mergePage(plain, ours, theirs))).toBe(doc(lines('title: New'), BODY.replace('Beta two.', 'B2.')));
    expect(clean(mergePage(plain, theirs, ours))).toBe(doc(lines('title: New'), BODY.replace('Beta two.', 'B2.')));
    // Both sides add frontmatter with different keys.
    const t2 = doc(lines('status: draft'), BODY.replace('Beta two.', 'B2.'));
    expect(clean(mergePage(plain, ours, t2))).toBe(doc(lines('title: New', 'status: draft'), BODY.replace('Beta two.', 'B2.')));
    // Both sides add the same key with different values.
    expect(conflicts(mergePage(plain, ours, doc(lines('title: Other'))))).toEqual([
      { where: 'frontmatter', key: 'title', ours: 'title: New\n', base: '', theirs: 'title: Other\n' },
    ]);
  });

  it('drops the block when every key is removed and keeps the body unambiguous', () => {
    const b = doc(lines('a: 1', 'b: 2'), lines('text'));
    const o = doc(lines('b: 2'), lines('text'));
    const t = doc(lines('a: 1'), lines('text'));
    expect(clean(mergePage(b, o, t))).toBe(lines('text'));
    // A body starting with a fence line keeps an empty block so it is not read as frontmatter.
    const b2 = doc(lines('a: 1'), lines('x', '---', 'y', '---'));
    const o2 = doc(lines(), lines('x', '---', 'y', '---'));
    const t2 = doc(lines('a: 1'), lines('---', 'y', '---'));
    const r = clean(mergePage(b2, o2, t2));
    expect(parseDocument(r)).toMatchObject({ frontmatter: {}, body: lines('---', 'y', '---') });
  });

  it("keeps a side's frontmatter block byte for byte when the merged frontmatter is that side's", () => {
    const b = doc(lines('# a comment', 'title: "Page"   # keep me', 'tags: [a, b]'));
    const o = b.replace('Beta two.', 'B2.');
    const t = b.replace('# Title', '# T');
    expect(clean(mergePage(b, o, t))).toBe(b.replace('Beta two.', 'B2.').replace('# Title', '# T'));
    const t2 = doc(lines('# theirs comment', 'title: Page 2', 'tags: [a, b]'), BODY.replace('# Title', '# T'));
    expect(clean(mergePage(b, o, t2))).toBe(t2.replace('Beta two.', 'B2.'));
  });

  it('lets an invalid frontmatter throw its ServiceError', () => {
    const bad = '---\ntitle: [unclosed\n---\nbody\n';
    const good = '---\ntitle: x\n---\nbody\n';
    for (const [b, o, t] of [
      [good, bad, '---\ntitle: y\n---\nbody\n'],
      [bad, good, '---\ntitle: y\n---\nbody\n'],
      [good, '---\ntitle: y\n---\nbody\n', bad],
    ] as const) {
      let err: unknown;
      try {
        mergePage(b, o, t);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ServiceError);
      expect((err as ServiceError).code).toBe('invalid_frontmatter');
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Property: edits confined to separate halves always merge, with every edit from both sides.

const WORDS = ['alpha', 'beta', 'gamma', 'delta', 'the', 'agent', 'page', 'vault', 'merge', 'note', '-', '*', '#'];

describe('mergePage: property', () => {
  it('merges 200 random documents edited in separate halves cleanly, with every edited line', () => {
    const rand = prng(0x5eed);
    const int = (n: number) => Math.floor(rand() * n);
    const text = () => Array.from({ length: 1 + int(5) }, () => WORDS[int(WORDS.length)]).join(' ');
    let counter = 0;
    const fresh = (who: string) => `${who}${counter++} ${text()}`;

    /** Edits lines [from, to) of `base`: keep, change, delete, or insert a new line after. */
    function edit(base: string[], from: number, to: number, who: string) {
      const out: string[] = [];
      const added: string[] = [];
      for (let i = from; i < to; i++) {
        const roll = rand();
        if (roll < 0.45) out.push(base[i]!);
        else if (roll < 0.7) {
          const l = fresh(who);
          out.push(l);
          added.push(l);
        } else if (roll < 0.8) {
          // deleted
        } else {
          const l = fresh(who);
          out.push(base[i]!, l);
          added.push(l);
        }
      }
      if (added.length === 0 && to > from) {
        // At least one real edit per side: a new line after the range.
        const l = fresh(who);
        out.push(l);
        added.push(l);
      }
      return { out, added };
    }

    for (let round = 0; round < 200; round++) {
      const n = 6 + int(15);
      // Unique base lines (a numbered prefix), so the alignment diff3 finds is the intended one.
      const base = Array.from({ length: n }, () => fresh('b'));
      const half = Math.floor(n / 2);
      // Ours edits [0, half - 1), theirs [half + 1, n): lines half - 1 and half stay untouched.
      const o = edit(base, 0, half - 1, 'o');
      const t = edit(base, half + 1, n, 't');
      const middle = base.slice(half - 1, half + 1);
      const eol = rand() < 0.3 ? '\r\n' : '\n';
      const baseFinal = rand() < 0.7;
      // Theirs owns the end of the document, so it may also add or remove the final break.
      const theirsFinal = rand() < 0.2 ? !baseFinal : baseFinal;
      const join = (ls: string[], final: boolean) => {
        const s = ls.map((l) => l + eol).join('');
        return final ? s : s.slice(0, -eol.length);
      };
      const withFm = rand() < 0.5;
      const fm = (title: string, status: string) => (withFm ? `---${eol}title: ${title}${eol}status: ${status}${eol}---${eol}` : '');

      const baseDoc = fm('T', 'draft') + join(base, baseFinal);
      const oursDoc = fm('T ours', 'draft') + join([...o.out, ...middle, ...base.slice(half + 1)], baseFinal);
      const theirsDoc = fm('T', 'review') + join([...base.slice(0, half - 1), ...middle, ...t.out], theirsFinal);
      const expectedBody = join([...o.out, ...middle, ...t.out], theirsFinal);

      const r = mergePage(baseDoc, oursDoc, theirsDoc);
      const context = `round ${round}\nbase:\n${baseDoc}\nours:\n${oursDoc}\ntheirs:\n${theirsDoc}`;
      expect(r.kind, context).toBe('clean');
      const content = clean(r);
      const parsed = parseDocument(content);
      for (const l of [...o.added, ...t.added]) expect(parsed.body, context).toContain(l);
      expect(parsed.body, context).toBe(expectedBody);
      if (withFm) expect(parsed.frontmatter, context).toEqual({ title: 'T ours', status: 'review' });
      // Swapping the sides gives the same merge.
      expect(clean(mergePage(baseDoc, theirsDoc, oursDoc)).endsWith(expectedBody), context).toBe(true);
    }
  });
});
