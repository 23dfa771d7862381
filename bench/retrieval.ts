/**
 * Retrieval QUALITY on real documentation nobody on the team wrote (bench/eval/README.md):
 * loads the Debian corpus into a fresh store through createPage (the production write path:
 * one commit per page, keyword index in the write transaction, vectors by the job worker),
 * waits for the embedding backlog to drain, then runs every query of bench/eval/queries.json
 * in modes fts, vector and hybrid through searchPages (and on SQLite a plain bm25 baseline:
 * every query word OR-ed, no plan) and reports MRR@10 and Recall@10,
 * overall and per query kind (keyword, paraphrase, typo).
 *
 *   tsx bench/retrieval.ts [--details] [--pg[=URL]] [--set=man]
 *
 * --set=man  the second set (bench/eval/build-man-corpus.ts): Linux manual pages, one query per
 *            page made from its NAME line (removed from the page), kind `description`
 * --details  also writes every query's ranks per mode to bench/.cache/eval/last-run.json
 * --pg       PostgreSQL instead of SQLite (a throwaway database on postgres://postgres@127.0.0.1:5432/test)
 * Prints one JSON object on stdout; progress on stderr.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createPage } from '../src/core/pages/write.js';
import { sql } from 'kysely';
import { widestCeiling } from '../src/retrieval/candidates.js';
import { fts5Match, queryTerms } from '../src/retrieval/keyword.js';
import { keywordTable } from '../src/retrieval/keyword-index.js';
import { searchPages } from '../src/retrieval/search.js';
import { headCommit } from '../src/store/commits.js';
import { CACHE_DIR, loadCorpus } from './eval/build-corpus.js';
import { loadManCorpus } from './eval/build-man-corpus.js';
import { drainEmbeddings, openHarness, runtimeOf, type Harness } from './eval/harness.js';
import { installCleanupHandlers, loadAverage, log, percentile, round, runStandalone } from './util.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const QUERIES_FILE = path.join(HERE, 'eval', 'queries.json');
const MODES = ['fts', 'vector', 'hybrid'] as const;
const K = 10;

export interface EvalQuery {
  id: string;
  /** The three variants of one information need share a group. */
  group: string;
  /** keyword, paraphrase, typo (the Debian set); description (the man-page set). */
  kind: string;
  q: string;
  relevant: string[];
}

interface Scores {
  queries: number;
  mrr_at_10: number;
  recall_at_10: number;
  /** Share of queries with a relevant page at rank 1. */
  success_at_1: number;
  /** Share with no relevant page in the top 10. */
  miss_at_10: number;
}

function score(rows: { rr: number; recall: number; first: number | null }[]): Scores {
  const n = rows.length;
  const sum = (f: (r: (typeof rows)[number]) => number) => rows.reduce((a, r) => a + f(r), 0);
  return {
    queries: n,
    mrr_at_10: round(sum((r) => r.rr) / Math.max(1, n), 4),
    recall_at_10: round(sum((r) => r.recall) / Math.max(1, n), 4),
    success_at_1: round(sum((r) => (r.first === 1 ? 1 : 0)) / Math.max(1, n), 4),
    miss_at_10: round(sum((r) => (r.first === null ? 1 : 0)) / Math.max(1, n), 4),
  };
}

/** The baseline: FTS5's bm25 (the service's column weights) over every query word OR-ed, best section per page (SQLite). */
async function plainBm25(h: Harness, q: string): Promise<string[]> {
  const terms = queryTerms(q);
  if (terms.length === 0) return [];
  const fts = keywordTable(h.principal.workspaceId, widestCeiling(h.principal, 'search') ?? 'public');
  const rows = await sql<{ path: string }>`
    select p.path from (select rowid as rid, bm25(${fts}, 10.0, 4.0, 1.0) as b from ${fts} where ${fts} match ${fts5Match(terms, 'OR')} order by b limit 500) m
    join page_sections s on s.id = m.rid join pages p on p.id = s.page_id
    where p.deleted_at is null and p.state = 'active' order by m.b`.execute(h.ctx.store.db);
  const seen = new Set<string>();
  return rows.rows
    .map((r) => r.path)
    .filter((x) => !seen.has(x) && seen.add(x))
    .slice(0, K);
}

export function loadQueries(): EvalQuery[] {
  const raw = JSON.parse(fs.readFileSync(QUERIES_FILE, 'utf8')) as { queries: EvalQuery[] };
  return raw.queries;
}

export async function benchRetrievalQuality(
  opts: { details?: boolean; pgAdminUrl?: string | undefined; set?: 'debian' | 'man' } = {},
): Promise<Record<string, unknown>> {
  const man = opts.set === 'man' ? loadManCorpus() : null;
  const corpus = man ?? loadCorpus();
  const queries: EvalQuery[] = man ? man.queries : loadQueries();
  const kinds = [...new Set(queries.map((q) => q.kind))];
  const known = new Set(corpus.pages.map((p) => p.path));
  const unknown = queries.flatMap((q) => q.relevant.filter((r) => !known.has(r)).map((r) => `${q.id}: ${r}`));
  if (unknown.length > 0)
    throw new Error(`queries.json names pages the corpus lacks (rebuild it with bench/eval/build-corpus.ts --force?):\n${unknown.join('\n')}`);

  const h = await openHarness({ label: 'eval', pgAdminUrl: opts.pgAdminUrl });
  try {
    const load0 = loadAverage();
    log(`loading ${corpus.pages.length} pages through createPage`);
    const t0 = performance.now();
    for (const [i, p] of corpus.pages.entries()) {
      await createPage(h.ctx, h.principal, { path: p.path, content: p.content });
      if ((i + 1) % 200 === 0) log(`  ${i + 1}/${corpus.pages.length}`);
    }
    const loadS = (performance.now() - t0) / 1000;
    log(`loaded in ${round(loadS, 1)} s; draining the embedding backlog`);
    const drained = await drainEmbeddings(h.ctx);
    log(`drained in ${round(drained.waited_ms / 1000, 1)} s`);

    // Warm-up: each mode once (query embedding caches, prepared statements, matrix load).
    for (const mode of MODES) await searchPages(h.ctx, h.principal, { q: 'warm up the index', mode, limit: K, includeArchived: false });

    const head = await headCommit(h.ctx.store.db, h.principal.workspaceId);
    const perMode: Record<string, unknown> = {};
    const details: Record<string, Record<string, { rank: number | null; top: string[] }>> = {};
    const modeUsed: Record<string, Record<string, number>> = {};
    // The service's modes, and on SQLite the baseline issue 20 measures the plans against: plain
    // FTS5 bm25 over the caller's keyword table, every query word OR-ed, no plan, no boosts.
    const rankers: { name: string; run: (q: string) => Promise<{ paths: string[]; used: string }> }[] = [
      ...MODES.map((mode) => ({
        name: mode as string,
        run: async (q: string) => {
          const res = await searchPages(h.ctx, h.principal, { q, mode, limit: K, includeArchived: false });
          return { paths: res.results.slice(0, K).map((r) => r.path), used: String((res as { mode_used?: unknown }).mode_used ?? mode) };
        },
      })),
      ...(h.engine === 'sqlite' ? [{ name: 'bm25_or', run: async (q: string) => ({ paths: await plainBm25(h, q), used: 'bm25_or' }) }] : []),
      // Point in time (issue 20): hybrid at the commit the load ended with, ranked in the service
      // from that commit's text (src/retrieval/snapshot.ts): its quality and latency beside today's.
      ...(head
        ? [
            {
              name: 'hybrid_at_head',
              run: async (q: string) => {
                const res = await searchPages(h.ctx, h.principal, { q, mode: 'hybrid', limit: K, includeArchived: false, at: head.sha });
                return { paths: res.results.slice(0, K).map((r) => r.path), used: res.mode_used };
              },
            },
          ]
        : []),
    ];
    for (const { name: mode, run } of rankers) {
      const rows: { kind: string; rr: number; recall: number; first: number | null }[] = [];
      const lat: number[] = [];
      for (const q of queries) {
        const s = performance.now();
        const { paths, used } = await run(q.q);
        lat.push(performance.now() - s);
        (modeUsed[mode] ??= {})[used] = (modeUsed[mode]![used] ?? 0) + 1;
        const rel = new Set(q.relevant);
        const firstIdx = paths.findIndex((p) => rel.has(p));
        const found = paths.filter((p) => rel.has(p)).length;
        rows.push({ kind: q.kind, rr: firstIdx < 0 ? 0 : 1 / (firstIdx + 1), recall: found / rel.size, first: firstIdx < 0 ? null : firstIdx + 1 });
        (details[q.id] ??= {})[mode] = {
          rank: firstIdx < 0 ? null : firstIdx + 1,
          top: paths.slice(0, 3),
        };
      }
      const sorted = [...lat].sort((a, b) => a - b);
      perMode[mode] = {
        overall: score(rows),
        by_kind: Object.fromEntries(kinds.map((k) => [k, score(rows.filter((r) => r.kind === k))])),
        latency_ms: { p50: round(percentile(sorted, 50), 2), p95: round(percentile(sorted, 95), 2), first: round(lat[0] ?? 0, 2) },
        mode_used: modeUsed[mode],
      };
    }

    // Which mode wins where: per query, the better reciprocal rank.
    const versus = (a: string, b: string) => {
      const out: Record<string, { wins: number; losses: number; ties: number }> = {};
      for (const q of queries) {
        const d = details[q.id]!;
        const ra = d[a]?.rank ? 1 / d[a].rank : 0;
        const rb = d[b]?.rank ? 1 / d[b].rank : 0;
        const o = (out[q.kind] ??= { wins: 0, losses: 0, ties: 0 });
        if (ra > rb) o.wins++;
        else if (ra < rb) o.losses++;
        else o.ties++;
      }
      return out;
    };

    // Offline fusion study (for tuning): the fts and vector lists at depth 50 through the same
    // searchPages, fused here by weighted reciprocal rank over pages, on a grid of (k, vector weight).
    let fusion: Record<string, unknown> | string = 'vector mode not served by vectors in this build';
    if ((modeUsed.vector ?? {}).vector) {
      const DEPTH = 50;
      const lists: Record<string, { fts: string[]; vector: string[] }> = {};
      for (const q of queries) {
        const f = await searchPages(h.ctx, h.principal, { q: q.q, mode: 'fts', limit: DEPTH, includeArchived: false });
        const v = await searchPages(h.ctx, h.principal, { q: q.q, mode: 'vector', limit: DEPTH, includeArchived: false });
        lists[q.id] = { fts: f.results.map((r) => r.path), vector: v.results.map((r) => r.path) };
      }
      const evalGrid = (qs: EvalQuery[], k: number, wv: number) => {
        const rows = qs.map((q) => {
          const sc = new Map<string, number>();
          lists[q.id]!.fts.forEach((p, i) => sc.set(p, (sc.get(p) ?? 0) + 1 / (k + i + 1)));
          lists[q.id]!.vector.forEach((p, i) => sc.set(p, (sc.get(p) ?? 0) + wv / (k + i + 1)));
          const top = [...sc.entries()]
            .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
            .slice(0, K)
            .map(([p]) => p);
          const rel = new Set(q.relevant);
          const i = top.findIndex((p) => rel.has(p));
          return { kind: q.kind, rr: i < 0 ? 0 : 1 / (i + 1), recall: top.filter((p) => rel.has(p)).length / rel.size, first: i < 0 ? null : i + 1 };
        });
        return rows;
      };
      const grid: ({ k: number; w_vector: number; mrr: number; recall: number } & Record<string, number>)[] = [];
      for (const k of [5, 10, 20, 60]) {
        for (const wv of [0, 0.25, 0.5, 0.75, 1, 1.5, 2]) {
          const rows = evalGrid(queries, k, wv);
          const by = (kind: string) => score(rows.filter((r) => r.kind === kind)).mrr_at_10;
          const all = score(rows);
          grid.push({ k, w_vector: wv, mrr: all.mrr_at_10, recall: all.recall_at_10, ...Object.fromEntries(kinds.map((kind) => [kind, by(kind)])) });
        }
      }
      // Two-fold check by need (odd / even groups): pick on one half, score on the other.
      const groups = [...new Set(queries.map((q) => q.group))].sort();
      const half = (odd: boolean) => queries.filter((q) => groups.indexOf(q.group) % 2 === (odd ? 1 : 0));
      const pick = (qs: EvalQuery[]) => {
        let best = { k: 60, wv: 1, mrr: -1 };
        for (const g of grid) {
          const m = score(evalGrid(qs, g.k, g.w_vector)).mrr_at_10;
          if (m > best.mrr) best = { k: g.k, wv: g.w_vector, mrr: m };
        }
        return best;
      };
      const a = pick(half(true));
      const b = pick(half(false));
      fusion = {
        method: `weighted RRF over pages of the fts and vector lists (depth ${DEPTH}): score = 1/(k+rank_fts) + w_vector/(k+rank_vector)`,
        best: [...grid].sort((x, y) => y.mrr - x.mrr).slice(0, 5),
        grid,
        two_fold_by_need: {
          pick_on_odd: { ...a, mrr_on_even: score(evalGrid(half(false), a.k, a.wv)).mrr_at_10 },
          pick_on_even: { ...b, mrr_on_odd: score(evalGrid(half(true), b.k, b.wv)).mrr_at_10 },
        },
      };
    }

    if (opts.details) {
      fs.mkdirSync(CACHE_DIR, { recursive: true });
      const file = path.join(CACHE_DIR, man ? 'last-run-man.json' : 'last-run.json');
      fs.writeFileSync(
        file,
        JSON.stringify(
          queries.map((q) => ({ ...q, ...details[q.id] })),
          null,
          1,
        ),
      );
      log(`per-query details in ${file}`);
    }

    const rt = runtimeOf(h.ctx);
    return {
      engine: h.engine,
      corpus: {
        packages: corpus.packages,
        pages: corpus.pages.length,
        chars_total: corpus.pages.reduce((a, p) => a + p.content.length, 0),
      },
      queries: {
        total: queries.length,
        needs: new Set(queries.map((q) => q.group)).size,
        by_kind: Object.fromEntries(kinds.map((k) => [k, queries.filter((q) => q.kind === k).length])),
      },
      embeddings: rt?.provider
        ? { provider: rt.provider.provider, model: rt.provider.model, dimensions: rt.provider.dimensions }
        : 'no retrieval runtime in this build',
      load: {
        method: 'createPage in-process, one durable commit per page',
        seconds: round(loadS, 2),
        pages_per_sec: round(corpus.pages.length / loadS, 1),
        embedding_drain_s: round(drained.waited_ms / 1000, 2),
        load_average_1m_before: load0,
      },
      modes: perMode,
      hybrid_vs_fts: versus('hybrid', 'fts'),
      fusion_study: fusion,
      vector_vs_fts: versus('vector', 'fts'),
      ...(h.engine === 'sqlite' ? { fts_vs_bm25_or: versus('fts', 'bm25_or'), hybrid_vs_bm25_or: versus('hybrid', 'bm25_or') } : {}),
      hybrid_beats_fts: (perMode.hybrid as { overall: Scores }).overall.mrr_at_10 > (perMode.fts as { overall: Scores }).overall.mrr_at_10,
      load_average_1m_after: loadAverage(),
    };
  } finally {
    await h.close();
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  installCleanupHandlers();
  const args = process.argv.slice(2);
  const pgArg = args.find((a) => a === '--pg' || a.startsWith('--pg='));
  const pgAdminUrl = pgArg ? (pgArg.includes('=') ? pgArg.slice(5) : 'postgres://postgres@127.0.0.1:5432/test') : undefined;
  runStandalone(() => benchRetrievalQuality({ details: args.includes('--details'), pgAdminUrl, set: args.includes('--set=man') ? 'man' : 'debian' }));
}
