/**
 * The retrieval benchmarks as `npm run bench` runs them (bench/run.ts lists RETRIEVAL_NAMES):
 *   retrieval     — quality on the Debian evaluation set (bench/retrieval.ts, bench/eval/)
 *   search_scale  — speed at N synthetic pages (bench/search-scale.ts): 10,000 by default,
 *                   2,000 with --quick, or BENCH_SCALE_PAGES=100000 for the 100k figures;
 *                   BENCH_SCALE_QUERIES sets the query count (300).
 */
import { benchRetrievalQuality } from './retrieval.js';
import { benchSearchScale } from './search-scale.js';
import { loadAverage } from './util.js';

export const RETRIEVAL_NAMES = ['retrieval', 'search_scale'] as const;

export async function runRetrievalBenches(only: Set<string>, quick: boolean, out: Record<string, unknown>, loads: Record<string, number>): Promise<void> {
  if (only.has('retrieval')) {
    out.retrieval = await benchRetrievalQuality({});
    loads.after_retrieval = loadAverage();
  }
  if (only.has('search_scale')) {
    const pages = Number(process.env.BENCH_SCALE_PAGES ?? (quick ? 2_000 : 10_000));
    const queries = Number(process.env.BENCH_SCALE_QUERIES ?? (quick ? 100 : 300));
    out.search_scale = await benchSearchScale({ pages, queries, vectors: true });
    loads.after_search_scale = loadAverage();
  }
}
