import fs from 'node:fs';

/**
 * Group commit for the embedded SQLite store (issue 19).
 *
 * The connection runs WAL with `synchronous = NORMAL`: a COMMIT writes its frames to the WAL
 * file (the OS holds them: a `kill -9` loses nothing) but does not wait for the disk. Before a
 * write is acknowledged, `durable()` waits for an `fdatasync` of the WAL that began after the
 * write committed. The sync runs on libuv's thread pool, so while one is in flight the event loop
 * runs other requests' transactions; they all wait for the next sync, which covers every one of
 * them: several transactions acknowledged after one sync, none before it. Syncs run one at a
 * time, each as soon as the previous one ends and a commit is waiting.
 *
 * A failed sync is not retried: after an `fdatasync` error Linux may mark the unwritten pages
 * clean, so a second sync can succeed without the data being on disk (PostgreSQL's "fsyncgate").
 * The store stops acknowledging writes instead (`failure`): every waiter and every later
 * write gets a 503 until the node restarts and SQLite recovers from what is on disk.
 */
/** The code of the error a failed sync leaves (a 503 `unavailable`, isDatabaseUnavailable). */
export const WAL_SYNC_FAILED = 'CV_WAL_SYNC_FAILED';

export class WalSync {
  /** Commits made on the connection (each bumps it once it has returned). */
  private written = 0;
  /** Every commit up to this count is on disk. */
  private synced = 0;
  private syncing = false;
  private waiters: { upTo: number; resolve: () => void; reject: (e: Error) => void }[] = [];
  private fd: number | null = null;
  private failed: Error | null = null;
  /** Syncs made (each may cover many commits): the /metrics figure and the test's evidence. */
  syncs = 0;
  /** Commits the syncs made durable. */
  commits = 0;

  constructor(
    private readonly walPath: string,
    private readonly onFailure: (err: Error) => void = () => {},
  ) {}

  /** The connection committed a write (a COMMIT, or a write statement outside a transaction). */
  noteCommit(): void {
    this.written++;
  }

  /** Set once a sync failed: writes are refused from then on. */
  get failure(): Error | null {
    return this.failed;
  }

  /** True when a commit has not reached the disk yet. */
  get pending(): boolean {
    return this.synced < this.written;
  }

  /** Resolves once every commit made so far is on disk. */
  durable(): Promise<void> {
    if (this.failed) return Promise.reject(this.failed);
    const upTo = this.written;
    if (this.synced >= upTo) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.waiters.push({ upTo, resolve, reject });
      if (!this.syncing) this.sync();
    });
  }

  private sync(): void {
    this.syncing = true;
    // Commits made from here on may not be covered: the sync may already be past their frames.
    const covers = this.written;
    let fd: number;
    try {
      // A log unlinked since it was opened (only if every connection closed, or the journal mode
      // changed) would take syncs that reach no file SQLite writes: open the current one.
      if (this.fd !== null && fs.fstatSync(this.fd).nlink === 0) {
        fs.closeSync(this.fd);
        this.fd = null;
      }
      fd = this.fd ??= fs.openSync(this.walPath, 'r+');
    } catch (e) {
      this.fail(e as Error);
      return;
    }
    fs.fdatasync(fd, (err) => {
      if (err) {
        this.fail(err);
        return;
      }
      this.syncs++;
      this.commits += covers - this.synced;
      this.synced = covers;
      const done = this.waiters.filter((w) => w.upTo <= covers);
      this.waiters = this.waiters.filter((w) => w.upTo > covers);
      for (const w of done) w.resolve();
      if (this.waiters.length > 0) this.sync();
      else this.syncing = false;
    });
  }

  /** Stops acknowledging for good, as a failed sync does (a checkpoint's failed sync). */
  stop(cause: Error): void {
    if (!this.failed) this.fail(cause);
  }

  private fail(cause: Error): void {
    this.syncing = false;
    const err = Object.assign(new Error('A write could not be made durable (the sync of the database log failed); restart the node', { cause }), {
      code: WAL_SYNC_FAILED,
    });
    this.failed = err;
    const waiting = this.waiters;
    this.waiters = [];
    for (const w of waiting) w.reject(err);
    this.onFailure(err);
  }

  /** Waits for the commits made so far, then lets go of the WAL (the store is closing). */
  async close(): Promise<void> {
    await this.durable().catch(() => undefined);
    if (this.fd !== null) fs.closeSync(this.fd);
    this.fd = null;
  }
}
