import { sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type Store, type StoreVersion } from '../../src/store/db.js';
import { compareVersions, pinnedSnapshot, pinSnapshot, ReadCache, readSnapshot, type ReadCacheLimits } from '../../src/store/read-cache.js';
import { createTestDatabase, testEngines } from '../support/engines.js';

/** A cache on `store` whose loads are counted, answering `value-<key>-<loads>`; `get` takes the store's state now unless given one. */
function countedCache(store: Store, limits: ReadCacheLimits) {
  const cache = new ReadCache<string>(store, limits);
  let loads = 0;
  const get = async (key: string, snapshot?: StoreVersion | null) =>
    cache.through(
      key,
      async () => {
        loads++;
        return `value-${key}-${loads}`;
      },
      snapshot === undefined ? await readSnapshot(store) : snapshot,
    );
  return { get, loads: () => loads };
}

/**
 * src/store/read-cache.ts on a real SQLite store: what is kept goes at the next commit (this
 * connection's or another's), the limits hold (entries and weight), and a request whose
 * snapshot is older than what was kept neither uses nor fills it.
 */
describe('ReadCache (sqlite)', () => {
  let store: Store;
  let other: Store;
  let cleanup: () => Promise<void>;

  beforeAll(async () => {
    const tdb = await createTestDatabase('sqlite');
    cleanup = tdb.cleanup;
    store = await openStore({ dataDir: tdb.dataDir });
    // A second connection to the same file, as another node or the CLI would open.
    other = await openStore({ dataDir: tdb.dataDir });
    await sql`create table cache_probe (n integer)`.execute(store.db);
  });
  afterAll(async () => {
    await other?.close();
    await store?.close();
    await cleanup?.();
  });

  const counted = (limits: ReadCacheLimits) => countedCache(store, limits);

  it('keeps a value until a commit on this connection, then reads again', async () => {
    const c = counted({ entries: 10 });
    expect(await c.get('a')).toBe('value-a-1');
    expect(await c.get('a')).toBe('value-a-1');
    await sql`insert into cache_probe values (1)`.execute(store.db);
    expect(await c.get('a')).toBe('value-a-2');
    expect(c.loads()).toBe(2);
  });

  it('drops what it kept when another connection commits', async () => {
    const c = counted({ entries: 10 });
    expect(await c.get('b')).toBe('value-b-1');
    await sql`insert into cache_probe values (2)`.execute(other.db);
    expect(await c.get('b')).toBe('value-b-2');
    expect(await c.get('b')).toBe('value-b-2');
  });

  it('a request whose snapshot predates one already seen reads afresh and keeps nothing', async () => {
    const c = counted({ entries: 10 });
    const early = (await readSnapshot(store))!;
    await sql`insert into cache_probe values (3)`.execute(other.db);
    expect(await c.get('c')).toBe('value-c-1');
    expect(await c.get('c', early)).toBe('value-c-2');
    expect(await c.get('c')).toBe('value-c-1');
  });

  it('keeps at most `entries`, dropping the oldest first', async () => {
    const c = counted({ entries: 2 });
    await c.get('x');
    await c.get('y');
    await c.get('z');
    expect(c.loads()).toBe(3);
    await c.get('z');
    await c.get('y');
    expect(c.loads()).toBe(3);
    await c.get('x');
    expect(c.loads()).toBe(4);
  });

  it('keeps at most `weight`, and never one value heavier than it', async () => {
    const cache = new ReadCache<string>(store, { entries: 100, weight: 10, weigh: (v) => (v as string).length });
    let loads = 0;
    const get = async (key: string, value: string) =>
      cache.through(
        key,
        async () => {
          loads++;
          return value;
        },
        await readSnapshot(store),
      );
    await get('a', '1234');
    await get('b', '5678');
    await get('a', '1234');
    expect(loads).toBe(2);
    await get('c', '9012');
    await get('a', '1234');
    expect(loads).toBe(4);
    await get('big', '12345678901');
    await get('big', '12345678901');
    expect(loads).toBe(6);
  });

  it('keeps nothing without a snapshot (what PostgreSQL gives)', async () => {
    const c = counted({ entries: 10 });
    await c.get('p', null);
    await c.get('p', null);
    expect(c.loads()).toBe(2);
  });
});

/**
 * The same on PostgreSQL, where the state is the database's snapshot (`pg_current_snapshot()`):
 * a commit by any connection (another node) drops what was kept, a value read while a
 * transaction was open is never served once it has committed, and an older snapshot neither uses
 * nor displaces a newer one.
 */
describe.runIf(testEngines().includes('postgres'))('ReadCache (postgres)', () => {
  let store: Store;
  let other: Store;
  let client: pg.Client;
  let cleanup: () => Promise<void>;

  beforeAll(async () => {
    const tdb = await createTestDatabase('postgres');
    cleanup = tdb.cleanup;
    store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
    other = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
    client = new pg.Client({ connectionString: tdb.databaseUrl });
    await client.connect();
    await sql`create table cache_probe (n integer)`.execute(store.db);
  });
  afterAll(async () => {
    await client?.end();
    await other?.close();
    await store?.close();
    await cleanup?.();
  });

  const counted = () => countedCache(store, { entries: 10 });

  /**
   * The snapshot is the cluster's: a commit in any database of it (another test file's, running
   * beside this one) moves it too, and a value kept is read again. A body that failed is tried
   * again (a defect fails every time; another database's commit seldom twice in a row).
   */
  const untilQuiet = async (body: () => Promise<void>) => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await body();
      } catch (e) {
        if (attempt >= 5) throw e;
      }
    }
  };

  it('keeps a value until any connection commits; a read-only query changes nothing', async () => {
    await untilQuiet(async () => {
      const c = counted();
      expect(await c.get('a')).toBe('value-a-1');
      await sql`select count(*) from cache_probe`.execute(other.db);
      expect(await c.get('a')).toBe('value-a-1');
      await sql`insert into cache_probe values (1)`.execute(other.db);
      expect(await c.get('a')).toBe('value-a-2');
      await sql`insert into cache_probe values (2)`.execute(store.db);
      expect(await c.get('a')).toBe('value-a-3');
      expect(await c.get('a')).toBe('value-a-3');
    });
  });

  it('what was read while a transaction was open is read again once it has committed', async () => {
    await untilQuiet(async () => {
      const c = counted();
      await client.query('begin');
      try {
        await client.query('insert into cache_probe values (3)');
        const during = (await readSnapshot(store)) as string;
        expect(await c.get('b', during)).toBe('value-b-1');
        expect(await c.get('b')).toBe('value-b-1');
        await client.query('commit');
        const after = (await readSnapshot(store)) as string;
        expect(after).not.toBe(during);
        expect(compareVersions(during, after)).toBe('older');
        expect(compareVersions(after, during)).toBe('other');
        expect(await c.get('b')).toBe('value-b-2');
        // The older snapshot reads afresh and keeps nothing; the newer entry stays.
        expect(await c.get('b', during)).toBe('value-b-3');
        expect(await c.get('b')).toBe('value-b-2');
      } finally {
        await client.query('rollback');
      }
    });
  });

  it('a principal keeps the newer of two pinned snapshots', async () => {
    const owner = {};
    await client.query('begin');
    await client.query('insert into cache_probe values (4)');
    const during = await readSnapshot(store);
    await client.query('commit');
    const after = await readSnapshot(store);
    pinSnapshot(owner, after);
    pinSnapshot(owner, during);
    expect(await pinnedSnapshot(store, owner)).toBe(after);
  });
});
