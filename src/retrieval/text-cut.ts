/**
 * `s.slice(start, end)` that never splits a surrogate pair: a cut inside a character (an emoji,
 * a rare CJK ideograph) moves to leave the whole character out. Half a pair is not valid UTF-8
 * in an answer (a strict client refuses the whole JSON).
 */
export function sliceWhole(s: string, start: number, end = s.length): string {
  let a = Math.max(0, start);
  let b = Math.min(s.length, end);
  if (a > 0 && a < s.length && isLow(s.charCodeAt(a)) && isHigh(s.charCodeAt(a - 1))) a++;
  if (b > 0 && b < s.length && isHigh(s.charCodeAt(b - 1)) && isLow(s.charCodeAt(b))) b--;
  return a >= b ? '' : s.slice(a, b);
}

const isHigh = (c: number) => c >= 0xd800 && c <= 0xdbff;
const isLow = (c: number) => c >= 0xdc00 && c <= 0xdfff;
