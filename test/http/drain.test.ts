import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { halfSentRequest } from '../support/raw-http.js';
import { startTestServer, type TestServer } from '../support/server.js';

/**
 * Issue 18: a request that reaches a node once its shutdown has begun (its headers were still
 * on their way in) gets the service's own 503 `unavailable` with Retry-After, in the shape every
 * other error has, so a client or proxy tries another node.
 */
describe('a draining node (sqlite)', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer('sqlite');
  });
  afterAll(async () => s?.stop());

  it('answers a request whose headers end after SIGTERM with 503 unavailable and Retry-After', async () => {
    const req = await halfSentRequest(s.url, 'GET /api/v1/me HTTP/1.1\r\n');
    await new Promise((r) => setTimeout(r, 100));
    const closing = s.close({ graceMs: 5_000 });
    await new Promise((r) => setTimeout(r, 100));
    req.finish();
    await req.ended;
    await closing;
    const raw = req.text();
    expect(raw).toMatch(/^HTTP\/1\.1 503 /);
    expect(raw).toMatch(/\r\nretry-after: [1-9][0-9]*\r\n/i);
    const body = JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('unavailable');
    expect(body.error.message).toContain('shutting down');
  });
});
