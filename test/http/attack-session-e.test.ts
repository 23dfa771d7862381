import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, joinAs, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { waitForVectors } from '../support/embeddings-server.js';

/**
 * Attack on the PostgreSQL keyword ranking of issue 18 (idf weights from word counts, the
 * newest-N cut, the counts cache): nothing a caller cannot see may change its results, their
 * order, their scores or the any-word/weak decision; no hostile query may answer 500.
 */

interface Hit {
  path: string;
  score: number;
}

/** A page body of `n` sections, each holding `words`. */
const manySections = (title: string, n: number, words: string, level?: string) =>
  `${level ? `---\nsensitivity: ${level}\n---\n` : ''}# ${title}\n\n` + Array.from({ length: n }, (_, i) => `## part ${i}\n\n${words} ${i}.\n`).join('\n');

describe.each(testEngines())('attack e: keyword ranking is no oracle (%s)', (engine) => {
  let s: TestServer;
  let a: Client; // owner of workspace A
  let b: Client; // owner of workspace B
  let viewer: Client; // viewer of A (ceiling internal)
  let agent: Client; // agent of A: search in `fb` only, at internal

  beforeAll(async () => {
    s = await startTestServer(engine);
    const sa = await signupHuman(s.url, 'Alice');
    a = sa.client;
    b = (await signupHuman(s.url, 'Bob')).client;
    viewer = (await joinAs(a, sa.workspace.slug, 'viewer')).client;
    agent = (await createAgentWithKey(a, [{ action: 'search', scope: 'fb', ceiling: 'internal' }], { ceiling: 'internal' })).client;
  }, 60_000);
  afterAll(async () => s?.stop());

  const write = async (c: Client, path: string, content: string): Promise<{ id: string; commit_sha: string }> => {
    const r = await c.post('/api/v1/nodes', { path, content });
    expect(r.status, r.text).toBe(201);
    return r.body;
  };
  const search = async (c: Client, q: string, mode: string): Promise<{ mode_used: string; hits: Hit[] }> => {
    const r = await c.get(`/api/v1/search?q=${encodeURIComponent(q)}&mode=${mode}&limit=20`);
    expect(r.status, r.text).toBe(200);
    return { mode_used: r.body.mode_used, hits: r.body.results.map((h: Hit) => ({ path: h.path, score: h.score })) };
  };
  const bundle = async (c: Client, intent: string) => {
    const r = await c.post('/api/v1/bundle', { intent, budget_tokens: 4000 });
    expect(r.status, r.text).toBe(200);
    return r.body.sections.map((x: { path?: string; id?: string; score: number }) => [x.path ?? x.id, x.score]);
  };

  /** Two pages each heavy in one word of the pair, and fillers of the second word (the rarer one while nothing hidden exists). */
  const pair = async (dir: string, w: string, v: string, level = 'public') => {
    const fm = `---\nsensitivity: ${level}\n---\n`;
    await write(a, `${dir}/heavy-w.md`, `${fm}# One\n\n${w} ${w} ${w} ${w} ${v}.\n`);
    await write(a, `${dir}/heavy-v.md`, `${fm}# Two\n\n${v} ${v} ${v} ${v} ${w}.\n`);
    for (let i = 0; i < 4; i++) await write(a, `${dir}/filler-${i}.md`, `${fm}# Filler ${i}\n\n${v} alone, note ${i}.\n`);
  };

  it('a viewer: 1,200 secret sections, confidential blocks, another workspace and deleted pages holding the words change nothing', async () => {
    await pair('lv', 'tarnquill', 'mirebloom');
    // A public page of 150 confidential blocks: the blocks' words change below, its public lines do not.
    const mixedPage = (words: string) =>
      `---\nsensitivity: public\n---\n# Mixed\n\nplain words.\n\n` +
      Array.from({ length: 150 }, (_, i) => `## c${i}\n\n::: confidential\n${words} ${i}\n:::\n`).join('\n');
    const mixed = await write(a, 'lv/mixed.md', mixedPage('nothing here'));
    await waitForVectors(a);
    const queries: [string, string][] = [
      ['tarnquill mirebloom', 'fts'],
      ['tarnquill mirebloom', 'hybrid'],
      ['tarnquill', 'fts'],
      ['tarnquill glimmerhush', 'fts'],
      ['tarnquill glimmerhush', 'hybrid'],
      ['mirebloom glimmerhush', 'hybrid'],
    ];
    const before = [];
    for (const [q, m] of queries) before.push(await search(viewer, q, m));
    const bundleBefore = await bundle(viewer, 'tarnquill mirebloom glimmerhush');

    // Hidden from the viewer: a secret page of 1,200 sections (past PG_SCORE_BUDGET), 150
    // confidential blocks inside a public page, 1,200 sections in workspace B, a deleted page.
    await write(a, 'vault/big.md', manySections('Big', 1200, 'tarnquill glimmerhush', 'secret'));
    const up = await a.put(`/api/v1/nodes/${mixed.id}`, { content: mixedPage('tarnquill glimmerhush') });
    expect(up.status, up.text).toBe(200);
    await write(b, 'other/big.md', manySections('Other', 1200, 'tarnquill glimmerhush mirebloom'));
    const gone = await write(a, 'lv/gone.md', manySections('Gone', 150, 'tarnquill glimmerhush', 'public'));
    expect((await a.post('/api/auth/stepup', { password: 'correct horse battery' })).status).toBe(200);
    const del = await a.delete(`/api/v1/nodes/${gone.id}`);
    expect(del.status, del.text).toBe(200);

    await waitForVectors(a);
    const after = [];
    for (const [q, m] of queries) after.push(await search(viewer, q, m));
    expect(after).toEqual(before);
    expect(await bundle(viewer, 'tarnquill mirebloom glimmerhush')).toEqual(bundleBefore);
    // The hidden sections exist: the owner finds the word, the viewer does not.
    expect((await search(a, 'glimmerhush', 'fts')).hits.length).toBeGreaterThan(0);
    expect((await search(viewer, 'glimmerhush', 'fts')).hits).toEqual([]);
  }, 60_000);

  // SQLite: bm25's statistics are those of the widest ceiling's table, so pages outside the grant
  // reorder (accepted in docs/security.md); PostgreSQL's counts follow the agent's reach.
  it.skipIf(engine === 'sqlite')(
    'a path-scoped agent: pages outside its grant, and above its ceiling inside it, change nothing',
    async () => {
      await pair('fb/ag', 'quorlith', 'sablewisp');
      await waitForVectors(a);
      const queries: [string, string][] = [
        ['quorlith sablewisp', 'fts'],
        ['quorlith sablewisp', 'hybrid'],
        ['quorlith brackenfume', 'fts'],
        ['quorlith brackenfume', 'hybrid'],
      ];
      const before = [];
      for (const [q, m] of queries) before.push(await search(agent, q, m));
      expect(before[0]!.hits.slice(0, 2).map((h) => h.path)).toEqual(['fb/ag/heavy-w.md', 'fb/ag/heavy-v.md']);

      await write(a, 'eng/big.md', manySections('Eng', 1200, 'quorlith brackenfume'));
      await write(a, 'fb/conf.md', manySections('Conf', 150, 'quorlith brackenfume', 'confidential'));
      await waitForVectors(a);
      const after = [];
      for (const [q, m] of queries) after.push(await search(agent, q, m));
      expect(after).toEqual(before);
    },
    60_000,
  );

  // FAILS on PostgreSQL: pgCounts (src/retrieval/keyword-plan.ts) caches a word's count from 100
  // sections for 10 minutes, keyed by workspace|ceiling|word and never invalidated, and pgRank
  // weighs words by it: sections made secret (or deleted) keep reordering a viewer's results.
  it('a word count cached while pages were visible does not keep weighing them once they are secret', async () => {
    // Control: the bulk page is secret before anyone searches. The word heavy page leads: with
    // 2 visible sections `cindermoss` is rarer than `palewort` (6).
    await pair('stc', 'cindermoss', 'palewort', 'internal');
    await write(a, 'stc/bulk.md', manySections('Bulk', 120, 'cindermoss', 'secret'));
    const control = (await search(viewer, 'cindermoss palewort', 'fts')).hits.map((h) => h.path.replace('stc/', ''));
    expect(control.slice(0, 2)).toEqual(['heavy-w.md', 'heavy-v.md']);

    // Probe: the same, but the viewer searches while the bulk page is internal (122 sections:
    // `droskel` is the common word), then the owner makes the page secret.
    await pair('stp', 'droskel', 'fennivane', 'internal');
    const bulk = await write(a, 'stp/bulk.md', manySections('Bulk', 120, 'droskel', 'internal'));
    const seen = (await search(viewer, 'droskel fennivane', 'fts')).hits.map((h) => h.path.replace('stp/', ''));
    expect(seen.slice(0, 2)).toEqual(['heavy-v.md', 'heavy-w.md']);
    const up = await a.put(`/api/v1/nodes/${bulk.id}`, { content: manySections('Bulk', 120, 'droskel', 'secret') });
    expect(up.status, up.text).toBe(200);
    const probe = (await search(viewer, 'droskel fennivane', 'fts')).hits.map((h) => h.path.replace('stp/', ''));
    expect(probe).toEqual(control);
  }, 60_000);

  it('hostile queries never answer 500', async () => {
    await write(a, 'hx/plain.md', '# Plain\n\nThe quick brown fox jumps over the lazy dog; café naïve résumé 東京 ключ.\n');
    const long = 'x'.repeat(3000);
    const astral = 'a' + '𠀀'.repeat(40); // slicing at 64 UTF-16 units cuts a surrogate pair
    const queries = [
      Array.from({ length: 900 }, (_, i) => `w${i}`).join(' '),
      'the and of to a in is it',
      'the',
      '"quick" \'fox\'',
      'fox\\ \\\\ \\',
      'quick & fox | !dog :* fox:* <-> <2> !(fox) & !!',
      "fox:A & dog:*B | 'x' ''",
      long,
      `${long.slice(0, 1000)} fox`,
      astral,
      `${astral} fox`,
      'café naïve résumé 東京 ключ 🦊 ﷺ ﷻ',
      '\u0301\u0301 a\u0301 \u200b\u200d fox',
      'ＦＯＸ ｑｕｉｃｋ ⅻ ² ½',
      'İstanbul ǅ ß ﬀ',
      '%00 \u0000 fox',
      'fox '.repeat(1000).slice(0, 4000),
      '1e308 0x10 999999999999999999999999 -1',
      '* ',
    ];
    // Raw query strings: invalid UTF-8 and percent escapes that decode to nothing usable.
    for (const raw of ['%ED%A0%80%20fox', '%FF%FE', '%C0%AF', '%', '%zz', 'fox%00dog', '%E2%80%AE']) {
      for (const mode of ['fts', 'hybrid']) {
        const r = await viewer.get(`/api/v1/search?q=${raw}&mode=${mode}`);
        expect([200, 400], `${mode} ${raw}: ${r.text.slice(0, 200)}`).toContain(r.status);
      }
    }
    for (const q of queries) {
      for (const mode of ['fts', 'hybrid']) {
        for (const c of [a, viewer, agent]) {
          const r = await c.get(`/api/v1/search?q=${encodeURIComponent(q)}&mode=${mode}&limit=50`);
          expect([200, 400], `${mode} ${q.slice(0, 40)}: ${r.text.slice(0, 200)}`).toContain(r.status);
        }
      }
      for (const c of [a, viewer]) {
        const r = await c.post('/api/v1/bundle', { intent: q, budget_tokens: 4000 });
        expect([200, 400], `bundle ${q.slice(0, 40)}: ${r.text.slice(0, 200)}`).toContain(r.status);
      }
    }
  }, 60_000);
});
