import type { FlagKind } from './args.js';

/** One operator command: its flags, its help, and what it does (returns the exit code). */
export interface Command {
  name: string;
  summary: string;
  /** The usage line after the command's name. */
  usage: string;
  /** Lines of help after the usage line. */
  help: string[];
  flags: Record<string, FlagKind>;
  run(argv: string[]): Promise<number>;
}
