import { parseArgs, required } from '../args.js';
import type { Command } from '../command.js';
import { openDeployment } from '../context.js';
import { emit, readPassword } from '../output.js';
import { createFirstOwner } from '../../core/operator.js';

export const createOwner: Command = {
  name: 'create-owner',
  summary: 'create the first owner of a fresh deployment',
  usage: '--email EMAIL --name NAME [--password-stdin] [--json]',
  help: [
    'Signs up the first account (the same rules as the sign-up page) and its own workspace, as owner.',
    'Refused once any account exists. The password is typed at the prompt (not echoed) or, in a',
    'pipe, read from the first line of stdin: it is never an argument.',
    'Example: printf "%s\\n" "$PASSWORD" | context-vault create-owner --email ada@example.com --name Ada --password-stdin',
  ],
  flags: { email: 'string', name: 'string', 'password-stdin': 'boolean', json: 'boolean' },
  async run(argv) {
    const args = parseArgs(argv, this.flags);
    const email = required(args, 'email');
    const name = required(args, 'name');
    const password = await readPassword('Password for the new owner');
    const d = await openDeployment();
    try {
      const r = await createFirstOwner(d.ctx, { email, name, password });
      emit(
        args.booleans.has('json'),
        { principal_id: r.principalId, email: email.trim().toLowerCase(), workspace: { id: r.ownWorkspace.id, slug: r.ownWorkspace.slug } },
        `created owner ${email.trim().toLowerCase()} (${r.principalId}) of workspace ${r.ownWorkspace.slug}`,
      );
      return 0;
    } finally {
      await d.close();
    }
  },
};
