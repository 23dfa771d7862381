import { ConfigError } from '../config.js';
import { isServiceError } from '../core/errors.js';
import { UsageError } from './args.js';
import type { Command } from './command.js';
import { auditVerify } from './commands/audit-verify.js';
import { backup, restore } from './commands/backup.js';
import { createOwner } from './commands/create-owner.js';
import { importCommand } from './commands/import.js';
import { mintKeyCommand } from './commands/mint-key.js';
import { reindex } from './commands/reindex.js';
import { resetPassword, resetTotp } from './commands/reset.js';

/**
 * The operator's command line: `context-vault <command> [options]` (README "Operator's command
 * line"). main.ts keeps `serve` (the default) and `migrate`, and hands every other word here.
 *
 * Exit codes: 0 done; 1 the work failed (the database is unreachable, an audit chain is broken);
 * 2 the command was called wrongly or refused what it was given (unknown command or option, a
 * missing flag, an unknown email or workspace, a weak password, a corrupt backup, a non-empty
 * target). A failure is one line on stderr, never a stack trace (CV_DEBUG=1 shows it).
 */
export const COMMANDS: Command[] = [createOwner, resetPassword, resetTotp, mintKeyCommand, backup, restore, auditVerify, reindex, importCommand];

const SERVER_COMMANDS = [
  ['serve', 'start the service (the default)'],
  ['migrate', 'apply database migrations and exit'],
] as const;

export function usage(): string {
  const width = Math.max(...[...SERVER_COMMANDS.map(([n]) => n), ...COMMANDS.map((c) => c.name)].map((n) => n.length)) + 2;
  return [
    'Usage: context-vault [command] [options]',
    '',
    'Commands:',
    ...SERVER_COMMANDS.map(([n, s]) => `  ${n.padEnd(width)}${s}`),
    ...COMMANDS.map((c) => `  ${c.name.padEnd(width)}${c.summary}`),
    '',
    "Run `context-vault <command> --help` for a command's options. Configuration (DATA_DIR,",
    'DATABASE_URL, ...) is read from the environment, as the server reads it; see README.md.',
  ].join('\n');
}

function commandHelp(c: Command): string {
  return [`Usage: context-vault ${c.name} ${c.usage}`, '', `${c.summary[0]!.toUpperCase()}${c.summary.slice(1)}.`, ...c.help].join('\n');
}

export function findCommand(name: string): Command | undefined {
  return COMMANDS.find((c) => c.name === name);
}

/** Runs one operator command; returns the process's exit code. */
export async function runCli(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    const topic = name === 'help' && rest[0] ? findCommand(rest[0]) : undefined;
    process.stdout.write(`${topic ? commandHelp(topic) : usage()}\n`);
    return 0;
  }
  const command = findCommand(name);
  if (!command) {
    process.stderr.write(`context-vault: unknown command ${JSON.stringify(name)}\n\n${usage()}\n`);
    return 2;
  }
  if (rest.includes('--help') || rest.includes('-h')) {
    process.stdout.write(`${commandHelp(command)}\n`);
    return 0;
  }
  try {
    return await command.run(rest);
  } catch (e) {
    if (process.env.CV_DEBUG) console.error(e);
    if (e instanceof UsageError) {
      process.stderr.write(`context-vault ${name}: ${e.message} (see context-vault ${name} --help)\n`);
      return 2;
    }
    if (e instanceof ConfigError) {
      process.stderr.write(`${e.message}\n`);
      return 2;
    }
    if (isServiceError(e) && e.status < 500) {
      process.stderr.write(`context-vault ${name}: ${e.message}\n`);
      return 2;
    }
    const message = e instanceof Error ? e.message : String(e);
    process.stderr.write(`context-vault ${name}: failed: ${message.split('\n')[0]}\n`);
    return 1;
  }
}
