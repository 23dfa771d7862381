import type { ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { waitForVectors } from '../support/embeddings-server.js';
import { prng } from '../support/random.js';
import { Client, createReaderAgent, onNode, signupHuman } from '../support/server.js';
import { exited, spawnService } from '../support/service-process.js';
import { call, connectMcp } from '../mcp/support.js';

/**
 * Attack session N: hostile page text reaching the context bundle's token counting (lazily
 * loaded o200k ranks, special-token text counted as text, the O(n log n) byte-pair merge of
 * bpe-merge.ts), and the int8 vector matrix's per-page row lists under churn and a restart
 * (commits c949529, 7956422).
 *
 * The service runs as its own process (spawnService), so that a request that holds its event
 * loop shows as a /healthz that waits, and so that it can be stopped and started again on the
 * same data.
 */

const PASSWORD = 'correct horse battery';
/** What the service counts with: special-token text in a page is text. */
const AS_TEXT = { disallowedSpecial: new Set<string>() };
/** The node must answer /healthz within this while a bundle is built (generous: the fix promised milliseconds). */
const RESPONSIVE_MS = 10_000;
const MAX_PAGE_BYTES = 1024 * 1024;

/** Every special token gpt-tokenizer knows (o200k's own and the chat/harmony ones). */
const SPECIALS = [
  '<|endoftext|>',
  '<|fim_prefix|>',
  '<|fim_middle|>',
  '<|fim_suffix|>',
  '<|endofprompt|>',
  '<|im_start|>',
  '<|im_end|>',
  '<|im_sep|>',
  '<|startoftext|>',
  '<|start|>',
  '<|end|>',
  '<|message|>',
  '<|channel|>',
  '<|return|>',
  '<|constrain|>',
  '<|call|>',
];
/** Partial, nested, look-alike and broken forms. */
const PARTIALS = [
  '<|endoftext',
  'endoftext|>',
  '<|<|endoftext|>|>',
  '<|endo<|endoftext|>ftext|>',
  '<||>',
  '<|',
  '|>',
  '< |endoftext| >',
  '<|ENDOFTEXT|>',
  '<\u200b|endoftext|>',
  '＜｜endoftext｜＞',
  '<|endoftext|'.repeat(3),
  '<|fim_prefix|><|fim_suffix|><|fim_middle|>',
];

interface Bundle {
  intent: string;
  budget_tokens: number;
  used_tokens: number;
  tokenizer: string;
  at: string | null;
  sections: { id: string; path: string; title: string; heading: string; commit_sha: string; tokens: number; truncated: boolean; text: string }[];
  markdown: string;
}
interface Hit {
  id: string;
  path: string;
  title: string;
  section: string;
  score: number;
  snippet: string;
}

const STATUS = /^(\d+) of (\d+) tokens used; (\d+) sections? from (\d+) pages?$/m;

/** The longest run the pre-tokenizer could make one piece of (runs of non-space or of space): gpt-tokenizer's own merge is quadratic in it. */
const longestRun = (s: string) => Math.max(0, ...(s.match(/\S+|\s+/g) ?? []).map((x) => x.length));

/** The library's count, where it is quick enough to ask (its merge is O(n²) in a piece's length). */
const libraryCount = (s: string): number | undefined => (longestRun(s) <= 6000 ? countTokens(s, AS_TEXT) : undefined);

/** No lone surrogate (String.prototype.isWellFormed, which the ES2022 typings lack). */
const wellFormed = (s: string) => !/\p{Surrogate}/u.test(s);

/** Random lowercase words: distinct per seed, sharing few trigrams, so the builtin embedder tells pages apart. */
function words(seed: number, n: number, len = 14): string[] {
  const r = prng(seed);
  return Array.from({ length: n }, () => Array.from({ length: len }, () => String.fromCharCode(97 + Math.floor(r() * 26))).join(''));
}

describe.each(testEngines())('attack session N: hostile text in the bundle, churn in the vector matrix (%s)', (engine) => {
  let tdb: TestDatabase;
  let child: ChildProcess | undefined;
  let url: string;
  let owner: Client;
  let conf: { id: string; key: string; client: Client };
  let internal: { id: string; key: string; client: Client };

  const env = () => ({ DATA_DIR: tdb.dataDir, ...(tdb.databaseUrl ? { DATABASE_URL: tdb.databaseUrl } : {}) });
  const start = async () => {
    ({ child, url } = await spawnService(env()));
  };
  const stop = async () => {
    if (!child) return;
    child.kill('SIGTERM');
    await exited(child);
    child = undefined;
  };

  const create = async (path: string, content: string) => {
    const r = await owner.post('/api/v1/nodes', { path, content });
    expect(r.status, r.text.slice(0, 300)).toBe(201);
    return r.body as { id: string; path: string; commit_sha: string };
  };
  /** A page's current content (kept per commit, so a page read again at the same version is not fetched again). */
  const contents = new Map<string, string>();
  const contentOf = async (id: string, commit?: string, c: Client = owner): Promise<string> => {
    const kept = commit ? contents.get(`${id}@${commit}`) : undefined;
    if (kept !== undefined) return kept;
    const r = await c.get(`/api/v1/nodes/${id}`);
    expect(r.status, r.text.slice(0, 200)).toBe(200);
    contents.set(`${id}@${r.body.commit_sha}`, r.body.content);
    return r.body.content as string;
  };

  /**
   * A bundle while another client polls /healthz: the answer, and the longest /healthz took
   * meanwhile (a synchronous stretch of the node shows as that wait).
   */
  const slowest = { ms: 0, what: '', took: 0 };
  const timedBundle = async (c: Client, body: Record<string, unknown>) => {
    let done = false;
    let worst = 0;
    const poll = (async () => {
      while (!done) {
        const t = Date.now();
        const h = await fetch(`${url}/healthz`);
        expect(h.status).toBe(200);
        await h.arrayBuffer();
        worst = Math.max(worst, Date.now() - t);
        await new Promise((r) => setTimeout(r, 25));
      }
    })();
    const t = Date.now();
    const res = await c.post('/api/v1/bundle', body);
    const took = Date.now() - t;
    done = true;
    await poll;
    if (worst > slowest.ms) Object.assign(slowest, { ms: worst, what: JSON.stringify(body).slice(0, 80), took });
    return { res, took, healthz: worst };
  };

  /** What a bundle must be, whatever the pages held: within budget, the figure exact, each section from its page's current text. */
  const checkBundle = async (b: Bundle, budget: number, what: string, reader: Client = owner) => {
    expect(b.budget_tokens, what).toBe(budget);
    expect(b.tokenizer).toBe('o200k_base');
    expect(b.used_tokens, what).toBeLessThanOrEqual(budget);
    const m = STATUS.exec(b.markdown);
    expect(m, `${what}: ${b.markdown.slice(0, 200)}`).not.toBeNull();
    // (messages below stay short: a failing toContain over a bundle would print megabytes)
    expect(Number(m![1]), what).toBe(b.used_tokens);
    expect(Number(m![2]), what).toBe(budget);
    expect(Number(m![3]), what).toBe(b.sections.length);
    const lib = libraryCount(b.markdown);
    if (lib !== undefined) expect(b.used_tokens, `${what}: the library counts the markdown so`).toBe(lib);
    for (const s of b.sections) {
      expect(wellFormed(s.text), `${what}: ${s.path} cut inside a character`).toBe(true);
      const own = s.truncated ? s.text.replace(/\n\[…\]$/, '') : s.text;
      expect(b.markdown.includes(s.text), `${what}: ${s.path} section text in the markdown`).toBe(true);
      expect((await contentOf(s.id, s.commit_sha, reader)).includes(own.trimEnd()), `${what}: ${s.path} section text is the page's`).toBe(true);
    }
  };

  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
    await start();
    owner = (await signupHuman(url, 'Nora')).client;
    expect((await owner.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
    conf = await createReaderAgent(owner, 'confidential');
    internal = await createReaderAgent(owner, 'internal');
  }, 90_000);
  afterAll(async () => {
    console.log(`[attack-n ${engine}] longest /healthz wait during a bundle: ${slowest.ms} ms (bundle ${slowest.what} took ${slowest.took} ms)`);
    await stop();
    await tdb?.cleanup();
  });

  it('pages of special-token text, controls, surrogates, emoji, mark floods, blobs: every budget answers 200, within it, counted as o200k counts', async () => {
    const specials = await create(
      'hostile/specials.md',
      [
        `# <|endoftext|> Hostile specials <|fim_prefix|>`,
        '',
        ...SPECIALS.map((s) => `hostile ${s} token`),
        '',
        ...PARTIALS.map((s) => `hostile partial ${s}`),
        '',
        SPECIALS.join('').repeat(150),
        '',
        `${SPECIALS.join(' ')} `.repeat(40),
        '',
      ].join('\n'),
    );
    const controls =
      Array.from({ length: 32 }, (_, i) => String.fromCharCode(i))
        .filter((ch) => ch !== '\u0000' && ch !== '\n')
        .join('') + '\u007f\u0085\u2028\u2029\ufeff\u200b\u200d\u2066\u2069';
    await create(
      'hostile/controls.md',
      `# Hostile controls\n\nhostile ${controls} end\n\n${controls.repeat(200)}\n\nשלום עולם \u202eevil\u202c مرحبا بالعالم hostile ‏RTL‎ mark\n`,
    );
    await create('hostile/emoji.md', `# Hostile emoji\n\n${'👩‍👩‍👧‍👦🏳️‍🌈🧑🏽‍🚀🫱🏻‍🫲🏿'.repeat(2500)}\n`);
    await create('hostile/marks.md', `# Hostile marks\n\n${'e\u0301'.repeat(50_000)}\n\n${'a\u0300\u0301\u0302\u0303\u0304\u0305\u0306\u0307'.repeat(4000)}\n`);
    const rnd = prng(7);
    const blob = Buffer.from(Array.from({ length: 150_000 }, () => Math.floor(rnd() * 256))).toString('base64');
    await create('hostile/blob.md', `# Hostile blob\n\n${blob}\n`);
    await create('hostile/cjk.md', `# Hostile cjk\n\n${'灯台守の夜間点検記録'.repeat(4000)}\n`);
    // The line that used to hold the node for seconds (commit 7956422).
    await create('hostile/xline.md', `# Hostile xline\n\n${'x'.repeat(40_000)}\n`);

    // A NUL is refused; a lone surrogate (a JSON escape no UTF-8 can carry) is refused or stored, never a 500.
    const nul = await owner.post('/api/v1/nodes', { path: 'hostile/nul.md', content: '# Hostile nul\n\nhostile \u0000 nul\n' });
    expect(nul.status).toBe(400);
    const sur = await owner.request('POST', '/api/v1/nodes', {
      body: '{"path":"hostile/surrogate.md","content":"# Hostile surrogate\\n\\nhostile \\ud800 lone \\udfff high \\ud83d end \\ud83d\\ude00 pair\\n"}',
      headers: { 'content-type': 'application/json' },
    });
    expect(sur.status, sur.text).toBe(400);
    if (sur.status === 201) {
      const back = await contentOf(sur.body.id);
      expect(back).toContain('lone');
      expect(back).toContain('😀');
    }
    await waitForVectors(owner, 30_000);

    const seen = new Set<string>();
    for (const budget of [200, 64_000]) {
      for (const intent of ['hostile', `<|endoftext|> hostile ${SPECIALS.join(' ')}`]) {
        const what = `budget ${budget} intent ${intent.slice(0, 30)}`;
        const { res, took, healthz } = await timedBundle(conf.client, { intent, budget_tokens: budget, scope: 'hostile' });
        expect(res.status, `${what}: ${res.text.slice(0, 300)}`).toBe(200);
        const b = res.body as Bundle;
        await checkBundle(b, budget, what);
        expect(healthz, `${what}: /healthz waited ${healthz} ms (bundle took ${took} ms)`).toBeLessThan(RESPONSIVE_MS);
        // The intent is shown as given (spaces collapsed, its first 200 characters), special-token text and all.
        expect(b.markdown.split('\n')[0]).toBe(`# Context: ${intent.replace(/\s+/g, ' ').slice(0, 200)}`);
        for (const s of b.sections) seen.add(s.path);
      }
    }
    // Each hostile page reaches the bundle when asked for by name (else nothing above was tested), cut or whole.
    for (const name of ['specials', 'controls', 'emoji', 'marks', 'blob', 'cjk', 'xline']) {
      for (const budget of [201, 64_000]) {
        const what = `${name} at ${budget}`;
        const { res, took, healthz } = await timedBundle(conf.client, { intent: `hostile ${name}`, budget_tokens: budget, scope: 'hostile' });
        expect(res.status, `${what}: ${res.text.slice(0, 300)}`).toBe(200);
        const b = res.body as Bundle;
        await checkBundle(b, budget, what);
        expect(healthz, `${what}: /healthz waited ${healthz} ms (bundle took ${took} ms)`).toBeLessThan(RESPONSIVE_MS);
        for (const x of b.sections) seen.add(x.path);
        expect(b.sections[0]?.path, what).toBe(`hostile/${name}.md`);
      }
    }
    expect(seen.size).toBeGreaterThanOrEqual(7);
    console.log(`[attack-n ${engine}] hostile pages: longest /healthz wait ${slowest.ms} ms (bundle ${slowest.what} took ${slowest.took} ms)`);
    // Special-token text reaches the caller verbatim.
    const big = (await conf.client.post('/api/v1/bundle', { intent: 'hostile specials token partial', budget_tokens: 64_000, scope: 'hostile' }))
      .body as Bundle;
    expect(big.sections.some((s) => s.id === specials.id)).toBe(true);
    for (const s of SPECIALS) expect(big.markdown).toContain(s);

    // GET with the parameters in the query string, and the markdown alone.
    for (const budget of [201, 64_000]) {
      const q = new URLSearchParams({ intent: 'hostile <|endoftext|>', budget_tokens: String(budget), scope: 'hostile' });
      const g = await conf.client.get(`/api/v1/bundle?${q}`);
      expect(g.status, g.text.slice(0, 300)).toBe(200);
      await checkBundle(g.body as Bundle, budget, `GET ${budget}`);
      const md = await conf.client.get(`/api/v1/bundle?${q}`, { accept: 'text/markdown' });
      expect(md.status).toBe(200);
      expect(md.headers.get('content-type')).toMatch(/^text\/markdown/);
      const m = STATUS.exec(md.text);
      expect(Number(m![1])).toBeLessThanOrEqual(budget);
      const lib = libraryCount(md.text);
      if (lib !== undefined) expect(Number(m![1])).toBe(lib);
    }
  }, 120_000);

  it('budgets at the edges: 200, 201 and 64,000 answer; 199, 64,001, strings, floats and other junk are 400 on POST, GET and MCP', async () => {
    for (const budget of [200, 201, 64_000]) {
      const r = await conf.client.post('/api/v1/bundle', { intent: 'hostile', budget_tokens: budget, scope: 'hostile' });
      expect(r.status, r.text.slice(0, 200)).toBe(200);
      expect(r.body.used_tokens).toBeLessThanOrEqual(budget);
    }
    for (const bad of [199, 64_001, 0, -1, 200.5, 4000.25, '4000', '', null, true, [4000], { n: 4000 }, 1e308, -0.5, 2 ** 53]) {
      const r = await conf.client.post('/api/v1/bundle', { intent: 'hostile', budget_tokens: bad, scope: 'hostile' });
      expect(r.status, `POST budget ${JSON.stringify(bad)}: ${r.text.slice(0, 200)}`).toBe(400);
    }
    // JSON numbers the serializer above cannot write.
    for (const raw of ['NaN', 'Infinity', '-Infinity', '1e999', '0x100', '64000.0000000001']) {
      const r = await conf.client.request('POST', '/api/v1/bundle', {
        body: `{"intent":"hostile","budget_tokens":${raw}}`,
        headers: { 'content-type': 'application/json' },
      });
      expect(r.status, `POST raw ${raw}: ${r.text.slice(0, 200)}`).toBe(400);
    }
    for (const bad of ['199', '64001', 'abc', '200.5', '', 'NaN', 'Infinity', '-200', '1e5', '4000,4000']) {
      const r = await conf.client.get(`/api/v1/bundle?intent=hostile&budget_tokens=${encodeURIComponent(bad)}`);
      expect(r.status, `GET budget ${JSON.stringify(bad)}: ${r.text.slice(0, 200)}`).toBe(400);
    }
    // A repeated parameter is not a way around the bounds.
    const twice = await conf.client.get('/api/v1/bundle?intent=hostile&budget_tokens=200&budget_tokens=64001');
    expect(twice.status, twice.text.slice(0, 200)).toBe(400);

    const mcp = await connectMcp(url, conf.key);
    try {
      // (A numeric string is taken over MCP, as tools take `limit: '3'`; REST's JSON body is strict.)
      for (const bad of [199, 64_001, 200.5, '199', '64001', 'abc', -1, null, true]) {
        const r = await call(mcp, 'context_bundle', { intent: 'hostile', budget_tokens: bad, scope: 'hostile' });
        expect(r.isError, `MCP budget ${JSON.stringify(bad)}: ${r.text.slice(0, 120)}`).toBe(true);
        expect(r.text).toMatch(/^invalid_request: \S/);
      }
      for (const budget of [200, 201, 64_000]) {
        const r = await call(mcp, 'context_bundle', { intent: 'hostile <|endoftext|>', budget_tokens: budget, scope: 'hostile' });
        expect(r.isError, r.text.slice(0, 300)).toBe(false);
        const m = STATUS.exec(r.text);
        expect(m, r.text.slice(0, 300)).not.toBeNull();
        expect(Number(m![1])).toBeLessThanOrEqual(budget);
        expect(Number(m![2])).toBe(budget);
        const lib = libraryCount(r.text);
        if (lib !== undefined) expect(Number(m![1])).toBe(lib);
      }
    } finally {
      await mcp.close();
    }
  }, 60_000);

  it('a confidential block holding a long no-space line and special tokens never reaches an internal-ceiling agent (bundle REST and MCP, search in every mode)', async () => {
    const SECRET = 'quetzalsecret';
    const longLine = `${'kx7'.repeat(14_000)}<|endoftext|>${SECRET}<|fim_middle|>${'zq'.repeat(5000)}`;
    const page = await create(
      'redact/vault.md',
      [
        '---',
        'sensitivity: internal',
        '---',
        '# Redact vault quetzal',
        '',
        'The quetzal plan is open to internal readers.',
        '',
        '::: confidential',
        `quetzal ${SECRET} <|endoftext|> hidden words ${SECRET}`,
        '',
        longLine,
        '',
        `<|im_start|>${SECRET}<|im_end|>`,
        ':::',
        '',
        '## After',
        '',
        'quetzal open tail',
        '',
      ].join('\n'),
    );
    const whole = await create(
      'redact/whole.md',
      `---\nsensitivity: confidential\n---\n# Redact whole quetzal\n\n${SECRET}${'kx7'.repeat(10_000)}<|endofprompt|>\n`,
    );
    await waitForVectors(owner, 30_000);
    const leaks = (text: string) => text.includes(SECRET) || text.includes('kx7kx7') || text.includes('zqzq') || text.includes('<|im_start|>');
    /** What a bundle gave beyond echoing the intent (its first line). */
    const given = (b: Bundle) => [b.markdown.split('\n').slice(1).join('\n'), ...b.sections.map((s) => `${s.title}\n${s.heading}\n${s.text}`)].join('\n');

    // The confidential agent sees it all (so the pages are reachable by these intents).
    const full = (await conf.client.post('/api/v1/bundle', { intent: `quetzal ${SECRET}`, budget_tokens: 64_000, scope: 'redact' })).body as Bundle;
    expect(full.markdown).toContain(SECRET);
    expect(full.sections.some((s) => s.id === whole.id)).toBe(true);

    for (const budget of [200, 201, 1000, 64_000]) {
      for (const intent of [`quetzal ${SECRET}`, `kx7${'kx7'.repeat(20)}`, '<|endoftext|> hidden words', 'quetzal']) {
        const r = await internal.client.post('/api/v1/bundle', { intent, budget_tokens: budget, scope: 'redact' });
        expect(r.status, r.text.slice(0, 200)).toBe(200);
        expect(leaks(given(r.body as Bundle)), `internal bundle ${budget} ${intent.slice(0, 20)}`).toBe(false);
        await checkBundle(r.body as Bundle, budget, `internal ${budget}`);
        for (const s of (r.body as Bundle).sections) expect(s.id).toBe(page.id);
      }
    }
    // Its open sections do reach it.
    const open = (await internal.client.post('/api/v1/bundle', { intent: 'quetzal plan open', budget_tokens: 4000, scope: 'redact' })).body as Bundle;
    expect(open.markdown).toContain('quetzal plan is open');
    for (const mode of ['fts', 'vector', 'hybrid']) {
      for (const q of [SECRET, `quetzal ${SECRET}`, 'hidden words', `kx7${'kx7'.repeat(20)}`, 'quetzal']) {
        const r = await internal.client.get(`/api/v1/search?${new URLSearchParams({ q, mode, limit: '50' })}`);
        expect(r.status, r.text.slice(0, 200)).toBe(200);
        expect(leaks(r.text), `internal search ${mode} ${q.slice(0, 20)}`).toBe(false);
        expect(r.body.results.map((h: Hit) => h.id)).not.toContain(whole.id);
      }
    }
    const mcp = await connectMcp(url, internal.key);
    try {
      for (const budget of [200, 64_000]) {
        const r = await call(mcp, 'context_bundle', { intent: `quetzal ${SECRET} <|endoftext|>`, budget_tokens: budget, scope: 'redact' });
        expect(r.isError, r.text.slice(0, 200)).toBe(false);
        expect(leaks(r.text.split('\n').slice(1).join('\n'))).toBe(false);
      }
      const s = await call(mcp, 'context_search', { query: `quetzal ${SECRET}` });
      expect(leaks(s.text)).toBe(false);
    } finally {
      await mcp.close();
    }
  }, 90_000);

  it('an intent cut to 200 characters in the bundle header never splits a character (REST JSON, markdown, MCP)', async () => {
    // 199 ASCII characters, then an emoji: the cut at 200 UTF-16 units falls between its two halves.
    const intent = `hostile ${'x'.repeat(191)}😀 specials`;
    const r = await conf.client.post('/api/v1/bundle', { intent, budget_tokens: 400, scope: 'hostile' });
    expect(r.status).toBe(200);
    const b = r.body as Bundle;
    expect(b.used_tokens).toBeLessThanOrEqual(400);
    const first = b.markdown.split('\n')[0]!;
    expect(wellFormed(first), `header ends ${JSON.stringify(first.slice(-4))}`).toBe(true);
    const md = await conf.client.request('POST', '/api/v1/bundle', {
      json: { intent, budget_tokens: 400, scope: 'hostile' },
      headers: { accept: 'text/markdown' },
    });
    expect(md.status).toBe(200);
    expect(md.text.split('\n')[0], 'the markdown header holds a replacement character').not.toContain('\ufffd');
    const mcp = await connectMcp(url, conf.key);
    try {
      const t = await call(mcp, 'context_bundle', { intent, budget_tokens: 400, scope: 'hostile' });
      expect(t.isError).toBe(false);
      expect(wellFormed(t.text), 'MCP context_bundle text').toBe(true);
    } finally {
      await mcp.close();
    }
  });

  it('a lone surrogate sent as a JSON escape is refused (400 invalid_content): no engine stores what its hash does not name', async () => {
    const r = await owner.request('POST', '/api/v1/nodes', {
      body: '{"path":"hostile/lone.md","content":"# Hostile lone\\n\\nlone \\ud800 here\\n"}',
      headers: { 'content-type': 'application/json' },
    });
    // Refused since session n (content.ts): half a pair is not Unicode. Were it ever stored
    // again, what is served must be what its hash names.
    expect(r.status, r.text.slice(0, 200)).toBe(400);
    expect(r.body.error.code).toBe('invalid_content');
    if (r.status !== 201) return;
    const blobSha = (text: string) => {
      const b = Buffer.from(text);
      return createHash('sha1')
        .update(Buffer.concat([Buffer.from(`blob ${b.length}\0`), b]))
        .digest('hex');
    };
    const live = await owner.get(`/api/v1/nodes/${r.body.id}`);
    const then = await owner.get(`/api/v1/nodes/${r.body.id}?at=${r.body.commit_sha}`);
    expect(then.status).toBe(200);
    // What UTF-8 can carry of it: one replacement character, as the hash was taken over.
    expect(blobSha(then.body.content)).toBe(r.body.content_hash);
    expect(JSON.stringify(live.body.content), 'live read differs from the commit').toBe(JSON.stringify(then.body.content));
    expect(blobSha(live.body.content), 'the live content is not what content_hash names').toBe(live.body.content_hash);
  });

  it('a search snippet cut to 240 characters never splits a character (pre-existing: makeSnippet)', async () => {
    // "hostile x" is 9 UTF-16 units, each emoji 2: the cut at 240 falls inside one.
    const p = await create('hostile/snippet.md', `# Hostile snippet\n\nhostile x${'😀'.repeat(300)}\n`);
    await waitForVectors(owner, 30_000);
    for (const mode of ['fts', 'hybrid']) {
      const r = await conf.client.get(`/api/v1/search?${new URLSearchParams({ q: 'hostile snippet', mode, space: 'hostile' })}`);
      expect(r.status).toBe(200);
      const hit = (r.body.results as Hit[]).find((h) => h.id === p.id);
      expect(hit, mode).toBeDefined();
      expect(wellFormed(hit!.snippet), `${mode} snippet ends ${JSON.stringify(hit!.snippet.slice(-3))}`).toBe(true);
    }
  });

  // Token counting is engine-blind and this is CPU-bound: on the first engine only (CI time).
  it.runIf(engine === testEngines()[0])(
    'a page of MAX_PAGE_BYTES in one line without spaces: the bundle answers within budget and the node keeps answering /healthz',
    async () => {
      // One piece for the pre-tokenizer: each count of it merges a million bytes, and cutting it
      // to the budget (truncateToTokens) counts ~20 prefixes of it.
      // 'ー' (U+30FC, a letter to the pre-tokenizer, 3 bytes): ~87,000 tokens in 1 MiB, so a 64,000
      // budget cuts it three quarters in, where the prefixes counted are longest.
      const head = '# Blob monolith\n\n';
      const fill = (bytes: number) => 'ー'.repeat(Math.floor(bytes / 3)) + 'a'.repeat(bytes % 3);
      const page = await create('blob/monolith.md', `${head}${fill(MAX_PAGE_BYTES - head.length - 1)}\n`);
      const tooBig = await owner.post('/api/v1/nodes', { path: 'blob/over.md', content: `${head}${fill(MAX_PAGE_BYTES - head.length)}\n` });
      expect(tooBig.status).toBe(413);
      await waitForVectors(owner, 30_000);
      const timings: string[] = [];
      try {
        for (const budget of [64_000, 200, 63_000]) {
          const { res, took, healthz } = await timedBundle(conf.client, { intent: 'blob monolith', budget_tokens: budget, scope: 'blob' });
          timings.push(`budget ${budget}: bundle ${took} ms, /healthz waited up to ${healthz} ms`);
          expect(res.status, res.text.slice(0, 200)).toBe(200);
          const b = res.body as Bundle;
          expect(b.used_tokens).toBeLessThanOrEqual(budget);
          expect(b.sections.map((s) => s.id)).toEqual([page.id]);
          expect(b.sections[0]!.truncated).toBe(true);
          // Cut to the budget, never far below it.
          expect(b.used_tokens).toBeGreaterThan(budget - 80);
          expect(healthz, timings.join('; ')).toBeLessThan(RESPONSIVE_MS);
        }
      } finally {
        console.log(`[attack-n ${engine}] one-line 1 MiB page: ${timings.join('; ')}`);
      }
    },
    120_000,
  );

  // CPU-bound and engine-blind, and ~15 s: on the first engine only, to keep the file near two minutes.
  it.runIf(engine === testEngines()[0])(
    'pages of one long line under titles too long for a small budget: the bundle answers promptly (sections that cannot fit are not counted whole)',
    async () => {
      // Each section used to cost one full count (~1.3 s a MiB) before being dropped because its
      // page header alone leaves no room: the node froze for the number of such pages among the
      // candidates (up to rankDepth). bundle.ts tryAdd now skips text that cannot fit (minTokens).
      const title = `Kestrel ${Array.from({ length: 120 }, (_, i) => `w${i.toString(36)}q`).join(' ')}`;
      const fills = ['=', '+', '%', '@', '!', '?', ';', ':', 'a', 'x'];
      for (const [i, ch] of fills.entries()) {
        const head = `# ${title}\n\n`;
        await create(`kestrel/p${i}.md`, `${head}${ch.repeat(MAX_PAGE_BYTES - Buffer.byteLength(head) - 1)}\n`);
      }
      await waitForVectors(owner, 30_000);
      const { res, took, healthz } = await timedBundle(conf.client, { intent: 'kestrel', budget_tokens: 200, scope: 'kestrel' });
      console.log(`[attack-n ${engine}] ${fills.length} one-line pages, long titles, budget 200: bundle ${took} ms, /healthz waited up to ${healthz} ms`);
      expect(res.status).toBe(200);
      const b = res.body as Bundle;
      expect(b.used_tokens).toBeLessThanOrEqual(200);
      expect(healthz, `bundle ${took} ms`).toBeLessThan(RESPONSIVE_MS);
    },
    90_000,
  );

  it('the vector matrix under churn (create, update with more and fewer sections, delete, move) and a restart: every hit is a live, readable page, once, found by its current text', async () => {
    interface Live {
      id: string;
      path: string;
      version: number;
      sections: string[][];
    }
    // A workspace of its own: only these pages answer its searches.
    const k = await signupHuman(url, 'Keeper');
    let keeper = k.client;
    expect((await keeper.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);
    const agent = await createReaderAgent(keeper, 'internal');
    const live = new Map<string, Live>();
    const dead = new Set<string>();
    const N = 48;
    const SECTION_WORDS = 56; // ~840 characters, > WINDOW_CHARS / 2: one matrix row per section (Part 0 shares the title's)
    const contentFor = (i: number, v: number, k: number) => {
      const sections = Array.from({ length: k }, (_, j) => words(i * 100_000 + v * 100 + j, SECTION_WORDS));
      const body = sections.map((ws, j) => `## Part ${j}\n\n${ws.join(' ')}\n`).join('\n');
      return { sections, content: `# Churn ${words(i * 7 + 3, 1)[0]}\n\n${body}` };
    };
    const r = prng(99);
    /** Above any unrelated score seen, below any own-text score (both checked). */
    const STALE_MAX = 0.25;
    const sectionCount = () => 1 + Math.floor(r() * 7);

    for (let i = 0; i < N; i++) {
      const { sections, content } = contentFor(i, 0, sectionCount());
      const res = await keeper.post('/api/v1/nodes', { path: `churn/t${i}.md`, content });
      expect(res.status, res.text.slice(0, 200)).toBe(201);
      const p = res.body as { id: string; path: string };
      live.set(p.id, { id: p.id, path: p.path, version: 0, sections });
    }
    const reader = agent.client;
    const ids = [...live.keys()];

    const search = async (c: Client, q: string, mode: string, extra: Record<string, string> = {}) => {
      const res = await c.get(`/api/v1/search?${new URLSearchParams({ q, mode, limit: '50', ...extra })}`);
      expect(res.status, res.text.slice(0, 200)).toBe(200);
      return res.body.results as Hit[];
    };
    /** Every hit a live page, at its current path, readable by the caller, and each page once. */
    const checkHits = async (c: Client, hits: Hit[], what: string) => {
      const hitIds = hits.map((h) => h.id);
      expect(new Set(hitIds).size, `${what}: a page twice in ${JSON.stringify(hitIds)}`).toBe(hitIds.length);
      for (const h of hits) {
        expect(dead.has(h.id), `${what}: deleted page ${h.path} answered`).toBe(false);
        const l = live.get(h.id);
        expect(l, `${what}: unknown page ${h.id} ${h.path}`).toBeDefined();
        expect(h.path, what).toBe(l!.path);
      }
      if (hitIds[0]) expect((await c.get(`/api/v1/nodes/${hitIds[0]}`)).status, what).toBe(200);
    };
    /** A random section of each live page, asked by 6 of its words: the page first, that section named, in vector mode. */
    const scores: number[] = [];
    const checkAllFound = async (c: Client, phase: string) => {
      for (const l of live.values()) {
        const j = Math.floor(r() * l.sections.length);
        const q = l.sections[j]!.slice(10, 22).join(' ');
        const vec = await search(c, q, 'vector');
        await checkHits(c, vec, `${phase} vector ${l.path}`);
        expect(vec[0]?.id, `${phase}: ${l.path} v${l.version} part ${j} by vector (got ${vec[0]?.path})`).toBe(l.id);
        scores.push(vec[0]!.score);
        // A window of sections answers with its first: the title's (heading-only) section shares Part 0's.
        expect(j === 0 ? [`Part 0`, vec[0]!.title] : [`Part ${j}`], `${phase}: ${l.path} best section`).toContain(vec[0]!.section);
        const hyb = await search(c, q, 'hybrid');
        await checkHits(c, hyb, `${phase} hybrid ${l.path}`);
        expect(hyb[0]?.id, `${phase}: ${l.path} by hybrid`).toBe(l.id);
      }
      // Broad queries that reach many pages: each page once.
      for (const q of ['churn part', 'part']) for (const mode of ['vector', 'hybrid']) await checkHits(c, await search(c, q, mode), `${phase} broad ${mode}`);
    };

    await waitForVectors(keeper, 30_000);
    await checkAllFound(reader, 'created');

    // Updates: sections up and down, many times, searches between the writes (vectors may trail, hits may not lie).
    const churned = ids.slice(0, 20);
    for (let round = 1; round <= 4; round++) {
      for (const id of churned) {
        const l = live.get(id)!;
        const i = ids.indexOf(id);
        const k = round % 2 === 1 ? 8 - (i % 3) : 1 + (i % 2);
        const old = l.sections;
        const { sections, content } = contentFor(i, round, k);
        const up = await keeper.put(`/api/v1/nodes/${id}`, { content });
        expect(up.status, up.text.slice(0, 200)).toBe(200);
        l.version = round;
        l.sections = sections;
        const mid = await search(reader, old[0]!.slice(0, 4).join(' '), i % 2 ? 'vector' : 'hybrid');
        await checkHits(reader, mid, `round ${round} mid-write`);
      }
      await waitForVectors(keeper, 30_000);
      // The old text of a churned page no longer finds it by vector.
      for (const id of churned.slice(0, 6)) {
        const i = ids.indexOf(id);
        const stale = contentFor(i, round - 1, 1)
          .sections[0]!.slice(10, 22)
          .join(' ');
        const hits = await search(reader, stale, 'vector');
        await checkHits(reader, hits, `round ${round} stale`);
        // Unrelated builtin vectors sit near 0 ± 0.05 (a few clear the 0.12 floor); its own text scores far higher.
        const own = hits.find((h) => h.id === id);
        expect(
          own?.score ?? 0,
          `round ${round}: ${live.get(id)!.path} found by its old text: ${JSON.stringify(hits.map((h) => [h.path, h.section, h.score]))}`,
        ).toBeLessThan(STALE_MAX);
      }
    }
    await checkAllFound(reader, 'updated');

    // Deletes, with searches right after each (a deleted page never answers, vectors caught up or not).
    for (const id of ids.slice(15, 27)) {
      const l = live.get(id)!;
      const del = await keeper.delete(`/api/v1/nodes/${id}`);
      expect(del.status, del.text.slice(0, 200)).toBe(200);
      live.delete(id);
      dead.add(id);
      const q = l.sections[0]!.slice(10, 22).join(' ');
      for (const mode of ['vector', 'hybrid']) {
        const hits = await search(reader, q, mode);
        await checkHits(reader, hits, `deleted ${l.path} ${mode}`);
      }
    }
    for (const id of dead) expect((await reader.get(`/api/v1/nodes/${id}`)).status).toBe(404);

    // Moves into another Space: found at the new path, and by a search scoped to it.
    for (const id of ids.slice(30, 40)) {
      const l = live.get(id)!;
      const to = `moved/${l.path.split('/').pop()}`;
      const mv = await keeper.post(`/api/v1/nodes/${id}/move`, { to });
      expect(mv.status, mv.text.slice(0, 200)).toBe(200);
      l.path = to;
      await checkHits(reader, await search(reader, l.sections[0]!.slice(10, 22).join(' '), 'vector'), `moved ${to}`);
    }
    await waitForVectors(keeper, 30_000);
    await checkAllFound(reader, 'deleted and moved');
    for (const id of ids.slice(30, 40)) {
      const l = live.get(id)!;
      const hits = await search(reader, l.sections[0]!.slice(10, 22).join(' '), 'vector', { space: 'moved' });
      await checkHits(reader, hits, `scoped ${l.path}`);
      expect(hits[0]?.id).toBe(id);
      for (const h of hits) expect(h.path.startsWith('moved/')).toBe(true);
    }

    // A bundle over the churned pages: only live pages, only their current text.
    for (const l of [...live.values()].slice(0, 8)) {
      const b = (await reader.post('/api/v1/bundle', { intent: l.sections[0]!.slice(10, 22).join(' '), budget_tokens: 4000 })).body as Bundle;
      await checkBundle(b, 4000, `churn bundle ${l.path}`, reader);
      for (const s of b.sections) {
        expect(dead.has(s.id)).toBe(false);
        expect(s.path).toBe(live.get(s.id)?.path);
      }
      expect(b.sections[0]?.id).toBe(l.id);
    }

    // A restart on the same data answers the same vector hits.
    const probes = [...live.values()]
      .flatMap((l) => [l.sections[0]!.slice(10, 22).join(' '), l.sections[l.sections.length - 1]!.slice(30, 33).join(' ')])
      .slice(0, 40);
    probes.push('churn part', 'part zzz');
    const snapshot = async (c: Client) => {
      const out: string[][] = [];
      for (const q of probes) out.push((await search(c, q, 'vector')).map((h) => `${h.id} ${h.section} ${h.score.toFixed(4)}`));
      return out;
    };
    const before = await snapshot(reader);
    await stop();
    await start();
    owner = onNode(url, owner);
    keeper = onNode(url, keeper);
    const readerAfter = new Client(url, agent.key);
    await waitForVectors(keeper, 30_000);
    const after = await snapshot(readerAfter);
    for (let q = 0; q < probes.length; q++) expect(after[q], `after restart: ${probes[q]}`).toEqual(before[q]);
    await checkAllFound(readerAfter, 'restarted');
    // The keeper's own session survived the restart too.
    expect((await keeper.get(`/api/v1/nodes/${[...live.keys()][0]}`)).status).toBe(200);
    console.log(`[attack-n ${engine}] own-text vector scores: min ${Math.min(...scores).toFixed(3)}, max ${Math.max(...scores).toFixed(3)}`);
    expect(Math.min(...scores)).toBeGreaterThan(STALE_MAX);
    internal = { ...internal, client: new Client(url, internal.key) };
    conf = { ...conf, client: new Client(url, conf.key) };
  }, 180_000);
});
