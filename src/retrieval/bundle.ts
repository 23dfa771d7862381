import type { RetrievalContext } from './context.js';
import { badRequest, forbidden } from '../errors/index.js';
import { bundleSeconds } from '../metrics.js';
import { hasActionWithin } from '../policy/access.js';
import type { Principal } from '../policy/principal.js';
import type { Candidate, Scope } from './candidates.js';
import { queryTerms } from './keyword.js';
import { hybridLists, listSource } from './lists.js';
import { assertUsableScope } from './scope.js';
import { rankHybrid } from './search.js';
import { minTokens, tokenCount, truncateToTokens } from './tokens.js';
import { sliceWhole } from './text-cut.js';

export const BUNDLE_MIN_TOKENS = 200;
export const BUNDLE_MAX_TOKENS = 64_000;
export const BUNDLE_DEFAULT_TOKENS = 4000;
/**
 * Sections ranked per list before packing: about one per 40 tokens of budget (a section is
 * 100–400 tokens, and near-duplicates drop out), from 50 up to 200.
 */
export function rankDepth(budgetTokens: number): number {
  return Math.min(200, Math.max(50, Math.ceil(budgetTokens / 40)));
}
/** Two sections sharing this much of their word 5-grams are one: the second is dropped. */
const NEAR_DUPLICATE = 0.8;
/** A section cut to fit keeps at least this many tokens of text, or is left out. */
const MIN_TRUNCATED = 60;

export interface BundleOptions {
  intent: string;
  budgetTokens: number;
  /** A Space, or `space/folder`. */
  scope?: string | undefined;
  includeLinks: boolean;
  includeArchived: boolean;
  /** Answer from the workspace as it was at this commit (a sha or unique prefix). */
  at?: string | undefined;
}

export interface BundleSection {
  id: string;
  path: string;
  title: string;
  heading: string;
  commit_sha: string;
  state: string;
  tokens: number;
  score: number;
  /** `rank`: matched the intent; `link`: linked from a page already in the bundle (include_links). */
  via: 'rank' | 'link';
  truncated: boolean;
  text: string;
}

export interface Bundle {
  intent: string;
  budget_tokens: number;
  used_tokens: number;
  tokenizer: string;
  /**
   * The commit answered from, in full: the one asked for (`at`), or, live, the newest that
   * changed a page the caller may see (null when none did; hidden writes never move it). Passed
   * back as `at`, it replays the bundle from the same text.
   */
  at: string | null;
  sections: BundleSection[];
  markdown: string;
}

/** `eng` or `eng/runbooks/deploy`: the Space and, when deeper, the folder. */
export function parseScope(scope: string | undefined): { space?: string; folder?: string } {
  if (scope === undefined) return {};
  const s = scope.trim().replace(/^\/+|\/+$/g, '');
  if (s === '') return {};
  if (s.length > 512 || /[\u0000-\u001f\u007f]/.test(s) || s.split('/').some((seg) => seg === '' || seg === '.' || seg === '..')) {
    throw badRequest('scope must be a Space or space/folder path', 'invalid_scope');
  }
  const space = s.split('/')[0]!;
  return s.includes('/') ? { space, folder: s } : { space };
}

function shingles(text: string): Set<string> {
  const w = text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [];
  const out = new Set<string>();
  if (w.length < 5) out.add(w.join(' '));
  for (let i = 0; i + 5 <= w.length; i++) out.add(w.slice(i, i + 5).join(' '));
  return out;
}

function overlap(a: Set<string>, b: Set<string>): number {
  if (a.size === 0 || b.size === 0) return 0;
  let n = 0;
  for (const x of a) if (b.has(x)) n++;
  return n / Math.min(a.size, b.size);
}

/** Commits are cited by their first 12 hex digits, git's own unambiguous short form at any realistic size. */
export const SHORT_SHA_LENGTH = 12;

/** A page's header in the bundle: its title and the one source line all its sections share. */
function pageHeader(s: Pick<BundleSection, 'title' | 'path' | 'id' | 'commit_sha'>): string {
  return `## ${s.title.replace(/\s+/g, ' ')}\nsource: ${s.path} (id ${s.id}, commit ${s.commit_sha.slice(0, SHORT_SHA_LENGTH)})\n`;
}

/** A section's text as the bundle shows it: a first heading that only repeats the page title (its header) is left out. */
function sectionText(c: Pick<Candidate, 'text' | 'title'>): string {
  const text = c.text.trim();
  const nl = text.indexOf('\n');
  const m = /^#\s+(.+?)\s*#*\s*$/.exec(nl === -1 ? text : text.slice(0, nl));
  if (m && m[1] === c.title.trim()) return nl === -1 ? '' : text.slice(nl + 1).trim();
  return text;
}

/** True when the text holds more than headings: a heading-only section tells an agent nothing. */
function hasBody(text: string): boolean {
  return text.split('\n').some((l) => l.trim() !== '' && !/^#{1,6}(\s|$)/.test(l.trim()));
}

/**
 * The bundle's markdown: the intent, the tokens used of the budget, then one block per page in
 * the order of its best section (its header and source line once, its sections under it in
 * the page's own order). `used` is the figure the status line states.
 */
function renderBundle(header: string, budget: number, picked: readonly { s: BundleSection; ord: number }[], used: number): string {
  const pages = new Map<string, { s: BundleSection; ord: number }[]>();
  for (const x of picked) pages.set(x.s.id, [...(pages.get(x.s.id) ?? []), x]);
  const n = picked.length;
  let md = `${header}${used} of ${budget} tokens used; ${n} section${n === 1 ? '' : 's'} from ${pages.size} page${pages.size === 1 ? '' : 's'}\n`;
  for (const secs of pages.values()) {
    md += `\n${pageHeader(secs[0]!.s)}`;
    for (const x of [...secs].sort((a, b) => a.ord - b.ord)) md += `\n${x.s.text}\n`;
  }
  return md;
}

/**
 * The rendered markdown and its token count, the count stated in it. The figure is part of
 * what it counts, so it is settled by iteration (a digit more or less moves the count by a
 * token at most, so two or three rounds settle it); when it would not settle, the larger count is stated.
 */
function settleRender(
  header: string,
  budget: number,
  picked: readonly { s: BundleSection; ord: number }[],
  estimate: number,
): { markdown: string; total: number } {
  let stated = estimate;
  for (let i = 0; i < 6; i++) {
    const markdown = renderBundle(header, budget, picked, stated);
    const total = tokenCount(markdown);
    if (total === stated) return { markdown, total };
    stated = i < 4 ? total : Math.max(stated, total);
  }
  const markdown = renderBundle(header, budget, picked, stated);
  return { markdown, total: tokenCount(markdown) };
}

/**
 * The context bundle: the sections that best answer an intent (hybrid ranking, within the
 * caller's read ceiling, scope and archive rule), near-duplicates dropped, optionally followed
 * by the pages they link to, packed greedily into `budget_tokens` counted with the real
 * tokenizer. The markdown never exceeds the budget; each section carries its source.
 */
export async function buildBundle(ctx: RetrievalContext, p: Principal, opts: BundleOptions): Promise<Bundle> {
  const end = bundleSeconds.startTimer();
  try {
    return await assembleBundle(ctx, p, opts);
  } finally {
    end();
  }
}

async function assembleBundle(ctx: RetrievalContext, p: Principal, opts: BundleOptions): Promise<Bundle> {
  const intent = opts.intent.trim();
  if (intent === '') throw badRequest('The intent is empty', 'invalid_intent');
  if (!Number.isInteger(opts.budgetTokens) || opts.budgetTokens < BUNDLE_MIN_TOKENS || opts.budgetTokens > BUNDLE_MAX_TOKENS) {
    throw badRequest(`budget_tokens must be an integer from ${BUNDLE_MIN_TOKENS} to ${BUNDLE_MAX_TOKENS}`);
  }
  if (!hasActionWithin(p, 'read', '*')) throw forbidden('No read grant');
  const parsed = parseScope(opts.scope);
  // A scope naming nothing the caller can read is an error naming what it can (issue 13).
  // At a commit the scope is a path of then (as search rules).
  if (opts.at === undefined) await assertUsableScope(ctx, p, 'read', parsed.space, parsed.folder);
  const scope: Scope = { action: 'read', ...parsed, includeArchived: opts.includeArchived };
  const source = await listSource(ctx, p, scope, opts.at, true);
  const terms = queryTerms(intent);

  const depth = rankDepth(opts.budgetTokens);
  // Both lists at once (as search does): the keyword one runs while the helper thread scans, or waits on the database.
  const [vecList, kw] = await hybridLists(source, intent, depth, terms, depth);
  const vec = typeof vecList === 'string' ? [] : vecList;
  const ranked = await rankHybrid(ctx, p, kw, vec, (c) => `${c.page_id}\u0000${c.ord}`, terms, source.now);

  const at = source.commit?.sha ?? null;
  // The commit answered from is part of the header, so an agent holding only the markdown can cite and replay it.
  const header = `# Context: ${sliceWhole(intent.replace(/\s+/g, ' '), 0, 200)}\n${at === null ? '' : `as of commit ${at.slice(0, SHORT_SHA_LENGTH)}\n`}`;
  const budget = opts.budgetTokens;
  // The status line is counted with the widest figures it can show.
  let used = tokenCount(`${header}${budget} of ${budget} tokens used; 999 sections from 999 pages\n`);
  const picked: { s: BundleSection; ord: number }[] = [];
  const pagesIn = new Set<string>();
  const seen: Set<string>[] = [];

  const tryAdd = (c: Candidate, score: number, via: 'rank' | 'link'): void => {
    let text = sectionText(c);
    if (!hasBody(text)) return;
    const sh = shingles(c.text);
    if (seen.some((s) => overlap(s, sh) >= NEAR_DUPLICATE)) return;
    const headText = pagesIn.has(c.page_id) ? '' : `\n${pageHeader({ title: c.title, path: c.path, id: c.page_id, commit_sha: c.commit_sha })}`;
    // What cannot fit is not counted (minTokens is a bound from its length): counting a page
    // of one long line took seconds, the node frozen meanwhile.
    if (minTokens(headText) > budget - used) return;
    const head = headText === '' ? 0 : tokenCount(headText);
    let cost = minTokens(`\n${text}\n`) > budget - used - head ? Infinity : head + tokenCount(`\n${text}\n`);
    let truncated = false;
    if (used + cost > budget) {
      const room = budget - used - head - tokenCount('\n\n[…]\n') - 4;
      if (room < MIN_TRUNCATED) return;
      text = `${truncateToTokens(text, room).trimEnd()}\n[…]`;
      cost = head + tokenCount(`\n${text}\n`);
      truncated = true;
      if (used + cost > budget) return;
    }
    used += cost;
    seen.push(sh);
    pagesIn.add(c.page_id);
    picked.push({
      ord: c.ord,
      s: {
        id: c.page_id,
        path: c.path,
        title: c.title,
        heading: c.heading,
        commit_sha: c.commit_sha,
        state: c.state,
        tokens: cost - head,
        score: Math.round(score * 1e6) / 1e6,
        via,
        truncated,
        text,
      },
    });
  };

  for (const f of ranked) {
    if (budget - used < MIN_TRUNCATED) break;
    tryAdd(f.item, f.score, 'rank');
  }
  if (opts.includeLinks && budget - used >= MIN_TRUNCATED) {
    for (const l of await source.linked(picked.map((x) => x.s))) {
      if (budget - used < MIN_TRUNCATED) break;
      tryAdd(l.c, l.score, 'link');
    }
  }

  // Token counts of parts can differ from the whole's by a merge at a seam: check the whole.
  let { markdown, total } = settleRender(header, budget, picked, used);
  while (total > budget && picked.length > 0) {
    picked.pop();
    ({ markdown, total } = settleRender(header, budget, picked, total));
  }
  const sections = picked.map((x) => x.s);
  return { intent, budget_tokens: budget, used_tokens: total, tokenizer: 'o200k_base', at, sections, markdown };
}
