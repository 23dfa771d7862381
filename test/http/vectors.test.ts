import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/server.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { Client, createAgentWithKey, signupHuman, startServerOn } from '../support/server.js';
import { embeddingsServer, waitForVectors } from '../support/embeddings-server.js';
import type { SearchHit } from '../../src/retrieval/search.js';

type Hit = SearchHit;
interface SearchBody {
  mode: string;
  mode_used: string;
  note?: string;
  results: Hit[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function search(c: Client, params: Record<string, string>): Promise<SearchBody> {
  const res = await c.get(`/api/v1/search?${new URLSearchParams(params).toString()}`);
  expect(res.status, res.text.slice(0, 300)).toBe(200);
  return res.body as SearchBody;
}
const paths = (r: SearchBody) => r.results.map((h) => h.path);

/** Vector search over real HTTP, kept current through every kind of write and a restart. */
describe.each(testEngines())('vector index consistency (%s)', (engine) => {
  let tdb: TestDatabase;
  let server: RunningServer;
  let owner: Client;
  let conf: Client; // agent: read and search up to confidential
  let internal: Client; // agent: read and search up to internal
  let ownerCookies: Map<string, string>;

  const create = async (path: string, content: string) => {
    const res = await owner.post('/api/v1/nodes', { path, content });
    expect(res.status, res.text).toBe(201);
    return res.body as { id: string; path: string };
  };

  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
    server = await startServerOn(tdb);
    const h = await signupHuman(server.url);
    owner = h.client;
    ownerCookies = h.client.cookies;
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
  });
  afterAll(async () => {
    await server?.close();
    await tdb?.cleanup();
  });

  it('follows create, update, move, archive, restore and delete in vector mode', async () => {
    const p = await create('eng/life/okapi.md', '# Okapi\n\nThe okapi lives in the rainforest of the Congo.\n');
    await waitForVectors(owner);
    const v1 = await search(owner, { q: 'okapi rainforest', mode: 'vector' });
    expect(v1).toMatchObject({ mode: 'vector', mode_used: 'vector' });
    expect(v1.note).toBeUndefined();
    expect(paths(v1)[0]).toBe('eng/life/okapi.md');
    expect(v1.results[0]!.id).toBe(p.id);
    expect(v1.results[0]!.score).toBeGreaterThan(0.2);

    // Update: the old words no longer find it by vectors, the new ones do.
    const up = await owner.put(`/api/v1/nodes/${p.id}`, { content: '# Pangolin\n\nThe pangolin curls into scales of keratin.\n' });
    expect(up.status, up.text).toBe(200);
    // Even before the worker catches up, the old vectors answer nothing.
    expect(paths(await search(owner, { q: 'okapi rainforest congo', mode: 'vector' }))).not.toContain('eng/life/okapi.md');
    await waitForVectors(owner);
    expect(paths(await search(owner, { q: 'okapi rainforest congo', mode: 'vector' }))).not.toContain('eng/life/okapi.md');
    const v2 = await search(owner, { q: 'pangolin keratin scales', mode: 'vector' });
    expect(paths(v2)[0]).toBe('eng/life/okapi.md');
    expect(v2.results[0]!.title).toBe('Pangolin');

    // Move: the new path, and the old folder no longer holds it.
    const mv = await owner.post(`/api/v1/nodes/${p.id}/move`, { to: 'eng/moved/pangolin.md' });
    expect(mv.status, mv.text).toBe(200);
    await waitForVectors(owner);
    for (const mode of ['vector', 'hybrid']) {
      const r = await search(owner, { q: 'pangolin keratin scales', mode });
      expect(paths(r)[0], mode).toBe('eng/moved/pangolin.md');
      expect(paths(r), mode).not.toContain('eng/life/okapi.md');
      expect(paths(await search(owner, { q: 'pangolin keratin scales', mode, cluster: 'eng/life' })), mode).toEqual([]);
      expect(paths(await search(owner, { q: 'pangolin keratin scales', mode, cluster: 'eng/moved' })), mode).toEqual(['eng/moved/pangolin.md']);
    }

    // Archive: gone unless include_archived; restore brings it back.
    expect((await owner.post(`/api/v1/nodes/${p.id}/archive`, { reason: 'stale' })).status).toBe(200);
    await waitForVectors(owner);
    expect(paths(await search(owner, { q: 'pangolin keratin scales', mode: 'vector' }))).not.toContain('eng/moved/pangolin.md');
    const arch = await search(owner, { q: 'pangolin keratin scales', mode: 'vector', include_archived: 'true' });
    expect(arch.results[0]).toMatchObject({ path: 'eng/moved/pangolin.md', state: 'archived' });
    expect((await owner.post(`/api/v1/nodes/${p.id}/restore`)).status).toBe(200);
    await waitForVectors(owner);
    expect((await search(owner, { q: 'pangolin keratin scales', mode: 'vector' })).results[0]).toMatchObject({
      path: 'eng/moved/pangolin.md',
      state: 'active',
    });

    // Delete: gone in every mode, archived or not.
    expect((await owner.post('/api/auth/stepup', { password: 'correct horse battery' })).status).toBe(200);
    const del = await owner.delete(`/api/v1/nodes/${p.id}`);
    expect(del.status, del.text).toBe(200);
    await waitForVectors(owner);
    for (const mode of ['vector', 'hybrid']) {
      const r = await search(owner, { q: 'pangolin keratin scales', mode, include_archived: 'true' });
      expect(
        r.results.map((h) => h.id),
        mode,
      ).not.toContain(p.id);
    }
    // A new page at the old path is a new page, found by its own words only.
    const again = await create('eng/moved/pangolin.md', '# Tortoise\n\nThe tortoise carries its shell slowly.\n');
    await waitForVectors(owner);
    expect(paths(await search(owner, { q: 'tortoise shell', mode: 'vector' }))[0]).toBe('eng/moved/pangolin.md');
    expect((await search(owner, { q: 'pangolin keratin scales', mode: 'vector' })).results.map((h) => h.id)).not.toContain(again.id);

    const ready = await owner.get('/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body.embeddings).toMatchObject({ status: 'ok', provider: 'builtin', backlog: 0, last_error: null });
    expect(ready.body.embeddings.dimensions).toBeGreaterThan(0);
  });

  it('forgives a typo in hybrid mode that keyword search misses', async () => {
    await create('eng/typo/zebrafish.md', '# Zebrafish runbook\n\nRestart the zebrafish pipeline every morning.\n');
    await create('eng/typo/other.md', '# Weather\n\nClouds gather over the mountains.\n');
    await waitForVectors(owner);
    expect((await search(owner, { q: 'zebrafsh runbok', mode: 'fts' })).results).toEqual([]);
    const h = await search(owner, { q: 'zebrafsh runbok', mode: 'hybrid' });
    expect(h.mode_used).toBe('hybrid');
    expect(paths(h)[0]).toBe('eng/typo/zebrafish.md');
    expect(paths(await search(owner, { q: 'zebrafsh runbok', mode: 'vector' }))[0]).toBe('eng/typo/zebrafish.md');
  });

  it('never lets a hidden block or a page above the ceiling answer a vector query', async () => {
    const marmot = await create(
      'eng/redact/marmot.md',
      [
        '# Marmot runbook',
        '',
        'The marmot service restarts nightly.',
        '',
        '::: secret',
        'The swordfish password unlocks the obsidian vault.',
        ':::',
        '',
        '::: confidential',
        'Call the pelican hotline for tangerine recovery.',
        ':::',
        '',
      ].join('\n'),
    );
    const secretPage = await create('eng/redact/kraken.md', '---\nsensitivity: secret\n---\n# Kraken ledger\n\nThe kraken ledger lists barnacle accounts.\n');
    const confPage = await create('eng/redact/walrus.md', '---\nsensitivity: confidential\n---\n# Walrus memo\n\nThe walrus memo covers iceberg budgets.\n');
    await waitForVectors(owner);

    // The owner's vector search finds each by the hidden words.
    expect(paths(await search(owner, { q: 'swordfish password obsidian vault', mode: 'vector' }))[0]).toBe('eng/redact/marmot.md');
    expect(paths(await search(owner, { q: 'pelican hotline tangerine recovery', mode: 'vector' }))[0]).toBe('eng/redact/marmot.md');
    expect(paths(await search(owner, { q: 'kraken ledger barnacle', mode: 'vector' }))[0]).toBe('eng/redact/kraken.md');
    expect(paths(await search(conf, { q: 'walrus memo iceberg', mode: 'vector' }))[0]).toBe('eng/redact/walrus.md');
    expect(paths(await search(conf, { q: 'pelican hotline tangerine recovery', mode: 'vector' }))[0]).toBe('eng/redact/marmot.md');

    const ids = (r: SearchBody) => r.results.map((h) => h.id);
    for (const mode of ['vector', 'hybrid']) {
      for (const q of ['swordfish password obsidian vault', 'swordfish', 'obsidian vault', 'kraken ledger barnacle']) {
        const r = await search(conf, { q, mode });
        expect(ids(r), `${mode} ${q}`).not.toContain(secretPage.id);
        if (q !== 'kraken ledger barnacle') expect(ids(r), `${mode} ${q}`).not.toContain(marmot.id);
        for (const hit of r.results) expect(hit.snippet).not.toMatch(/swordfish|obsidian|barnacle|kraken/i);
      }
      for (const q of ['pelican hotline tangerine recovery', 'swordfish password obsidian vault', 'walrus memo iceberg', 'kraken ledger barnacle']) {
        const r = await search(internal, { q, mode });
        expect(ids(r), `${mode} ${q}`).not.toContain(secretPage.id);
        expect(ids(r), `${mode} ${q}`).not.toContain(confPage.id);
        expect(ids(r), `${mode} ${q}`).not.toContain(marmot.id);
        for (const hit of r.results) expect(hit.snippet).not.toMatch(/swordfish|obsidian|pelican|tangerine|walrus|kraken|barnacle|iceberg/i);
      }
    }
    // What they may see still answers.
    expect(paths(await search(internal, { q: 'marmot service restarts nightly', mode: 'vector' }))[0]).toBe('eng/redact/marmot.md');
    const r = await search(internal, { q: 'marmot service restarts nightly', mode: 'vector' });
    expect(r.results[0]!.snippet).toMatch(/marmot service restarts/);
  });

  it('still finds everything by vectors after a restart on the same database', async () => {
    await create('eng/restart/wombat.md', '# Wombat\n\nThe wombat digs burrows under the eucalyptus.\n');
    await waitForVectors(owner);
    expect(paths(await search(owner, { q: 'wombat burrows eucalyptus', mode: 'vector' }))[0]).toBe('eng/restart/wombat.md');
    await server.close();

    server = await startServerOn(tdb);
    owner = new Client(server.url);
    owner.cookies = ownerCookies;
    const ready = await owner.get('/readyz');
    expect(ready.body.embeddings).toMatchObject({ status: 'ok', provider: 'builtin', backlog: 0 });
    // Nothing to re-embed: the vectors were kept; the matrix is loaded from them.
    for (const [q, path] of [
      ['wombat burrows eucalyptus', 'eng/restart/wombat.md'],
      ['tortoise shell', 'eng/moved/pangolin.md'],
      ['zebrafsh runbok', 'eng/typo/zebrafish.md'],
      ['marmot service restarts nightly', 'eng/redact/marmot.md'],
    ] as const) {
      const v = await search(owner, { q, mode: 'vector' });
      expect(v.mode_used).toBe('vector');
      expect(paths(v)[0], q).toBe(path);
    }
    const c = new Client(server.url, conf.bearer);
    expect(paths(await search(c, { q: 'swordfish password obsidian vault', mode: 'vector' }))).not.toContain('eng/redact/marmot.md');
    // Writes after the restart are embedded too.
    await create('eng/restart/quoll.md', '# Quoll\n\nThe quoll hunts at night in Tasmania.\n');
    await waitForVectors(owner);
    expect(paths(await search(owner, { q: 'quoll hunts tasmania', mode: 'vector' }))[0]).toBe('eng/restart/quoll.md');
  });
});

describe.each(testEngines())('changing the embeddings provider or model (%s)', (engine) => {
  it('never answers from a vector of text the page no longer has, while its new text waits to be embedded', async () => {
    const tdb = await createTestDatabase(engine);
    const fake = await embeddingsServer();
    let server: RunningServer | undefined;
    try {
      server = await startServerOn(tdb, {
        EMBEDDINGS: 'openai',
        EMBEDDINGS_URL: fake.url,
        EMBEDDINGS_MODEL: 'fake-hash-16',
        EMBEDDINGS_TIMEOUT_MS: '2000',
        EMBEDDINGS_MAX_RETRIES: '0',
      });
      const h = await signupHuman(server.url);
      const page = await h.client.post('/api/v1/nodes', { path: 'zoo/stale.md', content: '# Okapi\n\nThe okapi lives in the rainforest.\n' });
      expect(page.status).toBe(201);
      await waitForVectors(h.client);
      expect(paths(await search(h.client, { q: 'okapi rainforest', mode: 'vector' }))).toContain('zoo/stale.md');
      // The provider now chokes on the page's new text (queries still embed): its old vector stays behind.
      fake.state.failIf = (t) => t.includes('pangolin');
      expect((await h.client.put(`/api/v1/nodes/${page.body.id}`, { content: '# Pangolin\n\nThe pangolin eats ants at night.\n' })).status).toBe(200);
      for (let i = 0; i < 200 && (await h.client.get('/readyz')).body.embeddings.status !== 'degraded'; i++) await sleep(25);
      const ready = (await h.client.get('/readyz')).body.embeddings;
      expect(ready).toMatchObject({ status: 'degraded', backlog: 1 });
      const v = await search(h.client, { q: 'okapi rainforest', mode: 'vector' });
      expect(v.mode_used).toBe('vector');
      expect(paths(v)).not.toContain('zoo/stale.md');
      // Keyword search is current at once; vectors follow when the provider takes the text.
      expect(paths(await search(h.client, { q: 'pangolin', mode: 'fts' }))).toEqual(['zoo/stale.md']);
      fake.state.failIf = undefined;
      await waitForVectors(h.client, 15_000);
      expect(paths(await search(h.client, { q: 'pangolin ants night', mode: 'vector' }))[0]).toBe('zoo/stale.md');
    } finally {
      await server?.close();
      await fake.close();
      await tdb.cleanup();
    }
  });

  it('re-embeds every page in the background with the new provider, and vector search uses it', async () => {
    const tdb = await createTestDatabase(engine);
    const fake = await embeddingsServer();
    let server: RunningServer | undefined;
    try {
      server = await startServerOn(tdb);
      const h = await signupHuman(server.url);
      const pages = [
        ['zoo/okapi.md', '# Okapi\n\nThe okapi lives in the rainforest.\n'],
        ['zoo/kiwi.md', '# Kiwi\n\nThe kiwi bird cannot fly at all.\n\n## Eggs\n\nA kiwi egg is huge.\n'],
        ['zoo/lemur.md', '# Lemur\n\nRing tailed lemurs sunbathe in Madagascar.\n'],
        ['zoo/archived.md', '---\nstate: archived\narchived_reason: stale\n---\n# Dodo\n\nThe dodo is gone.\n'],
      ];
      for (const [path, content] of pages) expect((await h.client.post('/api/v1/nodes', { path, content })).status).toBe(201);
      await waitForVectors(h.client);
      expect((await h.client.get('/readyz')).body.embeddings.provider).toBe('builtin');
      await server.close();
      server = undefined;

      const openai = {
        EMBEDDINGS: 'openai',
        EMBEDDINGS_URL: fake.url,
        EMBEDDINGS_MODEL: 'fake-hash-16',
        EMBEDDINGS_TIMEOUT_MS: '2000',
        EMBEDDINGS_MAX_RETRIES: '0',
      };
      server = await startServerOn(tdb, openai);
      const c = new Client(server.url);
      c.cookies = h.client.cookies;
      const r0 = await c.get('/readyz');
      expect(r0.body.embeddings).toMatchObject({ provider: 'openai', model: 'fake-hash-16' });
      await waitForVectors(c);
      const r1 = await c.get('/readyz');
      expect(r1.status).toBe(200);
      expect(r1.body.embeddings).toMatchObject({ status: 'ok', provider: 'openai', model: 'fake-hash-16', dimensions: 16, backlog: 0, last_error: null });
      // Every section went to the local server (archived pages too: include_archived finds them).
      const sent = fake.inputs.join('\n---\n');
      for (const words of ['okapi lives in the rainforest', 'kiwi bird cannot fly', 'A kiwi egg is huge', 'lemurs sunbathe', 'The dodo is gone'])
        expect(sent).toContain(words);
      expect(new Set(fake.models)).toEqual(new Set(['fake-hash-16']));

      const before = fake.inputs.length;
      const v = await search(c, { q: 'okapi rainforest', mode: 'vector' });
      expect(v).toMatchObject({ mode: 'vector', mode_used: 'vector' });
      expect(paths(v)[0]).toBe('zoo/okapi.md');
      expect(fake.inputs.slice(before)).toContain('okapi rainforest'); // the query was embedded by the new provider
      expect(paths(await search(c, { q: 'kiwi egg huge', mode: 'vector' }))[0]).toBe('zoo/kiwi.md');
      expect(paths(await search(c, { q: 'dodo gone', mode: 'vector', include_archived: 'true' }))[0]).toBe('zoo/archived.md');
      // New writes go to the new provider as well.
      expect((await c.post('/api/v1/nodes', { path: 'zoo/tapir.md', content: '# Tapir\n\nTapirs browse under the canopy.\n' })).status).toBe(201);
      await waitForVectors(c);
      expect(fake.inputs.join('\n')).toContain('Tapirs browse under the canopy');
      expect(paths(await search(c, { q: 'tapirs browse canopy', mode: 'vector' }))[0]).toBe('zoo/tapir.md');
      await server.close();
      server = undefined;

      // Another model of the same provider: re-embedded again.
      const sentBefore = fake.inputs.length;
      server = await startServerOn(tdb, { ...openai, EMBEDDINGS_MODEL: 'fake-hash-16-v2' });
      const c2 = new Client(server.url);
      c2.cookies = h.client.cookies;
      await waitForVectors(c2);
      expect((await c2.get('/readyz')).body.embeddings).toMatchObject({ status: 'ok', model: 'fake-hash-16-v2', backlog: 0 });
      expect(fake.inputs.slice(sentBefore).join('\n')).toContain('lemurs sunbathe');
      expect(fake.models).toContain('fake-hash-16-v2');
      expect(paths(await search(c2, { q: 'lemurs madagascar', mode: 'vector' }))[0]).toBe('zoo/lemur.md');
      await server.close();
      server = undefined;

      // And back to builtin: its vectors are there already, nothing is missing.
      server = await startServerOn(tdb);
      const c3 = new Client(server.url);
      c3.cookies = h.client.cookies;
      await waitForVectors(c3);
      expect((await c3.get('/readyz')).body.embeddings).toMatchObject({ status: 'ok', provider: 'builtin', backlog: 0 });
      expect(paths(await search(c3, { q: 'tapirs browse canopy', mode: 'vector' }))[0]).toBe('zoo/tapir.md');
    } finally {
      await server?.close();
      await fake.close();
      await tdb.cleanup();
    }
  });
});
