import { expect } from 'vitest';
import type { Res } from './server.js';

/** Every error: `{ error: { code, message }, code }`, the code at both places, a non-empty message. */
export function expectError(res: Res, status: number, code: string | readonly string[]): void {
  const what = `${res.status} ${res.text.slice(0, 400)}`;
  expect(res.status, what).toBe(status);
  expect(res.headers.get('content-type') ?? '', what).toMatch(/application\/json/);
  expect(typeof res.body, what).toBe('object');
  const codes = typeof code === 'string' ? [code] : code;
  expect(codes, what).toContain(res.body.code);
  expect(res.body.error?.code, what).toBe(res.body.code);
  expect(typeof res.body.error?.message, what).toBe('string');
  expect(res.body.error.message.trim().length, what).toBeGreaterThan(0);
}

export function expectStatus(res: Res, status: number): void {
  expect(res.status, `${res.status} ${res.text.slice(0, 400)}`).toBe(status);
}
