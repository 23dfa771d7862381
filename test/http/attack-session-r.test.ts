import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import v8 from 'node:v8';
import vm from 'node:vm';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authenticate } from '../../src/auth/resolve.js';
import { SESSION_COOKIE } from '../../src/auth/sessions.js';
import type { Principal } from '../../src/policy/principal.js';
import { keywordCandidates, reachSql, widestCeiling, type Scope } from '../../src/retrieval/candidates.js';
import { keywordPlan, PG_SCORE_BUDGET, SCORE_BUDGET, termDocCounts, type KeywordPlan } from '../../src/retrieval/keyword-plan.js';
import { keywordList } from '../../src/retrieval/lists.js';
import { PARALLEL_FROM, VectorMatrix } from '../../src/retrieval/vectors/matrix.js';
import { helperStats, stopHelper } from '../../src/retrieval/vectors/scan-helper.js';
import type { RunningServer } from '../../src/server.js';
import { createTestDatabase, testEngines } from '../support/engines.js';
import { waitForVectors } from '../support/embeddings-server.js';
import { expectStatus } from '../support/expect.js';
import { postJson } from '../support/imports.js';
import { helperUp, matrixTwins, showHits } from '../support/matrix-twins.js';
import { unitVector } from '../support/random.js';
import { Client, createAgentWithKey, createReaderAgent, signupHuman, startServerOn, startTestServer, type TestServer } from '../support/server.js';

/**
 * Attack session r, on three changes:
 *
 * 1. SQLite keyword search checks a match's section against the partial index of archived
 *    sections (migration 027: `not exists … indexed by page_sections_archived … archived = 1`)
 *    instead of `exists … archived = 0`. Attacked with pages archived, restored, rewritten while
 *    archived (sections under new ids), moved, deleted, archived and restored by folder, imported
 *    (one of them archived), on both engines: every newest-N, unscored and unbounded plan, for
 *    four callers (owner, an internal-ceiling agent, a `*` agent, an agent whose grant names one
 *    Space) and scopes (archived in or out, Space + folder, tags), compared with a reference
 *    computed from the stored sections and their pages' `state` (not the `archived` column); the
 *    same over HTTP; and a newest-N cut crowded by 300 newer archived sections that bm25 prefers
 *    (keywordList at the engine's real budget).
 * 2. A newest-N plan that ranked every match says `complete` so keywordList does not rank them
 *    all again: SQLite by counting the table's matches up to the cut (817e8c7), PostgreSQL when
 *    its windows covered every section (0474086, landed during this session). Attacked where the
 *    cut's count holds sections the caller cannot see (another Space outside a path-scoped
 *    agent's grant, archived pages, levels above its ceiling), with limits below the cut: every
 *    `complete` answer must equal the unbounded plan's, and `complete` is said exactly when the
 *    engine's rule says so.
 * 3. The vector matrix in shared WebAssembly memory, scanned in halves with one helper thread
 *    per process (scan-helper.ts). Attacked in-process (several large matrices of odd sizes at
 *    once against twins scanned alone, NaN / Infinity / huge / zero queries, huge k, the helper
 *    stopped between every scan, matrices grown and shrunk, dropped without dispose, a child
 *    process that ends with the helper parked) and over HTTP on both engines (a workspace of
 *    more than PARALLEL_FROM real rows, a second one pushed past it, three callers searching
 *    while pages are written and the helper is stopped again and again, a matrix dropped and
 *    reloaded under load, a server closed and another started in the same process, answers
 *    compared with a restart whose matrices scan alone).
 *
 * FOUND:
 * - scan-helper.ts: the memory of a matrix the helper took a part of is never freed while the
 *   helper runs, whether the matrix was disposed or collected. `releaseMatrix` drops the helper's
 *   instance from its map, but the helper thread never returns to its event loop and allocates
 *   almost nothing, so its isolate never collects the dropped WebAssembly.Memory objects, and
 *   their shared backing stores stay mapped. Measured: 64 MiB matrices, each scanned once then
 *   disposed and collected on the serving thread, raised RSS by ~64 MiB each, back to baseline
 *   only when stopHelper() ended the thread (a control never handed to the helper freed at
 *   once). In the service: every matrix a RetrievalRuntime drops (stop(), and the reload of a
 *   workspace idle past VECTOR_LOG_KEEP_MS / 2) stays resident for the life of the process.
 *   Test: "the memory of matrices the helper scanned is given back once they are disposed or
 *   dropped". Fixed: letting go of a matrix the helper holds stops the helper (its thread and
 *   every memory it held end), and the next large scan starts a new one.
 * Held: `page_sections.archived` equal to its page's state after every operation; every newest-N,
 *   unscored and unbounded cut equal to the reference's (no archived section unless asked for,
 *   no active one lost to newer archived ones, over HTTP too); every `complete` answer equal to
 *   the unbounded plan's, on both engines, and said exactly by each engine's rule; a path-scoped
 *   agent's all-words list complete though the count held sections it cannot see; hostile query
 *   text 200/400 only; scans with the helper equal to one thread's to the bit (odd sizes and
 *   dimensions, growth, removals, NaN/Infinity/huge/zero queries, huge k, the helper stopped
 *   before scans); no thread left by 25 helpers; a process with the helper parked exits at once;
 *   over HTTP no row of another workspace or above the ceiling, during racing writes and helper
 *   stops too, and answers equal to a reloaded matrix's, another server's in the same process and
 *   matrices scanning alone (up to the order of tied scores, which follows matrix rows).
 */

const PASSWORD = 'correct horse battery';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const ORDER = { public: 0, internal: 1, confidential: 2, secret: 3 } as const;
type Lvl = keyof typeof ORDER;
const lvl = (x: string | null | undefined): number => (x === null || x === undefined ? 0 : ((ORDER as Record<string, number>)[x] ?? 3));

/* ------------------------------------------------------------------------------------------ */
/* Reference model of keyword matches, from the stored sections and their pages' state        */
/* ------------------------------------------------------------------------------------------ */

interface Sec {
  id: number;
  page_id: string;
  ord: number;
  title: string;
  heading: string;
  text: string;
  block_level: string | null;
  archived: number;
  state: string;
  space: string;
  path: string;
  cluster_path: string;
  sensitivity: string;
  deleted_at: string | null;
}

async function storedSections(s: RunningServer, ws: string): Promise<Sec[]> {
  const rows = (
    await sql<Sec>`select s.id, s.page_id, s.ord, s.title, s.heading, s.text, s.block_level, s.archived, p.state, p.space, p.path,
      p.cluster_path, p.sensitivity, p.deleted_at
      from page_sections s join pages p on p.id = s.page_id where s.workspace_id = ${ws} order by s.id`.execute(s.ctx.store.db)
  ).rows;
  return rows.map((r) => ({ ...r, id: Number(r.id), ord: Number(r.ord), archived: Number(r.archived) }));
}

async function storedTags(s: RunningServer, ws: string): Promise<Map<string, Set<string>>> {
  const rows = (await sql<{ page_id: string; tag: string }>`select page_id, tag from page_tags where workspace_id = ${ws}`.execute(s.ctx.store.db)).rows;
  const out = new Map<string, Set<string>>();
  for (const r of rows) out.set(r.page_id, (out.get(r.page_id) ?? new Set()).add(r.tag));
  return out;
}

const tokens = (sec: Pick<Sec, 'title' | 'heading' | 'text'>) => new Set(`${sec.title} ${sec.heading} ${sec.text}`.toLowerCase().match(/[a-z0-9]+/g) ?? []);
const secKey = (c: { page_id: string; ord: number }) => `${c.page_id}#${c.ord}`;
const sorted = (xs: Iterable<string>) => [...xs].sort();

/** A caller as the reference sees it: its widest ceiling, and the one path its grants name (if any). */
interface Reader {
  name: string;
  p: Principal;
  ceiling: Lvl;
  under?: string;
  client: Client;
}

interface RefScope {
  includeArchived: boolean;
  space?: string;
  folder?: string;
  tags?: string[];
}

const sectionLevel = (sec: Sec) => Math.max(lvl(sec.sensitivity), lvl(sec.block_level));
const seesSection = (r: Reader, sec: Sec) =>
  sectionLevel(sec) <= ORDER[r.ceiling] && (r.under === undefined || sec.path === r.under || sec.path.startsWith(`${r.under}/`));
const inRefScope = (sc: RefScope, sec: Sec, tags: Map<string, Set<string>>) =>
  sec.deleted_at === null &&
  (sc.includeArchived || sec.state === 'active') &&
  (sc.space === undefined || sec.space === sc.space) &&
  (sc.folder === undefined || sec.cluster_path === sc.folder || sec.cluster_path.startsWith(`${sc.folder}/`)) &&
  (sc.tags ?? []).every((t) => tags.get(sec.page_id)?.has(t));
const matches = (plan: KeywordPlan, sec: Sec) => {
  const t = tokens(sec);
  return plan.op === 'AND' ? plan.terms.every((w) => t.has(w)) : plan.terms.some((w) => t.has(w));
};

/** keywordCandidates with the counts keywordList would give it (PostgreSQL sizes its windows by them). */
async function candidates(s: RunningServer, p: Principal, sc: Scope, plan: KeywordPlan, limit: number) {
  const docs = await termDocCounts(s.ctx.store, plan.terms, {
    workspaceId: p.workspaceId,
    ceiling: widestCeiling(p, sc.action) ?? 'public',
    visibility: reachSql(p, sc.action) ?? undefined,
  });
  return keywordCandidates(s.ctx, p, sc, plan, limit, docs);
}

const principalOf = (s: RunningServer, credentials: { key?: string; session?: string }): Promise<Principal> =>
  authenticate(s.ctx, {
    authorization: credentials.key ? `Bearer ${credentials.key}` : undefined,
    sessionToken: credentials.session,
    csrfHeader: undefined,
    csrfCookie: undefined,
    unsafe: false,
    ip: '127.0.0.1',
    workspace: undefined,
  });

async function ownerPrincipal(s: RunningServer, c: Client): Promise<Principal> {
  const session = c.cookies.get(SESSION_COOKIE);
  if (!session) throw new Error('no session cookie');
  return principalOf(s, { session: decodeURIComponent(session) });
}

/* ------------------------------------------------------------------------------------------ */
/* 1 + 2. Archived sections and complete cuts (both engines)                                 */
/* ------------------------------------------------------------------------------------------ */

describe.each(testEngines())('attack r: archived sections in keyword search, and complete newest-N cuts (%s)', (engine) => {
  const sqlite = engine === 'sqlite';
  let s: TestServer;
  let owner: Client;
  let ws: string;
  let readers: Reader[];

  beforeAll(async () => {
    s = await startTestServer(engine);
    const h = await signupHuman(s.url, 'Kora');
    owner = h.client;
    ws = h.workspace.id;
    expectStatus(await owner.post('/api/auth/stepup', { password: PASSWORD }), 200);
    const low = await createReaderAgent(owner, 'internal');
    const full = await createAgentWithKey(owner, [
      { action: 'read', ceiling: 'confidential' },
      { action: 'search', ceiling: 'confidential' },
    ]);
    const scoped = await createReaderAgent(owner, 'confidential', 'ka');
    readers = [
      { name: 'owner', p: await ownerPrincipal(s, owner), ceiling: 'secret', client: owner },
      { name: 'low', p: await principalOf(s, { key: low.key }), ceiling: 'internal', client: low.client },
      { name: 'full', p: await principalOf(s, { key: full.key }), ceiling: 'confidential', client: full.client },
      { name: 'scoped', p: await principalOf(s, { key: scoped.key }), ceiling: 'confidential', under: 'ka', client: scoped.client },
    ];
  }, 60_000);
  afterAll(async () => s?.stop());

  const W = 'zorvanth';
  const W2 = 'quillfen';
  const page = (fm: Record<string, string>, body: string) =>
    `---\n${Object.entries({ sensitivity: 'internal', ...fm })
      .map(([k, v]) => `${k}: ${v}`)
      .join('\n')}\n---\n${body}`;
  const create = async (p: string, content: string) => {
    const r = await owner.post('/api/v1/nodes', { path: p, content });
    expectStatus(r, 201);
    return r.body.id as string;
  };

  /** Every plan, caller and scope against the reference; and the HTTP search. Returns how many `complete` answers were checked. */
  const check = async (label: string) => {
    const secs = await storedSections(s, ws);
    const tags = await storedTags(s, ws);
    // The invariant the new check stands on: a section is archived exactly when its page is not active.
    for (const sec of secs) expect(sec.archived, `${label}: ${sec.path}#${sec.ord} archived flag vs state ${sec.state}`).toBe(sec.state === 'active' ? 0 : 1);
    const plans: [string, KeywordPlan, number][] = [
      ['newest 1', { terms: [W], op: 'AND', scored: true, newest: 1 }, 50],
      ['newest 2', { terms: [W], op: 'AND', scored: true, newest: 2 }, 50],
      ['newest 3 limit 2', { terms: [W], op: 'AND', scored: true, newest: 3 }, 2],
      ['newest 5', { terms: [W], op: 'AND', scored: true, newest: 5 }, 50],
      ['newest 9 limit 4', { terms: [W], op: 'AND', scored: true, newest: 9 }, 4],
      ['newest 40', { terms: [W], op: 'AND', scored: true, newest: 40 }, 50],
      ['unbounded', { terms: [W], op: 'AND', scored: true, newest: null }, 50],
      ['unscored', { terms: [W], op: 'AND', scored: false, newest: null }, 50],
      ['any newest 4', { terms: [W, W2], op: 'OR', scored: true, newest: 4 }, 50],
      ['all newest 2', { terms: [W, W2], op: 'AND', scored: true, newest: 2 }, 50],
    ];
    const scopes: RefScope[] = [
      { includeArchived: false },
      { includeArchived: true },
      { includeArchived: true, space: 'ka', folder: 'ka/sub' },
      { includeArchived: false, tags: ['red'] },
    ];
    let completes = 0;
    for (const r of readers) {
      for (const sc of scopes) {
        for (const [name, plan, limit] of plans) {
          const what = `${label} / ${r.name} / ${JSON.stringify(sc)} / ${name}`;
          const got = await candidates(s, r.p, { action: 'search', ...sc }, plan, limit);
          const all = secs.filter((x) => matches(plan, x) && seesSection(r, x) && inRefScope(sc, x, tags)).sort((a, b) => b.id - a.id);
          const keys = got.map(secKey);
          expect(new Set(keys).size, `${what}: duplicates`).toBe(keys.length);
          for (const c of got) expect(c.state === 'active' || sc.includeArchived, `${what}: ${c.path} is ${c.state}`).toBe(true);
          // The newest-N cut (and the unscored one, newest first) is over the matches the caller gets.
          const cut = plan.newest !== null ? all.slice(0, plan.newest) : plan.scored ? all : all.slice(0, limit);
          const cutKeys = new Set(cut.map(secKey));
          for (const k of keys) expect(cutKeys.has(k), `${what}: ${k} is not among the reference's cut ${sorted(cutKeys).join(',')}`).toBe(true);
          expect(got.length, `${what}: ${keys.join(',')} against ${sorted(cutKeys).join(',')}`).toBe(Math.min(limit, cut.length));
          if (got.complete) {
            completes++;
            // Said complete: an unbounded plan finds no other match in scope.
            const whole = await candidates(s, r.p, { action: 'search', ...sc }, { ...plan, newest: null }, limit);
            expect(sorted(keys), `${what}: complete, yet the unbounded plan differs`).toEqual(sorted(whole.map(secKey)));
            const allKeys = new Set(all.map(secKey));
            for (const k of keys) expect(allKeys.has(k), `${what}: complete, with ${k} out of scope`).toBe(true);
            if (all.length <= limit) expect(sorted(keys), `${what}: complete, yet matches in scope are missing`).toEqual(sorted(allKeys));
          }
          if (plan.scored && plan.newest !== null) {
            // SQLite counts every match in the caller's level table, whatever its state, Space or
            // path, when the cut left fewer than BOUNDED_MIN; PostgreSQL says so when its windows
            // covered every section and found fewer matches in scope than the cut (0474086).
            const table = secs.filter((x) => matches(plan, x) && sectionLevel(x) <= ORDER[r.ceiling]).length;
            const want = sqlite ? got.length < Math.min(limit, 20) && table <= plan.newest : all.length < plan.newest;
            expect(Boolean(got.complete), `${what}: complete (table matches ${table}, in scope ${all.length}, rows ${got.length})`).toBe(want);
          }
        }
      }
      // Over HTTP: the pages holding the word that the caller may see, archived ones only when asked for.
      for (const includeArchived of [false, true]) {
        const res = await r.client.get(`/api/v1/search?mode=fts&limit=50&q=${W}${includeArchived ? '&include_archived=true' : ''}`);
        expectStatus(res, 200);
        const want = new Set(secs.filter((x) => tokens(x).has(W) && seesSection(r, x) && inRefScope({ includeArchived }, x, tags)).map((x) => x.page_id));
        const gotPages = (res.body.results as { id: string; state: string }[]).map((x) => x.id);
        expect(sorted(gotPages), `${label} / ${r.name} / HTTP include_archived=${includeArchived}`).toEqual(sorted(want));
        if (!includeArchived) for (const x of res.body.results as { state: string; path: string }[]) expect(x.state, x.path).toBe('active');
      }
    }
    return completes;
  };

  it('archive, restore, rewrite while archived, folder archive and restore, move, delete, import: no archived section unless asked for, no active one lost from a newest-N cut, `complete` only when every match in scope was ranked', async () => {
    const ids: Record<string, string> = {};
    ids.p1 = await create('ka/p1.md', page({ title: 'Zorvanth notes' }, `## One\n\n${W} alpha\n\n## Two\n\n${W} ${W2}\n\n## Three\n\nnothing here\n`));
    ids.p2 = await create('ka/p2.md', page({ title: 'Second' }, `## A\n\n${W} here\n\n## B\n\n${W2} only\n`));
    ids.p3 = await create('ka/sub/p3.md', page({ title: 'Third' }, `## X\n\n${W} in sub\n\n## Y\n\n${W} ${W2} sub\n`));
    ids.p4 = await create('ka/sub/deeper/p4.md', page({ title: 'Fourth' }, `## Z\n\n${W} deep\n`));
    ids.p5 = await create('kb/p5.md', page({ title: 'Fifth', tags: '[red]' }, `## R\n\n${W} red\n`));
    ids.p6 = await create(
      'ka/p6.md',
      page({ title: 'Sixth', sensitivity: 'public' }, `## Open\n\n${W2} open\n\n## Kept\n\n::: confidential\n${W} kept back\n:::\n`),
    );
    ids.p7 = await create('ka/p7.md', page({ title: 'Seventh', sensitivity: 'confidential' }, `## C\n\n${W} conf\n`));
    ids.p8 = await create('ka/p8.md', page({ title: 'Eighth', sensitivity: 'secret' }, `## S\n\n${W} secret\n`));
    ids.p9 = await create(
      'kb/p9.md',
      page({ title: 'Ninth', tags: '[red, blue]', state: 'archived', archived_reason: 'manual' }, `## Old\n\n${W} ${W2} old\n`),
    );
    let completes = await check('initial');

    expectStatus(await owner.post(`/api/v1/nodes/${ids.p2}/archive`, { reason: 'closed' }), 200);
    completes += await check('p2 archived');
    expectStatus(await owner.post(`/api/v1/nodes/${ids.p1}/archive`), 200);
    completes += await check('p1 archived');
    expectStatus(await owner.post(`/api/v1/nodes/${ids.p1}/restore`), 200);
    completes += await check('p1 restored (sections rewritten, newest)');
    expectStatus(
      await owner.put(`/api/v1/nodes/${ids.p4}`, { content: page({ title: 'Fourth' }, `## Z\n\n${W} deep\n\n## Z2\n\n${W} deeper\n\n## Z3\n\n${W2} ${W}\n`) }),
      200,
    );
    completes += await check('p4 rewritten');
    const fa = await owner.post('/api/v1/clusters/ka/sub/archive', { reason: 'stale' });
    expectStatus(fa, 200);
    completes += await check('folder ka/sub archived');
    expectStatus(await owner.patch(`/api/v1/nodes/${ids.p3}`, { body: `## X\n\n${W} in sub, again\n\n## Y\n\n${W} ${W2} sub\n\n## Y2\n\n${W} more\n` }), 200);
    expect((await owner.get(`/api/v1/nodes/${ids.p3}`)).body.state).toBe('archived');
    completes += await check('p3 rewritten while archived (new section ids)');
    expectStatus(await owner.post('/api/v1/clusters/ka/sub/restore'), 200);
    completes += await check('folder ka/sub restored');
    expectStatus(await owner.post('/api/auth/stepup', { password: PASSWORD }), 200);
    const mv = await owner.post(`/api/v1/nodes/${ids.p5}/move`, { to: 'ka/moved/p5.md' });
    expectStatus(mv, 200);
    completes += await check('p5 moved into the scoped agent’s Space');
    expectStatus(await owner.delete(`/api/v1/nodes/${ids.p6}`), 200);
    completes += await check('p6 deleted');
    const imp = await postJson(owner, 'ka', [
      { path: 'imp/one.md', content: page({ title: 'Imported one' }, `## I1\n\n${W} imported\n`) },
      { path: 'imp/two.md', content: page({ title: 'Imported two', state: 'archived', archived_reason: 'superseded' }, `## I2\n\n${W} ${W2} imported old\n`) },
      { path: 'p2.md', content: page({ title: 'Second' }, `## A\n\n${W} here, imported over\n\n## B\n\n${W2} only\n`) },
    ]);
    expectStatus(imp, 200);
    expect(imp.body.status).toBe('done');
    completes += await check('import (one archived, one over an archived page)');
    // The newest sections archived: a cut of the newest matches must pass over them.
    ids.late = await create('ka/late.md', page({ title: 'Late' }, `## L1\n\n${W} late\n\n## L2\n\n${W} ${W2} late\n\n## L3\n\n${W} later\n`));
    expectStatus(await owner.post(`/api/v1/nodes/${ids.late}/archive`), 200);
    completes += await check('newest page archived');
    for (let i = 0; i < 4; i++) await create(`ka/bulk/b${i}.md`, page({ title: `Bulk ${i}` }, `## B${i}\n\n${W} bulk ${i}\n`));
    expectStatus(await owner.post('/api/v1/clusters/ka/bulk/archive'), 200);
    expectStatus(await owner.post('/api/v1/clusters/ka/bulk/restore'), 200);
    expectStatus(await owner.post('/api/v1/clusters/ka/bulk/archive'), 200);
    completes += await check('folder archived, restored and archived again');
    expectStatus(await owner.post(`/api/v1/nodes/${ids.p9}/restore`), 200);
    expectStatus(await owner.patch(`/api/v1/nodes/${ids.p7}`, { frontmatter: { state: 'archived', archived_reason: 'manual' } }), 200);
    completes += await check('p9 restored, p7 archived by its frontmatter');
    // The `complete` branch was taken in these checks, so its equality checks ran.
    expect(completes).toBeGreaterThan(50);
  }, 120_000);

  it('a newest-N cut crowded by newer archived sections that bm25 prefers still ranks the active ones in it (keywordList at the engine’s budget; archived, rewritten, restored, deleted)', async () => {
    const B = 'brimvale';
    const budget = sqlite ? SCORE_BUDGET : PG_SCORE_BUDGET;
    const strong = await create(
      'cr/strong.md',
      page({ title: 'Strong' }, Array.from({ length: 30 }, (_, i) => `## S${i}\n\n${B} ${B} ${B} n${i}\n`).join('\n')),
    );
    const filler = 'lakes rivers and other matters entirely at some length to make it long';
    await create(
      'cr/weak.md',
      page({ title: 'Weak' }, Array.from({ length: SCORE_BUDGET - 10 }, (_, i) => `## W${i}\n\n${filler} ${B} ${filler} m${i}\n`).join('\n')),
    );
    const arch = await create(
      'cr/arch.md',
      page(
        { title: 'Arch', state: 'archived', archived_reason: 'manual' },
        Array.from({ length: 300 }, (_, i) => `## A${i}\n\n${B} ${B} ${B} a${i}\n`).join('\n'),
      ),
    );
    const owner0 = readers[0]!;
    const verify = async (label: string) => {
      const secs = (await storedSections(s, ws)).filter((x) => tokens(x).has(B));
      for (const includeArchived of [false, true]) {
        const what = `${label}, include_archived=${includeArchived}`;
        const list = await keywordList(s.ctx, owner0.p, { action: 'search', includeArchived }, [B], 10);
        const pool = secs.filter((x) => includeArchived || x.state === 'active').sort((a, b) => b.id - a.id);
        const cut = pool.slice(0, pool.length > SCORE_BUDGET ? budget : pool.length);
        const strongInCut = new Set(cut.filter((x) => /^[SA]\d+$/.test(x.heading)).map(secKey));
        const cutKeys = new Set(cut.map(secKey));
        const keys = list.map(secKey);
        expect(keys, what).toHaveLength(10);
        for (const k of keys) expect(cutKeys.has(k), `${what}: ${k} outside the newest ${budget} matches`).toBe(true);
        if (strongInCut.size >= 10) for (const k of keys) expect(strongInCut.has(k), `${what}: ${k} ranked above a three-fold match in the cut`).toBe(true);
        else for (const k of strongInCut) expect(keys, `${what}: the three-fold match ${k} is missing`).toContain(k);
        for (const c of list) expect(c.state === 'active' || includeArchived, `${what}: ${c.path} ${c.state}`).toBe(true);
        const res = await owner.get(`/api/v1/search?mode=fts&limit=10&q=${B}${includeArchived ? '&include_archived=true' : ''}`);
        expectStatus(res, 200);
        const paths = (res.body.results as { path: string; state: string }[]).map((x) => x.path);
        const wantPaths = new Set(list.map((c) => c.path));
        for (const p of wantPaths) expect(paths, `${what} over HTTP`).toContain(p);
        if (!includeArchived) for (const x of res.body.results as { path: string; state: string }[]) expect(x.state, `${what}: ${x.path}`).toBe('active');
      }
    };
    await verify('archived page newest');
    // On SQLite the cut holds exactly the ten newest three-fold sections of the active page.
    if (sqlite) {
      const list = await keywordList(s.ctx, owner0.p, { action: 'search', includeArchived: false }, [B], 10);
      expect(new Set(list.map((c) => c.page_id))).toEqual(new Set([strong]));
    }
    expectStatus(
      await owner.patch(`/api/v1/nodes/${arch}`, { body: Array.from({ length: 300 }, (_, i) => `## A${i}\n\n${B} ${B} ${B} b${i}\n`).join('\n') }),
      200,
    );
    await verify('archived page rewritten (newer ids, still archived)');
    expectStatus(await owner.post(`/api/v1/nodes/${arch}/restore`), 200);
    await verify('archived page restored');
    expectStatus(await owner.post(`/api/v1/nodes/${arch}/archive`), 200);
    await verify('archived again');
    expectStatus(await owner.post('/api/auth/stepup', { password: PASSWORD }), 200);
    expectStatus(await owner.delete(`/api/v1/nodes/${arch}`), 200);
    await verify('deleted');
  }, 90_000);

  it('a complete cut for an agent whose grant names one Space: the count holds matches outside its Space, archived and above its ceiling, and the list is still every match in scope', async () => {
    const [Q1, Q2] = ['quaffel', 'snitchel'];
    const agent = await createReaderAgent(owner, 'internal', 'cq');
    const p = await principalOf(s, { key: agent.key });
    const both = (tag: string, n: number) => Array.from({ length: n }, (_, i) => `## ${tag}${i}\n\n${Q1} and ${Q2} ${tag} ${i}\n`).join('\n');
    await create('cq/z.md', page({ title: 'Zed' }, both('z', 6)));
    await create('other/o.md', page({ title: 'Other' }, both('o', 4)));
    await create('cq/arch.md', page({ title: 'Gone', state: 'archived', archived_reason: 'manual' }, both('g', 5)));
    await create('cq/conf.md', page({ title: 'Conf', sensitivity: 'confidential' }, both('c', 3)));
    await create('cq/x.md', page({ title: 'Ex' }, Array.from({ length: SCORE_BUDGET + 100 }, (_, i) => `## x${i}\n\n${Q1} alone ${i}\n`).join('\n')));
    await create('cq/y.md', page({ title: 'Why' }, Array.from({ length: SCORE_BUDGET + 100 }, (_, i) => `## y${i}\n\n${Q2} alone ${i}\n`).join('\n')));
    const secs = await storedSections(s, ws);
    const inScope = (ia: boolean) =>
      sorted(
        secs
          .filter(
            (x) => tokens(x).has(Q1) && tokens(x).has(Q2) && x.path.startsWith('cq/') && sectionLevel(x) <= ORDER.internal && (ia || x.state === 'active'),
          )
          .map(secKey),
      );
    expect(inScope(false)).toHaveLength(6);
    for (const includeArchived of [false, true]) {
      const sc: Scope = { action: 'search', includeArchived };
      const list = await keywordList(s.ctx, p, sc, [Q1, Q2], 100);
      const byKey = new Map(secs.map((x) => [secKey(x), x]));
      for (const c of list) {
        const x = byKey.get(secKey(c))!;
        expect(x.path.startsWith('cq/') && sectionLevel(x) <= ORDER.internal && (includeArchived || x.state === 'active'), `${x.path}#${x.ord}`).toBe(true);
      }
      if (sqlite) {
        // SQLite keeps a path-scoped agent on the all-words list: exactly the sections holding both words.
        expect(sorted(list.map(secKey)), `include_archived=${includeArchived}`).toEqual(inScope(includeArchived));
        // The path taken: the all-words plan, cut to the newest SCORE_BUDGET, said complete.
        const docs = await termDocCounts(s.ctx.store, [Q1, Q2], {
          workspaceId: p.workspaceId,
          ceiling: 'internal',
          visibility: reachSql(p, 'search') ?? undefined,
        });
        const plan = keywordPlan([Q1, Q2], 'AND', docs);
        expect(plan.newest).toBe(SCORE_BUDGET);
        const direct = await keywordCandidates(s.ctx, p, sc, plan, 100, docs);
        expect(direct.complete).toBe(true);
      } else {
        // PostgreSQL ranks any word for it: the sections holding both come first.
        expect(sorted(list.slice(0, inScope(includeArchived).length).map(secKey)), `include_archived=${includeArchived}`).toEqual(inScope(includeArchived));
      }
      const res = await agent.client.get(`/api/v1/search?mode=fts&limit=50&q=${Q1}%20${Q2}${includeArchived ? '&include_archived=true' : ''}`);
      expectStatus(res, 200);
      const wantPages = includeArchived ? ['cq/arch.md', 'cq/z.md'] : ['cq/z.md'];
      const gotPages = (res.body.results as { path: string }[]).map((x) => x.path);
      for (const w of wantPages) expect(gotPages, `HTTP include_archived=${includeArchived}`).toContain(w);
      for (const g of gotPages) expect(['cq/z.md', 'cq/arch.md', 'cq/x.md', 'cq/y.md'], `HTTP: ${g}`).toContain(g);
      if (!includeArchived) expect(gotPages).not.toContain('cq/arch.md');
    }
  }, 90_000);

  it('hostile query text answers 200 or 400 (never 500), archived or not, for every caller', async () => {
    const qs = [
      '"',
      '""',
      `${W}"`,
      `${W} NEAR(`,
      'NEAR(a b, 2)',
      `${W} OR`,
      'AND OR NOT',
      `-${W}`,
      `${W}*`,
      '*',
      '^',
      `title:${W}`,
      `{title}: ${W}`,
      '(((',
      ')',
      `${W} + ${W2}`,
      '\u0000',
      `${W}\u0000${W2}`,
      '🙂🙂',
      'x'.repeat(4_000),
      `${W} `.repeat(600),
      "'; drop table page_sections; --",
      `${W}' or 1=1 --`,
    ];
    // Pre-encoded: a lone surrogate, an overlong encoding, a bare continuation byte.
    const raw = ['%ED%A0%80', '%C0%AF', '%80', `${W}%FF${W2}`];
    for (const r of readers) {
      for (const q of [...qs.map(encodeURIComponent), ...raw]) {
        for (const mode of ['fts', 'hybrid']) {
          for (const ia of ['', '&include_archived=true']) {
            const res = await r.client.get(`/api/v1/search?mode=${mode}&q=${q}${ia}`);
            expect([200, 400], `${r.name} ${mode} ${q.slice(0, 60)}${ia}: ${res.text.slice(0, 200)}`).toContain(res.status);
            if (res.status === 200 && !ia) for (const x of res.body.results as { state: string }[]) expect(x.state).toBe('active');
          }
        }
      }
    }
    // The tables are intact.
    expect((await storedSections(s, ws)).length).toBeGreaterThan(0);
  }, 60_000);
});

/* ------------------------------------------------------------------------------------------ */
/* 3a. The matrix and its helper thread, in-process                                          */
/* ------------------------------------------------------------------------------------------ */

const twins = (rows: number, dims: number, seed: number) => matrixTwins(rows, dims, seed, 7);
const show = showHits;

const threads = () => fs.readdirSync('/proc/self/task').length;

describe('attack r: the matrix and its scan helper, in-process', () => {
  it('several large matrices of odd sizes and dimensions at once score as their twins scanned alone, to the bit, through growth, removals and a helper stopped between scans', async () => {
    const shapes: [number, number][] = [
      [PARALLEL_FROM, 1],
      [PARALLEL_FROM + 1, 17],
      [PARALLEL_FROM + 333, 31],
      [PARALLEL_FROM + 2_047, 512],
      [PARALLEL_FROM * 2 + 5, 48],
    ];
    const sets = shapes.map(([rows, dims], i) => ({ ...twins(rows, dims, 100 + i), dims }));
    await helperUp(sets[0]!.m, 1);
    const jobs0 = helperStats().jobs;
    let scans = 0;
    const compare = (what: string) => {
      for (const [i, { m, alone, rnd, dims }] of sets.entries()) {
        const q = unitVector(rnd, dims);
        expect(show(m.scan(q, m.rows).hits), `${what}: matrix ${i} scan`).toEqual(show(alone.scan(q, alone.rows).hits));
        for (const k of [1, 10, 257]) expect(show(m.top(q, k)), `${what}: matrix ${i} top ${k}`).toEqual(show(alone.top(q, k)));
        scans += 4;
      }
    };
    compare('fresh');
    expect(helperStats().jobs - jobs0, 'the helper took parts of the large matrices').toBeGreaterThanOrEqual(scans / 2);
    // Each matrix changes: pages removed from the lower rows (the last rows move into the holes),
    // new pages appended past the capacity (the memory grows while the helper holds it).
    for (const { m, alone, rnd, dims } of sets) {
      for (let p = 0; p < 300; p += 2) for (const x of [m, alone]) x.removePage(`p${p}`);
      for (let p = 0; p < 200; p++) {
        const vecs = Array.from({ length: 13 }, (_, j) => ({ ord: j, last: j + 1, vec: unitVector(rnd, dims), tag: p }));
        for (const x of [m, alone]) x.setPage(`new${p}`, vecs);
      }
    }
    compare('grown and shrunk');
    // Stopped before every scan: a new helper starts, and until it runs every scan is the serving thread's.
    for (let round = 0; round < 4; round++) {
      stopHelper();
      compare(`helper stopped (${round})`);
      await sleep(20);
      compare(`helper restarted (${round})`);
    }
    // Below the threshold again: scanned alone, same answers.
    for (const { m, alone } of sets.slice(0, 2)) for (let p = 0; p < 200; p++) for (const x of [m, alone]) x.removePage(`new${p}`);
    compare('shrunk below PARALLEL_FROM');
    for (const { m, alone } of sets) {
      m.dispose();
      alone.dispose();
    }
  }, 60_000);

  it('hostile queries and k: NaN, infinities, huge, tiny, zero and -0 components answer as one thread does, without throwing or hanging; k past the rows returns every row once', async () => {
    const dims = 40;
    const { m, alone } = twins(PARALLEL_FROM + 99, dims, 7);
    await helperUp(m, dims);
    const make = (f: (i: number) => number) => Float32Array.from({ length: dims }, (_, i) => f(i));
    const queries: [string, Float32Array][] = [
      ['NaN first', make((i) => (i === 0 ? Number.NaN : 0.1))],
      ['all NaN', make(() => Number.NaN)],
      ['+Infinity', make((i) => (i === 3 ? Number.POSITIVE_INFINITY : 0.2))],
      ['-Infinity', make((i) => (i === 5 ? Number.NEGATIVE_INFINITY : -0.2))],
      ['huge', make((i) => (i % 2 ? 3e38 : -3e38))],
      ['denormal', make(() => 1e-42)],
      ['zero', make(() => 0)],
      ['-0', make(() => -0)],
      ['one hot', make((i) => (i === dims - 1 ? 1 : 0))],
    ];
    const jobs0 = helperStats().jobs;
    for (const [name, q] of queries) {
      const started = performance.now();
      expect(show(m.scan(q, 50).hits), name).toEqual(show(alone.scan(q, 50).hits));
      expect(show(m.top(q, 20)), name).toEqual(show(alone.top(q, 20)));
      expect(performance.now() - started, `${name}: time`).toBeLessThan(5_000);
    }
    expect(helperStats().jobs).toBeGreaterThan(jobs0);
    const q = make((i) => Math.sin(i));
    for (const k of [m.rows, m.rows + 1, 1e9, Number.POSITIVE_INFINITY]) {
      const all = m.top(q, k);
      expect(all, `k=${k}`).toHaveLength(m.rows);
      expect(new Set(all.map((h) => `${h.pageId}#${h.ord}`)).size).toBe(m.rows);
      for (let i = 1; i < all.length; i++) expect(all[i - 1]!.score >= all[i]!.score, `k=${k}: order at ${i}`).toBe(true);
      expect(show(all)).toEqual(show(alone.top(q, k)));
    }
    for (const k of [0, -1, Number.NEGATIVE_INFINITY]) expect(m.top(q, k), `k=${k}`).toEqual([]);
    // A query of other dimensions is refused, helper or not.
    expect(() => m.top(new Float32Array(dims + 1), 3)).toThrow(/dimension/);
    m.dispose();
    alone.dispose();
  }, 60_000);

  it('a helper started and stopped again and again leaves no thread behind', async () => {
    const { m, alone, rnd } = twins(PARALLEL_FROM + 10, 16, 21);
    stopHelper();
    await sleep(200);
    const idle = threads();
    for (let round = 0; round < 25; round++) {
      await helperUp(m, 16);
      const q = unitVector(rnd, 16);
      expect(show(m.top(q, 5))).toEqual(show(alone.top(q, 5)));
      stopHelper();
    }
    const until = Date.now() + 5_000;
    while (threads() > idle && Date.now() < until) await sleep(50);
    expect(threads(), 'threads after 25 helpers were stopped').toBeLessThanOrEqual(idle);
    m.dispose();
    alone.dispose();
  }, 60_000);

  it('the memory of matrices the helper scanned is given back once they are disposed or dropped', async () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const collect = async () => {
      for (let i = 0; i < 3; i++) {
        gc();
        await sleep(50);
      }
    };
    const rss = () => process.memoryUsage().rss;
    const MiB = 2 ** 20;
    // 40 Ki rows of 512 dimensions: 20 MiB of rows each, every page of them written.
    const dims = 512;
    const rows = 40_960;
    const vec = new Float32Array(dims).fill(0.5);
    const vectors = Array.from({ length: rows }, (_, i) => ({ ord: i, vec, tag: 0 }));
    const make = () => {
      const m = new VectorMatrix(dims, rows);
      m.setPage('p', vectors);
      return m;
    };
    const q = new Float32Array(dims).fill(0.01);
    // A control: matrices never handed to the helper (disposed before their first scan) are
    // given back at once. The first round raises what the allocator keeps; the second must not.
    const control3 = () => {
      for (let i = 0; i < 3; i++) {
        const m = make();
        m.dispose();
        m.top(q, 3);
      }
    };
    control3();
    const warm = make();
    await helperUp(warm, dims);
    warm.dispose();
    await collect();
    const base = rss();
    control3();
    await collect();
    const control = rss() - base;
    expect(control / MiB, 'RSS growth after three matrices scanned alone and dropped (MiB)').toBeLessThan(20);
    // Scanned with the helper, then disposed (as RetrievalRuntime.stop and the reload of an idle
    // workspace do), or dropped without dispose (collected).
    // (Letting go of a matrix stops the helper; each of these waits for a new one.)
    for (let i = 0; i < 5; i++) {
      const m = make();
      await helperUp(m, dims);
      const jobs0 = helperStats().jobs;
      m.top(q, 3);
      expect(helperStats().jobs - jobs0, 'the helper scanned it').toBeGreaterThanOrEqual(1);
      if (i % 2 === 0) m.dispose();
    }
    await collect();
    await sleep(200);
    await collect();
    expect(helperStats().matrices, 'the helper’s own count').toBe(0);
    const held = rss() - base;
    // What ending the helper thread gives back (for the message: the memory was the helper's).
    stopHelper();
    await sleep(300);
    await collect();
    const afterStop = rss() - base;
    // Five matrices of 20 MiB: what stays resident after they are gone must not be them.
    expect(
      held / MiB,
      `RSS growth after five 20 MiB matrices scanned with the helper and let go (MiB); control ${(control / MiB).toFixed(0)}, after stopHelper() ${(afterStop / MiB).toFixed(0)}`,
    ).toBeLessThan(40);
  }, 90_000);

  it('a process whose helper is parked in Atomics.wait ends on its own, and at process.exit, promptly', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-r-'));
    const root = path.resolve(import.meta.dirname, '../..');
    const script = (tail: string) => `
import { VectorMatrix, PARALLEL_FROM } from ${JSON.stringify(path.join(root, 'src/retrieval/vectors/matrix.js'))};
import { helperStats } from ${JSON.stringify(path.join(root, 'src/retrieval/vectors/scan-helper.js'))};
const m = new VectorMatrix(16, PARALLEL_FROM + 10);
const v = new Float32Array(16).fill(0.25);
m.setPage('p', Array.from({ length: PARALLEL_FROM + 10 }, (_, i) => ({ ord: i, vec: v, tag: 0 })));
const q = new Float32Array(16).fill(0.1);
for (let i = 0; i < 300 && !helperStats().running; i++) { m.scan(q, 1); await new Promise((r) => setTimeout(r, 5)); }
m.top(q, 3);
console.log(JSON.stringify(helperStats()));
${tail}`;
    try {
      for (const [name, tail] of [
        ['natural end', ''],
        ['process.exit', 'process.exit(0);'],
        ['exit from a timer', 'setTimeout(() => process.exit(3), 10);'],
      ] as const) {
        const file = path.join(dir, `${name.replace(/\W/g, '-')}.mts`);
        fs.writeFileSync(file, script(tail));
        const started = Date.now();
        const child = spawn(process.execPath, ['--import', 'tsx', file], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        let err = '';
        child.stdout.on('data', (d: Buffer) => (out += d.toString()));
        child.stderr.on('data', (d: Buffer) => (err += d.toString()));
        const code = await new Promise<number | null>((resolve) => {
          const t = setTimeout(() => {
            child.kill('SIGKILL');
            resolve(null);
          }, 20_000);
          child.on('exit', (c) => {
            clearTimeout(t);
            resolve(c);
          });
        });
        expect(code, `${name}: ${err.slice(0, 400)}`).toBe(name === 'exit from a timer' ? 3 : 0);
        expect(JSON.parse(out.trim().split('\n').at(-1)!), name).toMatchObject({ running: true, matrices: 1 });
        expect(Date.now() - started, `${name}: time to exit (ms)`).toBeLessThan(10_000);
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

/* ------------------------------------------------------------------------------------------ */
/* 3b. The helper over HTTP: large workspaces, racing writes, restarts (both engines)         */
/* ------------------------------------------------------------------------------------------ */

/** Letters only: a word of its own per page and section (the builtin embeddings hash n-grams). */
const letter = (n: number) => String.fromCharCode(97 + (n % 26));
const vword = (p: number, j: number) =>
  `vqx${letter(p)}${letter(Math.floor(p / 26))}k${[...String(j)].map((d) => String.fromCharCode(104 + Number(d))).join('')}`;
/** A public page of `n` sections, each its own vector row: every odd one inside a `::: confidential` block. */
const vpage = (p: number, n: number, title: string, from = 0) =>
  `---\nsensitivity: public\n---\n# ${title}\n\n` +
  Array.from({ length: n }, (_, k) => {
    const j = from + k;
    const text = `${vword(p, j)} ${vword(p, j)} glacier ${j % 7} fjord`;
    return `## s${j}\n\n${j % 2 === 1 ? `::: confidential\n${text}\n:::` : text}\n`;
  }).join('\n');

interface Hit {
  id: string;
  path: string;
  section: string;
  score: number;
}

describe.each(testEngines())('attack r: the scan helper over HTTP (%s)', (engine) => {
  it('large workspaces searched by three callers while pages are written and the helper is stopped again and again; a matrix reloaded under load; a server closed and another started: every answer is that of a restart scanning alone, within workspace and ceiling', async () => {
    const tdb = await createTestDatabase(engine);
    let server: RunningServer | undefined = await startServerOn(tdb);
    let stopper: ReturnType<typeof setInterval> | undefined;
    try {
      const a = await signupHuman(server.url, 'Alma');
      const b = await signupHuman(server.url, 'Bert');
      expectStatus(await a.client.post('/api/auth/stepup', { password: PASSWORD }), 200);
      const agent = await createReaderAgent(a.client, 'internal');
      const ids = { a: new Map<string, string>(), b: new Map<string, string>() };
      // Workspace A: more rows than PARALLEL_FROM, written in one import (8 pages of 2,100 sections).
      const BIG = 8;
      const PER = 2_100;
      const files = Array.from({ length: BIG }, (_, p) => ({ path: `p${p}.md`, content: vpage(p, PER, `Page ${p}`) }));
      files.push({ path: 'small.md', content: vpage(20, 40, 'Small') });
      const imp = await postJson(a.client, 'v', files);
      expectStatus(imp, 200);
      expect(imp.body.status, JSON.stringify(imp.body).slice(0, 300)).toBe('done');
      const listed = await sql<{ id: string; path: string; workspace_id: string }>`select id, path, workspace_id from pages where deleted_at is null`.execute(
        server.ctx.store.db,
      );
      for (const r of listed.rows) if (r.workspace_id === a.workspace.id) ids.a.set(r.path, r.id);
      // Workspace B: the same text at the same paths (a row of one in the other's answers would show as a foreign id).
      for (const [p, n] of [
        [0, 60],
        [3, 30],
      ] as const) {
        const r = await b.client.post('/api/v1/nodes', { path: `v/p${p}.md`, content: vpage(p, n, `Page ${p}`) });
        expectStatus(r, 201);
        ids.b.set(`v/p${p}.md`, r.body.id as string);
      }
      await waitForVectors(a.client, 120_000);
      const ma = (await server.ctx.retrieval.matrix(a.workspace.id))!;
      expect(ma.rows).toBeGreaterThanOrEqual(PARALLEL_FROM);
      // B's matrix pushed past PARALLEL_FROM in memory by rows of a page that does not exist (zero
      // vectors: they score 0, below every answer); B's next page lands past them, in the helper's half.
      const mb = (await server.ctx.retrieval.matrix(b.workspace.id))!;
      const zero = new Float32Array(mb.dims);
      mb.setPage(
        'zz-not-a-page',
        Array.from({ length: PARALLEL_FROM + 500 }, (_, i) => ({ ord: i, vec: zero, tag: 0 })),
      );
      const late = await b.client.post('/api/v1/nodes', { path: 'v/late.md', content: vpage(30, 20, 'Late in B') });
      expectStatus(late, 201);
      ids.b.set('v/late.md', late.body.id as string);
      await waitForVectors(b.client, 60_000);

      const probes = [
        vword(0, 0),
        vword(0, 1),
        vword(0, 2),
        vword(3, 10),
        vword(3, 1_001),
        vword(5, 1_500),
        vword(7, PER - 1),
        vword(7, PER - 2),
        vword(30, 4),
        vword(20, 3),
        vword(40, 1),
        vword(41, 2),
        vword(42, 2),
        'nothing like it',
      ];
      const clients = (url: string) => {
        const ca = new Client(url);
        ca.cookies = a.client.cookies;
        const cb = new Client(url);
        cb.cookies = b.client.cookies;
        return { a: ca, b: cb, agent: new Client(url, agent.key) };
      };
      const ask = async (c: Client, mode: string) => {
        const out: Record<string, Hit[]> = {};
        for (const q of probes) {
          const r = await c.get(`/api/v1/search?mode=${mode}&limit=5&q=${encodeURIComponent(q)}`);
          expectStatus(r, 200);
          out[q] = (r.body.results as Hit[]).map(({ id, path: p, section, score }) => ({ id, path: p, section, score }));
        }
        return out;
      };
      type Answers = Record<'aVector' | 'aHybrid' | 'bVector' | 'bHybrid' | 'agentVector' | 'agentHybrid', Record<string, Hit[]>>;
      const checkBounds = (got: Answers, what: string) => {
        const aIds = new Set(ids.a.values());
        const bIds = new Set(ids.b.values());
        for (const [who, byQuery] of Object.entries(got)) {
          const own = who.startsWith('b') ? bIds : aIds;
          for (const hits of Object.values(byQuery)) {
            for (const h of hits) {
              expect(own.has(h.id) || (who.startsWith('a') && h.path.startsWith('v/race')), `${what}: ${who} got ${h.path} ${h.id}`).toBe(true);
              if (who.startsWith('agent'))
                expect(Number(/^s(\d+)$/.exec(h.section)?.[1] ?? 0) % 2, `${what}: the agent reached ${h.path} ${h.section}`).toBe(0);
            }
          }
        }
      };
      const askAll = async (url: string): Promise<Answers> => {
        const c = clients(url);
        const [av, ah, bv, bh, gv, gh] = await Promise.all([
          ask(c.a, 'vector'),
          ask(c.a, 'hybrid'),
          ask(c.b, 'vector'),
          ask(c.b, 'hybrid'),
          ask(c.agent, 'vector'),
          ask(c.agent, 'hybrid'),
        ]);
        const got = { aVector: av, aHybrid: ah, bVector: bv, bHybrid: bh, agentVector: gv, agentHybrid: gh };
        checkBounds(got, 'answers');
        return got;
      };

      /**
       * Two answers alike. Equal scores are ordered by matrix row, which differs between a matrix
       * kept up incrementally and one loaded afresh, so: vector answers equal as scores in order,
       * and as the set of sections at each score but the lowest (which the cut may split);
       * hybrid answers (fused ranks, which such ties move) by their first section when it is
       * the vector answer's first too and neither ties there.
       */
      const expectSame = (got: Answers, want: Answers, what: string) => {
        for (const [who, byQuery] of Object.entries(want)) {
          for (const [q, hits] of Object.entries(byQuery)) {
            const mine = got[who as keyof Answers][q]!;
            const label = `${what}: ${who} ${q}`;
            if (who.endsWith('Vector')) {
              expect(
                mine.map((h) => h.score),
                label,
              ).toEqual(hits.map((h) => h.score));
              const low = hits.at(-1)?.score;
              const above = (xs: Hit[]) => sorted(xs.filter((h) => h.score !== low).map((h) => `${h.score} ${h.id} ${h.section}`));
              expect(above(mine), label).toEqual(above(hits));
            } else {
              // Only when neither list ties at its top (ties reorder ranks, and so fused scores).
              const v = want[who.replace('Hybrid', 'Vector') as keyof Answers][q]!;
              const alone1 = (xs: Hit[]) => xs.length === 1 || (xs.length > 1 && xs[0]!.score !== xs[1]!.score);
              if (alone1(hits) && alone1(v) && v[0]!.id === hits[0]!.id && v[0]!.section === hits[0]!.section) expect(mine[0], label).toEqual(hits[0]);
            }
          }
        }
      };

      const jobs0 = helperStats().jobs;
      const first = await askAll(server.url);
      expect(helperStats().jobs - jobs0, 'the helper took parts of A’s and B’s scans').toBeGreaterThanOrEqual(probes.length);
      expect(first.aVector[vword(0, 0)]![0]).toMatchObject({ path: 'v/p0.md' });
      expect(first.aVector[vword(0, 2)]![0]).toMatchObject({ path: 'v/p0.md', section: 's2' });
      expect(first.aVector[vword(7, PER - 1)]![0]).toMatchObject({ path: 'v/p7.md', section: `s${PER - 1}` });
      expect(first.bVector[vword(30, 4)]![0]).toMatchObject({ id: ids.b.get('v/late.md'), section: 's4' });
      expect(first.bVector[vword(0, 2)]![0]).toMatchObject({ id: ids.b.get('v/p0.md'), section: 's2' });

      // The race: three callers search while A and B are written (the embedding worker changes
      // the matrices between scans: a 2,100-row page replaced, a page deleted, pages created) and
      // the helper is stopped every few milliseconds.
      let stops = 0;
      stopper = setInterval(() => {
        stopHelper();
        stops++;
      }, 4);
      const c = clients(server.url);
      const p3 = ids.a.get('v/p3.md')!;
      const small = ids.a.get('v/small.md')!;
      const writes = (async () => {
        const r1 = await c.a.put(`/api/v1/nodes/${p3}`, {
          content: vpage(3, PER, 'Page 3 again', 0).replace(`${vword(3, 10)} ${vword(3, 10)}`, `${vword(40, 1)} ${vword(40, 1)}`),
        });
        expectStatus(r1, 200);
        const r2 = await c.a.delete(`/api/v1/nodes/${small}`);
        expectStatus(r2, 200);
        const r3 = await c.a.post('/api/v1/nodes', { path: 'v/race.md', content: vpage(41, 30, 'Race') });
        expectStatus(r3, 201);
        ids.a.set('v/race.md', r3.body.id as string);
        const r4 = await c.b.post('/api/v1/nodes', { path: 'v/race-b.md', content: vpage(42, 30, 'Race B') });
        expectStatus(r4, 201);
        ids.b.set('v/race-b.md', r4.body.id as string);
      })();
      const during: Answers[] = [];
      let writing = true;
      void writes.finally(() => (writing = false));
      while (writing || during.length < 2) during.push(await askAll(server.url));
      await writes;
      clearInterval(stopper);
      stopper = undefined;
      expect(stops).toBeGreaterThan(5);
      // What was answered during the race stayed in bounds (the deleted page was live for part of it).
      for (const [i, d] of during.entries()) checkBounds(d, `during the race (${i})`);
      ids.a.delete('v/small.md');
      await waitForVectors(c.a, 120_000);
      await waitForVectors(c.b, 60_000);
      const jobs1 = helperStats().jobs;
      const settled = await askAll(server.url);
      expect(helperStats().jobs, 'the helper is back after the race').toBeGreaterThan(jobs1);
      expect(settled.aVector[vword(40, 1)]![0]).toMatchObject({ id: p3, section: 's10' });
      expect(settled.aVector[vword(41, 2)]![0]).toMatchObject({ path: 'v/race.md', section: 's2' });
      expect(settled.bVector[vword(42, 2)]![0]).toMatchObject({ path: 'v/race-b.md', section: 's2' });
      for (const hits of Object.values(settled.aVector)) for (const h of hits) expect(h.path).not.toBe('v/race-b.md');
      for (const hits of Object.values(settled.aVector)) for (const h of hits) expect(h.id).not.toBe(small);

      // A's matrix dropped and loaded again (as after sleeping past the log) while callers search.
      const loaded = (server.ctx.retrieval as unknown as { loaded: Map<string, Promise<{ refreshedAt: number }>> }).loaded;
      const reloads = Promise.all([askAll(server.url), askAll(server.url)]);
      (await loaded.get(a.workspace.id)!).refreshedAt = 0;
      const [r1, r2] = await reloads;
      const after = await askAll(server.url);
      const ma2 = (await server.ctx.retrieval.matrix(a.workspace.id))!;
      expect(ma2, 'A’s matrix was loaded again').not.toBe(ma);
      expectSame(after, settled, 'after the reload');
      for (const r of [r1, r2]) expectSame(r, settled, 'during the reload');

      // The server closed: the helper lets go of its matrices; another server in this process uses it again.
      const heldBefore = helperStats().matrices;
      await server.close();
      server = undefined;
      await sleep(100);
      expect(helperStats().matrices, 'matrices the helper still holds after the server closed').toBeLessThanOrEqual(Math.max(0, heldBefore - 2));
      server = await startServerOn(tdb);
      const jobs2 = helperStats().jobs;
      const restarted = await askAll(server.url);
      expect(helperStats().jobs, 'the second server’s scans use the helper').toBeGreaterThan(jobs2);
      // B's rows that are no page are gone with the first server: the answers are the same.
      expectSame(restarted, settled, 'another server in the same process');
      // Every matrix of this server scans alone from now on: the same answers again, and no job taken.
      for (const w of [a.workspace.id, b.workspace.id]) (await server.ctx.retrieval.matrix(w))?.dispose();
      const jobs3 = helperStats().jobs;
      const alone = await askAll(server.url);
      expect(helperStats().jobs).toBe(jobs3);
      expectSame(alone, settled, 'every matrix scanning alone');
    } finally {
      if (stopper) clearInterval(stopper);
      await server?.close();
      await tdb.cleanup();
    }
  }, 240_000);
});
