import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { EmbeddingsConfig } from '../../src/config.js';
import { EmbeddingRequestError, OpenAIEmbeddings, type OpenAIEmbeddingsOptions } from '../../src/retrieval/embeddings/openai.js';
import { EmbeddingUnavailableError, modelKey } from '../../src/retrieval/embeddings/provider.js';

/**
 * A local server speaking the OpenAI `/v1/embeddings` protocol. It records every request, answers
 * deterministic vectors computed from the text, and can be told to misbehave for the next requests.
 */
interface Recorded {
  url: string;
  headers: IncomingMessage['headers'];
  body: { model?: string; input?: string[]; encoding_format?: string; dimensions?: number };
}
type Handler = (req: IncomingMessage, res: ServerResponse, body: Recorded['body']) => void;

const KEY = 'sk-test-SECRET-0123456789';
const DIMS = 8;

/** A deterministic, unnormalised vector for a text. */
function rawVector(text: string, dims = DIMS): number[] {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return Array.from({ length: dims }, (_, i) => (((h >>> (i % 24)) & 0xff) - 127.5) / 10 + i * 0.01);
}
function unit(v: number[]): number[] {
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return v.map((x) => x / n);
}
function expectVector(actual: Float32Array | undefined, text: string, dims = DIMS) {
  expect(actual).toBeInstanceOf(Float32Array);
  const want = unit(rawVector(text, dims));
  expect(actual!.length).toBe(dims);
  for (let i = 0; i < dims; i++) expect(actual![i]).toBeCloseTo(want[i]!, 5);
}

let server: Server;
let base: string;
const requests: Recorded[] = [];
let queue: Handler[] = [];
let shuffle = false;
let answerDims: number | undefined;

function answer(res: ServerResponse, body: Recorded['body']) {
  const input = body.input ?? [];
  const dims = answerDims ?? body.dimensions ?? DIMS;
  let data = input.map((text, index) => ({ object: 'embedding', index, embedding: rawVector(text, dims) }));
  if (shuffle) data = [...data.filter((_, i) => i % 2 === 1).reverse(), ...data.filter((_, i) => i % 2 === 0)];
  json(res, 200, { object: 'list', data, model: body.model, usage: { prompt_tokens: 1, total_tokens: 1 } });
}
function json(res: ServerResponse, status: number, value: unknown, headers: Record<string, string> = {}) {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(value));
}
/** The next request(s) are handled by these, in order; later ones get the normal answer. */
function next(...handlers: Handler[]) {
  queue.push(...handlers);
}
const hang: Handler = () => {
  /* never answers; the socket is closed when the server stops */
};
const reset: Handler = (req) => req.socket.destroy();
const status500: Handler = (_q, res) => json(res, 500, { error: { message: 'The server had an error', type: 'server_error' } });

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body: Recorded['body'] = {};
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Recorded['body'];
      } catch {
        /* recorded as {} */
      }
      requests.push({ url: req.url ?? '', headers: req.headers, body });
      if (req.method !== 'POST' || req.url !== '/v1/embeddings') return json(res, 404, { error: { message: 'Not found' } });
      const h = queue.shift();
      if (h) h(req, res, body);
      else answer(res, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});
beforeEach(() => {
  requests.length = 0;
  queue = [];
  shuffle = false;
  answerDims = undefined;
});

function config(over: Partial<EmbeddingsConfig> = {}): EmbeddingsConfig {
  return {
    provider: 'openai',
    url: base,
    model: 'test-embed-1',
    apiKey: KEY,
    dimensions: undefined,
    batch: 64,
    // Generous: a busy test machine must not turn a prompt answer into a timeout and a retry.
    timeoutMs: 10_000,
    maxRetries: 2,
    ...over,
  };
}
function provider(over: Partial<EmbeddingsConfig> = {}, options: OpenAIEmbeddingsOptions = {}) {
  return new OpenAIEmbeddings(config(over), { baseDelayMs: 1, maxDelayMs: 5, ...options });
}
async function failure(p: Promise<unknown>): Promise<EmbeddingRequestError> {
  const err = await p.then(
    () => {
      throw new Error('expected a failure');
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(EmbeddingUnavailableError);
  expect(err).toBeInstanceOf(EmbeddingRequestError);
  expect((err as Error).message).not.toContain(KEY);
  return err as EmbeddingRequestError;
}

describe('OpenAIEmbeddings: the protocol', () => {
  it('posts model, input and encoding_format with the bearer key, and returns normalised vectors in order', async () => {
    const p = provider();
    expect(p.provider).toBe('openai');
    expect(p.model).toBe('test-embed-1');
    expect(p.dimensions).toBe(0);
    const out = await p.embed(['alpha', 'beta', 'gamma']);
    expect(requests).toHaveLength(1);
    const r = requests[0]!;
    expect(r.url).toBe('/v1/embeddings');
    expect(r.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    expect(r.body).toEqual({ model: 'test-embed-1', input: ['alpha', 'beta', 'gamma'], encoding_format: 'float' });
    expect(out).toHaveLength(3);
    ['alpha', 'beta', 'gamma'].forEach((t, i) => expectVector(out[i], t));
    expect(p.dimensions).toBe(DIMS);
    expect(modelKey(p.provider, p.model)).toBe('openai:test-embed-1');
  });

  it('sends `dimensions` when configured, and no Authorization header without a key', async () => {
    const p = provider({ dimensions: 5, apiKey: undefined });
    expect(p.dimensions).toBe(5);
    const out = await p.embed(['x']);
    expect(requests[0]!.body.dimensions).toBe(5);
    expect(requests[0]!.headers.authorization).toBeUndefined();
    expectVector(out[0], 'x', 5);
  });

  it('accepts a base URL with a trailing slash', async () => {
    await provider({ url: `${base}/` }).embed(['a']);
    expect(requests[0]!.url).toBe('/v1/embeddings');
  });

  it('splits into batches of `batch` texts and keeps the order', async () => {
    const texts = Array.from({ length: 10 }, (_, i) => `text ${i}`);
    const out = await provider({ batch: 3 }).embed(texts);
    expect(requests.map((r) => r.body.input)).toEqual([texts.slice(0, 3), texts.slice(3, 6), texts.slice(6, 9), texts.slice(9)]);
    expect(out).toHaveLength(10);
    texts.forEach((t, i) => expectVector(out[i], t));
  });

  it('also closes a batch at maxBatchChars', async () => {
    const texts = ['a'.repeat(40), 'b'.repeat(40), 'c'.repeat(40), 'd'];
    const out = await provider({ batch: 64 }, { maxBatchChars: 100 }).embed(texts);
    expect(requests.map((r) => r.body.input!.length)).toEqual([2, 2]);
    texts.forEach((t, i) => expectVector(out[i], t));
  });

  it('orders by `index` when the server shuffles its answer', async () => {
    shuffle = true;
    const texts = ['one', 'two', 'three', 'four', 'five'];
    const out = await provider().embed(texts);
    texts.forEach((t, i) => expectVector(out[i], t));
  });

  it('sends a space for an empty text, cuts very long texts, and makes no request for no texts', async () => {
    const p = provider({}, { maxTextChars: 10 });
    expect(await p.embed([])).toEqual([]);
    expect(requests).toHaveLength(0);
    const out = await p.embed(['', 'x'.repeat(50), '123456789\u{1F600}']);
    expect(requests[0]!.body.input).toEqual([' ', 'x'.repeat(10), '123456789']);
    expect(out).toHaveLength(3);
  });

  it('reads base64 embeddings too', async () => {
    next((_q, res, body) => {
      const data = (body.input ?? []).map((t, index) => ({
        index,
        embedding: Buffer.from(new Float32Array(rawVector(t)).buffer).toString('base64'),
      }));
      json(res, 200, { data });
    });
    const out = await provider().embed(['b64']);
    expectVector(out[0], 'b64');
  });
});

describe('OpenAIEmbeddings: failures', () => {
  it('retries a 500 and succeeds', async () => {
    next(status500);
    const out = await provider().embed(['retry me']);
    expect(requests).toHaveLength(2);
    expectVector(out[0], 'retry me');
  });

  it('gives up after maxRetries with a retryable EmbeddingUnavailableError', async () => {
    next(status500, status500, status500, status500);
    const err = await failure(provider({ maxRetries: 2 }).embed(['x']));
    expect(requests).toHaveLength(3);
    expect(err.retryable).toBe(true);
    expect(err.status).toBe(500);
    expect(err.attempts).toBe(3);
    expect(err.message).toContain('500');
    expect(err.message).toContain('The server had an error');
    expect(err.message).toContain('gave up after 3 attempts');
  });

  it('backs off exponentially between retries', async () => {
    next(status500, status500, status500);
    const delays: number[] = [];
    const p = provider({ maxRetries: 3 }, { baseDelayMs: 100, maxDelayMs: 10_000, random: () => 1, sleep: async (ms) => void delays.push(ms) });
    await p.embed(['x']);
    expect(delays).toEqual([100, 200, 400]);
  });

  it('honours Retry-After in seconds on 429', async () => {
    next((_q, res) => json(res, 429, { error: { message: 'Rate limit reached', type: 'requests', code: 'rate_limit_exceeded' } }, { 'retry-after': '2' }));
    const delays: number[] = [];
    const out = await provider({}, { sleep: async (ms) => void delays.push(ms) }).embed(['x']);
    expect(requests).toHaveLength(2);
    expect(delays).toEqual([2000]);
    expectVector(out[0], 'x');
  });

  it('honours Retry-After as an HTTP date on 503', async () => {
    const now = Date.UTC(2026, 0, 1, 12, 0, 0);
    next((_q, res) => json(res, 503, { error: 'overloaded' }, { 'retry-after': new Date(now + 3000).toUTCString() }));
    const delays: number[] = [];
    await provider({}, { now: () => now, sleep: async (ms) => void delays.push(ms) }).embed(['x']);
    expect(delays).toEqual([3000]);
  });

  it('stops at once when Retry-After is beyond the cap, and tells the worker how long to wait', async () => {
    next((_q, res) => json(res, 429, { error: { message: 'slow down' } }, { 'retry-after': '3600' }));
    const err = await failure(provider({}, { maxRetryAfterMs: 1000 }).embed(['x']));
    expect(requests).toHaveLength(1);
    expect(err.retryable).toBe(true);
    expect(err.status).toBe(429);
    expect(err.retryAfterMs).toBe(3_600_000);
    expect(err.message).toContain('slow down');
  });

  it('times out a request that hangs, then retries', async () => {
    next(hang);
    const started = Date.now();
    // The hung attempt is cut at the timeout; the retry must answer within it, even on a busy machine.
    const out = await provider({ timeoutMs: 1000 }).embed(['slow']);
    expect(Date.now() - started).toBeGreaterThanOrEqual(990);
    expect(requests).toHaveLength(2);
    expectVector(out[0], 'slow');
  });

  it('reports a timeout when every attempt hangs', async () => {
    next(hang, hang);
    const err = await failure(provider({ timeoutMs: 100, maxRetries: 1 }).embed(['slow']));
    expect(requests).toHaveLength(2);
    expect(err.retryable).toBe(true);
    expect(err.status).toBeUndefined();
    expect(err.message).toMatch(/timed out after 100 ms/);
  });

  it('retries a reset connection', async () => {
    next(reset);
    const out = await provider().embed(['reset']);
    expect(requests).toHaveLength(2);
    expectVector(out[0], 'reset');
  });

  it('reports a network error when every attempt is reset', async () => {
    next(reset, reset, reset);
    const err = await failure(provider({ maxRetries: 2 }).embed(['reset']));
    expect(requests).toHaveLength(3);
    expect(err.retryable).toBe(true);
    expect(err.message).toMatch(/failed: .*(ECONNRESET|socket|closed|terminated)/i);
  });

  it('reports a refused connection as retryable', async () => {
    const dead = createServer();
    await new Promise<void>((resolve) => dead.listen(0, '127.0.0.1', resolve));
    const port = (dead.address() as AddressInfo).port;
    await new Promise((resolve) => dead.close(resolve));
    const err = await failure(provider({ url: `http://127.0.0.1:${port}/v1`, maxRetries: 1 }).embed(['x']));
    expect(err.retryable).toBe(true);
    expect(err.attempts).toBe(2);
    expect(err.message).toContain('ECONNREFUSED');
  });

  it('does not retry a 401, surfaces the server message and never the key', async () => {
    next((_q, res) =>
      json(res, 401, {
        error: { message: `Incorrect API key provided: ${KEY}.`, type: 'invalid_request_error', code: 'invalid_api_key' },
      }),
    );
    const err = await failure(provider().embed(['x']));
    expect(requests).toHaveLength(1);
    expect(err.retryable).toBe(false);
    expect(err.status).toBe(401);
    expect(err.code).toBe('invalid_api_key');
    expect(err.message).toContain('401');
    expect(err.message).toContain('Incorrect API key provided');
    expect(err.message).toContain('[redacted]');
    expect(err.message).toContain('EMBEDDINGS_API_KEY');
    expect(String(err.stack)).not.toContain(KEY);
  });

  it('does not retry a 400 or a 404', async () => {
    next((_q, res) => json(res, 400, { error: { message: "'$.input' is invalid.", type: 'invalid_request_error' } }));
    const bad = await failure(provider().embed(['x']));
    expect(bad.retryable).toBe(false);
    expect(bad.status).toBe(400);
    expect(bad.message).toContain("'$.input' is invalid.");
    expect(requests).toHaveLength(1);

    const missing = await failure(provider({ url: `${base}/nowhere` }).embed(['x']));
    expect(missing.retryable).toBe(false);
    expect(missing.status).toBe(404);
    expect(missing.message).toContain('EMBEDDINGS_URL');
    expect(requests).toHaveLength(2);
  });

  it('does not follow a redirect (the key stays with the configured URL)', async () => {
    next((_q, res) => {
      res.writeHead(307, { location: 'http://elsewhere.invalid/v1/embeddings' });
      res.end();
    });
    const err = await failure(provider().embed(['x']));
    expect(requests).toHaveLength(1);
    expect(err.retryable).toBe(false);
    expect(err.message).toContain('elsewhere.invalid');
  });

  it('rejects malformed JSON without retrying', async () => {
    next((_q, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"data": [');
    });
    const err = await failure(provider().embed(['x']));
    expect(requests).toHaveLength(1);
    expect(err.retryable).toBe(false);
    expect(err.message).toMatch(/malformed answer: not JSON/);
  });

  it('rejects a wrong count of vectors', async () => {
    next((_q, res) => json(res, 200, { data: [{ index: 0, embedding: rawVector('a') }] }));
    const err = await failure(provider().embed(['a', 'b']));
    expect(err.message).toMatch(/1 embeddings for 2 inputs/);
  });

  it('rejects a duplicate or out-of-range index, and non-numbers', async () => {
    next(
      (_q, res) =>
        json(res, 200, {
          data: [
            { index: 0, embedding: rawVector('a') },
            { index: 0, embedding: rawVector('b') },
          ],
        }),
      (_q, res) => json(res, 200, { data: [{ index: 1, embedding: rawVector('a') }] }),
      (_q, res) => json(res, 200, { data: [{ index: 0, embedding: [1, 'two', 3] }] }),
      (_q, res) => json(res, 200, { data: [{ index: 0, embedding: [] }] }),
      (_q, res) => json(res, 200, { nope: true }),
    );
    const p = provider();
    expect((await failure(p.embed(['a', 'b']))).message).toMatch(/index 0 appears twice/);
    expect((await failure(p.embed(['a']))).message).toMatch(/index is 1, expected 0\.\.0/);
    expect((await failure(p.embed(['a']))).message).toMatch(/not an array of finite numbers/);
    expect((await failure(p.embed(['a']))).message).toMatch(/embedding is empty/);
    expect((await failure(p.embed(['a']))).message).toMatch(/no `data` array/);
    expect(requests).toHaveLength(5);
    expect(p.dimensions).toBe(0);
  });

  it('rejects vectors of the wrong size: configured, learned, or mixed in one answer', async () => {
    answerDims = 4;
    const configured = await failure(provider({ dimensions: 8 }).embed(['x']));
    expect(configured.retryable).toBe(false);
    expect(configured.message).toMatch(/vector of 4 dimensions, but EMBEDDINGS_DIMENSIONS is 8/);

    answerDims = undefined;
    const p = provider();
    await p.embed(['first']);
    expect(p.dimensions).toBe(DIMS);
    answerDims = 6;
    const learned = await failure(p.embed(['later']));
    expect(learned.message).toMatch(/vector of 6 dimensions, but earlier vectors had 8/);
    expect(p.dimensions).toBe(DIMS);

    answerDims = undefined;
    next((_q, res) =>
      json(res, 200, {
        data: [
          { index: 0, embedding: [1, 2, 3] },
          { index: 1, embedding: [1, 2] },
        ],
      }),
    );
    const fresh = provider();
    expect((await failure(fresh.embed(['a', 'b']))).message).toMatch(/vector of 2 dimensions, but earlier vectors had 3/);
    expect(fresh.dimensions).toBe(0);
  });

  it('a later batch failing fails the whole call (the worker retries it all)', async () => {
    next(
      (_q, res, body) => answer(res, body),
      (_q, res) => json(res, 403, { error: { message: 'Forbidden' } }),
    );
    const err = await failure(provider({ batch: 2 }).embed(['a', 'b', 'c']));
    expect(err.status).toBe(403);
    expect(requests).toHaveLength(2);
  });

  it('respects an external abort while waiting for an answer and during backoff', async () => {
    next(hang);
    const ac = new AbortController();
    const pending = provider({ timeoutMs: 5000 }).embed(['x'], ac.signal);
    setTimeout(() => ac.abort(), 50);
    const e1 = await pending.catch((e: unknown) => e);
    expect(e1).not.toBeInstanceOf(EmbeddingUnavailableError);
    expect((e1 as Error).name).toBe('AbortError');
    expect(requests).toHaveLength(1);

    next(status500);
    const ac2 = new AbortController();
    const pending2 = provider({}, { baseDelayMs: 5000, maxDelayMs: 5000 }).embed(['x'], ac2.signal);
    setTimeout(() => ac2.abort(), 50);
    const e2 = await pending2.catch((e: unknown) => e);
    expect((e2 as Error).name).toBe('AbortError');
    expect(requests).toHaveLength(2);

    const ac3 = new AbortController();
    ac3.abort();
    await expect(provider().embed(['x'], ac3.signal)).rejects.toMatchObject({ name: 'AbortError' });
    expect(requests).toHaveLength(2);
  });
});
