import crypto from 'node:crypto';
import { promisify } from 'node:util';

const scrypt = promisify(crypto.scrypt) as (
  password: string,
  salt: Buffer,
  keylen: number,
  options: crypto.ScryptOptions,
) => Promise<Buffer>;

/** A new random secret with a recognisable prefix (`ak_`, `gt_`, …), 256 bits of entropy. */
export function newSecret(prefix: string): string {
  return `${prefix}${crypto.randomBytes(32).toString('base64url')}`;
}

/** Secrets are stored as SHA-256 hex: high-entropy tokens need no slow hash. */
export function hashSecret(secret: string): string {
  return crypto.createHash('sha256').update(secret).digest('hex');
}

/** Shown in listings instead of the secret: the prefix and the last four characters. */
export function secretHint(secret: string): string {
  const prefix = secret.slice(0, secret.indexOf('_') + 1);
  return `${prefix}…${secret.slice(-4)}`;
}

const SCRYPT = { N: 16384, r: 8, p: 1, keylen: 32 } as const;

/** scrypt with a per-password salt; the parameters travel with the hash so they can change later. */
export async function hashPassword(password: string): Promise<string> {
  const salt = crypto.randomBytes(16);
  const key = await scrypt(password.normalize('NFKC'), salt, SCRYPT.keylen, {
    N: SCRYPT.N,
    r: SCRYPT.r,
    p: SCRYPT.p,
  });
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64')}$${key.toString('base64')}`;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const parts = stored.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [, n, r, p, saltB64, keyB64] = parts as [string, string, string, string, string, string];
  const expected = Buffer.from(keyB64, 'base64');
  const key = await scrypt(password.normalize('NFKC'), Buffer.from(saltB64, 'base64'), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
  });
  return crypto.timingSafeEqual(key, expected);
}

/** Constant-time string comparison for tokens (CSRF). */
export function safeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a);
  const bb = Buffer.from(b);
  return ab.length === bb.length && crypto.timingSafeEqual(ab, bb);
}
