import net from 'node:net';
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IMPORT_LIMITS } from '../../src/core/import/limits.js';
import { openStore } from '../../src/store/db.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { exited, spawnService } from '../support/service-process.js';
import { Client, createAgentWithKey, signupHuman } from '../support/server.js';

/**
 * Issue 18: a SIGTERM (an orchestrator's stop, a rolling restart) stops accepting connections,
 * answers what is in flight, ends long-polls with their normal empty answer, gives back the
 * leases of the jobs it held and exits 0. The service runs as its own process, as an operator
 * runs it.
 */

const METRICS_TOKEN = 'shutdown-test-metrics-token-0123456789';
const FILES = 4000;
const BATCH = IMPORT_LIMITS.batchFiles;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/**
 * A request written by hand on its own connection: headers now with `Expect: 100-continue`
 * (the server's `100 Continue` proves it accepted the connection and is handling the request),
 * the body when the test says.
 */
function slowRequest(url: string, method: string, path: string, headers: Record<string, string>, body: string) {
  const u = new URL(url);
  const socket = net.connect(Number(u.port), u.hostname);
  let buf = '';
  let onContinue: () => void;
  const continued = new Promise<void>((r) => (onContinue = r));
  const answer = new Promise<RawAnswer>((resolve, reject) => {
    const parse = (): RawAnswer | null => {
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return null;
      const [statusLine, ...lines] = buf.slice(0, end).split('\r\n');
      const hs: Record<string, string> = {};
      for (const l of lines) {
        const i = l.indexOf(':');
        hs[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
      }
      const length = Number(hs['content-length'] ?? NaN);
      const rest = buf.slice(end + 4);
      if (!Number.isNaN(length) && Buffer.byteLength(rest) < length) return null;
      return { status: Number(statusLine!.split(' ')[1]), headers: hs, body: rest };
    };
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => {
      buf += d;
      if (buf.startsWith('HTTP/1.1 100 Continue\r\n\r\n')) {
        buf = buf.slice('HTTP/1.1 100 Continue\r\n\r\n'.length);
        onContinue();
      }
      const a = parse();
      if (a) resolve(a);
    });
    socket.on('error', reject);
    socket.on('close', () => reject(new Error(`connection closed before a complete answer: ${JSON.stringify(buf)}`)));
  });
  const head = Object.entries({ host: u.host, 'content-length': String(Buffer.byteLength(body)), expect: '100-continue', ...headers })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  socket.write(`${method} ${path} HTTP/1.1\r\n${head}\r\n`);
  return { continued, answer, sendBody: () => socket.write(body) };
}

/** Resolves once a new TCP connection to the port is refused (the server stopped listening). */
async function refused(url: string): Promise<void> {
  const u = new URL(url);
  for (;;) {
    const outcome = await new Promise<'accepted' | 'refused' | string>((resolve) => {
      const s = net.connect(Number(u.port), u.hostname);
      s.once('connect', () => {
        s.destroy();
        resolve('accepted');
      });
      s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code === 'ECONNREFUSED' ? 'refused' : (e.code ?? e.message)));
    });
    if (outcome === 'refused') return;
    // ECONNRESET: the kernel queued the connection as the listener closed, then reset it; the
    // next attempt finds the port closed.
    if (outcome !== 'accepted' && outcome !== 'ECONNRESET') throw new Error(`unexpected connection outcome ${outcome}`);
    await sleep(20);
  }
}

async function inboxWaiters(url: string): Promise<number> {
  const r = await new Client(url, METRICS_TOKEN).get('/metrics');
  expectStatus(r, 200);
  const m = /^cv_inbox_waiters (\d+)$/m.exec(r.text);
  return Number(m?.[1] ?? NaN);
}

describe.each(testEngines())('graceful shutdown on SIGTERM (%s)', (engine) => {
  let tdb: TestDatabase;
  let env: Record<string, string>;
  let svc: { child: ChildProcess; url: string } | undefined;

  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
    env = { DATA_DIR: tdb.dataDir, METRICS_TOKEN, ...(tdb.databaseUrl ? { DATABASE_URL: tdb.databaseUrl } : {}) };
  });

  afterAll(async () => {
    if (svc) {
      svc.child.kill('SIGKILL');
      await exited(svc.child);
    }
    await tdb?.cleanup();
  });

  it('answers the request in flight and the long-poll, refuses new connections, gives back its import lease and exits 0', async () => {
    svc = await spawnService(env);
    const { child, url } = svc;
    const h = await signupHuman(url, 'Stopper');
    const agent = await createAgentWithKey(h.client, [{ action: 'read' }, { action: 'write' }]);

    // A write whose request is in flight: its headers are in (the server said 100 Continue),
    // its body comes only after the signal.
    const content = '# Written during shutdown\n\nThe body arrived after SIGTERM.\n';
    const write = slowRequest(
      url,
      'POST',
      '/api/v1/nodes',
      { authorization: `Bearer ${agent.key}`, 'content-type': 'application/json' },
      JSON.stringify({ path: 'stop/in-flight.md', content }),
    );
    await write.continued;

    // A long-poll waiting for an event that will not come (it may wait 25 s; the grace is 10 s).
    const poll = agent.client.get('/api/v1/inbox?wait=25');
    while ((await inboxWaiters(url)) !== 1) await sleep(20);

    // A big import running in the background: the node holds its lease between batches.
    const files = Array.from({ length: FILES }, (_, i) => ({ path: `d${i % 10}/p${i}.md`, content: `# Page ${i}\n\nbulk${i}\n` }));
    const imp = await h.client.post('/api/v1/import', { space: 'bulk', files });
    expectStatus(imp, 202);
    const statusUrl = imp.body.status_url as string;
    for (;;) {
      const cur = await h.client.get(statusUrl);
      expectStatus(cur, 200);
      expect(cur.body.status, 'the import finished before the signal').not.toBe('done');
      if (cur.body.done >= BATCH) break;
      await sleep(5);
    }

    child.kill('SIGTERM');
    // New connections are refused from now on ...
    await refused(url);
    // ... while the request in flight is still answered in full.
    write.sendBody();
    const answer = await write.answer;
    expect(answer.status, answer.body).toBe(201);
    expect(JSON.parse(answer.body)).toMatchObject({ path: 'stop/in-flight.md' });
    // Its client is told not to reuse the connection.
    expect(answer.headers.connection).toBe('close');

    // The long-poll ends early with its normal empty answer, not a reset.
    const polled = await poll;
    expectStatus(polled, 200);
    expect(polled.body).toEqual({ events: [], next_after: 0 });

    await exited(child);
    expect(child.exitCode).toBe(0);
    svc = undefined;

    // The import's lease was given back: any node may take the job over now, not in 30 s.
    const store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
    try {
      const row = await store.db
        .selectFrom('import_jobs')
        .selectAll()
        .where('id', '=', imp.body.id as string)
        .executeTakeFirstOrThrow();
      expect(row.status).toBe('running');
      expect(Number(row.done)).toBeGreaterThanOrEqual(BATCH);
      expect(Number(row.done)).toBeLessThan(FILES);
      expect(row.claimed_by).toBeNull();
      expect(Date.parse(row.claimed_until!)).toBeLessThanOrEqual(Date.now());
    } finally {
      await store.close();
    }

    // The next node has the acknowledged write and finishes the import.
    svc = await spawnService(env);
    const owner = Object.assign(new Client(svc.url), { cookies: h.client.cookies });
    const page = await new Client(svc.url, agent.key).get(`/api/v1/nodes/${encodeURIComponent('stop/in-flight.md')}`);
    expectStatus(page, 200);
    expect(page.body.content).toBe(content);
    let job = (await owner.get(statusUrl)).body;
    for (let i = 0; i < 600 && job.status !== 'done' && job.status !== 'failed'; i++) {
      await sleep(250);
      job = (await owner.get(statusUrl)).body;
    }
    expect(job).toMatchObject({ status: 'done', done: FILES, created: FILES, error: null });
    expect((await owner.get('/healthz')).body.nodes).toBe(FILES + 1);

    svc.child.kill('SIGTERM');
    await exited(svc.child);
    expect(svc.child.exitCode).toBe(0);
    svc = undefined;
  }, 240_000);
});
