import { MessageChannel, type MessagePort, Worker } from 'node:worker_threads';

/**
 * A second thread that scans part of a matrix's rows while the serving thread scans the rest
 * (issue 19: vector and hybrid latency at 100,000 pages).
 *
 * A scan of the whole int8 matrix is bound by memory bandwidth (240,000 rows × 512 bytes: ~21 ms
 * on one core here, ~7 GB/s); two threads reading halves took ~11. The serving thread hands the
 * helper the scan through a shared control block, both claim chunks of rows from one counter,
 * and the serving thread then blocks (Atomics.wait) until the helper is done, so nothing on the
 * serving thread (a write to the matrix, a growth that moves its rows) can run while the helper
 * reads the rows; a scan begun for later (`VectorMatrix.begin`) is waited for (`settle`) before
 * any such change. The helper runs the same WebAssembly code on the same shared memory, so the
 * scores are the ones one thread would write, to the bit.
 *
 * When the helper cannot take a part (not started yet, busy, gone, or it fails), the serving
 * thread scans every row itself, as before.
 */

/** Control block slots (Int32Array over a SharedArrayBuffer). */
const STATE = 0; // the helper's inbox: IDLE, JOB or STOP
const MATRIX = 1; // the job: matrix id, then the scan's six arguments
const ARGS = 2;
const DONE = 8; // PENDING, then OK or FAILED
const READY = 9; // 1 once the helper waits for jobs
const JOBS = 10; // jobs done (for tests and operators)
const NEXT = 11; // the job's next chunk of rows to claim (both threads claim with Atomics.add)
const SLOTS = 12;

/**
 * Rows a thread claims at a time (2 MiB of 512-dimension rows): each thread takes the next chunk
 * when it is free, so the two finish together whatever else either was doing.
 */
export const CHUNK_ROWS = 4096;

const IDLE = 0;
const JOB = 1;
const STOP = 3;
const PENDING = 0;
const OK = 1;

/**
 * How long the serving thread waits for the helper's share. A whole scan takes ~20 ms at 100,000
 * pages; past this the helper is taken for gone: it is stopped, and the serving thread scans
 * every row itself.
 */
const PART_TIMEOUT_MS = 5_000;

// A CommonJS script run with eval, so it needs no file of its own in the build (as the loader's).
// It never returns to its event loop: matrices arrive as messages it takes off its port itself
// (a matrix is never let go of one by one: releaseMatrix stops the helper).
const WORKER_SOURCE = `
const { workerData, receiveMessageOnPort } = require('node:worker_threads');
const { ctl, port, module: mod } = workerData;
const scans = new Map();
function drain() {
  for (let m = receiveMessageOnPort(port); m; m = receiveMessageOnPort(port)) {
    const msg = m.message;
    scans.set(msg.add, new WebAssembly.Instance(mod, { env: { memory: msg.memory } }).exports.scan);
  }
}
Atomics.store(ctl, ${READY}, 1);
for (;;) {
  Atomics.wait(ctl, ${STATE}, ${IDLE});
  const state = Atomics.load(ctl, ${STATE});
  if (state === ${STOP}) break;
  let done = 2;
  try {
    drain();
    const scan = scans.get(Atomics.load(ctl, ${MATRIX}));
    if (scan) {
      const a = [];
      for (let i = 0; i < 6; i++) a.push(Atomics.load(ctl, ${ARGS} + i));
      const [matrix, rows, stride, query, scales, scores] = a;
      const chunks = Math.ceil(rows / ${CHUNK_ROWS});
      for (let c = Atomics.add(ctl, ${NEXT}, 1); c < chunks; c = Atomics.add(ctl, ${NEXT}, 1)) {
        const r0 = c * ${CHUNK_ROWS};
        scan(matrix + r0 * stride, Math.min(${CHUNK_ROWS}, rows - r0), stride, query, scales + r0 * 4, scores + r0 * 4);
      }
      done = 1;
      Atomics.add(ctl, ${JOBS}, 1);
    }
  } catch {}
  Atomics.store(ctl, ${STATE}, ${IDLE});
  Atomics.store(ctl, ${DONE}, done);
  Atomics.notify(ctl, ${DONE});
}
port.close();
`;

export interface Helper {
  worker: Worker;
  port: MessagePort;
  ctl: Int32Array;
  /** Matrix memories the helper holds, by matrix id. */
  held: Set<number>;
  gone: boolean;
}

let helper: Helper | null = null;
let sharedModule: WebAssembly.Module | null = null;

function start(module: WebAssembly.Module): Helper {
  const ctl = new Int32Array(new SharedArrayBuffer(SLOTS * 4));
  const { port1, port2 } = new MessageChannel();
  const worker = new Worker(WORKER_SOURCE, {
    eval: true,
    workerData: { ctl, port: port2, module },
    transferList: [port2],
    // Its own heap holds nothing but the instances: the matrices live in shared memory.
    resourceLimits: { maxYoungGenerationSizeMb: 4, maxOldGenerationSizeMb: 32 },
  });
  // It must never keep a process alive (a test's, or one shutting down).
  worker.unref();
  port1.unref();
  const h: Helper = { worker, port: port1, ctl, held: new Set(), gone: false };
  const lost = () => {
    h.gone = true;
    if (helper === h) helper = null;
  };
  worker.on('error', lost);
  worker.on('exit', lost);
  return h;
}

/** A helper that takes jobs now, started on first use (it takes jobs once its thread runs). */
function ready(module: WebAssembly.Module): Helper | null {
  if (!helper || helper.gone) {
    sharedModule = module;
    helper = start(module);
  }
  return Atomics.load(helper.ctl, READY) === 1 ? helper : null;
}

/** A part of a scan handed to the helper; `ok` once waited for (null: not yet). */
export interface Part {
  readonly matrixId: number;
  readonly helper: Helper;
  /** Rows of the scan. */
  readonly rows: number;
  /** True when the helper ended its share without a failure (a failed share leaves chunks unscanned). */
  ok: boolean | null;
}

/** The one part out at a time: no other is handed over until it has been waited for. */
let outstanding: Part | null = null;

type ScanArgs = readonly [matrix: number, rows: number, stride: number, query: number, scales: number, scores: number];

/**
 * Hands a scan of a matrix's rows to the helper (`part`: the scan's arguments for all of them),
 * which scans chunk after chunk of them until none is left; the caller claims chunks too
 * (`shareChunks`) once it is free. Null when the helper cannot take it now (the caller scans the
 * rows itself). `memory` must be the shared memory the module was instantiated with. Until
 * `finish`, nothing may change the rows, the query or the scores: the matrix calls `settle`
 * before any such change.
 */
export function handOver(id: number, memory: WebAssembly.Memory, module: WebAssembly.Module, part: ScanArgs): Part | null {
  if (outstanding) return null;
  const h = ready(module);
  if (!h || sharedModule !== module || Atomics.load(h.ctl, STATE) !== IDLE) return null;
  if (!h.held.has(id)) {
    h.port.postMessage({ add: id, memory });
    h.held.add(id);
  }
  Atomics.store(h.ctl, DONE, PENDING);
  Atomics.store(h.ctl, MATRIX, id);
  Atomics.store(h.ctl, NEXT, 0);
  for (let i = 0; i < 6; i++) Atomics.store(h.ctl, ARGS + i, part[i]!);
  if (Atomics.compareExchange(h.ctl, STATE, IDLE, JOB) !== IDLE) return null;
  Atomics.notify(h.ctl, STATE);
  return (outstanding = { matrixId: id, helper: h, ok: null, rows: part[1] });
}

/** This thread scans the chunks of a handed-over scan the helper has not claimed (`own(first row, rows)`). */
export function shareChunks(part: Part, own: (first: number, rows: number) => void): void {
  const chunks = Math.ceil(part.rows / CHUNK_ROWS);
  for (let c = Atomics.add(part.helper.ctl, NEXT, 1); c < chunks; c = Atomics.add(part.helper.ctl, NEXT, 1)) {
    const first = c * CHUNK_ROWS;
    own(first, Math.min(CHUNK_ROWS, part.rows - first));
  }
}

/** Waits (blocking) for a part handed over; true when the helper scanned it. */
export function finish(part: Part): boolean {
  if (part.ok !== null) return part.ok;
  if (outstanding === part) outstanding = null;
  // Its thread ended (seen while the caller awaited other work): it will never say it is done.
  if (part.helper.gone) return (part.ok = false);
  if (Atomics.wait(part.helper.ctl, DONE, PENDING, PART_TIMEOUT_MS) === 'timed-out') {
    // Gone, or starved past any use: never handed a job again (its late writes, if any, land
    // before the caller's own scan of the part overwrites them with the same values).
    part.ok = false;
    if (helper === part.helper) stopHelper();
    return false;
  }
  part.ok = Atomics.load(part.helper.ctl, DONE) === OK;
  return part.ok;
}

/** Waits for the part of matrix `id` the helper may be scanning (before its rows, query or scores change). */
export function settle(id: number): void {
  if (outstanding?.matrixId === id) finish(outstanding);
}

/**
 * Scans a matrix's rows on the helper and this thread together (`own(first row, rows)` scans a
 * chunk here) and waits for both. Returns false when the helper took no part or failed its share:
 * the caller scans every row itself.
 */
export function scanInParallel(
  id: number,
  memory: WebAssembly.Memory,
  module: WebAssembly.Module,
  part: ScanArgs,
  own: (first: number, rows: number) => void,
): boolean {
  const handed = handOver(id, memory, module, part);
  if (!handed) return false;
  shareChunks(handed, own);
  return finish(handed);
}

/**
 * The helper lets go of a matrix's memory (a matrix dropped: else the helper kept it alive). Its
 * thread never returns to its event loop and allocates next to nothing, so its collector would
 * never run and a dropped memory would stay resident (an attack measured 20 MiB kept per dropped
 * matrix, test/http/attack-session-r.test.ts): the helper is stopped instead, which frees every
 * memory it held, and the next large scan starts a new one (the matrices still in use are handed
 * to it again). Matrices are dropped rarely: a runtime stopping, a workspace reloaded after a
 * long sleep.
 */
export function releaseMatrix(id: number): void {
  const h = helper;
  if (h && !h.gone && h.held.has(id)) stopHelper();
}

/** Stops the helper (a new one starts on the next large scan). */
export function stopHelper(): void {
  const h = helper;
  if (!h) return;
  // A part out is waited for: stopped mid-part, the helper would never say it was done.
  if (outstanding && outstanding.helper === h) finish(outstanding);
  helper = null;
  h.gone = true;
  Atomics.store(h.ctl, STATE, STOP);
  Atomics.notify(h.ctl, STATE);
  void h.worker.terminate().catch(() => undefined);
  h.port.close();
}

/** What the helper holds and has done (tests, operators). */
export function helperStats(): { running: boolean; matrices: number; jobs: number } {
  const h = helper;
  if (!h || h.gone) return { running: false, matrices: 0, jobs: 0 };
  return { running: Atomics.load(h.ctl, READY) === 1, matrices: h.held.size, jobs: Atomics.load(h.ctl, JOBS) };
}
