import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SHUTDOWN_GRACE_MS } from '../../src/server.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { exited, freePort, ROOT } from '../support/service-process.js';
import { createAgentWithKey, signupHuman } from '../support/server.js';

/**
 * Issue 18: a rolling restart of two nodes under load loses no request that was acknowledged.
 * Two service processes share one PostgreSQL. Seven clients run for the whole test, each
 * sending its requests to the nodes in turn as a proxy would: two create pages, two update a
 * page of their own with If-Match, one reads what was acknowledged, one (a human) posts
 * mentions and one long-polls the inbox for them. Meanwhile A is stopped with SIGTERM, waited
 * for and started again on the same port, then B.
 *
 * A client does what nginx's `proxy_next_upstream` does: a refused connection, or the 503 a
 * draining node answers before it routes a request, is sent to the other node. A write that
 * got no answer (a reset) is never sent again blindly: the client first looks at whether it
 * landed. Every request carries a tag (`rq=`) in its URL, and each node's request log (read
 * from its stdout) says which tags it received: a request a node received must be answered.
 *
 * The last test sends a burst of long-polls and the SIGTERM right behind them: polls the node
 * received but had not yet parked when the signal came must get their empty answer too.
 */

const HAS_PG = testEngines().includes('postgres');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Writes that must be acknowledged during each restart window (so the test cannot pass idle). */
const WRITES_PER_WINDOW = 5;
/** Writes the restarted node must acknowledge itself before the next node is restarted. */
const WRITES_ON_RESTARTED = 5;

type NodeName = 'A' | 'B' | 'C';

interface NodeProc {
  name: NodeName;
  port: number;
  url: string;
  dataDir: string;
  child?: ChildProcess;
  generation: number;
  /** Keep-alive connections, as a proxy keeps to its upstreams. */
  agent: http.Agent;
  /** Tags of the requests this node's processes logged as received, with the status they logged answering. */
  received: Map<string, { completed?: number; generation: number }>;
  /** `generation:reqId` of the node's log lines to the request's tag. */
  reqTags: Map<string, string>;
  stderr: string;
  /** SIGTERM sent .. process exited, per restart. */
  drains: { from: number; to: number }[];
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  body: any;
}

/** One request as the client saw it. */
interface Sent {
  tag: string;
  node: NodeName;
  method: string;
  path: string;
  t0: number;
  t1: number;
  answer?: Answer;
  /** The network error when no answer came (ECONNREFUSED: never connected). */
  error?: string;
  reusedSocket: boolean;
}

let tagSeq = 0;
const sent: Sent[] = [];

/** Sends one request to one node; never throws: a network error is recorded in `error`. */
function send(node: NodeProc, method: string, p: string, headers: Record<string, string>, json?: unknown, opts: { fresh?: boolean } = {}): Promise<Sent> {
  const tag = `r${++tagSeq}`;
  const full = `${p}${p.includes('?') ? '&' : '?'}rq=${tag}`;
  const body = json === undefined ? undefined : JSON.stringify(json);
  const s: Sent = { tag, node: node.name, method, path: p, t0: performance.now(), t1: 0, reusedSocket: false };
  sent.push(s);
  return new Promise((resolve) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: node.port,
        method,
        path: full,
        agent: opts.fresh ? false : node.agent,
        headers: { ...headers, ...(body !== undefined ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) } : {}) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', (e: NodeJS.ErrnoException) => {
          s.t1 = performance.now();
          s.error = `answer cut: ${e.code ?? e.message}`;
          resolve(s);
        });
        res.on('end', () => {
          s.t1 = performance.now();
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown = text;
          if ((res.headers['content-type'] ?? '').includes('json') && text) {
            try {
              parsed = JSON.parse(text);
            } catch {
              /* kept as text */
            }
          }
          s.answer = { status: res.statusCode ?? 0, headers: res.headers, text, body: parsed };
          resolve(s);
        });
      },
    );
    req.on('error', (e: NodeJS.ErrnoException) => {
      s.t1 = performance.now();
      s.reusedSocket = req.reusedSocket;
      s.error = e.code ?? e.message;
      resolve(s);
    });
    req.end(body);
  });
}

/** Fastify's own answer to a request routed after close() began: nothing of it ran. */
const isClosing503 = (a: Answer | undefined) => a?.status === 503 && (a.body as { error?: unknown })?.error === 'Service Unavailable';

/**
 * A client behind a proxy: requests go to the nodes in turn; a refused connection or a
 * draining node's 503 goes on to the other node. Resolves with the first real answer, or with
 * the first request that got no answer at all (the caller decides what that means).
 */
class Upstreams {
  private turn: number;
  constructor(
    private readonly nodes: NodeProc[],
    start: number,
  ) {
    this.turn = start;
  }

  async call(method: string, p: string, headers: Record<string, string>, json?: unknown): Promise<Sent> {
    const until = performance.now() + 30_000;
    for (let tries = 1; ; tries++) {
      const node = this.nodes[this.turn++ % this.nodes.length]!;
      const s = await send(node, method, p, headers, json);
      if (s.answer && !isClosing503(s.answer)) return s;
      if (s.error !== undefined && s.error !== 'ECONNREFUSED') return s;
      if (performance.now() > until) throw new Error(`no node answered ${method} ${p} for 30 s: last ${s.error ?? s.answer?.status}`);
      // Both nodes refused in a row: one is restarting and the other not listening yet.
      if (tries % this.nodes.length === 0) await sleep(20);
    }
  }
}

/** What a long-poll reset after its node received it means (see the last test of this file). */
const LONG_POLL_BUG =
  'long-polls a node received and then reset: a poll still in its hooks (auth) when SIGTERM runs preClose registers its ' +
  'AbortController after preClose aborted the others (src/http/routes/inbox.ts), waits on, and is cut at the 10 s grace';

const METRICS_TOKEN = 'rolling-restart-metrics-token-0123456789';

function makeNode(name: NodeName, port: number, dataDir: string): NodeProc {
  return {
    name,
    port,
    url: `http://127.0.0.1:${port}`,
    dataDir,
    generation: 0,
    agent: new http.Agent({ keepAlive: true, maxSockets: 32 }),
    received: new Map(),
    reqTags: new Map(),
    stderr: '',
    drains: [],
  };
}

/** Starts the node's process on its port (the same one after a restart) and waits until /readyz is 200. */
async function start(n: NodeProc, env: Record<string, string>): Promise<void> {
  const generation = ++n.generation;
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: ROOT,
    // Requests are logged at info: the log tells which tagged requests reached the node.
    env: {
      ...process.env,
      ...env,
      PORT: String(n.port),
      HOST: '127.0.0.1',
      DATA_DIR: n.dataDir,
      LOG_LEVEL: 'info',
      RATE_LIMITS: 'off',
      METRICS_TOKEN,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  n.child = child;
  readline.createInterface({ input: child.stdout! }).on('line', (line) => {
    let entry: { msg?: string; req?: { url?: string }; res?: { statusCode?: number }; reqId?: string };
    try {
      entry = JSON.parse(line);
    } catch {
      n.stderr += `${line}\n`;
      return;
    }
    const url = entry.req?.url;
    const tag = url ? /[?&]rq=(r\d+)/.exec(url)?.[1] : undefined;
    if (entry.msg === 'incoming request' && tag) {
      n.received.set(tag, { generation });
      if (entry.reqId) n.reqTags.set(`${generation}:${entry.reqId}`, tag);
    } else if (entry.msg === 'request completed' && entry.reqId) {
      const t = n.reqTags.get(`${generation}:${entry.reqId}`);
      const r = t ? n.received.get(t) : undefined;
      if (r) r.completed = entry.res?.statusCode;
    }
  });
  child.stderr!.on('data', (d: Buffer) => {
    n.stderr = (n.stderr + d.toString('utf8')).slice(-20_000);
  });
  for (let i = 0; i < 600; i++) {
    if (child.exitCode !== null) throw new Error(`node ${n.name} exited ${child.exitCode} while starting:\n${n.stderr}`);
    try {
      if ((await fetch(`${n.url}/readyz`)).status === 200) return;
    } catch {
      /* not listening yet */
    }
    await sleep(100);
  }
  child.kill('SIGKILL');
  throw new Error(`node ${n.name} did not become ready:\n${n.stderr}`);
}

/** Long-polls waiting in the node's process now (its /metrics gauge). */
async function inboxWaiters(n: NodeProc): Promise<number> {
  const s = await send(n, 'GET', '/metrics', { authorization: `Bearer ${METRICS_TOKEN}` });
  if (s.answer?.status !== 200) throw new Error(`metrics of ${n.name}: ${s.answer?.status ?? s.error}`);
  return Number(/^cv_inbox_waiters (\d+)$/m.exec(s.answer.text)?.[1] ?? NaN);
}

async function stopAll(list: (NodeProc | undefined)[]): Promise<void> {
  for (const n of list) {
    if (!n) continue;
    n.agent.destroy();
    if (!n.child) continue;
    n.child.kill('SIGKILL');
    await exited(n.child);
  }
}

describe.skipIf(!HAS_PG)('rolling restart of two nodes under load (postgres)', () => {
  let tdb: TestDatabase;
  let dirB: string;
  let nodes: [NodeProc, NodeProc];
  let env: Record<string, string>;

  beforeAll(async () => {
    tdb = await createTestDatabase('postgres');
    dirB = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-node-b-'));
    env = { DATABASE_URL: tdb.databaseUrl! };
    nodes = [makeNode('A', await freePort(), tdb.dataDir), makeNode('B', await freePort(), dirB)];
    // Started together on an empty database: their migrations take turns.
    await Promise.all(nodes.map((n) => start(n, env)));
  }, 120_000);

  afterAll(async () => {
    await stopAll(nodes ?? []);
    await tdb?.cleanup();
    if (dirB) fs.rmSync(dirB, { recursive: true, force: true });
  });

  it('SIGTERM A, start it, then B, while seven clients read and write: nothing acknowledged is lost, nothing received goes unanswered', async () => {
    const nodeOf = (name: NodeName) => nodes.find((n) => n.name === name)!;
    const T0 = performance.now();
    const phases: string[] = [];
    const mark = (what: string) => phases.push(`${what} ${Math.round(performance.now() - T0)}`);
    const human = await signupHuman(nodes[0].url, 'Roller');
    const agent = await createAgentWithKey(human.client, [{ action: 'read' }, { action: 'write' }]);
    const agentH = { authorization: `Bearer ${agent.key}` };
    const humanH = {
      cookie: [...human.client.cookies].map(([k, v]) => `${k}=${v}`).join('; '),
      'x-csrf-token': human.client.csrf!,
    };
    const setup = new Upstreams(nodes, 0);
    const mk = async (h: Record<string, string>, p: string, content: string) => {
      const r = await setup.call('POST', '/api/v1/nodes', h, { path: p, content });
      expect(r.answer?.status, r.answer?.text ?? r.error).toBe(201);
      return r.answer!;
    };
    const threadPage = (await mk(humanH, 'roll/mentions.md', '# Mentions\n\nThe roller mentions the agent here.\n')).body.id as string;

    // What the clients were told.
    const acked: { path: string; content: string; id: string; at: number; node: NodeName; generation: number }[] = [];
    const versions: { page: string; commit: string; content: string; at: number }[][] = [[], []];
    const mentions: { id: string; at: number }[] = [];
    const delivered = new Set<string>();
    // What went wrong.
    const unexpected: string[] = [];
    /** A write that got no answer but landed: the node received it and did not answer it. */
    const landedUnanswered: string[] = [];
    const resets: Sent[] = [];
    let stop = false;
    const ackAt = () => performance.now();
    const genOf = (name: NodeName) => nodeOf(name).generation;

    /** A read, retried on the other node when it got no answer (reads are idempotent). */
    const read = async (up: Upstreams, p: string, h: Record<string, string>): Promise<Answer> => {
      for (;;) {
        const s = await up.call('GET', p, h);
        if (s.answer) return s.answer;
        resets.push(s);
      }
    };

    const creator = async (k: number) => {
      const up = new Upstreams(nodes, k);
      for (let i = 0; !stop; i++) {
        const p = { path: `roll/c${k}/p${i}.md`, content: `# Roll ${k} ${i}\n\nwritten by creator ${k}, write ${i}\n` };
        let s = await up.call('POST', '/api/v1/nodes', agentH, p);
        let retried = false;
        // No answer, or the service's own 503 (a database error: it may have committed):
        // the same create again; if the first landed, the path is taken (409).
        while (s.error !== undefined || (s.answer?.status === 503 && !isClosing503(s.answer))) {
          if (s.error !== undefined) resets.push(s);
          retried = true;
          s = await up.call('POST', '/api/v1/nodes', agentH, p);
        }
        const a = s.answer!;
        if (a.status === 201 && a.body.content === p.content) {
          acked.push({ ...p, id: a.body.id, at: ackAt(), node: s.node, generation: genOf(s.node) });
        } else if (a.status === 409 && retried && a.body.code === 'already_exists') {
          const there = await read(up, `/api/v1/nodes/${encodeURIComponent(p.path)}`, agentH);
          if (there.status === 200 && there.body.content === p.content) {
            landedUnanswered.push(`POST ${p.path}: a create that got no answer landed`);
            acked.push({ ...p, id: there.body.id, at: ackAt(), node: s.node, generation: genOf(s.node) });
          } else unexpected.push(`POST ${p.path}: 409 on retry and the page is not ours: ${there.status} ${there.text.slice(0, 200)}`);
        } else unexpected.push(`POST ${p.path} on ${s.node}: ${a.status} ${a.text.slice(0, 300)}`);
      }
    };

    const updater = async (k: number) => {
      const up = new Upstreams(nodes, k + 1);
      const first = await mk(agentH, `roll/u${k}.md`, `# Updated ${k}\n\nversion 0\n`);
      const id = first.body.id as string;
      let etag = first.headers.etag as string;
      versions[k]!.push({ page: id, commit: first.body.commit_sha, content: first.body.content, at: ackAt() });
      for (let n = 1; !stop; n++) {
        const content = `# Updated ${k}\n\nversion ${n}\n`;
        let s = await up.call('PUT', `/api/v1/nodes/${id}`, { ...agentH, 'if-match': etag }, { content });
        let landed = false;
        while (s.error !== undefined || (s.answer?.status === 503 && !isClosing503(s.answer))) {
          if (s.error !== undefined) resets.push(s);
          // Look before writing again: this client is the page's only writer.
          const now = await read(up, `/api/v1/nodes/${id}`, agentH);
          expect(now.status).toBe(200);
          etag = now.headers.etag as string;
          if (now.body.content === content) {
            landedUnanswered.push(`PUT ${id} version ${n}: an update that got no answer landed`);
            versions[k]!.push({ page: id, commit: now.body.commit_sha, content, at: ackAt() });
            landed = true;
            break;
          }
          s = await up.call('PUT', `/api/v1/nodes/${id}`, { ...agentH, 'if-match': etag }, { content });
        }
        if (landed) continue;
        const a = s.answer!;
        if (a.status === 200 && a.body.changed === true && a.body.merged === false && a.body.content === content) {
          etag = a.headers.etag as string;
          versions[k]!.push({ page: id, commit: a.body.commit_sha, content, at: ackAt() });
        } else {
          unexpected.push(`PUT ${id} version ${n} on ${s.node}: ${a.status} ${a.text.slice(0, 300)}`);
          const now = await read(up, `/api/v1/nodes/${id}`, agentH);
          etag = now.headers.etag as string;
        }
      }
    };

    const reader = async () => {
      const up = new Upstreams(nodes, 1);
      let reads = 0;
      while (!stop) {
        const target = acked.length > 0 ? acked[Math.floor(Math.random() * acked.length)]! : undefined;
        if (!target) {
          await sleep(10);
          continue;
        }
        const a = await read(up, `/api/v1/nodes/${target.id}`, agentH);
        reads++;
        if (a.status !== 200 || a.body.content !== target.content) unexpected.push(`read of acknowledged ${target.path}: ${a.status} ${a.text.slice(0, 200)}`);
      }
      return reads;
    };

    /** The human mentions the agent; every acknowledged mention must reach the agent's inbox. */
    const mentioner = async () => {
      const up = new Upstreams(nodes, 0);
      for (let n = 0; !stop; n++) {
        const body = `mention ${n} for the roller's agent`;
        let s = await up.call('POST', `/api/v1/nodes/${threadPage}/threads`, humanH, { body, mentions: [agent.id] });
        while (s.error !== undefined || (s.answer?.status === 503 && !isClosing503(s.answer))) {
          if (s.error !== undefined) resets.push(s);
          const found = await findMessage(up, body);
          if (found) {
            landedUnanswered.push(`thread message ${n}: a post that got no answer landed`);
            mentions.push({ id: found, at: ackAt() });
            break;
          }
          s = await up.call('POST', `/api/v1/nodes/${threadPage}/threads`, humanH, { body, mentions: [agent.id] });
        }
        if (s.answer?.status === 201) mentions.push({ id: s.answer.body.id, at: ackAt() });
        else if (s.answer) unexpected.push(`thread post ${n} on ${s.node}: ${s.answer.status} ${s.answer.text.slice(0, 300)}`);
        // Mentions wake the long-poll; a few a second are enough.
        await sleep(50);
      }
    };
    const findMessage = async (up: Upstreams, body: string): Promise<string | undefined> => {
      for (let after = 0; ;) {
        const a = await read(up, `/api/v1/nodes/${threadPage}/threads?limit=500&after=${after}`, humanH);
        expect(a.status).toBe(200);
        const hit = (a.body.messages as { id: string; body: string }[]).find((m) => m.body === body);
        if (hit) return hit.id;
        if (a.body.next_after === null) return undefined;
        after = a.body.next_after;
      }
    };

    /** The agent long-polls its inbox, alternating nodes like every other client. */
    let pollStop = false;
    const poller = async () => {
      const up = new Upstreams(nodes, 0);
      let after = 0;
      let polls = 0;
      while (!pollStop) {
        // Once the load stopped, short waits: the last mention may already be in hand.
        const s = await up.call('GET', `/api/v1/inbox?wait=${stop ? 1 : 25}&after=${after}`, agentH);
        polls++;
        if (!s.answer) {
          resets.push(s);
          continue;
        }
        if (s.answer.status !== 200) {
          unexpected.push(`inbox poll on ${s.node}: ${s.answer.status} ${s.answer.text.slice(0, 300)}`);
          continue;
        }
        for (const e of s.answer.body.events as { kind: string; payload: { message_id?: string } }[]) {
          if (e.kind === 'mention' && e.payload.message_id) delivered.add(e.payload.message_id);
        }
        after = Math.max(after, s.answer.body.next_after as number);
      }
      return polls;
    };

    const load = [creator(0), creator(1), updater(0), updater(1), reader(), mentioner()];
    const polling = poller();
    const until = (what: string, cond: () => boolean) =>
      (async () => {
        const deadline = performance.now() + 40_000;
        while (!cond()) {
          if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
          await sleep(20);
        }
      })();
    mark('setup');
    await until('the load to get going', () => acked.length >= 10 && mentions.length >= 2);
    mark('load going');

    const witnesses: { node: NodeName; poll: Promise<Sent> }[] = [];
    const windows: { node: NodeName; from: number; to: number; exitCode: number | null; stopMs: number }[] = [];
    for (const n of nodes) {
      // A long-poll certainly in flight on the node when it is told to stop: the human's inbox
      // stays empty, so it would wait 25 s.
      const poll = send(n, 'GET', '/api/v1/inbox?wait=25', humanH, undefined, { fresh: true });
      const tag = sent.at(-1)!.tag;
      witnesses.push({ node: n.name, poll });
      await until(`node ${n.name} to receive the witness long-poll`, () => n.received.has(tag));
      // ... and waiting (the gauge counts the load's poll too, if it is on this node now).
      while ((await inboxWaiters(n)) < 1) await sleep(20);

      const from = performance.now();
      n.child!.kill('SIGTERM');
      await exited(n.child!);
      const stopped = performance.now();
      n.drains.push({ from, to: stopped });
      const exitCode = n.child!.exitCode;
      await start(n, env);
      const to = performance.now();
      windows.push({ node: n.name, from, to, exitCode, stopMs: stopped - from });
      // The restarted node takes its share again before the other one goes.
      const gen = n.generation;
      mark(`${n.name} restarted`);
      await until(
        `node ${n.name} to acknowledge writes after its restart`,
        () => acked.filter((w) => w.node === n.name && w.generation === gen).length >= WRITES_ON_RESTARTED,
      );
      mark(`${n.name} serving`);
    }

    stop = true;
    const [, , , , reads] = await Promise.all(load);
    mark('load joined');
    // The last mention wakes the long-poll, which then stops.
    const last = await setup.call('POST', `/api/v1/nodes/${threadPage}/threads`, humanH, { body: 'last one', mentions: [agent.id] });
    expect(last.answer?.status, last.answer?.text ?? last.error).toBe(201);
    mentions.push({ id: last.answer!.body.id, at: ackAt() });
    mark(`last mention posted on ${last.node}`);
    await until('the long-poll to get the last mention', () => delivered.has(last.answer!.body.id));
    pollStop = true;
    const polls = await polling;
    mark('load stopped');

    // Every request a node logged as received got an answer at the client. (Requests without an
    // answer that no node received were refused or met a keep-alive connection being closed.)
    const byTag = new Map(sent.map((s) => [s.tag, s]));
    const unanswered: Sent[] = [];
    for (const n of nodes) for (const tag of n.received.keys()) if (!byTag.get(tag)!.answer) unanswered.push(byTag.get(tag)!);
    const show = (list: Sent[]) =>
      list.map((s) => `${s.method} ${s.path} on ${s.node}: ${s.error} after ${Math.round(s.t1 - s.t0)} ms${s.reusedSocket ? ' (kept-alive connection)' : ''}`);
    expect(show(unanswered.filter((s) => s.path.startsWith('/api/v1/inbox'))), LONG_POLL_BUG).toEqual([]);
    expect(show(unanswered), 'requests a node received and never answered').toEqual([]);
    expect(landedUnanswered, 'writes that landed while their client got no answer').toEqual([]);

    // Each node stopped by itself, with 0, before the grace would have cut requests.
    for (const w of windows) {
      expect(w.exitCode, `node ${w.node}'s exit code after SIGTERM`).toBe(0);
      expect(w.stopMs, `node ${w.node} stopped only at the grace cut: a request was held`).toBeLessThan(SHUTDOWN_GRACE_MS);
    }

    // The witnesses: the long-poll waiting on each node at its SIGTERM got its empty answer.
    for (const w of witnesses) {
      const s = await w.poll;
      expect(s.answer?.status, `the long-poll waiting on ${w.node} at SIGTERM: ${s.error}`).toBe(200);
      expect(s.answer?.body.events).toEqual([]);
    }

    // No 500 ever; a 5xx only as the 503 of a node during its drain.
    const drainedAt = (s: Sent) => nodeOf(s.node).drains.some((d) => s.t1 >= d.from && s.t0 <= d.to);
    const bad5xx = sent.filter((s) => s.answer && s.answer.status >= 500 && !(s.answer.status === 503 && drainedAt(s)));
    expect(
      bad5xx.map((s) => `${s.method} ${s.path} on ${s.node}: ${s.answer!.status} ${s.answer!.text.slice(0, 200)}`),
      '5xx answers',
    ).toEqual([]);
    expect(unexpected).toEqual([]);

    // Enough happened during each restart window.
    for (const w of windows) {
      const writes = acked.filter((x) => x.at >= w.from && x.at <= w.to).length + versions.flat().filter((v) => v.at >= w.from && v.at <= w.to).length;
      expect(writes, `writes acknowledged while ${w.node} restarted`).toBeGreaterThanOrEqual(WRITES_PER_WINDOW);
    }

    // Every acknowledged create reads back, from both nodes, with its acknowledged content.
    const check = nodes.map((n) => new Upstreams([n], 0));
    const queue = [...acked];
    const missing: string[] = [];
    await Promise.all(
      Array.from({ length: 6 }, async () => {
        for (let w = queue.shift(); w; w = queue.shift()) {
          for (const up of check) {
            const a = await read(up, `/api/v1/nodes/${encodeURIComponent(w.path)}`, agentH);
            if (a.status !== 200 || a.body.content !== w.content) missing.push(`${w.path}: ${a.status} ${a.text.slice(0, 120)}`);
          }
        }
      }),
    );
    expect(missing, 'acknowledged creates not read back').toEqual([]);

    // Every acknowledged update is a version of its page; the page holds the last one.
    for (const vs of versions) {
      const id = vs[0]!.page;
      const commits = new Set<string>();
      for (let before: string | null = null; ;) {
        const a: Answer = await read(check[0]!, `/api/v1/nodes/${id}/history?limit=200${before ? `&before=${before}` : ''}`, agentH);
        expect(a.status).toBe(200);
        for (const v of a.body.versions as { commit_sha: string }[]) commits.add(v.commit_sha);
        before = a.body.next_before;
        if (!before) break;
      }
      expect(vs.filter((v) => !commits.has(v.commit)).map((v) => v.content)).toEqual([]);
      for (const up of check) expect((await read(up, `/api/v1/nodes/${id}`, agentH)).body.content).toBe(vs.at(-1)!.content);
    }

    // Every acknowledged mention reached the long-polling agent.
    expect(mentions.filter((m) => !delivered.has(m.id)).map((m) => m.id)).toEqual([]);

    mark('checked');
    const answered = sent.filter((s) => s.answer);
    // Requests on a node's connection when it was told to stop, answered in its drain.
    const acrossStop = answered.filter((s) => nodeOf(s.node).drains.some((d) => s.t0 < d.from && s.t1 > d.from)).length;
    console.log(
      `rolling restart: ${acked.length} creates, ${versions.flat().length - 2} updates, ${mentions.length} mentions, ${reads} reads, ${polls} polls acknowledged; ` +
        `${answered.length} answers (${answered.filter((s) => s.answer!.status === 503).length} 503, ${acrossStop} to requests in flight at a SIGTERM), ` +
        `${sent.filter((s) => s.error === 'ECONNREFUSED').length} refused connections, ${resets.length} requests without an answer (none received); ` +
        windows.map((w) => `${w.node} stopped in ${Math.round(w.stopMs)} ms, back in ${Math.round(w.to - w.from)} ms`).join(', ') +
        `; timeline (ms): ${phases.join(', ')}`,
    );
  }, 120_000);
});

/** Concurrent long-polls sent just before the signal: enough that some are still in their hooks. */
const LATE_POLLS = 30;

describe.skipIf(!HAS_PG)('SIGTERM while long-polls are still on their way to the handler (postgres)', () => {
  let tdb: TestDatabase;
  let c: NodeProc | undefined;

  beforeAll(async () => {
    tdb = await createTestDatabase('postgres');
    c = makeNode('C', await freePort(), tdb.dataDir);
    await start(c, { DATABASE_URL: tdb.databaseUrl! });
  }, 60_000);

  afterAll(async () => {
    await stopAll([c]);
    await tdb?.cleanup();
  });

  it('every long-poll the node received before SIGTERM gets its empty answer, and the node stops without waiting for the grace cut', async () => {
    const n = c!;
    const h = await signupHuman(n.url, 'Late');
    const agent = await createAgentWithKey(h.client, [{ action: 'read' }]);
    const H = { authorization: `Bearer ${agent.key}` };
    // Warm keep-alive connections, as a proxy keeps to its upstreams.
    await Promise.all(Array.from({ length: LATE_POLLS }, () => send(n, 'GET', '/api/v1/whoami', H)));
    const polls = Array.from({ length: LATE_POLLS }, () => send(n, 'GET', '/api/v1/inbox?wait=25', H));
    const tags = sent.slice(-LATE_POLLS).map((s) => s.tag);
    // The node's request log says every poll reached it (routed before close, so each must be answered).
    while (!tags.every((t) => n.received.has(t))) await sleep(1);
    const from = performance.now();
    n.child!.kill('SIGTERM');
    const answers = await Promise.all(polls);
    await exited(n.child!);
    const stopMs = performance.now() - from;
    expect(n.child!.exitCode).toBe(0);
    expect(
      answers.filter((s) => !s.answer).map((s) => `${s.tag}: ${s.error} after ${Math.round(s.t1 - s.t0)} ms`),
      LONG_POLL_BUG,
    ).toEqual([]);
    for (const s of answers) {
      expect(s.answer!.status).toBe(200);
      expect(s.answer!.body.events).toEqual([]);
    }
    expect(stopMs, 'the node stopped only at the grace cut').toBeLessThan(SHUTDOWN_GRACE_MS);
  }, 60_000);
});
