/**
 * JSON of a record that differs between reads only in its `last_touched_at` (a page read of now:
 * core/pages/read.ts keeps the rest until a commit). The record is serialized once per kept
 * object, with two stand-in times; the text around the field is kept and each read splices its
 * own time in. Serializing a page record was a tenth of an authenticated read's CPU.
 */

interface Touched {
  last_touched_at: string | null;
}

/** Two stand-ins of the same length whose first characters differ. */
const STAND_IN = ['1000-01-01T00:00:00.000Z', '2000-01-01T00:00:00.000Z'] as const;
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

interface Parts {
  head: string;
  tail: string;
}

const cache = new WeakMap<object, Parts | null>();

function split<T extends Touched>(kept: Readonly<T>, serialize: (v: T) => string): Parts | null {
  const a = serialize({ ...kept, last_touched_at: STAND_IN[0] });
  const b = serialize({ ...kept, last_touched_at: STAND_IN[1] });
  let i = 0;
  while (i < a.length && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  const tail = a.slice(i + STAND_IN[0].length);
  // Exactly one place differs, and it is the whole stand-in: else serialize whole each time.
  if (a.length !== b.length || tail !== b.slice(i + STAND_IN[1].length) || a.slice(i, i + STAND_IN[0].length) !== STAND_IN[0]) return null;
  return { head: a.slice(0, i), tail };
}

/** `serialize(record)`, from the parts kept for `kept` when the record is that object with another time. */
export function touchedJson<T extends Touched>(record: T, kept: Readonly<T> | undefined, serialize: (v: T) => string): string {
  const at = record.last_touched_at;
  if (!kept || at === null || !ISO.test(at)) return serialize(record);
  let parts = cache.get(kept);
  if (parts === undefined) {
    parts = split(kept, serialize);
    cache.set(kept, parts);
  }
  return parts ? parts.head + at + parts.tail : serialize(record);
}
