import { parseArgs, required } from '../args.js';
import type { Command } from '../command.js';
import { openDeployment, operatorActor } from '../context.js';
import { emit, readPassword } from '../output.js';
import { findHuman, operatorResetPassword, operatorResetTotp, type PersonReset } from '../../core/operator.js';

function summary(r: PersonReset, what: string): string {
  return `${what} for ${r.email}: ${r.sessions_revoked} session(s) ended; audited in ${r.audited_in} workspace(s)`;
}

export const resetPassword: Command = {
  name: 'reset-password',
  summary: "set a locked-out person's password (ends their sessions; audited)",
  usage: '--email EMAIL [--password-stdin] [--json]',
  help: [
    'Sets a new password (the sign-up password rules apply), ends every session of theirs, clears',
    'their sign-in back-off, and writes `operator.password_reset` to the audit log of every workspace',
    'they belong to. The password is typed at the prompt or piped on stdin, never an argument.',
    'Example: context-vault reset-password --email ada@example.com',
  ],
  flags: { email: 'string', 'password-stdin': 'boolean', json: 'boolean' },
  async run(argv) {
    const args = parseArgs(argv, this.flags);
    const email = required(args, 'email');
    const d = await openDeployment();
    try {
      await findHuman(d.ctx.store.db, email);
      const password = await readPassword(`New password for ${email}`);
      const r = await operatorResetPassword(d.ctx, operatorActor(), email, password);
      emit(args.booleans.has('json'), r, summary(r, 'password reset'));
      return 0;
    } finally {
      await d.close();
    }
  },
};

export const resetTotp: Command = {
  name: 'reset-totp',
  summary: "switch off a person's TOTP so they can enrol again (ends their sessions; audited)",
  usage: '--email EMAIL [--json]',
  help: [
    'For someone who lost their authenticator: TOTP is switched off (they enrol again after signing',
    'in with their password; with REQUIRE_TOTP=on, at sign-in), every session of theirs ends, and',
    '`operator.totp_reset` is written to the audit log of every workspace they belong to.',
    'Example: context-vault reset-totp --email ada@example.com',
  ],
  flags: { email: 'string', json: 'boolean' },
  async run(argv) {
    const args = parseArgs(argv, this.flags);
    const email = required(args, 'email');
    const d = await openDeployment();
    try {
      const r = await operatorResetTotp(d.ctx, operatorActor(), email);
      emit(args.booleans.has('json'), r, summary(r, 'TOTP reset'));
      return 0;
    } finally {
      await d.close();
    }
  },
};
