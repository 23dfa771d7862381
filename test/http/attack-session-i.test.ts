import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SearchHit, SearchResult } from '../../src/retrieval/search.js';
import { testEngines } from '../support/engines.js';
import { expectStatus } from '../support/expect.js';
import { call, connectMcp } from '../mcp/support.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';

/**
 * Attack session i, on 05b3eed and 5ea2607: migration 022 (the keyword index reads text as
 * queries do: NFKC, ASCII punctuation as spaces, a tsvector past 1 MB indexed by the part that
 * fits), any-word words kept by SCORE_BUDGET on both engines, FTS5's idf from term_stats, and
 * PostgreSQL's one-statement keyword round (m → f → top → joined). Real servers, real HTTP.
 *
 * FINDING (PostgreSQL only; older than these commits, migrations 004/006): a page whose title
 * or tags hold about 3,000 bytes or more of ordinary, little-compressible text is refused with
 * a 500 (`internal_error`): the title and tags are columns of the btree index
 * pages_retrieval_filter (and the title a key of page_keys_pk), whose rows may not pass 2,704
 * bytes. SQLite writes the same page (201). The same text as a `##` heading is written on both.
 *
 * FINDING (SQLite): a word touching an emoji newer than FTS5 unicode61's Unicode tables
 * (`🦄unicornword🦄`) is one token there, so `unicornword` never finds it; PostgreSQL does.
 * FINDING (PostgreSQL): a letter with a combining mark that has no precomposed form
 * (`q\u0301uuxword`) keeps its mark in the index, so `quuxword` finds it on SQLite only.
 *
 * Held: see the passing tests (hostile text written and found on both engines, compound forms
 * found by their parts alike, no hidden page, block, path or archived page in any answer or
 * moving a lower caller's ids, order or scores, no crowding out, MCP, writes racing searches).
 */

const enc = encodeURIComponent;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const md5 = (s: string) => createHash('md5').update(s).digest('hex');

function expectWholeHits(hits: SearchHit[], what: string): void {
  for (const h of hits) {
    for (const k of ['id', 'path', 'title', 'space', 'cluster_path', 'state', 'section', 'snippet'] as const) {
      expect(typeof h[k], `${what}: ${k} of ${JSON.stringify(h).slice(0, 200)}`).toBe('string');
    }
    expect(Number.isFinite(h.score), `${what}: score ${h.score}`).toBe(true);
  }
}

async function search(c: Client, q: string, params: Record<string, string | number | boolean> = {}): Promise<SearchResult> {
  const qs = new URLSearchParams({ q, mode: 'fts', limit: '10' });
  for (const [k, v] of Object.entries(params)) qs.set(k, String(v));
  const r = await c.get(`/api/v1/search?${qs.toString()}`);
  expect(r.status, `search ${q.slice(0, 60)} ${qs.toString().slice(0, 200)}: ${r.text.slice(0, 300)}`).toBe(200);
  const body = r.body as SearchResult;
  expectWholeHits(body.results, `search ${q.slice(0, 40)}`);
  return body;
}
const paths = async (c: Client, q: string, params: Record<string, string | number | boolean> = {}) =>
  (await search(c, q, { limit: 50, ...params })).results.map((h) => h.path).sort();

function page(title: string, body: string, fm: Record<string, string> = {}): string {
  const lines = [`title: ${title}`, ...Object.entries(fm).map(([k, v]) => `${k}: ${v}`)];
  return `---\n${lines.join('\n')}\n---\n${body}`;
}

function manySections(n: number, words: (i: number) => string, tag = 'entry'): string {
  let out = '';
  for (let i = 0; i < n; i++) out += `## ${tag} ${i}\n\nThis line of ${tag} ${i} holds ${words(i)} and nothing else of note.\n\n`;
  return out;
}

/** Hostile bodies: [path, content, words a user would search it by]. */
const HOSTILE: [string, string, string[]][] = [
  [
    'h/punct.md',
    page('Punctpage', '!!! ??? ... --- /// <<< >>> @@@ ### $$$ %%% ^^^ &&& *** ((( ))) [[[ ]]] {{{ }}} ||| ~~~ ;;; ,,, \'\'\' """\n'),
    ['punctpage'],
  ],
  ['h/marks.md', page('Marksonly', '\u0301\u0302\u0303 \u0308\u0308\u0308 \u20DD\u20DE \u0301\n'), ['marksonly']],
  ['h/fdfa.md', page('Expander', `${'\uFDFA'.repeat(20_000)}\n\n${'\uFDFA '.repeat(20_000)}\n`), ['expander', 'عليه']],
  [
    'h/liga.md',
    page('Ligature page', 'The ﬁnchword ﬂowword ﬀoo and ＦＵＬＬＷＩＤＥ ｗｏｒｄｚ, x² ⁿ ㎏ ①.\n'),
    ['finchword', 'flowword', 'fullwide', 'wordz', 'ﬁnchword'],
  ],
  ['h/rtl.md', page('Rtlpage', 'שלום עולם\u200F مرحبا بالعالم \u202Eevilrtl\u202C قرآن\n'), ['שלום', 'مرحبا', 'evilrtl']],
  ['h/emoji.md', page('Emojipage', '👩‍👩‍👧‍👦familyword 🏳️‍🌈 x😀y 😀smileword\n'), ['familyword', 'smileword']],
  [
    'h/ctl.md',
    page('Ctlpage', 'ctlword\u0001bellword\u0007esc\u001b[31m redword\u001b[0m\u000btab\u000cff\u007fdel zero\u200Bwidthword nb\u00A0spaceword\n'),
    ['ctlword', 'bellword', 'redword', 'widthword', 'spaceword'],
  ],
  [
    'h/dash.md',
    page('Dashpage', 'alphaword—betaword gammaword…deltaword «quuxword» it’s x·yword a‐bword\n'),
    ['alphaword', 'betaword', 'deltaword', 'quuxword', 'yword', 'bword'],
  ],
  ['h/cjk.md', page('Cjkpage', '東京タワー 北京 ソウル\n'), ['東京タワー', '北京']],
];

describe.each(testEngines())('attack i: hostile text on the new index path (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let agent: { client: Client; key: string };

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url, 'Hos')).client;
    agent = await createAgentWithKey(owner, [
      { action: 'search', scope: '*', ceiling: 'internal' },
      { action: 'read', scope: '*', ceiling: 'internal' },
    ]);
  }, 60_000);
  afterAll(async () => s?.stop());

  it('each hostile page is written (201) and found by its words; its own text as a query never 500s', async () => {
    for (const [path, content] of HOSTILE) {
      const r = await owner.post('/api/v1/nodes', { path, content });
      expect(r.status, `${path}: ${r.text.slice(0, 300)}`).toBe(201);
    }
    for (const [path, content, words] of HOSTILE) {
      for (const w of words) expect(await paths(owner, w), `${path} by ${w}`).toContain(path);
      for (const q of [content.slice(0, 300), content.slice(-300), content.replace(/\s+/g, '')]) {
        for (const mode of ['fts', 'hybrid']) {
          const r = await owner.get(`/api/v1/search?q=${enc(q.slice(0, 1500))}&mode=${mode}&limit=20`);
          expect([200, 400], `${path} ${mode}: ${r.status} ${r.text.slice(0, 200)}`).toContain(r.status);
        }
        const b = await owner.post('/api/v1/bundle', { intent: q.slice(0, 1500), budget_tokens: 800 });
        expect([200, 400], `bundle ${path}: ${b.status} ${b.text.slice(0, 200)}`).toContain(b.status);
      }
    }
  }, 120_000);

  it('a 1 MiB page of distinct hashes and a section of 28,000 hashes under a ~1 MB heading: written, found by their first words', async () => {
    const words = Array.from({ length: 31_500 }, (_, i) => md5(`i-${i}`));
    const content = `# Hashlist\n\n${words.join(' ')}\n`;
    expect(Buffer.byteLength(content)).toBeLessThan(1024 * 1024);
    const r = await owner.post('/api/v1/nodes', { path: 'big/hashes.md', content });
    expectStatus(r, 201);
    expect(await paths(owner, words[0]!)).toEqual(['big/hashes.md']);
    expect(await paths(owner, `hashlist ${words[1]!}`)).toEqual(['big/hashes.md']);
    const hw = Array.from({ length: 28_000 }, (_, i) => md5(`h-${i}`));
    const h = await owner.post('/api/v1/nodes', { path: 'big/heading.md', content: `# Headpage\n\n## ${hw.join(' ')}\n\nUnder the heading.\n` });
    expectStatus(h, 201);
    expect(await paths(owner, hw[0]!)).toEqual(['big/heading.md']);
    expect(await paths(owner, 'headpage')).toEqual(['big/heading.md']);
    // A rewrite between the two sizes keeps its words findable.
    const id = (r.body as { id: string }).id;
    expectStatus(await owner.put(`/api/v1/nodes/${id}`, { content: `# Hashlist\n\nOnly ${words[31_499]!} now.\n` }), 200);
    expect(await paths(owner, words[31_499]!)).toEqual(['big/hashes.md']);
    expect(await paths(owner, words[0]!)).toEqual([]);
    // Querying with hash text never 500s.
    const q = await owner.get(`/api/v1/search?q=${enc(words.slice(0, 200).join(' '))}&mode=hybrid`);
    expect([200, 400]).toContain(q.status);
  }, 120_000);

  // FINDING (PostgreSQL): a title or tags of ~3,000 bytes of little-compressible text is a 500
  // (btree rows of pages_retrieval_filter / page_keys_pk may not pass 2,704 bytes); SQLite 201.
  it('a long title or long tags: written (or a clean 4xx), never a 500; the page found by its title words', async () => {
    const title = Array.from({ length: 500 }, (_, i) => `${randomBytes(6).toString('base64url').replace(/[-_]/g, 'x')}${i}`).join(' ');
    expect(title.length).toBeGreaterThan(3000);
    const problems: string[] = [];
    for (const [k, content] of [
      ['fm', page(title, 'Body of the long title.\n')],
      ['h1', `# ${title}\n\nBody.\n`],
      ['tags', `---\ntitle: Tagpage\ntags: [${title.split(' ').join(', ')}]\n---\nBody.\n`],
    ] as const) {
      const r = await owner.post('/api/v1/nodes', { path: `long/${k}.md`, content });
      if (r.status >= 500) problems.push(`${k}: ${r.status} ${r.text.slice(0, 120)}`);
      else if (r.status === 201 && k !== 'tags') {
        const first = title.split(' ')[0]!;
        if (!(await paths(owner, first)).includes(`long/${k}.md`)) problems.push(`${k}: not found by ${first}`);
      }
    }
    expect(problems).toEqual([]);
  }, 60_000);

  // FINDING (SQLite; FTS5's unicode61 tokenizer, older than these commits): an emoji newer than
  // the tokenizer's Unicode tables (🦄 U+1F984, Unicode 8) is read as a letter, so
  // `🦄unicornword🦄` is one token and `unicornword` (the query's only word: queryTerms drops the
  // emoji) finds nothing; PostgreSQL finds the page. Also (PostgreSQL; cv_fold folds precomposed
  // letters only): `q\u0301uux` (a mark with no precomposed letter) is indexed with its mark,
  // so `quux` finds nothing there while SQLite (remove_diacritics 2) finds it.
  it('a word next to a recent emoji, or with a combining mark on a letter, is found by the plain word on both engines', async () => {
    expectStatus(await owner.post('/api/v1/nodes', { path: 'h/unicorn.md', content: page('Unicorn', 'A 🦄unicornword🦄 here.\n') }), 201);
    expectStatus(await owner.post('/api/v1/nodes', { path: 'h/qmark.md', content: page('Qmark', 'The q\u0301uuxword is marked.\n') }), 201);
    const missing: string[] = [];
    for (const [q, want] of [
      ['unicornword', 'h/unicorn.md'],
      ['🦄unicornword🦄', 'h/unicorn.md'],
      ['quuxword', 'h/qmark.md'],
      ['q\u0301uuxword', 'h/qmark.md'],
    ] as const)
      if (!(await paths(owner, q)).includes(want)) missing.push(`${q} → ${want}`);
    expect(missing).toEqual([]);
  }, 60_000);

  it('MCP search and bundle tools with hostile input: no error', async () => {
    const m = await connectMcp(s.url, agent.key);
    try {
      for (const [, content] of HOSTILE) {
        for (const [name, args] of [
          ['context_search', { query: content.slice(0, 500) }],
          ['search', { query: content.slice(0, 500) }],
          ['context_bundle', { intent: content.slice(0, 500), budget_tokens: 800 }],
        ] as const) {
          const r = await call(m, name, args);
          expect(r.isError && !/invalid|empty/i.test(r.text), `${name}: ${r.text.slice(0, 200)}`).toBe(false);
        }
      }
    } finally {
      await m.close();
    }
  }, 60_000);
});

describe.each(testEngines())('attack i: compound forms found by their parts (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  const pages: [string, string][] = [
    ['c/passwd.md', 'Edit /etc/qpasswdz to add the user.'],
    ['c/dotted.md', 'Version qalpha.qbeta.qgamma of the tool.'],
    ['c/mail.md', 'Write to qmailer@qhostname.example for help.'],
    ['c/tag.md', 'Wrap it in <qtagword> and &qentity; please.'],
    ['c/cpp.md', 'Written in Cqq++ and Qsharp# mostly.'],
    ['c/node.md', 'Runs on qnode.js and qdeno.land today.'],
    ['c/flag.md', 'Pass --qflagword=3 or -qshort to it.'],
    ['c/url.md', 'See https://qsite.example/qpathseg/x?qparam=1#qfrag for more.'],
    ['c/snake.md', 'Call qsnake_qcase() from qcamel::qpath.'],
  ];
  const expectations: [string, string[]][] = [
    ['/etc/qpasswdz', ['c/passwd.md']],
    ['qpasswdz', ['c/passwd.md']],
    ['qalpha.qbeta.qgamma', ['c/dotted.md']],
    ['qbeta', ['c/dotted.md']],
    ['qmailer@qhostname.example', ['c/mail.md']],
    ['qhostname', ['c/mail.md']],
    ['<qtagword>', ['c/tag.md']],
    ['qtagword', ['c/tag.md']],
    ['qentity', ['c/tag.md']],
    ['Cqq++', ['c/cpp.md']],
    ['qsharp', ['c/cpp.md']],
    ['qnode.js', ['c/node.md']],
    ['qnode', ['c/node.md']],
    ['qdeno', ['c/node.md']],
    ['--qflagword', ['c/flag.md']],
    ['qflagword', ['c/flag.md']],
    ['qshort', ['c/flag.md']],
    ['https://qsite.example/qpathseg', ['c/url.md']],
    ['qpathseg', ['c/url.md']],
    ['qparam', ['c/url.md']],
    ['qfrag', ['c/url.md']],
    ['qsnake_qcase', ['c/snake.md']],
    ['qcase', ['c/snake.md']],
    ['qcamel::qpath', ['c/snake.md']],
  ];

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url, 'Cmp')).client;
    for (const [path, text] of pages) expectStatus(await owner.post('/api/v1/nodes', { path, content: page(`Page ${path}`, `${text}\n`) }), 201);
  }, 60_000);
  afterAll(async () => s?.stop());

  it('each compound and each of its parts finds the page that wrote it (the same on both engines)', async () => {
    const wrong: string[] = [];
    for (const [q, want] of expectations) {
      // Several words rank any word (issue 20): the page that wrote them all comes first.
      const got = (await search(owner, q, { limit: 50 })).results.map((h) => h.path);
      if (got[0] !== want[0] || (q.match(/[\p{L}\p{N}]+/gu)!.length === 1 && got.length !== 1)) wrong.push(`fts ${q}: ${JSON.stringify(got)}`);
      // Hybrid adds vector neighbours; the page must still be first.
      const hy = await search(owner, q, { mode: 'hybrid' });
      if (hy.results[0]?.path !== want[0]) wrong.push(`hybrid ${q}: ${JSON.stringify(hy.results.map((h) => h.path))}`);
    }
    expect(wrong).toEqual([]);
  }, 60_000);
});

const answer = (b: SearchResult) => b.results.map((h) => `${h.path}|${h.section}|${h.snippet.slice(0, 30)}|${h.score}`);

describe.each(testEngines())("attack i: hidden writing never moves a lower caller's ranking or crowds it out (%s)", (engine) => {
  let s: TestServer;
  let owner: Client;
  let wide: { client: Client; key: string }; // search * internal
  let scoped: Client; // search pub internal
  const queries: [string, Record<string, string | number | boolean>][] = [
    ['blarnix', {}], // windowed: > 1,000 visible sections
    ['blarnix quelm', {}], // all words, quelm rare: every match ranked
    ['quelm', { limit: 20 }],
    ['quelm zibbet', {}], // no section holds both: any-word
    ['quelm nosuchwordz', {}],
    ['blarnix', { mode: 'hybrid' }],
    ['quelm', { space: 'pub' }],
  ];
  const snap = async (c: Client) => {
    const out: Record<string, string[]> = {};
    for (const [q, params] of queries) out[`${q} ${JSON.stringify(params)}`] = answer(await search(c, q, params));
    return out;
  };

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url, 'Lk')).client;
    wide = await createAgentWithKey(
      owner,
      [
        { action: 'search', scope: '*', ceiling: 'internal' },
        { action: 'read', scope: '*', ceiling: 'internal' },
      ],
      { ceiling: 'internal' },
    );
    scoped = (await createAgentWithKey(owner, [{ action: 'search', scope: 'pub', ceiling: 'internal' }], { ceiling: 'internal' })).client;
    for (let i = 0; i < 12; i++) {
      const w = i < 6 ? 'quelm' : 'zibbet';
      expectStatus(
        await owner.post('/api/v1/nodes', {
          path: `pub/n${i}.md`,
          content: page(`Note ${i} ${w}`, `A note of ${w}${i % 2 ? ` and ${w} again` : ''}, number ${i}, blarnix.\n`, { sensitivity: 'internal' }),
        }),
        201,
      );
    }
    // More blarnix sections than either engine's budget, over 30 pages.
    for (let k = 0; k < 30; k++)
      expectStatus(
        await owner.post('/api/v1/nodes', {
          path: `pub/log${k}.md`,
          content: page(
            `Log ${k}`,
            manySections(70, () => 'blarnix'),
            { sensitivity: 'internal' },
          ),
        }),
        201,
      );
  }, 120_000);
  afterAll(async () => s?.stop());

  it('secret pages, secret blocks, other paths, archived pages and another workspace full of the words: same ids, order, scores; nothing hidden shown', async () => {
    const before = { wide: await snap(wide.client), scoped: await snap(scoped) };
    expect(before.wide['blarnix {}']!.length).toBeGreaterThan(0);
    expect(before.wide['quelm zibbet {}']!.length).toBeGreaterThan(0);
    // Newest of all: secret pages with the words everywhere (title and text), more than the budget.
    expectStatus(
      await owner.post('/api/v1/nodes', {
        path: 'pub/secret.md',
        content: page(
          'Quelm blarnix zibbet hushword',
          manySections(1200, () => 'quelm quelm blarnix zibbet hushword'),
          { sensitivity: 'secret' },
        ),
      }),
      201,
    );
    expectStatus(
      await owner.post('/api/v1/nodes', {
        path: 'pub/blocks.md',
        content: page('Plain', `Open text.\n\n::: confidential\n${manySections(300, () => 'quelm blarnix zibbet hushword', 'hid')}:::\n`, {
          sensitivity: 'internal',
        }),
      }),
      201,
    );
    const after = { wide: await snap(wide.client), scoped: await snap(scoped) };
    expect(after).toEqual(before);
    // Another Space at internal: the scoped agent's answers do not move (its counts are its reach).
    expectStatus(
      await owner.post('/api/v1/nodes', {
        path: 'other/x.md',
        content: page(
          'Quelm other',
          manySections(1200, () => 'quelm blarnix zibbet otherword'),
          { sensitivity: 'internal' },
        ),
      }),
      201,
    );
    expect(await snap(scoped)).toEqual(before.scoped);
    // Another workspace.
    const far = (await signupHuman(s.url, 'Far')).client;
    expectStatus(
      await far.post('/api/v1/nodes', {
        path: 'pub/far.md',
        content: page(
          'Quelm far',
          manySections(1200, () => 'quelm blarnix zibbet farword'),
        ),
      }),
      201,
    );
    expect(await snap(scoped)).toEqual(before.scoped);
    for (const c of [wide.client, scoped])
      for (const [q, params] of [...queries, ['hushword', {}] as const, ['farword', {}] as const]) {
        const r = await search(c, q, { ...params, limit: 50 });
        for (const h of r.results) expect(`${h.path} ${h.snippet} ${h.title}`, q).not.toMatch(/hushword|farword|pub\/secret|pub\/far/);
      }
    // The scoped agent never sees other/.
    for (const q of ['quelm', 'otherword', 'blarnix'])
      for (const h of (await search(scoped, q, { limit: 50 })).results) expect(h.path.startsWith('pub/'), h.path).toBe(true);
  }, 120_000);

  it('newest matches all invisible (secret, other paths, archived): every caller still gets its own, `limit` of them', async () => {
    expectStatus(
      await owner.post('/api/v1/nodes', {
        path: 'pub/arch.md',
        content: page(
          'Quelm archived',
          manySections(1500, () => 'quelm blarnix'),
          { sensitivity: 'internal', state: 'archived', archived_reason: 'manual' },
        ),
      }),
      201,
    );
    expectStatus(
      await owner.post('/api/v1/nodes', {
        path: 'pub/secret2.md',
        content: page(
          'Quelm s2',
          manySections(1500, () => 'quelm blarnix'),
          { sensitivity: 'secret' },
        ),
      }),
      201,
    );
    // (Without a filter the wide agent's newest 1,000+ visible quelm sections are other/x.md's,
    // by design a frequent word ranks recent writing; with space=pub its notes must all come.)
    for (const [who, c, params] of [
      ['wide space=pub', wide.client, { space: 'pub' }],
      ['scoped', scoped, {}],
    ] as const) {
      const q = await search(c, 'quelm', { limit: 20, ...params });
      const notes = q.results.filter((h) => /^pub\/n\d+\.md$/.test(h.path)).map((h) => h.path);
      expect(notes.length, `${who}: ${JSON.stringify(q.results.map((h) => h.path))}`).toBe(6);
      for (const h of q.results) expect(h.state, who).toBe('active');
      expect(q.results.map((h) => h.path)).not.toContain('pub/secret2.md');
      const b = await search(c, 'blarnix', { limit: 10, ...params });
      expect(b.results.length, who).toBeGreaterThan(0);
      for (const h of b.results) expect(h.path.startsWith('pub/secret') || h.path === 'pub/arch.md', `${who} ${h.path}`).toBe(false);
    }
    // With archived pages asked for, the archived page is among the answers, still nothing secret.
    const a = await search(wide.client, 'quelm archived', { include_archived: true, limit: 20 });
    expect(a.results.map((h) => h.path)).toContain('pub/arch.md');
    expect(a.results.map((h) => h.path)).not.toContain('pub/secret2.md');
  }, 120_000);

  it('MCP search and bundle for the internal agent: no hidden text', async () => {
    const m = await connectMcp(s.url, wide.key);
    try {
      for (const [name, args] of [
        ['context_search', { query: 'quelm blarnix zibbet', limit: 50 }],
        ['context_search', { query: 'hushword /etc/passwd <tag> C++', include_archived: true }],
        ['search', { query: 'quelm' }],
        ['context_bundle', { intent: 'quelm zibbet blarnix', budget_tokens: 3000 }],
      ] as const) {
        const r = await call(m, name, args);
        expect(r.isError, `${name}: ${r.text.slice(0, 200)}`).toBe(false);
        const text = name === 'context_bundle' ? r.text.split('\n').slice(1).join('\n') : r.text;
        expect(text, name).not.toMatch(/hushword|pub\/secret/);
      }
    } finally {
      await m.close();
    }
  }, 60_000);
});

describe.each(testEngines())('attack i: pages rewritten between sizes and archived while common-word searches run (%s)', (engine) => {
  let s: TestServer;
  let agent: Client;

  beforeAll(async () => {
    s = await startTestServer(engine);
    const owner = (await signupHuman(s.url, 'Cc')).client;
    agent = (
      await createAgentWithKey(
        owner,
        ['read', 'write', 'search', 'admin'].map((action) => ({ action })),
      )
    ).client;
    expectStatus(
      await agent.post('/api/v1/nodes', {
        path: 'live/fill.md',
        content: page(
          'Fill',
          manySections(2100, () => 'vexmo'),
        ),
      }),
      201,
    );
  }, 120_000);
  afterAll(async () => s?.stop());

  it('each answer sees the flux page whole, never a 500, never an archived page in an active-only search', async () => {
    const hashes = Array.from({ length: 4000 }, (_, i) => md5(`c-${i}`)).join(' ');
    const flux = (v: number) =>
      page(
        `Vexmo flux v${v}`,
        `Intro vexmo fluxver${v}.\n\n## Big\n\n${v % 3 === 0 ? hashes : 'small'} vexmo fluxver${v}\n\n## ﬁnal ｓｅｃｔｉｏｎ\n\nvexmo fluxver${v} ﬁn.\n`,
      );
    const f = await agent.post('/api/v1/nodes', { path: 'live/flux.md', content: flux(0) });
    expectStatus(f, 201);
    const fluxId = (f.body as { id: string }).id;
    const e = await agent.post('/api/v1/nodes', { path: 'live/ebb.md', content: page('Ebb', 'The ebbwordz tide, vexmo.\n') });
    expectStatus(e, 201);
    const ebbId = (e.body as { id: string }).id;
    let stop = false;
    const problems: string[] = [];
    let searches = 0;
    const writer = (async () => {
      for (let v = 1; !stop && v < 300; v++) {
        const r = await agent.put(`/api/v1/nodes/${fluxId}`, { content: flux(v) });
        if (r.status !== 200) problems.push(`put ${r.status} ${r.text.slice(0, 120)}`);
      }
    })();
    const archiver = (async () => {
      for (let i = 0; !stop && i < 300; i++) {
        const a = await agent.post(`/api/v1/nodes/${ebbId}/archive`, { reason: 'manual' });
        if (a.status !== 200) problems.push(`archive ${a.status} ${a.text.slice(0, 120)}`);
        const r = await agent.post(`/api/v1/nodes/${ebbId}/restore`, {});
        if (r.status !== 200) problems.push(`restore ${r.status} ${r.text.slice(0, 120)}`);
      }
    })();
    const reader = async (q: string) => {
      while (!stop) {
        const r = await agent.get(`/api/v1/search?q=${enc(q)}&mode=fts&limit=10`);
        searches++;
        if (r.status !== 200) {
          problems.push(`search ${q} ${r.status} ${r.text.slice(0, 160)}`);
          continue;
        }
        const hits = r.body.results as SearchHit[];
        for (const h of hits) if (h.state !== 'active') problems.push(`${q}: ${h.path} ${h.state}`);
        const hit = hits.find((h) => h.id === fluxId);
        if (!hit) {
          problems.push(`${q}: flux missing from ${JSON.stringify(hits.map((h) => h.path))}`);
          continue;
        }
        const v = /v(\d+)$/.exec(hit.title)?.[1];
        if ([...hit.snippet.matchAll(/fluxver(\d+)/g)].some((m) => m[1] !== v))
          problems.push(`${q}: title ${hit.title} with snippet ${hit.snippet.slice(0, 80)}`);
      }
    };
    const readers = Promise.all([reader('vexmo'), reader('vexmo flux'), reader('final section flux')]);
    await sleep(6000);
    stop = true;
    await Promise.all([writer, archiver, readers]);
    expect(searches).toBeGreaterThan(10);
    expect(problems.slice(0, 10)).toEqual([]);
  }, 90_000);
});
