import type { Principal } from '../policy/principal.js';
import type { CommitRef } from '../store/commits.js';
import {
  BOUNDED_MIN,
  keywordCandidates,
  reachSql,
  sectionsOfPages,
  vectorCandidates,
  visible,
  widestCeiling,
  folderPath,
  type Candidate,
  type Scope,
} from './candidates.js';
import type { RetrievalContext } from './context.js';
import { EmbeddingUnavailableError } from './embeddings/provider.js';
import { VECTOR_FLOOR } from './hybrid.js';
import { ANY_WORD_BUDGET, COMMON_DOCS, keywordPlan, pgKeywordPlan, SCORE_BUDGET, termDocCounts } from './keyword-plan.js';
import { byCoverage } from './keyword.js';
import { loadSnapshot, newestVisibleCommit } from './snapshot.js';
import { snapshotKeyword, snapshotLinked, snapshotVector } from './snapshot-rank.js';

/**
 * The ranked lists search and the bundle fuse, and where they come from: the live index
 * (today's pages), or the pages of a commit read in this process (`at`, snapshot.ts).
 */

/** A section the bundle picked, as link following needs it. */
export interface Picked {
  id: string;
  score: number;
  via: 'rank' | 'link';
}

export interface ListSource {
  /** Keyword sections, best first (keywordList). */
  keyword(terms: string[], limit: number): Promise<KeywordList>;
  /**
   * Vector sections at or above VECTOR_FLOOR, best first, or why there are none. `started`: called
   * once the scan is under way on the helper thread (or will not be), so the keyword list the
   * caller holds back runs meanwhile (hybridLists).
   */
  vector(q: string, limit: number, started?: () => void): Promise<Candidate[] | string>;
  /** The first visible section of each page the picked sections' pages link to (the bundle's include_links). */
  linked(picked: readonly Picked[]): Promise<{ c: Candidate; score: number }[]>;
  /** The commit answered from: the one asked for, or the newest when the answer began (null: no commit yet). */
  commit: CommitRef | null;
  /** Freshness is measured at this time (ms): now, or the commit's time. */
  now: number;
}

/**
 * The lists for a caller and scope: at commit `at` (a sha or unique prefix; 404
 * `commit_not_found`, 400 `invalid_sha` or `snapshot_too_large`), else from the live index.
 * `recordCommit`: look up the newest commit for a live answer (the bundle records it).
 */
export async function listSource(ctx: RetrievalContext, p: Principal, scope: Scope, at: string | undefined, recordCommit = false): Promise<ListSource> {
  if (at !== undefined) {
    const snap = await loadSnapshot(ctx, p, scope, at);
    return {
      keyword: (terms, limit) => Promise.resolve(snapshotKeyword(snap, p, scope, terms, limit)),
      vector: (q, limit, started) => {
        started?.();
        return snapshotVector(ctx, snap, p, scope, q, limit);
      },
      linked: (picked) => Promise.resolve(snapshotLinked(snap, p, scope, picked)),
      commit: snap.commit,
      now: Date.parse(snap.commit.created_at),
    };
  }
  return {
    keyword: (terms, limit) => keywordList(ctx, p, scope, terms, limit),
    vector: async (q, limit, started) =>
      (await vectorList(ctx, p, scope, q, limit, started)) ?? `embeddings are unavailable (${ctx.retrieval.provider.provider})`,
    linked: (picked) => linkedSections(ctx, p, scope, picked),
    commit: recordCommit ? await newestVisibleCommit(ctx, p, scope.action) : null,
    now: Date.now(),
  };
}

/** Sections looked at per list before grouping by page (results are at most 50 pages). */
export const CANDIDATES = 100;

/**
 * Keyword sections. One word: the sections holding it. Several: the sections holding any of
 * them, scored by bm25 times the share of the words each holds (byCoverage), so a section
 * answering every word comes first without hiding the page that answers in other words
 * (issue 20); when every word is common (nothing to score by), the newest sections holding them
 * all, else any. `weak` marks a keyword list that likely missed: some word is in no section at
 * all (a misspelling, as far as the index can tell). `anyWord`: ranked by any word. Each query
 * is planned within the scoring budget (keywordPlan); a bounded plan that leaves almost nothing
 * in scope is run again unbounded.
 */
export async function keywordList(ctx: RetrievalContext, p: Principal, scope: Scope, terms: string[], limit = CANDIDATES): Promise<KeywordList> {
  if (terms.length === 0) return [];
  const counted = { workspaceId: p.workspaceId, ceiling: widestCeiling(p, scope.action) ?? 'public', visibility: reachSql(p, scope.action) ?? undefined };
  // One count per word serves every plan and the "weak" test below.
  const docs = await termDocCounts(ctx.store, terms, counted);
  const pg = ctx.store.dialect === 'postgres';
  const planFor = (op: 'AND' | 'OR', words: string[]) =>
    pg ? pgKeywordPlan(words, op, docs) : keywordPlan(words, op, docs, op === 'OR' ? ANY_WORD_BUDGET : SCORE_BUDGET);
  const run = async (op: 'AND' | 'OR', words: string[]) => {
    const plan = planFor(op, words);
    const list = await keywordCandidates(ctx, p, scope, plan, limit, docs);
    if ((plan.scored && plan.newest === null) || list.complete || list.length >= Math.min(limit, BOUNDED_MIN)) return list;
    return keywordCandidates(ctx, p, scope, { ...plan, scored: true, newest: null }, limit, docs);
  };
  if (terms.length <= 1) return run('AND', terms);
  // A word the index does not know here is likely a misspelling.
  const weak = terms.some((t) => docs.get(t) === 0);
  // SQLite ranks by bm25 over its level table, whose statistics hold sections outside a
  // path-scoped agent's reach: ordering any-word lists by them would let hidden writes move the
  // agent's order (test/http/attack-session-h.test.ts). Such agents keep the all-words stage.
  const reachLimited = counted.visibility !== undefined && !pg;
  if (reachLimited || terms.every((t) => (docs.get(t) ?? 0) > COMMON_DOCS)) {
    const all = await run('AND', terms);
    if (all.length > 0) return all;
    return Object.assign(await run('OR', terms), { weak, anyWord: true });
  }
  // When the any-word plan leaves words out (too frequent to score them all), the sections
  // holding every word may be none of the matches it ranks (old ones, say): those come from the
  // all-words plan, bounded by the rarest word, and join the list. Both plans are known from the
  // counts, so both run at once: on PostgreSQL each waits on its own connection (one after the
  // other, they were most of a slow query's time at 100,000 pages; issue 18).
  const kept = planFor('OR', terms).terms;
  const rare = terms.filter((t) => (docs.get(t) ?? 0) <= COMMON_DOCS);
  const [any, all] = await Promise.all([run('OR', terms), kept.length < rare.length ? run('AND', terms) : null]);
  let list = any;
  if (all) {
    const seen = new Set(any.map((c) => `${c.page_id}\u0000${c.ord}`));
    list = [...any, ...all.filter((c) => !seen.has(`${c.page_id}\u0000${c.ord}`))];
  }
  return Object.assign(byCoverage(list, terms).slice(0, limit), { weak, anyWord: true });
}

/** `anyWord`: the list ranks sections holding any of the words (a query of several). */
export type KeywordList = Candidate[] & { weak?: boolean; anyWord?: boolean };

/** Vector sections at or above VECTOR_FLOOR, or null when the provider cannot embed the query now. */
export async function vectorList(
  ctx: RetrievalContext,
  p: Principal,
  scope: Scope,
  q: string,
  limit = CANDIDATES,
  started?: () => void,
): Promise<Candidate[] | null> {
  try {
    // The keyword list held back for the scan does not wait on a remote provider's answer too.
    if (started && !ctx.retrieval.embedsAtOnce(q)) started();
    let qv: Float32Array;
    try {
      qv = await ctx.retrieval.embedQuery(q);
    } catch (e) {
      if (e instanceof EmbeddingUnavailableError) return null;
      throw e;
    }
    return (await vectorCandidates(ctx, p, scope, qv, limit, started)).filter((c) => c.score >= VECTOR_FLOOR);
  } finally {
    // Whatever happened, what waits for the scan to start waits no longer.
    started?.();
  }
}

/**
 * The vector and keyword lists of one query, side by side. On the live index the keyword list
 * waits until the vector scan is under way on the helper thread (vectorCandidates), then runs its
 * statements while the helper scans: the two overlap instead of taking turns on this thread.
 */
export async function hybridLists(
  source: ListSource,
  q: string,
  vectorLimit: number,
  terms: string[],
  keywordLimit: number,
): Promise<[Candidate[] | string, KeywordList]> {
  if (terms.length === 0) return Promise.all([source.vector(q, vectorLimit), source.keyword(terms, keywordLimit)]);
  let started!: () => void;
  const gate = new Promise<void>((resolve) => (started = resolve));
  return Promise.all([source.vector(q, vectorLimit, started), gate.then(() => source.keyword(terms, keywordLimit))]);
}

function inScope(scope: Scope, r: { space: string; cluster_path: string }): boolean {
  if (scope.space && r.space !== scope.space) return false;
  if (!scope.folder) return true;
  const c = folderPath(scope.space, scope.folder);
  return r.cluster_path === c || r.cluster_path.startsWith(`${c}/`);
}

/** The first visible section of each page the picked pages link to (links inside hidden blocks are not followed). */
async function linkedSections(ctx: RetrievalContext, p: Principal, scope: Scope, picked: readonly Picked[]): Promise<{ c: Candidate; score: number }[]> {
  const sources = [...new Map(picked.filter((s) => s.via === 'rank').map((s) => [s.id, s.score])).entries()];
  if (sources.length === 0) return [];
  const db = ctx.store.db;
  const links = await db
    .selectFrom('page_links')
    .innerJoin('pages as src', 'src.id', 'page_links.source_id')
    .select(['page_links.source_id', 'page_links.target_id', 'page_links.block_level', 'src.path as source_path'])
    .where('page_links.workspace_id', '=', p.workspaceId)
    .where(
      'page_links.source_id',
      'in',
      sources.map(([id]) => id),
    )
    .where('page_links.target_id', 'is not', null)
    .orderBy('page_links.source_id')
    .orderBy('page_links.ord')
    .execute();
  const inBundle = new Set(picked.map((s) => s.id));
  const scoreOf = new Map(sources);
  const targets: { id: string; score: number }[] = [];
  for (const l of links) {
    // A link inside a block the caller cannot see does not exist for it.
    if (l.block_level !== null && !visible(p, 'read', { path: l.source_path, sensitivity: 'public', block_level: l.block_level })) continue;
    const id = l.target_id!;
    if (inBundle.has(id) || targets.some((t) => t.id === id)) continue;
    targets.push({ id, score: (scoreOf.get(l.source_id) ?? 0) / 2 });
  }
  if (targets.length === 0) return [];
  const rows = await sectionsOfPages(
    ctx,
    targets.map((t) => t.id),
  );
  const out: { c: Candidate; score: number }[] = [];
  for (const t of targets.sort((a, b) => b.score - a.score)) {
    const first = rows.find((r) => r.page_id === t.id && visible(p, 'read', r) && (scope.includeArchived || r.state === 'active') && inScope(scope, r));
    if (first) out.push({ c: { ...first, score: t.score }, score: t.score });
  }
  return out;
}
