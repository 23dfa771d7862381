import crypto from 'node:crypto';
import { promisify } from 'node:util';

const scrypt = promisify(crypto.scrypt) as (password: string, salt: Buffer, keylen: number, options: crypto.ScryptOptions) => Promise<Buffer>;

/** A new random secret with a recognisable prefix (`ak_`, `gt_`, …), 256 bits of entropy. */
export function newSecret(prefix: string): string {
  return `${prefix}${crypto.randomBytes(32).toString('base64url')}`;
}

/**
 * Secrets are stored as SHA-256 hex: high-entropy tokens need no slow hash. The one-shot
 * `crypto.hash` (Node ≥ 20.12) is a third of createHash's cost, and runs on every request.
 */
export function hashSecret(secret: string): string {
  return crypto.hash('sha256', secret, 'hex');
}

/** Shown in listings instead of the secret: the prefix and the last four characters. */
export function secretHint(secret: string): string {
  const prefix = secret.slice(0, secret.indexOf('_') + 1);
  return `${prefix}…${secret.slice(-4)}`;
}

/**
 * OWASP's password storage guidance lists equal-strength scrypt settings; of them N=2^14, r=8,
 * p=5 needs the least memory (16 MiB a hash, against 128 MiB for N=2^17, p=1), so concurrent
 * sign-ins cannot exhaust a node; about 105 ms on this project's 2-core machines (measured).
 * Hashes made with other parameters are replaced at the next successful login.
 */
export const SCRYPT = { N: 16384, r: 8, p: 5, keylen: 32 } as const;
/** Room for the largest parameters we accept in a stored hash (N=2^17, r=8: 128 MiB). */
const SCRYPT_MAXMEM = 160 * 1024 * 1024;

/** scrypt with a per-password salt; the parameters travel with the hash so they can change later. */
export async function hashPassword(password: string): Promise<string> {
  const salt = crypto.randomBytes(16);
  const key = await scrypt(password.normalize('NFKC'), salt, SCRYPT.keylen, {
    N: SCRYPT.N,
    r: SCRYPT.r,
    p: SCRYPT.p,
    maxmem: SCRYPT_MAXMEM,
  });
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64')}$${key.toString('base64')}`;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [, n, r, p, saltB64, keyB64] = parts as [string, string, string, string, string, string];
  const expected = Buffer.from(keyB64, 'base64');
  const params = { N: Number(n), r: Number(r), p: Number(p) };
  // Stored parameters are ours, but bound them anyway: a corrupt row must not cost a node its memory.
  if (!(params.N >= 2 && params.N <= 2 ** 17 && params.r >= 1 && params.r <= 16 && params.p >= 1 && params.p <= 16) || expected.length < 16) return false;
  const key = await scrypt(password.normalize('NFKC'), Buffer.from(saltB64, 'base64'), expected.length, { ...params, maxmem: SCRYPT_MAXMEM });
  return crypto.timingSafeEqual(key, expected);
}

/** True when a stored hash was made with other parameters than today's (rehash it at login). */
export function hashNeedsUpgrade(stored: string): boolean {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return true;
  return Number(parts[1]) !== SCRYPT.N || Number(parts[2]) !== SCRYPT.r || Number(parts[3]) !== SCRYPT.p;
}

/** Constant-time string comparison for tokens (CSRF). */
export function safeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a);
  const bb = Buffer.from(b);
  return ab.length === bb.length && crypto.timingSafeEqual(ab, bb);
}
