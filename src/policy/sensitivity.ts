/** Sensitivity levels, low to high (DESIGN.md §4). */
export const LEVELS = ['public', 'internal', 'confidential', 'secret'] as const;
export type Level = (typeof LEVELS)[number];

export const DEFAULT_LEVEL: Level = 'internal';

export function isLevel(value: unknown): value is Level {
  return typeof value === 'string' && (LEVELS as readonly string[]).includes(value);
}

export function rank(level: Level): number {
  return LEVELS.indexOf(level);
}

/** The lower of the given levels; undefined entries are ignored. */
export function minLevel(...levels: (Level | null | undefined)[]): Level {
  let out: Level = 'secret';
  for (const l of levels) if (l && rank(l) < rank(out)) out = l;
  return out;
}

export function atOrBelow(level: Level, ceiling: Level): boolean {
  return rank(level) <= rank(ceiling);
}
