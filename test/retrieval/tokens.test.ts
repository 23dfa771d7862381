import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import bpeRanks from 'gpt-tokenizer/bpeRanks/o200k_base';
import library, { countTokens, encode } from 'gpt-tokenizer/encoding/o200k_base';
import { describe, expect, it } from 'vitest';
import { mergeParts } from '../../src/retrieval/bpe-merge.js';
import { o200k, ranksFromTiktoken, tokenCount, truncateToTokens } from '../../src/retrieval/tokens.js';
import { prng } from '../support/random.js';

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

  // The library's own merge (quadratic) is the oracle for the fast one (bpe-merge.ts).
  const libraryCore = (
    library as unknown as { bytePairEncodingCoreProcessor: { bytePairMerge(p: Uint8Array): number[]; getBpeRankFromBytes(b: Uint8Array): number | undefined } }
  ).bytePairEncodingCoreProcessor;
  const asText = { disallowedSpecial: new Set<string>() };

  it('merges pieces exactly as the library does (random bytes, and text in many scripts)', () => {
    const rnd = prng(20261127);
    const rankOf = (b: Uint8Array) => libraryCore.getBpeRankFromBytes(b);
    for (let i = 0; i < 300; i++) {
      const len = 1 + Math.floor(rnd() * (i < 200 ? 40 : 600));
      // Bytes from a small alphabet merge often; from all 256 values, rarely.
      const alphabet = i % 3 === 0 ? 256 : 4 + Math.floor(rnd() * 20);
      const piece = Uint8Array.from({ length: len }, () => 97 + Math.floor(rnd() * alphabet) - (alphabet === 256 ? 97 : 0));
      const starts = mergeParts(piece, rankOf);
      const ours = starts.slice(0, -1).map((st, k) => libraryCore.getBpeRankFromBytes(piece.subarray(st, starts[k + 1]))!);
      expect(ours, `piece ${i}`).toEqual(libraryCore.bytePairMerge(piece));
    }
    const words = [
      'lighthouse',
      'Leuchtturmwärter',
      'маяк',
      '灯台の保守',
      'منارة',
      '🔦🚨',
      'naïve',
      'ﬁle',
      'e\u0301',
      '7777777',
      '\t\t',
      '__init__',
      'https://example.com/a?b=c',
    ];
    for (let i = 0; i < 200; i++) {
      const text = Array.from({ length: 1 + Math.floor(rnd() * 30) }, () => words[Math.floor(rnd() * words.length)]!.repeat(1 + Math.floor(rnd() * 4))).join(
        rnd() < 0.5 ? ' ' : '',
      );
      expect(o200k().encode(text, asText), text.slice(0, 40)).toEqual(encode(text, asText));
    }
  });

  it('counts long runs without spaces as the library does, and huge ones in bounded time', () => {
    // 6,000 characters of one piece: the library's quadratic merge still answers in well under a second.
    for (const run of [
      '灯台の保守管理'.repeat(900),
      'x'.repeat(6000),
      'ab'.repeat(3000),
      Buffer.from(Array.from({ length: 4500 }, (_, i) => (i * 7919) % 251)).toString('base64'),
    ]) {
      expect(tokenCount(run)).toBe(countTokens(run, asText));
    }
    // The service's encoder merges with bpe-merge.ts, not the library's quadratic loop (which
    // took 94 s for a 100,000-character line of CJK, the event loop held throughout).
    const core = (o200k() as unknown as { bytePairEncodingCoreProcessor: { bytePairMerge: unknown } }).bytePairEncodingCoreProcessor;
    expect(core.bytePairMerge).not.toBe(Object.getPrototypeOf(libraryCore).bytePairMerge);
    const huge = Array.from({ length: 100_000 }, (_, i) => '灯台の保守管理夜間点検毎週行う'[(i * 7) % 15]).join('');
    expect(tokenCount(huge)).toBeGreaterThan(30_000);
    expect(tokenCount(truncateToTokens(huge, 5000))).toBeLessThanOrEqual(5000);
    // 25,000: what the library itself counted (in 37 s) for this run.
    expect(tokenCount('x'.repeat(200_000))).toBe(25_000);
  });

  it('keeps no long piece in the merge cache (a 1 MB line would stay there, and every prefix cut of it)', () => {
    tokenCount('q'.repeat(50_000));
    truncateToTokens('z'.repeat(60_000), 300);
    tokenCount('short words stay cached');
    const cache = (o200k() as unknown as { bytePairEncodingCoreProcessor: { mergeCache?: Map<string, unknown> } }).bytePairEncodingCoreProcessor.mergeCache;
    expect(cache).toBeInstanceOf(Map);
    expect(cache!.size).toBeGreaterThan(0);
    expect([...cache!.keys()].filter((k) => k.length > 256)).toEqual([]);
  });

  it('merges a long piece once while it is among the last few (a bundle counts one page several times), told apart from others of its length', () => {
    const core = (o200k() as unknown as { bytePairEncodingCoreProcessor: { bytePairMerge: (piece: Uint8Array) => number[] } }).bytePairEncodingCoreProcessor;
    const merge = core.bytePairMerge;
    const merged: number[] = [];
    core.bytePairMerge = (piece: Uint8Array) => {
      merged.push(piece.length);
      return merge(piece);
    };
    try {
      const run = (ch: string, n: number) => Array.from({ length: n }, (_, i) => '灯台の保守管理夜間点検毎週行う'[(i * 7) % 15]).join('') + ch;
      const a = run('あ', 3000);
      const b = run('い', 3000);
      const na = tokenCount(a);
      expect(merged).toHaveLength(1);
      // The same text again, and inside a larger text: no merge, the same count.
      expect(tokenCount(a)).toBe(na);
      expect(tokenCount(`# T\n\n${a}\n`)).toBe(na + tokenCount('# T\n\n') + 1);
      expect(merged).toHaveLength(1);
      // Same length, one character apart: merged on its own, counted as the library counts.
      expect(b.length).toBe(a.length);
      expect(tokenCount(b)).toBe(countTokens(b, asText));
      expect(merged).toHaveLength(2);
      // A cut of the piece is another piece.
      const cut = truncateToTokens(a, 500);
      expect(tokenCount(cut)).toBeLessThanOrEqual(500);
      // Eight others later the first is merged again (at most eight are kept), with the same tokens.
      for (let i = 0; i < 8; i++) tokenCount(run(String.fromCharCode(0x3041 + i), 1000 + i));
      merged.length = 0;
      expect(tokenCount(a)).toBe(na);
      expect(merged).toEqual([Buffer.byteLength(a)]);
      expect(na).toBe(countTokens(a, asText));
    } finally {
      core.bytePairMerge = merge;
    }
  });

  it('cuts long text with few counts: the prefix within budget, and the longest one', () => {
    for (const [text, max] of [
      ['a'.repeat(500_000), 30_000],
      ['灯台の保守'.repeat(50_000), 1_000],
      [Array.from({ length: 20_000 }, (_, i) => `word${i}`).join(' '), 7_777],
    ] as const) {
      const cut = truncateToTokens(text, max);
      expect(text.startsWith(cut)).toBe(true);
      const n = tokenCount(cut);
      expect(n).toBeLessThanOrEqual(max);
      // Longest: one more character would not fit (or the cut moved back to a line end; none here).
      expect(tokenCount(text.slice(0, cut.length + 2))).toBeGreaterThan(max - 1);
    }
  });
});
