import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PARALLEL_FROM, type PendingScan, type RowHit, VectorMatrix } from '../../src/retrieval/vectors/matrix.js';
import { CHUNK_ROWS, helperStats, stopHelper } from '../../src/retrieval/vectors/scan-helper.js';
import { embeddingsServer, waitForVectors } from '../support/embeddings-server.js';
import { createTestDatabase, testEngines } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { postJson } from '../support/imports.js';
import { helperUp, matrixTwins, showHits } from '../support/matrix-twins.js';
import { prng, unitVector } from '../support/random.js';
import { Client, createAgentWithKey, createReaderAgent, signupHuman, startServerOn } from '../support/server.js';

/**
 * Attack session r2, on b7df1c8: a vector scan of a large matrix is begun on the helper thread
 * (`begin`), the keyword list of a hybrid search or bundle runs meanwhile (hybridLists' gate),
 * and the scan is finished later (`topOf`), both threads claiming chunks of 4,096 rows from one
 * shared counter; a change or another scan in between makes `topOf` scan again; one part out at
 * a time per process.
 *
 * Attacked in-process (begin, then busy work, awaits, scans of the same and other matrices,
 * another begin, change storms, growth, stopHelper, dispose, then topOf; NaN / infinite / zero
 * queries, another array of equal values, k of 0, -1, rows, past the rows, Infinity; six
 * interleaved "searches" on three matrices with a writer and a stopper; topOf twice; a helper
 * dying with a part out; child processes ending with a part out), always against twins that
 * scan alone; over HTTP on both engines (two workspaces pushed past PARALLEL_FROM, hybrid REST
 * and MCP search and bundles of three callers at once while noise pages are written, rewritten
 * and deleted, rows stormed into both matrices every 2 ms and the helper stopped, compared with
 * a quiet run and with matrices scanning alone; the gate: no words, scopes and tags matching
 * nothing, missing grants, limit 51, `at=` snapshots, a failing and a hanging provider).
 *
 * FOUND (failing tests below):
 * - A slow embeddings provider (any remote one) now adds its time to the keyword list's: the
 *   keyword list waits behind the gate until vectorCandidates has embedded the query and
 *   refreshed the matrix, so an uncached hybrid query takes embed + keyword instead of the
 *   longer of the two (parent 0abb3bf: max; measured here 250 ms each way: 520 ms vs 264 ms on
 *   PostgreSQL, 760 vs 508 on SQLite). "with a slow provider, hybrid takes the longer list’s time".
 * - `topOf` called a second time on a pending scan it already finished (still "current": topOf
 *   bumps no counter) claims chunk numbers from the helper's shared NEXT counter while the
 *   helper runs another matrix's job: that matrix's chunks are skipped and its answer is wrong.
 *   Not reachable from vectorCandidates (it drops the pending after one use): an API hazard.
 * - A helper whose exit was already seen (`gone`) with a part out still blocks the serving
 *   thread for PART_TIMEOUT_MS (5 s) in `finish`: the await between begin and topOf gives the
 *   exit event a chance to run first, and `finish` never looks at `gone`.
 * - (Older than b7df1c8, found by the race here:) vectorCandidates' widening rounds read
 *   `hits.slice(seen)` of a new scan: when rows that outrank the answers go away between two
 *   rounds (a page deleted or rewritten meanwhile), the rows that move up into the part already
 *   read are never looked at: an agent's top answers vanish.
 * All four fixed in the same session: the keyword list is let go before a query is embedded
 *   by anything but the builtin provider or the cache (runtime.embedsAtOnce); topOf of a scan
 *   already finished scans again; finish does not wait for a helper whose thread has ended;
 *   vectorCandidates looks at each window once by what it is (not by rank) and sorts its rounds.
 * Held: every begin/topOf answer equal to a lone twin's to the bit, whatever ran between; one
 *   part out at a time (another matrix scans alone, right); NaN/Infinity/zero queries and every
 *   k; a process with a part out exits at once; over HTTP every concurrent answer equal to the
 *   quiet run's and to the answers of matrices scanning alone, never another workspace's row nor
 *   a section past the caller's ceiling, no 500; the gate opened on every early return (no words,
 *   nothing in scope, missing grants, snapshots, failing or hanging provider), nothing hung.
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const tick = () => new Promise((r) => setImmediate(r));

/* ------------------------------------------------------------------------------------------ */
/* In-process: begin / topOf against twins that scan alone                                    */
/* ------------------------------------------------------------------------------------------ */

/** A matrix and its twin that scans alone (disposed before its first scan), filled alike. */
function twins(rows: number, dims: number, seed: number) {
  const { m, alone, rnd } = matrixTwins(rows, dims, seed, 9);
  /** A change applied to both. */
  const both = (f: (x: VectorMatrix) => void) => {
    f(m);
    f(alone);
  };
  return { m, alone, rnd, dims, both };
}

const show = showHits;

/** A begun scan, asserting the helper took it. */
function begun(m: VectorMatrix, q: Float32Array, what: string): PendingScan {
  const p = m.begin(q);
  expect(p, `${what}: begin handed the scan to the helper`).not.toBeNull();
  return p!;
}

describe('attack r2: begin / topOf in-process', () => {
  it('whatever runs between begin and topOf (busy work, awaits, other scans, another begin, change storms, growth, stopHelper, dispose), topOf answers as a twin scanning alone, to the bit', async () => {
    const A = twins(PARALLEL_FROM * 3 + 123, 64, 1);
    const B = twins(PARALLEL_FROM + 777, 48, 2);
    const small = twins(2_000, 64, 3);
    await helperUp(A.m, 64);
    const same = (got: RowHit[], want: RowHit[], what: string) => expect(show(got), what).toEqual(show(want));
    const scenarios: [string, (q: Float32Array) => Promise<void> | void][] = [
      ['nothing', () => undefined],
      [
        '30 ms of synchronous work',
        () => {
          for (const until = performance.now() + 30; performance.now() < until;);
        },
      ],
      ['an await of 5 ms', () => sleep(5)],
      ['setImmediate', () => tick()],
      [
        'another large matrix scanned (alone: the helper is taken)',
        () => {
          const q2 = unitVector(B.rnd, B.dims);
          const jobs = helperStats().jobs;
          same(B.m.top(q2, 30), B.alone.top(q2, 30), 'B meanwhile');
          same(B.m.scan(q2, 40).hits, B.alone.scan(q2, 40).hits, 'B scan meanwhile');
          // (A's part, finished by the helper meanwhile, is the one job it may count.)
          expect(helperStats().jobs - jobs, 'jobs the helper finished meanwhile').toBeLessThanOrEqual(1);
        },
      ],
      [
        'a begin on another large matrix (refused: one part out at a time)',
        () => {
          const q2 = unitVector(B.rnd, B.dims);
          expect(B.m.begin(q2)).toBeNull();
          same(B.m.top(q2, 7), B.alone.top(q2, 7), 'B after its refused begin');
        },
      ],
      [
        'a small matrix scanned',
        () => {
          const q2 = unitVector(small.rnd, 64);
          same(small.m.top(q2, 9), small.alone.top(q2, 9), 'small meanwhile');
        },
      ],
      [
        'the same matrix scanned for another query',
        () => {
          const q2 = unitVector(A.rnd, 64);
          same(A.m.top(q2, 11), A.alone.top(q2, 11), 'A for another query');
        },
      ],
      [
        'the same matrix begun again for another query (and that scan left unfinished)',
        () => {
          const q2 = unitVector(A.rnd, 64);
          begun(A.m, q2, 'second begin on A');
        },
      ],
      [
        'the same matrix begun again for the same query object',
        (q) => {
          begun(A.m, q, 'second begin on A, same query');
        },
      ],
      [
        'a storm of page writes and removals (rows moved into holes)',
        () => {
          for (let i = 0; i < 60; i++) {
            const vecs = Array.from({ length: 1 + (i % 5) }, (_, j) => ({ ord: j, vec: unitVector(A.rnd, 64), tag: i }));
            A.both((x) => x.setPage(`storm${i % 17}`, vecs));
            A.both((x) => x.removePage(`p${(i * 37) % 500}`));
          }
        },
      ],
      [
        'rows written that match the query best, then removed again',
        (q) => {
          A.both((x) => x.setPage('best', [{ ord: 0, vec: q, tag: 1 }]));
        },
      ],
      [
        'the matrix grown past its capacity (its memory grows)',
        () => {
          const vecs = Array.from({ length: 30_000 }, (_, j) => ({ ord: j, vec: unitVector(A.rnd, 64), tag: 5 }));
          A.both((x) => x.setPage('growth', vecs));
        },
      ],
      ['the helper stopped', () => stopHelper()],
      ['the helper stopped, then 50 ms (a new one starts)', () => (stopHelper(), sleep(50))],
      [
        'a small matrix disposed (the helper does not hold it)',
        () => {
          const x = new VectorMatrix(64, 10);
          x.setPage('a', [{ ord: 0, vec: unitVector(A.rnd, 64), tag: 0 }]);
          x.top(unitVector(A.rnd, 64), 1);
          x.dispose();
        },
      ],
      [
        'another large matrix the helper holds disposed (the helper is stopped)',
        () => {
          const t = twins(PARALLEL_FROM + 5, 16, 9);
          t.m.top(unitVector(t.rnd, 16), 3);
          t.m.dispose();
          t.alone.dispose();
        },
      ],
    ];
    for (let round = 0; round < 2; round++) {
      for (const [name, between] of scenarios) {
        await helperUp(A.m, 64);
        const q = unitVector(A.rnd, 64);
        const p = begun(A.m, q, name);
        let got: RowHit[] = [];
        try {
          await between(q);
        } finally {
          // Finished whatever happened (a failed check must not leave the part out for the next tests).
          got = A.m.topOf(p, q, 25);
        }
        same(got, A.alone.top(q, 25), `round ${round}: ${name}`);
        for (const k of [1, 300]) same(A.m.top(q, k), A.alone.top(q, k), `round ${round}: ${name}: then top ${k}`);
        if (name.startsWith('rows written')) {
          expect(got[0]!.pageId, 'the row written in between is found').toBe('best');
          A.both((x) => x.removePage('best'));
        }
      }
    }
    // The matrix disposed between begin and topOf: answered, then scanned alone.
    await helperUp(A.m, 64);
    const q = unitVector(A.rnd, 64);
    const p = begun(A.m, q, 'dispose');
    A.m.dispose();
    same(A.m.topOf(p, q, 40), A.alone.top(q, 40), 'disposed in between');
    expect(A.m.begin(q)).toBeNull();
    for (const t of [A, B, small]) {
      t.m.dispose();
      t.alone.dispose();
    }
  }, 60_000);

  it('hostile queries and k through begin / topOf: NaN, infinities, zero, a different query object of equal values, k of 0, -1, rows, past the rows and Infinity', async () => {
    const dims = 40;
    const t = twins(PARALLEL_FROM + CHUNK_ROWS + 17, dims, 4);
    await helperUp(t.m, dims);
    const make = (f: (i: number) => number) => Float32Array.from({ length: dims }, (_, i) => f(i));
    const queries: [string, Float32Array][] = [
      ['NaN first', make((i) => (i === 0 ? Number.NaN : 0.1))],
      ['all NaN', make(() => Number.NaN)],
      ['+Infinity', make((i) => (i === 3 ? Number.POSITIVE_INFINITY : 0.2))],
      ['huge', make((i) => (i % 2 ? 3e38 : -3e38))],
      ['zero', make(() => 0)],
      ['one hot', make((i) => (i === dims - 1 ? 1 : 0))],
    ];
    for (const [name, q] of queries) {
      for (const k of [0, -1, 1, 20, t.m.rows, t.m.rows + 5, Number.POSITIVE_INFINITY]) {
        const p = t.m.begin(q);
        expect(p, `${name} k ${k}: begun`).not.toBeNull();
        const started = performance.now();
        const got = t.m.topOf(p!, q, k);
        expect(performance.now() - started, `${name} k ${k}: time`).toBeLessThan(5_000);
        expect(show(got), `${name} k ${k}`).toEqual(show(t.alone.top(q, k)));
        if (k > t.m.rows) expect(new Set(got.map((h) => `${h.pageId}#${h.ord}`)).size, `${name} k ${k}: every row once`).toBe(t.m.rows);
      }
      // A query of the same values in another array: scanned again, the same answer.
      const p = t.m.begin(q)!;
      expect(show(t.m.topOf(p, Float32Array.from(q), 15)), `${name}: another array`).toEqual(show(t.alone.top(q, 15)));
    }
    // A query of other dimensions is refused by begin and by topOf; the part begun is not left out.
    expect(() => t.m.begin(new Float32Array(dims + 1))).toThrow(/dimension/);
    const q = make((i) => Math.cos(i));
    const p = t.m.begin(q)!;
    expect(() => t.m.topOf(p, new Float32Array(dims - 1), 3)).toThrow(/dimension/);
    const other = twins(PARALLEL_FROM + 50, 8, 5);
    const jobs = helperStats().jobs;
    const q8 = unitVector(other.rnd, 8);
    expect(show(other.m.top(q8, 5))).toEqual(show(other.alone.top(q8, 5)));
    expect(helperStats().jobs, 'the helper takes the next scan: nothing is left out').toBeGreaterThan(jobs);
    for (const x of [t, other]) {
      x.m.dispose();
      x.alone.dispose();
    }
  }, 60_000);

  it('many interleaved "searches" (begin, yield, topOf) on three large matrices while a writer and a stopper run: every answer is the twin’s at that moment', async () => {
    const sets = [twins(PARALLEL_FROM * 2 + 1, 32, 11), twins(PARALLEL_FROM + CHUNK_ROWS * 3 + 5, 24, 12), twins(PARALLEL_FROM + 1, 32, 13)];
    await helperUp(sets[0]!.m, 32);
    const rnd = prng(99);
    let stopWriting = false;
    const counts = { begun: 0, refused: 0, answers: 0, writes: 0, stops: 0 };
    const writer = (async () => {
      for (let i = 0; !stopWriting; i++) {
        const t = sets[i % sets.length]!;
        const n = 1 + Math.floor(rnd() * 40);
        const vecs = Array.from({ length: n }, (_, j) => ({ ord: j, vec: unitVector(t.rnd, t.dims), tag: i }));
        t.both((x) => x.setPage(`w${i % 23}`, vecs));
        const gone = `p${Math.floor(rnd() * 200)}`;
        if (i % 3 === 0) t.both((x) => x.removePage(gone));
        counts.writes++;
        if (i % 40 === 39) {
          stopHelper();
          counts.stops++;
        }
        await (i % 2 ? tick() : Promise.resolve());
      }
    })();
    const search = async (w: number) => {
      for (let i = 0; i < 40; i++) {
        const t = sets[(w + i) % sets.length]!;
        const q = unitVector(t.rnd, t.dims);
        const k = [1, 10, 50, 120][i % 4]!;
        const p = t.m.begin(q);
        if (p) counts.begun++;
        else counts.refused++;
        const y = (w + i) % 3;
        if (y === 0) await tick();
        else if (y === 1) await sleep(0);
        else await Promise.resolve();
        const got = p ? t.m.topOf(p, q, k) : t.m.top(q, k);
        // Synchronously after: the twin holds the same rows now.
        expect(show(got), `searcher ${w} round ${i}`).toEqual(show(t.alone.top(q, k)));
        counts.answers++;
      }
    };
    await Promise.all(Array.from({ length: 6 }, (_, w) => search(w)));
    stopWriting = true;
    await writer;
    expect(counts.answers).toBe(240);
    expect(counts.begun, JSON.stringify(counts)).toBeGreaterThan(10);
    expect(counts.refused, JSON.stringify(counts)).toBeGreaterThan(10);
    expect(counts.writes).toBeGreaterThan(20);
    for (const t of sets) {
      t.m.dispose();
      t.alone.dispose();
    }
  }, 60_000);

  it('topOf called a second time on a scan it already finished, while the helper scans another matrix: both answers stay right', async () => {
    // Chunk counts: A's at least B's, so a second topOf of A claims every chunk number B's scan uses.
    const rows = CHUNK_ROWS * 40 + 11;
    const A = twins(rows, 64, 21);
    const B = twins(rows, 64, 22);
    await helperUp(A.m, 64);
    const failures: string[] = [];
    for (let round = 0; round < 5; round++) {
      // B's scores hold another query's (a scan before), as in a server that searched it before.
      const before = unitVector(B.rnd, 64);
      B.m.top(before, 3);
      const qa = unitVector(A.rnd, 64);
      const qb = unitVector(B.rnd, 64);
      const pa = begun(A.m, qa, 'A');
      const first = show(A.m.topOf(pa, qa, 10));
      expect(first).toEqual(show(A.alone.top(qa, 10)));
      const pb = begun(B.m, qb, 'B');
      const again = show(A.m.topOf(pa, qa, 10));
      const gotB = show(B.m.topOf(pb, qb, 10));
      const wantB = show(B.alone.top(qb, 10));
      if (JSON.stringify(again) !== JSON.stringify(first)) failures.push(`round ${round}: A's second topOf differs from its first`);
      if (JSON.stringify(gotB) !== JSON.stringify(wantB))
        failures.push(`round ${round}: B's answer is wrong: got ${gotB.slice(0, 3).join(', ')}…, want ${wantB.slice(0, 3).join(', ')}…`);
    }
    A.m.dispose();
    A.alone.dispose();
    B.m.dispose();
    B.alone.dispose();
    expect(failures).toEqual([]);
  }, 60_000);

  it('a helper that dies with a part out (its exit already seen) costs no long freeze, and the answer is still right', async () => {
    const dims = 64;
    const t = twins(PARALLEL_FROM * 4, dims, 31);
    let seen = false;
    for (let attempt = 0; attempt < 10 && !seen; attempt++) {
      await helperUp(t.m, dims);
      // The helper at hand: a spent scan names it.
      const q0 = unitVector(t.rnd, dims);
      const p0 = begun(t.m, q0, 'probe');
      t.m.topOf(p0, q0, 1);
      const h = p0.part.helper;
      // It dies (as when its thread is killed: an out-of-memory end), and a scan is handed to it
      // before its exit is seen.
      const dying = h.worker.terminate();
      const q = unitVector(t.rnd, dims);
      const p = t.m.begin(q);
      if (!p) continue;
      await dying;
      // The helper is known gone now (its exit event ran), and it never finished the part.
      if (Atomics.load(h.ctl, 8) !== 0 || !h.gone) {
        t.m.topOf(p, q, 1);
        continue;
      }
      seen = true;
      const started = performance.now();
      const got = t.m.topOf(p, q, 20);
      const took = performance.now() - started;
      expect(show(got), 'answer after the helper died').toEqual(show(t.alone.top(q, 20)));
      // A new helper takes later scans.
      await helperUp(t.m, dims);
      const jobs = helperStats().jobs;
      const q2 = unitVector(t.rnd, dims);
      expect(show(t.m.top(q2, 5))).toEqual(show(t.alone.top(q2, 5)));
      expect(helperStats().jobs).toBeGreaterThan(jobs);
      expect(took, 'ms the serving thread was blocked in topOf waiting for a helper known to be gone').toBeLessThan(1_000);
    }
    expect(seen, 'a part was handed to a dying helper and left unfinished').toBe(true);
    t.m.dispose();
    t.alone.dispose();
  }, 60_000);

  it('a process that ends with a part out (begun, never finished) exits at once, naturally or by process.exit', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-r2-'));
    const root = path.resolve(import.meta.dirname, '../..');
    const script = (tail: string) => `
import { VectorMatrix, PARALLEL_FROM } from ${JSON.stringify(path.join(root, 'src/retrieval/vectors/matrix.js'))};
import { helperStats } from ${JSON.stringify(path.join(root, 'src/retrieval/vectors/scan-helper.js'))};
const n = PARALLEL_FROM * 6;
const m = new VectorMatrix(256, n);
const v = new Float32Array(256).fill(0.25);
for (let p = 0; p < n / 1000; p++) m.setPage('p' + p, Array.from({ length: 1000 }, (_, i) => ({ ord: i, vec: v, tag: 0 })));
const q = new Float32Array(256).fill(0.1);
for (let i = 0; i < 300 && !helperStats().running; i++) { m.scan(q, 1); await new Promise((r) => setTimeout(r, 5)); }
const pending = m.begin(q);
console.log(JSON.stringify({ begun: pending !== null, ...helperStats() }));
${tail}`;
    try {
      for (const [name, tail, code] of [
        ['natural end', '', 0],
        ['process.exit', 'process.exit(0);', 0],
        ['exit from a timer', 'setTimeout(() => process.exit(4), 1);', 4],
        ['throw', 'throw new Error("boom");', 1],
      ] as const) {
        const file = path.join(dir, `${name.replace(/\W/g, '-')}.mts`);
        fs.writeFileSync(file, script(tail));
        const child = spawn(process.execPath, ['--import', 'tsx', file], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        let err = '';
        let printedAt = 0;
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          printedAt ||= Date.now();
        });
        child.stderr.on('data', (d: Buffer) => (err += d.toString()));
        const exited = await new Promise<number | null>((resolve) => {
          const timer = setTimeout(() => {
            child.kill('SIGKILL');
            resolve(null);
          }, 20_000);
          child.on('exit', (c) => {
            clearTimeout(timer);
            resolve(c);
          });
        });
        const endedAfter = Date.now() - printedAt;
        expect(exited, `${name}: ${err.slice(0, 400)}`).toBe(code);
        expect(JSON.parse(out.trim().split('\n').at(-1)!), name).toMatchObject({ begun: true, running: true });
        expect(endedAfter, `${name}: ms from the part begun to the exit`).toBeLessThan(2_000);
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

/* ------------------------------------------------------------------------------------------ */
/* Over HTTP: hybrid search and the bundle on large workspaces, both engines                  */
/* ------------------------------------------------------------------------------------------ */

const letter = (n: number) => String.fromCharCode(97 + (n % 26));
const digits = (n: number, base: number) => [...String(n)].map((d) => String.fromCharCode(base + Number(d))).join('');
/** Words of their own per page and section (the builtin embeddings hash n-grams): two per section. */
const vword = (p: number, j: number) => `vqx${letter(p)}${letter(Math.floor(p / 26))}k${digits(j, 104)}`;
const uword = (p: number, j: number) => `ulm${letter(j)}${letter(Math.floor(j / 26))}r${digits(p, 106)}`;
/** Noise pages' words: none shared with the pages searched. */
const nword = (i: number, j: number) => `zoph${letter(i)}${letter(Math.floor(i / 26))}${digits(j, 110)}`;
/** A public page of `n` sections: every odd one inside a `::: confidential` block. */
const vpage = (p: number, n: number) =>
  `---\nsensitivity: public\n---\n# Page ${p}\n\n` +
  Array.from({ length: n }, (_, j) => {
    const text = `${vword(p, j)} ${uword(p, j)} glacier ${j % 7} fjord`;
    return `## s${j}\n\n${j % 2 === 1 ? `::: confidential\n${text}\n:::` : text}\n`;
  }).join('\n');
const npage = (i: number, round: number) =>
  `---\nsensitivity: public\n---\n# Noise ${i}\n\n` +
  Array.from({ length: 6 }, (_, j) => `## n${j}\n\n${nword(i, j + round)} moraine ${nword(i + 7, j)} tundra\n`).join('\n');

interface Hit {
  id: string;
  path: string;
  section: string;
  score: number;
}
interface Who {
  name: string;
  /** A session's cookies, or a key. */
  cookie?: string;
  csrf?: string;
  key?: string;
}

/** One request with a deadline: an answer that never comes fails the test instead of hanging it. */
async function call(base: string, who: Who, method: string, url: string, body?: unknown): Promise<{ status: number; body: any; text: string; ms: number }> {
  const headers: Record<string, string> = {};
  if (who.key) headers.authorization = `Bearer ${who.key}`;
  if (who.cookie) headers.cookie = who.cookie;
  if (who.csrf && method !== 'GET') headers['x-csrf-token'] = who.csrf;
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (url === '/mcp') headers.accept = 'application/json, text/event-stream';
  const started = performance.now();
  const res = await fetch(base + url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(30_000) });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: res.status, body: parsed, text, ms: performance.now() - started };
}

const sessionOf = (c: Client): Who => ({
  name: 'session',
  cookie: [...c.cookies].map(([k, v]) => `${k}=${v}`).join('; '),
  csrf: c.csrf,
});

/** A tool call over MCP (stateless); the tool's structured result, or its text, or the error. */
async function tool(
  base: string,
  who: Who,
  name: string,
  args: Record<string, unknown>,
): Promise<{ status: number; isError: boolean; result: any; text: string }> {
  const r = await call(base, who, 'POST', '/mcp', { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args } });
  let body = r.body;
  if (typeof body === 'string') {
    // An event stream: the last data line holds the answer.
    const data = body
      .split('\n')
      .filter((l) => l.startsWith('data:'))
      .at(-1);
    body = data ? JSON.parse(data.slice(5)) : null;
  }
  const result = body?.result;
  const isError = r.status !== 200 || !!body?.error || !!result?.isError;
  return { status: r.status, isError, result: result?.structuredContent ?? result?.content?.[0]?.text, text: r.text };
}

/**
 * Two answers alike, tolerant only to exactly tied scores: the same scores in order, and at each
 * score but the lowest (which the cut may split) the same hits.
 */
function expectSameHits(got: Hit[], want: Hit[], what: string): void {
  const line = (xs: Hit[]) => xs.map((h) => `${h.path}#${h.section}=${h.score}`).join(', ');
  what = `${what}\n  got:  ${line(got)}\n  want: ${line(want)}`;
  expect(
    got.map((h) => h.score),
    what,
  ).toEqual(want.map((h) => h.score));
  const low = want.at(-1)?.score;
  const above = (xs: Hit[]) => sorted(xs.filter((h) => h.score !== low).map((h) => `${h.score} ${h.id} ${h.section}`));
  expect(above(got), what).toEqual(above(want));
}
const sorted = (xs: Iterable<string>) => [...xs].sort();

/** Counts, on one matrix, scans begun on the helper, refused, and finished as begun or scanned again. */
function watchMatrix(m: VectorMatrix) {
  const c = { begun: 0, refused: 0, current: 0, stale: 0 };
  const begin = m.begin.bind(m);
  const topOf = m.topOf.bind(m);
  const counters = m as unknown as { scans: number; mutations: number };
  m.begin = (q) => {
    const p = begin(q);
    if (p) c.begun++;
    else c.refused++;
    return p;
  };
  m.topOf = (p, q, k) => {
    if (p.query === q && p.scans === counters.scans && p.mutations === counters.mutations && p.n === m.rows) c.current++;
    else c.stale++;
    return topOf(p, q, k);
  };
  return c;
}

const PASSWORD = 'correct horse battery';

/** Every word written, and where: to tell a foreign or hidden section by the words an answer shows. */
const words = new Map<string, { ws: 'a' | 'b'; p: number; j: number }>();
const vpageOf = (ws: 'a' | 'b', p: number, n: number) => {
  for (let j = 0; j < n; j++) for (const w of [vword(p, j), uword(p, j)]) words.set(w, { ws, p, j });
  return vpage(p, n);
};

/** Two workspaces past PARALLEL_FROM rows on one server, the faces that ask them, and a quiet run's answers. */
async function world(tdb: { dataDir: string; databaseUrl: string | undefined }) {
  const server = await startServerOn(tdb);
  const base = server.url;
  const a = await signupHuman(base, 'Alma');
  const b = await signupHuman(base, 'Bert');
  expectStatus(await a.client.post('/api/auth/stepup', { password: PASSWORD }), 200);
  const agentKey = (await createReaderAgent(a.client, 'internal')).key;
  const readOnly = (await createAgentWithKey(a.client, [{ action: 'read', ceiling: 'internal' }], { ceiling: 'internal' })).key;
  const searchOnly = (await createAgentWithKey(a.client, [{ action: 'search', ceiling: 'internal' }], { ceiling: 'internal' })).key;
  const owner = sessionOf(a.client);
  const bOwner = sessionOf(b.client);
  const agent: Who = { name: 'agent', key: agentKey };

  // A: 24 pages of 12 sections in Space v (one import, one commit), noise in Space w; B: two of A's pages at the same paths.
  const PAGES = 24;
  const PER = 12;
  const imp = await postJson(
    a.client,
    'v',
    Array.from({ length: PAGES }, (_, p) => ({ path: `p${p}.md`, content: vpageOf('a', p, PER) })),
  );
  expectStatus(imp, 200);
  expect(imp.body.status, JSON.stringify(imp.body).slice(0, 300)).toBe('done');
  const importCommit = imp.body.commits.at(-1) as string;
  const ids = { a: new Set<string>(), b: new Set<string>() };
  const create = async (c: Client, ws: 'a' | 'b', p: string, content: string) => {
    const r = await c.post('/api/v1/nodes', { path: p, content });
    expectStatus(r, 201);
    ids[ws].add(r.body.id as string);
    return r.body.id as string;
  };
  for (let i = 0; i < 3; i++) await create(a.client, 'a', `w/n${i}.md`, npage(i, 0));
  for (const p of [0, 1]) {
    await create(b.client, 'b', `v/p${p}.md`, vpageOf('b', p, PER));
  }
  await waitForVectors(a.client, 60_000);
  // Both matrices past PARALLEL_FROM: rows of no page (zero vectors score 0, below every
  // answer), then pages written after them, in chunks either thread may claim.
  const ma = (await server.ctx.retrieval.matrix(a.workspace.id))!;
  const mb = (await server.ctx.retrieval.matrix(b.workspace.id))!;
  const zero = new Float32Array(ma.dims);
  for (const [m, n] of [
    [ma, PARALLEL_FROM + 2 * CHUNK_ROWS],
    [mb, PARALLEL_FROM + 3],
  ] as const)
    m.setPage(
      'zz-fill',
      Array.from({ length: n }, (_, i) => ({ ord: i, vec: zero, tag: 0 })),
    );
  for (const p of [30, 31, 32]) await create(a.client, 'a', `v/late${p}.md`, vpageOf('a', p, PER));
  await create(b.client, 'b', 'v/late40.md', vpageOf('b', 40, PER));
  await waitForVectors(a.client, 60_000);
  const listed = await sql<{ id: string; workspace_id: string }>`select id, workspace_id from pages where deleted_at is null`.execute(server.ctx.store.db);
  for (const r of listed.rows) ids[r.workspace_id === a.workspace.id ? 'a' : 'b'].add(r.id);
  expect(ma.rows).toBeGreaterThan(PARALLEL_FROM + 2 * CHUNK_ROWS + PAGES * PER);
  expect(mb.rows).toBeGreaterThan(PARALLEL_FROM);
  const watchA = watchMatrix(ma);
  const watchB = watchMatrix(mb);

  const probes = [
    vword(0, 0),
    vword(5, 4),
    vword(23, 10),
    uword(7, 8),
    `${vword(3, 6)} ${uword(3, 6)}`,
    vword(30, 2),
    vword(31, 11),
    vword(0, 1),
    uword(32, 5),
    '!!! ???',
  ];
  const enc = encodeURIComponent;
  const hits = (xs: { id: string; path: string; section?: string; heading?: string; score: number }[]): Hit[] =>
    xs.map((h) => ({ id: h.id, path: h.path, section: h.section ?? h.heading ?? '', score: h.score }));
  /** What each face answers for a probe. */
  const faces: Record<string, (q: string) => Promise<Hit[]>> = {
    ownerHybrid: async (q) => {
      const r = await call(base, owner, 'GET', `/api/v1/search?mode=hybrid&space=v&limit=10&q=${enc(q)}`);
      expect(r.status, `owner hybrid ${q}: ${r.text.slice(0, 200)}`).toBe(200);
      expect(r.body.mode_used, q).toBe('hybrid');
      return hits(r.body.results);
    },
    agentHybrid50: async (q) => {
      const r = await call(base, agent, 'GET', `/api/v1/search?space=v&limit=50&q=${enc(q)}`);
      expect(r.status, `agent hybrid ${q}: ${r.text.slice(0, 200)}`).toBe(200);
      return hits(r.body.results);
    },
    bHybrid: async (q) => {
      const r = await call(base, bOwner, 'GET', `/api/v1/search?mode=hybrid&space=v&limit=10&q=${enc(q)}`);
      expect(r.status, `B hybrid ${q}: ${r.text.slice(0, 200)}`).toBe(200);
      return hits(r.body.results);
    },
    ownerBundle: async (q) => {
      const r = await call(base, owner, 'POST', '/api/v1/bundle', { intent: q, budget_tokens: 64_000, scope: 'v' });
      expect(r.status, `owner bundle ${q}: ${r.text.slice(0, 200)}`).toBe(200);
      return hits(r.body.sections);
    },
    bBundle: async (q) => {
      const r = await call(base, bOwner, 'POST', '/api/v1/bundle', { intent: q, budget_tokens: 64_000, scope: 'v' });
      expect(r.status, `B bundle ${q}: ${r.text.slice(0, 200)}`).toBe(200);
      return hits(r.body.sections);
    },
    agentMcpSearch: async (q) => {
      const r = await tool(base, agent, 'context_search', { query: q, scope: 'v', limit: 10 });
      expect(r.isError, `agent MCP search ${q}: ${r.text.slice(0, 300)}`).toBe(false);
      return hits(r.result.results);
    },
  };
  /** Bounds every answer keeps: its own workspace, and the agent never past its ceiling. */
  const inBounds = (face: string, q: string, xs: Hit[]) => {
    const own = face.startsWith('b') ? ids.b : ids.a;
    for (const h of xs) {
      expect(own.has(h.id), `${face} ${q}: ${h.path} ${h.id} is not of its workspace`).toBe(true);
      if (face.startsWith('agent')) expect(Number(/^s(\d+)$/.exec(h.section)?.[1] ?? 0) % 2, `${face} ${q}: reached ${h.path} ${h.section}`).toBe(0);
    }
  };
  /** The MCP bundle of the agent: its markdown shows no word of a hidden section nor of B. */
  const agentMcpBundle = async (q: string) => {
    const r = await tool(base, agent, 'context_bundle', { intent: q, scope: 'v', budget_tokens: 1_500 });
    expect(r.isError, `agent MCP bundle ${q}: ${r.text.slice(0, 300)}`).toBe(false);
    const md = String(r.result);
    for (const w of md.match(/\b(?:vqx|ulm)[a-z]+\b/g) ?? []) {
      const where = words.get(w);
      expect(where, `agent MCP bundle ${q}: unknown word ${w}`).toBeDefined();
      expect(where!.j % 2, `agent MCP bundle ${q}: word ${w} of a confidential section`).toBe(0);
    }
    return md;
  };
  type Answers = Record<string, Record<string, Hit[]>>;
  const round = async (): Promise<Answers> => {
    const out: Answers = {};
    const jobs: Promise<void>[] = [];
    for (const [face, ask] of Object.entries(faces)) {
      out[face] = {};
      for (const q of probes)
        jobs.push(
          ask(q).then((xs) => {
            inBounds(face, q, xs);
            out[face]![q] = xs;
          }),
        );
    }
    for (const q of probes.slice(0, 4)) jobs.push(agentMcpBundle(q).then(() => undefined));
    await Promise.all(jobs);
    return out;
  };
  const quietRun = async (): Promise<Answers> => {
    const out: Answers = {};
    for (const [face, ask] of Object.entries(faces)) {
      out[face] = {};
      for (const q of probes) out[face]![q] = await ask(q);
    }
    return out;
  };
  const expectSame = (got: Answers, want: Answers, what: string) => {
    for (const [face, byQ] of Object.entries(want)) for (const [q, xs] of Object.entries(byQ)) expectSameHits(got[face]![q]!, xs, `${what}: ${face} ${q}`);
  };

  const quiet = await quietRun();
  // The probes find what they name (the scans are right to begin with).
  expect(quiet.ownerHybrid![vword(5, 4)]![0]).toMatchObject({ path: 'v/p5.md', section: 's4' });
  expect(quiet.ownerHybrid![vword(30, 2)]![0]).toMatchObject({ path: 'v/late30.md', section: 's2' });
  expect(quiet.ownerHybrid![vword(0, 1)]![0]).toMatchObject({ path: 'v/p0.md', section: 's1' });
  expect(quiet.agentHybrid50![vword(0, 1)]!.map((h) => h.section)).not.toContain('s1');
  expect(quiet.bHybrid![vword(0, 0)]![0]).toMatchObject({ path: 'v/p0.md', section: 's0' });
  expect(quiet.agentMcpSearch![uword(7, 8)]![0]).toMatchObject({ path: 'v/p7.md', section: 's8' });
  expect(quiet.ownerBundle![vword(23, 10)]![0]).toMatchObject({ path: 'v/p23.md', section: 's10' });
  expect(watchA.begun + watchB.begun, 'scans begun on the helper in the quiet run').toBeGreaterThan(0);
  expect(await quietRun(), 'a quiet run again').toEqual(quiet);

  return {
    server,
    base,
    a,
    b,
    owner,
    bOwner,
    agent,
    readOnly,
    searchOnly,
    importCommit,
    ids,
    create,
    ma,
    mb,
    zero,
    watchA,
    watchB,
    probes,
    enc,
    hits,
    round,
    quietRun,
    expectSame,
    quiet,
  };
}

describe.each(testEngines())('attack r2: hybrid search and the bundle over HTTP while matrices change (%s)', (engine) => {
  let tdb: Awaited<ReturnType<typeof createTestDatabase>>;
  let w: Awaited<ReturnType<typeof world>>;
  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
    w = await world(tdb);
  }, 90_000);
  afterAll(async () => {
    await w?.server.close();
    await tdb?.cleanup();
  });

  it('concurrent hybrid searches and bundles (REST and MCP) on both large workspaces, while pages are written, rows stormed between begin and topOf and the helper stopped, answer as the quiet run, in bounds; the gated keyword list answers at once whatever the vector side does', async () => {
    const {
      server,
      base,
      a,
      b,
      owner,
      agent,
      readOnly,
      searchOnly,
      importCommit,
      create,
      ma,
      mb,
      zero,
      watchA,
      watchB,
      probes,
      enc,
      round,
      expectSame,
      quiet,
    } = w;
    let storm: ReturnType<typeof setInterval> | undefined;
    try {
      // The race: noise pages written, rewritten and deleted in both workspaces (the embedding
      // worker changes both matrices), rows of no page stormed into both every few ms, the helper
      // stopped now and then; every face asks every probe at once, round after round.
      const qvecs = await Promise.all(probes.map((q) => server.ctx.retrieval.embedQuery(q)));
      let storms = 0;
      // (Stormed rows score below every answer: the probes' vectors negated, or zero. Rows that
      // outrank answers and go away mid-search are another matter: see the next test.)
      const below = qvecs.map((v) => v.map((x) => -x));
      storm = setInterval(() => {
        for (const m of [ma, mb]) {
          const vecs = Array.from({ length: 1 + (storms % 40) }, (_, i) => ({ ord: i, vec: i < below.length ? below[i]! : zero, tag: storms }));
          m.setPage(`zz-storm${storms % 3}`, vecs);
        }
        if (storms % 25 === 24) stopHelper();
        storms++;
      }, 2);
      let writing = true;
      const writes = (async () => {
        try {
          for (let i = 0; i < 8; i++) {
            const na = await create(a.client, 'a', `w/race${i}.md`, npage(10 + i, i));
            await create(b.client, 'b', `w/race${i}.md`, npage(20 + i, i));
            expectStatus(await a.client.put(`/api/v1/nodes/${na}`, { content: npage(10 + i, i + 3) }), 200);
            if (i % 2) expectStatus(await a.client.delete(`/api/v1/nodes/${na}`), 200);
          }
        } finally {
          writing = false;
        }
      })();
      let rounds = 0;
      while (writing || rounds < 3) {
        const got = await round();
        expectSame(got, quiet, `race round ${rounds}`);
        rounds++;
      }
      await writes;
      clearInterval(storm);
      storm = undefined;
      expect(storms, 'storms').toBeGreaterThan(10);
      expect(watchA.stale + watchB.stale, `topOf found its scan outdated (${JSON.stringify({ watchA, watchB })})`).toBeGreaterThan(0);
      expect(watchA.current + watchB.current, `topOf finished its scan as begun (${JSON.stringify({ watchA, watchB })})`).toBeGreaterThan(0);
      expect(watchA.refused + watchB.refused, `a begin refused while another part was out (${JSON.stringify({ watchA, watchB })})`).toBeGreaterThan(0);

      // The gate: requests whose vector side ends early, or never starts, answer at once amid the load.
      const load = round();
      const gate = await Promise.all([
        call(base, owner, 'GET', `/api/v1/search?mode=hybrid&q=${enc('!!! ???')}`),
        call(base, owner, 'GET', `/api/v1/search?mode=hybrid&space=nope&q=${enc(vword(1, 2))}`),
        call(base, owner, 'GET', `/api/v1/search?mode=hybrid&cluster=v/none&q=${enc(vword(1, 2))}`),
        call(base, owner, 'GET', `/api/v1/search?mode=hybrid&tags=nosuchtag&q=${enc(vword(1, 2))}`),
        call(base, owner, 'GET', `/api/v1/search?mode=hybrid&limit=51&q=${enc(vword(1, 2))}`),
        call(base, { name: 'read only', key: readOnly }, 'GET', `/api/v1/search?mode=hybrid&q=${enc(vword(1, 2))}`),
        call(base, { name: 'read only', key: readOnly }, 'POST', '/api/v1/bundle', { intent: vword(1, 2), scope: 'v' }),
        call(base, { name: 'search only', key: searchOnly }, 'POST', '/api/v1/bundle', { intent: vword(1, 2) }),
        call(base, { name: 'search only', key: searchOnly }, 'GET', `/api/v1/search?mode=hybrid&q=${enc(vword(1, 2))}`),
        call(base, owner, 'POST', '/api/v1/bundle', { intent: '??', budget_tokens: 200 }),
        call(base, owner, 'POST', '/api/v1/bundle', { intent: vword(1, 2), scope: 'nope' }),
        call(base, owner, 'GET', `/api/v1/search?mode=hybrid&space=v&at=${importCommit}&q=${enc(vword(5, 4))}`),
        call(base, owner, 'GET', `/api/v1/search?mode=hybrid&space=v&at=${importCommit}&q=${enc(vword(30, 2))}`),
        call(base, agent, 'POST', '/api/v1/bundle', { intent: vword(5, 4), scope: 'v', at: importCommit }),
        call(base, owner, 'GET', `/api/v1/search?mode=hybrid&space=v&at=0000000000&q=${enc(vword(5, 4))}`),
      ]);
      await load;
      const statuses = gate.map((r) => r.status);
      expect(statuses, gate.map((r) => r.text.slice(0, 120)).join('\n')).toEqual([200, 404, 404, 200, 400, 403, 200, 403, 200, 200, 404, 200, 200, 200, 404]);
      for (const r of gate) expect(r.ms, r.text.slice(0, 120)).toBeLessThan(10_000);
      expect(gate[3]!.body.results).toEqual([]);
      expect(gate[6]!.body.sections[0]).toMatchObject({ path: 'v/p1.md', heading: 's2' });
      expect(gate[8]!.body.results[0]).toMatchObject({ path: 'v/p1.md', section: 's2' });
      // At the import's commit: the page as it was, and no page written since.
      expect(gate[11]!.body).toMatchObject({ at: importCommit, mode_used: 'hybrid' });
      expect(gate[11]!.body.results[0]).toMatchObject({ path: 'v/p5.md', section: 's4' });
      expect(gate[12]!.body.results.map((h: Hit) => h.path)).not.toContain('v/late30.md');
      expect(gate[13]!.body.sections[0]).toMatchObject({ path: 'v/p5.md', heading: 's4' });
      for (const s of gate[13]!.body.sections as { heading: string }[]) expect(Number(s.heading.slice(1)) % 2).toBe(0);
    } finally {
      if (storm) clearInterval(storm);
      for (const m of [ma, mb]) for (let i = 0; i < 3; i++) m.removePage(`zz-storm${i}`);
    }
  }, 60_000);

  it('rows that outrank every answer and go away between two widening rounds of the vector list take no answer with them', async () => {
    const { server, base, agent, ma, enc, hits } = w;
    // Rows that outrank every answer and go away between two rounds of vectorCandidates'
    // widening (a page deleted or rewritten by another writer while the search runs, here
    // rows of no page removed right after the first scan): the next round's `hits.slice(seen)`
    // starts past rows that moved up into the part already read, so they are never looked at.
    const probe = vword(31, 11);
    const ask = async () => {
      const r = await call(base, agent, 'GET', `/api/v1/search?space=v&limit=10&q=${enc(probe)}`);
      expectStatus(r as never, 200);
      return hits(r.body.results);
    };
    const before = await ask();
    expect(before.length, 'vector answers of the agent for a word it cannot see').toBeGreaterThan(2);
    const qv = await server.ctx.retrieval.embedQuery(probe);
    const plainTop = ma.top;
    const plainTopOf = ma.topOf;
    let removed = 0;
    const once = () => {
      if (ma.has('zz-outranking')) {
        ma.removePage('zz-outranking');
        removed++;
      }
    };
    ma.top = (q, k) => {
      const r = plainTop.call(ma, q, k);
      once();
      return r;
    };
    ma.topOf = (pending, q, k) => {
      const r = plainTopOf.call(ma, pending, q, k);
      once();
      return r;
    };
    let during: Hit[];
    try {
      ma.setPage(
        'zz-outranking',
        Array.from({ length: 60 }, (_, i) => ({ ord: i, vec: qv, tag: 0 })),
      );
      during = await ask();
    } finally {
      ma.top = plainTop;
      ma.topOf = plainTopOf;
      ma.removePage('zz-outranking');
    }
    expect(removed, 'the rows went away mid-search').toBe(1);
    expectSameHits(await ask(), before, 'asked again');
    expectSameHits(during, before, 'asked while rows that outrank every answer go away between two widening rounds');
  }, 30_000);

  it('after the race, once the worker caught up: the quiet answers again; and with every matrix scanning alone, the same', async () => {
    const { a, b, ma, mb, watchA, watchB, quietRun, expectSame, quiet } = w;
    // Quiet again, once the worker caught up: the same answers; and every matrix scanning alone: the same again.
    for (const m of [ma, mb]) for (let i = 0; i < 3; i++) m.removePage(`zz-storm${i}`);
    await waitForVectors(a.client, 60_000);
    await waitForVectors(b.client, 60_000);
    expectSame(await quietRun(), quiet, 'quiet after the race');
    const begun = watchA.begun + watchB.begun;
    ma.dispose();
    mb.dispose();
    expectSame(await quietRun(), quiet, 'every matrix scanning alone');
    expect(watchA.begun + watchB.begun, 'no scan begun on the helper once disposed').toBe(begun);
  }, 60_000);
});

describe.each(testEngines())('attack r2: the gate when the vector side fails, hangs or is slow (%s)', (engine) => {
  let emb: Awaited<ReturnType<typeof embeddingsServer>>;
  let tdb: Awaited<ReturnType<typeof createTestDatabase>>;
  let server: Awaited<ReturnType<typeof startServerOn>>;
  let owner: Who;
  let h: Awaited<ReturnType<typeof signupHuman>>;
  beforeAll(async () => {
    emb = await embeddingsServer('ok');
    tdb = await createTestDatabase(engine);
    server = await startServerOn(tdb, {
      EMBEDDINGS: 'openai',
      EMBEDDINGS_URL: emb.url,
      EMBEDDINGS_MODEL: 'r2-16',
      EMBEDDINGS_API_KEY: 'sk-r2-0123456789abcdef',
      EMBEDDINGS_TIMEOUT_MS: '300',
      EMBEDDINGS_MAX_RETRIES: '0',
    });
    h = await signupHuman(server.url, 'Oda');
    owner = sessionOf(h.client);
    for (const [p, content] of [
      ['o/heron.md', '# Heron pipeline\n\nThe heron pipeline copies warehouse tables nightly.\n'],
      ['o/egret.md', '# Egret service\n\nThe egret service sends invoices.\n\n## Retries\n\nEgret retries thrice.\n'],
      ['o/ibis.md', '# Ibis\n\nIbis archives logs for a year.\n'],
    ])
      expectStatus(await h.client.post('/api/v1/nodes', { path: p, content }), 201);
    await waitForVectors(h.client, 30_000);
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    await tdb?.cleanup();
    await emb?.close();
  });

  it('with the embeddings provider failing or hanging, hybrid search and the bundle answer by keyword at once, many at a time, beside hybrid answers of cached queries scanned on the helper', async () => {
    const m = (await server.ctx.retrieval.matrix(h.workspace.id))!;
    expect(m.dims).toBe(16);
    m.setPage(
      'zz-fill',
      Array.from({ length: PARALLEL_FROM + 10 }, (_, i) => ({ ord: i, vec: new Float32Array(16), tag: 0 })),
    );
    const watch = watchMatrix(m);
    const search = (q: string) => call(server.url, owner, 'GET', `/api/v1/search?mode=hybrid&q=${encodeURIComponent(q)}`);
    const bundle = (q: string) => call(server.url, owner, 'POST', '/api/v1/bundle', { intent: q, budget_tokens: 800 });
    // Embedded now, so cached: these keep their vector side through the outage.
    const cached = await search('heron warehouse');
    expect(cached.status).toBe(200);
    expect(cached.body).toMatchObject({ mode_used: 'hybrid' });
    expect(cached.body.results[0].path).toBe('o/heron.md');
    // (The helper starts with the first large scan.)
    for (let i = 0; i < 100 && watch.begun === 0; i++) {
      await sleep(10);
      expect((await search('heron warehouse')).body.results).toEqual(cached.body.results);
    }
    expect(watch.begun, 'the cached query was begun on the helper').toBeGreaterThan(0);

    for (const mode of ['fail', 'hang'] as const) {
      emb.state.mode = mode;
      const words = ['heron', 'egret', 'ibis'];
      const started = performance.now();
      const answers = await Promise.all([
        // Never embedded before: the vector side fails (or times out after 300 ms).
        ...words.map((w, i) => search(`${w} ${mode} ${i}`)),
        ...words.map((w, i) => bundle(`${w} ${mode} bundle ${i}`)),
        ...Array.from({ length: 6 }, () => search('heron warehouse')),
      ]);
      const took = performance.now() - started;
      for (const r of answers) expect(r.status, `${mode}: ${r.text.slice(0, 200)}`).toBe(200);
      for (const [i, w] of words.entries()) {
        const s = answers[i]!.body;
        expect(s, `${mode}: search ${w}`).toMatchObject({ mode: 'hybrid', mode_used: 'fts' });
        expect(s.note, `${mode}: search ${w}`).toMatch(/embeddings are unavailable/);
        expect(s.results[0]?.path, `${mode}: search ${w}`).toBe(`o/${w}.md`);
        const b = answers[3 + i]!.body;
        expect(b.sections[0]?.path, `${mode}: bundle ${w}`).toBe(`o/${w}.md`);
      }
      for (const r of answers.slice(6)) {
        expect(r.body, `${mode}: the cached query`).toMatchObject({ mode_used: 'hybrid' });
        expect(r.body.results, `${mode}: the cached query`).toEqual(cached.body.results);
      }
      expect(took, `${mode}: ms for 12 answers at once`).toBeLessThan(5_000);
    }
    emb.state.mode = 'ok';
    const back = await search('egret invoices');
    expect(back.body).toMatchObject({ mode_used: 'hybrid' });
    expect(back.body.results[0].path).toBe('o/egret.md');
  }, 60_000);

  it('with a slow provider, an uncached hybrid query takes the longer list’s time, not both one after the other', async () => {
    // A provider that takes its time (a remote one: ~250 ms a query) and keyword statements
    // that take theirs (a loaded database: ~250 ms each). Hybrid used to wait for the longer of
    // the two lists; held back behind the gate, the keyword list starts only once the query is
    // embedded, so an uncached hybrid query waits for both, one after the other.
    const ex = server.ctx.store.db.getExecutor() as unknown as { executeQuery: (...a: unknown[]) => Promise<unknown> };
    const provider = server.ctx.retrieval.provider as unknown as { embed: (texts: string[]) => Promise<Float32Array[]> };
    const plainExec = ex.executeQuery;
    const plainEmbed = provider.embed;
    const SLOW = 250;
    emb.state.mode = 'ok';
    ex.executeQuery = async function (this: unknown, ...args: unknown[]) {
      if (/ match |@@/i.test((args[0] as { sql: string }).sql)) await sleep(SLOW);
      return plainExec.apply(this, args);
    };
    provider.embed = async function (this: unknown, texts: string[]) {
      await sleep(SLOW);
      return plainEmbed.call(this, texts);
    };
    try {
      const timed = async (mode: string, q: string) => {
        const r = await call(server.url, owner, 'GET', `/api/v1/search?mode=${mode}&q=${encodeURIComponent(q)}`);
        expect(r.status, r.text.slice(0, 200)).toBe(200);
        expect(r.body.mode_used).toBe(mode);
        return r.ms;
      };
      const fts = await timed('fts', 'ibis archives');
      const vector = await timed('vector', 'ibis archives logs');
      const hybrid = await timed('hybrid', 'ibis archives year');
      expect(
        hybrid,
        `ms of an uncached hybrid query: keyword alone ${fts.toFixed(0)}, vector alone ${vector.toFixed(0)}, hybrid ${hybrid.toFixed(0)} (their sum would be ${(fts + vector).toFixed(0)})`,
      ).toBeLessThan(Math.max(fts, vector) + SLOW * 0.6);
    } finally {
      ex.executeQuery = plainExec;
      provider.embed = plainEmbed;
    }
  }, 30_000);
});
