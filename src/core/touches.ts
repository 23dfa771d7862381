import { sql } from 'kysely';
import type { Dialect, Executor, Store } from '../store/db.js';

/** Touches written by one statement at most. */
const FLUSH_ROWS = 5_000;

/**
 * Writes touches `[page id, at]` in one statement. A statement per page had cost a round trip
 * each on PostgreSQL: under 2,400 reads a second the flush every two seconds ran ~4,800 of them,
 * a connection and about a core's tenth busy for it (found measuring reads, issue 18).
 */
async function touchRows(db: Executor, dialect: Dialect, rows: readonly (readonly [string, string])[]): Promise<void> {
  if (dialect === 'postgres') {
    await sql`update pages set last_touched_at = t.at from unnest(${rows.map((r) => r[0])}::text[], ${rows.map((r) => r[1])}::text[]) as t(id, at)
      where pages.id = t.id`.execute(db);
    return;
  }
  await sql`update pages set last_touched_at = json_extract(t.value, '$[1]') from json_each(${JSON.stringify(rows)}) as t
    where pages.id = json_extract(t.value, '$[0]')`.execute(db);
}

/**
 * Reads record `last_touched_at`. Writing a row per read would put an fsync on every GET,
 * so touches are buffered and flushed in one transaction every few seconds and at
 * shutdown. A crash loses at most that window of read timestamps, never content.
 */
export class TouchBuffer {
  private pending = new Map<string, string>();
  /** The batch being written: still answered by peek until its transaction commits. */
  private inflight = new Map<string, string>();
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly store: Store,
    private readonly intervalMs = 2000,
  ) {}

  start(): void {
    this.timer ??= setInterval(() => void this.flush(), this.intervalMs);
    this.timer.unref();
  }

  touch(pageId: string, at: string): void {
    this.pending.set(pageId, at);
  }

  /** The buffered touch of a page, so reads see their own touch before it is flushed. */
  peek(pageId: string): string | undefined {
    return this.pending.get(pageId) ?? this.inflight.get(pageId);
  }

  async flush(): Promise<void> {
    this.flushing = this.flushing.then(async () => {
      if (this.pending.size === 0) return;
      const batch = this.pending;
      this.pending = new Map();
      this.inflight = batch;
      try {
        const rows = [...batch];
        await this.store.db.transaction().execute(async (trx) => {
          for (let i = 0; i < rows.length; i += FLUSH_ROWS) await touchRows(trx, this.store.dialect, rows.slice(i, i + FLUSH_ROWS));
        });
      } catch {
        // The database is down: keep the touches for the next round rather than drop them.
        for (const [id, at] of batch) if (!this.pending.has(id)) this.pending.set(id, at);
      } finally {
        this.inflight = new Map();
      }
    });
    return this.flushing;
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.flush();
  }
}
