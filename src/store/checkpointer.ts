import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/**
 * Checkpoints of the embedded SQLite store's write-ahead log, off the event loop (issue 19).
 *
 * SQLite's automatic checkpoint runs inside the COMMIT that crosses 1,000 WAL pages: that
 * commit copies the pages into the database file and syncs it, on the thread that serves every
 * request (a commit writes about 90 pages here, so one commit in a dozen paid for it, ~0.3 ms a
 * commit on average and a pause of several ms for the one). Here a worker thread with its own
 * connection runs `wal_checkpoint(PASSIVE)` a moment after writes, which never blocks the
 * writer or readers; the serving connection's automatic checkpoint is off while the worker
 * lives, and comes back on if the worker fails, so the log never grows unchecked.
 */

/** Ask for a checkpoint this long after the first write since the last one. */
const DELAY_MS = 100;

// A CommonJS script run with eval, so it needs no file of its own in the build.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.module);
const db = new Database(workerData.file);
db.pragma('synchronous = NORMAL');
db.pragma('busy_timeout = 1000');
parentPort.on('message', (m) => {
  if (m === 'close') {
    db.close();
    parentPort.close();
    return;
  }
  try {
    const r = db.pragma('wal_checkpoint(PASSIVE)')[0];
    parentPort.postMessage({ ok: true, busy: r.busy, log: r.log, checkpointed: r.checkpointed });
  } catch (e) {
    parentPort.postMessage({ ok: false, error: String((e && e.message) || e), code: String((e && e.code) || '') });
  }
});
parentPort.postMessage({ ready: true });
`;

export interface CheckpointerOptions {
  /** The database file (its `-wal` is checkpointed). */
  file: string;
  /** Turns the serving connection's automatic checkpoint off (the worker is up) or back on. */
  setAutoCheckpoint(on: boolean): void;
  onError?: (err: Error) => void;
  /** A checkpoint failed on an I/O error (its sync, or a write of the file). */
  onIoError?: (err: Error) => void;
}

export class Checkpointer {
  private worker: Worker | null = null;
  private timer: NodeJS.Timeout | undefined;
  private inFlight = false;
  private dirty = false;
  private closing = false;
  /** Checkpoints run (the /metrics figure and the test's evidence). */
  runs = 0;

  constructor(private readonly opts: CheckpointerOptions) {}

  private starting: Promise<void> | null = null;

  /** A write committed: a checkpoint follows shortly (the worker starts with the first write). */
  noteCommit(): void {
    if (this.closing) return;
    if (!this.worker) {
      this.starting ??= this.start().catch((err: Error) => this.opts.onError?.(err));
      return;
    }
    this.dirty = true;
    if (!this.timer && !this.inFlight) this.schedule();
  }

  /** Starts the worker; resolves once its connection is open and the automatic checkpoint is off. */
  private async start(): Promise<void> {
    const module = createRequire(import.meta.url).resolve('better-sqlite3');
    const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { module, file: this.opts.file } });
    await new Promise<void>((resolve, reject) => {
      const onMessage = (m: { ready?: boolean }) => {
        if (!m.ready) return;
        worker.off('error', reject);
        resolve();
      };
      worker.once('message', onMessage);
      worker.once('error', reject);
    });
    if (this.closing) {
      const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
      worker.postMessage('close');
      await exited;
      return;
    }
    // While it runs it does not keep the process alive (close() holds it again to wait for it).
    worker.unref();
    this.worker = worker;
    worker.on('message', (m: { ok?: boolean; error?: string; code?: string }) => {
      this.inFlight = false;
      if (m.ok) this.runs++;
      else if (m.error) {
        const err = new Error(`checkpoint failed: ${m.error}`);
        if (m.code?.startsWith('SQLITE_IOERR')) this.opts.onIoError?.(err);
        this.opts.onError?.(err);
      }
      if (this.dirty) this.schedule();
    });
    worker.on('error', (err) => this.lost(err));
    worker.on('exit', () => {
      if (!this.closing) this.lost(new Error('the checkpoint worker exited'));
    });
    this.opts.setAutoCheckpoint(false);
  }

  private schedule(): void {
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (!this.worker || this.inFlight) return;
      this.dirty = false;
      this.inFlight = true;
      this.worker.postMessage('checkpoint');
    }, DELAY_MS);
    this.timer.unref();
  }

  private lost(err: Error): void {
    this.worker = null;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    // The serving connection checkpoints again by itself: the log must not grow without end.
    this.opts.setAutoCheckpoint(true);
    this.opts.onError?.(err);
  }

  /** Stops the worker (its connection closes first, so the serving one, closing last, tidies the log). */
  async close(): Promise<void> {
    this.closing = true;
    await this.starting;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const w = this.worker;
    this.worker = null;
    if (!w) return;
    w.ref();
    const exited = new Promise<void>((resolve) => w.once('exit', () => resolve()));
    w.postMessage('close');
    await exited;
    this.opts.setAutoCheckpoint(true);
  }
}
