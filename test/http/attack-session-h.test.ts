import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SearchHit, SearchResult } from '../../src/retrieval/search.js';
import type { Dialect } from '../../src/store/db.js';
import { testEngines } from '../support/engines.js';
import { finished, postJson } from '../support/imports.js';
import { call, connectMcp } from '../mcp/support.js';
import { Client, createAgentWithKey, joinAs, signupHuman, startTestServer, type TestServer } from '../support/server.js';

/**
 * Attack session h, on e14f85a and aac147c (issue 18): PostgreSQL keyword search by windows of
 * the newest section ids (pgKeywordRows, the "wide" cut by page_sections.level alone, the
 * sentinel row), the bm25-shaped score (cv_bm25, `avg(length(tsv)) over ()`), and keyword and
 * vector lists fetched at once for hybrid search and the bundle. Real servers, real HTTP.
 *
 * FINDING, fixed (migration 021, candidates.ts matchesCounted / the SQLite cut): the "wide"
 * newest-N cut counted archived sections when the caller asked to leave archived pages out.
 * Archived pages newer than the active matches (archiving or restoring rewrites a page's
 * sections under new ids, so a freshly archived folder is the newest writing there is) took the
 * places of active matches: a search returned one page where ten matched, and the answer differed
 * from the same query with `space=` set. Scored and unscored plans alike; search, hybrid and the
 * bundle alike. SQLite had done the same all along (its cut applied only an agent's reach, never
 * the archive rule or a Space or folder filter); both engines now cut to sections the filters keep.
 *
 * Held (see the passing tests): pages and `::: level` blocks above a caller's ceiling, pages
 * outside an agent's grants or above its ceiling on one path, and another workspace's writing
 * never change a lower caller's answers (ids, order, sections, snippets), with windows
 * engaged (more matches than the budget) or every word common; no row of nulls ever reaches a
 * caller; words meeting only in the oldest sections are found; hostile queries never 500; a page
 * rewritten, moved, archived, created and deleted while searches and bundles run is seen whole;
 * hybrid and the bundle fall back to keywords while embeddings are down; revoked keys get 401.
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const enc = encodeURIComponent;

/** Keyword sections the plan ranks at most before it ranks only the newest (keyword-plan.ts). */
const budgetOf = (engine: Dialect) => (engine === 'postgres' ? 1000 : 2000);

/** A loopback port nothing listens on: embeddings that are down. */
async function deadPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}
const embeddingsDown = (port: number) => ({
  EMBEDDINGS: 'openai',
  EMBEDDINGS_URL: `http://127.0.0.1:${port}/v1`,
  EMBEDDINGS_MODEL: 'down-16',
  EMBEDDINGS_API_KEY: 'sk-down-0123456789abcdef',
  EMBEDDINGS_TIMEOUT_MS: '200',
  EMBEDDINGS_MAX_RETRIES: '0',
});

/** A search answer and its results as the API returns them. */
type Hit = SearchHit;
type SearchBody = SearchResult;

/** Every field of a hit is present and of its type: no row of nulls (the window's sentinel) reaches a caller. */
function expectWholeHits(hits: Hit[], what: string): void {
  for (const h of hits) {
    for (const k of ['id', 'path', 'title', 'space', 'cluster_path', 'state', 'section', 'snippet'] as const) {
      expect(typeof h[k], `${what}: ${k} of ${JSON.stringify(h).slice(0, 200)}`).toBe('string');
    }
    expect(h.id, what).not.toBe('');
    expect(Array.isArray(h.tags), what).toBe(true);
    expect(Number.isFinite(h.score), `${what}: score ${h.score}`).toBe(true);
  }
}

async function search(c: Client, q: string, params: Record<string, string | number | boolean> = {}): Promise<SearchBody> {
  const qs = new URLSearchParams({ q, mode: 'fts', limit: '10' });
  for (const [k, v] of Object.entries(params)) qs.set(k, String(v));
  const r = await c.get(`/api/v1/search?${qs.toString()}`);
  expect(r.status, `search ${q} ${qs.toString()}: ${r.text.slice(0, 300)}`).toBe(200);
  const body = r.body as SearchBody;
  expectWholeHits(body.results, `search ${q}`);
  return body;
}

/** A page body of `n` sections (one `##` heading each), each holding `words` in its text. */
function manySections(n: number, words: (i: number) => string, tag = 'entry'): string {
  let out = '';
  for (let i = 0; i < n; i++) out += `## ${tag} ${i}\n\nThis line of ${tag} ${i} holds ${words(i)} and nothing else of note.\n\n`;
  return out;
}

function page(title: string, body: string, fm: Record<string, string> = {}): string {
  const lines = [`title: ${title}`, ...Object.entries(fm).map(([k, v]) => `${k}: ${v}`)];
  return `---\n${lines.join('\n')}\n---\n${body}`;
}

/** Writes pages of `total` sections, at most `per` a page. */
async function writeBulk(
  c: Client,
  prefix: string,
  total: number,
  per: number,
  words: (i: number) => string,
  fm: Record<string, string> = {},
): Promise<string[]> {
  const ids: string[] = [];
  for (let done = 0, k = 0; done < total; k++) {
    const n = Math.min(per, total - done);
    const r = await c.post('/api/v1/nodes', {
      path: `${prefix}-${k}.md`,
      content: page(
        `Bulk ${prefix.split('/').pop()} ${k}`,
        manySections(n, (i) => words(done + i)),
        fm,
      ),
    });
    expect(r.status, r.text.slice(0, 300)).toBe(201);
    ids.push(r.body.id);
    done += n;
  }
  return ids;
}

describe.each(testEngines())('attack h: archived sections among the newest matches (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let admin: Client; // agent with every grant (deletes without step-up)
  let kbAgent: Client; // agent: search on Space kb only
  const budget = budgetOf(engine);

  beforeAll(async () => {
    s = await startTestServer(engine, embeddingsDown(await deadPort()));
    const h = await signupHuman(s.url, 'Arch');
    owner = h.client;
    admin = (
      await createAgentWithKey(
        owner,
        ['read', 'write', 'search', 'admin'].map((action) => ({ action })),
      )
    ).client;
    kbAgent = (await createAgentWithKey(owner, [{ action: 'search', scope: 'kb', ceiling: 'confidential' }])).client;
    // Oldest: 40 notes whose title holds both words (the best matches there are).
    for (let i = 0; i < 40; i++) {
      const r = await owner.post('/api/v1/nodes', {
        path: `kb/notes/n${i}.md`,
        content: page(`Quorv plivet note ${i}`, `A note about quorv and plivet, number ${i}.\n`),
      });
      expect(r.status, r.text).toBe(201);
    }
    // Then an active journal of 30 sections mentioning quorv in passing.
    const j = await owner.post('/api/v1/nodes', {
      path: 'kb/journal.md',
      content: page(
        'Journal',
        manySections(30, () => 'quorv', 'day'),
      ),
    });
    expect(j.status, j.text).toBe(201);
    // Newest: archived pages. Their plivet sections are more than the budget; their quorv
    // sections are 25 fewer than it, so the newest `budget` quorv matches are those and 25 of
    // the journal's.
    await writeBulk(owner, 'old/archive/a', budget + 10, 450, (i) => (i < budget - 25 ? 'quorv plivet' : 'plivet'), {
      state: 'archived',
      archived_reason: 'stale',
    });
  }, 120_000);
  afterAll(async () => s?.stop());

  it('the newest matches all archived: the active notes are still found (the sentinel row dropped, the full ranking run)', async () => {
    const r = await search(owner, 'plivet');
    expect(r.results.length).toBe(10);
    expect(r.results.every((h) => h.path.startsWith('kb/notes/') && h.state === 'active')).toBe(true);
    // With archived pages asked for, the newest `budget` plivet sections are all theirs: those
    // pages come back (the plan ranks recent writing; whole hits, both states allowed).
    const arch = await search(owner, 'plivet', { include_archived: true, limit: 50 });
    expect(arch.results.length).toBeGreaterThan(0);
    expect(arch.results.some((h) => h.state === 'archived')).toBe(true);
  });

  // FINDING (PostgreSQL since e14f85a; SQLite the same by design): for a caller whose reach is
  // one ceiling and a query with no filter, the newest-N cut counts archived sections
  // (matchesCounted "wide"), so archived pages the caller asked to leave out take the places of
  // active ones. Here 975 archived quorv sections and 25 of the journal's fill the 1,000: the 40
  // notes with quorv in their title, which every other way of asking finds, are gone.
  it('archived pages left out of a search do not take the places of active matches: the quorv notes are found', async () => {
    const r = await search(owner, 'quorv');
    const paths = r.results.map((h) => h.path);
    expect(paths.length, JSON.stringify(paths)).toBe(10);
    expect(paths.filter((p) => p.startsWith('kb/notes/')).length, JSON.stringify(paths)).toBe(10);
  });

  // On PostgreSQL these pass (the cut then applies every filter), which shows the wide cut is
  // the cause. On SQLite the first fails too: its newest-N cut never applies a Space filter or
  // the archive rule (only an agent's reach), a limitation older than this change.
  it('the same query with space=kb (which holds every active match) finds the notes', async () => {
    const r = await search(owner, 'quorv', { space: 'kb' });
    const paths = r.results.map((h) => h.path);
    expect(paths.filter((p) => p.startsWith('kb/notes/')).length, JSON.stringify(paths)).toBe(10);
  });

  it('an agent that reaches Space kb alone finds the notes', async () => {
    const r = await search(kbAgent, 'quorv');
    const paths = r.results.map((h) => h.path);
    expect(paths.filter((p) => p.startsWith('kb/notes/')).length, JSON.stringify(paths)).toBe(10);
  });

  it('the bundle for quorv carries the notes too (same keyword list)', async () => {
    const b = await owner.post('/api/v1/bundle', { intent: 'quorv', budget_tokens: 2000 });
    expect(b.status, b.text.slice(0, 300)).toBe(200);
    const paths = [...new Set((b.body.sections as { path: string }[]).map((x) => x.path))];
    expect(
      paths.some((p) => p.startsWith('kb/notes/')),
      JSON.stringify(paths),
    ).toBe(true);
  });

  it('hybrid while embeddings are down: keyword ranking, a note saying so, whole hits', async () => {
    const r = await search(owner, 'plivet', { mode: 'hybrid' });
    expect(r.mode_used).toBe('fts');
    expect(r.note ?? '').toMatch(/unavailable/);
    expect(r.results.length).toBe(10);
  });

  it('once the archived pages are deleted the quorv notes are found (deleted pages have no sections)', async () => {
    // Delete each archived bulk page by path.
    let deleted = 0;
    for (let k = 0; k < 10; k++) {
      const d = await admin.delete(`/api/v1/nodes/${enc(`old/archive/a-${k}.md`)}`);
      if (d.status === 404) break;
      expect(d.status, d.text).toBe(200);
      deleted++;
    }
    expect(deleted).toBeGreaterThan(1);
    const r = await search(owner, 'quorv');
    expect(r.results.filter((h) => h.path.startsWith('kb/notes/')).length).toBe(10);
    const p = await search(owner, 'plivet', { include_archived: true });
    expect(p.results.every((h) => h.path.startsWith('kb/notes/'))).toBe(true);
  });
});

/** What a caller's answer to a query is: ids, order, sections and snippets (scores are ranks in fts). */
const answer = (b: SearchBody) => b.results.map((h) => `${h.path}|${h.id}|${h.state}|${h.section}|${h.snippet.slice(0, 40)}|${h.score}`);

describe.each(testEngines())("attack h: hidden and foreign sections never move a caller's keyword answers (%s)", (engine) => {
  let s: TestServer;
  let owner: Client;
  let viewer: Client; // internal, human
  let editor: Client; // confidential, human
  let other: Client; // owner of another workspace
  let admin: Client;
  let narrow: { client: Client; id: string; key: string; keyId: string }; // search on Space pub only, internal
  let perPath: Client; // search * internal, vault confidential
  let wideInternal: { client: Client; id: string; key: string; keyId: string }; // search * internal
  let wideConf: Client; // search * confidential
  const budget = budgetOf(engine);
  const notes: { id: string; path: string }[] = [];
  const hiddenMarks = ['hushmark', 'Zindle secret', 'conf-in-pub'];

  const callers = () =>
    [
      ['viewer', viewer],
      ['narrow', narrow.client],
      ['perPath', perPath],
      ['wideInternal', wideInternal.client],
    ] as const;
  const queries: [string, Record<string, string | number | boolean>][] = [
    ['zindle', {}],
    ['zindle', { include_archived: true, limit: 30 }],
    ['zindle', { mode: 'hybrid' }],
    ['zindle glorbix', {}],
    ['glorbix', { limit: 20 }],
    ['zindle note', { space: 'pub' }],
    ['zindle', { tags: 'alpha' }],
    ['zindle', { cluster: 'pub/notes', limit: 20 }],
    ['zindle nosuchwordanywhere', {}],
  ];
  const snapshot = async () => {
    const out: Record<string, string[]> = {};
    for (const [who, c] of callers()) for (const [q, params] of queries) out[`${who} ${q} ${JSON.stringify(params)}`] = answer(await search(c, q, params));
    return out;
  };

  beforeAll(async () => {
    s = await startTestServer(engine, embeddingsDown(await deadPort()));
    const h = await signupHuman(s.url, 'Hid');
    owner = h.client;
    viewer = (await joinAs(owner, h.workspace.slug, 'viewer', 'Vic')).client;
    editor = (await joinAs(owner, h.workspace.slug, 'editor', 'Eda')).client;
    other = (await signupHuman(s.url, 'Oth')).client;
    admin = (
      await createAgentWithKey(
        owner,
        ['read', 'write', 'search', 'admin'].map((action) => ({ action })),
      )
    ).client;
    narrow = await createAgentWithKey(owner, [{ action: 'search', scope: 'pub', ceiling: 'internal' }], { ceiling: 'internal' });
    perPath = (
      await createAgentWithKey(owner, [
        { action: 'search', scope: '*', ceiling: 'internal' },
        { action: 'search', scope: 'vault', ceiling: 'confidential' },
      ])
    ).client;
    wideInternal = await createAgentWithKey(
      owner,
      [
        { action: 'search', scope: '*', ceiling: 'internal' },
        { action: 'read', scope: '*', ceiling: 'internal' },
      ],
      { ceiling: 'internal' },
    );
    wideConf = (await createAgentWithKey(owner, [{ action: 'search', scope: '*', ceiling: 'confidential' }])).client;

    // Oldest: 15 internal notes with zindle in the title; the first five also hold glorbix,
    // the only sections where the two words meet. Every third is tagged alpha; one archived.
    for (let i = 0; i < 15; i++) {
      const fm: Record<string, string> = { sensitivity: 'internal', tags: i % 3 === 0 ? '[alpha]' : '[beta]' };
      if (i === 14) Object.assign(fm, { state: 'archived', archived_reason: 'closed' });
      const r = await owner.post('/api/v1/nodes', {
        path: `pub/notes/n${i}.md`,
        content: page(`Zindle note ${i}`, `Zindle field note ${i}${i < 5 ? ', with glorbix' : ''}.\n`, fm),
      });
      expect(r.status, r.text).toBe(201);
      notes.push({ id: r.body.id, path: r.body.path });
    }
    // Confidential pages in vault the per-path agent may read.
    for (let i = 0; i < 3; i++) {
      const r = await owner.post('/api/v1/nodes', {
        path: `vault/c${i}.md`,
        content: page(`Vault zindle ${i}`, `Zindle in the vault ${i}.\n`, { sensitivity: 'confidential' }),
      });
      expect(r.status, r.text).toBe(201);
    }
    // Then more visible zindle sections than the budget, then more glorbix ones: both words
    // are frequent, so every caller's plan ranks the newest matches through windows.
    await writeBulk(owner, 'pub/fill/z', budget + 100, 500, () => 'zindle', { sensitivity: 'internal' });
    await writeBulk(owner, 'pub/fill/g', budget + 100, 500, () => 'glorbix', { sensitivity: 'internal' });
  }, 120_000);
  afterAll(async () => s?.stop());

  it('the words meet only in the oldest sections: a query of both still finds those notes first', async () => {
    for (const [who, c] of [...callers(), ['owner', owner] as const]) {
      const r = await search(c, 'zindle glorbix', { limit: 20 });
      expect(
        r.results
          .slice(0, 5)
          .map((h) => h.path)
          .sort(),
        who,
      ).toEqual(
        notes
          .slice(0, 5)
          .map((n) => n.path)
          .sort(),
      );
    }
  });

  it("newer secret pages, secret blocks, confidential pages in pub and another workspace's writing change nothing a lower caller sees", async () => {
    const before = await snapshot();
    // Above every lower caller: secret pages with the words in title and text (stronger than
    // anything visible), newer than all of it and more than the budget.
    await writeBulk(owner, 'pub/hidden/s', budget + 200, 500, () => 'zindle zindle glorbix hushmark', { sensitivity: 'secret', tags: '[alpha]' });
    const bodyWithBlocks = `Open text.\n\n::: secret\n${manySections(300, () => 'zindle glorbix hushmark', 'hidden')}:::\n\nAfter the block.\n`;
    for (const sp of ['pub', 'vault']) {
      const r = await owner.post('/api/v1/nodes', {
        path: `${sp}/blocks/b.md`,
        content: page('Plain page', bodyWithBlocks, { sensitivity: 'internal', tags: '[alpha]' }),
      });
      expect(r.status, r.text).toBe(201);
    }
    // Confidential pages in pub: above the viewer, the narrow agent and the per-path agent there.
    await writeBulk(owner, 'pub/conf/c', 300, 300, () => 'zindle glorbix conf-in-pub', { sensitivity: 'confidential' });
    // Archived secret pages too.
    await writeBulk(owner, 'pub/hidden/as', 200, 200, () => 'zindle hushmark', { sensitivity: 'secret', state: 'archived', archived_reason: 'stale' });
    // Another workspace writes the same words, many times.
    await writeBulk(other, 'pub/fill/x', budget + 100, 500, () => 'zindle glorbix');
    const after = await snapshot();
    for (const k of Object.keys(before)) expect(after[k], k).toEqual(before[k]);
    for (const [k, v] of Object.entries(after)) for (const m of hiddenMarks) expect(v.join('\n'), k).not.toContain(m);
  });

  it('callers who may see some of it never see more: no secret page or block, no confidential page in pub for the per-path agent', async () => {
    for (const [who, c] of [
      ['editor', editor],
      ['wideConf', wideConf],
      ['perPath', perPath],
    ] as const) {
      for (const [q, params] of queries) {
        const r = await search(c, q, { ...params, limit: 50 });
        for (const h of r.results) {
          expect(h.path.startsWith('pub/hidden/'), `${who} ${q}: ${h.path}`).toBe(false);
          expect(h.snippet, `${who} ${q}: ${h.path}`).not.toContain('hushmark');
          if (who === 'perPath') expect(h.path.startsWith('pub/conf/'), `${who} ${q}: ${h.path}`).toBe(false);
        }
      }
    }
  });

  it('hostile queries: never a 500, never a row of nulls, never hidden text', async () => {
    const long = 'zindle '.repeat(400);
    const many = Array.from({ length: 40 }, (_, i) => `w${i}x`).join(' ') + ' zindle';
    const hostile = [
      '"zindle" OR 1=1 --',
      "zindle' ; drop table pages; --",
      'zindle AND NOT glorbix',
      'zindle*',
      '^zindle',
      'NEAR(zindle glorbix, 2)',
      'zindle:* & !glorbix | (x <-> y)',
      '!!! ::: ***',
      'ZÏNDLE',
      'z\u0301indle',
      'ｚｉｎｄｌｅ',
      '東京タワー zindle',
      '🦄 zindle 🦄',
      'the of and a',
      'a',
      'the zindle',
      '\u0301\u0302',
      '\u202ezindle\u202c',
      'zindle\u0000glorbix',
      long,
      many,
      `${'x'.repeat(300)} zindle`,
      '12345 0x1f 3.14 zindle',
      'hushmark',
      'hushmark zindle',
    ];
    for (const [who, c] of [...callers(), ['owner', owner] as const]) {
      for (const q of hostile) {
        for (const mode of ['fts', 'hybrid']) {
          const r = await c.get(`/api/v1/search?q=${enc(q)}&mode=${mode}&limit=20`);
          expect([200, 400], `${who} ${mode} ${JSON.stringify(q.slice(0, 40))}: ${r.status} ${r.text.slice(0, 200)}`).toContain(r.status);
          if (r.status !== 200) continue;
          expectWholeHits(r.body.results, `${who} ${q.slice(0, 30)}`);
          if (who !== 'owner')
            for (const hit of r.body.results as Hit[]) expect(`${hit.path} ${hit.snippet}`, `${who} ${q.slice(0, 30)}`).not.toMatch(/hushmark|pub\/hidden/);
        }
      }
    }
    // The bundle too.
    for (const q of hostile) {
      const b = await wideInternal.client.post('/api/v1/bundle', { intent: q, budget_tokens: 1000 });
      expect([200, 400], `bundle ${JSON.stringify(q.slice(0, 40))}: ${b.status} ${b.text.slice(0, 200)}`).toContain(b.status);
      // The first line echoes the intent; nothing after it may hold hidden text.
      if (b.status === 200) expect((b.body.markdown as string).split('\n').slice(1).join('\n')).not.toMatch(/hushmark/);
    }
  });

  it('a deleted note is gone from every answer at once', async () => {
    const gone = notes[1]!;
    const d = await admin.delete(`/api/v1/nodes/${gone.id}`);
    expect(d.status, d.text).toBe(200);
    for (const [who, c] of [...callers(), ['owner', owner] as const]) {
      for (const q of ['zindle glorbix', 'zindle note', 'zindle']) {
        const r = await search(c, q, { limit: 50, include_archived: true });
        expect(
          r.results.map((h) => h.id),
          `${who} ${q}`,
        ).not.toContain(gone.id);
      }
    }
  });

  it("a page whose level or Space changes is in or out of a lower caller's windowed answer at once", async () => {
    const hasFlip = async (c: Client, q: string) => (await search(c, q, { limit: 50 })).results.some((h) => h.title === 'Zindle flipside');
    const w = await owner.post('/api/v1/nodes', { path: 'pub/flip.md', content: page('Zindle flipside', 'Zindle flip text.\n', { sensitivity: 'secret' }) });
    expect(w.status, w.text).toBe(201);
    const id = w.body.id as string;
    const put = async (content: string) => {
      const r = await owner.put(`/api/v1/nodes/${id}`, { content });
      expect(r.status, r.text).toBe(200);
    };
    for (const [who, c] of callers()) expect(await hasFlip(c, 'zindle'), `${who}, secret`).toBe(false);
    await put(page('Zindle flipside', 'Zindle flip text.\n', { sensitivity: 'internal' }));
    for (const [who, c] of callers()) expect(await hasFlip(c, 'zindle'), `${who}, internal`).toBe(true);
    // The only zindle of the page inside a secret block: the title still matches, the block's text never shows.
    await put(page('Zindle flipside', 'Open words.\n\n::: secret\n## Inside\n\nzindle flipsecret\n:::\n', { sensitivity: 'internal' }));
    for (const [who, c] of callers()) {
      const r = await search(c, 'flipsecret', { limit: 50 });
      expect(
        r.results.map((h) => h.path),
        who,
      ).toEqual([]);
      const z = await search(c, 'zindle', { limit: 50 });
      for (const h of z.results) expect(h.snippet, who).not.toContain('flipsecret');
    }
    await put(page('Zindle flipside', 'Zindle flip text.\n', { sensitivity: 'confidential' }));
    for (const [who, c] of callers()) expect(await hasFlip(c, 'zindle'), `${who}, confidential`).toBe(false);
    expect(await hasFlip(editor, 'zindle'), 'editor, confidential').toBe(true);
    // Moved out of Space pub at internal: the agent that reaches pub alone loses it.
    await put(page('Zindle flipside', 'Zindle flip text.\n', { sensitivity: 'internal' }));
    expect(await hasFlip(narrow.client, 'zindle')).toBe(true);
    const mv = await owner.post(`/api/v1/nodes/${id}/move`, { to: 'vault/flip.md' });
    expect(mv.status, mv.text).toBe(200);
    expect(await hasFlip(narrow.client, 'zindle')).toBe(false);
    expect(await hasFlip(viewer, 'zindle')).toBe(true);
  });

  it('MCP search tools answer the same way: no hidden page, no error', async () => {
    const m = await connectMcp(s.url, wideInternal.key);
    try {
      for (const [name, args] of [
        ['context_search', { query: 'zindle', limit: 50 }],
        ['context_search', { query: 'zindle glorbix hushmark', include_archived: true }],
        ['context_search', { query: 'the of and' }],
        ['search', { query: 'zindle' }],
        ['search', { query: 'hushmark' }],
        ['context_bundle', { intent: 'zindle glorbix', budget_tokens: 2000 }],
      ] as const) {
        const r = await call(m, name, args);
        expect(r.isError, `${name} ${JSON.stringify(args)}: ${r.text.slice(0, 200)}`).toBe(false);
        const text = name === 'context_bundle' ? r.text.split('\n').slice(1).join('\n') : r.text;
        expect(text, `${name} ${JSON.stringify(args)}`).not.toMatch(/hushmark|pub\/hidden|conf-in-pub/);
        expect(text).not.toMatch(/"(?:id|path|title)":null/);
      }
    } finally {
      await m.close();
    }
  });

  it('a revoked key answers 401 on the next search and bundle', async () => {
    expect((await wideInternal.client.get('/api/v1/search?q=zindle&mode=fts')).status).toBe(200);
    const del = await owner.delete(`/api/v1/principals/${wideInternal.id}/tokens/${wideInternal.keyId}`);
    expect([200, 204], del.text).toContain(del.status);
    expect((await wideInternal.client.get('/api/v1/search?q=zindle&mode=fts')).status).toBe(401);
    expect((await wideInternal.client.post('/api/v1/bundle', { intent: 'zindle', budget_tokens: 500 })).status).toBe(401);
    const mcp = await fetch(`${s.url}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${wideInternal.key}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'context_search', arguments: { query: 'zindle' } } }),
    });
    expect(mcp.status).toBe(401);
  });
});

describe.each(testEngines())('attack h: pages rewritten, moved, archived while searches run (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let agent: Client;
  const budget = budgetOf(engine);

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url, 'Con')).client;
    agent = (
      await createAgentWithKey(
        owner,
        ['read', 'write', 'search', 'admin'].map((action) => ({ action })),
      )
    ).client;
    // More kesmo sections than the budget: a kesmo query ranks the newest through windows.
    await writeBulk(owner, 'live/fill/k', budget + 100, 500, () => 'kesmo');
  }, 120_000);
  afterAll(async () => s?.stop());

  const fluxContent = (v: number) =>
    page(
      `Kesmo flux v${v}`,
      `Intro fluxver${v} kesmo.\n\n## One\n\nkesmo fluxver${v} one.\n\n## Two\n\nkesmo fluxver${v} two.\n\n## Three\n\nkesmo fluxver${v} three.\n`,
    );

  it('each answer sees a page whole (title, section and snippet of one version), present in every answer, never a 500', async () => {
    const f = await agent.post('/api/v1/nodes', { path: 'live/flux-a.md', content: fluxContent(0) });
    expect(f.status, f.text).toBe(201);
    const fluxId = f.body.id as string;
    const e = await agent.post('/api/v1/nodes', { path: 'live/ebb.md', content: page('Ebb page', 'The ebbword tide, kesmo.\n') });
    expect(e.status, e.text).toBe(201);
    const ebbId = e.body.id as string;
    let stop = false;
    const problems: string[] = [];
    let bundles = 0;
    let fluxInBundles = 0;
    let writes = 0;
    const writer = (async () => {
      for (let v = 1; !stop && v < 400; v++) {
        writes++;
        const put = await agent.put(`/api/v1/nodes/${fluxId}`, { content: fluxContent(v) });
        if (put.status !== 200) problems.push(`put ${put.status} ${put.text.slice(0, 120)}`);
        const mv = await agent.post(`/api/v1/nodes/${fluxId}/move`, { to: v % 2 ? 'live/flux-b.md' : 'live/flux-a.md' });
        if (mv.status !== 200) problems.push(`move ${mv.status} ${mv.text.slice(0, 120)}`);
      }
    })();
    const archiver = (async () => {
      for (let i = 0; !stop && i < 400; i++) {
        const a = await agent.post(`/api/v1/nodes/${ebbId}/archive`, { reason: 'manual' });
        if (a.status !== 200) problems.push(`archive ${a.status} ${a.text.slice(0, 120)}`);
        const r = await agent.post(`/api/v1/nodes/${ebbId}/restore`, {});
        if (r.status !== 200) problems.push(`restore ${r.status} ${r.text.slice(0, 120)}`);
      }
    })();
    // Pages made and deleted meanwhile (a deleted page's sections go in its delete's transaction).
    const churn = (async () => {
      for (let i = 0; !stop && i < 400; i++) {
        const c = await agent.post('/api/v1/nodes', {
          path: `live/gone-${i}.md`,
          content: page(
            'Kesmo gone',
            manySections(20, () => 'kesmo goneword'),
          ),
        });
        if (c.status !== 201) {
          problems.push(`create ${c.status} ${c.text.slice(0, 120)}`);
          continue;
        }
        const d = await agent.delete(`/api/v1/nodes/${c.body.id}`);
        if (d.status !== 200) problems.push(`delete ${d.status} ${d.text.slice(0, 120)}`);
      }
    })();
    let searches = 0;
    const reader = async (mode: string) => {
      while (!stop) {
        const r = await agent.get(`/api/v1/search?q=kesmo&mode=${mode}&limit=10`);
        searches++;
        if (r.status !== 200) {
          problems.push(`search ${mode} ${r.status} ${r.text.slice(0, 160)}`);
          continue;
        }
        expectWholeHits(r.body.results, `search ${mode}`);
        const hit = (r.body.results as Hit[]).find((h) => h.id === fluxId);
        if (!hit) {
          problems.push(`${mode}: flux missing from ${JSON.stringify((r.body.results as Hit[]).map((h) => h.path))}`);
          continue;
        }
        const v = /v(\d+)$/.exec(hit.title)?.[1];
        if (!hit.snippet.includes(`fluxver${v}`)) problems.push(`${mode}: title ${hit.title} with snippet ${hit.snippet}`);
        for (const h of r.body.results as Hit[]) if (h.state !== 'active') problems.push(`${mode}: ${h.path} ${h.state} in an active-only search`);
        const ebb = await agent.get(`/api/v1/search?q=ebbword&mode=${mode}&include_archived=true`);
        if (ebb.status !== 200 || !(ebb.body.results as Hit[]).some((h) => h.id === ebbId))
          problems.push(`ebb with archived: ${ebb.status} ${ebb.text.slice(0, 160)}`);
        const act = await agent.get(`/api/v1/search?q=ebbword&mode=${mode}`);
        if (act.status !== 200) problems.push(`ebb ${act.status}`);
        else for (const h of act.body.results as Hit[]) if (h.state !== 'active') problems.push(`ebb archived in an active-only search`);
      }
    };
    const bundler = async () => {
      while (!stop) {
        const b = await agent.post('/api/v1/bundle', { intent: 'kesmo', budget_tokens: 3000 });
        if (b.status !== 200) {
          problems.push(`bundle ${b.status} ${b.text.slice(0, 160)}`);
          continue;
        }
        const mine = (b.body.sections as { id: string; commit_sha: string; title: string; text: string }[]).filter((x) => x.id === fluxId);
        bundles++;
        if (mine.length > 0) fluxInBundles++;
        const shas = new Set(mine.map((x) => x.commit_sha));
        if (shas.size > 1) problems.push(`bundle: flux sections of ${shas.size} versions: ${mine.map((x) => x.title).join(', ')}`);
        for (const x of mine) {
          const v = /v(\d+)$/.exec(x.title)?.[1];
          const seen = [...x.text.matchAll(/fluxver(\d+)/g)].map((m) => m[1]);
          if (seen.some((n) => n !== v)) problems.push(`bundle: title ${x.title} with text ${x.text.slice(0, 80)}`);
        }
      }
    };
    const readers = Promise.all([reader('fts'), reader('hybrid'), bundler()]);
    await sleep(6000);
    stop = true;
    await Promise.all([writer, archiver, churn, readers]);
    expect(searches).toBeGreaterThan(10);
    expect(writes).toBeGreaterThan(5);
    expect(fluxInBundles).toBeGreaterThan(0);
    expect(bundles).toBeGreaterThan(5);
    expect(problems.slice(0, 10)).toEqual([]);
  }, 60_000);
});

/** Imports `pages` pages of `per` sections each into `space` (one request: the import's batch indexing). */
async function importBulk(c: Client, space: string, dir: string, pages: number, per: number, words: string, fm: Record<string, string> = {}): Promise<void> {
  const files = Array.from({ length: pages }, (_, k) => ({
    path: `${dir}/p${k}.md`,
    content: page(
      `Imported ${dir} ${k}`,
      manySections(per, () => words),
      fm,
    ),
  }));
  const r = await postJson(c, space, files);
  expect([200, 202], r.text.slice(0, 300)).toContain(r.status);
  const job = await finished(c, r.body);
  expect(job.status, JSON.stringify(job).slice(0, 300)).toBe('done');
  expect(job.created).toBe(pages);
}

describe.each(testEngines())('attack h: every word common, the newest matches unranked (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let viewer: Client;
  let other: Client;
  let narrow: Client; // search on Space big only, internal
  let perPath: Client; // search * internal, big/deep confidential
  const callers = () =>
    [
      ['viewer', viewer],
      ['narrow', narrow],
      ['perPath', perPath],
    ] as const;
  const queries: [string, Record<string, string | number | boolean>][] = [
    ['vorpal', {}],
    ['vorpal', { limit: 30 }],
    ['vorpal', { mode: 'hybrid' }],
    ['vorpal', { space: 'big' }],
    ['the vorpal', {}],
  ];
  const snapshot = async (list: readonly (readonly [string, Client])[] = callers()) => {
    const out: Record<string, string[]> = {};
    for (const [who, c] of list) for (const [q, params] of queries) out[`${who} ${q} ${JSON.stringify(params)}`] = answer(await search(c, q, params));
    return out;
  };

  beforeAll(async () => {
    s = await startTestServer(engine, embeddingsDown(await deadPort()));
    const h = await signupHuman(s.url, 'Com');
    owner = h.client;
    viewer = (await joinAs(owner, h.workspace.slug, 'viewer', 'Vio')).client;
    other = (await signupHuman(s.url, 'Far')).client;
    narrow = (await createAgentWithKey(owner, [{ action: 'search', scope: 'big', ceiling: 'internal' }], { ceiling: 'internal' })).client;
    perPath = (
      await createAgentWithKey(owner, [
        { action: 'search', scope: '*', ceiling: 'internal' },
        { action: 'search', scope: 'big/deep', ceiling: 'confidential' },
      ])
    ).client;
    // More vorpal sections than COMMON_DOCS (20,000): the word is common for every caller.
    await importBulk(owner, 'big', 'bulk', 41, 500, 'vorpal', { sensitivity: 'internal' });
    const log = await owner.post('/api/v1/nodes', {
      path: 'big/log.md',
      content: page(
        'Log',
        manySections(30, () => 'vorpal', 'day'),
        { sensitivity: 'internal' },
      ),
    });
    expect(log.status, log.text).toBe(201);
  }, 120_000);
  afterAll(async () => s?.stop());

  it('the answer is the newest matching pages, whole hits', async () => {
    const r = await search(viewer, 'vorpal');
    expect(r.results[0]!.path).toBe('big/log.md');
    expect(r.results.length).toBeGreaterThan(1);
  });

  it("newer secret and confidential pages and another workspace's 20,500 sections change nothing a lower caller sees", async () => {
    const before = await snapshot();
    await writeBulk(owner, 'big/hid/s', 300, 300, () => 'vorpal hushmark', { sensitivity: 'secret' });
    await writeBulk(owner, 'big/deep/c', 300, 300, () => 'vorpal hushmark', { sensitivity: 'secret' });
    await writeBulk(owner, 'big/conf/c', 300, 300, () => 'vorpal confmark', { sensitivity: 'confidential' });
    await owner.post('/api/v1/nodes', {
      path: 'big/blk.md',
      content: page('Blocky', `::: confidential\n${manySections(250, () => 'vorpal confmark')}:::\n`, { sensitivity: 'internal' }),
    });
    await importBulk(other, 'big', 'bulk', 41, 500, 'vorpal');
    const after = await snapshot();
    for (const k of Object.keys(before)) expect(after[k], k).toEqual(before[k]);
    for (const [k, v] of Object.entries(after)) expect(v.join('\n'), k).not.toMatch(/hushmark|confmark/);
  });

  // FINDING (PostgreSQL since e14f85a; SQLite the same by design): archived pages newer than
  // the active matches fill the unranked newest-N cut of a caller whose reach is one ceiling:
  // the newest active bulk page that answered before is gone (the callers with a narrow
  // reach, whose cut applies every filter, are unchanged).
  it('newer archived pages change nothing in an active-only answer', async () => {
    const before = await snapshot([...callers(), ['owner', owner] as const]);
    await writeBulk(owner, 'big/old/a', 175, 175, () => 'vorpal', { sensitivity: 'internal', state: 'archived', archived_reason: 'stale' });
    const after = await snapshot([...callers(), ['owner', owner] as const]);
    const pathsOf = (a: string[] | undefined) => (a ?? []).map((x) => x.split('|')[0]).join(', ');
    const changed = Object.keys(before)
      .filter((k) => JSON.stringify(after[k]) !== JSON.stringify(before[k]))
      .map((k) => `${k}: [${pathsOf(before[k])}] became [${pathsOf(after[k])}]`);
    expect(changed).toEqual([]);
  });
});
