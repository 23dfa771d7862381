import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';

const enc = encodeURIComponent;

/** Ceilings, scopes and block redaction as a caller observes them (DESIGN.md §4). */
describe.each(testEngines())('sensitivity and redaction (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let conf: Client; // agent, read/write up to confidential
  let internal: Client; // agent, read up to internal
  let engOnly: Client; // agent, read confined to the eng Space
  const ids: Record<string, string> = {};

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = (await signupHuman(s.url)).client;
    conf = (await createAgentWithKey(owner, [{ action: 'read' }, { action: 'write' }])).client;
    internal = (
      await createAgentWithKey(owner, [
        { action: 'read', ceiling: 'internal' },
        { action: 'write', ceiling: 'internal' },
      ])
    ).client;
    engOnly = (await createAgentWithKey(owner, [{ action: 'read', scope: 'eng' }])).client;
    const pages: Record<string, string> = {
      plain: '# Plain\n\nNothing hidden.\n',
      mixed:
        '---\ntitle: Mixed\n---\n# Mixed\n\nOpen text.\n\n::: confidential\nConf line [[conf-target]]\n:::\n\nMiddle.\n\n::: secret\n# Secret heading\nSecret line [[secret-target]]\n:::\n\nEnd.\n',
      conf: '---\nsensitivity: confidential\n---\n# Confidential page\n\nConf body.\n',
      secret: '---\nsensitivity: secret\ntitle: Crown jewels\n---\nSecret body.\n',
    };
    for (const [k, content] of Object.entries(pages)) {
      const r = await owner.post('/api/v1/nodes', { path: `eng/levels/${k}.md`, content });
      expect(r.status).toBe(201);
      ids[k] = r.body.id;
    }
    const hr = await owner.post('/api/v1/nodes', { path: 'hr/people/handbook.md', content: '# Handbook\n' });
    ids.hr = hr.body.id;
  });
  afterAll(async () => s?.stop());

  it('hides pages above the ceiling as 404, by id and by path', async () => {
    expect((await conf.get(`/api/v1/nodes/${ids.conf}`)).status).toBe(200);
    for (const k of ['secret']) {
      const r = await conf.get(`/api/v1/nodes/${ids[k]}`);
      expect(r.status).toBe(404);
      expect(r.body.code).toBe('not_found');
    }
    expect((await conf.get(`/api/v1/nodes/${enc('eng/levels/secret.md')}`)).status).toBe(404);
    for (const k of ['conf', 'secret']) expect((await internal.get(`/api/v1/nodes/${ids[k]}`)).status).toBe(404);
    // The owner's ceiling is secret.
    expect((await owner.get(`/api/v1/nodes/${ids.secret}`)).body.content).toContain('Secret body.');
  });

  it('redacts blocks above the ceiling, and nothing derived from them leaks', async () => {
    const c = await conf.get(`/api/v1/nodes/${ids.mixed}`);
    expect(c.status).toBe(200);
    expect(c.body.redacted).toBe(true);
    expect(c.body.content).toContain('Conf line');
    expect(c.body.content).not.toContain('Secret line');
    expect(c.body.content).not.toContain('Secret heading');
    expect(c.body.content).toContain('[redacted]');
    expect(c.body.content).toContain('End.');
    expect(JSON.stringify(c.body.links)).not.toContain('secret-target');
    expect(JSON.stringify(c.body.links)).toContain('conf-target');

    const i = await internal.get(`/api/v1/nodes/${ids.mixed}?format=md`);
    expect(i.text).not.toContain('Conf line');
    expect(i.text).not.toContain('Secret line');
    expect(i.text.match(/\[redacted\]/g)).toHaveLength(2);
    expect(i.text).toContain('Open text.');

    const o = await owner.get(`/api/v1/nodes/${ids.mixed}`);
    expect(o.body.redacted).toBe(false);
    expect(o.body.content).toContain('Secret line');
  });

  it('refuses to let a caller overwrite or move content it cannot see, or write above its ceiling', async () => {
    const put = await conf.put(`/api/v1/nodes/${ids.mixed}`, { content: '# Mixed\n\nAll gone.\n' });
    expect(put.status).toBe(403);
    expect(put.body.code).toBe('forbidden');
    const mv = await conf.post(`/api/v1/nodes/${ids.mixed}/move`, { to: 'eng/levels/mixed2.md' });
    expect(mv.status).toBe(403);
    const arch = await conf.post(`/api/v1/nodes/${ids.mixed}/archive`, { reason: 'stale' });
    expect(arch.status).toBe(403);
    expect((await owner.get(`/api/v1/nodes/${ids.mixed}`)).body.content).toContain('Secret line');

    const up = await internal.post('/api/v1/nodes', { path: 'eng/levels/up.md', content: '---\nsensitivity: confidential\n---\nx\n' });
    expect(up.status).toBe(403);
    const block = await internal.post('/api/v1/nodes', { path: 'eng/levels/up.md', content: 'x\n\n::: confidential\ny\n:::\n' });
    expect(block.status).toBe(403);
    // An agent never writes secret, whatever its grant says.
    const sec = await conf.post('/api/v1/nodes', { path: 'eng/levels/s2.md', content: '---\nsensitivity: secret\n---\nx\n' });
    expect(sec.status).toBe(403);
  });

  it('keeps invisible pages out of trees and folder listings', async () => {
    const t = await internal.get('/api/v1/spaces/eng/tree?depth=5');
    const paths = JSON.stringify(t.body);
    expect(paths).toContain('eng/levels/plain.md');
    expect(paths).toContain('eng/levels/mixed.md');
    expect(paths).not.toContain('eng/levels/conf.md');
    expect(paths).not.toContain('Crown jewels');
    expect(t.body.tree.page_count).toBe(2);
    const o = await owner.get('/api/v1/spaces/eng/tree?depth=5');
    expect(o.body.tree.page_count).toBe(4);
  });

  it('confines a scoped grant to its Space', async () => {
    expect((await engOnly.get(`/api/v1/nodes/${ids.plain}`)).status).toBe(200);
    expect((await engOnly.get(`/api/v1/nodes/${ids.hr}`)).status).toBe(404);
    expect((await engOnly.get('/api/v1/spaces/hr/tree')).status).toBe(404);
    const spaces = await engOnly.get('/api/v1/spaces');
    expect(spaces.body.spaces.map((x: { id: string }) => x.id)).toEqual(['eng']);
    // Read-only: no write grant at all.
    const w = await engOnly.post('/api/v1/nodes', { path: 'eng/x/y.md', content: 'y' });
    expect(w.status).toBe(403);
  });

  it('judges old versions by their own level', async () => {
    // A page that was secret and is now internal: the old version stays hidden.
    const c = await owner.post('/api/v1/nodes', { path: 'eng/levels/declass.md', content: '---\nsensitivity: secret\n---\nold secret\n' });
    const u = await owner.put(`/api/v1/nodes/${c.body.id}`, { content: 'now public-ish\n' });
    expect((await conf.get(`/api/v1/nodes/${c.body.id}`)).body.content).toBe('now public-ish\n');
    expect((await conf.get(`/api/v1/nodes/${c.body.id}?at=${c.body.commit_sha}`)).status).toBe(404);
    expect((await conf.get(`/api/v1/nodes/${c.body.id}?at=${u.body.commit_sha}`)).status).toBe(200);
    const h = await conf.get(`/api/v1/nodes/${c.body.id}/history`);
    expect(h.body.versions.map((v: { action: string }) => v.action)).toEqual(['update']);
    expect((await owner.get(`/api/v1/nodes/${c.body.id}/history`)).body.versions).toHaveLength(2);
  });

  it('caps a key by its own ceiling', async () => {
    const a = await createAgentWithKey(owner, [{ action: 'read' }], { key: { ceiling: 'public' } });
    expect((await a.client.get(`/api/v1/nodes/${ids.plain}`)).status).toBe(404);
    const pub = await owner.post('/api/v1/nodes', { path: 'eng/levels/pub.md', content: '---\nsensitivity: public\n---\nhello\n' });
    expect((await a.client.get(`/api/v1/nodes/${pub.body.id}`)).status).toBe(200);
    const who = await a.client.get('/api/v1/whoami');
    expect(who.body).toMatchObject({ kind: 'agent', via: 'key', ceiling: 'public' });
  });
});
