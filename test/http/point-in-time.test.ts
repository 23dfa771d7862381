import type { SearchResult } from '../../src/retrieval/search.js';
import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadPrincipal } from '../../src/core/principal-loader.js';
import { loadSnapshot } from '../../src/retrieval/snapshot.js';
import { testEngines } from '../support/engines.js';
import { waitForVectors } from '../support/embeddings-server.js';
import { expectError } from '../support/expect.js';
import { createAgentWithKey, createReaderAgent, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';
import { call, connectMcp, ok } from '../mcp/support.js';

/**
 * Point-in-time retrieval (issue 20): `at=<sha>` on GET /search, POST and GET /bundle and the
 * MCP tools context_search and context_bundle answers from the workspace as that commit left
 * it, redacted by today's rules; a bundle states the commit it answered from, and replaying it
 * gives the same bundle however the workspace moved on.
 */

/** What GET /api/v1/search answers (the route's response is the core's SearchResult). */
type SearchAnswer = SearchResult;
interface BundleAnswer {
  at: string | null;
  markdown: string;
  sections: { id: string; path: string; title: string; heading: string; commit_sha: string; state: string; via: string; text: string }[];
}

const HIT_FIELDS = ['cluster_path', 'id', 'path', 'score', 'section', 'snippet', 'space', 'state', 'tags', 'title'];

describe.each(testEngines())('point-in-time search and bundle (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let ownerIds: { id: string; workspace: string };
  let admin: Client; // agent: every action up to confidential (it deletes)
  let internal: Client; // agent: read and search up to internal
  let narrow: Client; // agent: read and search inside `ops/` only
  let mcp: McpClient;
  let otherOwner: Client;
  /** Commits by name. */
  const at: Record<string, string> = {};
  const ids: Record<string, string> = {};

  const search = async (c: Client, q: string, extra: Record<string, string> = {}): Promise<SearchAnswer> => {
    const qs = new URLSearchParams({ q, ...extra });
    const r = await c.get(`/api/v1/search?${qs}`);
    expect(r.status, r.text.slice(0, 300)).toBe(200);
    return r.body as SearchAnswer;
  };
  const paths = (a: SearchAnswer) => a.results.map((h) => h.path).sort();
  const bundle = async (c: Client, body: Record<string, unknown>): Promise<BundleAnswer> => {
    const r = await c.post('/api/v1/bundle', { budget_tokens: 4000, ...body });
    expect(r.status, r.text.slice(0, 300)).toBe(200);
    return r.body as BundleAnswer;
  };
  const write = async (method: 'post' | 'put', path: string, body: Record<string, unknown>) => {
    const r = method === 'post' ? await owner.post(path, body) : await owner.put(path, body);
    expect(r.status, r.text.slice(0, 300)).toBeLessThan(300);
    return r.body as { id: string; commit_sha: string };
  };

  beforeAll(async () => {
    s = await startTestServer(engine);
    const signed = await signupHuman(s.url);
    owner = signed.client;
    ownerIds = { id: signed.id, workspace: signed.workspace.id };
    admin = (
      await createAgentWithKey(
        owner,
        ['read', 'write', 'search', 'admin'].map((action) => ({ action })),
      )
    ).client;
    internal = (await createReaderAgent(owner, 'internal')).client;
    narrow = (
      await createAgentWithKey(owner, [
        { action: 'read', scope: 'ops' },
        { action: 'search', scope: 'ops' },
      ])
    ).client;
    const mcpKey = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'search' }]);
    mcp = await connectMcp(s.url, mcpKey.key);
    otherOwner = (await signupHuman(s.url, 'Bea')).client;

    // Commit "then": the workspace as the replays will see it.
    ids.runbook = (
      await write('post', '/api/v1/nodes', {
        path: 'ops/runbook.md',
        content: '---\ntags: [pager]\n---\n# Runbook\n\nRestart the zephyrine relay with the quollwick lever.\n\nSee [[Checklist]].\n',
      })
    ).id;
    ids.checklist = (
      await write('post', '/api/v1/nodes', { path: 'ops/checklist.md', content: '# Checklist\n\nThe marrowgate checklist lists every zephyrine step.\n' })
    ).id;
    ids.gone = (await write('post', '/api/v1/nodes', { path: 'ops/gone.md', content: '# Gone\n\nThe vellichor archive of zephyrine history.\n' })).id;
    ids.mover = (await write('post', '/api/v1/nodes', { path: 'ops/old-place.md', content: '# Mover\n\nThe brindlecombe notes about zephyrine.\n' })).id;
    ids.opened = (
      await write('post', '/api/v1/nodes', {
        path: 'ops/opened.md',
        content: '---\nsensitivity: confidential\n---\n# Opened\n\nThe saltmarrow plan for zephyrine.\n',
      })
    ).id;
    ids.closed = (await write('post', '/api/v1/nodes', { path: 'ops/closed.md', content: '# Closed\n\nThe thistledown memo on zephyrine.\n' })).id;
    ids.blocky = (
      await write('post', '/api/v1/nodes', {
        path: 'ops/blocky.md',
        content: '# Blocky\n\nPublic words about zephyrine.\n\n::: confidential\nThe crumplehorn secret of zephyrine.\n:::\n',
      })
    ).id;
    ids.shelved = (await write('post', '/api/v1/nodes', { path: 'ops/shelved.md', content: '# Shelved\n\nThe gallimaufry report on zephyrine.\n' })).id;
    ids.elsewhere = (await write('post', '/api/v1/nodes', { path: 'dev/elsewhere.md', content: '# Elsewhere\n\nThe dev quollwick notes.\n' })).id;
    const last = await owner.get(`/api/v1/nodes/${ids.elsewhere}`);
    at.then = last.body.commit_sha as string;
    await waitForVectors(owner);

    // Since then: rewritten, created, deleted, moved, levels changed both ways, archived, retagged.
    await write('put', `/api/v1/nodes/${ids.runbook}`, {
      content: '---\ntags: [oncall]\n---\n# Runbook\n\nRestart the zephyrine relay with the pelliculor switch.\n',
    });
    ids.fresh = (await write('post', '/api/v1/nodes', { path: 'ops/fresh.md', content: '# Fresh\n\nThe quollwick lever came later.\n' })).id;
    expect((await admin.delete(`/api/v1/nodes/${ids.gone}`)).status).toBe(200);
    expect((await owner.post(`/api/v1/nodes/${ids.mover}/move`, { to: 'ops/new-place.md' })).status).toBe(200);
    await write('put', `/api/v1/nodes/${ids.opened}`, { content: '# Opened\n\nThe saltmarrow plan for zephyrine.\n' });
    await write('put', `/api/v1/nodes/${ids.closed}`, { content: '---\nsensitivity: confidential\n---\n# Closed\n\nThe thistledown memo on zephyrine.\n' });
    expect((await owner.post(`/api/v1/nodes/${ids.shelved}/archive`, { reason: 'stale' })).status).toBe(200);
    await waitForVectors(owner);
  }, 120_000);
  afterAll(async () => {
    await mcp?.close();
    await s?.stop();
  });

  it('finds the words a page had at the commit, not the ones it has now; today finds the reverse', async () => {
    // Keyword alone: exactly the pages holding the words; hybrid: they come first.
    const got = (a: SearchAnswer, mode: string) => (mode === 'fts' ? paths(a) : a.results.slice(0, 1).map((h) => h.path));
    for (const mode of ['fts', 'hybrid'] as const) {
      const old = await search(owner, 'quollwick lever', { at: at.then!, mode, space: 'ops' });
      expect(old.at).toBe(at.then);
      expect(got(old, mode), mode).toEqual(['ops/runbook.md']);
      const oldHit = old.results[0]!;
      expect(oldHit.snippet).toContain('quollwick lever');
      expect(oldHit.tags).toEqual(['pager']);
      // Today the runbook says otherwise and a page created since holds the words.
      const now = await search(owner, 'quollwick lever', { mode, space: 'ops' });
      expect(now.at).toBeUndefined();
      expect(got(now, mode), mode).toEqual(['ops/fresh.md']);
      const gone = await search(owner, 'pelliculor', { at: at.then!, mode });
      for (const h of gone.results) expect(h.snippet, mode).not.toContain('pelliculor');
      expect(got(await search(owner, 'pelliculor', { mode }), mode), mode).toEqual(['ops/runbook.md']);
    }
    // A unique prefix of the sha works as the full sha does, and the answer names the full one.
    const short = await search(owner, 'quollwick', { at: at.then!.slice(0, 10), mode: 'fts', space: 'ops' });
    expect(short.at).toBe(at.then);
    expect(paths(short)).toEqual(['ops/runbook.md']);
  });

  it('every mode answers with the same fields, now and at a commit', async () => {
    for (const extra of [{}, { at: at.then! }] as Record<string, string>[]) {
      for (const mode of ['fts', 'vector', 'hybrid']) {
        const r = await search(owner, 'zephyrine', { mode, ...extra });
        expect(r.results.length, `${mode} ${JSON.stringify(extra)}`).toBeGreaterThan(0);
        for (const h of r.results) expect(Object.keys(h).sort(), mode).toEqual(HIT_FIELDS);
      }
    }
  });

  it('holds pages deleted since at their old text, moved ones at their old path, and not pages created since', async () => {
    const then = await search(owner, 'zephyrine', { at: at.then!, mode: 'fts', limit: '50' });
    const p = paths(then);
    expect(p).toContain('ops/gone.md');
    expect(p).toContain('ops/old-place.md');
    expect(p).not.toContain('ops/new-place.md');
    expect(p).not.toContain('ops/fresh.md');
    const now = paths(await search(owner, 'zephyrine', { mode: 'fts', limit: '50' }));
    expect(now).not.toContain('ops/gone.md');
    expect(now).toContain('ops/new-place.md');
    expect(now).not.toContain('ops/old-place.md');
    // The moved page keeps its id; the vector and hybrid lists agree on where it was.
    for (const mode of ['vector', 'hybrid']) {
      const r = await search(owner, 'brindlecombe notes', { at: at.then!, mode });
      expect(r.results[0]?.path, mode).toBe('ops/old-place.md');
      expect(r.results[0]?.id, mode).toBe(ids.mover);
    }
  });

  it('judges a page by its level then and now, and hides blocks above the ceiling', async () => {
    for (const mode of ['fts', 'vector', 'hybrid']) {
      // `opened` was confidential then (public now): not for an internal reader at that commit.
      const opened = await search(internal, 'saltmarrow plan', { at: at.then!, mode });
      expect(
        opened.results.map((h) => h.id),
        mode,
      ).not.toContain(ids.opened);
      // `closed` was public then, confidential now: today's rule hides it at every commit.
      const closed = await search(internal, 'thistledown memo', { at: at.then!, mode });
      expect(
        closed.results.map((h) => h.id),
        mode,
      ).not.toContain(ids.closed);
      // The confidential block's words find nothing for the internal reader.
      const block = await search(internal, 'crumplehorn', { at: at.then!, mode });
      expect(
        block.results.map((h) => h.id),
        mode,
      ).not.toContain(ids.blocky);
      for (const h of block.results) expect(h.snippet).not.toContain('crumplehorn');
    }
    // The owner sees both pages and the block at that commit.
    expect(paths(await search(owner, 'saltmarrow', { at: at.then!, mode: 'fts' }))).toEqual(['ops/opened.md']);
    expect(paths(await search(owner, 'crumplehorn', { at: at.then!, mode: 'fts' }))).toEqual(['ops/blocky.md']);
    // Nothing of the hidden text reaches the internal reader's bundle either.
    const b = await bundle(internal, { intent: 'zephyrine saltmarrow thistledown crumplehorn', at: at.then });
    expect(b.markdown.split('\n').slice(1).join('\n')).not.toMatch(/saltmarrow|thistledown|crumplehorn/);
    expect(b.sections.map((x) => x.id)).not.toContain(ids.opened);
    // A reader granted only `ops/` sees nothing of `dev/` at any commit.
    expect(paths(await search(narrow, 'quollwick', { at: at.then!, mode: 'fts' }))).toEqual(['ops/runbook.md']);
  });

  it('applies the state and tags the page had at the commit', async () => {
    // Archived since: active then, found without include_archived.
    expect(paths(await search(owner, 'gallimaufry', { at: at.then!, mode: 'fts' }))).toEqual(['ops/shelved.md']);
    expect(paths(await search(owner, 'gallimaufry', { mode: 'fts' }))).toEqual([]);
    expect(paths(await search(owner, 'gallimaufry', { mode: 'fts', include_archived: 'true' }))).toEqual(['ops/shelved.md']);
    // Retagged since: the tag filter reads the tags of then.
    expect(paths(await search(owner, 'zephyrine', { at: at.then!, mode: 'fts', tags: 'pager' }))).toEqual(['ops/runbook.md']);
    expect(paths(await search(owner, 'zephyrine', { at: at.then!, mode: 'fts', tags: 'oncall' }))).toEqual([]);
    expect(paths(await search(owner, 'zephyrine', { mode: 'fts', tags: 'oncall' }))).toEqual(['ops/runbook.md']);
  });

  it('a bundle states its commit, and replaying it gives the same bundle after the workspace moved on', async () => {
    const live = await bundle(owner, { intent: 'zephyrine relay', scope: 'ops' });
    const head = (await owner.get(`/api/v1/nodes/${ids.shelved}`)).body.commit_sha as string;
    expect(live.at).toBe(head);
    expect(live.markdown).toContain(`as of commit ${head.slice(0, 12)}\n`);

    const then = await bundle(owner, { intent: 'zephyrine relay', scope: 'ops', at: at.then, include_links: true });
    expect(then.at).toBe(at.then);
    expect(then.markdown).toContain(`as of commit ${at.then!.slice(0, 12)}\n`);
    expect(then.markdown).toContain('quollwick lever');
    expect(then.markdown).not.toContain('pelliculor');
    const runbook = then.sections.find((x) => x.id === ids.runbook)!;
    // The section cites the commit that wrote that version of the page.
    const history = await owner.get(`/api/v1/nodes/${ids.runbook}/history`);
    const first = (history.body.versions as { commit_sha: string }[]).at(-1)!.commit_sha;
    expect(runbook.commit_sha).toBe(first);
    // The link [[Checklist]] of then is followed.
    expect(then.sections.some((x) => x.id === ids.checklist)).toBe(true);

    // More writes; the replay is the same, by JSON and by query string.
    await write('put', `/api/v1/nodes/${ids.checklist}`, { content: '# Checklist\n\nNothing about the relay any more.\n' });
    const again = await bundle(owner, { intent: 'zephyrine relay', scope: 'ops', at: at.then, include_links: true });
    expect(again.markdown).toBe(then.markdown);
    const qs = new URLSearchParams({ intent: 'zephyrine relay', scope: 'ops', at: at.then!, include_links: 'true' });
    const viaGet = await owner.get(`/api/v1/bundle?${qs}`);
    expect(viaGet.status).toBe(200);
    expect(viaGet.body.markdown).toBe(then.markdown);
  });

  it('a live bundle is as of the newest commit that changed a page its caller may see: hidden writes do not move it', async () => {
    const ask = async (c: Client) => (await bundle(c, { intent: 'zephyrine relay' })).at;
    const before = await ask(narrow);
    // Outside narrow's reach (dev/): narrow stays, internal (which sees dev/) moves.
    const dev = await write('post', '/api/v1/nodes', { path: 'dev/unseen.md', content: '# Unseen\n\nThe zephyrine relay, for dev.\n' });
    expect(await ask(narrow)).toBe(before);
    expect(await ask(internal)).toBe(dev.commit_sha);
    // Above internal's ceiling: internal stays, the owner moves.
    const secret = await write('post', '/api/v1/nodes', {
      path: 'ops/unseen-secret.md',
      content: '---\nsensitivity: confidential\n---\n# Unseen\n\nThe zephyrine relay, confidential.\n',
    });
    expect(await ask(internal)).toBe(dev.commit_sha);
    expect(await ask(owner)).toBe(secret.commit_sha);
    // Another workspace's writes move nobody here.
    expect((await otherOwner.post('/api/v1/nodes', { path: 'x/y.md', content: '# Y\n\nzephyrine relay\n' })).status).toBe(201);
    expect(await ask(owner)).toBe(secret.commit_sha);
    // Replaying an `at` gives its caller the same sections (near ties may rank apart: docs/api.md).
    const held = (b: BundleAnswer) => b.sections.map((x) => `${x.id} ${x.commit_sha} ${x.text}`).sort();
    for (const c of [narrow, internal]) {
      const live = await bundle(c, { intent: 'zephyrine relay' });
      expect(held(await bundle(c, { intent: 'zephyrine relay', at: live.at }))).toEqual(held(live));
    }
    // A write both may see moves both.
    const mine = await write('put', `/api/v1/nodes/${ids.checklist}`, { content: '# Checklist\n\nThe zephyrine relay steps, again.\n' });
    expect(await ask(narrow)).toBe(mine.commit_sha);
    expect(await ask(internal)).toBe(mine.commit_sha);
    // Deleting the confidential page moves those who saw it only.
    const d = await admin.delete(`/api/v1/nodes/${secret.id}`);
    expect(d.status, d.text).toBeLessThan(300);
    expect(await ask(internal)).toBe(mine.commit_sha);
    expect(await ask(owner)).not.toBe(mine.commit_sha);
  });

  it('MCP context_search and context_bundle take `at`', async () => {
    const r = await ok(mcp, 'context_search', { query: 'quollwick lever', scope: 'ops', at: at.then });
    expect(r.at).toBe(at.then);
    expect(r.results[0].path).toBe('ops/runbook.md');
    expect(r.results[0].snippet).toContain('quollwick lever');
    const md = (await ok(mcp, 'context_bundle', { intent: 'quollwick lever', scope: 'ops', at: at.then })) as string;
    expect(md).toContain(`as of commit ${at.then!.slice(0, 12)}`);
    expect(md).toContain('quollwick lever');
    const bad = await call(mcp, 'context_search', { query: 'x', at: 'f'.repeat(40) });
    expect(bad.isError).toBe(true);
    expect(bad.text).toMatch(/^commit_not_found: /);
    const shortSha = await call(mcp, 'context_bundle', { intent: 'x', at: 'abc' });
    expect(shortSha.isError).toBe(true);
  });

  it('refuses malformed, unknown, ambiguous-free and foreign commits', async () => {
    expectError(await owner.get(`/api/v1/search?q=x&at=${'z'.repeat(12)}`), 400, 'invalid_sha');
    expectError(await owner.get('/api/v1/search?q=x&at=abc'), 400, 'invalid_request');
    expectError(await owner.get(`/api/v1/search?q=x&at=${'a'.repeat(65)}`), 400, 'invalid_request');
    expectError(await owner.get(`/api/v1/search?q=x&at=${'0'.repeat(40)}`), 404, 'commit_not_found');
    expectError(await owner.post('/api/v1/bundle', { intent: 'x', at: 'g'.repeat(40) }), 400, 'invalid_sha');
    expectError(await owner.post('/api/v1/bundle', { intent: 'x', at: 42 }), 400, 'invalid_request');
    expectError(await owner.post('/api/v1/bundle', { intent: 'x', at: '../../etc/passwd' }), 400, 'invalid_sha');
    // Another workspace's commit is unknown here, and this one's is unknown there.
    expectError(await otherOwner.get(`/api/v1/search?q=quollwick&at=${at.then}`), 404, 'commit_not_found');
    expectError(await otherOwner.post('/api/v1/bundle', { intent: 'quollwick', at: at.then }), 404, 'commit_not_found');
    // A key without search is refused before any commit is looked up.
    const readOnly = (await createAgentWithKey(owner, [{ action: 'read' }])).client;
    expectError(await readOnly.get(`/api/v1/search?q=x&at=${at.then}`), 403, 'forbidden');
  });

  it('reads at most AT_MAX_PAGES pages for one answer (400 snapshot_too_large past it)', async () => {
    // Loaded through retrieval with a lower bound: the rule, not the figure, is under test.
    const ctx = s.ctx;
    const me = (await loadPrincipal(ctx.store.db, ownerIds.workspace, ownerIds.id))!;
    await expect(loadSnapshot(ctx, me, { action: 'search', includeArchived: true }, at.then!, 3)).rejects.toMatchObject({ code: 'snapshot_too_large' });
    const snap = await loadSnapshot(ctx, me, { action: 'search', includeArchived: true }, at.then!, 100);
    expect(snap.pages.length).toBe(9);
  });
});
