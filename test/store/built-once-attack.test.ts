import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { builtOnce } from '../../src/store/built-once.js';
import type { Store } from '../../src/store/db.js';
import { openTestStore, testEngines } from '../support/engines.js';

/**
 * The guard of src/store/built-once.ts: "a marker that ends up in the SQL or inside a constant
 * throws on the first run of that shape" (docs/decisions.md, session p). The helper's attack of
 * session p found three ways past its first version (which looked only for the text
 * "[object Object]" and for markers inside array constants), each bound silently on every run
 * with the marker's data instead of the caller's. Each is now refused.
 */
describe.each(testEngines())('statements built once: markers that escape the guard (%s)', (engine) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    ({ store, cleanup } = await openTestStore(engine));
  });
  afterAll(async () => {
    await cleanup?.();
  });

  /** The value a run answered with, or 'refused: <message>' when it was refused. */
  const outcome = <T>(p: Promise<T>): Promise<T | string> =>
    p.then(
      (v) => v,
      (e: Error) => `refused: ${e.message}`,
    );

  it('a value serialised by the builder (JSON.stringify) is refused', async () => {
    const tagsText = builtOnce((db, v: { tags: string[] }) => sql<{ t: string }>`select ${JSON.stringify(v.tags)} as t`);
    for (const tags of [['a'], ['b']]) {
      const got = await outcome(tagsText.first(store.db, { tags }).then((r) => r?.t));
      // Before: '[{"index":0}]' on both engines, for every run.
      expect(String(got)).toMatch(/^refused: .*not a parameter/);
    }
  });

  it('a value used in arithmetic (a clamped limit) is refused', async () => {
    const clamped = builtOnce((db, v: { limit: number }) => sql<{ n: number | string | null }>`select ${Math.min(v.limit, 10)} as n`);
    for (const limit of [3, 20]) {
      const got = await outcome(clamped.first(store.db, { limit }).then((r) => r?.n));
      // Before: NaN was the cached constant (SQLite answered null, PostgreSQL 'NaN'), whatever the limit.
      expect(String(got)).toMatch(/^refused: .*not a parameter/);
    }
  });

  it('an object given as one value (a JSON document) is refused', async () => {
    const doc = builtOnce((db, v: { doc: Record<string, unknown> }) => sql<{ d: unknown }>`select ${v.doc} as d`);
    for (const d of [{ a: 1 }, { a: 2 }]) {
      const got = await outcome(doc.first(store.db, { doc: d }).then((r) => r?.d));
      // Before: SQLite refused to bind an object (better-sqlite3); PostgreSQL (pg serialises it
      // as JSON) stored '{"a":{"index":0}}' on every run.
      expect(String(got)).toMatch(/^refused: .*not a parameter/);
    }
  });
});
