import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { builtOnce } from '../../src/store/built-once.js';
import type { Store } from '../../src/store/db.js';
import { inTransaction } from '../../src/store/tx.js';
import { openTestStore, testEngines } from '../support/engines.js';

/**
 * Statements built once per shape of their values (src/store/built-once.ts) answer exactly as
 * the builder run afresh: values of every kind, lists and rows of changing lengths, columns left
 * out, the key that names a table, both engines, inside a transaction and outside.
 */
describe.each(testEngines())('statements built once (%s)', (engine) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    ({ store, cleanup } = await openTestStore(engine));
    await sql`create table bo_items (id integer primary key, ws text not null, name text, body ${sql.raw(engine === 'postgres' ? 'bytea' : 'blob')}, n integer default 7)`.execute(
      store.db,
    );
    await sql`create table bo_other (id integer primary key, ws text not null, name text)`.execute(store.db);
  });
  afterAll(async () => {
    await cleanup?.();
  });

  type Row = { id: number; ws: string; name: string | null; body?: Buffer | null; n?: number };
  // The test tables are not in the service's schema: the builder is typed loosely here.
  const insert = builtOnce((db, rows: Row[]) => (db as never as import('kysely').Kysely<{ bo_items: Row }>).insertInto('bo_items').values(rows));
  const byNames = builtOnce((db, v: { ws: string; names: string[] }) =>
    (db as never as import('kysely').Kysely<{ bo_items: Row }>)
      .selectFrom('bo_items')
      .select(['id', 'name', 'n'])
      .where('ws', '=', v.ws)
      .where('name', 'in', v.names)
      .orderBy('id'),
  );
  const rename = builtOnce((db, v: { id: number; name: string | null }) =>
    (db as never as import('kysely').Kysely<{ bo_items: Row }>).updateTable('bo_items').set({ name: v.name }).where('id', '=', v.id),
  );
  const countIn = builtOnce((db, v: { ws: string }, table) => sql<{ c: number | string }>`select count(*) as c from ${sql.table(table)} where ws = ${v.ws}`);

  it('inserts rows of changing number and columns, and reads them back by lists of changing length', async () => {
    await insert.execute(store.db, [{ id: 1, ws: 'a', name: 'one', body: Buffer.from([0, 1, 255]), n: 1 }]);
    await insert.execute(store.db, [
      { id: 2, ws: 'a', name: 'two', body: null, n: 2 },
      { id: 3, ws: 'a', name: "it's \u2028 three", body: null, n: 3 },
    ]);
    // `n` left out: the column's default, as the builder does with a column it is not given.
    await insert.execute(store.db, [{ id: 4, ws: 'b', name: 'four' }]);
    await insert.execute(store.db, [{ id: 5, ws: 'a', name: 'five', body: undefined, n: undefined }]);
    expect(await byNames.rows(store.db, { ws: 'a', names: ['one'] })).toEqual([{ id: 1, name: 'one', n: 1 }]);
    expect(await byNames.rows(store.db, { ws: 'a', names: ['two', "it's \u2028 three", 'four', 'five'] })).toEqual([
      { id: 2, name: 'two', n: 2 },
      { id: 3, name: "it's \u2028 three", n: 3 },
      { id: 5, name: 'five', n: 7 },
    ]);
    expect(await byNames.rows(store.db, { ws: 'b', names: ['one', 'four'] })).toEqual([{ id: 4, name: 'four', n: 7 }]);
    const body = await sql<{ body: Uint8Array }>`select body from bo_items where id = 1`.execute(store.db);
    expect([...body.rows[0]!.body]).toEqual([0, 1, 255]);
  });

  it('runs in the caller’s transaction: a rollback takes its writes back', async () => {
    await expect(
      inTransaction(store, null, async (trx) => {
        const r = await rename.execute(trx, { id: 1, name: 'renamed' });
        expect(r.numAffectedRows).toBe(1n);
        expect(await byNames.rows(trx, { ws: 'a', names: ['renamed'] })).toEqual([{ id: 1, name: 'renamed', n: 1 }]);
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect(await byNames.rows(store.db, { ws: 'a', names: ['one', 'renamed'] })).toEqual([{ id: 1, name: 'one', n: 1 }]);
    // null is a value like any other (`= null` matches nothing, as with the builder).
    expect((await rename.execute(store.db, { id: 2, name: null })).numAffectedRows).toBe(1n);
    expect(await byNames.rows(store.db, { ws: 'a', names: ['two'] })).toEqual([]);
  });

  it('the key names a table: each key is its own statement', async () => {
    await sql`insert into bo_other (id, ws, name) values (1, 'a', 'x')`.execute(store.db);
    expect(Number((await countIn.first(store.db, { ws: 'a' }, 'bo_items'))!.c)).toBe(4);
    expect(Number((await countIn.first(store.db, { ws: 'a' }, 'bo_other'))!.c)).toBe(1);
    expect(Number((await countIn.first(store.db, { ws: 'b' }, 'bo_items'))!.c)).toBe(1);
  });

  it('refuses what it cannot bind: a value turned into text, an expression or a date as a value', async () => {
    const intoText = builtOnce((db, v: { ws: string }) => sql`select count(*) as c from bo_items where ws = ${`prefix-${v.ws}`}`);
    await expect(intoText.execute(store.db, { ws: 'a' })).rejects.toThrow(/not a parameter/);
    const intoName = builtOnce((db, v: { table: string }) => sql`select count(*) as c from ${sql.table(v.table)}`);
    // (Kysely itself refuses a marker as a table's name.)
    await expect(intoName.execute(store.db, { table: 'bo_items' })).rejects.toThrow();
    await expect(byNames.execute(store.db, { ws: sql`'a'` as never, names: ['one'] })).rejects.toThrow(/plain values/);
    await expect(byNames.execute(store.db, { ws: new Date() as never, names: ['one'] })).rejects.toThrow(/plain values/);
  });

  it('many shapes: past those kept, new ones are still built and answered right', async () => {
    for (let k = 1; k <= 80; k++) {
      const names = Array.from({ length: k }, (_, i) => (i === 0 ? 'one' : `none-${i}`));
      expect(await byNames.rows(store.db, { ws: 'a', names })).toEqual([{ id: 1, name: 'one', n: 1 }]);
    }
  });
});
