import { countTokens, decode, encode } from 'gpt-tokenizer/encoding/o200k_base';

/** Budgets are counted with a real tokenizer (o200k, the encoding of current OpenAI models). */
export const TOKENIZER = 'o200k_base';

export function tokenCount(text: string): number {
  return countTokens(text);
}

/** The longest prefix of `text` within `max` tokens, cut back to a line end when one is near. */
export function truncateToTokens(text: string, max: number): string {
  if (max <= 0) return '';
  const ids = encode(text);
  if (ids.length <= max) return text;
  let cut = decode(ids.slice(0, max));
  // A cut inside a multi-byte character decodes to U+FFFD: drop it.
  cut = cut.replace(/\uFFFD+$/u, '');
  const nl = cut.lastIndexOf('\n');
  return nl > cut.length / 2 ? cut.slice(0, nl) : cut;
}
