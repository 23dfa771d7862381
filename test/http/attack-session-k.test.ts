import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseDocument } from '../../src/markdown/index.js';
import { chunkBody } from '../../src/retrieval/chunking.js';
import { testEngines } from '../support/engines.js';
import { expectError } from '../support/expect.js';
import { finished, postJson } from '../support/imports.js';
import { call, connectMcp, ok } from '../mcp/support.js';
import { createAgentWithKey, createReaderAgent, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';

/**
 * Attack session k, on two fresh changes:
 *
 * 1. A live bundle's `at` (src/retrieval/snapshot.ts newestVisibleCommit, from lists.ts
 *    listSource): the newest commit that changed a page the caller may see today. Claim: no
 *    write the caller cannot see moves it (nor the markdown's `as of commit` line), and
 *    replaying it gives the live bundle's sections. Attacked with pages hidden by path and by
 *    level, hidden pages edited / moved / archived / restored / deleted, pages moving in and out
 *    of sight, levels raised and lowered back, `::: secret` blocks added to a visible page,
 *    other workspaces, a hidden import of more versions than one round of the walk reads (and a
 *    visible page inside such a commit), parallel hidden writes, MCP against REST, GET against
 *    POST, dead keys, and callers with nothing in sight (`at` null).
 *
 * 2. PostgreSQL's keyword statistics (migration 025, keyword-plan.ts pgCounts avgTokens,
 *    candidates.ts pgKeywordRows, keyword.ts pgRank, `KeywordPlan.weighed`): a caller's fts
 *    scores and order must not move with text it cannot see (a level above its ceiling, a
 *    `::: secret` block inside a visible page, a path outside a scoped agent's grants, another
 *    workspace, hidden pages archived / restored / deleted); term_stats' ' ' rows equal
 *    sum(tokens) and each section's tokens equal a JS count of its words after storms of
 *    concurrent writes and hostile text (huge sections, punctuation only, emoji, CJK,
 *    combining marks, 1 MB pages).
 *
 * FOUND (PostgreSQL, ranking only, not a leak): the migration's / a restore's SQL count
 * `cv_section_tokens` split a word at a combining mark (`[^[:alnum:]]`) where the indexer's
 * `countWords` does not (`\p{M}`): fixed, the class holds the combining marks' blocks (its test
 * below). Digits such as '²' still count in JS only (documented in migration 025).
 * FOUND (from reading the code): the live bundle's commit was judged in rounds of 200 versions
 * in JS, so its time grew with the hidden versions written since: now one statement.
 *
 * Held: see the passing tests.
 */

const PASSWORD = 'correct horse battery';
const expectOk = (r: { status: number; text: string }) => expect(r.status, r.text.slice(0, 300)).toBeLessThan(300);

interface BundleSection {
  id: string;
  path: string;
  heading: string;
  commit_sha: string;
  text: string;
  via: string;
}
interface BundleAnswer {
  at: string | null;
  markdown: string;
  sections: BundleSection[];
}

/** The commit a bundle's markdown states, or null when it states none. */
const asOf = (md: string): string | null => /^as of commit ([0-9a-f]{12})$/m.exec(md)?.[1] ?? null;
/** A bundle's sections as a set (near-ties may be ordered apart between a live bundle and its replay). */
const held = (b: BundleAnswer) => b.sections.map((x) => `${x.id} ${x.commit_sha} ${x.via} ${x.text}`).sort();

/** Runs of letters, digits and marks: what a section's `tokens` must count (keyword.ts countWords). */
const jsWords = (...parts: string[]) => parts.reduce((n, p) => n + (p.match(/[\p{L}\p{N}\p{M}]+/gu)?.length ?? 0), 0);

describe.each(testEngines())('attack k: a live bundle’s `at` (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let internal: Client; // read and search everywhere, up to internal
  let narrow: Client; // read and search inside `ops/` only, up to internal
  let internalKey: string;
  let narrowKey: string;
  let mcpInternal: McpClient;
  let mcpNarrow: McpClient;
  let other: Client; // another workspace's owner
  const INTENT = 'brindlewick lantern';

  const create = async (path: string, content: string) => {
    const r = await owner.post('/api/v1/nodes', { path, content });
    expect(r.status, r.text.slice(0, 300)).toBe(201);
    return r.body as { id: string; commit_sha: string };
  };
  const mutate = async (r: Promise<{ status: number; text: string; body: any }>) => {
    const res = await r;
    expectOk(res);
    return res.body as { id: string; commit_sha: string };
  };
  const bundle = async (c: Client, body: Record<string, unknown> = {}): Promise<BundleAnswer> => {
    const r = await c.post('/api/v1/bundle', { intent: INTENT, budget_tokens: 4000, ...body });
    expect(r.status, r.text.slice(0, 300)).toBe(200);
    return r.body as BundleAnswer;
  };
  /**
   * The caller's live `at` by every face (POST and GET /bundle, MCP context_bundle), checked to
   * agree with each other and with the markdown's line.
   */
  const atOf = async (c: Client, mcp?: McpClient): Promise<string | null> => {
    const post = await bundle(c);
    expect(asOf(post.markdown)).toBe(post.at?.slice(0, 12) ?? null);
    const get = await c.get(`/api/v1/bundle?${new URLSearchParams({ intent: INTENT, budget_tokens: '4000' })}`);
    expect(get.status, get.text.slice(0, 300)).toBe(200);
    expect((get.body as BundleAnswer).at).toBe(post.at);
    if (mcp) {
      const md = (await ok(mcp, 'context_bundle', { intent: INTENT })) as string;
      expect(asOf(md)).toBe(post.at?.slice(0, 12) ?? null);
    }
    return post.at;
  };
  /** The live bundle and its replay hold the same sections. */
  const expectReplay = async (c: Client, intent = INTENT) => {
    const live = await bundle(c, { intent, include_links: true });
    if (live.at === null) return live;
    const again = await bundle(c, { intent, include_links: true, at: live.at });
    expect(again.at).toBe(live.at);
    expect(held(again), `${intent}: ${live.sections.length} sections`).toEqual(held(live));
    return live;
  };

  beforeAll(async () => {
    s = await startTestServer(engine);
    const signed = await signupHuman(s.url, 'Kay');
    owner = signed.client;
    expectOk(await owner.post('/api/auth/stepup', { password: PASSWORD }));
    const ik = await createReaderAgent(owner, 'internal');
    internal = ik.client;
    internalKey = ik.key;
    const nk = await createReaderAgent(owner, 'internal', 'ops');
    narrow = nk.client;
    narrowKey = nk.key;
    mcpInternal = await connectMcp(s.url, internalKey);
    mcpNarrow = await connectMcp(s.url, narrowKey);
    other = (await signupHuman(s.url, 'Other')).client;
    await create('ops/base.md', '# Base\n\nThe brindlewick lantern base page.\n');
    await create('dev/devbase.md', '# Devbase\n\nThe brindlewick lantern of dev.\n');
  }, 60_000);
  afterAll(async () => {
    await mcpInternal?.close();
    await mcpNarrow?.close();
    await s?.stop();
  });

  it('no write either caller cannot see moves its `at` (REST POST and GET, MCP, the markdown line), and the replay holds the live sections', async () => {
    const i0 = await atOf(internal, mcpInternal);
    const n0 = await atOf(narrow, mcpNarrow);
    expect(i0).not.toBeNull();
    expect(n0).not.toBeNull();
    const steady = async (what: string) => {
      expect(await atOf(internal, mcpInternal), what).toBe(i0);
      expect(await atOf(narrow, mcpNarrow), what).toBe(n0);
    };
    // Hidden by level from both: every kind of write.
    const conf = await create('ops/conf.md', '---\nsensitivity: confidential\n---\n# Conf\n\nThe brindlewick lantern, confidential.\n');
    await steady('create confidential');
    await mutate(owner.put(`/api/v1/nodes/${conf.id}`, { content: '---\nsensitivity: confidential\n---\n# Conf\n\nRewritten brindlewick.\n' }));
    await steady('update confidential');
    await mutate(owner.post(`/api/v1/nodes/${conf.id}/move`, { to: 'ops/deeper/conf2.md' }));
    await steady('move confidential');
    await mutate(owner.post(`/api/v1/nodes/${conf.id}/archive`, { reason: 'stale' }));
    await steady('archive confidential');
    await mutate(owner.post(`/api/v1/nodes/${conf.id}/restore`, {}));
    await steady('restore confidential');
    await mutate(owner.patch(`/api/v1/nodes/${conf.id}`, { frontmatter: { sensitivity: 'secret' } }));
    await steady('raise confidential to secret');
    await mutate(owner.delete(`/api/v1/nodes/${conf.id}`));
    await steady('delete secret');
    const sec = await create('dev/secret.md', '---\nsensitivity: secret\n---\n# Secret\n\nbrindlewick lantern secret.\n');
    await mutate(owner.delete(`/api/v1/nodes/${sec.id}`));
    await steady('secret created and deleted');
    // Another workspace.
    expect((await other.post('/api/v1/nodes', { path: 'ops/base.md', content: '# Base\n\nbrindlewick lantern elsewhere.\n' })).status).toBe(201);
    await steady('another workspace');
    // Parallel hidden writes.
    const made = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        owner.post('/api/v1/nodes', { path: `ops/par/p${i}.md`, content: `---\nsensitivity: confidential\n---\n# P${i}\n\nbrindlewick ${i}.\n` }),
      ),
    );
    for (const r of made) expect(r.status, r.text.slice(0, 200)).toBe(201);
    await Promise.all(made.map((r, i) => owner.put(`/api/v1/nodes/${r.body.id}`, { content: `---\nsensitivity: secret\n---\n# P${i}\n\nagain ${i}.\n` })));
    await steady('parallel hidden writes');
    // An import of more hidden versions than one round of the walk reads (200).
    const files = Array.from({ length: 230 }, (_, i) => ({
      path: `imp/f${i}.md`,
      content: `---\nsensitivity: confidential\n---\n# F${i}\n\nbrindlewick import ${i}.\n`,
    }));
    const job = await postJson(owner, 'ops', files);
    expect([200, 202], job.text.slice(0, 200)).toContain(job.status);
    expect((await finished(owner, job.body)).status).toBe('done');
    await steady('hidden import of 230 pages');

    // Hidden by path from narrow only: narrow stays, internal moves to the write (the control).
    const dev = await create('dev/moving.md', '# Moving\n\nbrindlewick lantern in dev.\n');
    expect(await atOf(narrow, mcpNarrow)).toBe(n0);
    expect(await atOf(internal, mcpInternal)).toBe(dev.commit_sha);
    const moved = await mutate(owner.post(`/api/v1/nodes/${dev.id}/move`, { to: 'sec/moving.md' }));
    expect(await atOf(narrow)).toBe(n0);
    expect(await atOf(internal)).toBe(moved.commit_sha);
    // The owner (sees everything) follows every write.
    expect(await atOf(owner)).toBe(moved.commit_sha);
    for (const [name, c] of [
      ['internal', internal],
      ['narrow', narrow],
    ] as const) {
      const live = await expectReplay(c);
      expect(live.sections.length, name).toBeGreaterThan(0);
    }
    // The owner's bundle is cut by its budget among 230 near-ties (the imports): session j's documented
    // limitation (which of them make the budget may differ on replay); asked narrowly, it replays.
    await expectReplay(owner, 'lantern moving dev');
  }, 120_000);

  it('while hidden writes run in parallel, every live `at` read meanwhile is the steady one', async () => {
    const n0 = await atOf(narrow);
    const i0 = await atOf(internal);
    let stop = false;
    const writers = Array.from({ length: 4 }, async (_, w) => {
      let k = 0;
      while (!stop) {
        const r = await owner.post('/api/v1/nodes', {
          path: `ops/race/w${w}-${k++}.md`,
          content: '---\nsensitivity: confidential\n---\n# R\n\nbrindlewick lantern race.\n',
        });
        expect(r.status, r.text.slice(0, 200)).toBe(201);
        if (k % 2) expectOk(await owner.delete(`/api/v1/nodes/${r.body.id}`));
      }
      return k;
    });
    const seen = new Set<string | null>();
    try {
      for (let i = 0; i < 15; i++) {
        const [a, b] = await Promise.all([bundle(narrow), bundle(internal)]);
        seen.add(`narrow ${a.at}`);
        seen.add(`internal ${b.at}`);
      }
    } finally {
      stop = true;
    }
    expect((await Promise.all(writers)).reduce((x, y) => x + y, 0)).toBeGreaterThan(8);
    expect([...seen].sort()).toEqual([`internal ${i0}`, `narrow ${n0}`]);
  }, 60_000);

  it('a visible page in a commit of more than 200 hidden versions is found (the walk’s keyset over one commit)', async () => {
    const n0 = await atOf(narrow);
    // One import: 240 pages outside narrow's reach and one inside (space `zone`, narrow sees `ops` only: so
    // import into `ops`, hidden ones in a confidential level).
    const files = Array.from({ length: 240 }, (_, i) => ({ path: `big/h${i}.md`, content: `---\nsensitivity: confidential\n---\n# H${i}\n\nhidden ${i}.\n` }));
    files.splice(117, 0, { path: 'big/visible.md', content: '# Visible\n\nThe brindlewick lantern imported in sight.\n' });
    const job = await postJson(owner, 'ops', files);
    expect([200, 202], job.text.slice(0, 200)).toContain(job.status);
    const done = await finished(owner, job.body);
    expect(done.status).toBe('done');
    const page = await owner.get(`/api/v1/nodes/${encodeURIComponent('ops/big/visible.md')}`);
    expect(page.status, page.text.slice(0, 200)).toBe(200);
    const sha = (page.body as { commit_sha: string }).commit_sha;
    expect(done.commits).toContain(sha);
    const n1 = await atOf(narrow, mcpNarrow);
    expect(n1).not.toBe(n0);
    expect(n1).toBe(sha);
    const live = await expectReplay(narrow, 'brindlewick lantern imported in sight');
    expect(live.sections.map((x) => x.path)).toContain('ops/big/visible.md');
  }, 90_000);

  it('pages moving into and out of sight, levels raised and lowered back: `at` follows only what the caller sees, and replays', async () => {
    const n0 = await atOf(narrow);
    // A page moved from a hidden path into narrow's sight and back.
    const y = await create('dev/wander.md', '# Wander\n\nThe brindlewick lantern wanders.\n');
    expect(await atOf(narrow)).toBe(n0);
    const inSight = await mutate(owner.post(`/api/v1/nodes/${y.id}/move`, { to: 'ops/wander.md' }));
    expect(await atOf(narrow, mcpNarrow)).toBe(inSight.commit_sha);
    await expectReplay(narrow);
    const back = await mutate(owner.post(`/api/v1/nodes/${y.id}/move`, { to: 'dev/wander.md' }));
    expect(await atOf(internal)).toBe(back.commit_sha);
    // Out of sight again: narrow's `at` is its last visible commit before (the page is in none of its snapshots).
    expect(await atOf(narrow, mcpNarrow)).toBe(n0);
    await expectReplay(narrow);
    await mutate(owner.put(`/api/v1/nodes/${y.id}`, { content: '# Wander\n\nEdited out of sight.\n' }));
    expect(await atOf(narrow)).toBe(n0);

    // A page raised above internal's ceiling, edited there, lowered back.
    const before = await atOf(internal);
    expect(before).toBe((await owner.get(`/api/v1/nodes/${y.id}`)).body.commit_sha);
    const x = await create('ops/flip.md', '# Flip\n\nThe brindlewick lantern flips.\n');
    expect(await atOf(internal)).toBe(x.commit_sha);
    expect(await atOf(narrow)).toBe(x.commit_sha);
    await mutate(owner.patch(`/api/v1/nodes/${x.id}`, { frontmatter: { sensitivity: 'confidential' } }));
    // Hidden today: none of its commits count (the raise is seen as the page's absence, as GET /nodes/:id's 404 shows).
    expect((await internal.get(`/api/v1/nodes/${x.id}`)).status).toBe(404);
    expect(await atOf(internal)).toBe(before);
    expect(await atOf(narrow)).toBe(n0);
    for (let k = 0; k < 3; k++) {
      await mutate(owner.put(`/api/v1/nodes/${x.id}`, { content: `---\nsensitivity: confidential\n---\n# Flip\n\nHidden edit ${k}.\n` }));
      expect(await atOf(internal, mcpInternal)).toBe(before);
      expect(await atOf(narrow, mcpNarrow)).toBe(n0);
    }
    await expectReplay(internal);
    const lowered = await mutate(owner.patch(`/api/v1/nodes/${x.id}`, { frontmatter: { sensitivity: 'internal' } }));
    expect(await atOf(internal, mcpInternal)).toBe(lowered.commit_sha);
    expect(await atOf(narrow, mcpNarrow)).toBe(lowered.commit_sha);
    await expectReplay(internal);
    await expectReplay(narrow);
    // Deleting a visible page moves both (deleted pages count), and the replay leaves it out.
    const del = await mutate(owner.delete(`/api/v1/nodes/${x.id}`));
    expect(await atOf(internal)).toBe(del.commit_sha);
    expect(await atOf(narrow)).toBe(del.commit_sha);
    const live = await expectReplay(narrow, 'lantern flips');
    expect(live.sections.map((s) => s.id)).not.toContain(x.id);
  }, 90_000);

  it('a `::: secret` block added to a visible page moves `at` exactly as GET /nodes/:id’s commit_sha and the bundle’s own section commit already show', async () => {
    const page = await create('ops/blocky.md', '# Blocky\n\nThe brindlewick lantern blocky words.\n');
    expect(await atOf(internal)).toBe(page.commit_sha);
    const first = await bundle(internal, { intent: 'brindlewick lantern blocky' });
    const firstSec = first.sections.find((x) => x.id === page.id)!;
    expect(firstSec.commit_sha).toBe(page.commit_sha);
    const withBlock = await mutate(
      owner.put(`/api/v1/nodes/${page.id}`, { content: '# Blocky\n\nThe brindlewick lantern blocky words.\n\n::: secret\nThe hushvellum words.\n:::\n' }),
    );
    // What an internal reader could learn without the bundle: the page's commit moved.
    const read = await internal.get(`/api/v1/nodes/${page.id}`);
    expect(read.status).toBe(200);
    expect(read.body.commit_sha).toBe(withBlock.commit_sha);
    expect(JSON.stringify(read.body)).not.toMatch(/hushvellum/);
    // The bundle tells no more: `at` is that commit, the section's commit_sha is that commit, its text unchanged.
    const b = await bundle(internal, { intent: 'brindlewick lantern blocky hushvellum' });
    expect(b.at).toBe(withBlock.commit_sha);
    const sec = b.sections.find((x) => x.id === page.id)!;
    expect(sec.commit_sha).toBe(withBlock.commit_sha);
    expect(sec.text).toBe(firstSec.text);
    expect(JSON.stringify(b.sections) + b.markdown.split('\n').slice(1).join('\n')).not.toMatch(/hushvellum/);
    // Rewriting only the hidden block: same story (the page's commit is public to its readers).
    const again = await mutate(
      owner.put(`/api/v1/nodes/${page.id}`, {
        content: '# Blocky\n\nThe brindlewick lantern blocky words.\n\n::: secret\nThe hushvellum words, changed.\n:::\n',
      }),
    );
    expect((await internal.get(`/api/v1/nodes/${page.id}`)).body.commit_sha).toBe(again.commit_sha);
    expect(await atOf(internal)).toBe(again.commit_sha);
    await expectReplay(internal, 'brindlewick lantern blocky');
  });

  it('`at` is null when no commit changed a page the caller may see, and the markdown then states no commit', async () => {
    const nowhere = await createReaderAgent(owner, 'internal', 'nowhere');
    const m = await connectMcp(s.url, nowhere.key);
    try {
      // A scope naming nothing the caller reads is refused (issue 13); the workspace-wide live bundle answers null.
      const b = await nowhere.client.post('/api/v1/bundle', { intent: INTENT });
      expect(b.status, b.text.slice(0, 300)).toBe(200);
      expect(b.body.at).toBeNull();
      expect(asOf(b.body.markdown)).toBeNull();
      expect(b.body.sections).toEqual([]);
      expect(await atOf(nowhere.client, m)).toBeNull();
      // A hidden page appears at that path's sibling, a confidential one inside it: still null.
      await create('nowhere/conf.md', '---\nsensitivity: confidential\n---\n# C\n\nbrindlewick.\n');
      await create('nowherex/near.md', '# Near\n\nbrindlewick lantern.\n');
      expect(await atOf(nowhere.client, m)).toBeNull();
      // A page it may see: `at` is its commit.
      const mine = await create('nowhere/seen.md', '# Seen\n\nbrindlewick lantern seen.\n');
      expect(await atOf(nowhere.client, m)).toBe(mine.commit_sha);
    } finally {
      await m.close();
    }
    // A fresh workspace's own owner, before any page: null or its first commit, never another workspace's.
    const fresh = (await signupHuman(s.url, 'Fresh')).client;
    const fb = await bundle(fresh);
    if (fb.at !== null) expect(fb.at).not.toBe(await atOf(owner));
  });

  it('revoked and expired keys get 401 on POST and GET /bundle and on MCP, before any commit is looked up', async () => {
    const grants = [
      { action: 'read', ceiling: 'internal' },
      { action: 'search', ceiling: 'internal' },
    ];
    const rev = await createAgentWithKey(owner, grants, { ceiling: 'internal' });
    const exp = await createAgentWithKey(owner, grants, { ceiling: 'internal' });
    const mRev = await connectMcp(s.url, rev.key);
    expect(await atOf(rev.client, mRev)).toBe(await atOf(internal));
    expect((await owner.delete(`/api/v1/principals/${rev.id}/tokens/${rev.keyId}`)).status).toBe(200);
    await s.ctx.store.db
      .updateTable('agent_keys')
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where('id', '=', exp.keyId)
      .execute();
    for (const c of [rev.client, exp.client]) {
      expectError(await c.post('/api/v1/bundle', { intent: INTENT }), 401, 'invalid_token');
      expectError(await c.get(`/api/v1/bundle?intent=${encodeURIComponent(INTENT)}`), 401, 'invalid_token');
    }
    // The MCP session opened before the revocation is refused too.
    let refused: boolean;
    try {
      const r = await call(mRev, 'context_bundle', { intent: INTENT });
      refused = r.isError && !/as of commit/.test(r.text);
    } catch {
      refused = true;
    }
    expect(refused).toBe(true);
    await mRev.close().catch(() => undefined);
    await expect(connectMcp(s.url, exp.key)).rejects.toThrow();
  });
});

const manySections = (title: string, n: number, words: (i: number) => string, level = 'internal') =>
  `---\nsensitivity: ${level}\n---\n# ${title}\n\n` + Array.from({ length: n }, (_, i) => `## part ${i}\n\n${words(i)}\n`).join('\n');
/** Filler words no query asks for: long sections. */
const filler = (n: number, seed = 'fill') => Array.from({ length: n }, (_, i) => `${seed}${i % 97}`).join(' ');

describe.each(testEngines())('attack k: keyword scores as an oracle for text the caller cannot see (%s)', (engine) => {
  const pgOnly = engine === 'postgres';
  let s: TestServer;
  let owner: Client;
  let internal: Client; // read and search everywhere up to internal: scored against the workspace's average length
  let confAgent: Client; // up to confidential everywhere
  let narrow: Client; // search inside `ops/` only (PostgreSQL: the matches' average length)
  let other: Client;
  const ids: Record<string, string> = {};

  const create = async (c: Client, path: string, content: string) => {
    const r = await c.post('/api/v1/nodes', { path, content });
    expect(r.status, r.text.slice(0, 300)).toBe(201);
    return (r.body as { id: string }).id;
  };
  const QUERIES = [
    'quillfeather',
    'quillfeather marrowgate',
    'marrowgate thornbury quillfeather',
    'quillfeather ferngully',
    'ferngully marrowgate nosuchwordhere',
    'pivotword',
  ];
  const search = async (c: Client, q: string) => {
    const r = await c.get(`/api/v1/search?${new URLSearchParams({ q, mode: 'fts', limit: '50' })}`);
    expect(r.status, `${q}: ${r.text.slice(0, 300)}`).toBe(200);
    return (r.body as { results: { path: string; section: string; score: number }[] }).results.map((h) => `${h.path} ${h.section} ${h.score}`);
  };
  const snap = async (c: Client) => {
    const out: Record<string, string[]> = {};
    for (const q of QUERIES) out[q] = await search(c, q);
    return out;
  };

  beforeAll(async () => {
    s = await startTestServer(engine);
    const signed = await signupHuman(s.url, 'Kw');
    owner = signed.client;
    expectOk(await owner.post('/api/auth/stepup', { password: PASSWORD }));
    const grants = (ceiling: string, scope?: string) => ['read', 'search'].map((action) => ({ action, ceiling, ...(scope ? { scope } : {}) }));
    internal = (await createAgentWithKey(owner, grants('internal'), { ceiling: 'internal' })).client;
    confAgent = (await createAgentWithKey(owner, grants('confidential'), { ceiling: 'confidential' })).client;
    narrow = (await createAgentWithKey(owner, grants('internal', 'ops'), { ceiling: 'internal' })).client;
    other = (await signupHuman(s.url, 'Other')).client;
    // What the callers see: sections of several lengths holding the words.
    ids.q1 = await create(owner, 'ops/q1.md', '# Quill one\n\nThe quillfeather marrowgate, short.\n');
    ids.q2 = await create(
      owner,
      'ops/q2.md',
      `# Quill two\n\nquillfeather quillfeather thornbury ${filler(120)}\n\n## Later\n\nmarrowgate ${filler(40, 'late')}\n`,
    );
    ids.q3 = await create(owner, 'dev/q3.md', `# Quill three\n\nquillfeather marrowgate thornbury ${filler(30)}\n`);
    ids.q4 = await create(owner, 'ops/q4.md', '---\nsensitivity: public\n---\n# Quill four\n\nquillfeather ferngully, public.\n');
    ids.host = await create(owner, 'ops/host.md', '# Host\n\nA visible page that will carry hidden blocks.\n');
    ids.match = await create(owner, 'ops/match.md', '# Match\n\nThe quillfeather of the match page.\n');
    // A common word (PostgreSQL keeps it out of the matched words, past 2,000 sections, but weighs it: `weighed`).
    if (pgOnly)
      await create(
        owner,
        'ops/common.md',
        manySections('Common', 2100, (i) => `ferngully ${i}`),
      );
    else
      await create(
        owner,
        'ops/common.md',
        manySections('Common', 30, (i) => `ferngully ${i}`),
      );
    // `pivotword`: a short section holding it once, and longer ones holding it twice; where the
    // short one ranks among them depends on the average section length the caller is measured against.
    await create(owner, 'ops/pa.md', '# Pa\n\npivotword once.\n');
    for (const n of [6, 9, 12, 16, 20, 26, 34, 60]) await create(owner, `ops/pb${n}.md`, `# Pb\n\npivotword pivotword ${filler(n, 'pv')}\n`);
    ids.hiddenConf = await create(
      owner,
      'ops/hconf.md',
      manySections('Hconf', 3, () => `quillfeather marrowgate ${filler(50, 'h')}`, 'confidential'),
    );
  }, 90_000);
  afterAll(async () => s?.stop());

  it('text above the ceiling, in `::: secret` blocks, in hidden pages archived / restored / deleted, and in another workspace moves no score', async () => {
    const callers: [string, Client][] = [['internal', internal], ['confidential', confAgent], ...(pgOnly ? ([['narrow', narrow]] as [string, Client][]) : [])];
    const before: Record<string, Record<string, string[]>> = {};
    for (const [n, c] of callers) before[n] = await snap(c);
    expect(before.internal!.quillfeather!.length).toBeGreaterThan(3);
    expect(before.internal!.quillfeather!.join()).not.toMatch(/hconf/);
    const steady = async (what: string, who = callers) => {
      for (const [n, c] of who) expect(await snap(c), `${n} after ${what}`).toEqual(before[n]);
    };
    const secretOnly = callers.filter(([n]) => n !== 'confidential');

    // Above internal's ceiling (confidential), long and full of the words.
    // Each hidden write below holds about 40,000 words: counted by mistake, it would move the
    // average as much as the positive control at the end does (which reorders `pivotword`).
    const conf = await create(
      owner,
      'ops/conf-long.md',
      manySections('Conf', 40, (i) => `quillfeather marrowgate ferngully thornbury pivotword ${filler(i === 0 ? 40_000 : 200 + i)}`, 'confidential'),
    );
    await steady('a long confidential page', secretOnly);
    before.confidential = await snap(confAgent); // it sees that page: its answers start again from here
    // Secret: above everyone's.
    const sec = await create(
      owner,
      'ops/sec-long.md',
      manySections('Sec', 40, (i) => `quillfeather marrowgate pivotword ${filler(i === 0 ? 40_000 : 400)}`, 'secret'),
    );
    await steady('a long secret page');
    // `::: secret` blocks in a visible page that matches nothing, and in one that matches.
    expectOk(
      await owner.put(`/api/v1/nodes/${ids.host}`, {
        content: `# Host\n\nA visible page that will carry hidden blocks.\n\n::: secret\n## Hidden head quillfeather\n\nquillfeather marrowgate pivotword ${filler(40_000)}\n:::\n`,
      }),
    );
    await steady('a secret block in a visible page');
    expectOk(
      await owner.put(`/api/v1/nodes/${ids.match}`, {
        content: `# Match\n\nThe quillfeather of the match page.\n\n::: secret\nquillfeather quillfeather marrowgate ${filler(2000)}\n:::\n`,
      }),
    );
    // The rewritten page's sections get new ids: a tie with it may order apart, so compare as sets here.
    for (const [n, c] of callers) expect((await snap(c)).quillfeather!.slice().sort(), n).toEqual(before[n]!.quillfeather!.slice().sort());
    // Hidden pages moved, archived, restored, raised, deleted.
    expectOk(await owner.post(`/api/v1/nodes/${conf}/archive`, { reason: 'stale' }));
    expectOk(await owner.post(`/api/v1/nodes/${conf}/restore`, {}));
    expectOk(await owner.post(`/api/v1/nodes/${conf}/move`, { to: 'dev/conf-moved.md' }));
    expectOk(await owner.patch(`/api/v1/nodes/${ids.hiddenConf}`, { frontmatter: { sensitivity: 'secret' } }));
    await steady('hidden pages archived, restored, moved, raised', secretOnly);
    expectOk(await owner.delete(`/api/v1/nodes/${sec}`));
    expectOk(await owner.post(`/api/v1/nodes/${conf}/archive`, { reason: 'stale' }));
    await steady('a secret page deleted, a confidential one archived', secretOnly);
    before.confidential = await snap(confAgent);
    // Another workspace: the same words, many sections, much longer.
    await create(
      other,
      'ops/q1.md',
      manySections('Other', 60, (i) => `quillfeather marrowgate ferngully pivotword ${filler(i === 0 ? 40_000 : 300)}`, 'public'),
    );
    await steady('another workspace');

    // Positive control: a visible long section that matches nothing moves the workspace's
    // average length (PostgreSQL's avgTokens; FTS5's own average): so the checks above could fail.
    const control = await create(owner, 'dev/long-visible.md', `# Long\n\n${filler(40_000, 'visible')}\n`);
    expect((await snap(internal)).pivotword).not.toEqual(before.internal!.pivotword);
    expectOk(await owner.delete(`/api/v1/nodes/${control}`));
  }, 120_000);

  it.skipIf(!pgOnly)(
    'a path-scoped agent: writes outside its grants move none of its scores, writes inside do (PostgreSQL: the matches’ average)',
    async () => {
      const before = await snap(narrow);
      const internalBefore = await snap(internal);
      // dev/ is outside narrow's grant but in internal's sight.
      await create(
        owner,
        'dev/outside.md',
        manySections('Outside', 30, (i) => `quillfeather marrowgate thornbury ferngully pivotword ${filler(i === 0 ? 40_000 : 500, 'out')}`),
      );
      expect(await snap(narrow)).toEqual(before);
      // Internal sees it: its answers change (the control for this step).
      expect(await snap(internal)).not.toEqual(internalBefore);
      // A matching long section inside ops/ moves narrow's (its matches' average): the control.
      const inside = await create(owner, 'ops/inside.md', `# Inside\n\nquillfeather ${filler(900, 'in')}\n`);
      expect((await snap(narrow)).quillfeather).not.toEqual(before.quillfeather);
      expectOk(await owner.delete(`/api/v1/nodes/${inside}`));
      expect(await snap(narrow)).toEqual(before);
    },
    60_000,
  );
});

const HOSTILE: [string, string][] = [
  ['punct', '# !!!\n\n.,;:!?—…***\n\n## ---\n\n¡¿ «» ‽ ‰ § ¶ ¤\n'],
  ['emoji', '# 😀🎉\n\n👨‍👩‍👧 👍🏽 🏳️‍🌈 😀😀😀 quorlix🙂quorlix\n'],
  ['cjk', '# 漢字の頁\n\n日本語のテキストです。中文文本。한국어 텍스트. quorlix\n'],
  ['marks', '# Marks\n\nnai\u0308ve cafe\u0301 \u0301\u0301 x\u20dd ²³ ½ quorlix\n'],
  ['bidi', '# \u202eBidi\n\nשלום עולם مرحبا \u200b\u200dquorlix\u2060x\n'],
  ['nul', '# Nul\n\nquorlix\u0000after\n'],
  ['lone', '# Lone\n\nquorlix \ud800 half \udfff\n'],
  ['near-limit', `# Near\n\n${'zq '.repeat(349_000)}quorlix\n`],
  ['over-limit', `# Over\n\n${'x'.repeat(1024 * 1024 + 1)}\n`],
  ['many-sections', `# Many\n\n${Array.from({ length: 2500 }, (_, i) => `## h${i}\n\nquorlix ${i}\n`).join('\n')}`],
  ['only-headings', Array.from({ length: 50 }, (_, i) => `${'#'.repeat((i % 6) + 1)} ${i % 2 ? '***' : 'quorlix'}\n`).join('\n')],
  [
    'blocks',
    `# Blocks\n\n${Array.from({ length: 300 }, (_, i) => `::: ${['secret', 'confidential', 'internal', 'public'][i % 4]}\nquorlix ${i}\n${i % 3 ? ':::' : ''}\n`).join('\n')}`,
  ],
];

describe.each(testEngines())('attack k: section lengths of hostile text (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let internal: Client;

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url, 'Hos')).client;
    expectOk(await owner.post('/api/auth/stepup', { password: PASSWORD }));
    internal = (
      await createAgentWithKey(
        owner,
        ['read', 'search'].map((action) => ({ action, ceiling: 'internal' })),
        { ceiling: 'internal' },
      )
    ).client;
  }, 60_000);
  afterAll(async () => s?.stop());

  /** Every section's `tokens` equals the JS count of its title, heading and text (both engines write it). */
  const expectTokens = async () => {
    const rows = await s.ctx.store.db.selectFrom('page_sections').select(['id', 'title', 'heading', 'text', 'tokens']).execute();
    const wrong = rows
      .filter((r) => Number(r.tokens) !== jsWords(r.title, r.heading, r.text))
      .map((r) => `${r.id}: ${r.tokens} vs ${jsWords(r.title, r.heading, r.text)}`);
    expect(wrong.slice(0, 10)).toEqual([]);
    return rows.length;
  };

  it('huge, empty-of-words, emoji, CJK, combining, bidi, NUL, lone-surrogate and 1 MB pages: never a 500, and every section’s length is its word count', async () => {
    const made: Record<string, string> = {};
    for (const [name, content] of HOSTILE) {
      const r = await owner.post('/api/v1/nodes', { path: `hostile/${name}.md`, content });
      expect(r.status, `${name}: ${r.text.slice(0, 200)}`).toBeLessThan(500);
      if (name === 'over-limit') expectError(r, 413, 'payload_too_large');
      if (name === 'nul') expectError(r, 400, 'invalid_content');
      // Half a surrogate pair is not Unicode: refused like NUL since session n.
      if (name === 'lone') expectError(r, 400, 'invalid_content');
      if (r.status === 201) made[name] = (r.body as { id: string }).id;
    }
    // The ordinary ones are accepted.
    for (const name of ['punct', 'emoji', 'cjk', 'marks', 'near-limit', 'many-sections']) expect(made[name], name).toBeDefined();
    expect(await expectTokens()).toBeGreaterThan(2500);
    // Rewritten into each other (a page’s length changing by 350,000 words), some deleted.
    const names = Object.keys(made);
    for (let i = 0; i < names.length; i++) {
      const content = HOSTILE.find(([n]) => n === names[(i + 1) % names.length])![1];
      const r = await owner.put(`/api/v1/nodes/${made[names[i]!]}`, { content });
      expect(r.status, `${names[i]}: ${r.text.slice(0, 200)}`).toBeLessThan(500);
    }
    for (const n of names.slice(0, 3)) expect((await owner.delete(`/api/v1/nodes/${made[n]}`)).status).toBe(200);
    await expectTokens();
    // Searches over them, hostile queries included: never a 500.
    for (const q of ['quorlix', 'zq quorlix', '😀', '漢字', 'naïve', 'nai\u0308ve', '***', 'zq '.repeat(200), '\u202e', '²']) {
      for (const c of [owner, internal]) {
        const r = await c.get(`/api/v1/search?${new URLSearchParams({ q, mode: 'fts', limit: '50' })}`);
        expect(r.status, `${q.slice(0, 20)}: ${r.text.slice(0, 200)}`).toBeLessThan(500);
      }
    }
    const b = await internal.post('/api/v1/bundle', { intent: 'quorlix zq', budget_tokens: 2000 });
    expect(b.status, b.text.slice(0, 200)).toBe(200);
  }, 90_000);
});

describe.skipIf(!testEngines().includes('postgres'))('attack k: term_stats and section lengths stay exact (postgres)', () => {
  let s: TestServer;
  let db: pg.Client;
  let a: Client;
  let b: Client;

  beforeAll(async () => {
    s = await startTestServer('postgres');
    db = new pg.Client({ connectionString: s.ctx.config.databaseUrl });
    await db.connect();
    a = (await signupHuman(s.url, 'Ta')).client;
    b = (await signupHuman(s.url, 'Tb')).client;
    expectOk(await a.post('/api/auth/stepup', { password: PASSWORD }));
  }, 60_000);
  afterAll(async () => {
    await db?.end();
    await s?.stop();
  });

  /** term_stats against a fresh count (the ' ' rows against sum(tokens)); tokens against JS; sections against chunks. */
  async function expectTruth(): Promise<void> {
    // Read as search reads them: term_stats and the changes not yet folded into it (migration 029).
    const kept = await db.query(
      `select workspace_id || '|' || lexeme || '|' || level as k, sum(docs)::text as docs from term_counts group by workspace_id, lexeme, level having sum(docs) <> 0`,
    );
    const fresh = await db.query(
      `select s.workspace_id || '|' || x.lexeme || '|' || s.level as k, count(*)::text as docs
       from page_sections s cross join unnest(tsvector_to_array(s.tsv) || '{""}'::text[]) as x(lexeme) group by 1
       union all
       select workspace_id || '| |' || level, sum(tokens)::text from page_sections group by workspace_id, level having sum(tokens) <> 0`,
    );
    const diff = new Map<string, bigint>(kept.rows.map((r) => [r.k as string, BigInt(r.docs as string)]));
    for (const r of fresh.rows) diff.set(r.k, (diff.get(r.k) ?? 0n) - BigInt(r.docs as string));
    expect(
      [...diff]
        .filter(([, d]) => d !== 0n)
        .map(([k, d]) => `${k} ${d}`)
        .slice(0, 20),
    ).toEqual([]);
    expect((await db.query(`select 1 from term_counts group by workspace_id, lexeme, level having sum(docs) < 0`)).rows).toEqual([]);
    const sec = await db.query(`select id, title, heading, text, tokens from page_sections`);
    const wrong = sec.rows.filter((r) => r.tokens !== jsWords(r.title, r.heading, r.text)).map((r) => `${r.id}: ${r.tokens}`);
    expect(wrong.slice(0, 10)).toEqual([]);
    const pages = await db.query(
      `select p.path, p.content, p.deleted_at, (select count(*)::int from page_sections s where s.page_id = p.id) as n from pages p`,
    );
    const badPages = pages.rows
      .filter((p) => p.n !== (p.deleted_at === null ? chunkBody(parseDocument(p.content).body).length : 0))
      .map((p) => `${p.path}: ${p.n}`);
    expect(badPages).toEqual([]);
  }

  it('a `::: secret` block’s words count at level 3 only (never in an internal caller’s average)', async () => {
    const ws = async () =>
      (await db.query(`select workspace_id from pages where deleted_at is null order by created_at desc limit 1`)).rows[0].workspace_id as string;
    const words = async (w: string) => {
      const r = await db.query(`select level, sum(docs)::int as n from term_counts where workspace_id = $1 and lexeme = ' ' group by level order by level`, [
        w,
      ]);
      return Object.fromEntries(r.rows.map((x) => [x.level, x.n])) as Record<number, number>;
    };
    const r = await a.post('/api/v1/nodes', { path: 'lv/plain.md', content: '# Plain\n\none two three\n' });
    expectOk(r);
    const w = await ws();
    const before = await words(w);
    const up = await a.put(`/api/v1/nodes/${r.body.id}`, {
      content: '# Plain\n\none two three\n\n::: secret\nfour five six seven\n:::\n\n::: confidential\neight nine\n:::\n',
    });
    expectOk(up);
    const after = await words(w);
    // Levels 0–1 (what an internal caller's average reads) unchanged; the block's words (and
    // the page title, counted in each section) at 2 and 3.
    expect([after[0] ?? 0, after[1] ?? 0]).toEqual([before[0] ?? 0, before[1] ?? 0]);
    const secs = await db.query(`select level, title, heading, text from page_sections where page_id = $1`, [r.body.id]);
    const at = (lv: number) => secs.rows.filter((x) => x.level === lv).reduce((n, x) => n + jsWords(x.title, x.heading, x.text), 0);
    expect(secs.rows.find((x) => x.level === 3)?.text).toMatch(/four five six seven/);
    expect(secs.rows.find((x) => x.level === 2)?.text).toMatch(/eight nine/);
    expect(after[3]).toBe((before[3] ?? 0) + at(3));
    expect(after[2]).toBe((before[2] ?? 0) + at(2));
    expect(at(3)).toBeGreaterThanOrEqual(4);
    await expectTruth();
  });

  it('storms of concurrent creates, rewrites, moves, level flips, archives, deletes and imports, in two workspaces, with hostile text, leave term_stats and tokens exact', async () => {
    const LV = ['public', 'internal', 'confidential', 'secret'];
    const body = (n: number, lv: string) => {
      const [, hostile] = HOSTILE[n % HOSTILE.length]!;
      // What the API refuses (NUL, half a surrogate pair) or what is too large for a storm: plain words.
      const text =
        hostile.length > 20_000 || hostile.includes('\u0000') || hostile.includes('\ud800') ? `storm words ${n}` : hostile.replace(/^# .*$/m, `# T${n}`);
      return `---\nsensitivity: ${lv}\n---\n${text}\n\n## Tail\n\n${filler(n % 40, 'st')}${n % 3 ? `\n\n::: ${LV[(n + 1) % 4]}\nblock ${filler(n % 25, 'bk')}\n:::\n` : ''}`;
    };
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) {
      const r = await a.post('/api/v1/nodes', { path: `storm/p${i}.md`, content: body(i, LV[i % 4]!) });
      expectOk(r);
      ids.push(r.body.id);
    }
    const bId = (await b.post('/api/v1/nodes', { path: 'storm/b.md', content: body(1, 'public') })).body.id as string;
    let step = 0;
    const any = (r: { status: number; text: string }) => expect(r.status, r.text.slice(0, 200)).toBeLessThan(500);
    const worker = async (w: number) => {
      for (let k = 0; k < 12; k++) {
        const n = step++;
        const id = ids[(n * 7 + w) % ids.length]!;
        const lv = LV[(n + w) % 4]!;
        switch (n % 9) {
          case 0:
            any(await a.put(`/api/v1/nodes/${id}`, { content: body(n, lv) }));
            break;
          case 1:
            any(await a.patch(`/api/v1/nodes/${id}`, { frontmatter: { sensitivity: lv } }));
            break;
          case 2:
            any(await a.post(`/api/v1/nodes/${id}/move`, { to: `storm/m${n}.md` }));
            break;
          case 3:
            any(await a.post(`/api/v1/nodes/${id}/archive`, { reason: 'stale' }));
            break;
          case 4:
            any(await a.post(`/api/v1/nodes/${id}/restore`, {}));
            break;
          case 5:
            any(await a.post(`/api/v1/nodes/${id}/append`, { text: `\n::: secret\nappended ${filler(n, 'ap')}\n:::\n` }));
            break;
          case 6: {
            const job = await postJson(
              a,
              'imp',
              Array.from({ length: 5 }, (_, i) => ({ path: `f${i}.md`, content: body(n + i, LV[(n + i) % 4]!) })),
            );
            any(job);
            if (job.status < 300) expect(['done', 'failed']).toContain((await finished(a, job.body)).status);
            break;
          }
          case 7:
            any(await b.put(`/api/v1/nodes/${bId}`, { content: body(n, lv) }));
            break;
          default: {
            const r = await a.post('/api/v1/nodes', { path: `storm/new${n}.md`, content: body(n, lv) });
            any(r);
            if (r.status === 201) {
              if (n % 2) any(await a.delete(`/api/v1/nodes/${r.body.id}`));
              else ids.push(r.body.id);
            }
          }
        }
      }
    };
    await Promise.all(Array.from({ length: 8 }, (_, w) => worker(w)));
    await expectTruth();
  }, 90_000);

  it('the migration’s SQL count (cv_section_tokens, also used by a restore) counts the same runs as the indexer’s countWords', async () => {
    // Found: `[^[:alnum:]]+` split a word at a combining mark (NFD text: "nai\u0308ve" was two
    // words in SQL, one in JS); the class now holds the combining marks' blocks. Digits other
    // than decimal ones ('²', '½') count in JS only (documented in migration 025).
    const samples = ['nai\u0308ve cafe\u0301', 'e\u0301x', '\u0301abc', 'plain words only', '漢字 テキスト', '😀 x'];
    const wrong: string[] = [];
    for (const t of samples) {
      const r = await db.query(`select cv_section_tokens('', '', $1) as n`, [t]);
      if (r.rows[0].n !== jsWords('', '', t)) wrong.push(`${JSON.stringify(t)}: sql ${r.rows[0].n}, js ${jsWords('', '', t)}`);
    }
    expect(wrong).toEqual([]);
  });
});
