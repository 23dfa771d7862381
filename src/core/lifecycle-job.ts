import type { CoreContext } from './context.js';
import { nextSlotStart, runScheduled, type ScheduledRun } from './lifecycle.js';

/** A look that failed (the database away) is tried again this much later, while its slot lasts. */
const RETRY_MS = 60_000;
/** setTimeout's longest delay; a later slot is reached in several waits. */
const MAX_WAIT_MS = 2 ** 31 - 1;

/**
 * The lifecycle job's timer on one node (started and stopped with the server). It looks once at
 * start (a slot missed while every node was down runs then) and then at the start of every slot;
 * each look runs the slot for every workspace that has not had it. Which node runs a workspace's
 * slot is decided in the database (runSlot's claim), so any number of nodes may look at once.
 * Looks on one node never overlap.
 */
export class LifecycleScheduler {
  private timer: NodeJS.Timeout | undefined;
  private current: Promise<unknown> | null = null;
  private stopped = false;

  constructor(private readonly ctx: CoreContext) {}

  start(): void {
    if (this.ctx.config.lifecycle.mode === 'off' || this.timer || this.stopped) return;
    this.look();
  }

  private arm(at: number): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        if (Date.now() >= at) this.look();
        else this.arm(at);
      },
      Math.min(Math.max(0, at - Date.now()), MAX_WAIT_MS),
    );
    this.timer.unref();
  }

  private look(): void {
    if (this.current || this.stopped) return;
    const next = nextSlotStart(new Date(), this.ctx.config.lifecycle.intervalS).getTime();
    this.current = this.tick()
      .then(() => this.arm(next))
      .catch((err: unknown) => {
        this.ctx.log?.warn({ err }, 'lifecycle run failed');
        this.arm(Math.min(next, Date.now() + RETRY_MS));
      })
      .finally(() => (this.current = null));
  }

  /** One look at `now` (tests call it with their clock); answers the runs this node made. */
  tick(now = new Date()): Promise<ScheduledRun[]> {
    return runScheduled(this.ctx, now);
  }

  /** Stops the timer and waits for a look in progress (its transaction commits or rolls back first). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.current;
  }
}
