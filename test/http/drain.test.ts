import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
    const u = new URL(s.url);
    const socket = net.connect(Number(u.port), u.hostname);
    await new Promise<void>((r) => socket.once('connect', () => r()));
    let raw = '';
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (raw += d));
    const ended = new Promise<void>((r) => socket.once('close', () => r()));
    socket.write(`GET /api/v1/me HTTP/1.1\r\nHost: ${u.host}\r\n`);
    await new Promise((r) => setTimeout(r, 100));
    const closing = s.close({ graceMs: 5_000 });
    await new Promise((r) => setTimeout(r, 100));
    socket.write('\r\n');
    await ended;
    await closing;
    expect(raw).toMatch(/^HTTP\/1\.1 503 /);
    expect(raw).toMatch(/\r\nretry-after: [1-9][0-9]*\r\n/i);
    const body = JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('unavailable');
    expect(body.error.message).toContain('shutting down');
  });
});
