import type { Candidate } from './candidates.js';

/**
 * Hybrid ranking: reciprocal rank fusion of the keyword and vector lists, the vector list
 * weighted by how sure it is, then light boosts. Plain RRF with a weak vector list loses to
 * keyword alone (DESIGN.md §5), so the vector list earns its weight: nothing below
 * GATE_LOW cosine, full weight from GATE_HIGH, and full weight when keyword found nothing
 * (typos, words the pages do not use). Constants measured on bench/eval (docs/decisions.md).
 */
export const RRF_K = 5;
/** Sections less similar than this are no answer at all (random pairs of builtin vectors sit near 0 ± 0.05). */
export const VECTOR_FLOOR = 0.12;
export const GATE_LOW = 0.1;
export const GATE_HIGH = 0.3;
export const VECTOR_MAX_WEIGHT = 0.75;
/**
 * The cap instead when keyword search ranked sections holding any of several words (every query
 * of more than one word since issue 20; before it, those no section held whole). Both lists are
 * loose then. Before issue 20 the best cap for such queries on bench/eval was 0.5 (paraphrase
 * MRR@10 0.572 at 0.75, 0.597 at 0.5); with every query of several words ranked so (and
 * byCoverage), 0.35: hybrid 0.696 on the man-page set and 0.823 on the Debian set; 0.4 gave
 * 0.688 and 0.826 (docs/decisions.md).
 */
export const ANY_WORD_MAX_WEIGHT = 0.35;
/** The vector list's weight when keyword search found nothing, or likely missed (see keywordList's `weak`). */
export const PARTIAL_WEIGHT = 1;
export const TITLE_BOOST = 1.2;
/** With a folder half-life, a page's score is multiplied by FRESH_FLOOR + (1 − FRESH_FLOOR) · 0.5^(age / half-life). */
export const FRESH_FLOOR = 0.7;

/** The vector list's weight from its best cosine. */
export function vectorWeight(topCosine: number, keyword: 'all-words' | 'any-word' | 'weak'): number {
  if (keyword === 'weak') return PARTIAL_WEIGHT;
  if (topCosine <= GATE_LOW) return 0;
  const max = keyword === 'any-word' ? ANY_WORD_MAX_WEIGHT : VECTOR_MAX_WEIGHT;
  return max * Math.min(1, (topCosine - GATE_LOW) / (GATE_HIGH - GATE_LOW));
}

export interface Fused<T> {
  item: T;
  score: number;
  keywordRank: number | null;
  vectorRank: number | null;
}

/** Fuses two ranked lists of items identified by `key` (best first each). */
export function fuse<T>(keyword: T[], vector: T[], key: (t: T) => string, vectorTop: number, keywordWeak = false, anyWord = false): Fused<T>[] {
  const w = vectorWeight(vectorTop, keyword.length === 0 || keywordWeak ? 'weak' : anyWord ? 'any-word' : 'all-words');
  const out = new Map<string, Fused<T>>();
  keyword.forEach((item, i) => out.set(key(item), { item, score: 1 / (RRF_K + i + 1), keywordRank: i + 1, vectorRank: null }));
  if (w > 0) {
    vector.forEach((item, i) => {
      const k = key(item);
      const f = out.get(k);
      const add = w / (RRF_K + i + 1);
      if (f) {
        f.score += add;
        f.vectorRank = i + 1;
      } else out.set(k, { item, score: add, keywordRank: null, vectorRank: i + 1 });
    });
  }
  return [...out.values()];
}

/** Every query term starts a word of the title (stems: `deploying` matches `Deploy`). */
export function titleHit(title: string, terms: string[]): boolean {
  if (terms.length === 0) return false;
  const words = title.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [];
  return terms.every((t) => {
    const stem = t.length > 5 ? t.slice(0, t.length - 2) : t;
    return words.some((w) => w.startsWith(stem) || t.startsWith(w.length >= 4 ? w : `${w}\u0000`));
  });
}

/** The freshness factor for a page last written at `updatedAt` in a folder with `halfLifeDays` (null: no decay). */
export function freshness(updatedAt: string, halfLifeDays: number | null, now = Date.now()): number {
  if (!halfLifeDays || halfLifeDays <= 0) return 1;
  const ageDays = Math.max(0, (now - Date.parse(updatedAt)) / 86_400_000);
  return FRESH_FLOOR + (1 - FRESH_FLOOR) * 0.5 ** (ageDays / halfLifeDays);
}

/** Applies the title and freshness boosts, then sorts best first. */
export function boostAndSort<T extends Candidate>(
  fused: Fused<T>[],
  terms: string[],
  halfLife: (folderPath: string) => number | null,
  now = Date.now(),
): Fused<T>[] {
  for (const f of fused) {
    if (titleHit(f.item.title, terms)) f.score *= TITLE_BOOST;
    f.score *= freshness(f.item.updated_at, halfLife(f.item.cluster_path), now);
  }
  return fused.sort((a, b) => b.score - a.score || (a.keywordRank ?? 1e9) - (b.keywordRank ?? 1e9));
}
