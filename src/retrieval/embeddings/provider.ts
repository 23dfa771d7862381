/**
 * One interface for every embedding provider (EMBEDDINGS=builtin|openai). The job worker
 * calls `embed`; search calls it for the query. Vectors are L2-normalised, so cosine is a dot product.
 */
export interface EmbeddingProvider {
  readonly provider: 'builtin' | 'openai';
  readonly model: string;
  /** Length of every vector; for an OpenAI-compatible server without a configured size, 0 until the first answer. */
  readonly dimensions: number;
  /** Texts in, one normalised vector per text, same order. Throws EmbeddingUnavailableError on an outage. */
  embed(texts: string[], signal?: AbortSignal): Promise<Float32Array[]>;
}

/** The provider could not answer (network, timeout, 5xx, 429 after retries): writes go on, the backlog grows. */
export class EmbeddingUnavailableError extends Error {
  constructor(message: string, cause?: unknown) {
    super(message, { cause });
    this.name = 'EmbeddingUnavailableError';
  }
}

/** Scales a vector to unit length in place (a zero vector stays zero). */
export function normalize(v: Float32Array): Float32Array {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i]! * v[i]!;
  if (s === 0) return v;
  const k = 1 / Math.sqrt(s);
  for (let i = 0; i < v.length; i++) v[i]! *= k;
  return v;
}

/**
 * `provider:model` (plus `:dimensions` when the size is asked for explicitly), stored with each
 * vector: a vector of another key is stale and is re-embedded in the background.
 */
export function modelKey(provider: string, model: string, requestedDimensions?: number): string {
  return requestedDimensions === undefined ? `${provider}:${model}` : `${provider}:${model}:${requestedDimensions}`;
}
