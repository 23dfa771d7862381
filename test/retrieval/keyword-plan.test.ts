import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authenticate } from '../../src/auth/resolve.js';
import { SESSION_COOKIE } from '../../src/auth/sessions.js';
import type { Principal } from '../../src/policy/principal.js';
import { keywordCandidates, reachSql, widestCeiling, type Candidate, type Scope } from '../../src/retrieval/candidates.js';
import type { Level } from '../../src/policy/sensitivity.js';
import {
  ANY_WORD_BUDGET,
  COMMON_DOCS,
  keywordPlan,
  PG_ANY_WORD_BUDGET,
  PG_SCORE_BUDGET,
  pgKeywordPlan,
  SCORE_BUDGET,
  termDocCounts,
  type KeywordPlan,
} from '../../src/retrieval/keyword-plan.js';
import { keywordList } from '../../src/retrieval/lists.js';
import { byCoverage, inverseFrequency } from '../../src/retrieval/keyword.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';

/**
 * Keyword query planning: the plan from word counts (pure), the SQLite word counts, and how
 * keywordCandidates runs the unscored and newest-only plans against a real index.
 */

const counts = (entries: Record<string, number>) => new Map(Object.entries(entries));

describe('keywordPlan', () => {
  it('scores every term when there are no counts or no terms', () => {
    for (const op of ['AND', 'OR'] as const) {
      expect(keywordPlan(['alpha', 'beta'], op, null)).toEqual({ terms: ['alpha', 'beta'], op, scored: true, newest: null });
      expect(keywordPlan([], op, null)).toEqual({ terms: [], op, scored: true, newest: null });
      expect(keywordPlan([], op, counts({ alpha: COMMON_DOCS * 10 }))).toEqual({ terms: [], op, scored: true, newest: null });
    }
  });

  it('AND with only rare words keeps them all and scores every match', () => {
    // COMMON_DOCS itself is still rare; a word missing from the counts is in no section (0).
    const docs = counts({ alpha: 3, beta: COMMON_DOCS, gamma: SCORE_BUDGET });
    expect(keywordPlan(['alpha', 'beta', 'gamma', 'unseen'], 'AND', docs)).toEqual({
      terms: ['alpha', 'beta', 'gamma', 'unseen'],
      op: 'AND',
      scored: true,
      newest: null,
    });
  });

  it('AND leaves out the common words when a rare one remains, in the query’s order', () => {
    const docs = counts({ the: COMMON_DOCS + 1, zebra: 12, and: COMMON_DOCS * 5, quokka: 40 });
    expect(keywordPlan(['the', 'zebra', 'and', 'quokka'], 'AND', docs)).toEqual({ terms: ['zebra', 'quokka'], op: 'AND', scored: true, newest: null });
    expect(keywordPlan(['quokka', 'the', 'zebra'], 'AND', docs).terms).toEqual(['quokka', 'zebra']);
  });

  it('AND scores only the newest SCORE_BUDGET matches when even the rarest kept word is past the budget', () => {
    const docs = counts({ often: SCORE_BUDGET + 1, oftener: COMMON_DOCS, common: COMMON_DOCS + 1 });
    expect(keywordPlan(['common', 'oftener', 'often'], 'AND', docs)).toEqual({ terms: ['oftener', 'often'], op: 'AND', scored: true, newest: SCORE_BUDGET });
    // At the budget exactly, every match is scored.
    expect(keywordPlan(['often', 'oftener'], 'AND', counts({ often: SCORE_BUDGET, oftener: COMMON_DOCS })).newest).toBeNull();
  });

  it('ranks unscored when every word is common, keeping every word', () => {
    const docs = counts({ the: COMMON_DOCS + 1, and: COMMON_DOCS * 3 });
    for (const op of ['AND', 'OR'] as const) {
      const plan = keywordPlan(['the', 'and'], op, docs);
      expect(plan).toEqual({ terms: ['the', 'and'], op, scored: false, newest: null });
    }
  });

  it('OR keeps the rarest words while their sections total at most ANY_WORD_BUDGET, in the query’s order', () => {
    expect(ANY_WORD_BUDGET).toBeLessThan(COMMON_DOCS); // the premise of these counts
    // Rarest first: one (1), then mid (ANY_WORD_BUDGET - 1): total ANY_WORD_BUDGET, kept; then big: over, left out.
    const docs = counts({ big: ANY_WORD_BUDGET, mid: ANY_WORD_BUDGET - 1, one: 1, common: COMMON_DOCS + 1 });
    expect(keywordPlan(['big', 'mid', 'common', 'one'], 'OR', docs, ANY_WORD_BUDGET)).toEqual({ terms: ['mid', 'one'], op: 'OR', scored: true, newest: null });
    // Every rare word fits: all kept, common ones still left out.
    expect(keywordPlan(['common', 'one', 'mid'], 'OR', docs, ANY_WORD_BUDGET)).toEqual({ terms: ['one', 'mid'], op: 'OR', scored: true, newest: null });
    // SQLite scores them all (its budget for any word is ANY_WORD_BUDGET); a smaller budget cuts to the newest.
    expect(keywordPlan(['common', 'one', 'mid'], 'OR', docs).newest).toBe(SCORE_BUDGET);
  });

  it('a budget given (PostgreSQL’s) caps the matches scored; the words an any-word query keeps are chosen by their own total', () => {
    expect(PG_SCORE_BUDGET).toBeLessThan(SCORE_BUDGET);
    const docs = counts({ often: PG_SCORE_BUDGET + 1, once: 1 });
    expect(keywordPlan(['often'], 'AND', docs, PG_SCORE_BUDGET).newest).toBe(PG_SCORE_BUDGET);
    expect(keywordPlan(['often'], 'AND', docs).newest).toBeNull();
    // Both words are kept by either engine (their sections total under ANY_WORD_BUDGET) ...
    expect(keywordPlan(['often', 'once'], 'OR', docs, ANY_WORD_BUDGET).terms).toEqual(['often', 'once']);
    expect(keywordPlan(['often', 'once'], 'OR', docs, ANY_WORD_BUDGET)).toMatchObject({ newest: null });
    // ... and PostgreSQL scores every match of the rarer word (it fits its budget) and the
    // newest of the rest up to PG_SCORE_BUDGET.
    expect(keywordPlan(['often', 'once'], 'OR', docs, PG_SCORE_BUDGET)).toEqual({
      terms: ['often', 'once'],
      op: 'OR',
      scored: true,
      newest: PG_SCORE_BUDGET,
      whole: { terms: ['once'], sections: 1 },
    });
    // No word fits the budget alone: the newest matches only.
    expect(keywordPlan(['often', 'again'], 'OR', counts({ often: PG_SCORE_BUDGET + 1, again: PG_SCORE_BUDGET + 2 }), PG_SCORE_BUDGET)).toEqual({
      terms: ['often', 'again'],
      op: 'OR',
      scored: true,
      newest: PG_SCORE_BUDGET,
    });
    // Past ANY_WORD_BUDGET the rarer word alone is kept, on both.
    const more = counts({ often: ANY_WORD_BUDGET, once: 1 });
    expect(keywordPlan(['often', 'once'], 'OR', more, PG_SCORE_BUDGET)).toEqual({ terms: ['once'], op: 'OR', scored: true, newest: null });
    expect(keywordPlan(['often', 'once'], 'OR', more, ANY_WORD_BUDGET).terms).toEqual(['once']);
    // PostgreSQL keeps words up to its own, smaller total (a kept word costs it more).
    expect(PG_ANY_WORD_BUDGET).toBeLessThan(ANY_WORD_BUDGET);
    const mid = counts({ often: PG_ANY_WORD_BUDGET, once: 1 });
    expect(keywordPlan(['often', 'once'], 'OR', mid, ANY_WORD_BUDGET).terms).toEqual(['often', 'once']);
    expect(keywordPlan(['often', 'once'], 'OR', mid, PG_SCORE_BUDGET, PG_ANY_WORD_BUDGET).terms).toEqual(['once']);
  });

  it('PostgreSQL matches the words its own budget keeps and weighs those SQLite’s keeps', () => {
    const docs = counts({ often: PG_ANY_WORD_BUDGET, once: 1, common: COMMON_DOCS + 1 });
    expect(pgKeywordPlan(['often', 'once', 'common'], 'OR', docs)).toEqual({
      terms: ['once'],
      op: 'OR',
      scored: true,
      newest: null,
      weighed: ['often', 'once'],
    });
    // Nothing more to weigh: no `weighed`; all words, or unscored: none either.
    expect(pgKeywordPlan(['often', 'once'], 'OR', counts({ often: 5, once: 1 }))).not.toHaveProperty('weighed');
    expect(pgKeywordPlan(['often', 'once'], 'AND', docs)).not.toHaveProperty('weighed');
    expect(pgKeywordPlan(['common'], 'OR', docs)).toMatchObject({ scored: false });
    expect(pgKeywordPlan(['common'], 'OR', docs)).not.toHaveProperty('weighed');
  });

  it('OR keeps at least the rarest word even when it alone is past the budget, scoring only the newest', () => {
    const docs = counts({ big: ANY_WORD_BUDGET + 1, bigger: ANY_WORD_BUDGET + 5, common: COMMON_DOCS + 1 });
    expect(keywordPlan(['bigger', 'common', 'big'], 'OR', docs, ANY_WORD_BUDGET)).toEqual({ terms: ['big'], op: 'OR', scored: true, newest: ANY_WORD_BUDGET });
  });
});

/** A page of the suite: its path and the words it was written with. */
interface PageSpec {
  path: string;
  title: string;
  body: string;
  sensitivity?: 'public' | 'internal' | 'confidential' | 'secret';
  archived?: boolean;
}

function haystack(c: Candidate): string {
  return `${c.title}\n${c.heading}\n${c.text}`.toLowerCase();
}

describe.each(testEngines())('keyword plans against a real index (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let human: Principal; // owner of the workspace: ceiling secret
  let agent: Principal; // read, write, search over * up to confidential
  let low: Principal; // search up to internal
  let fbOnly: Principal; // search over Space fb only
  const sqlite = engine === 'sqlite';

  const scope = (extra: Partial<Scope> = {}): Scope => ({ action: 'search', includeArchived: false, ...extra });
  const principalOf = (credentials: { key?: string; session?: string }): Promise<Principal> =>
    authenticate(s.ctx, {
      authorization: credentials.key ? `Bearer ${credentials.key}` : undefined,
      sessionToken: credentials.session,
      csrfHeader: undefined,
      csrfCookie: undefined,
      unsafe: false,
      ip: '127.0.0.1',
      workspace: undefined,
    });
  const write = async (p: PageSpec) => {
    const fm = [`title: ${p.title}`, `sensitivity: ${p.sensitivity ?? 'internal'}`, ...(p.archived ? ['state: archived', 'archived_reason: manual'] : [])];
    const res = await owner.post('/api/v1/nodes', { path: p.path, content: `---\n${fm.join('\n')}\n---\n${p.body}` });
    expect(res.status, res.text.slice(0, 300)).toBe(201);
  };
  /** keywordCandidates with the word counts keywordList would give it (PostgreSQL sizes its newest-N window by them). */
  const run = async (p: Principal, sc: Scope, plan: KeywordPlan, limit = 50) => {
    const docs = await termDocCounts(s.ctx.store, plan.terms, {
      workspaceId: p.workspaceId,
      ceiling: widestCeiling(p, sc.action) ?? 'public',
      visibility: reachSql(p, sc.action) ?? undefined,
    });
    return keywordCandidates(s.ctx, p, sc, plan, limit, docs);
  };
  /** Counts over the owner's workspace at every level. */
  const counted = () => ({ workspaceId: human.workspaceId, ceiling: 'secret' as const });
  const pathsOf = (list: Candidate[]) => list.map((c) => c.path);
  const unscored = (terms: string[]): KeywordPlan => ({ terms, op: 'AND', scored: false, newest: null });
  const newest = (terms: string[], n: number | null): KeywordPlan => ({ terms, op: 'AND', scored: true, newest: n });

  beforeAll(async () => {
    s = await startTestServer(engine);
    const h = await signupHuman(s.url);
    owner = h.client;
    const session = owner.cookies.get(SESSION_COOKIE);
    if (!session) throw new Error('no session cookie after sign-up');
    human = await principalOf({ session: decodeURIComponent(session) });
    const a = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'write' }, { action: 'search' }]);
    agent = await principalOf({ key: a.key });
    const l = await createAgentWithKey(
      owner,
      [
        { action: 'read', ceiling: 'internal' },
        { action: 'search', ceiling: 'internal' },
      ],
      { ceiling: 'internal' },
    );
    low = await principalOf({ key: l.key });
    const f = await createAgentWithKey(owner, [{ action: 'search', scope: 'fb' }]);
    fbOnly = await principalOf({ key: f.key });
    expect(human).toMatchObject({ kind: 'human', role: 'owner' });
    expect(agent.kind).toBe('agent');
  });
  afterAll(async () => s?.stop());

  it('termDocCounts counts the sections holding each word, by stem', async () => {
    // zorblax: two sections of one page and one of another. The deploy family: one section each.
    await write({
      path: 'cnt/one.md',
      title: 'Counting one',
      body: '# First\n\nThe zorblax lives here.\n\n# Second\n\nAnother zorblax.\n\n# Third\n\nNothing.\n',
    });
    await write({ path: 'cnt/two.md', title: 'Counting two', body: '# Only\n\nA zorblax and we are deploying.\n' });
    await write({ path: 'cnt/three.md', title: 'Counting three', body: '# Only\n\nIt deployed fine.\n\n# Later\n\nHe deploys daily.\n' });
    const docs = await termDocCounts(s.ctx.store, ['zorblax', 'deploy', 'deploying', 'nosuchwordatall'], counted());
    expect(docs).toEqual(
      new Map([
        ['zorblax', 3],
        ['deploy', 3],
        ['deploying', 3],
        ['nosuchwordatall', 0],
      ]),
    );
    // A word in the title is in every section of its page.
    expect((await termDocCounts(s.ctx.store, ['counting'], counted()))!.get('counting')).toBe(6);
    // Rare words are counted afresh: a new section counts at once.
    await write({ path: 'cnt/four.md', title: 'Counting four', body: 'One more zorblax.\n' });
    expect((await termDocCounts(s.ctx.store, ['zorblax'], counted()))!.get('zorblax')).toBe(4);
    // The index drops diacritics: an accented query word counts the same sections as its plain form.
    await write({ path: 'cnt/five.md', title: 'Counting five', body: 'Coffee at the café, a crème brûlée.\n' });
    expect(await termDocCounts(s.ctx.store, ['café', 'cafe', 'crème', 'brûlée'], counted())).toEqual(
      new Map([
        ['café', 1],
        ['cafe', 1],
        ['crème', 1],
        ['brûlée', 1],
      ]),
    );
  });

  it('termDocCounts counts only the sections at the levels asked for, also after a page changes level', async () => {
    // glimmerhorn: one public section, one in a confidential block of a public page, one secret page.
    await write({ path: 'lv/open.md', title: 'Open', body: 'A glimmerhorn in the open.\n', sensitivity: 'public' });
    await write({ path: 'lv/block.md', title: 'Block', body: 'Plain words.\n\n::: confidential\nA glimmerhorn kept back.\n:::\n', sensitivity: 'public' });
    await write({ path: 'lv/vault.md', title: 'Vault', body: 'The glimmerhorn of the vault.\n', sensitivity: 'secret' });
    const at = async (ceiling: Level) => (await termDocCounts(s.ctx.store, ['glimmerhorn'], { workspaceId: human.workspaceId, ceiling }))!.get('glimmerhorn');
    expect(await at('public')).toBe(1);
    expect(await at('internal')).toBe(1);
    expect(await at('confidential')).toBe(2);
    expect(await at('secret')).toBe(3);
    // The secret page is lowered to internal: an internal reader now counts it.
    const page = await owner.get(`/api/v1/nodes/${encodeURIComponent('lv/vault.md')}`);
    const put = await owner.put(`/api/v1/nodes/${page.body.id}`, { content: '---\ntitle: Vault\nsensitivity: internal\n---\nThe glimmerhorn of the vault.\n' });
    expect(put.status, put.text).toBe(200);
    expect(await at('internal')).toBe(2);
    expect(await at('public')).toBe(1);
  });

  it('an unscored plan returns the sections holding every word, newest first', async () => {
    // The oldest page holds the words most and in its title: bm25 would rank it first.
    await write({ path: 'un/u1.md', title: 'Vexilla quorbit', body: 'vexilla quorbit vexilla quorbit vexilla quorbit.\n' });
    await write({
      path: 'un/u2.md',
      title: 'Second',
      body: 'A long note that mentions vexilla once and, much later in the text, the quorbit as well among other words.\n',
    });
    await write({ path: 'un/u3.md', title: 'Third', body: 'Only vexilla here.\n' });
    await write({ path: 'un/u4.md', title: 'Fourth', body: 'quorbit, then a long aside about nothing in particular, then vexilla.\n' });
    const terms = ['vexilla', 'quorbit'];
    const list = await run(agent, scope(), unscored(terms));
    for (const c of list) for (const t of terms) expect(haystack(c), c.path).toContain(t);
    expect([...pathsOf(list)].sort()).toEqual(['un/u1.md', 'un/u2.md', 'un/u4.md']);
    const scored = await run(agent, scope(), newest(terms, null));
    expect(pathsOf(scored)[0]).toBe('un/u1.md');
    expect(pathsOf(list)).toEqual(['un/u4.md', 'un/u2.md', 'un/u1.md']);
    expect(new Set(list.map((c) => c.score)).size).toBe(1);
    // Limited: the newest ones.
    expect(pathsOf(await run(agent, scope(), unscored(terms), 2))).toEqual(['un/u4.md', 'un/u2.md']);
  });

  it('a scored plan whose best matches are all out of scope ranks every match in scope', async () => {
    // 450 sections in Space `noisy` that bm25 prefers (the word three times, short sections):
    // more than the prefilter ranks from the index alone (`prefilter`: at least 400). The two
    // in-scope sections rank below all of them, so only the full ranking can find them.
    const noise = Array.from({ length: 450 }, (_, i) => `## N${i}\n\nquorvex quorvex quorvex ${i}.\n`).join('\n');
    await write({ path: 'noisy/many.md', title: 'Noise', body: noise });
    const filler = 'Words about other things entirely, at some length, to make the section long. '.repeat(12);
    await write({ path: 'quiet/one.md', title: 'One', body: `## First\n\n${filler} A quorvex.\n` });
    await write({ path: 'quiet/two.md', title: 'Two', body: `## Second\n\n${filler} Another quorvex.\n` });
    const all = newest(['quorvex'], null);
    const unscoped = await run(agent, scope(), all, 10);
    expect(unscoped.every((c) => c.path === 'noisy/many.md')).toBe(true);
    const inScope = await run(agent, scope({ space: 'quiet' }), all, 10);
    expect(pathsOf(inScope).sort()).toEqual(['quiet/one.md', 'quiet/two.md']);
  });

  it('an unscored plan takes the newest matches when there are more than it looks at', async () => {
    // More sections than the unscored prefilter looks at (`prefilter` in candidates.ts: at
    // least 200), all older than the one page written last.
    const sections = Array.from({ length: 600 }, (_, i) => `## Part ${i}\n\nThe plethorax and the snorvel, part ${i}.\n`).join('\n');
    await write({ path: 'bulk/many.md', title: 'Plethorax snorvel compendium', body: sections });
    await write({ path: 'bulk/later.md', title: 'Later', body: 'A plethorax, a snorvel.\n' });
    const terms = ['plethorax', 'snorvel'];
    const top = await run(agent, scope(), unscored(terms), 1);
    expect((await termDocCounts(s.ctx.store, terms, counted()))!.get('plethorax')).toBeGreaterThan(600);
    expect(pathsOf(top)).toEqual(['bulk/later.md']);
    const ten = await run(agent, scope(), unscored(terms), 10);
    expect(ten).toHaveLength(10);
    for (const c of ten) for (const t of terms) expect(haystack(c), c.path).toContain(t);
  });

  it('a newest-N plan scores only the N newest matches', async () => {
    await write({ path: 'nw/n1.md', title: 'Wombatron handbook', body: 'The wombatron, all about the wombatron.\n' });
    for (const n of [2, 3, 4, 5])
      await write({ path: `nw/n${n}.md`, title: `Note ${n}`, body: `Filler words around a single wombatron mention and more filler text here (${n}).\n` });
    const all = await run(agent, scope(), newest(['wombatron'], null));
    expect(pathsOf(all)[0]).toBe('nw/n1.md');
    expect(all).toHaveLength(5);
    expect(pathsOf(await run(agent, scope(), newest(['wombatron'], 5)))[0]).toBe('nw/n1.md');
    const two = await run(agent, scope(), newest(['wombatron'], 2));
    expect([...pathsOf(two)].sort()).toEqual(['nw/n4.md', 'nw/n5.md']);
    expect(two[0]!.score).toBeGreaterThan(0);
    // Equal scores go newest first on SQLite, oldest first on PostgreSQL (as its full ranking does).
    expect(pathsOf(two)).toEqual(sqlite ? ['nw/n5.md', 'nw/n4.md'] : ['nw/n4.md', 'nw/n5.md']);
  });

  it('a newest-N plan says when its cut took every match, so keywordList does not rank them all again', async () => {
    for (const n of [1, 2, 3]) await write({ path: `cp/c${n}.md`, title: `Crumplet ${n}`, body: `A crumplet note (${n}).\n` });
    // Three matches, a cut of five: every match was ranked.
    const all = await run(agent, scope(), newest(['crumplet'], 5));
    expect(all).toHaveLength(3);
    expect(all.complete).toBe(true);
    // A cut of two of the three: more matches than it ranked, so a run over all of them may find others.
    const cut = await run(agent, scope(), newest(['crumplet'], 2));
    expect(cut).toHaveLength(2);
    expect(cut.complete).toBeUndefined();
    // Archived sections: SQLite counts every match (archived ones too), so it never claims
    // completeness past them; PostgreSQL's windows count only the matches that pass the filters.
    for (const n of [4, 5, 6]) await write({ path: `cp/a${n}.md`, title: `Crumplet ${n}`, body: `An old crumplet (${n}).\n`, archived: true });
    const past = await run(agent, scope(), newest(['crumplet'], 5));
    expect(pathsOf(past).sort()).toEqual(['cp/c1.md', 'cp/c2.md', 'cp/c3.md']);
    expect(past.complete).toBe(sqlite ? undefined : true);
    // keywordList answers the same either way.
    expect(pathsOf(await keywordList(s.ctx, agent, scope(), ['crumplet'], 10)).sort()).toEqual(['cp/c1.md', 'cp/c2.md', 'cp/c3.md']);
  });

  it('a newest-N plan whose newest matches are all out of scope still finds the N newest in scope', async () => {
    // 1,200 newer sections in Space `wid2` hold the word; the scope asks for Space `wid`, whose
    // 30 older sections are past the newest matches (PostgreSQL's first window of ids holds
    // none of them and must grow).
    const old = Array.from({ length: 30 }, (_, i) => `## Old ${i}\n\nA quillax note, number ${i}.\n`).join('\n');
    await write({ path: 'wid/old.md', title: 'Old notes', body: old });
    const noise = Array.from({ length: 1_200 }, (_, i) => `## New ${i}\n\nAnother quillax entry ${i}.\n`).join('\n');
    await write({ path: 'wid2/noise.md', title: 'Noise', body: noise });
    // Both engines cut to the newest matches that pass the scope (SQLite cut before the scope's
    // filters and found none of them until an attack, test/http/attack-session-h.test.ts).
    const list = await run(agent, scope({ space: 'wid' }), newest(['quillax'], 20), 50);
    expect(list).toHaveLength(20);
    expect(new Set(pathsOf(list))).toEqual(new Set(['wid/old.md']));
    // The newest 20 of the 30: parts 10 to 29.
    expect(list.map((c) => Number(/number (\d+)/.exec(c.text)?.[1])).sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i + 10));
    const unscoped = await run(agent, scope(), newest(['quillax'], 20), 50);
    expect(new Set(pathsOf(unscoped))).toEqual(new Set(['wid2/noise.md']));
    const viaList = await keywordList(s.ctx, agent, scope({ space: 'wid' }), ['quillax'], 20);
    expect(viaList).toHaveLength(20);
    expect(new Set(pathsOf(viaList))).toEqual(new Set(['wid/old.md']));
  });

  it('the unscored and newest plans still apply the scope filters and the ceiling', async () => {
    const body = 'The glaucon and the fennimore meet.\n';
    await write({ path: 'fa/one.md', title: 'One', body });
    await write({ path: 'fa/arch.md', title: 'Archived', body, archived: true });
    await write({ path: 'fb/other.md', title: 'Other', body });
    await write({ path: 'fa/conf.md', title: 'Conf', body, sensitivity: 'confidential' });
    await write({ path: 'fa/secret.md', title: 'Secret', body, sensitivity: 'secret' });
    const terms = ['glaucon', 'fennimore'];
    const plans: [string, KeywordPlan][] = [
      ['unscored', unscored(terms)],
      ['newest', newest(terms, SCORE_BUDGET)],
      ['scored', newest(terms, null)],
    ];
    for (const [name, plan] of plans) {
      const sorted = async (p: Principal, sc: Scope) => pathsOf(await run(p, sc, plan)).sort();
      expect(await sorted(agent, scope()), name).toEqual(['fa/conf.md', 'fa/one.md', 'fb/other.md']);
      expect(await sorted(agent, scope({ includeArchived: true })), name).toEqual(['fa/arch.md', 'fa/conf.md', 'fa/one.md', 'fb/other.md']);
      expect(await sorted(agent, scope({ space: 'fa' })), name).toEqual(['fa/conf.md', 'fa/one.md']);
      expect(await sorted(human, scope()), name).toEqual(['fa/conf.md', 'fa/one.md', 'fa/secret.md', 'fb/other.md']);
      expect(await sorted(low, scope()), name).toEqual(['fa/one.md', 'fb/other.md']);
      expect(await sorted(fbOnly, scope()), name).toEqual(['fb/other.md']);
      expect(await sorted(fbOnly, scope({ space: 'fa' })), name).toEqual([]);
      // The ceiling and filters narrow before the limit: one result, the best the caller may see.
      expect(pathsOf(await run(low, scope(), plan, 1)), name).toHaveLength(1);
      expect(pathsOf(await run(agent, scope({ space: 'fb' }), plan, 1)), name).toEqual(['fb/other.md']);
    }
    {
      // Both engines alike: the newest-N and unscored cuts count only the sections the filters
      // keep (archived pages' left out unless asked for), at or below the caller's ceiling.
      expect(pathsOf(await run(low, scope(), unscored(terms), 1))).toEqual(['fb/other.md']);
      expect(pathsOf(await run(human, scope({ includeArchived: true }), unscored(terms)))).toEqual([
        'fa/secret.md',
        'fa/conf.md',
        'fb/other.md',
        'fa/arch.md',
        'fa/one.md',
      ]);
      // newest counts the matches the caller's ceiling reads (issue 11) and the filters keep: for
      // the internal agent the newest two are fb/other and fa/one (not the archived page); for
      // the confidential agent, fa/conf and fb/other (the secret page is above its ceiling).
      expect(pathsOf(await run(low, scope(), newest(terms, 2))).sort()).toEqual(['fa/one.md', 'fb/other.md']);
      expect(pathsOf(await run(agent, scope(), newest(terms, 2))).sort()).toEqual(['fa/conf.md', 'fb/other.md']);
    }
    // The newest match the caller's ceiling reads is archived: the newest active one instead.
    await write({ path: 'fa/arch2.md', title: 'Archived too', body, archived: true });
    expect(pathsOf(await run(low, scope(), newest(terms, 1)))).toEqual(['fb/other.md']);
    expect(pathsOf(await run(low, scope({ includeArchived: true }), newest(terms, 1)))).toEqual(['fa/arch2.md']);
  });

  it('a newest-N plan whose words meet only in old sections widens its window until it finds them', async () => {
    // Two words in 300 newer sections each, never together; together only in three old ones.
    await write({
      path: 'meet/old.md',
      title: 'Meeting',
      body: ['one', 'two', 'three'].map((n) => `## Old ${n}\n\nThe zarquon met the vellitor (${n}).\n`).join('\n'),
    });
    const apart = (w: string) => Array.from({ length: 300 }, (_, i) => `## ${w} ${i}\n\nOnly the ${w} here, ${i}.\n`).join('\n');
    await write({ path: 'meet/a.md', title: 'Apart a', body: apart('zarquon') });
    await write({ path: 'meet/b.md', title: 'Apart b', body: apart('vellitor') });
    const two = await run(agent, scope(), newest(['zarquon', 'vellitor'], 2));
    expect(two.map((c) => /\((\w+)\)/.exec(c.text)?.[1]).sort()).toEqual(['three', 'two']);
    const all = await run(agent, scope(), newest(['zarquon', 'vellitor'], 10));
    expect(all.map((c) => /\((\w+)\)/.exec(c.text)?.[1]).sort()).toEqual(['one', 'three', 'two']);
  });

  it('keywordList ranks only the newest matches past the engine’s budget: PostgreSQL’s is smaller', async () => {
    // The best match is old; PG_SCORE_BUDGET < 1,200 newer sections < SCORE_BUDGET mention the word once each.
    await write({ path: 'bud/best.md', title: 'Glimmerquux', body: 'Glimmerquux glimmerquux glimmerquux: all about the glimmerquux.\n' });
    const sections = Array.from({ length: 1_200 }, (_, i) => `## Entry ${i}\n\nOne glimmerquux mention among other words, entry ${i}.\n`).join('\n');
    await write({ path: 'bud/many.md', title: 'Register', body: sections });
    const list = await keywordList(s.ctx, agent, scope(), ['glimmerquux'], 20);
    expect(list).toHaveLength(20);
    if (sqlite) expect(pathsOf(list)[0]).toBe('bud/best.md');
    else expect(pathsOf(list)).not.toContain('bud/best.md');
  });

  it('keywordList: a section holding every word joins the any-word list that left one of them out', async () => {
    // `quillfrond` is in more sections than the engine's any-word budget, so the any-word plan
    // keeps only `tessapine`, and its ten best are among the 30 newer sections that say it three
    // times: the old section holding both words comes from the all-words plan (run beside it).
    // As long as theirs, with `tessapine` twice where they say it three times.
    await write({ path: 'join/both.md', title: 'Ys', body: '## B 1\n\ntessapine tessapine quillfrond 1\n' });
    const over = (sqlite ? ANY_WORD_BUDGET : PG_ANY_WORD_BUDGET) + 50;
    await write({ path: 'join/many.md', title: 'Many', body: Array.from({ length: over }, (_, i) => `## E ${i}\n\nA quillfrond, ${i}.\n`).join('\n') });
    await write({ path: 'join/y.md', title: 'Ys', body: Array.from({ length: 30 }, (_, i) => `## Y ${i}\n\ntessapine tessapine tessapine ${i}\n`).join('\n') });
    const docs = await termDocCounts(s.ctx.store, ['quillfrond', 'tessapine'], { workspaceId: agent.workspaceId, ceiling: 'confidential' });
    const plan = sqlite ? keywordPlan(['quillfrond', 'tessapine'], 'OR', docs, ANY_WORD_BUDGET) : pgKeywordPlan(['quillfrond', 'tessapine'], 'OR', docs);
    expect(plan.terms).toEqual(['tessapine']);
    const anyOnly = await keywordCandidates(s.ctx, agent, scope(), plan, 10, docs);
    expect(pathsOf(anyOnly)).not.toContain('join/both.md');
    const list = await keywordList(s.ctx, agent, scope(), ['quillfrond', 'tessapine'], 10);
    expect(list.anyWord).toBe(true);
    expect(pathsOf(list)).toContain('join/both.md');
    expect(list.every((c) => c.path === 'join/both.md' || c.path === 'join/y.md')).toBe(true);
  });

  it('ranks as bm25 on both engines: three of the words in a section’s text outrank one in a title', async () => {
    // bm25 weighs a title occurrence about twice a text one once saturated (FTS5's column weights
    // 10 and 1); PostgreSQL's earlier saturated ts_rank_cd weighed it five times, so one title
    // word beat three text words and paraphrase queries lost their pages (issue 18).
    await write({ path: 'bm/title.md', title: 'Quorvex', body: 'A short note on other matters entirely.\n' });
    await write({ path: 'bm/text.md', title: 'Notes', body: 'The brindle met the mossgap near the tellurine.\n' });
    const list = await keywordList(s.ctx, agent, scope(), ['quorvex', 'brindle', 'mossgap', 'tellurine'], 10);
    expect(list.anyWord).toBe(true);
    expect(pathsOf(list).slice(0, 2)).toEqual(['bm/text.md', 'bm/title.md']);
  });

  it('weighs words as FTS5’s bm25 does on both engines: a word in most sections of the workspace counts for almost nothing', async () => {
    // Its own workspace, so the sections counted are these four. `plovite` is in three of them
    // (three times each), `zinderwake` in one (once): bm25's idf all but zeroes the first. With
    // a fixed collection size PostgreSQL weighed both alike and ranked the three repeats first.
    const other = await signupHuman(s.url, 'Idf');
    const session = other.client.cookies.get(SESSION_COOKIE);
    const me = await principalOf({ session: decodeURIComponent(session!) });
    for (const [path, body] of [
      ['idf/a.md', 'The plovite plovite plovite report.\n'],
      ['idf/b.md', 'Another plovite plovite plovite report.\n'],
      ['idf/c.md', 'A third plovite plovite plovite report.\n'],
      ['idf/rare.md', 'One zinderwake among words.\n'],
    ] as const) {
      const res = await other.client.post('/api/v1/nodes', { path, content: `# Page\n\n${body}` });
      expect(res.status, res.text.slice(0, 300)).toBe(201);
    }
    const list = await keywordList(s.ctx, me, scope(), ['plovite', 'zinderwake'], 10);
    expect(list.anyWord).toBe(true);
    expect(pathsOf(list)[0]).toBe('idf/rare.md');
    expect(pathsOf(list)).toHaveLength(4);
  });

  it('measures a section’s length in words, as FTS5 does: a section repeating other words is long, and the short one ranks first', async () => {
    // By distinct words the two sections are alike in length, and the second holds `quorble`
    // twice; by words it is thirty times longer (migration 025 on PostgreSQL).
    const other = await signupHuman(s.url, 'Lengths');
    const session = other.client.cookies.get(SESSION_COOKIE);
    const me = await principalOf({ session: decodeURIComponent(session!) });
    const pages: [string, string][] = [
      ['len/short.md', 'The quorble sits near seven small round stones today.\n'],
      ['len/long.md', `The quorble and the quorble ${'again '.repeat(300)}today.\n`],
      ...Array.from({ length: 4 }, (_, i): [string, string] => [`len/filler${i}.md`, `Filler words number ${i} here today.\n`]),
    ];
    for (const [path, body] of pages) {
      const res = await other.client.post('/api/v1/nodes', { path, content: `# Page\n\n${body}` });
      expect(res.status, res.text.slice(0, 300)).toBe(201);
    }
    expect(pathsOf(await keywordList(s.ctx, me, scope(), ['quorble'], 10))).toEqual(['len/short.md', 'len/long.md']);
  });

  it.runIf(!sqlite)('PostgreSQL scores a match by the words weighed, not only by those matched', async () => {
    // Its own workspace: eight sections. `zorbit` twice in one, once beside the rare `quampy` in
    // another. By `zorbit` alone the repeat ranks first; weighing `quampy` too, the other does.
    const other = await signupHuman(s.url, 'Weigh');
    const session = other.client.cookies.get(SESSION_COOKIE);
    const me = await principalOf({ session: decodeURIComponent(session!) });
    const pages: [string, string][] = [
      ['w/both.md', 'The zorbit met a quampy there.\n'],
      ['w/twice.md', 'The zorbit met a zorbit there.\n'],
      ...Array.from({ length: 6 }, (_, i): [string, string] => [`w/filler${i}.md`, `Filler words number ${i} here.\n`]),
    ];
    for (const [path, body] of pages) {
      const res = await other.client.post('/api/v1/nodes', { path, content: `# Page\n\n${body}` });
      expect(res.status, res.text.slice(0, 300)).toBe(201);
    }
    const docs = await termDocCounts(s.ctx.store, ['zorbit', 'quampy'], { workspaceId: me.workspaceId, ceiling: 'secret' });
    const plan: KeywordPlan = { terms: ['zorbit'], op: 'OR', scored: true, newest: null };
    expect(pathsOf(await keywordCandidates(s.ctx, me, scope(), plan, 10, docs))).toEqual(['w/twice.md', 'w/both.md']);
    expect(pathsOf(await keywordCandidates(s.ctx, me, scope(), { ...plan, weighed: ['zorbit', 'quampy'] }, 10, docs))).toEqual(['w/both.md', 'w/twice.md']);
  });

  it('an any-word query past the engine’s budget still ranks the old sections holding its rarest word first', async () => {
    // Past PostgreSQL's budget (1,000) and under SQLite's (2,000): 1,100 newer sections hold
    // `frobvane` once each; one old section holds the rare `quillomar` too, and another old one
    // `quillomar` alone. No section holds both other words, so the query falls back to any word.
    await write({ path: 'tier/old.md', title: 'Old', body: 'The quillomar note, and one frobvane.\n' });
    await write({ path: 'tier/older.md', title: 'Older', body: 'Only quillomar here.\n' });
    const sections = Array.from({ length: 1_100 }, (_, i) => `## Part ${i}\n\nA frobvane mention, part ${i}.\n`).join('\n');
    await write({ path: 'tier/many.md', title: 'Register', body: sections });
    const list = await keywordList(s.ctx, agent, scope(), ['quillomar', 'frobvane', 'nowhereword'], 20);
    expect(list.anyWord).toBe(true);
    expect(pathsOf(list).slice(0, 2).sort()).toEqual(['tier/old.md', 'tier/older.md']);
  });

  it('keywordList: [] when no section holds the words; several words rank any of them, a section holding every word first', async () => {
    const none = await keywordList(s.ctx, agent, scope(), ['nowordlikethis', 'noranyother']);
    expect(none).toHaveLength(0);
    const single = await keywordList(s.ctx, agent, scope(), ['nowordlikethis']);
    expect(single).toHaveLength(0);
    expect(single.anyWord).toBeUndefined();

    // Several words: sections holding any of them, those holding both first (issue 20).
    const both = await keywordList(s.ctx, agent, scope(), ['vexilla', 'quorbit']);
    expect(both.anyWord).toBe(true);
    expect(both.weak).toBe(false);
    expect([...pathsOf(both).slice(0, 3)].sort()).toEqual(['un/u1.md', 'un/u2.md', 'un/u4.md']);
    expect(pathsOf(both)).toContain('un/u3.md');
    // One word: no any-word ranking.
    const one = await keywordList(s.ctx, agent, scope(), ['quorbit']);
    expect(one.anyWord).toBeUndefined();

    // Both words exist, never together: sections holding either, not weak (no word is unknown).
    const apart = await keywordList(s.ctx, agent, scope(), ['zorblax', 'wombatron']);
    expect(apart.anyWord).toBe(true);
    expect(apart.weak).toBe(false);
    expect(new Set(pathsOf(apart))).toEqual(new Set(['cnt/one.md', 'cnt/two.md', 'cnt/four.md', 'nw/n1.md', 'nw/n2.md', 'nw/n3.md', 'nw/n4.md', 'nw/n5.md']));
    for (const c of apart) expect(/zorblax|wombatron/.test(haystack(c)), c.path).toBe(true);

    // A stop word (PostgreSQL's index holds none) is no misspelling: the other word decides.
    const stop = await keywordList(s.ctx, agent, scope(), ['the', 'wombatron']);
    expect(stop.weak).toBe(false);
    expect(pathsOf(stop)).toContain('nw/n1.md');

    // One word in no section at all: the other finds its sections, and the list is weak.
    const typo = await keywordList(s.ctx, agent, scope(), ['wombatron', 'wombatrn']);
    expect(typo.anyWord).toBe(true);
    expect(typo.weak).toBe(true);
    expect(pathsOf(typo)[0]).toBe('nw/n1.md');
    expect(typo).toHaveLength(5);
  });
});

describe('byCoverage', () => {
  const c = (score: number, text: string) => ({ score, title: 'T', heading: '', text });
  it('multiplies each score by the square root of the share of the query’s words (stems) the section holds, best first', () => {
    const list = [c(3, 'plinthar plinthar plinthar'), c(2, 'the plinthars, a gorsebell and tamaroxes')];
    const out = byCoverage(list, ['plinthar', 'gorsebell', 'tamarox']);
    expect(out.map((x) => x.text)).toEqual([list[1]!.text, list[0]!.text]);
    expect(out[0]!.score).toBeCloseTo(2, 10);
    expect(out[1]!.score).toBeCloseTo(3 * Math.sqrt(1 / 3), 10);
    // The title and heading count; one word (or one stem) changes nothing.
    expect(byCoverage([c(1, 'x'), c(2, 'y')], ['t']).map((x) => x.score)).toEqual([1, 2]);
    expect(byCoverage([{ score: 1, title: 'Gorsebell', heading: 'tamarox', text: 'plinthar' }], ['plinthar', 'gorsebell', 'tamarox'])[0]!.score).toBe(1);
  });
});

describe('inverseFrequency', () => {
  it('is FTS5’s bm25 idf over the sections counted, never below 1e-6; a fixed size without a count', () => {
    expect(inverseFrequency(1, 1000)).toBeCloseTo(Math.log(999.5 / 1.5), 10);
    expect(inverseFrequency(600, 1000)).toBe(1e-6);
    expect(inverseFrequency(0, 1000)).toBeGreaterThan(inverseFrequency(1, 1000));
    expect(inverseFrequency(5, undefined)).toBeCloseTo(Math.log(1 + 20_000 / 5.5), 10);
    expect(inverseFrequency(5, 0)).toBeCloseTo(Math.log(1 + 20_000 / 5.5), 10);
  });
});
