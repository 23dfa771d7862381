import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { expectError } from '../support/expect.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type Res, type TestServer } from '../support/server.js';
import { prng } from '../support/random.js';
import type { BundleSection } from '../../src/retrieval/bundle.js';
import { waitForVectors } from '../support/embeddings-server.js';

type Section = BundleSection;

interface Bundle {
  intent: string;
  budget_tokens: number;
  used_tokens: number;
  tokenizer: string;
  sections: Section[];
  markdown: string;
}

const WORDS = [
  'beacon',
  'harbour',
  'signal',
  'rotation',
  'keeper',
  'fog',
  'horn',
  'lamp',
  'lens',
  'tide',
  'rocks',
  'shipping',
  'night',
  'watch',
  'maintenance',
  'schedule',
  'crew',
  'generator',
  'battery',
  'storm',
  'naïve',
  'café',
  'Ελληνικά',
  'déjà',
  'Straße',
  '東京',
  '灯台',
  '管理',
  '保守',
  '夜間',
  '🔦',
  '🚨',
  '⚓️',
  '🌊',
  'ñandú',
  'Ωmega',
  '𝔣𝔬𝔤',
  'e\u0301',
  'ﬁle',
  'мая́к',
  'منارة',
];

/** A long page (about `bytes` UTF-8 bytes): paragraphs that all mention the lighthouse, code fences, unicode, CJK and emoji. */
function longPage(seed: number, title: string, bytes: number): string {
  const rnd = prng(seed);
  const word = () => WORDS[Math.floor(rnd() * WORDS.length)]!;
  let out = `# ${title}\n\n`;
  let part = 0;
  while (Buffer.byteLength(out) < bytes) {
    out += `## Part ${++part}\n\n`;
    for (let p = 0; p < 3; p++) {
      const n = 20 + Math.floor(rnd() * 60);
      out += `The lighthouse ${Array.from({ length: n }, word).join(' ')}.\n\n`;
    }
    if (part % 2 === 0) {
      out += '```ts\n// lighthouse lamp control\n';
      for (let l = 0; l < 8; l++) out += `const lamp${l} = await lighthouse.turn(${Math.floor(rnd() * 1000)}, "${word()}");\n`;
      out += '```\n\n';
    }
    if (part % 3 === 0) out += `灯台の保守と管理について。lighthouse 夜間の点検は毎週行う。${'灯台'.repeat(30)} 🔦🚨🌊⚓️ lighthouse\n\n`;
  }
  return out;
}

const BUDGETS = [200, 201, 250, 500, 1000, 4000, 16000, 64000];

describe.each(testEngines())('context bundle (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let conf: Client; // agent: read and search up to confidential
  let internal: Client; // agent: read and search up to internal
  let searchOnly: Client; // agent: search, no read
  let writeOnly: Client; // agent: write, no read
  let anon: Client;

  const create = async (path: string, content: string) => {
    const res = await owner.post('/api/v1/nodes', { path, content });
    expect(res.status, res.text).toBe(201);
    return res.body as { id: string; path: string; commit_sha: string };
  };
  const bundle = async (c: Client, body: Record<string, unknown>): Promise<Bundle> => {
    const res = await c.post('/api/v1/bundle', body);
    expect(res.status, res.text.slice(0, 400)).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/application\/json/);
    return res.body as Bundle;
  };
  const paths = (b: Bundle) => [...new Set(b.sections.map((x) => x.path))].sort();
  /** The whole of what the caller received: the markdown and every section's text. */
  const everything = (b: Bundle) => [b.markdown.split('\n').slice(1).join('\n'), ...b.sections.map((x) => `${x.heading}\n${x.title}\n${x.text}`)].join('\n');

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url)).client;
    conf = (await createAgentWithKey(owner, [{ action: 'read' }, { action: 'search' }])).client;
    internal = (
      await createAgentWithKey(
        owner,
        [
          { action: 'read', ceiling: 'internal' },
          { action: 'search', ceiling: 'internal' },
        ],
        { ceiling: 'internal' },
      )
    ).client;
    searchOnly = (await createAgentWithKey(owner, [{ action: 'search' }])).client;
    writeOnly = (await createAgentWithKey(owner, [{ action: 'write' }])).client;
    anon = new Client(s.url);
  });
  afterAll(async () => s?.stop());

  it('never exceeds the budget, from 200 to 64,000 tokens, counted with o200k over the markdown it returns', async () => {
    const sizes = [5_000, 20_000, 8_000, 12_000, 16_000, 6_000, 10_000, 20_000];
    for (let i = 0; i < sizes.length; i++) await create(`corpus/long/p${i}.md`, longPage(i + 1, `Lighthouse manual ${i}`, sizes[i]!));
    await create('corpus/short/emoji.md', '# 🔦 lighthouse 🔦\n\n🚨🚨 lighthouse 🌊⚓️ 灯台 👩🏽‍🚀👨‍👩‍👧‍👦 🏳️‍🌈 lighthouse\n');
    await create('corpus/short/fence.md', '# Fence only\n\n```\nlighthouse\n' + 'x = "lighthouse" * 12 # 灯台 🔦\n'.repeat(80) + '```\n');
    await waitForVectors(owner);
    const contents = new Map<string, string>();
    const contentOf = async (id: string) => {
      if (!contents.has(id)) contents.set(id, (await owner.get(`/api/v1/nodes/${id}`)).body.content as string);
      return contents.get(id)!;
    };

    for (const budget of BUDGETS) {
      for (const intent of ['lighthouse', 'lighthouse lamp 灯台 🔦 maintenance']) {
        const b = await bundle(owner, { intent, budget_tokens: budget, scope: 'corpus' });
        const what = `budget ${budget} intent ${intent}`;
        expect(b.budget_tokens, what).toBe(budget);
        expect(b.tokenizer).toBe('o200k_base');
        expect(b.intent).toBe(intent);
        const counted = countTokens(b.markdown);
        expect(counted, what).toBeLessThanOrEqual(budget);
        expect(b.used_tokens, what).toBe(counted);
        expect(b.used_tokens, what).toBeLessThanOrEqual(budget);
        // There is plenty to say: every budget gets at least one section, and small budgets are mostly filled.
        expect(b.sections.length, what).toBeGreaterThan(0);
        if (budget <= 16000) expect(b.used_tokens, what).toBeGreaterThan(budget * 0.5);
        for (const sec of b.sections) {
          expect(sec.path.startsWith('corpus/'), what).toBe(true);
          if (sec.truncated) expect(sec.text.endsWith('\n[…]'), what).toBe(true);
          expect(b.markdown).toContain(sec.text);
          // A section's text is the page's own text (a cut one, a prefix of it): never a broken character.
          const own = sec.truncated ? sec.text.slice(0, -'\n[…]'.length) : sec.text;
          expect(own, `${what}: ${sec.path} ${sec.heading}`).not.toContain('\uFFFD');
          expect((await contentOf(sec.id)).includes(own), `${what}: ${sec.path} ${sec.heading}: ${JSON.stringify(own.slice(-80))}`).toBe(true);
        }
        // The raw markdown answer is counted the same way.
        const md = await owner.post('/api/v1/bundle', { intent, budget_tokens: budget, scope: 'corpus' }, { accept: 'text/markdown' });
        expect(md.status, md.text.slice(0, 300)).toBe(200);
        expect(md.headers.get('content-type')).toMatch(/^text\/markdown/);
        expect(countTokens(md.text), what).toBeLessThanOrEqual(budget);
        expect(md.text, what).not.toContain('\uFFFD');
        expect(md.text).toBe(b.markdown);
      }
    }
    // The biggest budget holds more than a small one.
    const big = await bundle(owner, { intent: 'lighthouse', budget_tokens: 64000, scope: 'corpus' });
    const small = await bundle(owner, { intent: 'lighthouse', budget_tokens: 1000, scope: 'corpus' });
    expect(big.sections.length).toBeGreaterThan(small.sections.length);
    expect(big.used_tokens).toBeGreaterThan(16000);
  });

  it('cuts a section to fit without ever breaking a character, in this bundle or the next one', async () => {
    // One long line of four-byte characters: a cut by tokens lands inside a character at some budgets.
    const a = await create('cut/unicorn.md', `# Unicorn stable\n\n${'🦄🐉 '.repeat(1500)}\n`);
    const b = await create('cut/dragon.md', `# Dragon lair\n\n${'灯台の🐉保守 '.repeat(1500)}\n`);
    await waitForVectors(owner);
    const bodies = new Map([
      [a.id, (await owner.get(`/api/v1/nodes/${a.id}`)).body.content as string],
      [b.id, (await owner.get(`/api/v1/nodes/${b.id}`)).body.content as string],
    ]);
    for (let budget = 300; budget < 330; budget++) {
      for (const intent of ['unicorn stable', 'dragon lair']) {
        const r = await bundle(owner, { intent, budget_tokens: budget, scope: 'cut' });
        expect(r.used_tokens).toBeLessThanOrEqual(budget);
        expect(r.sections.length, `${intent} ${budget}`).toBeGreaterThan(0);
        for (const sec of r.sections) {
          const own = sec.truncated ? sec.text.slice(0, -'\n[…]'.length) : sec.text;
          expect(own, `${intent} ${budget}: ${sec.path}`).not.toContain('\uFFFD');
          expect(bodies.get(sec.id)!.includes(own), `${intent} ${budget}: ${sec.path} ${JSON.stringify(own.slice(0, 40))}`).toBe(true);
        }
      }
    }
  });

  it('counts a tokenizer’s special-token text in a page as text (the bundle answers, within budget)', async () => {
    // `<|endoftext|>` and friends are ordinary characters in a page; the tokenizer's default
    // refuses them with an exception, which turned every bundle reaching such a page into a 500.
    const specials = '<|endoftext|> <|fim_prefix|> <|endofprompt|>';
    await create('special/tokens.md', `# Tokenizer markers\n\nThe marker ${specials} ends a document in training data.\n`);
    for (const budget of [200, 4000]) {
      const r = await bundle(owner, { intent: 'tokenizer markers training data', budget_tokens: budget, scope: 'special' });
      expect(r.sections.map((x) => x.path)).toContain('special/tokens.md');
      expect(r.markdown).toContain(specials);
      expect(r.used_tokens).toBe(countTokens(r.markdown, { disallowedSpecial: new Set() }));
      expect(r.used_tokens).toBeLessThanOrEqual(budget);
    }
    const md = await owner.get(`/api/v1/bundle?${new URLSearchParams({ intent: 'tokenizer markers', scope: 'special' })}`, { accept: 'text/markdown' });
    expect(md.status, md.text.slice(0, 200)).toBe(200);
    expect(md.text).toContain(specials);
  });

  it('bundles a page holding one very long line (no spaces) promptly, within budget', async () => {
    // One 40,000-character line of CJK is one piece for the tokenizer: its library merged it in
    // quadratic time (tens of seconds a count, the node frozen), and the bundle counts and cuts it.
    const line = Array.from({ length: 40_000 }, (_, i) => '灯台の保守管理夜間点検毎週行う'[(i * 7) % 15]).join('');
    await create('longline/cjk.md', `# Lighthouse log\n\n${line}\n`);
    for (const budget of [500, 64000]) {
      const r = await bundle(owner, { intent: 'lighthouse log', budget_tokens: budget, scope: 'longline' });
      expect(r.sections.map((x) => x.path)).toContain('longline/cjk.md');
      expect(r.used_tokens).toBeLessThanOrEqual(budget);
    }
    expect((await owner.get('/healthz')).status).toBe(200);
  });

  it('gives every section its source: path, id and the page’s current commit, and a source line in the markdown', async () => {
    const a = await create('src/one/kestrel.md', '# Kestrel notes\n\nThe kestrel hovers over the field.\n\n## Feeding\n\nA kestrel eats voles.\n');
    const b = await create('src/two/kestrel-b.md', '# Other kestrel\n\nAnother kestrel page.\n');
    // A later commit: the bundle names the newest one.
    const up = await owner.put(`/api/v1/nodes/${b.id}`, { content: '# Other kestrel\n\nAnother kestrel page, edited.\n' });
    expect(up.status, up.text).toBe(200);
    expect(up.body.commit_sha).not.toBe(b.commit_sha);
    await waitForVectors(owner);
    const r = await bundle(owner, { intent: 'kestrel', scope: 'src' });
    expect(paths(r)).toEqual(['src/one/kestrel.md', 'src/two/kestrel-b.md']);
    // One source line per page (its sections sit under it), citing the commit by its first 12 hex digits (issue 13).
    const lines = r.markdown.split('\n').filter((l) => l.startsWith('source: '));
    expect(lines).toHaveLength(new Set(r.sections.map((x) => x.id)).size);
    for (const sec of r.sections) {
      const node = await owner.get(`/api/v1/nodes/${sec.id}`);
      expect(node.status).toBe(200);
      expect(sec.path).toBe(node.body.path);
      expect(sec.commit_sha).toBe(node.body.commit_sha);
      expect(sec.title).toBe(node.body.title);
      expect(sec.state).toBe('active');
      expect(sec.via).toBe('rank');
      expect(sec.tokens).toBeGreaterThan(0);
      expect(
        lines.some((l) => l.includes(sec.path) && l.includes(sec.id) && l.includes(`commit ${sec.commit_sha.slice(0, 12)})`)),
        sec.path,
      ).toBe(true);
    }
    expect(r.sections.find((x) => x.path === 'src/one/kestrel.md')!.id).toBe(a.id);
    expect(r.markdown.startsWith('# ')).toBe(true);
  });

  it('ranks the section answering the intent first and keeps one copy of near-duplicate sections', async () => {
    await create(
      'rank/ops/rotate.md',
      '# Operations\n\nGeneral notes about the platform.\n\n## Rotating the osprey certificates\n\nTo rotate the osprey certificates run `osprey rotate --all`, then restart the gateway so it loads the new certificates.\n',
    );
    await create('rank/ops/mention.md', '# Osprey overview\n\nOsprey is our gateway. It has many certificates and a long history.\n');
    await create('rank/ops/other.md', '# Misc\n\nThe osprey team meets on Mondays.\n');
    const dup =
      'The heron ingest pipeline copies every night the warehouse tables into the lake, checks the row counts against the source, and pages the data team when a count differs by more than one percent over two runs in a row.';
    await create('rank/dup/first.md', `# Heron pipeline\n\n${dup}\n`);
    await create('rank/dup/second.md', `# Heron pipeline copy\n\n${dup}\n`);
    await waitForVectors(owner);

    const r = await bundle(owner, { intent: 'rotate osprey certificates', scope: 'rank' });
    expect(r.sections[0]!.path).toBe('rank/ops/rotate.md');
    expect(r.sections[0]!.heading).toBe('Rotating the osprey certificates');
    expect(r.sections[0]!.text).toContain('osprey rotate --all');
    expect(r.markdown.indexOf('osprey rotate --all')).toBeLessThan(r.markdown.indexOf('Osprey is our gateway') >>> 0);

    const d = await bundle(owner, { intent: 'heron ingest pipeline row counts', scope: 'rank' });
    const copies = d.sections.filter((x) => x.text.includes('copies every night the warehouse tables'));
    expect(copies).toHaveLength(1);
    expect(d.markdown.split('copies every night the warehouse tables').length - 1).toBe(1);
    expect(['rank/dup/first.md', 'rank/dup/second.md']).toContain(copies[0]!.path);
  });

  it('keeps to the scope (a Space, or space/folder on segment boundaries)', async () => {
    await create('alpha/x/a.md', '# A\n\nThe wombat digs.\n');
    await create('alpha/x/deep/b.md', '# B\n\nThe wombat sleeps.\n');
    await create('alpha/xy/c.md', '# C\n\nThe wombat eats.\n');
    await create('alpha/d.md', '# D\n\nThe wombat runs.\n');
    await create('beta/x/e.md', '# E\n\nThe wombat swims.\n');
    await waitForVectors(owner);
    const all = ['alpha/d.md', 'alpha/x/a.md', 'alpha/x/deep/b.md', 'alpha/xy/c.md', 'beta/x/e.md'];
    expect(paths(await bundle(owner, { intent: 'wombat' })).filter((p) => all.includes(p))).toEqual(all);
    expect(paths(await bundle(owner, { intent: 'wombat', scope: 'alpha' }))).toEqual(['alpha/d.md', 'alpha/x/a.md', 'alpha/x/deep/b.md', 'alpha/xy/c.md']);
    expect(paths(await bundle(owner, { intent: 'wombat', scope: 'alpha/x' }))).toEqual(['alpha/x/a.md', 'alpha/x/deep/b.md']);
    expect(paths(await bundle(owner, { intent: 'wombat', scope: '/alpha/x/' }))).toEqual(['alpha/x/a.md', 'alpha/x/deep/b.md']);
    expect(paths(await bundle(owner, { intent: 'wombat', scope: 'alpha/x/deep' }))).toEqual(['alpha/x/deep/b.md']);
    expect(paths(await bundle(owner, { intent: 'wombat', scope: 'beta' }))).toEqual(['beta/x/e.md']);
    // A scope naming no Space or folder the caller can read is 404 unknown_scope naming those it can (issue 13).
    for (const scope of ['gamma', 'alpha/nope']) {
      const res = await owner.post('/api/v1/bundle', { intent: 'wombat', scope });
      expectError(res, 404, 'unknown_scope');
      expect(res.body.error.message).toMatch(/Scopes you can use: .*alpha, beta/);
    }
    expectError(await owner.get('/api/v1/bundle?intent=wombat&scope=gamma'), 404, 'unknown_scope');
    // An empty Space is a scope: its bundle is empty, still within the budget, and says what it is for.
    expect((await owner.post('/api/v1/spaces', { id: 'gamma', name: 'Gamma' })).status).toBe(201);
    const empty = await bundle(owner, { intent: 'wombat', scope: 'gamma', budget_tokens: 200 });
    expect(empty.sections).toEqual([]);
    expect(empty.used_tokens).toBeLessThanOrEqual(200);
    expect(empty.markdown).toContain('wombat');
  });

  it('leaves archived pages out unless include_archived', async () => {
    await create('arch/live.md', '# Live\n\nThe narwhal tusk.\n');
    const old = await create('arch/old.md', '---\nstate: archived\narchived_reason: stale\n---\n# Old\n\nThe narwhal migration.\n');
    const live2 = await create('arch/later.md', '# Later\n\nThe narwhal later archived.\n');
    expect((await owner.post(`/api/v1/nodes/${live2.id}/archive`, { reason: 'stale' })).status).toBe(200);
    await waitForVectors(owner);
    expect(paths(await bundle(owner, { intent: 'narwhal', scope: 'arch' }))).toEqual(['arch/live.md']);
    const all = await bundle(owner, { intent: 'narwhal', scope: 'arch', include_archived: true });
    expect(paths(all)).toEqual(['arch/later.md', 'arch/live.md', 'arch/old.md']);
    expect(all.sections.find((x) => x.id === old.id)!.state).toBe('archived');
    const get = await owner.get('/api/v1/bundle?intent=narwhal&scope=arch&include_archived=true');
    expect(get.status).toBe(200);
    expect(paths(get.body)).toEqual(['arch/later.md', 'arch/live.md', 'arch/old.md']);
  });

  it('follows links with include_links, but not links in hidden blocks nor to pages above the ceiling', async () => {
    await create(
      'links/src/hub.md',
      [
        '# Quetzal hub',
        '',
        'The quetzal field guide. See [[Capybara Facts]] and [[Tapir Secrets]] and [[Agouti Notes]].',
        '',
        '::: secret',
        'Also [[Sloth Ledger]].',
        ':::',
        '',
        '::: confidential',
        'And [[Coati Memo]].',
        ':::',
        '',
      ].join('\n'),
    );
    await create('links/dst/capybara.md', '---\ntitle: Capybara Facts\nsensitivity: public\n---\nCapybaras graze by the river in quiet groups.\n');
    await create('links/dst/tapir.md', '---\ntitle: Tapir Secrets\nsensitivity: secret\n---\nTapirs browse under the forest canopy.\n');
    await create('links/dst/agouti.md', '---\ntitle: Agouti Notes\nsensitivity: confidential\n---\nAgoutis bury seeds for later.\n');
    await create('links/dst/sloth.md', '---\ntitle: Sloth Ledger\n---\nSloths hang from branches all day.\n');
    await create('links/dst/coati.md', '---\ntitle: Coati Memo\n---\nCoatis forage with their long snouts.\n');
    await waitForVectors(owner);

    const viaLink = (b: Bundle) =>
      b.sections
        .filter((x) => x.via === 'link')
        .map((x) => x.path)
        .sort();
    const without = await bundle(owner, { intent: 'quetzal', scope: 'links' });
    expect(paths(without)).toEqual(['links/src/hub.md']);
    expect(viaLink(without)).toEqual([]);

    const o = await bundle(owner, { intent: 'quetzal', scope: 'links', include_links: true });
    expect(o.sections[0]!.path).toBe('links/src/hub.md');
    expect(o.sections[0]!.via).toBe('rank');
    expect(viaLink(o)).toEqual(['links/dst/agouti.md', 'links/dst/capybara.md', 'links/dst/coati.md', 'links/dst/sloth.md', 'links/dst/tapir.md']);
    const capy = o.sections.find((x) => x.path === 'links/dst/capybara.md')!;
    expect(capy.text).toContain('Capybaras graze');
    expect(o.markdown).toContain('Capybaras graze');

    // Confidential: the secret block's link and the secret page do not exist for it.
    const c = await bundle(conf, { intent: 'quetzal', scope: 'links', include_links: true });
    expect(viaLink(c)).toEqual(['links/dst/agouti.md', 'links/dst/capybara.md', 'links/dst/coati.md']);
    expect(everything(c)).not.toMatch(/Sloths hang|Tapirs browse/);

    // Internal: neither block's links, nor the confidential page.
    const i = await bundle(internal, { intent: 'quetzal', scope: 'links', include_links: true });
    expect(viaLink(i)).toEqual(['links/dst/capybara.md']);
    expect(everything(i)).not.toMatch(/Sloths hang|Tapirs browse|Agoutis bury|Coatis forage|Coati Memo/);
    expect(paths(i)).toEqual(['links/dst/capybara.md', 'links/src/hub.md']);

    // Linked pages outside the scope are not followed into.
    const scoped = await bundle(owner, { intent: 'quetzal', scope: 'links/src', include_links: true });
    expect(paths(scoped)).toEqual(['links/src/hub.md']);
  });

  it('never gives an agent a page or block above its read ceiling', async () => {
    await create(
      'lvl/open.md',
      [
        '# Puffin colony',
        '',
        'The puffin colony nests on the cliffs.',
        '',
        '::: confidential',
        'The puffin census uses the marigold protocol.',
        ':::',
        '',
        'Between the blocks the puffin dives.',
        '',
        '::: secret',
        'The puffin vault code is swordfish.',
        ':::',
        '',
        '## Puffin feeding',
        '',
        '::: secret',
        'Puffin feeding grounds: zanzibar coordinates.',
        ':::',
        '',
      ].join('\n'),
    );
    await create('lvl/conf.md', '---\nsensitivity: confidential\n---\n# Puffin budget\n\nThe puffin budget is tangerine.\n');
    await create('lvl/secret.md', '---\nsensitivity: secret\n---\n# Puffin keys\n\nThe puffin keys are obsidian.\n');
    await waitForVectors(owner);

    const intents = [
      'puffin',
      'puffin census marigold protocol',
      'puffin vault code swordfish',
      'zanzibar coordinates feeding',
      'puffin budget tangerine',
      'puffin keys obsidian',
    ];
    const o = await bundle(owner, { intent: 'puffin', scope: 'lvl', budget_tokens: 8000 });
    expect(paths(o)).toEqual(['lvl/conf.md', 'lvl/open.md', 'lvl/secret.md']);
    expect(everything(o)).toMatch(/swordfish/);
    expect(everything(o)).toMatch(/marigold/);

    for (const intent of intents) {
      for (const scope of ['lvl', undefined]) {
        const body = { intent, budget_tokens: 8000, ...(scope ? { scope } : {}) };
        const c = await bundle(conf, body);
        expect(
          paths(c)
            .filter((p) => p.startsWith('lvl/'))
            .every((p) => p !== 'lvl/secret.md'),
          intent,
        ).toBe(true);
        expect(everything(c), intent).not.toMatch(/swordfish|zanzibar|obsidian|vault code/i);
        const i = await bundle(internal, body);
        expect(
          paths(i)
            .filter((p) => p.startsWith('lvl/'))
            .every((p) => p === 'lvl/open.md'),
          intent,
        ).toBe(true);
        expect(everything(i), intent).not.toMatch(/swordfish|zanzibar|obsidian|marigold|tangerine|census|vault code/i);
        for (const accept of ['text/markdown']) {
          const md = await internal.post('/api/v1/bundle', body, { accept });
          expect(md.status).toBe(200);
          expect(md.text.startsWith(`# Context: ${intent}\n`)).toBe(true);
          expect(md.text.split('\n').slice(1).join('\n')).not.toMatch(/swordfish|zanzibar|obsidian|marigold|tangerine/i);
        }
      }
    }
    // What they may see, they get.
    expect(everything(await bundle(conf, { intent: 'puffin census marigold', scope: 'lvl' }))).toMatch(/marigold/);
    expect(paths(await bundle(conf, { intent: 'puffin budget', scope: 'lvl' }))).toContain('lvl/conf.md');
    expect(everything(await bundle(internal, { intent: 'puffin colony cliffs', scope: 'lvl' }))).toMatch(/nests on the cliffs/);

    // No read grant: 403, even with a search grant.
    expectError(await searchOnly.post('/api/v1/bundle', { intent: 'puffin' }), 403, 'forbidden');
    expectError(await searchOnly.get('/api/v1/bundle?intent=puffin'), 403, 'forbidden');
    expectError(await writeOnly.post('/api/v1/bundle', { intent: 'puffin' }), 403, 'forbidden');
  });

  it('answers bad input with 400 (never 500), no credentials and dead keys with 401', async () => {
    const bad: [unknown, string][] = [
      [{ intent: '' }, 'invalid_intent'],
      [{ intent: '   \n\t ' }, 'invalid_intent'],
      [{}, 'invalid_request'],
      [{ intent: 'x', budget_tokens: 199 }, 'invalid_request'],
      [{ intent: 'x', budget_tokens: 64001 }, 'invalid_request'],
      [{ intent: 'x', budget_tokens: 1.5 }, 'invalid_request'],
      [{ intent: 'x', budget_tokens: 'abc' }, 'invalid_request'],
      [{ intent: 'x', budget_tokens: '500' }, 'invalid_request'],
      [{ intent: 'x', budget_tokens: -1 }, 'invalid_request'],
      [{ intent: 'x', budget_tokens: null }, 'invalid_request'],
      [{ intent: 'x', budget_tokens: 1e300 }, 'invalid_request'],
      [{ intent: 'x', surprise: true }, 'invalid_request'],
      [{ intent: 42 }, 'invalid_request'],
      [{ intent: ['a'] }, 'invalid_request'],
      [{ intent: 'x', include_links: 'yes' }, 'invalid_request'],
      [{ intent: 'x', include_archived: 1 }, 'invalid_request'],
      [{ intent: 'x', scope: 5 }, 'invalid_request'],
      [{ intent: 'x', scope: 'eng/\u0000' }, 'invalid_request'],
      [{ intent: 'x'.repeat(4001) }, 'invalid_request'],
      [{ intent: 'x', scope: 'eng/../hr' }, 'invalid_scope'],
      [{ intent: 'x', scope: '..' }, 'invalid_scope'],
      [{ intent: 'x', scope: 'eng/./ops' }, 'invalid_scope'],
      [{ intent: 'x', scope: 'eng//ops' }, 'invalid_scope'],
      [[], 'invalid_request'],
      ['just a string', 'invalid_request'],
      [null, 'invalid_request'],
    ];
    for (const [body, code] of bad) {
      const res = await owner.request('POST', '/api/v1/bundle', { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
      expectError(res, 400, code);
    }
    for (const raw of ['{', '{"intent": "x",}', 'intent=x', '\u0000']) {
      const res = await owner.request('POST', '/api/v1/bundle', { body: raw, headers: { 'content-type': 'application/json' } });
      expect(res.status, `${raw}: ${res.text}`).toBe(400);
      expectError(res, 400, ['invalid_json', 'invalid_request']);
    }
    const badGet: [string, string][] = [
      ['', 'invalid_request'],
      ['intent=', 'invalid_intent'],
      ['intent=x&budget_tokens=199', 'invalid_request'],
      ['intent=x&budget_tokens=64001', 'invalid_request'],
      ['intent=x&budget_tokens=1.5', 'invalid_request'],
      ['intent=x&budget_tokens=abc', 'invalid_request'],
      ['intent=x&budget_tokens=', 'invalid_request'],
      ['intent=x&include_links=maybe', 'invalid_request'],
      ['intent=x&scope=eng%2F..%2Fhr', 'invalid_scope'],
      ['intent=x&scope=a%00b', 'invalid_request'],
    ];
    for (const [q, code] of badGet) {
      const res = await owner.get(`/api/v1/bundle?${q}`);
      expect(res.status, `${q}: ${res.text}`).not.toBe(500);
      expectError(res, 400, code);
    }
    // The edges themselves are fine.
    expect((await bundle(owner, { intent: 'x', budget_tokens: 200 })).budget_tokens).toBe(200);
    expect((await bundle(owner, { intent: 'x', budget_tokens: 64000 })).budget_tokens).toBe(64000);
    expect((await bundle(owner, { intent: 'x' })).budget_tokens).toBe(4000);

    expectError(await anon.post('/api/v1/bundle', { intent: 'x' }), 401, 'unauthorized');
    expectError(await anon.get('/api/v1/bundle?intent=x'), 401, 'unauthorized');
    expectError(await new Client(s.url, 'ck_nonsense').post('/api/v1/bundle', { intent: 'x' }), 401, 'invalid_token');
    const a = await createAgentWithKey(owner, [{ action: 'read' }], { name: 'short-lived' });
    expect((await a.client.post('/api/v1/bundle', { intent: 'x' })).status).toBe(200);
    const rev = await owner.delete(`/api/v1/principals/${a.id}/tokens/${a.keyId}`);
    expect(rev.status, rev.text).toBe(200);
    expectError(await a.client.post('/api/v1/bundle', { intent: 'x' }), 401, 'invalid_token');
    expectError(await a.client.get('/api/v1/bundle?intent=x'), 401, 'invalid_token');
  });

  it('GET and POST give the same bundle, as JSON and as markdown', async () => {
    await create('same/a.md', '# Gecko care\n\nThe gecko needs warmth. See [[Cricket menu]].\n');
    await create('same/b.md', '---\ntitle: Cricket menu\n---\nMealworms on Sundays.\n');
    await create('same/c.md', '---\nstate: archived\narchived_reason: stale\n---\n# Old gecko\n\nThe gecko once lived here.\n');
    await waitForVectors(owner);
    const cases: Record<string, unknown>[] = [
      { intent: 'gecko warmth' },
      { intent: 'gecko', budget_tokens: 300, scope: 'same' },
      { intent: 'gecko', scope: 'same', include_links: true, include_archived: true },
    ];
    for (const body of cases) {
      const post = await owner.post('/api/v1/bundle', body);
      const q = new URLSearchParams(Object.entries(body).map(([k, v]) => [k, String(v)])).toString();
      const get = await owner.get(`/api/v1/bundle?${q}`);
      expect(post.status).toBe(200);
      expect(get.status).toBe(200);
      expect(get.body).toEqual(post.body);
      const getMd = await owner.get(`/api/v1/bundle?${q}`, { accept: 'text/markdown' });
      expect(getMd.headers.get('content-type')).toMatch(/^text\/markdown/);
      expect(getMd.text).toBe(post.body.markdown);
    }
    const withLinks = await owner.get('/api/v1/bundle?intent=gecko&scope=same&include_links=true&include_archived=true');
    expect(withLinks.body.sections.map((x: Section) => x.path)).toContain('same/c.md');
    expect(withLinks.body.sections.find((x: Section) => x.path === 'same/b.md')?.via).toBe('link');
    // JSON wins when preferred.
    const json = await owner.get('/api/v1/bundle?intent=gecko', { accept: 'application/json, text/markdown' });
    expect(json.headers.get('content-type')).toMatch(/application\/json/);
  });
});

describe.each(testEngines())('context bundle rate limit (%s)', (engine) => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer(engine, { RATE_LIMITS: 'on', RATE_LIMIT_BUNDLE_PER_MIN: '3' });
  });
  afterAll(async () => s?.stop());

  it('the 4th bundle of a principal within a minute is 429 rate_limited with Retry-After; others are not limited', async () => {
    const owner = (await signupHuman(s.url)).client;
    const a = (await createAgentWithKey(owner, [{ action: 'read' }], { name: 'a' })).client;
    const b = (await createAgentWithKey(owner, [{ action: 'read' }], { name: 'b' })).client;
    const got: Res[] = [];
    got.push(await a.post('/api/v1/bundle', { intent: 'anything' }));
    got.push(await a.get('/api/v1/bundle?intent=anything'));
    got.push(await a.post('/api/v1/bundle', { intent: 'anything' }, { accept: 'text/markdown' }));
    expect(got.map((r) => r.status)).toEqual([200, 200, 200]);
    const r = await a.post('/api/v1/bundle', { intent: 'anything' });
    expectError(r, 429, 'rate_limited');
    const retry = r.headers.get('retry-after');
    expect(retry).toMatch(/^\d+$/);
    expect(Number(retry)).toBeGreaterThanOrEqual(1);
    expect(Number(retry)).toBeLessThanOrEqual(60);
    expectError(await a.get('/api/v1/bundle?intent=anything'), 429, 'rate_limited');
    // The limit is the bundle's own: other requests of the same agent still pass, and another agent has its own bucket.
    expect((await a.get('/api/v1/whoami')).status).toBe(200);
    expect((await b.post('/api/v1/bundle', { intent: 'anything' })).status).toBe(200);
  });
});
