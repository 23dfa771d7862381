import { describe, expect, it } from 'vitest';
import { atOrBelow, DEFAULT_LEVEL, isLevel, LEVELS, minLevel, rank, type Level } from '../../src/policy/sensitivity.js';

/** Table-driven test of src/policy/sensitivity.ts (issue 12): the level order every policy decision rests on. */

describe('the levels', () => {
  it('are public < internal < confidential < secret, default internal', () => {
    expect(LEVELS).toEqual(['public', 'internal', 'confidential', 'secret']);
    expect(DEFAULT_LEVEL).toBe('internal');
  });
});

describe('isLevel: exactly the four names', () => {
  const rows: { name: string; input: unknown; expected: boolean }[] = [
    { name: 'public', input: 'public', expected: true },
    { name: 'internal', input: 'internal', expected: true },
    { name: 'confidential', input: 'confidential', expected: true },
    { name: 'secret', input: 'secret', expected: true },
    { name: 'wrong case', input: 'Secret', expected: false },
    { name: 'padded', input: ' secret', expected: false },
    { name: 'empty string', input: '', expected: false },
    { name: 'unknown word', input: 'top-secret', expected: false },
    { name: 'null', input: null, expected: false },
    { name: 'undefined', input: undefined, expected: false },
    { name: 'a rank number', input: 3, expected: false },
    { name: 'an array holding a level', input: ['secret'], expected: false },
  ];
  it.each(rows)('$name', ({ input, expected }) => {
    expect(isLevel(input)).toBe(expected);
  });
});

describe('rank', () => {
  const rows: { name: string; input: Level; expected: number }[] = [
    { name: 'public', input: 'public', expected: 0 },
    { name: 'internal', input: 'internal', expected: 1 },
    { name: 'confidential', input: 'confidential', expected: 2 },
    { name: 'secret', input: 'secret', expected: 3 },
  ];
  it.each(rows)('$name', ({ input, expected }) => {
    expect(rank(input)).toBe(expected);
  });
});

describe('minLevel: the lowest given, nulls ignored, secret when none', () => {
  const rows: { name: string; input: (Level | null | undefined)[]; expected: Level }[] = [
    { name: 'nothing', input: [], expected: 'secret' },
    { name: 'only null and undefined', input: [null, undefined], expected: 'secret' },
    { name: 'one level', input: ['internal'], expected: 'internal' },
    { name: 'a level and a null', input: ['confidential', null], expected: 'confidential' },
    { name: 'lowest wins whatever the order', input: ['confidential', 'public', 'secret'], expected: 'public' },
    { name: 'equal levels', input: ['secret', 'secret'], expected: 'secret' },
    { name: 'null in the middle', input: ['secret', null, 'internal', undefined], expected: 'internal' },
  ];
  it.each(rows)('$name', ({ input, expected }) => {
    expect(minLevel(...input)).toBe(expected);
  });
});

describe('atOrBelow: every pair', () => {
  const rows: { name: string; input: [Level, Level]; expected: boolean }[] = LEVELS.flatMap((level, i) =>
    LEVELS.map((ceiling, j) => ({ name: `${level} under ${ceiling}`, input: [level, ceiling] as [Level, Level], expected: i <= j })),
  );
  it('has 16 rows', () => {
    expect(rows).toHaveLength(16);
  });
  it.each(rows)('$name', ({ input, expected }) => {
    expect(atOrBelow(input[0], input[1])).toBe(expected);
  });
  // A hand-written boundary, so the table above is not only computed by the same rule.
  it.each([
    { name: 'confidential under confidential', input: ['confidential', 'confidential'] as [Level, Level], expected: true },
    { name: 'secret under confidential', input: ['secret', 'confidential'] as [Level, Level], expected: false },
    { name: 'public under public', input: ['public', 'public'] as [Level, Level], expected: true },
    { name: 'internal under public', input: ['internal', 'public'] as [Level, Level], expected: false },
  ])('boundary: $name', ({ input, expected }) => {
    expect(atOrBelow(input[0], input[1])).toBe(expected);
  });
});
