import { describe, expect, it } from 'vitest';
import { applyEdit, type EditMode } from '../../src/core/pages/edit-apply.js';
import { ServiceError } from '../../src/errors/index.js';

/** The text transforms behind context_append / context_replace_section / context_patch (issue 13), table-driven. */

const rows: { name: string; raw: string; mode: EditMode; out: string }[] = [
  { name: 'append at the end', raw: '# A\n\nbody\n', mode: { kind: 'append', text: 'more' }, out: '# A\n\nbody\n\nmore\n' },
  { name: 'append to a page without a final newline', raw: '# A\n\nbody', mode: { kind: 'append', text: 'more\n\n\n' }, out: '# A\n\nbody\n\nmore\n' },
  { name: 'append after a blank line adds none', raw: '# A\n\nbody\n\n', mode: { kind: 'append', text: 'more' }, out: '# A\n\nbody\n\nmore\n' },
  {
    name: 'append keeps the frontmatter',
    raw: '---\ntags: [a]\n---\n# A\n',
    mode: { kind: 'append', text: 'x' },
    out: '---\ntags: [a]\n---\n# A\n\nx\n',
  },
  {
    name: 'append to a section ends it before the next heading',
    raw: '# A\n\n## S\n\none\n\n## T\n\ntwo\n',
    mode: { kind: 'append', section: 'S', text: 'added' },
    out: '# A\n\n## S\n\none\n\nadded\n\n## T\n\ntwo\n',
  },
  {
    name: 'append to a section includes its sub-sections',
    raw: '## S\n\none\n\n### Sub\n\ndeep\n\n## T\n',
    mode: { kind: 'append', section: 'S', text: 'added' },
    out: '## S\n\none\n\n### Sub\n\ndeep\n\nadded\n\n## T\n',
  },
  {
    name: 'append to the last section',
    raw: '---\ntitle: x\n---\n## S\n\none\n',
    mode: { kind: 'append', section: '## S', text: 'added' },
    out: '---\ntitle: x\n---\n## S\n\none\n\nadded\n',
  },
  {
    name: 'replace a section body',
    raw: '# A\n\n## S\n\nold\n\n## T\n\ntwo\n',
    mode: { kind: 'replace_section', section: 's', text: 'new\n' },
    out: '# A\n\n## S\n\nnew\n\n## T\n\ntwo\n',
  },
  {
    name: 'replace with the heading line included keeps one heading',
    raw: '## S\n\nold\n\n## T\n',
    mode: { kind: 'replace_section', section: 'S', text: '## S\n\nnew' },
    out: '## S\n\nnew\n\n## T\n',
  },
  {
    name: 'a new text starting with a longer heading is not taken as the heading',
    raw: '## S\n\nold\n',
    mode: { kind: 'replace_section', section: 'S', text: '## Steps\n\nnew' },
    out: '## S\n\n## Steps\n\nnew\n',
  },
  {
    name: 'replace with nothing clears the section',
    raw: '## S\n\nold\n\n## T\n',
    mode: { kind: 'replace_section', section: 'S', text: '' },
    out: '## S\n\n## T\n',
  },
  {
    name: 'replace under a setext heading keeps the underline',
    raw: 'Title\n=====\n\nold\n',
    mode: { kind: 'replace_section', section: 'Title', text: 'new' },
    out: 'Title\n=====\n\nnew\n',
  },
  {
    name: 'patch',
    raw: '# A\n\nline\n',
    mode: { kind: 'patch', patch: '--- a\n+++ b\n@@ -1,3 +1,3 @@\n # A\n \n-line\n+LINE\n' },
    out: '# A\n\nLINE\n',
  },
];

describe('applyEdit', () => {
  for (const r of rows) it(r.name, () => expect(applyEdit(r.raw, r.mode, 'p.md')).toBe(r.out));

  const errs: { name: string; raw: string; mode: EditMode; code: string; text: string }[] = [
    {
      name: 'missing section names the headings',
      raw: '# A\n\n## B\n',
      mode: { kind: 'append', section: 'C', text: 'x' },
      code: 'section_not_found',
      text: 'No section titled "C" in p.md; its headings: "A", "B"',
    },
    {
      name: 'missing section on a page without headings',
      raw: 'plain\n',
      mode: { kind: 'replace_section', section: 'C', text: 'x' },
      code: 'section_not_found',
      text: 'No section titled "C" in p.md; it has no headings',
    },
    {
      name: 'a patch that does not apply',
      raw: '# A\n',
      mode: { kind: 'patch', patch: '--- a\n+++ b\n@@ -1 +1 @@\n-# Z\n+# Y\n' },
      code: 'patch_does_not_apply',
      text: 'The patch does not apply to p.md',
    },
  ];
  for (const e of errs)
    it(e.name, () => {
      let caught: unknown;
      try {
        applyEdit(e.raw, e.mode, 'p.md');
      } catch (x) {
        caught = x;
      }
      expect(caught).toBeInstanceOf(ServiceError);
      expect((caught as ServiceError).code).toBe(e.code);
      expect((caught as ServiceError).message).toContain(e.text);
    });
});
