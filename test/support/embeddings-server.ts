import http from 'node:http';
import type { AddressInfo } from 'node:net';

export type EmbeddingsMode = 'ok' | 'fail' | 'hang';

/** Deterministic 16-dimension vectors: one signed bucket per word (FNV-1a), so texts sharing words are near. */
export function wordVector(text: string, dims = 16): number[] {
  const v = new Array<number>(dims).fill(0);
  v[0] = 0.01; // never a zero vector
  for (const w of text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []) {
    let h = 0x811c9dc5;
    for (let i = 0; i < w.length; i++) h = Math.imul(h ^ w.charCodeAt(i), 0x01000193) >>> 0;
    v[h % dims]! += (h >>> 8) & 1 ? 1 : -1;
  }
  const n = Math.hypot(...v);
  return v.map((x) => x / n);
}

/**
 * A local server speaking the OpenAI embeddings protocol (POST /v1/embeddings) whose behaviour
 * a test switches through `state.mode`: `ok` answers `wordVector`s, `fail` answers 500 with an
 * OpenAI error body, `hang` never answers. It records what it was sent, and can listen on a
 * port chosen in advance (a provider that comes back where it was).
 */
export async function embeddingsServer(mode: EmbeddingsMode = 'ok', port = 0) {
  const state = {
    mode,
    requests: 0,
    inputs: [] as string[],
    models: [] as string[],
    auth: new Set<string>(),
    /** In `ok` mode, a request with an input this accepts answers 500 (one text the provider chokes on). */
    failIf: undefined as ((input: string) => boolean) | undefined,
  };
  const hanging = new Set<http.ServerResponse>();
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (d) => (raw += d));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/embeddings') {
        res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'not found' } }));
        return;
      }
      state.requests++;
      state.auth.add(req.headers.authorization ?? '');
      if (state.mode === 'hang') {
        hanging.add(res);
        res.on('close', () => hanging.delete(res));
        return;
      }
      const body = JSON.parse(raw) as { model: string; input: string[] };
      if (state.mode === 'fail' || (state.failIf && body.input.some(state.failIf))) {
        res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'the model is overloaded', type: 'server_error' } }));
        return;
      }
      state.models.push(body.model);
      state.inputs.push(...body.input);
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          object: 'list',
          model: body.model,
          data: body.input.map((t, index) => ({ object: 'embedding', index, embedding: wordVector(t) })),
          usage: { prompt_tokens: 1, total_tokens: 1 },
        }),
      );
    });
  });
  await new Promise<void>((r) => server.listen(port, '127.0.0.1', r));
  const bound = (server.address() as AddressInfo).port;
  return {
    state,
    port: bound,
    url: `http://127.0.0.1:${bound}/v1`,
    inputs: state.inputs,
    models: state.models,
    close: async () => {
      for (const r of hanging) r.destroy();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** Waits until `/readyz` reports an empty embedding backlog (vectors trail writes by a moment), as an operator would. */
export async function waitForVectors(c: { get(path: string): Promise<{ body: any }> }, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const r = await c.get('/readyz');
    if (r.body.embeddings?.backlog === 0) return;
    await new Promise((res) => setTimeout(res, 25));
  }
  throw new Error('embedding backlog did not drain');
}
