import { CompiledQuery, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/db.js';
import { executeCarrying, renumber, withCarried } from '../../src/store/carried.js';
import { inTransaction } from '../../src/store/tx.js';
import { openTestStore, testEngines } from '../support/engines.js';

/**
 * Issue 18: writes whose results nobody reads ride with the next statement (src/store/carried.ts):
 * on PostgreSQL as data-modifying CTEs in front of it, one round trip under the workspace's lock
 * instead of several. Their parameters are numbered after one another; placeholders inside quoted
 * text, quoted names and comments are left alone.
 */
describe('renumber and withCarried (pure)', () => {
  it('moves placeholders outside quotes and comments, and only those', () => {
    expect(renumber('select $1, $2, $10', 3)).toBe('select $4, $5, $13');
    expect(renumber(`select '$1', 'it''s $2', "col$1", $1 -- it's $1\n, $2 /* $3 */`, 5)).toBe(
      `select '$1', 'it''s $2', "col$1", $6 -- it's $1\n, $7 /* $3 */`,
    );
    expect(renumber('select $1', 0)).toBe('select $1');
  });

  it('refuses what it cannot read safely: dollar-quoted text, an unterminated quote or comment', () => {
    expect(() => renumber('select $x$ $1 $x$, $1', 1)).toThrow(/dollar-quoted/);
    expect(() => renumber("select 'open $1", 1)).toThrow(/unterminated quote/);
    expect(() => renumber('select 1 /* $1', 1)).toThrow(/unterminated comment/);
  });

  it('puts the carried writes in front, merging with a WITH list of the statement itself', () => {
    const a = CompiledQuery.raw('insert into a values ($1, $2)', [1, 'x']);
    const b = CompiledQuery.raw('insert into b values ($1)', ['y']);
    const plain = withCarried([a, b], CompiledQuery.raw('select * from c where id = $1', [7]));
    expect(plain.sql).toBe('with cv_carried_0 as (insert into a values ($1, $2)), cv_carried_1 as (insert into b values ($3)) select * from c where id = $4');
    expect(plain.parameters).toEqual([1, 'x', 'y', 7]);
    const own = withCarried([b], CompiledQuery.raw('WITH r AS (select $1 as v) select v from r', [2]));
    expect(own.sql).toBe('with cv_carried_0 as (insert into b values ($1)), r AS (select $2 as v) select v from r');
    const recursive = withCarried([b], CompiledQuery.raw('with recursive r(n) as (select $1 union all select n + 1 from r where n < 3) select n from r', [1]));
    expect(recursive.sql).toMatch(/^with recursive cv_carried_0 as \(insert into b values \(\$1\)\), r\(n\) as \(select \$2 /);
  });
});

describe.each(testEngines())('executeCarrying on %s', (engine) => {
  let store: Store;
  let cleanup: () => Promise<void>;

  beforeAll(async () => {
    ({ store, cleanup } = await openTestStore(engine));
    await sql`create table carry_a (id integer primary key, v text not null)`.execute(store.db);
    await sql`create table carry_b (id integer primary key, w text not null)`.execute(store.db);
  });
  afterAll(async () => {
    await cleanup?.();
  });

  const insertA = (id: number, v: string) => sql`insert into carry_a (id, v) values (${id}, ${v})`.compile(store.db);
  const insertB = (id: number, w: string) => sql`insert into carry_b (id, w) values (${id}, ${w})`.compile(store.db);

  it('runs the carried writes once each, with their own values, and answers the statement', async () => {
    const r = await executeCarrying(store.db, [insertA(1, 'one'), insertB(2, 'two')], sql<{ answer: string }>`select ${'asked'} as answer`.compile(store.db));
    expect(r.rows).toEqual([{ answer: 'asked' }]);
    expect((await sql<{ id: number; v: string }>`select id, v from carry_a`.execute(store.db)).rows).toEqual([{ id: 1, v: 'one' }]);
    expect((await sql<{ id: number; w: string }>`select id, w from carry_b`.execute(store.db)).rows).toEqual([{ id: 2, w: 'two' }]);
  });

  it('a carried write that fails fails the statement, and its transaction keeps nothing', async () => {
    await expect(
      inTransaction(store, null, async (trx) => {
        await executeCarrying(trx, [insertB(3, 'three'), insertA(1, 'again')], sql`select 1 as one`.compile(trx));
      }),
    ).rejects.toThrow();
    expect(Number((await sql<{ n: number | string }>`select count(*) as n from carry_b where id = 3`.execute(store.db)).rows[0]!.n)).toBe(0);
  });

  it('writes past the 65,535 parameters of one PostgreSQL statement run on their own first: every row lands (a page with 7,300 links answered 503 without)', async () => {
    await sql`create table carry_c (id integer primary key)`.execute(store.db);
    const batch = (from: number) => {
      const ids = Array.from({ length: 25_000 }, (_, i) => from + i);
      return CompiledQuery.raw(`insert into carry_c (id) values ${ids.map((_, i) => (engine === 'postgres' ? `($${i + 1})` : '(?)')).join(', ')}`, ids);
    };
    const r = await executeCarrying(store.db, [batch(0), batch(25_000), batch(50_000)], sql<{ n: number | string }>`select ${'ok'} as n`.compile(store.db));
    expect(r.rows).toEqual([{ n: 'ok' }]);
    const count = await sql<{ n: number | string; top: number | string }>`select count(*) as n, max(id) as top from carry_c`.execute(store.db);
    expect(Number(count.rows[0]!.n)).toBe(75_000);
    expect(Number(count.rows[0]!.top)).toBe(74_999);
  });

  it('the statement a write rides with does not see it on PostgreSQL (one snapshot), and does on SQLite: it must not read it', async () => {
    const r = await executeCarrying(
      store.db,
      [insertA(10, 'ten')],
      sql<{ n: number | string }>`select count(*) as n from carry_a where id = 10`.compile(store.db),
    );
    expect(Number(r.rows[0]!.n)).toBe(engine === 'postgres' ? 0 : 1);
    expect(Number((await sql<{ n: number | string }>`select count(*) as n from carry_a where id = 10`.execute(store.db)).rows[0]!.n)).toBe(1);
  });
});
