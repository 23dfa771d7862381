import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES, statusesOf, type ErrorCode } from '../../src/errors/codes.js';

/**
 * Issue 12: docs/errors.md lists exactly the codes of the registry, each with the registry's
 * status(es). Every table whose first two columns are `code` and `status` counts, except under
 * "## Reserved codes" (codes the service does not produce yet). A row's first cell starts with the
 * code in backticks (more words may follow: "`conflict` (ref moved)"); its status cell holds one
 * or more three-digit statuses ("401 / 403", "400, as a tool error").
 */
const DOC = new URL('../../docs/errors.md', import.meta.url);

interface Row {
  line: number;
  code: string;
  statuses: number[];
}

function documentedRows(markdown: string): { rows: Row[]; unparsed: string[] } {
  const rows: Row[] = [];
  const unparsed: string[] = [];
  let section = '';
  let inTable = false;
  markdown.split('\n').forEach((text, i) => {
    const heading = /^## (.+)$/.exec(text);
    if (heading) section = heading[1]!.trim();
    if (!text.startsWith('|')) {
      inTable = false;
      return;
    }
    if (/^\|\s*code\s*\|\s*status\s*\|/.test(text)) {
      inTable = section !== 'Reserved codes';
      return;
    }
    if (!inTable || /^\|[\s|:-]+\|$/.test(text)) return;
    const cells = text
      .split('|')
      .slice(1, -1)
      .map((c) => c.trim());
    const code = /^`([a-z0-9_]+)`/.exec(cells[0] ?? '')?.[1];
    // Rows of the MCP SDK's own answers carry no code of ours.
    if (code === undefined) {
      if (cells[0] !== '(SDK)') unparsed.push(`line ${i + 1}: ${text}`);
      return;
    }
    const statuses = [...(cells[1] ?? '').matchAll(/\b[1-5]\d\d\b/g)].map((m) => Number(m[0]));
    if (statuses.length === 0) unparsed.push(`line ${i + 1}: ${text}`);
    rows.push({ line: i + 1, code, statuses });
  });
  return { rows, unparsed };
}

const sorted = (xs: Iterable<number | string>) => [...new Set(xs)].sort();

describe('error registry', () => {
  const { rows, unparsed } = documentedRows(readFileSync(DOC, 'utf8'));
  const registry = Object.keys(ERROR_CODES) as ErrorCode[];

  it('is well formed: snake_case codes, 4xx and 5xx statuses, no status twice', () => {
    for (const code of registry) {
      expect(code).toMatch(/^[a-z][a-z0-9]*(_[a-z0-9]+)*$/);
      const statuses = statusesOf(code);
      expect(statuses.length, code).toBeGreaterThan(0);
      expect(new Set(statuses).size, code).toBe(statuses.length);
      for (const s of statuses) expect(s >= 400 && s <= 599, `${code}: ${s}`).toBe(true);
    }
  });

  it('docs/errors.md tables parse: every row names a code and a status', () => {
    expect(unparsed).toEqual([]);
    // Guards against a parser that silently finds nothing.
    expect(rows.length).toBeGreaterThanOrEqual(registry.length);
  });

  it('docs/errors.md lists exactly the registered codes', () => {
    const documented = new Set(rows.map((r) => r.code));
    const missingFromDocs = registry.filter((c) => !documented.has(c)).sort();
    const notRegistered = [...documented].filter((c) => !(c in ERROR_CODES)).sort();
    expect({ missingFromDocs, notRegistered }).toEqual({ missingFromDocs: [], notRegistered: [] });
  });

  it("each documented status is the registry's, and every registered status is documented", () => {
    const wrongRows = rows
      .filter((r) => r.code in ERROR_CODES)
      .filter((r) => r.statuses.some((s) => !statusesOf(r.code as ErrorCode).includes(s)))
      .map((r) => `line ${r.line}: ${r.code} ${r.statuses.join('/')} (registry: ${statusesOf(r.code as ErrorCode).join('/')})`);
    expect(wrongRows).toEqual([]);
    for (const code of registry) {
      const documented = rows.filter((r) => r.code === code).flatMap((r) => r.statuses);
      expect(sorted(documented), code).toEqual(sorted(statusesOf(code)));
    }
  });
});
