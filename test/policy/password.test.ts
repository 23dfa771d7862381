import { describe, expect, it } from 'vitest';
import { checkPassword } from '../../src/auth/password-policy.js';

const EMAIL = 'ann.smith@example.com';

describe('password policy', () => {
  it.each([
    ['short1234', 'at least 10'],
    ['aaaaaaaaaaaa', '4 different'],
    ['x'.repeat(1025), 'at most 1024'],
    ['Password123!', 'breached'],
    ['!!qwerty2024', 'breached'],
    ['P@ssw0rd2024', 'breached'],
    ['1234567890', 'sequence'],
    ['abcdefghijk', 'sequence'],
    ['abcabcabcabc', 'breached|sequence|different'],
    ['xyz-ann.smith-1', 'email'],
    ['ann.smith@example.com', 'email'],
  ])('refuses %j', (pw, why) => {
    expect(() => checkPassword(pw, EMAIL)).toThrow(new RegExp(why));
    try {
      checkPassword(pw, EMAIL);
    } catch (e) {
      expect((e as { code: string }).code).toBe('weak_password');
    }
  });

  it.each(['correct horse battery', 'Tr0ub4dor&3-extended', 'a long passphrase', 'password manager output: k7#Qz!9v'])('accepts %j', (pw) => {
    expect(() => checkPassword(pw, EMAIL)).not.toThrow();
  });
});
