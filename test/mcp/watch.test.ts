import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { WATCH_LIMITS } from '../../src/core/watch-input.js';
import { testEngines } from '../support/engines.js';
import { createAgentWithKey, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';
import { call, connectMcp, fails, ok } from './support.js';

/**
 * Watching over MCP (issue 13, extended toolset), with the official SDK client: the tools are
 * absent from the default list and present with `?toolset=extended`; a change by another agent
 * arrives through collab_inbox as a `page_changed` event (a waiting collab_inbox wakes on it),
 * the watcher's own change does not; hidden targets answer as absent ones; bad arguments are
 * clear tool errors.
 */

const EXT = '/mcp?toolset=extended';
const WATCH_TOOL_NAMES = ['context_watch', 'context_unwatch', 'context_watches'];

describe.each(testEngines())('MCP watch tools (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let watcher: McpClient;
  let writer: McpClient;
  let writerId: string;
  let scoped: McpClient;
  let specOnly: McpClient;
  let n = 0;
  const uniq = (p: string) => `${p}${++n}-${Date.now().toString(36)}`;

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url, 'Olive')).client;
    const all = [
      { action: 'read', ceiling: 'internal' },
      { action: 'write', ceiling: 'internal' },
      { action: 'collab', ceiling: 'internal' },
    ];
    const w = await createAgentWithKey(owner, all, { name: 'Watcher' });
    watcher = await connectMcp(s.url, w.key, EXT);
    specOnly = await connectMcp(s.url, w.key);
    const wr = await createAgentWithKey(owner, all, { name: 'Writer' });
    writerId = wr.id;
    writer = await connectMcp(s.url, wr.key, EXT);
    scoped = await connectMcp(
      s.url,
      (await createAgentWithKey(owner, [{ action: 'read', scope: 'team/open', ceiling: 'internal' }], { name: 'Scoped' })).key,
      EXT,
    );
  }, 60_000);

  afterAll(async () => {
    for (const c of [watcher, writer, scoped, specOnly]) await c?.close();
    await s?.stop();
  });

  const write = (c: McpClient, path: string, text: string, sensitivity = 'internal') =>
    ok(c, 'context_write', { path, content: `---\nsensitivity: ${sensitivity}\n---\n# ${path}\n\n${text}\n` });
  /** The watch events collab_inbox answers; acked (done) at once, so the next call shows only what came since. */
  const watchEvents = async (c: McpClient) => {
    const r = await ok(c, 'collab_inbox', { limit: 100 });
    const events = r.events as any[];
    if (events.length > 0) await ok(c, 'collab_ack', { seqs: events.map((e) => e.seq) });
    return events.filter((e) => e.kind === 'page_changed' || e.kind === 'watch_digest');
  };

  it('are absent from the default /mcp list and present with ?toolset=extended', async () => {
    const spec = (await specOnly.listTools()).tools.map((t) => t.name);
    for (const t of WATCH_TOOL_NAMES) expect(spec).not.toContain(t);
    await expect(specOnly.callTool({ name: 'context_watch', arguments: { path: 'team' } })).rejects.toThrow(/Unknown tool: context_watch/);
    const ext = (await watcher.listTools()).tools;
    const by = new Map(ext.map((t) => [t.name, t]));
    for (const t of WATCH_TOOL_NAMES) expect(by.has(t), t).toBe(true);
    expect(by.get('context_watches')!.annotations?.readOnlyHint).toBe(true);
    expect(by.get('context_watch')!.annotations?.readOnlyHint).toBe(false);
    expect(by.get('context_watch')!.description).toMatch(/collab_inbox/);
  });

  it('watch a page and a folder; another agent’s change arrives in collab_inbox, your own does not', async () => {
    const dir = `team/${uniq('d')}`;
    const page = await write(writer, `${dir}/a.md`, 'first');
    const w1 = await ok(watcher, 'context_watch', { id: page.id });
    expect(w1).toMatchObject({ created: true, watch: { kind: 'page', node_id: page.id, path: `${dir}/a.md`, delivering: true } });
    const w2 = await ok(watcher, 'context_watch', { path: dir });
    expect(w2).toMatchObject({ created: true, watch: { kind: 'folder', node_id: null, path: dir } });
    expect((await ok(watcher, 'context_watch', { path: dir })).created).toBe(false);
    const listed = await ok(watcher, 'context_watches');
    expect(listed.watches.map((x: any) => x.id).sort()).toEqual([w1.watch.id, w2.watch.id].sort());
    expect(listed.limit).toBe(WATCH_LIMITS.perPrincipal);

    const upd = await write(writer, `${dir}/a.md`, 'second');
    const created = await write(writer, `${dir}/b.md`, 'new page');
    const ev = await watchEvents(watcher);
    expect(ev).toHaveLength(2);
    const about = new Map(ev.map((e) => [e.page_id, e.payload]));
    expect(about.get(page.id)).toMatchObject({
      action: 'update',
      path: `${dir}/a.md`,
      commit_sha: upd.commit_sha,
      actor: { id: writerId, name: 'Writer', kind: 'agent' },
    });
    expect(about.get(created.id)).toMatchObject({ action: 'create', path: `${dir}/b.md` });
    expect(JSON.stringify(ev)).not.toContain('new page');

    // Acked: the next change to the page is a new event.
    await write(watcher, `${dir}/a.md`, 'my own change');
    expect(await watchEvents(watcher)).toEqual([]);
    // The writer watched nothing; the watcher's change told the writer nothing either.
    expect(await watchEvents(writer)).toEqual([]);
    await write(writer, `${dir}/a.md`, 'third');
    const next = await watchEvents(watcher);
    expect(next.map((e) => [e.page_id, e.payload.action, e.payload.changes])).toEqual([[page.id, 'update', 1]]);

    const gone = await ok(watcher, 'context_unwatch', { watch_id: w2.watch.id });
    expect(gone).toEqual({ id: w2.watch.id, removed: true });
    expect((await ok(watcher, 'context_unwatch', { id: page.id })).removed).toBe(true);
    expect((await ok(watcher, 'context_watches')).watches).toEqual([]);
    await write(writer, `${dir}/a.md`, 'fourth');
    expect(await watchEvents(watcher)).toEqual([]);
  });

  it('a waiting collab_inbox wakes on a watch event', async () => {
    const path = `team/${uniq('lp')}.md`;
    await write(writer, path, 'one');
    await ok(watcher, 'context_watch', { path });
    await watchEvents(watcher);
    const started = Date.now();
    const waiting = ok(watcher, 'collab_inbox', { wait_s: 15 });
    await new Promise((r) => setTimeout(r, 300));
    await write(writer, path, 'two');
    const r = await waiting;
    expect(r.events.map((e: any) => e.kind)).toEqual(['page_changed']);
    expect(Date.now() - started).toBeLessThan(10_000);
    await ok(watcher, 'context_unwatch', { path });
  });

  it('hidden targets answer exactly as absent ones; nothing about them arrives', async () => {
    const res = await owner.post('/api/v1/nodes', { path: `team/${uniq('conf')}.md`, content: '---\nsensitivity: confidential\n---\n# C\n' });
    expect(res.status, res.text).toBe(201);
    const fake = 'pg_' + '0'.repeat(26);
    const hidden = await fails(watcher, 'context_watch', { id: res.body.id }, 'not_found');
    const absent = await fails(watcher, 'context_watch', { id: fake }, 'not_found');
    expect(hidden.replace(res.body.id, 'X')).toBe(absent.replace(fake, 'X'));
    // The scoped agent reads team/open only.
    await write(writer, `team/open/${uniq('p')}.md`, 'open');
    const closed = await write(writer, `team/closed/${uniq('p')}.md`, 'closed');
    const a = await fails(scoped, 'context_watch', { path: 'team/closed' }, 'not_found');
    const b = await fails(scoped, 'context_watch', { path: 'team/never' }, 'not_found');
    expect(a.replace('team/closed', 'X')).toBe(b.replace('team/never', 'X'));
    await fails(scoped, 'context_watch', { id: closed.id }, 'not_found');
    await fails(scoped, 'context_watch', { path: 'team' }, 'not_found');
    const open = await ok(scoped, 'context_watch', { path: 'team/open' });
    expect(open.watch.path).toBe('team/open');
    // A page moved out of the scoped agent's sight: no event, no new path.
    const p = await write(writer, `team/open/${uniq('mv')}.md`, 'will move');
    const hiddenTo = `team/closed/${uniq('moved')}.md`;
    expect((await owner.post(`/api/v1/nodes/${p.id}/move`, { to: hiddenTo })).status).toBe(200);
    const r = await ok(scoped, 'collab_inbox', { limit: 100 });
    expect(JSON.stringify(r)).not.toContain('team/closed');
  });

  it('bad arguments are clear tool errors', async () => {
    const page = await write(writer, `team/${uniq('bad')}.md`, 'x');
    const bad: [Record<string, unknown>, string][] = [
      [{}, 'invalid_request'],
      [{ id: page.id, path: page.path }, 'invalid_request'],
      [{ id: 7 }, 'invalid_request'],
      [{ path: ['team'] }, 'invalid_request'],
      [{ id: page.id, bogus: true }, 'invalid_request'],
      [{ id: 'team/x.md' }, 'invalid_request'],
      [{ path: '../../etc' }, 'invalid_path'],
      [{ path: 'team/../x.md' }, 'invalid_path'],
      [{ path: 'team\\x' }, 'invalid_path'],
    ];
    for (const [args, code] of bad) {
      const text = await fails(watcher, 'context_watch', args, code);
      expect(text.length).toBeGreaterThan(code.length + 5);
    }
    await fails(watcher, 'context_unwatch', {}, 'invalid_request');
    await fails(watcher, 'context_unwatch', { watch_id: `wa_${'0'.repeat(26)}` }, 'not_found');
    await fails(watcher, 'context_unwatch', { watch_id: 'nonsense' }, 'not_found');
    await fails(watcher, 'context_unwatch', { id: page.id }, 'not_found');
    await fails(watcher, 'context_unwatch', { path: 'team/nothing' }, 'not_found');
    await fails(watcher, 'context_watches', { extra: 1 }, 'invalid_request');
    // Someone else's watch is not found for you.
    const mine = await ok(writer, 'context_watch', { id: page.id });
    await fails(watcher, 'context_unwatch', { watch_id: mine.watch.id }, 'not_found');
    const r = await call(writer, 'context_unwatch', { watch_id: mine.watch.id });
    expect(r.isError).toBe(false);
  });

  it(`the cap: watch_limit after ${WATCH_LIMITS.perPrincipal} watches`, async () => {
    const a = await createAgentWithKey(owner, [{ action: 'read', ceiling: 'internal' }], { name: 'Capped' });
    const capped = await connectMcp(s.url, a.key, EXT);
    const page = await write(writer, `team/${uniq('cap')}.md`, 'x');
    const workspaceId = (await owner.get('/api/v1/whoami')).body.workspace.id as string;
    // Fill up to the cap without making 200 pages: rows as the service writes them.
    const now = new Date().toISOString();
    await s.ctx.store.db
      .insertInto('watches')
      .values(
        Array.from({ length: WATCH_LIMITS.perPrincipal }, (_, i) => ({
          id: `wa_z${String(i).padStart(25, '0')}`,
          workspace_id: workspaceId,
          principal_id: a.id,
          key_id: a.keyId,
          target: `path:team/filler-${i}`,
          kind: 'folder' as const,
          page_id: null,
          path: `team/filler-${i}`,
          created_at: now,
        })),
      )
      .execute();
    const text = await fails(capped, 'context_watch', { id: page.id }, 'watch_limit');
    expect(text).toContain(String(WATCH_LIMITS.perPrincipal));
    expect(text).toMatch(/context_unwatch/);
    await capped.close();
  });
});
