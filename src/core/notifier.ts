import { EventEmitter } from 'node:events';

/**
 * Wakes long-polls in this process when a principal's inbox changes. With PostgreSQL the
 * store also relays NOTIFY from other nodes into `wake`, so any node's poll is woken.
 */
export class Notifier {
  private readonly emitter = new EventEmitter();
  /** Long-polls waiting in this process now (the inbox waiters gauge of /metrics). */
  waiting = 0;

  constructor() {
    // Many long-polls may wait at once; they are bounded by the request limits, not here.
    this.emitter.setMaxListeners(0);
  }

  static key(workspaceId: string, principalId: string): string {
    return `${workspaceId}:${principalId}`;
  }

  wake(key: string): void {
    this.emitter.emit(key);
  }

  /** Resolves true when woken, false when `ms` passes or the signal aborts. */
  wait(key: string, ms: number, signal?: AbortSignal): Promise<boolean> {
    this.waiting++;
    return new Promise((resolve) => {
      let settled = false;
      const done = (woken: boolean) => {
        if (settled) return;
        settled = true;
        this.waiting--;
        clearTimeout(timer);
        this.emitter.off(key, onWake);
        signal?.removeEventListener('abort', onAbort);
        resolve(woken);
      };
      const onWake = () => done(true);
      const onAbort = () => done(false);
      const timer = setTimeout(() => done(false), ms);
      this.emitter.on(key, onWake);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}
