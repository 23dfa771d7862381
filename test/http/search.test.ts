import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reindexAll } from '../../src/retrieval/indexer.js';
import { openStore } from '../../src/store/db.js';
import { createTestDatabase, testEngines } from '../support/engines.js';
import { expectError } from '../support/expect.js';
import { Client, createAgentWithKey, signupHuman, startServerOn, startTestServer, type TestServer } from '../support/server.js';
import { waitForVectors } from '../support/embeddings-server.js';
import type { SearchHit } from '../../src/retrieval/search.js';

const enc = encodeURIComponent;

type Hit = SearchHit;

/** Search, backlinks and related over real HTTP. */
describe.each(testEngines())('search, backlinks and related (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let conf: Client; // agent: read and search up to confidential
  let internal: Client; // agent: read and search up to internal
  let hrOnly: Client; // agent: search over the hr Space only
  let noSearch: Client; // agent: read, no search

  const search = async (c: Client, params: Record<string, string>) => {
    const res = await c.get(`/api/v1/search?${new URLSearchParams(params).toString()}`);
    expect(res.status, res.text.slice(0, 300)).toBe(200);
    return res.body as { mode: string; mode_used: string; note?: string; results: Hit[] };
  };
  const paths = (r: { results: Hit[] }) => r.results.map((h) => h.path).sort();
  const create = async (path: string, content: string, by: Client = owner) => {
    const res = await by.post('/api/v1/nodes', { path, content });
    expect(res.status, res.text).toBe(201);
    return res.body as { id: string; path: string; content_hash: string };
  };

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
    hrOnly = (await createAgentWithKey(owner, [{ action: 'search', scope: 'hr' }])).client;
    noSearch = (await createAgentWithKey(owner, [{ action: 'read' }])).client;
  });
  afterAll(async () => s?.stop());

  it('filters exactly by space, cluster (on segment boundaries) and tags', async () => {
    await create('eng/ops/a.md', '---\ntags: [ops, deploy]\n---\n# Alpha\n\nThe zebrafish runbook.\n');
    await create('eng/ops/sub/b.md', '---\ntags: [ops]\n---\n# Beta\n\nzebrafish notes.\n');
    await create('eng/opsx/c.md', '---\ntags: [deploy]\n---\n# Gamma\n\nzebrafish elsewhere.\n');
    await create('hr/people/d.md', '# Delta\n\nzebrafish in hr.\n');
    expect(paths(await search(owner, { q: 'zebrafish', mode: 'fts' }))).toEqual(['eng/ops/a.md', 'eng/ops/sub/b.md', 'eng/opsx/c.md', 'hr/people/d.md']);
    expect(paths(await search(owner, { q: 'zebrafish', space: 'eng' }))).toHaveLength(3);
    expect(paths(await search(owner, { q: 'zebrafish', cluster: 'eng/ops' }))).toEqual(['eng/ops/a.md', 'eng/ops/sub/b.md']);
    expect(paths(await search(owner, { q: 'zebrafish', space: 'eng', cluster: 'ops' }))).toEqual(['eng/ops/a.md', 'eng/ops/sub/b.md']);
    expect(paths(await search(owner, { q: 'zebrafish', cluster: 'eng/ops/sub' }))).toEqual(['eng/ops/sub/b.md']);
    expect(paths(await search(owner, { q: 'zebrafish', tags: 'ops' }))).toEqual(['eng/ops/a.md', 'eng/ops/sub/b.md']);
    expect(paths(await search(owner, { q: 'zebrafish', tags: 'ops,deploy' }))).toEqual(['eng/ops/a.md']);
    const repeated = await owner.get('/api/v1/search?q=zebrafish&tags=deploy&tags=ops');
    expect(repeated.body.results.map((h: Hit) => h.path)).toEqual(['eng/ops/a.md']);
    expect((await search(owner, { q: 'zebrafish', tags: 'nosuchtag' })).results).toEqual([]);
    expect((await search(owner, { q: 'zebrafish', limit: '2' })).results).toHaveLength(2);
    // One result per page, with the record's fields.
    const one = (await search(owner, { q: 'zebrafish runbook' })).results[0]!;
    expect(one).toMatchObject({ path: 'eng/ops/a.md', title: 'Alpha', state: 'active', section: 'Alpha' });
    expect(one.id).toMatch(/^pg_/);
    expect(one.snippet).toContain('zebrafish');
    expect(one.score).toBeGreaterThan(0);
  });

  it('ranks a title hit first and stems words', async () => {
    await create('eng/rank/title.md', '# Quasar deployment\n\nSomething else entirely.\n');
    await create('eng/rank/body.md', '# Other\n\nWe talk about a quasar once.\n');
    const r = await search(owner, { q: 'quasar' });
    expect(r.results[0]!.path).toBe('eng/rank/title.md');
    expect(paths(await search(owner, { q: 'deploying quasars' }))).toContain('eng/rank/title.md');
  });

  it('ranks by vectors in vector mode, fuses in hybrid, and forgives typos that keyword search misses', async () => {
    await waitForVectors(owner);
    const h = await search(owner, { q: 'zebrafish runbook', mode: 'hybrid' });
    expect(h).toMatchObject({ mode: 'hybrid', mode_used: 'hybrid' });
    expect(h.note).toBeUndefined();
    expect(h.results[0]!.path).toBe('eng/ops/a.md');
    const v = await search(owner, { q: 'zebrafish runbook', mode: 'vector' });
    expect(v).toMatchObject({ mode: 'vector', mode_used: 'vector' });
    expect(v.results[0]!.path).toBe('eng/ops/a.md');
    expect(v.results[0]!.score).toBeGreaterThan(0.2);
    // A misspelt word: keyword search finds nothing, the vector list still does.
    expect((await search(owner, { q: 'zebrafsh runbok', mode: 'fts' })).results).toEqual([]);
    expect((await search(owner, { q: 'zebrafsh runbok', mode: 'hybrid' })).results[0]!.path).toBe('eng/ops/a.md');
    // Filters hold in every mode.
    for (const mode of ['vector', 'hybrid']) {
      expect(paths(await search(owner, { q: 'zebrafish', mode, cluster: 'eng/ops/sub' }))).toEqual(['eng/ops/sub/b.md']);
      expect(paths(await search(owner, { q: 'zebrafish', mode, tags: 'ops,deploy' }))).toEqual(['eng/ops/a.md']);
    }
    // The default is hybrid (the MCP tool's mode).
    expect((await search(owner, { q: 'zebrafish' })).mode).toBe('hybrid');
  });

  it('never shows a page above the caller’s ceiling or outside its search grant', async () => {
    await create('eng/levels/conf.md', '---\nsensitivity: confidential\n---\n# Quokka plans\n\nThe quokka budget.\n');
    await create('eng/levels/secret.md', '---\nsensitivity: secret\n---\n# Quokka vault\n\nquokka secrets.\n');
    await create('hr/levels/quokka.md', '# HR quokka\n\nquokka policy.\n');
    expect(paths(await search(owner, { q: 'quokka' }))).toEqual(['eng/levels/conf.md', 'eng/levels/secret.md', 'hr/levels/quokka.md']);
    expect(paths(await search(conf, { q: 'quokka' }))).toEqual(['eng/levels/conf.md', 'hr/levels/quokka.md']);
    expect(paths(await search(internal, { q: 'quokka' }))).toEqual(['hr/levels/quokka.md']);
    // A word only in the title of an invisible page finds nothing either.
    expect((await search(internal, { q: 'vault' })).results.filter((h) => h.path.startsWith('eng/levels'))).toEqual([]);
    expect(paths(await search(hrOnly, { q: 'quokka' }))).toEqual(['hr/levels/quokka.md']);
    expectError(await noSearch.get('/api/v1/search?q=quokka'), 403, 'forbidden');
  });

  it('never lets a block above the ceiling match or reach a snippet', async () => {
    const content = [
      '---',
      'title: Marmot runbook',
      '---',
      '# Marmot runbook',
      '',
      'The marmot service restarts nightly.',
      '::: secret',
      'The swordfish password unlocks the marmot vault.',
      ':::',
      'After the block the marmot keeps running.',
      '',
      '## Recovery',
      '',
      '::: confidential',
      'Call the pelican hotline for marmot recovery.',
      ':::',
      '',
    ].join('\n');
    await create('eng/redact/marmot.md', content);
    // Owner (secret) finds and sees everything.
    const o = await search(owner, { q: 'swordfish' });
    expect(paths(await search(owner, { q: 'swordfish', mode: 'fts' }))).toEqual(['eng/redact/marmot.md']);
    expect(o.results[0]!.path).toBe('eng/redact/marmot.md');
    expect(o.results[0]!.snippet).toContain('swordfish');
    // Confidential: the secret block does not exist for it.
    await waitForVectors(owner);
    expect((await search(conf, { q: 'swordfish', mode: 'fts' })).results).toEqual([]);
    expect((await search(conf, { q: 'password unlocks', mode: 'fts' })).results).toEqual([]);
    // Vectors of a hidden block never bring its page back.
    for (const mode of ['vector', 'hybrid']) {
      for (const q of ['swordfish', 'swordfish password unlocks vault', 'pelican hotline']) {
        const r = await search(conf, { q, mode });
        if (q === 'pelican hotline') continue; // confidential: conf sees that block
        expect(paths(r), `${mode} ${q}`).not.toContain('eng/redact/marmot.md');
      }
    }
    for (const q of ['marmot', 'marmot swordfish', 'swordfish marmot vault', 'marmot runbook', 'pelican', 'vault', 'recovery marmot']) {
      for (const mode of ['fts', 'hybrid', 'vector']) {
        const r = await search(conf, { q, mode });
        for (const h of r.results) {
          expect(h.snippet, q).not.toMatch(/swordfish|password/i);
        }
      }
    }
    expect(paths(await search(conf, { q: 'marmot swordfish', mode: 'fts' }))).toEqual(['eng/redact/marmot.md']);
    expect(paths(await search(conf, { q: 'pelican', mode: 'fts' }))).toEqual(['eng/redact/marmot.md']);
    expect((await search(conf, { q: 'pelican' })).results[0]!.path).toBe('eng/redact/marmot.md');
    // Internal: neither block; the heading of a hidden section is not shown either.
    expect((await search(internal, { q: 'pelican', mode: 'fts' })).results).toEqual([]);
    for (const mode of ['vector', 'hybrid']) expect(paths(await search(internal, { q: 'pelican hotline', mode }))).not.toContain('eng/redact/marmot.md');
    for (const q of ['marmot', 'marmot recovery pelican swordfish']) {
      for (const mode of ['fts', 'hybrid', 'vector']) {
        for (const h of (await search(internal, { q, mode })).results) expect(h.snippet).not.toMatch(/swordfish|pelican|password|hotline/i);
      }
    }
  });

  it('leaves archived pages out unless asked', async () => {
    await create('eng/arch/live.md', '# Live narwhal\n\nnarwhal.\n');
    await create('eng/arch/old.md', '---\nstate: archived\narchived_reason: stale\n---\n# Old narwhal\n\nnarwhal.\n');
    expect(paths(await search(owner, { q: 'narwhal' }))).toEqual(['eng/arch/live.md']);
    const all = await search(owner, { q: 'narwhal', include_archived: 'true' });
    expect(paths(all)).toEqual(['eng/arch/live.md', 'eng/arch/old.md']);
    expect(all.results.find((h) => h.path === 'eng/arch/old.md')!.state).toBe('archived');
  });

  it('keeps the index current through update, move, archive, restore and delete', async () => {
    const health = async () => (await owner.get('/healthz')).body.indexed_at as string;
    const p = await create('eng/life/okapi.md', '# Okapi\n\nokapi facts.\n');
    let at = await health();
    expect(paths(await search(owner, { q: 'okapi' }))).toEqual(['eng/life/okapi.md']);

    const up = await owner.put(`/api/v1/nodes/${p.id}`, { content: '# Pangolin\n\npangolin facts.\n' });
    expect(up.status, up.text).toBe(200);
    expect((await search(owner, { q: 'okapi' })).results).toEqual([]);
    expect(paths(await search(owner, { q: 'pangolin' }))).toEqual(['eng/life/okapi.md']);
    expect((await health()) >= at).toBe(true);
    at = await health();

    const mv = await owner.post(`/api/v1/nodes/${p.id}/move`, { to: 'eng/moved/pangolin.md' });
    expect(mv.status, mv.text).toBe(200);
    expect(paths(await search(owner, { q: 'pangolin' }))).toEqual(['eng/moved/pangolin.md']);
    expect((await search(owner, { q: 'pangolin', cluster: 'eng/life' })).results).toEqual([]);

    expect((await owner.post(`/api/v1/nodes/${p.id}/archive`, { reason: 'stale' })).status).toBe(200);
    expect((await search(owner, { q: 'pangolin' })).results).toEqual([]);
    expect((await search(owner, { q: 'pangolin', include_archived: '1' })).results[0]!.state).toBe('archived');
    expect((await owner.post(`/api/v1/nodes/${p.id}/restore`)).status).toBe(200);
    expect((await search(owner, { q: 'pangolin' })).results[0]!.state).toBe('active');

    expect((await owner.post('/api/auth/stepup', { password: 'correct horse battery' })).status).toBe(200);
    const del = await owner.delete(`/api/v1/nodes/${p.id}`);
    expect(del.status, del.text).toBe(200);
    expect((await search(owner, { q: 'pangolin', include_archived: 'true' })).results).toEqual([]);
    const after = await health();
    expect(after > at).toBe(true);
  });

  it('never answers 500 to odd queries', async () => {
    await create('eng/fuzz/f.md', '# Fuzz\n\nNEAR and OR and AND are words; C++ and "quoted" text; naïve café 東京.\n');
    const queries = [
      '"',
      '""',
      '"unbalanced',
      'AND',
      'OR',
      'NOT',
      'NEAR',
      'NEAR(a b, 2)',
      'a AND',
      'OR b',
      'NOT x',
      '*',
      'a*',
      '*a',
      '^a',
      'a^2',
      'col:val',
      'title:fuzz',
      '(',
      ')',
      '((a)',
      '{a b}',
      '\\',
      "'",
      "'; drop table pages; --",
      '-',
      '--x',
      '+a +b',
      'a & b | !c',
      '<->',
      'a:*',
      '!',
      '@@',
      '%',
      '_',
      'café',
      'CAFE',
      'naive',
      '東京',
      '🦄',
      '🦄 fuzz',
      'مرحبا',
      'e\u0301',
      '\u200b',
      '\ufeffword',
      '\u0301',
      '\u0301\u0301 a',
      'ﬁle',
      '①②',
      'Ⅻ',
      '𝔣𝔲𝔷𝔷',
      'ß',
      'İstanbul',
      'x'.repeat(500),
      Array.from({ length: 400 }, (_, i) => `w${i}`).join(' '),
      'near or and',
      'C++',
      'quoted"text',
      '\u0000',
    ];
    for (const q of queries) {
      for (const mode of ['fts', 'hybrid']) {
        const res = await owner.get(`/api/v1/search?q=${enc(q)}&mode=${mode}`);
        expect([200, 400], `${q}: ${res.status} ${res.text.slice(0, 200)}`).toContain(res.status);
        if (res.status === 200) expect(Array.isArray(res.body.results)).toBe(true);
      }
    }
    for (const q of ['NEAR', 'quoted', 'café', 'naive', 'cafe']) {
      expect(paths(await search(owner, { q })), q).toContain('eng/fuzz/f.md');
    }
    expect(paths(await search(owner, { q: '東京' }))).toContain('eng/fuzz/f.md');
    // Empty queries are 400 invalid_query; a query of only punctuation finds nothing.
    expectError(await owner.get('/api/v1/search'), 400, 'invalid_query');
    expectError(await owner.get('/api/v1/search?q='), 400, 'invalid_query');
    expectError(await owner.get(`/api/v1/search?q=${enc('   ')}`), 400, 'invalid_query');
    expect((await search(owner, { q: '!!! ***' })).results).toEqual([]);
    // Out-of-range parameters are plain 400s.
    expectError(await owner.get(`/api/v1/search?q=${'x'.repeat(4001)}`), 400, 'invalid_request');
    expectError(await owner.get('/api/v1/search?q=a&mode=magic'), 400, 'invalid_request');
    expectError(await owner.get('/api/v1/search?q=a&limit=0'), 400, 'invalid_request');
    expectError(await owner.get('/api/v1/search?q=a&limit=51'), 400, 'invalid_request');
    for (const extra of [
      'space=%00',
      'cluster=..%2F..',
      `cluster=${enc('a%_b')}`,
      `tags=${enc('"x",\'y\'')}`,
      'cluster=/',
      'space=',
      'cluster=%00',
      'tags=a%00',
      'tags=%01',
      'q=%ED%A0%80',
      'q=%FF%FE',
      'q=%',
      'tags=',
    ]) {
      const res = await owner.get(`/api/v1/search?q=fuzz&${extra}`);
      // 404 unknown_scope: a filter naming no Space or folder there is (issue 13).
      expect([200, 400, 404], `${extra}: ${res.status} ${res.text.slice(0, 200)}`).toContain(res.status);
      if (res.status === 404) expect(res.body.code).toBe('unknown_scope');
    }
  });

  it('lists backlinks by id through moves, filtered by ceiling and by the blocks links sit in', async () => {
    const target = await create('wiki/main/target.md', '---\ntitle: Target Page\ntags: [shared, x]\n---\n# Target\n\nSee [[Neighbour One]].\n');
    await create('wiki/main/neighbour-one.md', '---\ntags: [shared]\n---\n# Neighbour One\n\nHello.\n');
    await create('wiki/main/neighbour-conf.md', '---\nsensitivity: confidential\ntags: [shared, x]\n---\n# Conf neighbour\n');
    await create('wiki/other/by-title.md', '# By title\n\nSee [[Target Page]].\n');
    await create('wiki/other/by-md.md', '# By markdown\n\nSee [the target](../main/target.md).\n');
    await create('wiki/other/conf-linker.md', '---\nsensitivity: confidential\n---\n# Conf linker\n\n[[target]]\n');
    await create('wiki/other/secret-linker.md', '# Secret linker\n\nNothing here.\n\n::: secret\nSee [[wiki/main/target]].\n:::\n');
    const bl = async (c: Client, ref = target.id) => {
      const res = await c.get(`/api/v1/nodes/${enc(ref)}/backlinks`);
      expect(res.status, res.text).toBe(200);
      return (res.body.backlinks as { path: string; why: string }[]).map((b) => b.path).sort();
    };
    expect(await bl(owner)).toEqual(['wiki/other/by-md.md', 'wiki/other/by-title.md', 'wiki/other/conf-linker.md', 'wiki/other/secret-linker.md']);
    expect(await bl(conf)).toEqual(['wiki/other/by-md.md', 'wiki/other/by-title.md', 'wiki/other/conf-linker.md']);
    expect(await bl(internal)).toEqual(['wiki/other/by-md.md', 'wiki/other/by-title.md']);
    expect(await bl(internal, 'wiki/main/target.md')).toEqual(['wiki/other/by-md.md', 'wiki/other/by-title.md']);
    const one = (await internal.get(`/api/v1/nodes/${target.id}/backlinks`)).body.backlinks[0];
    expect(one).toMatchObject({ id: expect.stringMatching(/^pg_/), title: expect.any(String), state: 'active', why: expect.stringMatching(/links here/) });

    // The target moves: links were resolved to its id, so they still count.
    expect((await owner.post(`/api/v1/nodes/${target.id}/move`, { to: 'wiki/moved/target-renamed.md' })).status).toBe(200);
    expect(await bl(internal)).toEqual(['wiki/other/by-md.md', 'wiki/other/by-title.md']);

    // A link written before its target exists reaches it once it is created.
    await create('wiki/other/early.md', '# Early\n\nSee [[Future Page]].\n');
    const future = await create('wiki/later/future.md', '---\ntitle: Future Page\n---\nNow here.\n');
    expect(await bl(internal, future.id)).toEqual(['wiki/other/early.md']);

    // Invisible pages are 404, as for reads; agents without read too.
    const confPage = (await owner.get(`/api/v1/nodes/${enc('wiki/other/conf-linker.md')}`)).body.id as string;
    expectError(await internal.get(`/api/v1/nodes/${confPage}/backlinks`), 404, 'not_found');
    expectError(await hrOnly.get(`/api/v1/nodes/${target.id}/backlinks`), 404, 'not_found');
  });

  it('lists related pages (links, backlinks, folder neighbours, shared tags) with why, filtered by ceiling', async () => {
    await create('rel/main/hub.md', '---\ntags: [alpha, beta]\n---\n# Hub\n\n[[Spoke]] and [[Conf Spoke]].\n\n::: secret\n[[Hidden Spoke]]\n:::\n');
    await create('rel/main/spoke.md', '---\ntitle: Spoke\ntags: [alpha]\n---\nspoke\n');
    await create('rel/main/conf-spoke.md', '---\ntitle: Conf Spoke\nsensitivity: confidential\ntags: [alpha, beta]\n---\nconf\n');
    await create('rel/far/hidden-spoke.md', '---\ntitle: Hidden Spoke\n---\nhidden\n');
    await create('rel/far/fan.md', '---\ntags: [beta, alpha]\n---\n# Fan\n\n[[Hub]]\n');
    const rel = async (c: Client) => {
      const res = await c.get(`/api/v1/nodes/${enc('rel/main/hub.md')}/related`);
      expect(res.status, res.text).toBe(200);
      const b = res.body;
      const ps = (k: string) => (b[k] as { path: string }[]).map((e) => e.path).sort();
      return { body: b, links: ps('links'), backlinks: ps('backlinks'), neighbours: ps('neighbours'), shared: ps('shared_tags') };
    };
    const o = await rel(owner);
    expect(o.links).toEqual(['rel/far/hidden-spoke.md', 'rel/main/conf-spoke.md', 'rel/main/spoke.md']);
    expect(o.backlinks).toEqual(['rel/far/fan.md']);
    expect(o.neighbours).toEqual(['rel/main/conf-spoke.md', 'rel/main/spoke.md']);
    expect(o.shared).toEqual(['rel/far/fan.md', 'rel/main/conf-spoke.md', 'rel/main/spoke.md']);
    for (const k of ['links', 'backlinks', 'neighbours', 'shared_tags']) {
      for (const e of o.body[k]) expect(e.why, k).toMatch(/\S/);
    }
    expect(o.body.shared_tags[0].why).toMatch(/alpha, beta|beta, alpha/);

    const i = await rel(internal);
    expect(i.links).toEqual(['rel/main/spoke.md']);
    expect(i.backlinks).toEqual(['rel/far/fan.md']);
    expect(i.neighbours).toEqual(['rel/main/spoke.md']);
    expect(i.shared).toEqual(['rel/far/fan.md', 'rel/main/spoke.md']);
    const c = await rel(conf);
    expect(c.links).toEqual(['rel/main/conf-spoke.md', 'rel/main/spoke.md']);
  });
});

describe.each(testEngines())('search index across a restart (%s)', (engine) => {
  it('finds what was written before the server stopped, also after rebuilding the index from the pages', async () => {
    const tdb = await createTestDatabase(engine);
    try {
      const first = await startServerOn(tdb);
      const h = await signupHuman(first.url);
      const created = await h.client.post('/api/v1/nodes', { path: 'eng/restart/wombat.md', content: '# Wombat\n\nwombat burrows. [[Other]]\n' });
      expect(created.status).toBe(201);
      const other = await h.client.post('/api/v1/nodes', { path: 'eng/restart/other.md', content: '# Other\n' });
      await first.close();

      // Rebuild the whole index from the pages (what migration 004 does for existing pages).
      const store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
      for (const t of ['page_sections', 'page_links', 'page_keys', 'page_tags'] as const) await store.db.deleteFrom(t).execute();
      expect(await reindexAll(store.db)).toBe(2);
      await store.close();

      const second = await startServerOn(tdb);
      try {
        const c = new Client(second.url);
        c.cookies = h.client.cookies;
        const r = await c.get('/api/v1/search?q=wombat');
        expect(r.status, r.text).toBe(200);
        expect(r.body.results.map((x: Hit) => x.path)).toEqual(['eng/restart/wombat.md']);
        const b = await c.get(`/api/v1/nodes/${other.body.id}/backlinks`);
        expect(b.body.backlinks.map((x: Hit) => x.path)).toEqual(['eng/restart/wombat.md']);
      } finally {
        await second.close();
      }
    } finally {
      await tdb.cleanup();
    }
  });
});

describe('keyword index upgrade to one table per workspace (sqlite)', () => {
  it('migration 009 moves a deployment-wide index to per-workspace tables, and search finds the same', async () => {
    const tdb = await createTestDatabase('sqlite');
    try {
      const first = await startServerOn(tdb);
      const h = await signupHuman(first.url);
      const other = await signupHuman(first.url, 'Other');
      expect((await h.client.post('/api/v1/nodes', { path: 'eng/up/quokka.md', content: '# Quokka\n\nquokka smiles.\n' })).status).toBe(201);
      expect((await other.client.post('/api/v1/nodes', { path: 'eng/up/quokka.md', content: '# Quokka too\n\nquokka elsewhere.\n' })).status).toBe(201);
      await first.close();

      // Put the database back as it was before migration 009: one FTS5 table for every
      // workspace, kept by triggers (migrations 004 and 005).
      const store = await openStore({ dataDir: tdb.dataDir });
      const db = store.db;
      const kw = (
        await sql<{ name: string }>`select name from sqlite_master where type = 'table' and name like 'kw%' and sql like 'CREATE VIRTUAL%'`.execute(db)
      ).rows;
      expect(kw.length).toBeGreaterThanOrEqual(4);
      for (const t of kw) await sql`drop table ${sql.table(t.name)}`.execute(db);
      await sql`create virtual table page_sections_fts using fts5(title, heading, text, content='page_sections', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')`.execute(
        db,
      );
      await sql`create trigger page_sections_ai after insert on page_sections begin insert into page_sections_fts(rowid, title, heading, text) values (new.id, new.title, new.heading, new.text); end`.execute(
        db,
      );
      await sql`create virtual table page_sections_vocab using fts5vocab(page_sections_fts, 'row')`.execute(db);
      await sql`insert into page_sections_fts(page_sections_fts) values ('rebuild')`.execute(db);
      await sql`delete from schema_migrations where name = '009_keyword_per_workspace'`.execute(db);
      await store.close();

      const second = await startServerOn(tdb);
      try {
        const c = new Client(second.url);
        c.cookies = h.client.cookies;
        const r = await c.get('/api/v1/search?q=quokka&mode=fts');
        expect(r.status, r.text).toBe(200);
        expect(r.body.results.map((x: Hit) => x.title)).toEqual(['Quokka']);
        // The old table and its trigger are gone: a new page is indexed, in its own workspace only.
        expect((await c.post('/api/v1/nodes', { path: 'eng/up/later.md', content: '# Later\n\nquokka again.\n' })).status).toBe(201);
        expect((await c.get('/api/v1/search?q=quokka&mode=fts')).body.results.map((x: Hit) => x.title).sort()).toEqual(['Later', 'Quokka']);
        const left = await openStore({ dataDir: tdb.dataDir });
        const names = (await sql<{ name: string }>`select name from sqlite_master where name like 'page_sections_%'`.execute(left.db)).rows.map((x) => x.name);
        await left.close();
        expect(names.filter((n) => n.startsWith('page_sections_fts') || n === 'page_sections_vocab' || n === 'page_sections_ai')).toEqual([]);
      } finally {
        await second.close();
      }
    } finally {
      await tdb.cleanup();
    }
  });
});
