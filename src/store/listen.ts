import pg from 'pg';

/**
 * Relays PostgreSQL NOTIFY on one channel to a callback, over a dedicated connection that
 * reconnects after a failure. Any node's change wakes waiters on every node.
 */
export function listen(databaseUrl: string, channel: string, onPayload: (payload: string) => void): { ready: Promise<void>; close(): Promise<void> } {
  let client: pg.Client | undefined;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;

  const connect = async (): Promise<void> => {
    if (closed) return;
    const c = new pg.Client({ connectionString: databaseUrl });
    c.on('notification', (msg) => {
      if (msg.channel === channel && msg.payload) onPayload(msg.payload);
    });
    c.on('error', () => schedule());
    c.on('end', () => schedule());
    try {
      await c.connect();
      await c.query(`LISTEN ${channel}`);
      client = c;
    } catch {
      c.end().catch(() => undefined);
      schedule();
    }
  };
  const schedule = () => {
    client = undefined;
    if (closed || retry) return;
    retry = setTimeout(() => {
      retry = undefined;
      void connect();
    }, 1000);
    retry.unref();
  };
  const ready = connect();
  return {
    ready,
    close: async () => {
      closed = true;
      if (retry) clearTimeout(retry);
      await client?.end().catch(() => undefined);
    },
  };
}
