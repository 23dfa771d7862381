import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { call, connectMcp, fails, ok } from './support.js';

/**
 * Attacks on issue 13's additions (extended toolset, errors with suggestions, watching, summaries),
 * with real requests: the SDK client on `/mcp?toolset=extended` and REST. Each test states the safe
 * behaviour. The first block holds holes found (failing until fixed); the rest are attacks that
 * are correctly refused today and must stay so.
 *
 * Callers: `low` reads and writes everything at internal (so confidential pages are hidden and
 * `::: confidential` blocks redacted); `scoped` reads and writes only `open`; `split` reads at
 * internal but writes at confidential (grants may differ per action); `writer` reads and writes at
 * confidential; `foreign` is an agent of another workspace with every grant.
 */

const EXT = '/mcp?toolset=extended';
const PASSWORD = 'correct horse battery';
const ACTIONS = ['read', 'write', 'search', 'propose', 'collab'];
const grants = (ceiling: string, scope = '*') => ACTIONS.map((action) => ({ action, scope, ceiling }));
/** A cursor of the changes feed at a given position (base64url of `seq:pageId`, as the feed makes them). */
const cursorAt = (seq: string, pageId = '') => Buffer.from(`${seq}:${pageId}`).toString('base64url');
/** The same error text with the name the caller sent taken out. */
const sameBut = (text: string, name: string) => text.split(name).join('<name>');

describe.each(testEngines())('attacks on issue 13 additions (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let low: McpClient;
  let lowKey: string;
  let lowId: string;
  let scoped: McpClient;
  let writer: McpClient;
  let split: McpClient;
  let splitRest: Client;
  let foreign: McpClient;
  let foreignKey: string;
  let wsSlug: string;
  const ids: Record<string, string> = {};
  const clients: McpClient[] = [];

  const make = async (path: string, content: string) => {
    const r = await owner.post('/api/v1/nodes', { path, content });
    expect(r.status, r.text).toBe(201);
    ids[path] = r.body.id;
    return r.body as { id: string; content_hash: string; commit_sha: string };
  };
  const raw = async (id: string) => (await owner.get(`/api/v1/nodes/${id}?format=md`)).text;
  const inbox = async (c: McpClient) => (await ok(c, 'collab_inbox', { limit: 100 })).events as any[];
  const stepUp = async () => expect((await owner.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);

  beforeAll(async () => {
    s = await startTestServer(engine);
    const h = await signupHuman(s.url, 'Olive');
    owner = h.client;
    wsSlug = h.workspace.slug;
    const l = await createAgentWithKey(owner, grants('internal'), { name: 'Lowe', ceiling: 'internal' });
    lowKey = l.key;
    lowId = l.id;
    low = await connectMcp(s.url, l.key, EXT);
    scoped = await connectMcp(s.url, (await createAgentWithKey(owner, grants('internal', 'open'), { name: 'Scope', ceiling: 'internal' })).key, EXT);
    writer = await connectMcp(s.url, (await createAgentWithKey(owner, grants('confidential'), { name: 'Writer' })).key, EXT);
    const sp = await createAgentWithKey(
      owner,
      [
        { action: 'read', ceiling: 'internal' },
        { action: 'write', ceiling: 'confidential' },
        { action: 'propose', ceiling: 'confidential' },
      ],
      { name: 'Split', ceiling: 'confidential' },
    );
    split = await connectMcp(s.url, sp.key, EXT);
    splitRest = sp.client;
    const f = await signupHuman(s.url, 'Frank');
    const fa = await createAgentWithKey(f.client, grants('confidential'), { name: 'Foreign' });
    foreignKey = fa.key;
    foreign = await connectMcp(s.url, fa.key, EXT);
    clients.push(low, scoped, writer, split, foreign);

    await make(
      'eng/mixed.md',
      '# Mixed\n\nopen text\n\n## Open\n\nvisible\n\n## Tail\n\ntail text\n\n::: confidential\n## Hidden Heading\n\nSECRETWORD\n:::\n',
    );
    await make('eng/plan-hidden.md', '---\nsensitivity: confidential\n---\n# Plan\n\nSECRETPLAN\n');
    await make('eng/hf/only.md', '---\nsensitivity: confidential\n---\n# HF\n');
    await make('vault/only.md', '---\nsensitivity: confidential\n---\n# Only\n');
    await make('open/a.md', '# A\n\nalpha\n');
    await make('closed/b.md', '# B\n\nbeta\n');
    await make('idx/index.md', '# Idx\n\n::: confidential\nSECRETSUMMARY here\n:::\n\nPublic summary text.\n');
    await make('idx2/index.md', '---\nsensitivity: confidential\n---\n# Idx2\n\nHidden summary SECRET2\n');
    await make('idx2/pub.md', '# Pub\n');
  }, 90_000);

  afterAll(async () => {
    for (const c of clients) await c?.close();
    await s?.stop();
  });

  // -------------------------------------------------------------------------------------------
  // Holes found (each test states the safe behaviour; failing until fixed).
  // -------------------------------------------------------------------------------------------
  describe('holes', () => {
    it('an agent that writes above the level it reads cannot erase a block it cannot read (context_write, REST PUT)', async () => {
      // `split` reads at internal, writes at confidential: it sees the block as [redacted].
      const pg = await make('eng/split-erase.md', '# P\n\nline one\n\n::: confidential\nSECRETY\n:::\n');
      const seen = await ok(split, 'context_get', { id: pg.id });
      expect(seen.content).not.toContain('SECRETY');
      expect(seen.content).toContain('[redacted]');
      // It sends back what it saw, edited: the block it never read must not be lost or replaced.
      const r = await call(split, 'context_write', { path: 'eng/split-erase.md', content: '# P\n\nline ONE\n\n[redacted]\n' });
      expect(r.isError, r.text).toBe(true);
      expect(r.text).toMatch(/^forbidden: /);
      const rest = await splitRest.put(`/api/v1/nodes/${pg.id}`, { content: '# P\n\nline TWO\n' });
      expect(rest.status, rest.text).toBe(403);
      expect(await raw(pg.id)).toContain('SECRETY');
    });

    it('a 409 conflict never hands a caller the git blob sha of a head it cannot read whole', async () => {
      // The head holds a block above split's read level; the blob sha of that text would let a
      // reader brute-force a short hidden block offline (the reason redacted validators exist).
      const v1 = await ok(split, 'context_write', { path: 'eng/split-conflict.md', content: '# P\n\nline one\n' });
      const put = await owner.put(`/api/v1/nodes/${v1.id}`, { content: '# P\n\nline owner\n\n::: confidential\n1234\n:::\n' });
      expect(put.status, put.text).toBe(200);
      const rawHash = put.body.content_hash as string;
      const seen = await ok(split, 'context_get', { id: v1.id });
      expect(seen.content_hash).not.toBe(rawHash);
      const r = await splitRest.put(`/api/v1/nodes/${v1.id}`, { content: '# P\n\nline split\n' }, { 'if-match': `"${v1.content_hash}"` });
      // Safe: refused outright (as the write above), or a conflict that names only what split may see.
      if (r.status === 409) {
        expect(r.body.hunks[0].current).toBe('[redacted]');
        expect(r.text).not.toContain(rawHash);
      } else {
        expect(r.status, r.text).toBe(403);
      }
      expect(await raw(v1.id)).toContain('1234');
    });

    it('numbers beyond the database integer range are bad input or an empty answer, never internal_error (MCP)', async () => {
      const big = '99999999999';
      const cases: [McpClient, string, Record<string, unknown>][] = [
        [low, 'context_changes', { since: cursorAt(big) }],
        [low, 'context_changes', { since: cursorAt('999999999999999') }],
        [low, 'collab_thread', { node: ids['open/a.md'], after: big }],
        [low, 'collab_thread', { node: ids['open/a.md'], after: 9007199254740991 }],
        [low, 'collab_inbox', { after: Number(big) }],
        [low, 'collab_inbox', { after: big }],
        [low, 'collab_ack', { seqs: [big] }],
        [low, 'collab_ack', { up_to: big }],
      ];
      const broken: string[] = [];
      for (const [c, tool, args] of cases) {
        const r = await call(c, tool, args);
        if (r.text.startsWith('internal_error')) broken.push(`${tool} ${JSON.stringify(args)}`);
        else if (r.isError) expect(r.text, tool).toMatch(/^(invalid_request|invalid_cursor): /);
      }
      expect(broken).toEqual([]);
    });

    it('numbers beyond the database integer range are bad input or an empty answer, never a 500 (REST)', async () => {
      const rest = new Client(s.url, lowKey);
      const paths = [
        `/api/v1/changes?since=${cursorAt('99999999999')}`,
        `/api/v1/nodes/${ids['open/a.md']}/threads?after=99999999999`,
        `/api/v1/inbox?after=99999999999`,
      ];
      const broken: string[] = [];
      for (const p of paths) {
        const r = await rest.get(p);
        if (r.status >= 500) broken.push(`${p} ${r.status}`);
        else expect([200, 400], p).toContain(r.status);
      }
      expect(broken).toEqual([]);
    });
  });

  // -------------------------------------------------------------------------------------------
  // Correctly refused today.
  // -------------------------------------------------------------------------------------------
  describe('hidden things answer exactly as missing ones', () => {
    it('page reads, suggestions and every extended page tool: a hidden page is a missing page', async () => {
      const hidden = ids['eng/plan-hidden.md']!;
      const none = 'pg_00000000000000000000000000';
      // No "did you mean" toward a hidden page, whether .md is missing or a letter is off.
      for (const [h, n] of [
        ['eng/plan-hidden', 'eng/plan-nobody'],
        ['eng/plan-hiddex.md', 'eng/plan-nobodx.md'],
      ]) {
        const a = await fails(low, 'context_get', { path: h }, 'not_found');
        const b = await fails(low, 'context_get', { path: n }, 'not_found');
        expect(a).not.toContain('did you mean');
        expect(sameBut(a, h!)).toBe(sameBut(b, n!));
      }
      const byId: [string, Record<string, unknown>][] = [
        ['context_get', {}],
        ['context_history', {}],
        ['context_get_at', { at: '0000000' }],
        ['context_append', { text: 'x' }],
        ['context_replace_section', { section: 'Plan', text: 'x' }],
        ['context_patch', { patch: '--- a\n+++ b\n@@ -1 +1 @@\n-# Plan\n+# Mine\n' }],
        ['context_move', { to: 'eng/taken-over.md' }],
      ];
      for (const [tool, args] of byId) {
        const a = await call(low, tool, { id: hidden, ...args });
        const b = await call(low, tool, { id: none, ...args });
        expect(a.isError, tool).toBe(true);
        expect(sameBut(a.text, hidden), tool).toBe(sameBut(b.text, none));
      }
      const t1 = await call(low, 'collab_thread', { node: hidden });
      const t2 = await call(low, 'collab_thread', { node: none });
      expect(sameBut(t1.text, hidden)).toBe(sameBut(t2.text, none));
      expect(await raw(hidden)).toContain('SECRETPLAN');
      expect(await raw(hidden)).not.toContain('taken-over');
    });

    it('scopes: a Space or folder holding only hidden pages answers as a missing one, on every face, naming only visible scopes', async () => {
      for (const [tool, extra] of [
        ['context_search', { query: 'x' }],
        ['context_bundle', { intent: 'x' }],
        ['context_changes', {}],
      ] as const) {
        for (const [h, n] of [
          ['vault', 'vaulx'],
          ['eng/hf', 'eng/hx'],
        ]) {
          const a = await fails(low, tool, { ...extra, scope: h }, 'unknown_scope');
          const b = await fails(low, tool, { ...extra, scope: n }, 'unknown_scope');
          expect(sameBut(a, h!), tool).toBe(sameBut(b, n!));
          // Only the name sent is echoed; the scopes listed are visible ones.
          expect(a.split('Scopes you can use:')[1], tool).not.toMatch(/vault|hf\b/);
        }
      }
      const rest = new Client(s.url, lowKey);
      const a = await rest.get('/api/v1/changes?scope=vault');
      const b = await rest.get('/api/v1/changes?scope=vaulx');
      expect(a.status).toBe(404);
      expect(sameBut(a.text, 'vault')).toBe(sameBut(b.text, 'vaulx'));
      // The scoped agent is told of its own folder only.
      const t = await fails(scoped, 'context_changes', { scope: 'closed' }, 'unknown_scope');
      expect(t).toContain('open');
      expect(t).not.toMatch(/closed.*closed|eng|vault|idx/);
      await fails(scoped, 'context_changes', { scope: '../open' }, 'invalid_scope');
      await fails(scoped, 'context_changes', { scope: 'open/\u0000' }, 'invalid_scope');
    });

    it('watching: a hidden page (id or path), a folder of hidden pages and a hidden Space answer as missing ones', async () => {
      const pairs: [Record<string, unknown>, Record<string, unknown>, string, string][] = [
        [{ id: ids['eng/plan-hidden.md'] }, { id: 'pg_00000000000000000000000000' }, ids['eng/plan-hidden.md']!, 'pg_00000000000000000000000000'],
        [{ path: 'eng/plan-hidden.md' }, { path: 'eng/plan-nobody.md' }, 'eng/plan-hidden.md', 'eng/plan-nobody.md'],
        [{ path: 'eng/hf' }, { path: 'eng/hx' }, 'eng/hf', 'eng/hx'],
        [{ path: 'vault' }, { path: 'vaulx' }, 'vault', 'vaulx'],
      ];
      for (const [h, n, hn, nn] of pairs) {
        const a = await fails(low, 'context_watch', h, 'not_found');
        const b = await fails(low, 'context_watch', n, 'not_found');
        expect(sameBut(a, hn)).toBe(sameBut(b, nn));
        const u = await fails(low, 'context_unwatch', h, 'not_found');
        const v = await fails(low, 'context_unwatch', n, 'not_found');
        expect(sameBut(u, hn)).toBe(sameBut(v, nn));
      }
      // A scoped agent may not watch a whole Space through a narrower grant, nor a place outside it.
      await fails(scoped, 'context_watch', { path: 'closed' }, 'not_found');
      await fails(scoped, 'context_watch', { id: ids['closed/b.md'] }, 'not_found');
    });

    it('proposals: withdrawing another agent’s proposal on a hidden page answers as an unknown id; on a visible one, forbidden', async () => {
      const hiddenPr = await ok(writer, 'context_propose', { path: 'eng/plan-hidden.md', content: '---\nsensitivity: confidential\n---\n# Plan v2\n' });
      const a = await fails(low, 'context_withdraw', { id: hiddenPr.proposal.id }, 'not_found');
      const b = await fails(low, 'context_withdraw', { id: 'pp_00000000000000000000000000' }, 'not_found');
      expect(sameBut(a, hiddenPr.proposal.id)).toBe(sameBut(b, 'pp_00000000000000000000000000'));
      const visiblePr = await ok(writer, 'context_propose', { path: 'open/a.md', content: '# A\n\nalpha two\n' });
      await fails(low, 'context_withdraw', { id: visiblePr.proposal.id }, 'forbidden');
      const mine = await ok(writer, 'context_proposals', { status: 'open' });
      expect(mine.proposals.map((p: any) => p.id)).toEqual(expect.arrayContaining([hiddenPr.proposal.id, visiblePr.proposal.id]));
      const lows = await ok(low, 'context_proposals', {});
      expect(JSON.stringify(lows)).not.toContain(hiddenPr.proposal.id);
    });
  });

  it('own proposals on a page raised above the proposer since disappear from its list, and withdrawing one is not_found', async () => {
    const pa = await createAgentWithKey(
      owner,
      ['read', 'propose'].map((action) => ({ action, scope: '*', ceiling: 'internal' })),
      { name: 'Proposer', ceiling: 'internal' },
    );
    const proposer = await connectMcp(s.url, pa.key, EXT);
    clients.push(proposer);
    const pg = await make('eng/to-raise.md', '# To raise\n');
    const pr = await ok(proposer, 'context_propose', { path: 'eng/to-raise.md', content: '# To raise\n\nmore\n' });
    expect((await ok(proposer, 'context_proposals', {})).proposals.map((x: any) => x.id)).toContain(pr.proposal.id);
    const put = await owner.put(`/api/v1/nodes/${pg.id}`, { content: '---\nsensitivity: confidential\n---\n# Raised SECRETR\n' });
    expect(put.status).toBe(200);
    const list = JSON.stringify(await ok(proposer, 'context_proposals', {}));
    expect(list).not.toContain(pr.proposal.id);
    expect(list).not.toContain('SECRETR');
    const a = await fails(proposer, 'context_withdraw', { id: pr.proposal.id }, 'not_found');
    const b = await fails(proposer, 'context_withdraw', { id: 'pp_00000000000000000000000000' }, 'not_found');
    expect(sameBut(a, pr.proposal.id)).toBe(sameBut(b, 'pp_00000000000000000000000000'));
  });

  describe('redacted blocks', () => {
    it('section lists never name a heading inside a hidden block; asking for it is a missing section (now and at a commit)', async () => {
      const id = ids['eng/mixed.md']!;
      const a = await fails(low, 'context_get', { id, section: 'Nope' }, 'section_not_found');
      const b = await fails(low, 'context_get', { id, section: 'Hidden Heading' }, 'section_not_found');
      expect(a).toContain('"Open"');
      expect(a).not.toContain('Hidden');
      expect(sameBut(a, 'Nope')).toBe(sameBut(b, 'Hidden Heading'));
      const hist = await ok(low, 'context_history', { id });
      const at = hist.versions[0].commit_sha;
      const c = await fails(low, 'context_get_at', { id, at, section: 'Hidden Heading' }, 'section_not_found');
      expect(c).not.toContain('SECRETWORD');
      expect(c.match(/headings: .*/)?.[0]).toBe(a.match(/headings: .*/)?.[0]);
      // History shows the redacted validator, never the blob sha of text with the hidden block.
      const full = await owner.get(`/api/v1/nodes/${id}`);
      expect(JSON.stringify(hist)).not.toContain(full.body.content_hash);
      await fails(low, 'context_diff', { id }, 'forbidden');
    });

    it('append, section replace and patch cannot overwrite, erase or describe a hidden block (MCP and REST)', async () => {
      const id = ids['eng/mixed.md']!;
      const before = await raw(id);
      const seen = await ok(low, 'context_get', { id });
      const lines = (seen.content as string).split('\n');
      const at = lines.indexOf('[redacted]') + 1;
      expect(at).toBeGreaterThan(0);
      const cases: [string, Record<string, unknown>][] = [
        ['context_append', { text: 'appended' }],
        // The section "Tail" ends in the hidden block.
        ['context_append', { section: 'Tail', text: 'appended' }],
        ['context_append', { section: 'Hidden Heading', text: 'appended' }],
        ['context_replace_section', { section: 'Tail', text: 'tail only' }],
        ['context_replace_section', { section: 'Mixed', text: 'everything' }],
        ['context_replace_section', { section: 'Nope', text: 'x' }],
        // Context lines aimed at the placeholder the caller was shown.
        ['context_patch', { patch: `--- a\n+++ b\n@@ -${at},1 +${at},1 @@\n-[redacted]\n+gone\n` }],
        ['context_patch', { patch: `--- a\n+++ b\n@@ -${at - 1},2 +${at - 1},1 @@\n \n-[redacted]\n` }],
      ];
      for (const [tool, args] of cases) {
        const t = await fails(low, tool, { id, ...args }, 'forbidden');
        expect(t, tool).not.toMatch(/SECRETWORD|Hidden Heading/);
      }
      const rest = new Client(s.url, lowKey);
      for (const [route, body] of [
        ['append', { text: 'x' }],
        ['append', { text: 'x', section: 'Tail' }],
        ['section', { section: 'Tail', text: 'x' }],
        ['patch', { patch: `--- a\n+++ b\n@@ -${at},1 +${at},1 @@\n-[redacted]\n+gone\n` }],
      ] as const) {
        const r = await rest.post(`/api/v1/nodes/${id}/${route}`, body);
        expect(r.status, `${route}: ${r.text}`).toBe(403);
        expect(r.text).not.toMatch(/SECRETWORD|Hidden Heading/);
      }
      // The same agent's full write cannot either (its write level is its read level).
      await fails(low, 'context_write', { path: 'eng/mixed.md', content: seen.content.replace('[redacted]', '') }, 'forbidden');
      expect(await raw(id)).toBe(before);
    });

    it('the split agent cannot use the edits in place on a page with a block above its read level', async () => {
      const pg = await make('eng/split-edit.md', '# P\n\nline\n\n::: confidential\nSECRETZ\n:::\n');
      await fails(split, 'context_append', { id: pg.id, text: 'x' }, 'forbidden');
      await fails(split, 'context_replace_section', { id: pg.id, section: 'P', text: 'x' }, 'forbidden');
      await fails(split, 'context_patch', { id: pg.id, patch: '--- a\n+++ b\n@@ -3 +3 @@\n-line\n+LINE\n' }, 'forbidden');
      expect(await raw(pg.id)).toContain('SECRETZ');
    });

    it('folder and Space summaries never come from a hidden index page or a hidden block of a visible one', async () => {
      const tree = await ok(low, 'context_tree', {});
      const text = JSON.stringify(tree);
      expect(text).toContain('Public summary text.');
      expect(text).not.toMatch(/SECRETSUMMARY|SECRET2|Hidden summary/);
      expect(text).not.toContain('"vault"');
      const idx2 = await ok(low, 'context_tree', { path: 'idx2' });
      expect(JSON.stringify(idx2)).not.toMatch(/SECRET2|index\.md/);
      const res = await low.readResource({ uri: 'service://index' });
      expect(JSON.stringify(res)).not.toMatch(/SECRETSUMMARY|SECRET2|vault/);
    });
  });

  describe('the changes feed', () => {
    it('shows no hidden page, raised page or page moved out of sight, and its cursor does not move for them', async () => {
      const start = await ok(low, 'context_changes', { limit: 200 });
      const text = JSON.stringify(start);
      expect(text).not.toMatch(/plan-hidden|vault|eng\/hf|idx2\/index/);
      const quiet = await ok(low, 'context_changes', { since: start.next });
      expect(quiet).toEqual({ changes: [], next: start.next, more: false });
      // Hidden commits: a confidential page created and changed, a visible page raised.
      await make('eng/later-hidden.md', '---\nsensitivity: confidential\n---\n# Later\n');
      const raisedPage = await make('eng/raised.md', '# Raised\n');
      const mid = await ok(low, 'context_changes', { since: start.next });
      expect(mid.changes.map((c: any) => c.path)).toEqual(['eng/raised.md']);
      await owner.put(`/api/v1/nodes/${raisedPage.id}`, { content: '---\nsensitivity: confidential\n---\n# Raised SECRETRAISED\n' });
      const after = await ok(low, 'context_changes', { since: start.next });
      expect(after).toEqual({ changes: [], next: start.next, more: false });
      const again = await ok(low, 'context_changes', { limit: 200 });
      expect(JSON.stringify(again)).not.toMatch(/later-hidden|raised|SECRETRAISED/);
      // Scoped: a page moved out of its grant disappears with its past; where it went never shows.
      const leaving = await make('open/leaving.md', '# Leaving\n');
      expect((await ok(scoped, 'context_changes', { limit: 200 })).changes.map((c: any) => c.id)).toContain(leaving.id);
      await stepUp();
      expect((await owner.post(`/api/v1/nodes/${leaving.id}/move`, { to: 'closed/left.md' })).status).toBe(200);
      const sc = JSON.stringify(await ok(scoped, 'context_changes', { limit: 200 }));
      expect(sc).not.toContain(leaving.id);
      expect(sc).not.toContain('closed/');
    });

    it('a cursor from another workspace or a forged one tells nothing of this workspace; the foreign agent sees none of it', async () => {
      const mine = await ok(low, 'context_changes', { limit: 1 });
      expect(mine.changes).toHaveLength(1);
      const theirs = await ok(foreign, 'context_changes', { since: mine.next, limit: 200 });
      expect(theirs.changes).toEqual([]);
      const all = await ok(foreign, 'context_changes', { limit: 200 });
      expect(JSON.stringify(all)).not.toMatch(/eng\/|open\/|Olive/);
      // Forged positions inside the workspace answer only what the caller may see.
      const forged = await ok(low, 'context_changes', { since: cursorAt('0', 'pg_0'), limit: 200 });
      expect(JSON.stringify(forged)).not.toMatch(/plan-hidden|vault|SECRET/);
      await fails(low, 'context_changes', { since: Buffer.from('1:pg_x/../y').toString('base64url') }, 'invalid_cursor');
      await fails(low, 'context_changes', { since: Buffer.from('-1:').toString('base64url') }, 'invalid_cursor');
      await fails(low, 'context_changes', { since: cursorAt('1e9') }, 'invalid_cursor');
      // The foreign agent cannot reach A's pages by id either, nor A's pinned MCP endpoint.
      await fails(foreign, 'context_history', { id: ids['open/a.md'] }, 'not_found');
      await fails(foreign, 'collab_thread', { node: ids['open/a.md'] }, 'not_found');
      await fails(foreign, 'context_watch', { id: ids['open/a.md'] }, 'not_found');
      const pinned = await fetch(`${s.url}/w/${wsSlug}/mcp?toolset=extended`, {
        method: 'POST',
        headers: { authorization: `Bearer ${foreignKey}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'context_history', arguments: { id: ids['open/a.md'] } } }),
      });
      expect(pinned.status).toBeGreaterThanOrEqual(400);
      expect(await pinned.text()).not.toContain('open/a.md');
    });

    it('history hides versions the caller could not read then, and their commit ids', async () => {
      const pg = await make('eng/lowered.md', '---\nsensitivity: confidential\n---\n# Lowered SECRETOLD\n');
      const put = await owner.put(`/api/v1/nodes/${pg.id}`, { content: '# Lowered\n\nnow internal\n' });
      expect(put.status).toBe(200);
      const h = await ok(low, 'context_history', { id: pg.id });
      expect(h.versions).toHaveLength(1);
      expect(JSON.stringify(h)).not.toContain(pg.commit_sha);
      // The hidden version's commit, even if learned, reads as "did not exist then", not its text.
      const t = await fails(low, 'context_get_at', { id: pg.id, at: pg.commit_sha }, 'not_found');
      expect(t).not.toContain('SECRETOLD');
      const before = await call(low, 'context_history', { id: pg.id, before: pg.commit_sha });
      expect(before.text).not.toContain('SECRETOLD');
      const ch = JSON.stringify(await ok(low, 'context_changes', { scope: 'eng', limit: 200 }));
      expect(ch).not.toContain(pg.commit_sha);
    });
  });

  describe('watch events', () => {
    it('nothing arrives about a page raised after watching, a hidden page created in a watched folder, or a page moved out of a grant', async () => {
      const w1 = await make('wat/w1.md', '# W1\n');
      await ok(low, 'context_watch', { id: w1.id });
      await ok(low, 'context_watch', { path: 'wat' });
      await owner.put(`/api/v1/nodes/${w1.id}`, { content: '---\nsensitivity: confidential\n---\n# W1 SECRETRAISE\n' });
      await owner.put(`/api/v1/nodes/${w1.id}`, { content: '---\nsensitivity: confidential\n---\n# W1 again\n' });
      await make('wat/hid.md', '---\nsensitivity: confidential\n---\n# HIDCREATE\n');
      const events = await inbox(low);
      expect(JSON.stringify(events)).not.toMatch(/SECRETRAISE|HIDCREATE|wat\/hid|W1/);
      const list = await ok(low, 'context_watches', {});
      expect(list.watches.find((w: any) => w.node_id === w1.id).delivering).toBe(false);

      const w4 = await make('open/w4.md', '# W4\n');
      await ok(scoped, 'context_watch', { id: w4.id });
      await ok(scoped, 'context_watch', { path: 'open' });
      await stepUp();
      expect((await owner.post(`/api/v1/nodes/${w4.id}/move`, { to: 'closed/w4moved.md' })).status).toBe(200);
      await owner.put(`/api/v1/nodes/${w4.id}`, { content: '# W4 changed in closed\n' });
      const se = JSON.stringify(await inbox(scoped));
      expect(se).not.toMatch(/closed|w4moved/);
      const sl = JSON.stringify(await ok(scoped, 'context_watches', {}));
      expect(sl).not.toMatch(/closed|w4moved/);
      // Moved into sight from a place the watcher cannot see: the event does not say where from.
      const h5 = await make('closed/h5.md', '# H5\n');
      expect((await owner.post(`/api/v1/nodes/${h5.id}/move`, { to: 'open/h5.md' })).status).toBe(200);
      const arrived = (await inbox(scoped)).filter((e) => e.page_id === h5.id);
      expect(arrived).toHaveLength(1);
      expect(arrived[0].payload.path).toBe('open/h5.md');
      expect(arrived[0].payload.from).toBeUndefined();
    });

    it('a watch made with a key that was revoked since delivers nothing, even to the agent’s other key', async () => {
      const a = await createAgentWithKey(
        owner,
        ['read', 'collab'].map((action) => ({ action, scope: '*', ceiling: 'internal' })),
        { name: 'Revo', ceiling: 'internal' },
      );
      const k2 = await owner.post(`/api/v1/principals/${a.id}/tokens`, { name: 'k2' });
      const first = await connectMcp(s.url, a.key, EXT);
      const second = await connectMcp(s.url, k2.body.key, EXT);
      clients.push(first, second);
      const pg = await make('rv/p.md', '# RV\n');
      await ok(first, 'context_watch', { id: pg.id });
      await ok(first, 'context_watch', { path: 'rv' });
      expect((await owner.delete(`/api/v1/principals/${a.id}/tokens/${a.keyId}`)).status).toBe(200);
      await owner.put(`/api/v1/nodes/${pg.id}`, { content: '# RV changed after revoke\n' });
      await make('rv/q.md', '# Q\n');
      expect(await inbox(second)).toEqual([]);
      const list = await ok(second, 'context_watches', {});
      expect(list.watches.every((w: any) => w.delivering === false)).toBe(true);
    });

    it('the watch cap holds against a burst of concurrent watches', async () => {
      const wk = await createAgentWithKey(owner, [{ action: 'read', ceiling: 'internal' }], { name: 'Racer', ceiling: 'internal' });
      const racer = await connectMcp(s.url, wk.key, EXT);
      clients.push(racer);
      const list = await ok(racer, 'context_watches', {});
      const cap = list.limit as number;
      const pages: string[] = [];
      for (let k = 0; k < cap + 15; k++) pages.push((await make(`race/p${k}.md`, '# R\n')).id);
      for (const id of pages.slice(0, cap - 5)) await ok(racer, 'context_watch', { id });
      const burst = await Promise.all(pages.slice(cap - 5).map((id) => call(racer, 'context_watch', { id })));
      expect(burst.filter((r) => !r.isError)).toHaveLength(5);
      for (const r of burst.filter((x) => x.isError)) expect(r.text).toMatch(/^watch_limit: /);
      expect((await ok(racer, 'context_watches', {})).watches).toHaveLength(cap);
    }, 120_000);

    it('an @name mention on a page the person cannot read sends them nothing; the author is not told', async () => {
      const m = await owner.post(`/api/v1/nodes/${ids['eng/plan-hidden.md']}/threads`, { body: '@Lowe look at SECRETMENTION' });
      expect(m.status, m.text).toBe(201);
      // Recorded like any mention: the author learns nothing of who can read the page.
      expect(m.body.mentions).toEqual([lowId]);
      const events = JSON.stringify(await inbox(low));
      expect(events).not.toMatch(/SECRETMENTION|plan-hidden/);
      const seen = await owner.post(`/api/v1/nodes/${ids['open/a.md']}/threads`, { body: '@Lowe look here' });
      expect(seen.status).toBe(201);
      const got = (await inbox(low)).filter((e) => e.kind === 'mention');
      expect(got.map((e) => e.page_id)).toEqual([ids['open/a.md']]);
    });
  });

  describe('moves, endpoints, inputs', () => {
    it('a move that widens who reads the page is only proposed; a move onto a hidden page’s path answers as onto a visible one', async () => {
      const m = await ok(low, 'context_write', { path: 'eng/mv.md', content: '# MV\n' });
      const r = await ok(low, 'context_move', { id: m.id, to: 'open/mv.md' });
      expect(r.proposed).toBe(true);
      expect((await owner.get(`/api/v1/nodes/${m.id}`)).body.path).toBe('eng/mv.md');
      const a = await fails(low, 'context_move', { id: m.id, to: 'eng/plan-hidden.md' }, 'already_exists');
      const b = await fails(low, 'context_move', { id: m.id, to: 'eng/mixed.md' }, 'already_exists');
      expect(sameBut(a, 'eng/plan-hidden.md')).toBe(sameBut(b, 'eng/mixed.md'));
      for (const to of ['eng/../x.md', '../x.md', 'eng/a\u202e.md', 'eng/a\u0000.md', 'eng/\u0007.md', '/etc/passwd', 'eng/' + 'x'.repeat(600) + '.md']) {
        const t = await call(low, 'context_move', { id: m.id, to });
        expect(t.isError, to).toBe(true);
        expect(t.text, to).toMatch(/^(invalid_path|invalid_request): /);
      }
      // Out of the scoped agent's write grant.
      await fails(scoped, 'context_move', { id: ids['open/a.md'], to: 'closed/a.md' }, 'forbidden');
    });

    it('the extended tools are unknown on /mcp, in a batch too; a mixed or odd toolset parameter is refused', async () => {
      const before = await raw(ids['open/a.md']!);
      const rpc = async (path: string, body: unknown) => {
        const r = await fetch(s.url + path, {
          method: 'POST',
          headers: { authorization: `Bearer ${lowKey}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify(body),
        });
        return { status: r.status, text: await r.text() };
      };
      const c = (id: number, name: string, args: object) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });
      const batch = await rpc('/mcp', [c(1, 'context_whoami', {}), c(2, 'context_append', { id: ids['open/a.md'], text: 'batch' })]);
      expect(batch.text).toContain('Unknown tool: context_append');
      for (const q of ['toolset=spec&toolset=extended', 'toolset=extended&toolset=spec', 'toolset=Extended', 'toolset=extended%00']) {
        const r = await rpc(`/mcp?${q}`, [c(1, 'context_append', { id: ids['open/a.md'], text: 'batch' })]);
        expect(r.status, q).toBe(400);
      }
      expect(await raw(ids['open/a.md']!)).toBe(before);
    });

    it('coercion takes plain numeric strings only', async () => {
      const id = ids['open/a.md']!;
      expect((await ok(low, 'context_history', { id, limit: ' 5 ' })).versions.length).toBeGreaterThan(0);
      for (const limit of ['1e999', '1e2', '-0', '0x10', '5 5', '', 'Infinity', 'NaN', '99999999999999999999999', ['5']]) {
        await fails(low, 'context_history', { id, limit }, 'invalid_request');
      }
      await fails(low, 'context_changes', { limit: '2.5' }, 'invalid_request');
      // Strings are never turned into numbers where a string is wanted, nor arrays into strings.
      await fails(low, 'context_append', { id, text: ['a', 'b'] }, 'invalid_request');
      await fails(low, 'context_get_at', { id, at: 1234567 }, 'invalid_request');
      const t = await fails(low, 'context_append', { id, textt: 'x' }, 'invalid_request');
      expect(t).toContain('did you mean "text"');
    });

    it('oversized inputs are refused as bad input, and a large patch is answered quickly', async () => {
      const id = ids['open/a.md']!;
      await fails(low, 'context_append', { id, text: 'x', section: 's'.repeat(10_000) }, 'invalid_request');
      await fails(low, 'context_changes', { since: 'A'.repeat(201) }, 'invalid_request');
      expect((await call(low, 'context_watch', { path: 'a/'.repeat(400) + 'b' })).text).toMatch(/^(invalid_request|invalid_path): /);
      const big = await ok(low, 'context_write', { path: 'eng/big.md', content: Array.from({ length: 20000 }, (_, k) => `line ${k}`).join('\n') + '\n' });
      let patch = '--- a\n+++ b\n';
      for (let k = 0; patch.length < 1_000_000; k++) patch += `@@ -${k + 1},1 +${k + 1},1 @@\n-line 19999\n+z\n`;
      const t0 = Date.now();
      await fails(low, 'context_patch', { id: big.id, patch }, 'patch_does_not_apply');
      expect(Date.now() - t0).toBeLessThan(10_000);
    });
  });
});
