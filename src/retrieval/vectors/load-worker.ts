import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/**
 * A workspace's section vectors read off the embedded SQLite store by a worker thread with its
 * own connection, handed over a page of rows at a time (issue 19, resident memory).
 *
 * Read on the serving thread, each of 240,000 vectors (at 100,000 pages) reached JS as its own
 * 2 kB buffer from the driver, freed only when the collector ran, and its blob pages went
 * through the serving connection's page cache: the allocator kept the high-water mark of that
 * churn for the life of the process (the malloc heap after a load was 60 or 118 MB run to run,
 * docs/decisions.md "Resident memory at 100,000 pages"). Here the churn is the worker's (its
 * own heap, its own small page cache, its own malloc arena, all given back when it exits) and
 * a page of rows arrives as one buffer of vectors end to end, which the caller reads in place.
 */

/** One page of rows: whole pages only (a page's rows never straddle two), in page order. */
export interface VectorRowsPage {
  pageIds: string[];
  ords: Int32Array;
  lastOrds: Int32Array;
  textHashes: string[];
  /** Row i's vector: `vecs[offsets[i] / 4 .. offsets[i + 1] / 4]`. */
  offsets: Int32Array;
  vecs: Float32Array;
}

// A CommonJS script run with eval, so it needs no file of its own in the build (as the checkpointer's).
// Paging as the Kysely reader in runtime.ts does: by page id, a page never split across two.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.module);
const db = new Database(workerData.file, { fileMustExist: true });
db.pragma('query_only = ON');
db.pragma('busy_timeout = 5000');
const stmt = db.prepare(
  'select page_id, ord, last_ord, text_hash, vec from section_vectors ' +
  'where workspace_id = ? and model = ? and page_id > ? order by page_id, ord limit ?');
// A page with more rows than a query reads is read whole by itself.
const wholePage = db.prepare(
  'select page_id, ord, last_ord, text_hash, vec from section_vectors ' +
  'where workspace_id = ? and model = ? and page_id = ? order by ord');
let after = '';
let done = false;
// The buffer of vectors goes back and forth (the caller returns it with each 'next'): one
// allocation for the whole load instead of one per page, freed whenever the caller's collector
// ran (each lived in this thread's malloc arena, which kept their high-water mark).
let spare = null;
parentPort.on('message', (m) => {
  if (m && m.spare) spare = m.spare;
  if (!m || m.next !== true || done) {
    db.close();
    parentPort.close();
    return;
  }
  try {
    const rows = stmt.all(workerData.workspace, workerData.model, after, workerData.pageRows);
    done = rows.length < workerData.pageRows;
    let usable = rows;
    if (!done) {
      const last = rows[rows.length - 1].page_id;
      const complete = rows.filter((r) => r.page_id !== last);
      usable = complete.length > 0 ? complete : wholePage.all(workerData.workspace, workerData.model, last);
    }
    const n = usable.length;
    const ords = new Int32Array(n);
    const lastOrds = new Int32Array(n);
    const offsets = new Int32Array(n + 1);
    let bytes = 0;
    for (let i = 0; i < n; i++) {
      offsets[i] = bytes;
      bytes += Math.ceil(usable[i].vec.length / 4) * 4;
    }
    offsets[n] = bytes;
    const vecs = spare && spare.byteLength >= bytes ? new Uint8Array(spare, 0, bytes) : new Uint8Array(bytes);
    spare = null;
    const pageIds = new Array(n);
    const textHashes = new Array(n);
    for (let i = 0; i < n; i++) {
      const r = usable[i];
      pageIds[i] = r.page_id;
      textHashes[i] = r.text_hash;
      ords[i] = r.ord;
      lastOrds[i] = r.last_ord;
      vecs.set(r.vec, offsets[i]);
    }
    if (n > 0) after = usable[n - 1].page_id;
    if (n === 0) done = true;
    parentPort.postMessage({ page: { pageIds, ords, lastOrds, textHashes, offsets, vecs: new Float32Array(vecs.buffer, 0, bytes >> 2) }, done },
      [ords.buffer, lastOrds.buffer, offsets.buffer, vecs.buffer]);
  } catch (e) {
    done = true;
    parentPort.postMessage({ error: String((e && e.message) || e) });
  }
});
`;

interface Reply {
  page?: VectorRowsPage;
  done?: boolean;
  error?: string;
}

/**
 * Reads the vectors of `workspace` under `model` from the SQLite file `file`, `pageRows` rows a
 * query, yielding each page as the worker hands it over (the next is read only when asked for,
 * so at most one page is in flight). A page's `vecs` is reused for the next page: read it before
 * asking for the next, keep nothing of it. The worker exits when the reading ends, fails or is
 * abandoned.
 */
export async function* readVectorsInWorker(file: string, workspace: string, model: string, pageRows: number): AsyncGenerator<VectorRowsPage> {
  const module = createRequire(import.meta.url).resolve('better-sqlite3');
  // A small young generation: the driver's buffer of each row dies young and goes back to the
  // allocator at the next scavenge, not after tens of megabytes of them.
  const worker = new Worker(WORKER_SOURCE, {
    eval: true,
    workerData: { module, file, workspace, model, pageRows },
    resourceLimits: { maxYoungGenerationSizeMb: 4 },
  });
  // Replies, errors and the exit in the order they came; the reader takes them one at a time.
  const replies: Reply[] = [];
  let wake: (() => void) | null = null;
  const arrive = (r: Reply) => {
    replies.push(r);
    wake?.();
  };
  let exited = false;
  const exit = new Promise<void>((resolve) =>
    worker.once('exit', () => {
      exited = true;
      arrive({ error: 'the vector loader exited' });
      resolve();
    }),
  );
  worker.on('message', arrive);
  worker.on('error', (err) => arrive({ error: err.message }));
  let spare: ArrayBuffer | null = null;
  const ask = async (): Promise<Reply> => {
    if (!exited) {
      const give = spare;
      spare = null;
      if (give) worker.postMessage({ next: true, spare: give }, [give]);
      else worker.postMessage({ next: true });
    }
    while (replies.length === 0) await new Promise<void>((resolve) => (wake = resolve));
    wake = null;
    return replies.shift()!;
  };
  try {
    for (;;) {
      const r = await ask();
      if (r.error !== undefined) throw new Error(`loading vectors failed: ${r.error}`);
      if (r.page && r.page.pageIds.length > 0) {
        yield r.page;
        // The caller is done with the page (see above): its buffer is refilled for the next.
        spare = r.page.vecs.buffer as ArrayBuffer;
      }
      if (r.done) return;
    }
  } finally {
    // Closed by itself after 'close' (its connection too); stopped if it does not within a second.
    if (!exited) {
      worker.postMessage('close');
      const stop = setTimeout(() => void worker.terminate(), 1000);
      await exit;
      clearTimeout(stop);
    }
  }
}
