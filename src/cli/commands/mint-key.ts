import { intFlag, parseArgs, required, UsageError } from '../args.js';
import type { Command } from '../command.js';
import { openDeployment, operatorActor } from '../context.js';
import { emit } from '../output.js';
import { operatorMintKey } from '../../core/operator.js';
import { KEY_MAX_DAYS } from '../../core/principals.js';
import { isLevel } from '../../policy/sensitivity.js';

export const mintKeyCommand: Command = {
  name: 'mint-key',
  summary: 'mint an agent key (the secret is printed once)',
  usage: '--workspace SLUG --agent ID-OR-NAME [--name NAME] [--days D] [--ceiling LEVEL] [--json]',
  help: [
    "Mints a key for an existing agent of the workspace, as the workspace's earliest owner would",
    '(audited as `agent.key.mint` with via=operator). --days sets an expiry (1 to 3650), --ceiling',
    'caps what the key reads (public, internal, confidential, secret). The key is printed once on',
    'stdout; store it now.',
    'Example: context-vault mint-key --workspace ada --agent ci-bot --days 90 --ceiling internal',
  ],
  flags: { workspace: 'string', agent: 'string', name: 'string', days: 'string', ceiling: 'string', json: 'boolean' },
  async run(argv) {
    const args = parseArgs(argv, this.flags);
    const workspace = required(args, 'workspace');
    const agent = required(args, 'agent');
    const name = args.strings.get('name') ?? 'operator';
    if (name.length > 100) throw new UsageError('--name must be at most 100 characters');
    const days = intFlag(args, 'days', 1, KEY_MAX_DAYS);
    const ceiling = args.strings.get('ceiling');
    if (ceiling !== undefined && !isLevel(ceiling)) throw new UsageError('--ceiling must be public, internal, confidential or secret');
    const d = await openDeployment();
    try {
      const r = await operatorMintKey(d.ctx, operatorActor(), { workspace, agent, name, expires_in_days: days ?? null, ceiling: ceiling ?? null });
      const { key, ...record } = r.key;
      emit(args.booleans.has('json'), { workspace: r.workspace.slug, agent: r.agent, minted_as: r.owner, key, record }, args.booleans.has('json') ? '' : key);
      if (!args.booleans.has('json')) {
        process.stderr.write(
          `minted key ${record.id} for agent ${r.agent.name} (${r.agent.id}) in ${r.workspace.slug}` +
            `${record.expires_at ? `, expires ${record.expires_at}` : ''}${record.ceiling ? `, ceiling ${record.ceiling}` : ''}; it is shown only once\n`,
        );
      }
      return 0;
    } finally {
      await d.close();
    }
  },
};
