/**
 * EMBEDDINGS=openai: a client for the OpenAI-compatible `POST {EMBEDDINGS_URL}/embeddings` protocol
 * (OpenAI, Ollama, vLLM, TEI, LiteLLM…). Batches, retries with exponential backoff and jitter,
 * a timeout per request, and strict checks of every answer.
 *
 * Every failure is an EmbeddingUnavailableError (an EmbeddingRequestError, with `retryable`), so the
 * job worker keeps the work in its backlog: a provider outage — or a wrong key — never fails a write.
 * An external abort is the one exception: it rejects with the signal's reason.
 */
import type { EmbeddingsConfig } from '../../config.js';
import { EmbeddingUnavailableError, normalize, type EmbeddingProvider } from './provider.js';
import { sliceWhole } from '../text-cut.js';

export interface OpenAIEmbeddingsOptions {
  /** First backoff delay; doubles per retry (with jitter) up to maxDelayMs. Default 500. */
  baseDelayMs?: number;
  /** Largest backoff delay. Default 20 000. */
  maxDelayMs?: number;
  /**
   * Longest `Retry-After` waited for inside one `embed` call. A longer one ends the call at once
   * with a retryable error carrying `retryAfterMs`, so the worker can schedule itself. Default 60 000.
   */
  maxRetryAfterMs?: number;
  /** Texts longer than this (UTF-16 code units) are cut to it before sending. Default 8 000. */
  maxTextChars?: number;
  /** A batch closes early once its texts total this many characters. Default 200 000. */
  maxBatchChars?: number;
  /** For tests: the sleep used between attempts (must reject when the signal aborts). */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** For tests: the clock used to read a `Retry-After` HTTP date. */
  now?: () => number;
  /** For tests: the jitter source, [0, 1). */
  random?: () => number;
  /** For tests: the fetch implementation. Defaults to the global fetch. */
  fetch?: typeof fetch;
}

/**
 * Why an `embed` call failed. An EmbeddingUnavailableError, so the worker leaves the work in the backlog.
 * - `retryable: true`: transient (network, timeout, 408/409/429/5xx) and still failing after the retries;
 *   trying again later should work.
 * - `retryable: false`: needs an operator or a different input (400, 401/403 key, 404 URL or model, a
 *   redirect, a malformed answer, a vector of the wrong size). Retrying the same request won't help.
 * The message names the endpoint, the HTTP status and the server's own message; never the API key.
 */
export class EmbeddingRequestError extends EmbeddingUnavailableError {
  readonly retryable: boolean;
  /** The HTTP status of the last answer, when there was one. */
  readonly status: number | undefined;
  /** The server's error code or type (OpenAI: `error.code` ?? `error.type`), when given. */
  readonly code: string | undefined;
  /** The server asked to wait this long (Retry-After) before the next try. */
  readonly retryAfterMs: number | undefined;
  /** HTTP attempts made for the failing batch. */
  readonly attempts: number;

  constructor(message: string, init: { retryable: boolean; status?: number; code?: string; retryAfterMs?: number; attempts: number; cause?: unknown }) {
    super(message, init.cause);
    this.name = 'EmbeddingRequestError';
    this.retryable = init.retryable;
    this.status = init.status;
    this.code = init.code;
    this.retryAfterMs = init.retryAfterMs;
    this.attempts = init.attempts;
  }
}

/** One attempt's failure, before the retry loop decides. */
interface AttemptFailure {
  retryable: boolean;
  message: string;
  status?: number;
  code?: string;
  retryAfterMs?: number;
  cause?: unknown;
}

const RETRY_STATUSES = new Set([408, 409, 425, 429]);

function defaultSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Cuts a string to at most `max` code units without splitting a surrogate pair. */
const cut = (s: string, max: number): string => sliceWhole(s, 0, max);

export class OpenAIEmbeddings implements EmbeddingProvider {
  readonly provider = 'openai' as const;
  readonly model: string;
  private readonly endpoint: string;
  /** The endpoint as shown in messages: no userinfo, no query. */
  private readonly shownEndpoint: string;
  private readonly apiKey: string | undefined;
  private readonly configuredDimensions: number | undefined;
  private learnedDimensions = 0;
  private readonly batch: number;
  private readonly timeoutMs: number;
  private readonly maxRetries: number;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly maxRetryAfterMs: number;
  private readonly maxTextChars: number;
  private readonly maxBatchChars: number;
  private readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  private readonly now: () => number;
  private readonly random: () => number;
  private readonly fetchImpl: typeof fetch;

  constructor(config: EmbeddingsConfig, options: OpenAIEmbeddingsOptions = {}) {
    if (!config.url) throw new Error('EMBEDDINGS_URL is required for EMBEDDINGS=openai');
    const u = new URL(`${config.url.replace(/\/+$/, '')}/embeddings`);
    this.endpoint = u.href;
    u.username = '';
    u.password = '';
    u.search = '';
    this.shownEndpoint = u.href;
    this.model = config.model;
    this.apiKey = config.apiKey || undefined;
    this.configuredDimensions = config.dimensions;
    this.batch = Math.max(1, config.batch);
    this.timeoutMs = config.timeoutMs;
    this.maxRetries = Math.max(0, config.maxRetries);
    this.baseDelayMs = options.baseDelayMs ?? 500;
    this.maxDelayMs = options.maxDelayMs ?? 20_000;
    this.maxRetryAfterMs = options.maxRetryAfterMs ?? 60_000;
    this.maxTextChars = options.maxTextChars ?? 8_000;
    this.maxBatchChars = options.maxBatchChars ?? 200_000;
    this.sleep = options.sleep ?? defaultSleep;
    this.now = options.now ?? Date.now;
    this.random = options.random ?? Math.random;
    this.fetchImpl = options.fetch ?? globalThis.fetch;
  }

  /** The configured size, else the size learned from the first answer (0 before it). */
  get dimensions(): number {
    return this.configuredDimensions ?? this.learnedDimensions;
  }

  async embed(texts: string[], signal?: AbortSignal): Promise<Float32Array[]> {
    signal?.throwIfAborted();
    const out: Float32Array[] = [];
    for (const batch of this.batches(texts)) {
      const vectors = await this.embedBatch(batch, signal);
      for (const v of vectors) out.push(v);
    }
    return out;
  }

  /** Prepares the inputs ('' → ' ', since the protocol rejects empty input; long texts cut) and groups them. */
  private batches(texts: string[]): string[][] {
    const batches: string[][] = [];
    let current: string[] = [];
    let chars = 0;
    for (const raw of texts) {
      const text = raw === '' ? ' ' : cut(raw, this.maxTextChars);
      if (current.length > 0 && (current.length >= this.batch || chars + text.length > this.maxBatchChars)) {
        batches.push(current);
        current = [];
        chars = 0;
      }
      current.push(text);
      chars += text.length;
    }
    if (current.length > 0) batches.push(current);
    return batches;
  }

  private async embedBatch(input: string[], signal: AbortSignal | undefined): Promise<Float32Array[]> {
    const attempts = this.maxRetries + 1;
    let last: AttemptFailure | undefined;
    for (let attempt = 1; attempt <= attempts; attempt++) {
      const result = await this.attempt(input, signal);
      if (Array.isArray(result)) return result;
      last = result;
      const fail = (message: string) =>
        new EmbeddingRequestError(this.redact(message), {
          retryable: result.retryable,
          status: result.status,
          code: result.code,
          retryAfterMs: result.retryAfterMs,
          attempts: attempt,
          cause: result.cause,
        });
      if (!result.retryable) throw fail(result.message);
      if (attempt === attempts) break;
      if (result.retryAfterMs !== undefined && result.retryAfterMs > this.maxRetryAfterMs) {
        throw fail(`${result.message}; the server asks to wait ${Math.ceil(result.retryAfterMs / 1000)} s before retrying`);
      }
      const backoff = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** (attempt - 1));
      // "Equal jitter": half fixed, half random, so retries from several nodes spread out.
      const delay = result.retryAfterMs ?? backoff / 2 + (backoff / 2) * this.random();
      await this.sleep(delay, signal);
    }
    throw new EmbeddingRequestError(this.redact(`${last!.message} (gave up after ${attempts} attempts)`), {
      retryable: true,
      status: last!.status,
      code: last!.code,
      retryAfterMs: last!.retryAfterMs,
      attempts,
      cause: last!.cause,
    });
  }

  /** One HTTP request. Resolves to the vectors or to a failure; rejects only on an external abort. */
  private async attempt(input: string[], signal: AbortSignal | undefined): Promise<Float32Array[] | AttemptFailure> {
    const controller = new AbortController();
    const onAbort = () => controller.abort(signal!.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort(new Error('timeout'));
    }, this.timeoutMs);
    const where = `embeddings: POST ${this.shownEndpoint}`;
    try {
      const body: Record<string, unknown> = { model: this.model, input, encoding_format: 'float' };
      if (this.configuredDimensions !== undefined) body.dimensions = this.configuredDimensions;
      const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
      if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
      let status: number;
      let text: string;
      let retryAfterMs: number | undefined;
      let location: string | null = null;
      try {
        // redirect: 'manual' — never carry the key to another URL; a redirect is a configuration error.
        const res = await this.fetchImpl(this.endpoint, {
          method: 'POST',
          headers,
          body: JSON.stringify(body),
          redirect: 'manual',
          signal: controller.signal,
        });
        status = res.status;
        retryAfterMs = this.retryAfter(res.headers);
        location = res.headers.get('location');
        text = await res.text();
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        if (timedOut) return { retryable: true, message: `${where} timed out after ${this.timeoutMs} ms`, cause: err };
        return { retryable: true, message: `${where} failed: ${describeNetworkError(err)}`, cause: err };
      }

      if (status >= 300 && status < 400) {
        return {
          retryable: false,
          status,
          message: `${where} answered ${status} redirecting to ${location ?? '(no location)'}; set EMBEDDINGS_URL to the final URL`,
        };
      }
      if (status < 200 || status >= 300) {
        const { message, code } = serverError(text);
        const retryable = status >= 500 || RETRY_STATUSES.has(status);
        const hint = status === 401 || status === 403 ? ' — check EMBEDDINGS_API_KEY' : status === 404 ? ' — check EMBEDDINGS_URL and EMBEDDINGS_MODEL' : '';
        return {
          retryable,
          status,
          code,
          retryAfterMs,
          message: `${where} answered ${status}${code ? ` (${code})` : ''}${message ? `: ${message}` : ''}${hint}`,
        };
      }
      try {
        return this.parse(text, input.length);
      } catch (err) {
        return { retryable: false, status, message: `${where}: ${(err as Error).message}`, cause: err };
      }
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Reads and checks an answer: one vector per input, each index once, finite numbers, one size. */
  private parse(text: string, count: number): Float32Array[] {
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new Error(`malformed answer: not JSON (${JSON.stringify(text.slice(0, 80))})`);
    }
    const data = (json as { data?: unknown } | null)?.data;
    if (!Array.isArray(data)) throw new Error('malformed answer: no `data` array');
    if (data.length !== count) throw new Error(`malformed answer: ${data.length} embeddings for ${count} inputs`);
    const out: (Float32Array | undefined)[] = new Array(count);
    // A server that numbers none of its items is read in order; one that numbers some must number all.
    const positional = data.every((d) => (d as { index?: unknown } | null)?.index === undefined);
    let size = this.dimensions;
    for (let i = 0; i < data.length; i++) {
      const item = data[i] as { index?: unknown; embedding?: unknown } | null;
      if (typeof item !== 'object' || item === null) throw new Error(`malformed answer: data[${i}] is not an object`);
      const index = positional ? i : item.index;
      if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= count) {
        throw new Error(`malformed answer: data[${i}].index is ${JSON.stringify(index)}, expected 0..${count - 1}`);
      }
      if (out[index]) throw new Error(`malformed answer: index ${index} appears twice`);
      const v = toVector(item.embedding);
      if (!v) throw new Error(`malformed answer: data[${i}].embedding is not an array of finite numbers`);
      if (v.length === 0) throw new Error(`malformed answer: data[${i}].embedding is empty`);
      if (size === 0) size = v.length;
      if (v.length !== size) {
        const expected = this.configuredDimensions !== undefined ? 'EMBEDDINGS_DIMENSIONS is' : 'earlier vectors had';
        throw new Error(`vector of ${v.length} dimensions, but ${expected} ${size}`);
      }
      out[index] = normalize(v);
    }
    if (this.configuredDimensions === undefined && this.learnedDimensions === 0) this.learnedDimensions = size;
    return out as Float32Array[];
  }

  /** `retry-after-ms` (Azure/OpenAI) or `Retry-After` in seconds or as an HTTP date; undefined if absent or unreadable. */
  private retryAfter(headers: Headers): number | undefined {
    const ms = headers.get('retry-after-ms');
    if (ms !== null && /^\s*\d+(\.\d+)?\s*$/.test(ms)) return Math.max(0, Number(ms));
    const ra = headers.get('retry-after');
    if (ra === null) return undefined;
    if (/^\s*\d+(\.\d+)?\s*$/.test(ra)) return Math.max(0, Number(ra) * 1000);
    const at = Date.parse(ra);
    return Number.isNaN(at) ? undefined : Math.max(0, at - this.now());
  }

  /** Removes the key from a message, in case a server echoes it back. */
  private redact(message: string): string {
    return this.apiKey ? message.split(this.apiKey).join('[redacted]') : message;
  }
}

function toVector(e: unknown): Float32Array | undefined {
  if (Array.isArray(e)) {
    const v = new Float32Array(e.length);
    for (let i = 0; i < e.length; i++) {
      const x = e[i];
      if (typeof x !== 'number' || !Number.isFinite(x)) return undefined;
      v[i] = x;
    }
    return v;
  }
  // encoding_format=base64: little-endian float32s. We ask for float; some servers answer base64 anyway.
  if (typeof e === 'string' && /^[A-Za-z0-9+/]*={0,2}$/.test(e)) {
    const bytes = Buffer.from(e, 'base64');
    if (bytes.length % 4 !== 0) return undefined;
    const v = new Float32Array(bytes.length / 4);
    for (let i = 0; i < v.length; i++) {
      const x = bytes.readFloatLE(i * 4);
      if (!Number.isFinite(x)) return undefined;
      v[i] = x;
    }
    return v;
  }
  return undefined;
}

/** The server's message and code from an error body: OpenAI `{error:{message,type,code}}`, `{error:"..."}`, `{message}` or text. */
function serverError(text: string): { message: string; code: string | undefined } {
  const clip = (s: string) => {
    const one = s.replace(/\s+/g, ' ').trim();
    return one.length > 300 ? `${one.slice(0, 300)}…` : one;
  };
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { message: clip(text), code: undefined };
  }
  if (typeof json === 'object' && json !== null) {
    const o = json as { error?: unknown; message?: unknown; detail?: unknown; error_type?: unknown };
    if (typeof o.error === 'object' && o.error !== null) {
      const e = o.error as { message?: unknown; type?: unknown; code?: unknown };
      const code = typeof e.code === 'string' ? e.code : typeof e.type === 'string' ? e.type : undefined;
      return { message: clip(typeof e.message === 'string' ? e.message : JSON.stringify(e)), code };
    }
    const code = typeof o.error_type === 'string' ? o.error_type : undefined;
    for (const m of [o.error, o.message, o.detail]) if (typeof m === 'string') return { message: clip(m), code };
  }
  return { message: clip(text), code: undefined };
}

/** fetch's TypeError says only "fetch failed"; the useful part (ECONNREFUSED, ECONNRESET…) is in its cause. */
function describeNetworkError(err: unknown): string {
  const parts: string[] = [];
  let e: unknown = err;
  for (let depth = 0; e && depth < 4; depth++) {
    const x = e as { message?: unknown; code?: unknown; cause?: unknown };
    const s = [typeof x.code === 'string' ? x.code : '', typeof x.message === 'string' ? x.message : ''].filter(Boolean).join(' ');
    if (s && !parts.includes(s)) parts.push(s);
    e = x.cause;
  }
  return parts.join(': ') || String(err);
}
