/**
 * Three-way merge of a page: the base a writer started from, `ours` (the head now in the store)
 * and `theirs` (the incoming write). Pure: no store, no clock, no randomness; the same three
 * inputs always give the same result.
 *
 * - Frontmatter merges key by key on the parsed YAML values (deep equality, not text).
 * - The body merges line by line with node-diff3. A hunk both sides changed differently is a
 *   conflict; the same change made on both sides is taken once.
 * - Whether the document ends with a line break is merged as its own boolean, so adding or
 *   dropping the final newline never collides with an edit of the last line on the other side.
 */
import { diff3Merge } from 'node-diff3';
import { stringify as stringifyYaml } from 'yaml';
import { parseDocument, serializeDocument } from '../markdown/index.js';

export interface MergeConflict {
  where: 'frontmatter' | 'body';
  /** The frontmatter key, for a frontmatter conflict. */
  key?: string;
  /** The text of that key (`key: value` YAML, empty when absent) or of the body hunk, per side. */
  ours: string;
  base: string;
  theirs: string;
}

export type MergeResult = { kind: 'clean'; content: string } | { kind: 'conflict'; reason: string; conflicts: MergeConflict[] };

export function mergePage(base: string, ours: string, theirs: string): MergeResult {
  if (theirs === base || ours === theirs) return { kind: 'clean', content: ours };
  if (ours === base) return { kind: 'clean', content: theirs };

  // A side whose YAML is invalid throws its ServiceError (invalid_frontmatter) from here.
  const b = parseDocument(base);
  const o = parseDocument(ours);
  const t = parseDocument(theirs);

  const fm = mergeFrontmatter(b.frontmatter, o.frontmatter, t.frontmatter);
  const body = mergeBody(b.body, o.body, t.body);
  const conflicts = [...fm.conflicts, ...body.conflicts];

  if (conflicts.length > 0) {
    const parts: string[] = [];
    const keys = fm.conflicts.map((c) => c.key ?? '');
    if (keys.length > 0) {
      parts.push(`frontmatter ${keys.length === 1 ? 'key' : 'keys'} ${keys.map((k) => `'${k}'`).join(', ')}`);
    }
    if (body.conflicts.length > 0) {
      parts.push(`${body.conflicts.length} body ${body.conflicts.length === 1 ? 'hunk' : 'hunks'}`);
    }
    return {
      kind: 'conflict',
      reason: `Both sides changed ${parts.join(' and ')} differently since the base version`,
      conflicts,
    };
  }

  return { kind: 'clean', content: assemble(fm.merged, body.merged, o, ours, t, theirs) };
}

// ---------------------------------------------------------------------------------------------
// Frontmatter

type Record_ = Record<string, unknown>;

function has(obj: Record_, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(obj, key);
}

/** A side's value of a key: present (with its value, possibly null) or absent. */
type Slot = { present: true; value: unknown } | { present: false };

function slot(obj: Record_, key: string): Slot {
  return has(obj, key) ? { present: true, value: obj[key] } : { present: false };
}

function sameSlot(x: Slot, y: Slot): boolean {
  if (!x.present || !y.present) return x.present === y.present;
  return deepEqual(x.value, y.value);
}

/** The key as it reads in frontmatter, for a conflict report; empty when the key is absent. */
function showSlot(key: string, s: Slot): string {
  return s.present ? stringifyYaml({ [key]: s.value }, { lineWidth: 0 }) : '';
}

function mergeFrontmatter(base: Record_, ours: Record_, theirs: Record_): { merged: Record_; conflicts: MergeConflict[] } {
  // Ours's order first, then keys only theirs has, in theirs's order. Keys only base has were
  // removed on both sides and stay removed.
  const order = [...Object.keys(ours), ...Object.keys(theirs).filter((k) => !has(ours, k))];
  const merged: Record_ = {};
  const conflicts: MergeConflict[] = [];
  for (const key of order) {
    const b = slot(base, key);
    const o = slot(ours, key);
    const t = slot(theirs, key);
    let pick: Slot;
    if (sameSlot(o, t))
      pick = o; // unchanged, or changed identically on both sides
    else if (sameSlot(b, t))
      pick = o; // only ours changed it
    else if (sameSlot(b, o))
      pick = t; // only theirs changed it
    else {
      conflicts.push({
        where: 'frontmatter',
        key,
        ours: showSlot(key, o),
        base: showSlot(key, b),
        theirs: showSlot(key, t),
      });
      continue;
    }
    if (pick.present) merged[key] = pick.value;
  }
  return { merged, conflicts };
}

/** Structural equality of parsed YAML values. */
export function deepEqual(x: unknown, y: unknown): boolean {
  if (Object.is(x, y)) return true;
  if (typeof x !== 'object' || typeof y !== 'object' || x === null || y === null) return false;
  if (Array.isArray(x) || Array.isArray(y)) {
    if (!Array.isArray(x) || !Array.isArray(y) || x.length !== y.length) return false;
    return x.every((v, i) => deepEqual(v, y[i]));
  }
  if (x instanceof Date || y instanceof Date) {
    return x instanceof Date && y instanceof Date && x.getTime() === y.getTime();
  }
  if (x instanceof Map || y instanceof Map) {
    if (!(x instanceof Map) || !(y instanceof Map) || x.size !== y.size) return false;
    for (const [k, v] of x) if (!y.has(k) || !deepEqual(v, y.get(k))) return false;
    return true;
  }
  if (x instanceof Set || y instanceof Set) {
    if (!(x instanceof Set) || !(y instanceof Set) || x.size !== y.size) return false;
    for (const v of x) if (!y.has(v)) return false;
    return true;
  }
  if (Object.getPrototypeOf(x) !== Object.getPrototypeOf(y)) return false;
  const xk = Object.keys(x);
  const yk = Object.keys(y);
  if (xk.length !== yk.length) return false;
  const xr = x as Record_;
  const yr = y as Record_;
  return xk.every((k) => has(yr, k) && deepEqual(xr[k], yr[k]));
}

// ---------------------------------------------------------------------------------------------
// Body

interface Lines {
  /** Every line with its line break; the last one gets a break added when the text had none. */
  lines: string[];
  /** Did the text end with a line break (or was it empty)? */
  finalBreak: boolean;
}

const LINE = /[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$/g;

/**
 * Splits text into lines keeping their breaks. A last line without a break is given the break
 * the text used last (or `\n`), so "b" at the end of one side compares equal to "b\n" on another
 * and an append after it is not mistaken for a change of it.
 */
function splitLines(text: string): Lines {
  const lines = text.match(LINE) ?? [];
  const last = lines[lines.length - 1];
  if (last === undefined || /[\r\n]$/.test(last)) return { lines, finalBreak: true };
  const prev = lines[lines.length - 2];
  const brk = prev?.match(/(?:\r\n|\r|\n)$/)?.[0] ?? '\n';
  lines[lines.length - 1] = last + brk;
  return { lines, finalBreak: false };
}

function stripBreak(line: string): string {
  return line.replace(/(?:\r\n|\r|\n)$/, '');
}

/** Joins lines back, dropping the break of the last one when the text is to end without one. */
function joinLines(lines: string[], finalBreak: boolean): string {
  if (finalBreak || lines.length === 0) return lines.join('');
  return lines.slice(0, -1).join('') + stripBreak(lines[lines.length - 1]!);
}

/** The text of a hunk of one side, as that side had it (no invented final break). */
function hunkText(side: Lines, start: number, hunk: string[]): string {
  const reachesEnd = start + hunk.length === side.lines.length;
  return joinLines(hunk, side.finalBreak || !reachesEnd);
}

function mergeBody(base: string, ours: string, theirs: string): { merged: string; conflicts: MergeConflict[] } {
  const b = splitLines(base);
  const o = splitLines(ours);
  const t = splitLines(theirs);

  // The final break is a boolean merged on its own: a side that changed it wins (both sides
  // changing it can only mean the same change).
  const finalBreak = o.finalBreak !== b.finalBreak ? o.finalBreak : t.finalBreak;

  const regions = diff3Merge<string>(o.lines, b.lines, t.lines, { excludeFalseConflicts: true });
  const merged: string[] = [];
  const conflicts: MergeConflict[] = [];
  for (const region of regions) {
    if (region.ok) {
      merged.push(...region.ok);
    } else if (region.conflict) {
      const c = region.conflict;
      // excludeFalseConflicts already takes identical changes; kept as a guard.
      if (c.a.length === c.b.length && c.a.every((line, i) => line === c.b[i])) {
        merged.push(...c.a);
        continue;
      }
      conflicts.push({
        where: 'body',
        ours: hunkText(o, c.aIndex, c.a),
        base: hunkText(b, c.oIndex, c.o),
        theirs: hunkText(t, c.bIndex, c.b),
      });
    }
  }
  return { merged: joinLines(merged, finalBreak), conflicts };
}

// ---------------------------------------------------------------------------------------------
// Result

/**
 * Puts the merged frontmatter and body together. When the merged frontmatter equals one side's,
 * that side's frontmatter block is kept byte for byte (comments, quoting, line breaks); only a
 * frontmatter that mixes both sides is serialized anew.
 */
function assemble(
  frontmatter: Record_,
  body: string,
  o: { frontmatter: Record_; body: string },
  ours: string,
  t: { frontmatter: Record_; body: string },
  theirs: string,
): string {
  for (const [side, raw] of [
    [o, ours],
    [t, theirs],
  ] as const) {
    const block = raw.slice(0, raw.length - side.body.length);
    // A side without a block goes through serializeDocument, which adds an empty block when the
    // merged body would otherwise be read as frontmatter.
    // The block must end on its own line: "---" at the very end of a side with an empty body
    // would run into the merged body.
    const closed = /[\r\n]$/.test(block) || body === '';
    if (block !== '' && closed && deepEqual(frontmatter, side.frontmatter) && sameKeyOrder(frontmatter, side.frontmatter)) {
      return block + body;
    }
  }
  return serializeDocument(frontmatter, body);
}

function sameKeyOrder(x: Record_, y: Record_): boolean {
  const xk = Object.keys(x);
  const yk = Object.keys(y);
  return xk.length === yk.length && xk.every((k, i) => k === yk[i]);
}
