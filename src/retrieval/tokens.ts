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
  bytePairEncode(piece: string): number[];
  bytePairMerge(piece: Uint8Array): number[];
  getBpeRankFromBytes(bytes: Uint8Array): number | undefined;
  getBpeRankFromBytesOrThrow(bytes: Uint8Array): number;
  addToMergeCache(key: string, value: number[]): void;
}

/** The longest token of o200k, in UTF-8 bytes (a run of 128 spaces): n bytes are at least n / 128 tokens. */
export const MAX_TOKEN_BYTES = 128;

/** Fewest tokens `text` can be: a cheap bound that spares counting text that cannot fit. */
export function minTokens(text: string): number {
  return Math.ceil(Buffer.byteLength(text) / MAX_TOKEN_BYTES);
}

/** Merges of pieces longer than this are not kept by the library's cache (1 MB keys, unbounded memory). */
const CACHED_PIECE_CHARS = 256;

/**
 * The merges of the last few long pieces, kept apart (at most LONG_PIECES of them, LONG_PIECE_CHARS
 * characters in all). A bundle counts the same long piece several times: the section, the cut
 * (truncateToTokens), the section as cut, the whole markdown, the next request's same page. A page
 * of one 1 MiB line cost ~1.6 s a count, and a bundle of it ~5 counts in one stretch of the event
 * loop; kept, each piece is merged once.
 */
const LONG_PIECES = 8;
const LONG_PIECE_CHARS = 4 * 1024 * 1024;
const longPieces = new Map<string, number[]>();
let longPieceChars = 0;

/**
 * A copy of `s` that holds only its own characters: a pre-tokenizer match is a V8 sliced string
 * that keeps the whole text it was cut from alive (eight kept 300-character pieces of 2 MiB
 * texts held 16 MiB; attack of session q).
 */
function ownCopy(s: string): string {
  return ` ${s}`.slice(1);
}

function keepLongPiece(piece: string, tokens: number[]): void {
  if (piece.length > LONG_PIECE_CHARS) return;
  longPieces.set(ownCopy(piece), tokens);
  longPieceChars += piece.length;
  for (const [k] of longPieces) {
    if (longPieces.size <= LONG_PIECES && longPieceChars <= LONG_PIECE_CHARS) break;
    longPieces.delete(k);
    longPieceChars -= k.length;
  }
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
    typeof core.bytePairEncode !== 'function' ||
    typeof core.bytePairMerge !== 'function' ||
    typeof core.getBpeRankFromBytes !== 'function' ||
    typeof core.getBpeRankFromBytesOrThrow !== 'function' ||
    typeof core.addToMergeCache !== 'function'
  ) {
    throw new Error('gpt-tokenizer changed: its byte-pair merge is not where tokens.ts expects it');
  }
  const cache = core.addToMergeCache.bind(core);
  core.addToMergeCache = (key: string, value: number[]) => {
    if (key.length <= CACHED_PIECE_CHARS) cache(ownCopy(key), value);
  };
  const encodePiece = core.bytePairEncode.bind(core);
  core.bytePairEncode = (piece: string) => {
    if (piece.length <= CACHED_PIECE_CHARS) return encodePiece(piece);
    const kept = longPieces.get(piece);
    if (kept) {
      // Most recently used last: the first in the map goes first.
      longPieces.delete(piece);
      longPieces.set(piece, kept);
      return kept;
    }
    const tokens = encodePiece(piece);
    keepLongPiece(piece, tokens);
    return tokens;
  };
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
/** Each token's length in UTF-8 bytes, by rank. */
let tokenBytes: Uint8Array = new Uint8Array(0);

function loadRanks(): (string | number[])[] {
  const ranks = ranksFromTiktoken(createRequire(import.meta.url).resolve(`gpt-tokenizer/data/${TOKENIZER}.tiktoken`));
  tokenBytes = Uint8Array.from(ranks, (r) => (typeof r === 'string' ? Buffer.byteLength(r) : r.length));
  return ranks;
}

/** Built on first use: a process that never counts tokens never holds the ranks. */
export function o200k(): GptEncoding {
  encoding ??= withFastMerge(GptEncoding.getEncodingApi(TOKENIZER, loadRanks));
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

/** The longest prefix of `text` of at most `bytes` UTF-8 bytes, in whole characters. */
function utf8Prefix(text: string, bytes: number): string {
  const buf = Buffer.from(text);
  if (buf.length <= bytes) return text;
  let end = Math.max(0, bytes);
  // Back off continuation bytes (10xxxxxx) to the start of the character they belong to.
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
  return buf.subarray(0, end).toString('utf8');
}

/**
 * The UTF-8 bytes of the first `max` tokens of `text`, or null when it has no more than `max`.
 * Piece by piece, up to the first token past max: the library's encode() spreads each piece's
 * tokens into one array, which overflows the stack for a piece of more than ~120,000 tokens (a
 * 600 KB line of letters failed every bundle that reached it; attack of session q).
 */
function bytesOfFirst(enc: GptEncoding, text: string, max: number): number | null {
  let seen = 0;
  let bytes = 0;
  for (const piece of enc.encodeGenerator(text, asText)) {
    for (const t of piece) {
      if (seen === max) return bytes;
      bytes += tokenBytes[t]!;
      seen++;
    }
  }
  return null;
}

/**
 * The longest prefix of `text` within `max` tokens, cut back to a line end when one is near.
 * Counting is bounded: no prefix longer than (max + 1) × MAX_TOKEN_BYTES bytes can fit, so the
 * text is cut there first; the rest is encoded once, cut after its max-th token (at a character
 * boundary), and the cut checked by encoding it (a prefix can tokenize differently at its end),
 * moving back while it is over. (A search over prefixes, counting each, was 20 counts of the
 * whole text: seconds for a page holding one long line, the node frozen meanwhile.)
 */
export function truncateToTokens(text: string, max: number): string {
  if (max <= 0) return '';
  if (Buffer.byteLength(text) <= max) return text; // a token holds at least one byte
  const enc = o200k();
  let cut = utf8Prefix(text, (max + 1) * MAX_TOKEN_BYTES);
  for (let round = 0; ; round++) {
    const bytes = bytesOfFirst(enc, cut, max);
    if (bytes === null) break;
    const next = utf8Prefix(cut, bytes);
    // Each round shortens the cut; should a few rounds not settle it, a character at a time.
    cut = next.length < cut.length && round < 8 ? next : Array.from(cut).slice(0, -1).join('');
    if (cut.length === 0) return '';
  }
  if (cut.length === text.length) return text;
  const nl = cut.lastIndexOf('\n');
  return nl > cut.length / 2 ? cut.slice(0, nl) : cut;
}
