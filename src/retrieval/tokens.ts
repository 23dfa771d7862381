import fs from 'node:fs';
import { createRequire } from 'node:module';
import { GptEncoding } from 'gpt-tokenizer/GptEncoding';
import { mergeParts } from './bpe-merge.js';

/** Budgets are counted with a real tokenizer (o200k, the encoding of current OpenAI models). */
export const TOKENIZER = 'o200k_base';

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The encoding's ranks, read from the `.tiktoken` file gpt-tokenizer ships (`data/`, a line
 * `<base64 bytes> <rank>` each) into the array its own generated module holds: at each rank the
 * token as a string when its bytes are UTF-8 that encodes back to the same length (a leading
 * BOM would not), else the bytes; '' where a rank is missing. Importing that module instead kept
 * its 2.2 MB source and compiled literals resident for the process's life (~19 MB at 100,000
 * pages, docs/decisions.md "Resident memory at 100,000 pages"). test/retrieval/tokens.test.ts
 * checks the array equals the module's.
 */
export function ranksFromTiktoken(file: string): (string | number[])[] {
  const text = fs.readFileSync(file, 'latin1');
  const ranks: (string | number[])[] = [];
  for (let pos = 0; pos < text.length;) {
    let end = text.indexOf('\n', pos);
    if (end < 0) end = text.length;
    if (end > pos) {
      const sp = text.indexOf(' ', pos);
      if (sp < 0 || sp > end) throw new Error(`${file}: no rank on the line at byte ${pos}`);
      const bytes = Buffer.from(text.slice(pos, sp), 'base64');
      const rank = Number(text.slice(sp + 1, end));
      if (!Number.isInteger(rank) || rank < ranks.length) throw new Error(`${file}: rank ${text.slice(sp + 1, end)} out of order`);
      while (ranks.length < rank) ranks.push('');
      let token: string | undefined;
      try {
        token = utf8.decode(bytes);
        if (Buffer.byteLength(token) !== bytes.length) token = undefined;
      } catch {
        token = undefined;
      }
      ranks.push(token ?? Array.from(bytes));
    }
    pos = end + 1;
  }
  return ranks;
}

/** The parts of gpt-tokenizer's encoder that merging a piece uses (not in its typings). */
interface BytePairCore {
  bytePairMerge(piece: Uint8Array): number[];
  getBpeRankFromBytes(bytes: Uint8Array): number | undefined;
  getBpeRankFromBytesOrThrow(bytes: Uint8Array): number;
}

/**
 * Replaces the encoder's quadratic merge with bpe-merge.ts's (same tokens, O(n log n)). The
 * library's internals are checked here, so an upgrade that moves them fails at the first token
 * count (and in test/retrieval/tokens.test.ts), never silently falls back to the slow merge.
 */
function withFastMerge(encoding: GptEncoding): GptEncoding {
  const core = (encoding as unknown as { bytePairEncodingCoreProcessor?: Partial<BytePairCore> }).bytePairEncodingCoreProcessor;
  if (
    !core ||
    typeof core.bytePairMerge !== 'function' ||
    typeof core.getBpeRankFromBytes !== 'function' ||
    typeof core.getBpeRankFromBytesOrThrow !== 'function'
  ) {
    throw new Error('gpt-tokenizer changed: its byte-pair merge is not where tokens.ts expects it');
  }
  const rankOf = core.getBpeRankFromBytes.bind(core);
  const tokenOf = core.getBpeRankFromBytesOrThrow.bind(core);
  core.bytePairMerge = (piece: Uint8Array) => {
    const starts = mergeParts(piece, rankOf);
    const tokens: number[] = [];
    for (let i = 0; i + 1 < starts.length; i++) tokens.push(tokenOf(piece.subarray(starts[i]!, starts[i + 1]!)));
    return tokens;
  };
  return encoding;
}

let encoding: GptEncoding | undefined;

/** Built on first use: a process that never counts tokens never holds the ranks. */
export function o200k(): GptEncoding {
  encoding ??= withFastMerge(
    GptEncoding.getEncodingApi(TOKENIZER, () => ranksFromTiktoken(createRequire(import.meta.url).resolve(`gpt-tokenizer/data/${TOKENIZER}.tiktoken`))),
  );
  return encoding;
}

/**
 * Page text is text: `<|endoftext|>` written in a page counts as the tokens of its characters.
 * (The library's default refuses such text with an exception, which failed every bundle that
 * reached the page.)
 */
const asText = { disallowedSpecial: new Set<string>() };

export function tokenCount(text: string): number {
  return o200k().countTokens(text, asText);
}

/**
 * The longest prefix of `text` within `max` tokens, cut back to a line end when one is near.
 * Found by binary search over code points with `countTokens`: decoding a token prefix would cut
 * characters in half (and gpt-tokenizer's shared streaming decoder would carry the half into
 * the next decode anywhere in the process).
 */
export function truncateToTokens(text: string, max: number): string {
  if (max <= 0) return '';
  const enc = o200k();
  if (enc.countTokens(text, asText) <= max) return text;
  const cps = Array.from(text);
  let lo = 0;
  let hi = cps.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (enc.countTokens(cps.slice(0, mid).join(''), asText) <= max) lo = mid;
    else hi = mid - 1;
  }
  const cut = cps.slice(0, lo).join('');
  const nl = cut.lastIndexOf('\n');
  return nl > cut.length / 2 ? cut.slice(0, nl) : cut;
}
