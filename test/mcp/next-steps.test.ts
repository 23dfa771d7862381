import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { testEngines } from '../support/engines.js';
import { createAgentWithKey, joinAs, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';
import { call, connectMcp, fails, ok } from './support.js';

/**
 * Issue 13, "errors that say what to do next", driven as an agent would: two agents (Scribe and
 * Helper) and people (an owner, an editor, a viewer) over the SDK client. Each error names the
 * next step, and none of them tells of what the caller cannot see: a hidden Space answers as a
 * missing one, suggestions and heading lists come only from visible pages and text, a conflict's
 * clashing lines are redacted.
 */
describe.each(testEngines())('MCP errors that say what to do next (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let editor: Client;
  let viewer: Client;
  let scribe: McpClient;
  let helper: McpClient;
  let helperId: string;
  let lowly: McpClient;
  let scoped: McpClient;
  let splitter: McpClient;
  const clients: McpClient[] = [];

  const connect = async (grants: { action: string; scope?: string; ceiling?: string }[], name: string, ceiling = 'confidential') => {
    const a = await createAgentWithKey(owner, grants, { name, ceiling });
    const c = await connectMcp(s.url, a.key);
    clients.push(c);
    return { c, id: a.id };
  };
  const everything = ['read', 'write', 'search', 'propose', 'collab'].map((action) => ({ action }));

  beforeAll(async () => {
    s = await startTestServer(engine);
    const h = await signupHuman(s.url, 'Olive');
    owner = h.client;
    editor = (await joinAs(owner, h.workspace.slug, 'editor')).client;
    viewer = (await joinAs(owner, h.workspace.slug, 'viewer')).client;
    scribe = (await connect(everything, 'Scribe')).c;
    const hp = await connect(everything, 'Helper');
    helper = hp.c;
    helperId = hp.id;
    // Reads and searches only up to internal.
    lowly = (
      await connect(
        ['read', 'search', 'propose', 'collab'].map((action) => ({ action, ceiling: 'internal' })),
        'Lowly',
      )
    ).c;
    // Reaches only eng/runbooks.
    scoped = (
      await connect(
        ['read', 'search'].map((action) => ({ action, scope: 'eng/runbooks' })),
        'Scoped',
      )
    ).c;
    // Writes confidential text but reads only internal: a conflict must not show it what it cannot read.
    splitter = (
      await connect(
        [
          { action: 'read', ceiling: 'internal' },
          { action: 'write', ceiling: 'confidential' },
        ],
        'Splitter',
      )
    ).c;

    await ok(scribe, 'context_write', {
      path: 'eng/runbooks/deploy.md',
      content: '# Deploy\n\nRun the pipeline.\n\n## Rollback\n\nRevert the release.\n\n::: confidential\n## Escrow Keys\n\nWhere the keys live.\n:::\n',
    });
    await ok(scribe, 'context_write', { path: 'eng/runbooks/secret-plan.md', content: '---\nsensitivity: confidential\n---\n# Secret plan\n\nQuiet.\n' });
    await ok(scribe, 'context_write', { path: 'ops/oncall.md', content: '# On call\n\nPager duty rotation.\n' });
    // A Space holding only a page above Lowly's ceiling: for Lowly it does not exist.
    await ok(scribe, 'context_write', { path: 'vault/keys.md', content: '---\nsensitivity: confidential\n---\n# Keys\n\nVault keys.\n' });
  }, 60_000);

  afterAll(async () => {
    for (const c of clients) await c.close();
    await s?.stop();
  });

  describe('an unknown or unreadable scope is an error naming the scopes the caller can use', () => {
    it('context_search and context_bundle name the usable Spaces and suggest a near folder', async () => {
      const t = await fails(scribe, 'context_search', { query: 'pipeline', scope: 'nope' }, 'unknown_scope');
      expect(t).toContain('No scope nope');
      expect(t).toMatch(/Scopes you can use: eng, ops, vault, or a folder inside one/);
      const b = await fails(scribe, 'context_bundle', { intent: 'deploy', scope: 'eng/runbok' }, 'unknown_scope');
      expect(b).toContain('Did you mean eng/runbooks?');
      const sp = await fails(scribe, 'context_search', { query: 'pipeline', scope: 'opz' }, 'unknown_scope');
      expect(sp).toContain('Did you mean ops?');
      // A usable scope still answers.
      expect((await ok(scribe, 'context_search', { query: 'pipeline', scope: 'eng/runbooks' })).results.length).toBeGreaterThan(0);
    });

    it('a Space that exists but holds only pages above the ceiling answers exactly as one that does not exist', async () => {
      for (const tool of ['context_search', 'context_bundle'] as const) {
        const args = (scope: string) => (tool === 'context_search' ? { query: 'keys', scope } : { intent: 'keys', scope });
        const hidden = await fails(lowly, tool, args('vault'), 'unknown_scope');
        const missing = await fails(lowly, tool, args('vaulq'), 'unknown_scope');
        expect(hidden.replace('vault', 'X')).toBe(missing.replace('vaulq', 'X'));
        expect(hidden).not.toMatch(/vault,|vault\?| vault$/);
        expect(hidden).toContain('Scopes you can use: eng, ops, or a folder inside one');
      }
      // A folder whose only page is hidden is no scope either, and is never suggested.
      await ok(scribe, 'context_write', { path: 'ops/secret/x.md', content: '---\nsensitivity: confidential\n---\n# X\n\nHidden.\n' });
      const folder = await fails(lowly, 'context_search', { query: 'x', scope: 'ops/secret' }, 'unknown_scope');
      const none = await fails(lowly, 'context_search', { query: 'x', scope: 'ops/secrex' }, 'unknown_scope');
      expect(folder.replace('ops/secret', 'X')).toBe(none.replace('ops/secrex', 'X'));
      expect(none).not.toContain('Did you mean');
    });

    it('a path-scoped agent is told the folders it reaches', async () => {
      const t = await fails(scoped, 'context_search', { query: 'pager', scope: 'ops' }, 'unknown_scope');
      expect(t).toContain('Scopes you can use: eng/runbooks, or a folder inside one');
      expect(t).not.toMatch(/ops,|vault/);
      expect((await ok(scoped, 'context_search', { query: 'pipeline', scope: 'eng/runbooks' })).results[0].path).toBe('eng/runbooks/deploy.md');
      await fails(scoped, 'context_bundle', { intent: 'pager', scope: 'eng/other' }, 'unknown_scope');
    });

    it('the load_project_context prompt and context_log refuse an unknown scope the same way', async () => {
      const e = await scribe.getPrompt({ name: 'load_project_context', arguments: { project: 'engg' } }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(McpError);
      expect((e as McpError).message).toMatch(/unknown_scope: No scope engg .*Did you mean eng\?.*Scopes you can use: eng, ops, vault/);
      const hidden = await lowly.getPrompt({ name: 'load_project_context', arguments: { project: 'vault' } }).catch((x: unknown) => x);
      expect((hidden as McpError).message).toMatch(/unknown_scope: No scope vault .*Scopes you can use: eng, ops, or/);
      const log = await fails(lowly, 'context_log', { scope: 'vault', entry: 'hello' }, 'unknown_scope');
      expect(log).toContain('eng, ops');
      expect(log).not.toMatch(/vault,/);
    });
  });

  describe('a wrong page path suggests the likely one, among visible pages only', () => {
    it('adds .md, or corrects a typo', async () => {
      const t = await fails(scribe, 'context_get', { path: 'eng/runbooks/deploy' }, 'not_found');
      expect(t).toContain('did you mean eng/runbooks/deploy.md?');
      expect(await fails(scribe, 'context_get', { path: 'eng/runbooks/deplyo.md' }, 'not_found')).toContain('did you mean eng/runbooks/deploy.md?');
      expect(await fails(scribe, 'context_get', { path: 'eng/runbook/deploy.md' }, 'not_found')).toContain('did you mean eng/runbooks/deploy.md?');
      expect(await fails(scribe, 'fetch', { id: 'eng/runbooks/deploy' }, 'not_found')).toContain('did you mean eng/runbooks/deploy.md?');
      expect(await fails(scribe, 'collab_post', { node: 'eng/runbooks/deploy', body: 'hi' }, 'not_found')).toContain('did you mean eng/runbooks/deploy.md?');
      expect(await fails(lowly, 'collab_post', { node: 'eng/runbooks/secret-plan', body: 'hi' }, 'not_found')).toBe(
        'not_found: Page eng/runbooks/secret-plan not found',
      );
      // Nothing close: the plain 404.
      expect(await fails(scribe, 'context_get', { path: 'eng/zzz/qqqqqqqq.md' }, 'not_found')).not.toContain('did you mean');
      // context_write says which path it wanted.
      expect(await fails(scribe, 'context_write', { path: 'eng/runbooks/new', content: '# New\n' }, 'invalid_path')).toContain(
        'did you mean eng/runbooks/new.md?',
      );
    });

    it('never suggests a page the caller cannot see', async () => {
      expect(await fails(scribe, 'context_get', { path: 'eng/runbooks/secret-plan' }, 'not_found')).toContain('did you mean eng/runbooks/secret-plan.md?');
      const hidden = await fails(lowly, 'context_get', { path: 'eng/runbooks/secret-plan' }, 'not_found');
      expect(hidden).not.toContain('secret-plan.md');
      expect(hidden).toBe('not_found: Page eng/runbooks/secret-plan not found');
      expect(await fails(lowly, 'context_get', { path: 'eng/runbooks/secret-plam.md' }, 'not_found')).toBe(
        'not_found: Page eng/runbooks/secret-plam.md not found',
      );
      expect(await fails(lowly, 'context_get', { path: 'vault/key.md' }, 'not_found')).toBe('not_found: Page vault/key.md not found');
    });
  });

  describe('a missing section lists the headings the caller can see', () => {
    it('lists headings, leaving out those inside a redacted block', async () => {
      const full = await fails(scribe, 'context_get', { path: 'eng/runbooks/deploy.md', section: 'Rolback' }, 'section_not_found');
      expect(full).toContain('headings: "Deploy", "Rollback", "Escrow Keys"');
      const low = await fails(lowly, 'context_get', { path: 'eng/runbooks/deploy.md', section: 'Rolback' }, 'section_not_found');
      expect(low).toContain('headings: "Deploy", "Rollback"');
      expect(low).not.toContain('Escrow');
      // Asking for the hidden heading itself is the same answer as any missing one.
      const asked = await fails(lowly, 'context_get', { path: 'eng/runbooks/deploy.md', section: 'Escrow Keys' }, 'section_not_found');
      expect(asked.replace('Escrow Keys', 'X')).toBe(low.replace('Rolback', 'X'));
    });
  });

  describe('a conflict gives the head commit, the clashing lines and the next step', () => {
    it('names the head, both sides of the hunk, base_sha to use and the proposal', async () => {
      const v1 = await ok(scribe, 'context_write', { path: 'eng/plan.md', content: '# Plan\n\nShip on Monday.\n\nOther line.\n' });
      const v2 = await ok(helper, 'context_write', { path: 'eng/plan.md', content: '# Plan\n\nShip on Tuesday.\n\nOther line.\n', base_sha: v1.commit_sha });
      const t = await fails(
        scribe,
        'context_write',
        { path: 'eng/plan.md', content: '# Plan\n\nShip on Friday.\n\nOther line.\n', base_sha: v1.commit_sha },
        'conflict',
      );
      expect(t).toContain(`head is now commit ${v2.commit_sha}`);
      expect(t).toContain('yours "Ship on Friday."');
      expect(t).toContain('now "Ship on Tuesday."');
      expect(t).toContain(`write with base_sha ${v2.commit_sha}`);
      expect(t).toMatch(/kept as proposal pp_\w+ for review/);
      // Following the advice works.
      const again = await ok(scribe, 'context_get', { path: 'eng/plan.md' });
      expect(again.commit_sha ?? again.page?.commit_sha).toBe(v2.commit_sha);
      await ok(scribe, 'context_write', { path: 'eng/plan.md', content: '# Plan\n\nShip on Friday.\n\nOther line.\n', base_sha: v2.commit_sha });
    });

    it('a writer who cannot read the head whole is refused before any hunk is shown', async () => {
      const v1 = await ok(scribe, 'context_write', { path: 'eng/split.md', content: '# Split\n\nLine one.\n\nLine two.\n' });
      // The head now holds a confidential block where the splitter will write.
      await ok(scribe, 'context_write', {
        path: 'eng/split.md',
        content: '# Split\n\n::: confidential\nHIDDENWORD lives here.\n:::\n\nLine two.\n',
        base_sha: v1.commit_sha,
      });
      // It reads at internal and writes at confidential: writing over a block it sees as
      // [redacted] would erase it (issue 13 attack), so the write is refused outright.
      const t = await fails(
        splitter,
        'context_write',
        { path: 'eng/split.md', content: '# Split\n\nLine one, edited.\n\nLine two.\n', base_sha: v1.commit_sha },
        'forbidden',
      );
      expect(t).not.toContain('HIDDENWORD');
      expect(t).toContain('you cannot overwrite what you cannot see');
    });
  });

  describe('a locked thread tells the agent to stop, and the people who can unlock it hear of it', () => {
    it('locks after 4 agent hops, refuses with "do not retry", and sends one event per lock to editors and owners', async () => {
      await ok(scribe, 'context_write', { path: 'eng/loop.md', content: '# Loop\n\nTalk.\n' });
      for (const [i, who] of [scribe, helper, scribe, helper].entries()) await ok(who, 'collab_post', { node: 'eng/loop.md', body: `hop ${i + 1}` });
      const refused = await fails(scribe, 'collab_post', { node: 'eng/loop.md', body: 'hop 5' }, 'thread_locked');
      expect(refused).toContain('until a person unlocks it: stop posting here and do not retry');
      await fails(helper, 'collab_post', { node: 'eng/loop.md', body: 'hop 6' }, 'thread_locked');
      const locked = async (c: Client) => {
        const r = await c.get('/api/v1/inbox?state=all&limit=100');
        expect(r.status).toBe(200);
        return (r.body.events as { kind: string; payload: any }[]).filter((e) => e.kind === 'thread_locked');
      };
      for (const c of [owner, editor]) {
        const evs = await locked(c);
        expect(evs).toHaveLength(1);
        expect(evs[0]!.payload).toMatchObject({ path: 'eng/loop.md', agent_hops: 4 });
      }
      expect(await locked(viewer)).toEqual([]);
      // Unlocked, locked again: a second event.
      const page = await ok(scribe, 'context_get', { path: 'eng/loop.md' });
      const id = page.id ?? page.page?.id;
      expect((await editor.post(`/api/v1/nodes/${id}/threads/unlock`)).status).toBe(200);
      for (const [i, who] of [scribe, helper, scribe, helper].entries()) await ok(who, 'collab_post', { node: 'eng/loop.md', body: `again ${i + 1}` });
      expect(await locked(owner)).toHaveLength(2);
    });
  });

  describe('@name in a message body mentions that principal', () => {
    it('mentions by name in the body, ignores unknown names and e-mail addresses, dedupes with mentions[]', async () => {
      await ok(scribe, 'context_write', { path: 'eng/chat.md', content: '# Chat\n\nHello.\n' });
      const before = (await ok(helper, 'collab_inbox', { limit: 100 })).events?.length ?? 0;
      const r = await ok(scribe, 'collab_post', {
        node: 'eng/chat.md',
        body: 'Could @helper check this? cc @nobody, mail ops@Helper.example',
        mentions: [helperId],
      });
      expect(r.mentions).toEqual([helperId]);
      const inbox = await ok(helper, 'collab_inbox', { limit: 100 });
      const mine = (inbox.events as any[]).slice(0, inbox.events.length - before).filter((e) => (e.payload?.path ?? e.path) === 'eng/chat.md');
      expect(mine).toHaveLength(1);
      // Only in the body.
      const r2 = await ok(scribe, 'collab_post', { node: 'eng/chat.md', body: '@Helper, one more.' });
      expect(r2.mentions).toEqual([helperId]);
      const r3 = await ok(scribe, 'collab_post', { node: 'eng/chat.md', body: 'Mail helper@example.com or @helperbot' });
      expect(r3.mentions).toEqual([]);
      // mentions[] keeps its strict check.
      await fails(scribe, 'collab_post', { node: 'eng/chat.md', body: 'x', mentions: ['@nobody'] }, 'unknown_mention');
    });

    it('a body mention of someone who cannot read the page reaches no inbox', async () => {
      await ok(scribe, 'context_write', { path: 'eng/conf-chat.md', content: '---\nsensitivity: confidential\n---\n# Conf\n\nHush.\n' });
      const r = await call(lowly, 'collab_inbox', { limit: 100 });
      const before = JSON.stringify(r.json);
      await ok(scribe, 'collab_post', { node: 'eng/conf-chat.md', body: 'See @Lowly' });
      const after = await call(lowly, 'collab_inbox', { limit: 100 });
      expect(after.text).not.toContain('conf-chat');
      expect(before).not.toContain('conf-chat');
    });
  });
});
