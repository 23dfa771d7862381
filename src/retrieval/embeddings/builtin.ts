import { createHash } from 'node:crypto';
import { stemmer } from 'stemmer';
import { normalize, type EmbeddingProvider } from './provider.js';
import { buildLexicon } from './lexicon.js';

/** Vector length: a multiple of 8 (the SIMD scan's step); see docs/decisions.md for the measured choice. */
export const BUILTIN_DIMENSIONS = 512;
export const BUILTIN_MODEL = 'hashed-ngrams-v2';

/** Words that carry no meaning for retrieval (function words of English). */
const STOP = new Set(
  `a an and are as at be been but by can could did do does for from had has have how i if in into is it its
  me my no not of on or our so such than that the their them then there these they this those to too us
  was we were what when where which while who whom why will with would you your yours about above after
  again against all am any because before being below between both down during each few further here
  itself just more most nor off once only other own same should some very s t don now also may might
  must shall via per etc e g ie eg`.split(/\s+/),
);

const WEIGHT_WORD = 1.0;
const WEIGHT_CONCEPT = 0.8;
/** The character trigrams of one word share this much weight (as a vector length); measured on bench/eval: typos need them heavy. */
const WEIGHT_GRAMS = 2.2;

/**
 * The default provider: a deterministic feature-hashing embedding that needs no network and
 * no trained weights. Each word (stop words dropped) contributes its Porter stem, the concepts
 * the built-in thesaurus gives it (paraphrase: "uninstall" meets "remove") and its character
 * trigrams (typos: "confgure" still shares most trigrams with "configure"). Features are hashed
 * with a sign into a fixed number of dimensions, weighted sublinearly by frequency, and the
 * vector is L2-normalised.
 */
export class BuiltinEmbeddings implements EmbeddingProvider {
  readonly provider = 'builtin' as const;
  readonly model = BUILTIN_MODEL;
  readonly dimensions: number;
  private readonly lexicon = buildLexicon(stemmer);
  private readonly w: { word: number; concept: number; grams: number };

  constructor(opts: { dimensions?: number; word?: number; concept?: number; grams?: number } = {}) {
    this.dimensions = opts.dimensions ?? BUILTIN_DIMENSIONS;
    this.w = { word: opts.word ?? WEIGHT_WORD, concept: opts.concept ?? WEIGHT_CONCEPT, grams: opts.grams ?? WEIGHT_GRAMS };
  }
  private readonly slots = new Map<string, number>();

  embed(texts: string[]): Promise<Float32Array[]> {
    return Promise.resolve(texts.map((t) => this.embedOne(t)));
  }

  embedOne(text: string): Float32Array {
    // feature -> [weight of one occurrence, occurrences]
    const counts = new Map<string, [number, number]>();
    const add = (f: string, w: number) => {
      const c = counts.get(f);
      if (c) c[1]++;
      else counts.set(f, [w, 1]);
    };
    const words =
      text
        .normalize('NFKD')
        .replace(/\p{M}/gu, '')
        .toLowerCase()
        .match(/[\p{L}\p{N}]+/gu) ?? [];
    for (const word of words) {
      if (word.length > 40 || STOP.has(word)) continue;
      const stem = stemmer(word);
      add(`w:${stem}`, this.w.word);
      for (const c of this.lexicon.get(stem) ?? []) add(`c:${c}`, this.w.concept);
      if (/^\p{N}+$/u.test(word) || word.length < 3) continue;
      const padded = `^${word}$`;
      const grams = padded.length - 2;
      const w = this.w.grams / Math.sqrt(grams);
      for (let i = 0; i < grams; i++) add(`g:${padded.slice(i, i + 3)}`, w);
    }
    const v = new Float32Array(this.dimensions);
    for (const [f, [weight, n]] of counts) {
      // Sublinear: a word said ten times is not ten times the topic.
      const value = weight * (1 + Math.log(n));
      const slot = this.slot(f);
      v[slot >>> 1]! += slot & 1 ? -value : value;
    }
    return normalize(v);
  }

  /** Feature → (dimension << 1 | sign), from a stable hash (the same on every machine and release). */
  private slot(feature: string): number {
    let s = this.slots.get(feature);
    if (s === undefined) {
      const h = createHash('sha1').update(feature).digest();
      s = ((h.readUInt32LE(0) % this.dimensions) << 1) | (h[4]! & 1);
      if (this.slots.size > 500_000) this.slots.clear();
      this.slots.set(feature, s);
    }
    return s;
  }
}
