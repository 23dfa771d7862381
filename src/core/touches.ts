import type { Store } from '../store/db.js';

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
        await this.store.db.transaction().execute(async (trx) => {
          for (const [id, at] of batch) {
            await trx.updateTable('pages').set({ last_touched_at: at }).where('id', '=', id).execute();
          }
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
