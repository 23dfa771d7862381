import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import bpeRanks from 'gpt-tokenizer/bpeRanks/o200k_base';
import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { describe, expect, it } from 'vitest';
import { ranksFromTiktoken, tokenCount, truncateToTokens } from '../../src/retrieval/tokens.js';

// The bundle's budgets are counted by tokens.ts, which reads the ranks from gpt-tokenizer's
// .tiktoken data instead of importing its generated module (memory); the module is the oracle.
const tiktoken = createRequire(import.meta.url).resolve('gpt-tokenizer/data/o200k_base.tiktoken');

describe('token counting', () => {
  it('reads the same ranks as the library’s own module holds', () => {
    const ranks = ranksFromTiktoken(tiktoken);
    expect(ranks.length).toBe(bpeRanks.length);
    let differing = 0;
    for (let i = 0; i < ranks.length; i++) {
      const a = ranks[i];
      const b = bpeRanks[i];
      if (typeof a === 'string' ? a !== b : JSON.stringify(a) !== JSON.stringify(b)) differing++;
    }
    expect(differing).toBe(0);
    // Both kinds occur: tokens that are text and tokens that are bytes of a split character.
    expect(ranks.some((r) => Array.isArray(r))).toBe(true);
    expect(ranks.filter((r) => typeof r === 'string').length).toBeGreaterThan(190_000);
  });

  it('counts as the library counts', () => {
    const texts = [
      '',
      'hello world',
      '# Deploy\n\nRun `make deploy` on the **payments** cluster.\n',
      'Ünïcödé, 日本語のテキスト, emoji 👩‍💻🚀, and a ligature ﬁle',
      '\uFEFFa byte order mark first',
      '<|endoftext|> is text here, not a special token',
      'x'.repeat(5000),
      Array.from({ length: 400 }, (_, i) => `word${i}`).join(' '),
    ];
    const asText = { disallowedSpecial: new Set<string>() };
    for (const t of texts) expect(tokenCount(t), t.slice(0, 30)).toBe(countTokens(t, asText));
    // A special token's text is counted as its characters, not refused.
    expect(tokenCount('<|endoftext|>')).toBeGreaterThan(1);
  });

  it('cuts to a budget by whole characters', () => {
    const text = Array.from({ length: 200 }, (_, i) => `Line ${i}: naïve café 日本 👩‍💻 text`).join('\n');
    for (const max of [0, 1, 7, 50, 333, 10_000]) {
      const cut = truncateToTokens(text, max);
      expect(countTokens(cut)).toBeLessThanOrEqual(max);
      expect(text.startsWith(cut)).toBe(true);
      expect(cut).not.toMatch(/\uFFFD/);
    }
    expect(truncateToTokens(text, 10_000)).toBe(text);
    expect(countTokens(truncateToTokens(text, 333))).toBeGreaterThan(250);
  });

  it('refuses a malformed ranks file rather than counting wrongly', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-ranks-'));
    try {
      const noRank = path.join(dir, 'a.tiktoken');
      fs.writeFileSync(noRank, 'IQ== 0\nIg==\n');
      expect(() => ranksFromTiktoken(noRank)).toThrow(/no rank/);
      const backwards = path.join(dir, 'b.tiktoken');
      fs.writeFileSync(backwards, 'IQ== 1\nIg== 0\n');
      expect(() => ranksFromTiktoken(backwards)).toThrow(/out of order/);
      const gap = path.join(dir, 'c.tiktoken');
      fs.writeFileSync(gap, 'IQ== 0\nIg== 2\n');
      expect(ranksFromTiktoken(gap)).toEqual(['!', '', '"']);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
