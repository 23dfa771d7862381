import { CompiledQuery, type QueryResult } from 'kysely';
import { isSqlite, type Executor } from './db.js';

/**
 * Writes whose results nobody reads, sent with the statement that follows them. On PostgreSQL
 * each round trip of a write is made while the workspace's lock is held (store/tx.ts), and every
 * other writer of the workspace waits through it: the carried writes go in front of the next
 * statement as data-modifying CTEs, one round trip for all. On SQLite (a call into the same
 * process, and no data-modifying CTEs) they run first, in order.
 *
 * The statement they ride with must not read or change the rows they write: PostgreSQL runs a
 * statement and its CTEs on one snapshot, so it does not see their changes. The carried writes
 * themselves run in their order's sense only on SQLite; on PostgreSQL they must not depend on
 * one another either (two inserts into different tables, say).
 */
export async function executeCarrying<R>(db: Executor, carried: readonly CompiledQuery[], query: CompiledQuery<R>): Promise<QueryResult<R>> {
  if (carried.length === 0) return db.executeQuery(query);
  if (isSqlite(db)) {
    for (const w of carried) await db.executeQuery(w);
    return db.executeQuery(query);
  }
  // A statement takes at most MAX_PARAMETERS: the writes that would pass it run on their own first.
  let room = MAX_PARAMETERS - query.parameters.length;
  const riding: CompiledQuery[] = [];
  for (const w of carried) {
    if (w.parameters.length <= room) {
      riding.push(w);
      room -= w.parameters.length;
    } else await db.executeQuery(w);
  }
  return db.executeQuery(riding.length > 0 ? withCarried(riding, query) : query);
}

/** PostgreSQL's bound on one statement's parameters (its protocol counts them in 16 bits). */
export const MAX_PARAMETERS = 65_535;

/** PostgreSQL: `query` with `carried` in front of it as CTEs, their parameters numbered after one another. */
export function withCarried<R>(carried: readonly CompiledQuery[], query: CompiledQuery<R>): CompiledQuery<R> {
  const parameters: unknown[] = [];
  const ctes = carried.map((w, i) => {
    const text = renumber(w.sql, parameters.length);
    parameters.push(...w.parameters);
    return `cv_carried_${i} as (${text})`;
  });
  const body = renumber(query.sql, parameters.length);
  parameters.push(...query.parameters);
  // A statement with its own WITH list gets the carried CTEs at the head of that list.
  const own = /^\s*with\s+(recursive\s+)?/i.exec(body);
  const text = own ? `with ${own[1] ?? ''}${ctes.join(', ')}, ${body.slice(own[0].length)}` : `with ${ctes.join(', ')} ${body}`;
  return CompiledQuery.raw(text, parameters) as CompiledQuery<R>;
}

/**
 * `sql` with each placeholder `$n` made `$(n + by)`. Placeholders are found outside quoted text,
 * quoted names and comments; a dollar-quoted string is refused (none of the write path's
 * statements has one, and telling its tag from a placeholder is not worth the risk).
 */
export function renumber(sql: string, by: number): string {
  if (by === 0) return sql;
  const key = `${by}:${sql}`;
  const hit = renumbered.get(key);
  if (hit !== undefined) return hit;
  const out = shift(sql, by);
  if (renumbered.size >= RENUMBERED_MAX) renumbered.delete(renumbered.keys().next().value!);
  renumbered.set(key, out);
  return out;
}

/** The write path's statements come in a few shapes: each is scanned once. */
const renumbered = new Map<string, string>();
const RENUMBERED_MAX = 256;

function shift(sql: string, by: number): string {
  let out = '';
  let i = 0;
  while (i < sql.length) {
    const c = sql[i]!;
    const next = sql[i + 1];
    let end: number;
    if (c === "'" || c === '"') {
      // Quoted text or name; a doubled quote inside is part of it.
      end = i + 1;
      for (;;) {
        const q = sql.indexOf(c, end);
        if (q < 0) throw new Error('renumber: unterminated quote in a carried statement');
        if (sql[q + 1] === c) end = q + 2;
        else {
          end = q + 1;
          break;
        }
      }
    } else if (c === '-' && next === '-') {
      const nl = sql.indexOf('\n', i);
      end = nl < 0 ? sql.length : nl;
    } else if (c === '/' && next === '*') {
      const close = sql.indexOf('*/', i + 2);
      if (close < 0) throw new Error('renumber: unterminated comment in a carried statement');
      end = close + 2;
    } else if (c === '$' && next !== undefined && /[0-9]/.test(next)) {
      end = i + 1;
      while (end < sql.length && /[0-9]/.test(sql[end]!)) end++;
      out += `$${Number(sql.slice(i + 1, end)) + by}`;
      i = end;
      continue;
    } else if (c === '$') {
      throw new Error('renumber: a dollar-quoted string in a carried statement');
    } else {
      end = i + 1;
    }
    out += sql.slice(i, end);
    i = end;
  }
  return out;
}
