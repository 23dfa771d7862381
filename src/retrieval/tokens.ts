import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';

/** Budgets are counted with a real tokenizer (o200k, the encoding of current OpenAI models). */
export const TOKENIZER = 'o200k_base';

export function tokenCount(text: string): number {
  return countTokens(text);
}

/**
 * The longest prefix of `text` within `max` tokens, cut back to a line end when one is near.
 * Found by binary search over code points with `countTokens`: decoding a token prefix would cut
 * characters in half (and gpt-tokenizer's shared streaming decoder would carry the half into
 * the next decode anywhere in the process).
 */
export function truncateToTokens(text: string, max: number): string {
  if (max <= 0) return '';
  if (countTokens(text) <= max) return text;
  const cps = Array.from(text);
  let lo = 0;
  let hi = cps.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (countTokens(cps.slice(0, mid).join('')) <= max) lo = mid;
    else hi = mid - 1;
  }
  const cut = cps.slice(0, lo).join('');
  const nl = cut.lastIndexOf('\n');
  return nl > cut.length / 2 ? cut.slice(0, nl) : cut;
}
