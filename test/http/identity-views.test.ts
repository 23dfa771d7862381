import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { createAgentWithKey, joinAs, signupHuman, startTestServer, type Client, type TestServer } from '../support/server.js';
import { connectMcp } from '../mcp/support.js';

/**
 * Issue 12: `/api/v1/me`, `/api/v1/whoami` and `context_whoami` answer from one identity, so they
 * agree on the ceiling in force (they used to disagree: /me showed an agent's stored ceiling,
 * whoami the one its key and its creator's role leave).
 */
describe.each(testEngines())('one identity on every face (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url)).client;
  });
  afterAll(async () => s?.stop());

  const views = async (key: string, c: Client) => {
    const mcp = await connectMcp(s.url, key);
    try {
      const tool = await mcp.callTool({ name: 'context_whoami', arguments: {} });
      const text = (tool.content as { type: string; text: string }[])[0]!.text;
      return { me: (await c.get('/api/v1/me')).body, whoami: (await c.get('/api/v1/whoami')).body, tool: JSON.parse(text) };
    } finally {
      await mcp.close();
    }
  };

  it("an agent's key ceiling below its own shows the same ceiling on /me, /whoami and context_whoami", async () => {
    const a = await createAgentWithKey(owner, [{ action: 'read' }, { action: 'search' }], { ceiling: 'confidential', key: { ceiling: 'internal' } });
    const v = await views(a.key, a.client);
    expect(v.whoami.ceiling).toBe('internal');
    expect(v.me.ceiling).toBe('internal');
    expect(v.tool.ceiling).toBe('internal');
    // The rest of the identity agrees too.
    for (const x of [v.me, v.tool]) {
      expect(x.id).toBe(v.whoami.id);
      expect(x.workspace).toEqual(v.whoami.workspace);
      expect(x.grants).toEqual(v.whoami.grants);
    }
    expect(v.whoami.via).toBe('key');
  });

  it('an agent whose creator was demoted to viewer shows the capped ceiling everywhere', async () => {
    const slug = (await owner.get('/api/v1/whoami')).body.workspace.slug;
    const editor = await joinAs(owner, slug, 'editor');
    const a = await createAgentWithKey(editor.client, [{ action: 'read' }], { ceiling: 'confidential' });
    expect((await owner.patch(`/api/v1/members/${editor.id}`, { role: 'viewer' })).status).toBe(200);
    const v = await views(a.key, a.client);
    expect(v.whoami.ceiling).not.toBe('confidential');
    expect(v.me.ceiling).toBe(v.whoami.ceiling);
    expect(v.tool.ceiling).toBe(v.whoami.ceiling);
  });

  it('a human sees the same id, workspace and role on /me, /whoami and /api/auth/me', async () => {
    const me = (await owner.get('/api/v1/me')).body;
    const who = (await owner.get('/api/v1/whoami')).body;
    const auth = (await owner.get('/api/auth/me')).body;
    expect(me.role).toBe('owner');
    expect(who.role).toBe('owner');
    expect(auth.workspace.role).toBe('owner');
    expect(me.email).toBe(auth.user.email);
    expect(auth.workspaces.map((w: { id: string }) => w.id)).toContain(who.workspace.id);
    expect(me.totp).toBe(false);
    expect(who.grants).toEqual([]);
  });
});
