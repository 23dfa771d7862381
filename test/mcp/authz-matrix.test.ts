import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { TOOLSETS } from '../../src/mcp/tools/index.js';
import { ACTIONS, type Action } from '../../src/policy/principal.js';
import { testEngines } from '../support/engines.js';
import { Client, joinAs, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { call, connectMcp } from './support.js';

/**
 * The MCP authorization matrix (issue 11): every tool × every kind of agent caller → the
 * outcome (`ok`, or the tool error's code), and each cell is asked twice: alone, through the
 * official SDK client, and inside one JSON-RPC batch that holds every tool's call. A batch is
 * a way in of its own: it must answer each call exactly as that call answers alone.
 *
 * Callers (agent keys of workspace A unless said):
 * - full: every grant at confidential, made by A's owner; works on internal pages.
 * - noGrant: every grant but the one the tool needs (no grant at all for tools that need none).
 * - lowCeiling: every grant at confidential, own ceiling internal; works on confidential pages.
 * - foreign: an agent of workspace F with every grant, presenting A's ids.
 * - demoted: made by an editor (every editor grant at confidential), whose creator was then
 *   demoted to viewer; works on confidential pages (its reach is capped to the creator's role).
 * - elevated: every grant at confidential, elevated by A's owner; works on secret pages (an
 *   elevation lets it read at secret within its read grants; its write grant stays confidential).
 */

const CALLERS = ['full', 'noGrant', 'lowCeiling', 'foreign', 'demoted', 'elevated'] as const;
type Caller = (typeof CALLERS)[number];
type Sensitivity = 'internal' | 'confidential' | 'secret';
const SENS: Record<Caller, Sensitivity> = {
  full: 'internal',
  noGrant: 'internal',
  lowCeiling: 'confidential',
  foreign: 'internal',
  demoted: 'confidential',
  elevated: 'secret',
};

interface Fixtures {
  /** A fresh page of A by its owner at this sensitivity; archived when asked. */
  page(sens: Sensitivity, opts?: { archived?: boolean; dir?: string }): Promise<{ id: string; path: string; commit: string }>;
  shared: Record<Sensitivity, { id: string; path: string; commit: string }>;
  /** An open proposal by A's owner on a fresh page at this sensitivity (someone else's, for every agent). */
  proposal(sens: Sensitivity): Promise<string>;
  uniq(prefix: string): string;
}

interface ToolRow {
  tool: string;
  /** The grant the "noGrant" caller lacks (null: the tool needs none; that caller holds nothing). */
  grant: Action | null;
  args(f: Fixtures, sens: Sensitivity): Promise<Record<string, unknown>>;
  expect: Record<Caller, string>;
}

const OK = 'ok';
const NF = 'not_found';
const FB = 'forbidden';

/** Reading a page: the caller's own workspace and ceiling decide (404 for what you cannot see). */
const readLike: Record<Caller, string> = { full: OK, noGrant: FB, lowCeiling: NF, foreign: NF, demoted: NF, elevated: OK };

const ROWS: ToolRow[] = [
  {
    tool: 'context_bundle',
    grant: 'read',
    args: async () => ({ intent: 'matrix page body' }),
    expect: { ...readLike, lowCeiling: OK, foreign: OK, demoted: OK },
  },
  { tool: 'context_search', grant: 'search', args: async () => ({ query: 'matrix' }), expect: { ...readLike, lowCeiling: OK, foreign: OK, demoted: OK } },
  { tool: 'search', grant: 'search', args: async () => ({ query: 'matrix' }), expect: { ...readLike, lowCeiling: OK, foreign: OK, demoted: OK } },
  { tool: 'context_get', grant: 'read', args: async (f, s) => ({ id: f.shared[s].id }), expect: readLike },
  { tool: 'fetch', grant: 'read', args: async (f, s) => ({ id: f.shared[s].id }), expect: readLike },
  { tool: 'context_related', grant: 'read', args: async (f, s) => ({ id: f.shared[s].id }), expect: readLike },
  // Space `vault` holds an internal page: every caller of A that may read sees it; F has no such Space.
  { tool: 'context_tree', grant: 'read', args: async () => ({ path: 'vault' }), expect: { ...readLike, lowCeiling: OK, demoted: OK } },
  {
    tool: 'context_write',
    grant: 'write',
    args: async (f, s) => ({ path: (await f.page(s)).path, content: `---\nsensitivity: ${s}\n---\n# Rewritten\n` }),
    // A page the caller cannot see is not updated: the write becomes a create there, refused on
    // the content's level first (nothing of the page is told). The foreign agent creates the
    // path in its own workspace. The elevated agent reads the secret page but writes only up to
    // its write grant (confidential).
    expect: { full: OK, noGrant: FB, lowCeiling: FB, foreign: OK, demoted: FB, elevated: FB },
  },
  {
    tool: 'context_propose',
    grant: 'propose',
    args: async (f, s) => ({ id: (await f.page(s)).id, content: `---\nsensitivity: ${s}\n---\n# Proposed\n\nA change.\n` }),
    // Proposing secret content is above the elevated agent's propose ceiling (confidential).
    expect: { ...readLike, elevated: FB },
  },
  {
    tool: 'context_archive',
    grant: 'write',
    args: async (f, s) => ({ id: (await f.page(s)).id }),
    // Without write (propose held) the archive becomes a proposal: a success saying proposed: true (issue 13).
    expect: { ...readLike, noGrant: OK, elevated: FB },
  },
  // The demoted agent lost its write grant with its creator's role: refused before the page is looked up.
  {
    tool: 'context_restore',
    grant: 'write',
    args: async (f, s) => ({ id: (await f.page(s, { archived: true })).id }),
    expect: { ...readLike, demoted: FB, elevated: FB },
  },
  {
    tool: 'collab_post',
    grant: 'collab',
    args: async (f, s) => ({ node: (await f.page(s)).id, body: 'matrix says hi' }),
    // The elevated agent reads the secret page, but its collab grant stops at confidential.
    expect: { ...readLike, elevated: FB },
  },
  {
    tool: 'context_log',
    grant: 'propose',
    args: async () => ({ scope: 'vault', entry: 'matrix entry' }),
    expect: { full: OK, noGrant: FB, lowCeiling: OK, foreign: 'unknown_scope', demoted: OK, elevated: OK },
  },
  { tool: 'collab_inbox', grant: null, args: async () => ({}), expect: { full: OK, noGrant: OK, lowCeiling: OK, foreign: OK, demoted: OK, elevated: OK } },
  {
    tool: 'collab_ack',
    grant: null,
    args: async () => ({ up_to: 0 }),
    expect: { full: OK, noGrant: OK, lowCeiling: OK, foreign: OK, demoted: OK, elevated: OK },
  },
  { tool: 'context_whoami', grant: null, args: async () => ({}), expect: { full: OK, noGrant: OK, lowCeiling: OK, foreign: OK, demoted: OK, elevated: OK } },

  // The extended toolset (issue 13, beyond the spec; every client here connects with ?toolset=extended).
  // Edits in place and move: as context_restore (write; the elevated agent writes only up to confidential).
  {
    tool: 'context_append',
    grant: 'write',
    args: async (f, s) => ({ id: (await f.page(s)).id, text: 'matrix append' }),
    expect: { ...readLike, demoted: FB, elevated: FB },
  },
  {
    tool: 'context_replace_section',
    grant: 'write',
    args: async (f, s) => ({ id: (await f.page(s)).id, section: 'Matrix page', text: 'matrix section' }),
    expect: { ...readLike, demoted: FB, elevated: FB },
  },
  {
    tool: 'context_patch',
    grant: 'write',
    args: async (f, s) => ({
      id: (await f.page(s)).id,
      patch: '--- a\n+++ b\n@@ -4,3 +4,3 @@\n # Matrix page\n \n-Body of a matrix page.\n+Patched body.\n',
    }),
    expect: { ...readLike, demoted: FB, elevated: FB },
  },
  {
    tool: 'context_move',
    grant: 'write',
    args: async (f, s) => ({ id: (await f.page(s)).id, to: `scratch/moved/${f.uniq('m')}.md` }),
    expect: { ...readLike, demoted: FB, elevated: FB },
  },
  // The feed of the caller's own workspace: empty for the foreign agent, never an error.
  { tool: 'context_changes', grant: 'read', args: async () => ({}), expect: { ...readLike, lowCeiling: OK, foreign: OK, demoted: OK } },
  { tool: 'context_history', grant: 'read', args: async (f, s) => ({ id: f.shared[s].id }), expect: readLike },
  { tool: 'context_get_at', grant: 'read', args: async (f, s) => ({ id: f.shared[s].id, at: f.shared[s].commit }), expect: readLike },
  // A diff shows raw text: secret-level read only (the elevated agent).
  { tool: 'context_diff', grant: 'read', args: async (f, s) => ({ id: f.shared[s].id }), expect: { ...readLike, full: FB } },
  { tool: 'collab_thread', grant: 'read', args: async (f, s) => ({ node: f.shared[s].id }), expect: readLike },
  // Needs propose or write: the noGrant caller (no propose) still holds write, and lists its own (none).
  {
    tool: 'context_proposals',
    grant: 'propose',
    args: async () => ({}),
    expect: { full: OK, noGrant: OK, lowCeiling: OK, foreign: OK, demoted: OK, elevated: OK },
  },
  // Someone else's proposal: refused where the caller sees it, unknown where it does not.
  {
    tool: 'context_withdraw',
    grant: 'propose',
    args: async (f, s) => ({ id: await f.proposal(s) }),
    expect: { full: FB, noGrant: FB, lowCeiling: NF, foreign: NF, demoted: NF, elevated: FB },
  },
  // Watching (issue 13): read on the page, which is not found where the caller cannot read it (idempotent, so alone and batch agree).
  { tool: 'context_watch', grant: 'read', args: async (f, s) => ({ id: f.shared[s].id }), expect: readLike },
  // Only your own watches exist for you: a watch that is not yours is not found, never forbidden.
  {
    tool: 'context_unwatch',
    grant: null,
    args: async () => ({ watch_id: `wa_${'0'.repeat(26)}` }),
    expect: { full: NF, noGrant: NF, lowCeiling: NF, foreign: NF, demoted: NF, elevated: NF },
  },
  { tool: 'context_watches', grant: null, args: async () => ({}), expect: { full: OK, noGrant: OK, lowCeiling: OK, foreign: OK, demoted: OK, elevated: OK } },
];

const PASSWORD = 'correct horse battery';

/** `ok`, or the code of a tool error (`<code>: <message>`). */
function outcomeOf(r: { isError?: boolean; content?: unknown }): string {
  const text = ((r.content as { text?: string }[] | undefined) ?? [])[0]?.text ?? '';
  if (r.isError !== true) return OK;
  const m = /^([a-z_]+): \S/.exec(text);
  return m ? m[1]! : `unparsed error: ${text.slice(0, 200)}`;
}

describe('MCP authz matrix table', () => {
  it('covers every tool of the extended toolset (the 16 and the calls beyond), each once, with an outcome for every caller', () => {
    expect(ROWS.map((r) => r.tool).sort()).toEqual(TOOLSETS.extended.map((t) => t.name).sort());
    for (const r of ROWS) for (const c of CALLERS) expect(r.expect[c], `${r.tool} × ${c}`).toBeTruthy();
  });
});

describe.each(testEngines())('MCP authorization matrix, alone and in a batch (%s)', (engine) => {
  let s: TestServer;
  let f: Fixtures;
  const keys = new Map<string, string>();
  const clients = new Map<string, McpClient>();
  let seq = 0;

  const keyFor = (caller: Caller, grant: Action | null): string => keys.get(caller === 'noGrant' ? `noGrant:${grant ?? 'any'}` : caller)!;

  beforeAll(async () => {
    s = await startTestServer(engine);
    const owner = await signupHuman(s.url, 'Owner');
    const admin = owner.client;
    const ws = owner.workspace;
    expect((await admin.post('/api/auth/stepup', { password: PASSWORD })).status).toBe(200);

    const agent = async (by: Client, grants: { action: string; scope: string; ceiling: string }[], ceiling = 'confidential') => {
      const a = await by.post('/api/v1/principals', { name: `agent-${++seq}`, ceiling, grants });
      expect(a.status, a.text).toBe(201);
      const k = await by.post(`/api/v1/principals/${a.body.id}/tokens`, { name: 'k' });
      expect(k.status, k.text).toBe(201);
      return { id: a.body.id as string, key: k.body.key as string };
    };
    const all = (actions: readonly string[]) => actions.map((action) => ({ action, scope: '*', ceiling: 'confidential' }));

    keys.set('full', (await agent(admin, all(ACTIONS))).key);
    for (const a of ACTIONS) keys.set(`noGrant:${a}`, (await agent(admin, all(ACTIONS.filter((x) => x !== a)))).key);
    keys.set('noGrant:any', (await agent(admin, [])).key);
    keys.set('lowCeiling', (await agent(admin, all(ACTIONS), 'internal')).key);
    const foreignOwner = await signupHuman(s.url, 'Foreign');
    keys.set('foreign', (await agent(foreignOwner.client, all(ACTIONS))).key);

    // The demoted creator: an editor makes an agent with every editor grant, then is made a viewer.
    const editor = await joinAs(admin, ws.slug, 'editor');
    const demoted = await agent(editor.client, all(['read', 'write', 'search', 'propose', 'collab']));
    keys.set('demoted', demoted.key);
    const demote = await admin.patch(`/api/v1/workspaces/${ws.slug}/members/${editor.id}`, { role: 'viewer' });
    expect(demote.status, demote.text).toBe(200);

    const elevated = await agent(admin, all(ACTIONS));
    keys.set('elevated', elevated.key);
    const el = await admin.post('/api/v1/elevations', { agent_id: elevated.id, minutes: 60, reason: 'matrix' });
    expect(el.status, el.text).toBe(201);

    let n = 0;
    const uniq = (prefix: string) => `${prefix}-${++n}-${Date.now().toString(36)}`;
    const page: Fixtures['page'] = async (sens, opts = {}) => {
      const fm = [`sensitivity: ${sens}`, ...(opts.archived ? ['state: archived', 'archived_reason: manual'] : [])];
      const path = `scratch/${opts.dir ?? 'p'}/${uniq('page')}.md`;
      const r = await admin.post('/api/v1/nodes', { path, content: `---\n${fm.join('\n')}\n---\n# Matrix page\n\nBody of a matrix page.\n` });
      expect(r.status, r.text).toBe(201);
      return { id: r.body.id as string, path: r.body.path as string, commit: r.body.commit_sha as string };
    };
    const shared = {} as Fixtures['shared'];
    for (const sens of ['internal', 'confidential', 'secret'] as const) {
      const r = await admin.post('/api/v1/nodes', {
        path: `vault/read/${sens}.md`,
        content: `---\nsensitivity: ${sens}\n---\n# Matrix page\n\nBody of a matrix page.\n`,
      });
      expect(r.status, r.text).toBe(201);
      shared[sens] = { id: r.body.id, path: r.body.path, commit: r.body.commit_sha };
    }
    const proposal: Fixtures['proposal'] = async (sens) => {
      const pr = await admin.post('/api/v1/proposals', { node_id: (await page(sens)).id, content: `---\nsensitivity: ${sens}\n---\n# Owner's idea\n` });
      expect(pr.status, pr.text).toBe(201);
      return pr.body.id as string;
    };
    f = { page, shared, uniq, proposal };
  }, 120_000);

  afterAll(async () => {
    for (const c of clients.values()) await c.close().catch(() => undefined);
    await s?.stop();
  });

  const mcp = async (key: string): Promise<McpClient> => {
    let c = clients.get(key);
    if (!c) clients.set(key, (c = await connectMcp(s.url, key, '/mcp?toolset=extended')));
    return c;
  };

  for (const caller of CALLERS) {
    it(`${caller}: each tool alone answers as the table says`, async () => {
      const wrong: string[] = [];
      for (const row of ROWS) {
        const client = await mcp(keyFor(caller, row.grant));
        const r = await client.callTool({ name: row.tool, arguments: await row.args(f, SENS[caller]) });
        const got = outcomeOf(r as { isError?: boolean; content?: unknown });
        if (got !== row.expect[caller])
          wrong.push(`${row.tool} × ${caller}: expected ${row.expect[caller]}, got ${got} ${JSON.stringify(r.content).slice(0, 300)}`);
      }
      expect(wrong).toEqual([]);
    });

    it(`${caller}: one batch of every tool answers each call as it answers alone`, async () => {
      // The noGrant caller is a different agent per tool: one batch per key.
      const byKey = new Map<string, ToolRow[]>();
      for (const row of ROWS) {
        const k = keyFor(caller, row.grant);
        byKey.set(k, [...(byKey.get(k) ?? []), row]);
      }
      const wrong: string[] = [];
      for (const [key, rows] of byKey) {
        const batch = [];
        for (const row of rows)
          batch.push({ jsonrpc: '2.0', id: row.tool, method: 'tools/call', params: { name: row.tool, arguments: await row.args(f, SENS[caller]) } });
        const res = await fetch(`${s.url}/mcp?toolset=extended`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify(batch),
        });
        expect(res.status).toBe(200);
        const answers = (await res.json()) as { id: string; result?: { isError?: boolean; content?: unknown }; error?: unknown }[];
        expect(answers.map((a) => a.id)).toEqual(rows.map((r) => r.tool));
        for (const row of rows) {
          const a = answers.find((x) => x.id === row.tool)!;
          const got = a.result ? outcomeOf(a.result) : `json-rpc error ${JSON.stringify(a.error)}`;
          if (got !== row.expect[caller])
            wrong.push(
              `${row.tool} × ${caller} (batch): expected ${row.expect[caller]}, got ${got} ${JSON.stringify(a.result?.content ?? a.error).slice(0, 300)}`,
            );
        }
      }
      expect(wrong).toEqual([]);
    });
  }

  it('a dead key is refused for the whole batch (401), never per call', async () => {
    const full = keys.get('full')!;
    const list = await new Client(s.url).request('GET', '/api/v1/whoami', { headers: { authorization: `Bearer ${full}` } });
    expect(list.status).toBe(200);
    const res = await fetch(`${s.url}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ak_${'x'.repeat(43)}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify(ROWS.map((r) => ({ jsonrpc: '2.0', id: r.tool, method: 'tools/call', params: { name: r.tool, arguments: {} } }))),
    });
    expect(res.status).toBe(401);
    void call;
  });
});
