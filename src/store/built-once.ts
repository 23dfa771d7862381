import { CompiledQuery, type Compilable, type QueryResult, type RawBuilder } from 'kysely';
import { isSqlite, type Executor } from './db.js';

/**
 * Statements of the write path built once per shape. Kysely builds and compiles a statement
 * anew on every run (an operation-node tree, its compile, `freeze`): about a tenth of a page
 * write's CPU over its ~30 statements (docs/decisions.md, session p). A statement built once is
 * built by the same typed builder, given stand-ins for its values: every value (a string,
 * number, null...) is replaced by a marker, while arrays and objects keep their length and keys.
 * The compiled SQL is kept under that shape; later runs of the same shape put their values in
 * the markers' places among the compiled parameters and hand the SQL to the executor (the
 * transaction's connection, as for any other statement).
 *
 * The builder must depend on its values' shape only, never on the values themselves: a branch
 * on a value would be taken for the marker and kept for every run. A marker turned into text
 * (a template string, a table name) is caught on the first run of a shape and throws. What the
 * SQL text itself depends on (a workspace's table name) is passed as the `key` of a run: the
 * builder gets it as it is, and it is part of the shape.
 */

/** Stands for the value at this position of the values' walk while the statement is built. */
class Slot {
  constructor(readonly index: number) {}
  // A marker turned into a primitive (arithmetic, text, a comparison by value) or serialised
  // (JSON.stringify) would be baked into the statement: refused on the first run of the shape.
  [Symbol.toPrimitive](): never {
    throw new Error('a value of a statement built once is not a parameter (the builder turned it into a primitive)');
  }
  toJSON(): never {
    throw new Error('a value of a statement built once is not a parameter (the builder serialised it)');
  }
}

interface Compiled {
  sql: string;
  /** Per parameter: the walk position of its value, or -1 for a constant written in the statement. */
  slots: Int32Array;
  constants: unknown[];
}

export interface BuiltOnce<V, R> {
  /** Runs the statement with these values (in the executor's transaction, if it is one). */
  execute(db: Executor, values: V, key?: string): Promise<QueryResult<R>>;
  /** The statement with these values, compiled for the executor's engine, not run (store/carried.ts). */
  compiled(db: Executor, values: V, key?: string): CompiledQuery<R>;
  rows(db: Executor, values: V, key?: string): Promise<R[]>;
  first(db: Executor, values: V, key?: string): Promise<R | undefined>;
}

/** What a builder returns: a query builder, or an `sql` template. */
type Statement<R> = Compilable<R> | RawBuilder<R>;

/** Shapes kept per statement and dialect, the least recently used dropped first. */
const MAX_SHAPES = 64;

/** A statement built by `build` once per shape of its values, run with the values of each call. */
export function builtOnce<V extends object, R>(build: (db: Executor, values: V, key: string) => Statement<R>): BuiltOnce<V, R> {
  // [SQLite, PostgreSQL]: the SQL text and its placeholders differ.
  const shapes: [Map<string, Compiled>, Map<string, Compiled>] = [new Map(), new Map()];
  const compiled = (db: Executor, values: V, key = ''): CompiledQuery<R> => {
    const w: Walk = { shape: `${key.length}:${key}`, leaves: [] };
    walk(values, w);
    const kept = shapes[isSqlite(db) ? 0 : 1];
    let c = kept.get(w.shape);
    if (c) {
      // Least recently used out first: many workspaces (a key each) must not starve the hot shapes.
      kept.delete(w.shape);
    } else {
      c = compile(build(db, standIn(values, { next: 0 }) as V, key), db);
      if (kept.size >= MAX_SHAPES) kept.delete(kept.keys().next().value!);
    }
    kept.set(w.shape, c);
    const params = new Array<unknown>(c.slots.length);
    for (let k = 0; k < params.length; k++) {
      const at = c.slots[k]!;
      params[k] = at < 0 ? c.constants[k] : w.leaves[at];
    }
    return CompiledQuery.raw(c.sql, params) as CompiledQuery<R>;
  };
  const execute = async (db: Executor, values: V, key = ''): Promise<QueryResult<R>> => db.executeQuery<R>(compiled(db, values, key));
  return {
    execute,
    compiled,
    rows: async (db, values, key) => (await execute(db, values, key)).rows,
    first: async (db, values, key) => (await execute(db, values, key)).rows[0],
  };
}

interface Walk {
  shape: string;
  leaves: unknown[];
}

/** Whether `v` is walked into (an array or a plain object) rather than bound as a value. */
function isContainer(v: unknown): v is Record<string, unknown> | unknown[] {
  if (typeof v !== 'object' || v === null || v instanceof Uint8Array) return false;
  if (Array.isArray(v)) return true;
  const proto = Object.getPrototypeOf(v) as unknown;
  // Expressions, dates and other objects are not values a statement binds as they are.
  if (proto !== Object.prototype && proto !== null) throw new Error('a statement built once takes plain values, arrays and objects only');
  return true;
}

/** Notes the values' shape and their leaves in walk order (undefined is part of the shape, not a leaf: Kysely leaves such columns out). */
function walk(v: unknown, w: Walk): void {
  if (v === undefined) w.shape += 'u';
  else if (!isContainer(v)) {
    w.shape += '.';
    w.leaves.push(v);
  } else if (Array.isArray(v)) {
    w.shape += `[${v.length}`;
    for (const x of v) walk(x, w);
    w.shape += ']';
  } else {
    w.shape += '{';
    for (const k in v) {
      w.shape += `${k.length}:${k}`;
      walk(v[k], w);
    }
    w.shape += '}';
  }
}

/** The values with each leaf replaced by a Slot numbered as `walk` numbers it (built only when a shape is new). */
function standIn(v: unknown, n: { next: number }): unknown {
  if (v === undefined) return undefined;
  if (!isContainer(v)) return new Slot(n.next++);
  if (Array.isArray(v)) return v.map((x) => standIn(x, n));
  const out: Record<string, unknown> = {};
  for (const k in v) out[k] = standIn(v[k], n);
  return out;
}

function compile(q: Statement<unknown>, db: Executor): Compiled {
  // A template compiles against an executor; a builder knows its own (and ignores the argument).
  const { sql, parameters } = (q as { compile(db: Executor): CompiledQuery }).compile(db);
  const slots = new Int32Array(parameters.length);
  const constants = new Array<unknown>(parameters.length);
  parameters.forEach((p, k) => {
    slots[k] = p instanceof Slot ? p.index : -1;
    if (!(p instanceof Slot)) constants[k] = p;
  });
  // A marker turned into text, or hidden inside a parameter, would run with the wrong value.
  const leaked = (x: unknown): boolean =>
    (typeof x === 'string' && x.includes('[object Object]')) ||
    (typeof x === 'object' && x !== null && !(x instanceof Uint8Array) && Object.values(x).some((y) => y instanceof Slot || leaked(y)));
  if (sql.includes('[object Object]') || constants.some(leaked)) throw new Error(`a value of a statement built once is not a parameter: ${sql}`);
  return { sql, slots, constants };
}
