import { Secret, TOTP } from 'otpauth';

/** RFC 6238 with the parameters every authenticator app understands. */
const PERIOD = 30;

function totpFor(secretBase32: string, label: string): TOTP {
  return new TOTP({ issuer: 'Context Vault', label, algorithm: 'SHA1', digits: 6, period: PERIOD, secret: Secret.fromBase32(secretBase32) });
}

export function newTotpSecret(): string {
  return new Secret({ size: 20 }).base32;
}

export function totpUri(secretBase32: string, label: string): string {
  return totpFor(secretBase32, label).toString();
}

/**
 * The time step a code belongs to (±1 step of clock drift), or null when it is wrong.
 * Callers refuse a step at or below the last accepted one, so a code is never replayed.
 */
export function matchTotp(secretBase32: string, code: string, now = Date.now()): number | null {
  if (!/^\d{6}$/.test(code)) return null;
  const delta = totpFor(secretBase32, '').validate({ token: code, timestamp: now, window: 1 });
  if (delta === null) return null;
  return Math.floor(now / 1000 / PERIOD) + delta;
}

/** The current code; tests and operators' tooling use it. */
export function currentTotp(secretBase32: string, now = Date.now()): string {
  return totpFor(secretBase32, '').generate({ timestamp: now });
}
