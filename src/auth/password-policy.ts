import { badRequest } from '../core/errors.js';

/**
 * Password policy (docs/decisions.md): 10 to 1024 characters, at least 4 different
 * characters, not the email or its name part, and not built on the passwords that top
 * every breach list. Length beats composition rules, so there are none.
 */
export const PASSWORD_MIN = 10;
export const PASSWORD_MAX = 1024;

// The stems that lead every public breach corpus; a password that is one of them with
// digits or symbols around it is refused.
const BREACHED_STEMS = [
  'password',
  'passw0rd',
  'p@ssword',
  'p@ssw0rd',
  'qwerty',
  'qwertyuiop',
  'asdfgh',
  'zxcvbn',
  'letmein',
  'welcome',
  'iloveyou',
  'admin',
  'administrator',
  'monkey',
  'dragon',
  'football',
  'baseball',
  'sunshine',
  'princess',
  'superman',
  'trustno1',
  'abc123',
  'changeme',
  'secret',
  'master',
  'login',
  'starwars',
  'whatever',
  'shadow',
  'michael',
];

// Runs of the digit row, the alphabet and the keyboard rows, either way round.
const RUNS = ['1234567890', 'abcdefghijklmnopqrstuvwxyz', 'qwertyuiop', 'asdfghjkl', 'zxcvbnm'];

function isSequence(s: string): boolean {
  if (s.length < 4) return false;
  const rev = [...s].reverse().join('');
  return RUNS.some((r) => r.includes(s) || r.includes(rev) || (r === RUNS[0] && (r + r).includes(s)));
}

export function checkPassword(password: string, email: string): void {
  const weak = (why: string) => badRequest(`Password ${why}`, 'weak_password');
  if (password.length < PASSWORD_MIN) throw weak(`must be at least ${PASSWORD_MIN} characters`);
  if (password.length > PASSWORD_MAX) throw weak(`must be at most ${PASSWORD_MAX} characters`);
  if (new Set(password).size < 4) throw weak('must use at least 4 different characters');
  const lower = password.toLowerCase();
  const mail = email.toLowerCase();
  const local = mail.split('@')[0] ?? '';
  if (lower === mail || (local.length >= 4 && lower.includes(local))) throw weak('must not contain your email address');
  const core = lower.replace(/[^a-z@]/g, '').replace(/@/g, 'a');
  const stripped = lower.replace(/^[\d\W_]+|[\d\W_]+$/g, '');
  for (const stem of BREACHED_STEMS) {
    const s = stem.replace(/@/g, 'a').replace(/0/g, 'o');
    if (stripped === stem || core === s || core === s.repeat(2)) throw weak('is one of the most breached passwords');
  }
  if (isSequence(lower) || /^(.{1,3})\1+$/.test(lower)) throw weak('is a simple sequence or repetition');
}
