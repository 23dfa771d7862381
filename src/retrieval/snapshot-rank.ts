import type { Principal } from '../policy/principal.js';
import { visible, type Candidate, type Scope } from './candidates.js';
import type { RetrievalContext } from './context.js';
import { hashTag, textHash, windowEmbedText, windows } from './embed-text.js';
import { EmbeddingUnavailableError } from './embeddings/provider.js';
import { VECTOR_FLOOR } from './hybrid.js';
import { COVERAGE_POWER, stemOf, stemsOf } from './keyword.js';
import { linkKey, pageKeys, pickTarget } from './links.js';
import type { ParsedBlob, Snapshot, SnapshotPage } from './snapshot.js';
import { quantizedScore } from './vectors/matrix.js';

/**
 * Ranking over a snapshot (snapshot.ts), in this process: the same lists the live index gives
 * (keyword sections, vector sections, linked sections), so search and the bundle fuse, boost
 * and pack them as they do today's. The keyword list is FTS5's bm25 over the sections the
 * caller sees at the commit (title 10, heading 4, text 1, as candidates.ts weighs them; Porter
 * stems of diacritic-folded words, as SQLite's tokenizer reads them), any word, times the share
 * of the words a section holds (as keywordList ranks): a deterministic answer for a commit,
 * whichever engine serves it.
 */

const K1 = 1.2;
const B = 0.75;
const WEIGHT = { title: 10, heading: 4, text: 1 };

/** The blob's stems, counted once: a query then looks up its own words, not every word of every page. */
function chunkTerms(parsed: ParsedBlob): NonNullable<ParsedBlob['terms']> {
  if (parsed.terms) return parsed.terms;
  const counts = new Map<string, Map<number, number>>();
  const lens: number[] = [];
  parsed.chunks.forEach((c, i) => {
    let len = 0;
    for (const [text, w] of [
      [c.heading, WEIGHT.heading],
      [c.text, WEIGHT.text],
    ] as const) {
      for (const s of stemsOf(text)) {
        len++;
        let per = counts.get(s);
        if (!per) counts.set(s, (per = new Map()));
        per.set(i, (per.get(i) ?? 0) + w);
      }
    }
    lens.push(len);
  });
  parsed.terms = { counts, lens };
  return parsed.terms;
}

/** One section of a snapshot page as a candidate (the page's fields as the commit left them). */
function candidate(page: SnapshotPage, i: number, score: number): Candidate {
  const c = page.parsed.chunks[i]!;
  return {
    page_id: page.id,
    ord: c.ord,
    heading: c.heading,
    text: c.text,
    block_level: c.blockLevel,
    score,
    path: page.path,
    title: page.title,
    space: page.space,
    cluster_path: page.cluster_path,
    tags: JSON.stringify(page.tags),
    state: page.state,
    sensitivity: page.sensitivity,
    commit_sha: page.commit_sha,
    updated_at: page.updated_at,
  };
}

/** Every section the caller may see, as (page, chunk index). */
function seenSections(snap: Snapshot, p: Principal, scope: Scope): { page: SnapshotPage; i: number }[] {
  const out: { page: SnapshotPage; i: number }[] = [];
  for (const page of snap.pages) {
    page.parsed.chunks.forEach((c, i) => {
      if (visible(p, scope.action, { path: page.path, sensitivity: page.sensitivity, block_level: c.blockLevel })) out.push({ page, i });
    });
  }
  return out;
}

/** What ties are ordered by, without building a candidate. */
const tieKey = (page: SnapshotPage, i: number) => ({ updated_at: page.updated_at, page_id: page.id, ord: page.parsed.chunks[i]!.ord });

/** Newest first, then by page and position: a stable order for ties. */
function byRecency(a: Pick<Candidate, 'updated_at' | 'page_id' | 'ord'>, b: Pick<Candidate, 'updated_at' | 'page_id' | 'ord'>): number {
  return a.updated_at < b.updated_at ? 1 : a.updated_at > b.updated_at ? -1 : a.page_id < b.page_id ? -1 : a.page_id > b.page_id ? 1 : a.ord - b.ord;
}

/** The keyword sections for the terms at the commit, best first (see keywordList for `weak` and `anyWord`). */
export function snapshotKeyword(
  snap: Snapshot,
  p: Principal,
  scope: Scope,
  terms: string[],
  limit: number,
): Candidate[] & { weak?: boolean; anyWord?: boolean } {
  if (terms.length === 0) return [];
  const words = [...new Set(terms.map(stemOf).filter((s) => s !== ''))];
  if (words.length === 0) return [];
  const slot = new Map(words.map((w, i) => [w, i]));
  const sections = seenSections(snap, p, scope);
  const freq: Float64Array[] = [];
  const lens: number[] = [];
  const docs = new Array<number>(words.length).fill(0);
  const titles = new Map<SnapshotPage, string[]>();
  for (const { page, i } of sections) {
    let title = titles.get(page);
    if (!title) titles.set(page, (title = stemsOf(page.title)));
    const { counts, lens: chunkLens } = chunkTerms(page.parsed);
    const f = new Float64Array(words.length);
    for (const s of title) {
      const k = slot.get(s);
      if (k !== undefined) f[k]! += WEIGHT.title;
    }
    words.forEach((w, k) => {
      f[k]! += counts.get(w)?.get(i) ?? 0;
    });
    f.forEach((x, k) => {
      if (x > 0) docs[k]!++;
    });
    freq.push(f);
    lens.push(title.length + chunkLens[i]!);
  }
  const n = sections.length;
  const avg = n === 0 ? 1 : Math.max(1, lens.reduce((a, b) => a + b, 0) / n);
  const idf = docs.map((d) => Math.max(1e-6, Math.log((n - d + 0.5) / (d + 0.5))));
  // Any word, times the share of the words held (byCoverage's rule; the live list's order).
  const out: Candidate[] = [];
  sections.forEach(({ page, i }, j) => {
    const f = freq[j]!;
    let score = 0;
    let held = 0;
    f.forEach((x, k) => {
      if (x === 0) return;
      held++;
      score += (idf[k]! * (x * (K1 + 1))) / (x + K1 * (1 - B + (B * lens[j]!) / avg));
    });
    if (held === 0) return;
    if (words.length > 1) score *= (held / words.length) ** COVERAGE_POWER;
    out.push(candidate(page, i, score));
  });
  const ranked = out.sort((a, b) => b.score - a.score || byRecency(a, b)).slice(0, limit);
  if (terms.length <= 1) return ranked;
  return Object.assign(ranked, { weak: docs.some((d) => d === 0), anyWord: true });
}

/** A page's embedding windows (as the embedding worker cuts them) and their text hashes, kept with its parsed text. */
function windowsOf(page: SnapshotPage): { first: number; last: number; idx: number[]; hash: string }[] {
  const cached = page.parsed.windows;
  if (cached && cached.title === page.title) return cached.list;
  const secs = page.parsed.chunks.map((c, i) => ({ ord: c.ord, heading: c.heading, text: c.text, block_level: c.blockLevel, i }));
  const list = windows(secs).map((w) => ({
    first: w.first,
    last: w.last,
    idx: w.sections.map((s) => s.i),
    hash: textHash(windowEmbedText(page.title, w.sections)),
  }));
  page.parsed.windows = { title: page.title, list };
  return list;
}

/** Windows embedded at most per answer when the commit's text has no stored vector (changed since). */
export const AT_MAX_EMBED = 2_000;
/** Vectors of past text, by workspace, provider key and text hash: a replayed commit is not embedded twice (per workspace: no timing oracle across them). */
const pastVectors = new Map<string, Float32Array>();
const PAST_VECTORS_MAX = 20_000;

/**
 * The vector sections for a query at the commit, best first, at or above VECTOR_FLOOR. Each
 * window of a page's sections (as the embedding worker cuts them) is scored with the vector
 * stored for today's text when its text is the same (the matrix row's hash tag), else embedded
 * now, up to AT_MAX_EMBED windows. A string says why there is no list: the provider is out of
 * reach, or more text changed since the commit than one answer embeds.
 */
export async function snapshotVector(
  ctx: RetrievalContext,
  snap: Snapshot,
  p: Principal,
  scope: Scope,
  q: string,
  limit: number,
): Promise<Candidate[] | string> {
  const rt = ctx.retrieval;
  let qv: Float32Array;
  try {
    qv = await rt.embedQuery(q);
  } catch (e) {
    if (e instanceof EmbeddingUnavailableError) return `embeddings are unavailable (${rt.provider.provider})`;
    throw e;
  }
  const m = await rt.matrix(p.workspaceId);
  const stored = m && m.dims === qv.length ? m : null;
  const scored: { page: SnapshotPage; idx: number[]; score: number }[] = [];
  const missing: { page: SnapshotPage; idx: number[]; text: string; key: string }[] = [];
  for (const page of snap.pages) {
    const rows = stored?.pageScores(page.id, qv) ?? [];
    const chunks = page.parsed.chunks;
    for (const w of windowsOf(page)) {
      // A window with a section the caller cannot see is no answer (as vectorCandidates rules).
      if (!w.idx.every((i) => visible(p, scope.action, { path: page.path, sensitivity: page.sensitivity, block_level: chunks[i]!.blockLevel }))) continue;
      const row = rows.find((r) => r.ord === w.first && r.last === w.last && r.tag === hashTag(w.hash));
      const key = `${p.workspaceId}\u0000${rt.key}\u0000${w.hash}`;
      const past = pastVectors.get(key);
      if (row) scored.push({ page, idx: w.idx, score: row.score });
      else if (past) scored.push({ page, idx: w.idx, score: quantizedScore(past, qv) });
      else
        missing.push({
          page,
          idx: w.idx,
          text: windowEmbedText(
            page.title,
            w.idx.map((i) => chunks[i]!),
          ),
          key,
        });
    }
  }
  if (missing.length > AT_MAX_EMBED) {
    return `${missing.length} passages changed since that commit; a point-in-time answer embeds at most ${AT_MAX_EMBED}`;
  }
  for (let i = 0; i < missing.length; i += 64) {
    const batch = missing.slice(i, i + 64);
    let vecs: Float32Array[];
    try {
      vecs = await rt.provider.embed(batch.map((b) => b.text));
    } catch (e) {
      if (e instanceof EmbeddingUnavailableError) return `embeddings are unavailable (${rt.provider.provider})`;
      throw e;
    }
    batch.forEach((b, j) => {
      const v = vecs[j]!;
      if (pastVectors.size >= PAST_VECTORS_MAX) pastVectors.delete(pastVectors.keys().next().value as string);
      pastVectors.set(b.key, v);
      // Scored as the matrix scores a row of it: the same text ranks the same from either side.
      if (v.length === qv.length) scored.push({ page: b.page, idx: b.idx, score: quantizedScore(v, qv) });
    });
  }
  const out: Candidate[] = [];
  const ranked = scored
    .filter((s) => s.score >= VECTOR_FLOOR)
    .sort((a, b) => b.score - a.score || byRecency(tieKey(a.page, a.idx[0]!), tieKey(b.page, b.idx[0]!)));
  for (const s of ranked) {
    for (const i of s.idx) out.push(candidate(s.page, i, s.score));
    if (out.length >= limit) break;
  }
  return out.slice(0, limit);
}

/**
 * The first visible section of each page the picked pages linked to at the commit (links
 * inside blocks the caller cannot see are not followed), best source first. Links resolve
 * against every page's path at the commit and the titles of the pages the caller sees.
 */
export function snapshotLinked(
  snap: Snapshot,
  p: Principal,
  scope: Scope,
  picked: readonly { id: string; score: number; via: 'rank' | 'link' }[],
): { c: Candidate; score: number }[] {
  const sources = [...new Map(picked.filter((s) => s.via === 'rank').map((s) => [s.id, s.score])).entries()];
  if (sources.length === 0) return [];
  const byId = new Map(snap.pages.map((pg) => [pg.id, pg]));
  const keys = new Map<string, { id: string; path: string }[]>();
  const addKey = (k: string, t: { id: string; path: string }) => keys.set(k, [...(keys.get(k) ?? []).filter((x) => x.id !== t.id), t]);
  for (const t of snap.paths) for (const k of pageKeys(t.path, t.path.split('/').pop()!.replace(/\.md$/i, ''))) addKey(k, t);
  for (const pg of snap.pages) for (const k of pageKeys(pg.path, pg.title)) addKey(k, { id: pg.id, path: pg.path });
  const inBundle = new Set(picked.map((s) => s.id));
  const targets: { id: string; score: number }[] = [];
  for (const [id, score] of sources) {
    const src = byId.get(id);
    if (!src) continue;
    for (const l of src.parsed.links) {
      if (l.blockLevel !== null && !visible(p, scope.action, { path: src.path, sensitivity: 'public', block_level: l.blockLevel })) continue;
      const key = linkKey(l, src.cluster_path);
      const target = key === null ? null : pickTarget(keys.get(key) ?? [], key, src.path);
      if (!target || inBundle.has(target.id) || targets.some((t) => t.id === target.id)) continue;
      targets.push({ id: target.id, score: score / 2 });
    }
  }
  const out: { c: Candidate; score: number }[] = [];
  for (const t of targets.sort((a, b) => b.score - a.score)) {
    const page = byId.get(t.id);
    if (!page) continue;
    const i = page.parsed.chunks.findIndex((c) => visible(p, scope.action, { path: page.path, sensitivity: page.sensitivity, block_level: c.blockLevel }));
    if (i >= 0) out.push({ c: candidate(page, i, t.score), score: t.score });
  }
  return out;
}
