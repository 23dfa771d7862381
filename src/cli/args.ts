/** A mistake in how a command was called: one line on stderr and exit 2 (src/cli/index.ts). */
export class UsageError extends Error {}

export type FlagKind = 'string' | 'boolean';

export interface Parsed {
  strings: Map<string, string>;
  booleans: Set<string>;
}

/**
 * Parses `--name value`, `--name=value` and `--flag` against the flags a command knows; anything
 * else (an unknown flag, a positional word, a value missing) is a UsageError naming it.
 */
export function parseArgs(argv: string[], known: Record<string, FlagKind>): Parsed {
  const out: Parsed = { strings: new Map(), booleans: new Set() };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) throw new UsageError(`unexpected argument ${JSON.stringify(arg)}`);
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq >= 0 ? eq : undefined);
    const kind = known[name];
    if (!kind) throw new UsageError(`unknown option --${name}`);
    if (kind === 'boolean') {
      if (eq >= 0) throw new UsageError(`--${name} takes no value`);
      out.booleans.add(name);
      continue;
    }
    let value: string | undefined;
    if (eq >= 0) value = arg.slice(eq + 1);
    else {
      value = argv[i + 1];
      if (value === undefined || value.startsWith('--')) throw new UsageError(`--${name} needs a value`);
      i += 1;
    }
    if (value === '') throw new UsageError(`--${name} needs a value`);
    out.strings.set(name, value);
  }
  return out;
}

export function required(p: Parsed, name: string): string {
  const v = p.strings.get(name);
  if (v === undefined) throw new UsageError(`--${name} is required`);
  return v;
}

/** A whole number in [min, max], or undefined when the flag is absent. */
export function intFlag(p: Parsed, name: string, min: number, max: number): number | undefined {
  const v = p.strings.get(name);
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max) throw new UsageError(`--${name} must be a whole number from ${min} to ${max}`);
  return Number(v);
}
