import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type Res, type TestServer } from '../support/server.js';
import { expectError, expectStatus } from '../support/expect.js';

/**
 * Black-box checks that bad input is refused with the right status and code, that the
 * error body always has the one documented shape, and that nothing answers 500.
 */

const enc = encodeURIComponent;
const PAGE = '---\ntitle: Existing\n---\n# Existing\n\nIntro.\n\n## Details\n\nSome details.\n';

/** Paths that must never be accepted as a page path. */
const BAD_PATHS: [string, string][] = [
  ['parent traversal', '../x.md'],
  ['traversal inside', 'eng/../x.md'],
  ['leading slash', '/eng/a.md'],
  ['backslash', 'eng\\a.md'],
  ['NUL byte', 'eng/a\u0000.md'],
  ['control character', 'eng/a\u0007.md'],
  ['not a .md file', 'eng/a.txt'],
  ['hidden file', 'eng/.hidden.md'],
  ['no space', 'a.md'],
  ['empty segment', 'eng//a.md'],
  ['trailing slash', 'eng/a.md/'],
  ['a file named only .md', 'eng/.md'],
  ['percent-encoded traversal', 'eng/%2e%2e/x.md'],
  ['drive letter', 'C:/eng/a.md'],
  ['segment over 100 characters', `eng/${'s'.repeat(101)}.md`],
  ['deeper than 12 levels', `${Array.from({ length: 12 }, (_, i) => `d${i}`).join('/')}/a.md`],
];

/** A valid-looking path of exactly `n` characters (segments under 100, depth under 12). */
function pathOfLength(n: number): string {
  const head = `eng/${'d'.repeat(90)}/${'e'.repeat(90)}/${'f'.repeat(90)}/${'g'.repeat(90)}/${'h'.repeat(90)}/`;
  const rest = n - head.length - 3;
  if (rest < 1 || rest > 100) throw new Error(`cannot build a path of ${n} characters`);
  return `${head}${'p'.repeat(rest)}.md`;
}

describe.each(testEngines())('REST bad input (%s)', (engine) => {
  let s: TestServer;
  let human: Client;
  let agent: Client;
  let page: { id: string; path: string; commit_sha: string; content: string };
  // Workspace B: another account with its own agent and page.
  let humanB: Client;
  let agentB: Client;
  let pageB: { id: string; path: string; content: string; commit_sha: string };

  beforeAll(async () => {
    s = await startTestServer(engine);
    const a = await signupHuman(s.url, 'Ann');
    human = a.client;
    agent = (await createAgentWithKey(human, [{ action: 'read' }, { action: 'write' }, { action: 'admin' }], { name: 'writer' })).client;
    const created = await agent.post('/api/v1/nodes', { path: 'eng/existing.md', content: PAGE });
    expectStatus(created, 201);
    page = created.body;

    const b = await signupHuman(s.url, 'Bea');
    humanB = b.client;
    agentB = (await createAgentWithKey(humanB, [{ action: 'read' }, { action: 'write' }, { action: 'admin' }], { name: 'b-writer' })).client;
    const createdB = await agentB.post('/api/v1/nodes', { path: 'eng/b-plan.md', content: '# Plan B\n\nOnly for workspace B.\n' });
    expectStatus(createdB, 201);
    pageB = createdB.body;
  });
  afterAll(async () => s?.stop());

  describe('malformed and mistyped JSON bodies', () => {
    it('malformed JSON is 400 invalid_json, for an agent and for a human session', async () => {
      const headers = { 'content-type': 'application/json' };
      expectError(await agent.request('POST', '/api/v1/nodes', { body: '{"path":', headers }), 400, 'invalid_json');
      expectError(await agent.request('PUT', `/api/v1/nodes/${page.id}`, { body: '{"content": "x"', headers }), 400, 'invalid_json');
      expectError(await agent.request('PATCH', `/api/v1/nodes/${page.id}`, { body: '{title: nope}', headers }), 400, 'invalid_json');
      expectError(await human.request('POST', '/api/v1/nodes', { body: '{"path":', headers }), 400, 'invalid_json');
    });

    it('malformed JSON is 400 invalid_json on every other JSON route', async () => {
      const headers = { 'content-type': 'application/json' };
      const agentId = (await human.get('/api/v1/principals')).body.principals.find((p: any) => p.kind === 'agent').id;
      const cases: [Client, string, string][] = [
        [agent, 'POST', `/api/v1/nodes/${page.id}/move`],
        [agent, 'POST', `/api/v1/nodes/${page.id}/archive`],
        [agent, 'POST', `/api/v1/nodes/${page.id}/restore`],
        [agent, 'POST', '/api/v1/spaces'],
        [human, 'POST', '/api/v1/principals'],
        [human, 'PUT', `/api/v1/principals/${agentId}/grants`],
        [human, 'POST', `/api/v1/principals/${agentId}/tokens`],
        [new Client(s.url), 'POST', '/api/v1/auth/signup'],
        [new Client(s.url), 'POST', '/api/auth/login'],
      ];
      for (const [c, method, url] of cases) {
        expectError(await c.request(method, url, { body: '{"a": [1, 2', headers }), 400, 'invalid_json');
      }
    });

    it('an empty body sent as JSON is 400', async () => {
      const headers = { 'content-type': 'application/json' };
      expectError(await agent.request('POST', '/api/v1/nodes', { body: '', headers }), 400, ['invalid_json', 'invalid_request']);
      expectError(await agent.request('PUT', `/api/v1/nodes/${page.id}`, { body: '', headers }), 400, ['invalid_json', 'invalid_request']);
      expectError(await human.request('POST', '/api/v1/nodes', { body: '', headers }), 400, ['invalid_json', 'invalid_request']);
    });

    it('a JSON body carrying __proto__ is refused with 400 and creates nothing', async () => {
      const body = '{"path":"eng/proto.md","content":"# x\\n","__proto__":{"admin":true}}';
      const res = await agent.request('POST', '/api/v1/nodes', { body, headers: { 'content-type': 'application/json' } });
      expectError(res, 400, ['invalid_json', 'invalid_request']);
      expectError(await agent.get(`/api/v1/nodes/${enc('eng/proto.md')}`), 404, 'not_found');
    });

    it('a JSON body that is not an object is 400 invalid_request', async () => {
      for (const body of ['null', '[]', '"eng/a.md"', '42']) {
        expectError(await agent.request('POST', '/api/v1/nodes', { body, headers: { 'content-type': 'application/json' } }), 400, 'invalid_request');
      }
    });

    it('a body in a media type the service does not read is 415 unsupported_media_type', async () => {
      const res = await agent.request('POST', '/api/v1/nodes', { body: '<page path="eng/a.md"/>', headers: { 'content-type': 'application/xml' } });
      expectError(res, 415, 'unsupported_media_type');
    });

    it('a plain-text body is refused with 400 or 415, and nothing is created', async () => {
      const res = await agent.request('POST', '/api/v1/nodes', { body: 'path=eng/plain.md', headers: { 'content-type': 'text/plain' } });
      expectError(res, res.status === 415 ? 415 : 400, res.status === 415 ? 'unsupported_media_type' : 'invalid_request');
      expectError(await agent.get(`/api/v1/nodes/${enc('eng/plain.md')}`), 404, 'not_found');
    });

    it('wrong types are 400 invalid_request', async () => {
      expectError(await agent.post('/api/v1/nodes', { path: 'eng/t1.md', content: 5 }), 400, 'invalid_request');
      expectError(await agent.post('/api/v1/nodes', { path: [], content: '# x' }), 400, 'invalid_request');
      expectError(await agent.post('/api/v1/nodes', { space: 'eng', title: null, body: 'x' }), 400, 'invalid_request');
      expectError(await agent.post('/api/v1/nodes', { space: 'eng', title: 'T', body: 'x', frontmatter: 'nope' }), 400, 'invalid_request');
      expectError(await agent.put(`/api/v1/nodes/${page.id}`, { content: 5 }), 400, 'invalid_request');
      expectError(await agent.patch(`/api/v1/nodes/${page.id}`, { title: null }), 400, 'invalid_request');
      expectError(await agent.patch(`/api/v1/nodes/${page.id}`, { frontmatter: ['a'] }), 400, 'invalid_request');
      expectError(await agent.post(`/api/v1/nodes/${page.id}/move`, { to: 7 }), 400, 'invalid_request');
      expectError(await agent.post(`/api/v1/nodes/${page.id}/archive`, { reason: 'bored' }), 400, 'invalid_request');
      expectError(await human.post('/api/v1/nodes', { path: 'eng/t2.md', content: true }), 400, 'invalid_request');
      // Nothing of the above landed.
      const after = await agent.get(`/api/v1/nodes/${page.id}`);
      expectStatus(after, 200);
      expect(after.body.content).toBe(PAGE);
      expect(after.body.state).toBe('active');
    });

    it('PUT/PATCH with nothing to change, or with content and fields at once, is 400 invalid_request', async () => {
      expectError(await agent.patch(`/api/v1/nodes/${page.id}`, {}), 400, 'invalid_request');
      expectError(await agent.put(`/api/v1/nodes/${page.id}`, { content: '# a\n', title: 'b' }), 400, 'invalid_request');
    });

    it('unknown body fields are refused with 400 invalid_request naming the field (create, path form)', async () => {
      const res = await agent.post('/api/v1/nodes', { path: 'eng/colour.md', content: '# c\n', colour: 'red' });
      expectError(res, 400, 'invalid_request');
      expect(res.body.error.message).toContain('colour');
      expectError(await agent.get(`/api/v1/nodes/${enc('eng/colour.md')}`), 404, 'not_found');
    });

    it('unknown body fields are refused with 400 invalid_request naming the field (create, structured form)', async () => {
      const res = await agent.post('/api/v1/nodes', { space: 'eng', title: 'Colour', body: 'x', colour: 'red' });
      expectError(res, 400, 'invalid_request');
      expect(res.body.error.message).toContain('colour');
    });

    it('unknown body fields are refused with 400 invalid_request naming the field (other JSON routes)', async () => {
      const agentId = (await human.get('/api/v1/principals')).body.principals.find((p: any) => p.kind === 'agent').id;
      // Each body is valid except for the one unknown field, so nothing but that field can be refused.
      const cases: [Client, string, string, Record<string, unknown>][] = [
        [agent, 'PUT', `/api/v1/nodes/${page.id}`, { content: '# changed\n', colour: 'red' }],
        [agent, 'PATCH', `/api/v1/nodes/${page.id}`, { title: 'Changed', colour: 'red' }],
        [agent, 'POST', `/api/v1/nodes/${page.id}/move`, { to: 'eng/moved-elsewhere.md', colour: 'red' }],
        [agent, 'POST', `/api/v1/nodes/${page.id}/archive`, { reason: 'manual', colour: 'red' }],
        [agent, 'POST', `/api/v1/nodes/${page.id}/restore`, { colour: 'red' }],
        [agent, 'POST', '/api/v1/spaces', { id: 'hues', name: 'Hues', colour: 'red' }],
        [human, 'POST', '/api/v1/principals', { name: 'painter', grants: [], ceiling: 'internal', colour: 'red' }],
        [human, 'PUT', `/api/v1/principals/${agentId}/grants`, { grants: [], colour: 'red' }],
        [human, 'PUT', `/api/v1/principals/${agentId}/grants`, { grants: [{ action: 'read', scope: '*', ceiling: 'internal', colour: 'red' }] }],
        [human, 'POST', `/api/v1/principals/${agentId}/tokens`, { name: 'k', colour: 'red' }],
        [new Client(s.url), 'POST', '/api/v1/auth/signup', { email: 'painter@example.com', password: 'correct horse battery', name: 'P', colour: 'red' }],
        [new Client(s.url), 'POST', '/api/auth/login', { email: 'painter@example.com', password: 'correct horse battery', colour: 'red' }],
      ];
      for (const [c, method, url, body] of cases) {
        const res = await c.request(method, url, { json: body });
        expectError(res, 400, 'invalid_request');
        expect(res.body.error.message, `${method} ${url}`).toContain('colour');
      }
      // None of them changed anything.
      const after = await agent.get(`/api/v1/nodes/${page.id}`);
      expect(after.body.content).toBe(PAGE);
      expect(after.body.path).toBe('eng/existing.md');
      expect(after.body.state).toBe('active');
      const spaces = await agent.get('/api/v1/spaces');
      expect(spaces.body.spaces.map((x: any) => x.id)).not.toContain('hues');
      const agents = (await human.get('/api/v1/principals')).body.principals.map((x: any) => x.name);
      expect(agents).not.toContain('painter');
      expectError(
        await new Client(s.url).post('/api/auth/login', { email: 'painter@example.com', password: 'correct horse battery' }),
        401,
        'invalid_credentials',
      );
      const grants = await human.get(`/api/v1/principals/${agentId}/grants`);
      expect(grants.body.grants.map((g: any) => g.action).sort()).toEqual(['admin', 'read', 'write']);
    });

    it('unknown query parameters are ignored', async () => {
      const got = await agent.get(`/api/v1/nodes/${page.id}?colour=red&x=1`);
      expectStatus(got, 200);
      expect(got.body.id).toBe(page.id);
      expectStatus(await agent.get(`/api/v1/nodes/${page.id}/history?colour=red`), 200);
      expectStatus(await agent.get('/api/v1/spaces/eng/tree?colour=red'), 200);
      expectStatus(await agent.get('/api/v1/principals?colour=red'), 200);
      expectStatus(await human.get(`/api/v1/nodes/${page.id}?colour=red`), 200);
    });
  });

  describe('paths', () => {
    for (const [what, path] of BAD_PATHS) {
      it(`create with a bad path (${what}) is 400 invalid_path`, async () => {
        expectError(await agent.post('/api/v1/nodes', { path, content: '# x\n' }), 400, 'invalid_path');
      });
    }

    it('bad paths are refused for a human session too', async () => {
      for (const [, path] of BAD_PATHS) {
        expectError(await human.post('/api/v1/nodes', { path, content: '# x\n' }), 400, 'invalid_path');
      }
    });

    it('a path of 512 characters is accepted; 513 is 400 invalid_path', async () => {
      const ok = pathOfLength(512);
      expect(ok.length).toBe(512);
      const created = await agent.post('/api/v1/nodes', { path: ok, content: '# Long\n' });
      expectStatus(created, 201);
      expect(created.body.path).toBe(ok);
      expectError(await agent.post('/api/v1/nodes', { path: pathOfLength(513), content: '# Long\n' }), 400, 'invalid_path');
    });

    it('a much longer path (700 and 5000 characters) is also 400 invalid_path, on create and on move', async () => {
      const p700 = `eng/${Array.from({ length: 8 }, (_, i) => `${i}`.repeat(80)).join('/')}/x.md`;
      expect(p700.length).toBeGreaterThan(600);
      expectError(await agent.post('/api/v1/nodes', { path: p700, content: '# Long\n' }), 400, 'invalid_path');
      expectError(await agent.post('/api/v1/nodes', { path: `eng/${'a'.repeat(5000)}.md`, content: '# Long\n' }), 400, 'invalid_path');
      expectError(await agent.post(`/api/v1/nodes/${page.id}/move`, { to: p700 }), 400, 'invalid_path');
    });

    it('structured create with a bad space or folder is 400 invalid_path', async () => {
      expectError(await agent.post('/api/v1/nodes', { space: '..', title: 'T', body: 'x' }), 400, 'invalid_path');
      expectError(await agent.post('/api/v1/nodes', { space: 'eng', cluster_path: '../etc', title: 'T', body: 'x' }), 400, 'invalid_path');
      expectError(await agent.post('/api/v1/nodes', { space: 'eng', cluster_path: 'eng/.git', title: 'T', body: 'x' }), 400, 'invalid_path');
    });

    it('moving to a bad path is 400 invalid_path and the page stays where it was', async () => {
      for (const [, to] of BAD_PATHS) {
        expectError(await agent.post(`/api/v1/nodes/${page.id}/move`, { to }), 400, 'invalid_path');
      }
      expectError(await human.post(`/api/v1/nodes/${page.id}/move`, { to: '../x.md' }), 400, 'invalid_path');
      // Moving onto a taken path is a conflict, onto its own path a bad request.
      expectStatus(await agent.post('/api/v1/nodes', { path: 'eng/occupied.md', content: '# Occupied\n' }), 201);
      expectError(await agent.post(`/api/v1/nodes/${page.id}/move`, { to: 'eng/occupied.md' }), 409, 'already_exists');
      expectError(await agent.post(`/api/v1/nodes/${page.id}/move`, { to: 'eng/existing.md' }), 400, 'invalid_request');
      const after = await agent.get(`/api/v1/nodes/${page.id}`);
      expect(after.body.path).toBe('eng/existing.md');
      expect(after.body.commit_sha).toBe(page.commit_sha);
    });

    it('a traversal path in the URL finds nothing (404), never a file outside the store', async () => {
      for (const ref of ['../../etc/passwd', '..%2F..%2Fetc%2Fpasswd', enc('eng/../eng/existing.md')]) {
        const res = await agent.get(`/api/v1/nodes/${ref.includes('%') ? ref : enc(ref)}`);
        expect([400, 404], res.text).toContain(res.status);
        expectError(res, res.status, res.status === 404 ? 'not_found' : ['invalid_path', 'invalid_request']);
      }
    });
  });

  describe('content', () => {
    it('empty or whitespace-only content is 400 empty_content', async () => {
      expectError(await agent.post('/api/v1/nodes', { path: 'eng/empty.md', content: '' }), 400, 'empty_content');
      expectError(await agent.post('/api/v1/nodes', { path: 'eng/empty.md', content: '  \n\t\n ' }), 400, 'empty_content');
      expectError(await agent.put(`/api/v1/nodes/${page.id}`, { content: '' }), 400, 'empty_content');
      expectError(await agent.put(`/api/v1/nodes/${page.id}`, { content: '\n\n   ' }), 400, 'empty_content');
      expectError(await human.post('/api/v1/nodes', { path: 'eng/empty.md', content: ' ' }), 400, 'empty_content');
      expectError(await agent.get(`/api/v1/nodes/${enc('eng/empty.md')}`), 404, 'not_found');
    });

    it('content of exactly 1 MiB is accepted; one byte more is 413 payload_too_large', async () => {
      const max = `# Big\n${'a'.repeat(1024 * 1024 - 7)}\n`;
      expect(Buffer.byteLength(max)).toBe(1024 * 1024);
      expectStatus(await agent.post('/api/v1/nodes', { path: 'eng/big.md', content: max }), 201);
      expectError(await agent.post('/api/v1/nodes', { path: 'eng/too-big.md', content: 'a'.repeat(1024 * 1024 + 1) }), 413, 'payload_too_large');
      expectError(await agent.put(`/api/v1/nodes/${page.id}`, { content: 'b'.repeat(1024 * 1024 + 1) }), 413, 'payload_too_large');
      // Multi-byte characters count in bytes: 400k three-byte characters is over 1 MiB.
      expectError(await agent.post('/api/v1/nodes', { path: 'eng/too-big-utf8.md', content: '€'.repeat(400_000) }), 413, 'payload_too_large');
      expectError(await agent.get(`/api/v1/nodes/${enc('eng/too-big.md')}`), 404, 'not_found');
    });

    it('a request body over 3 MiB is 413 payload_too_large', async () => {
      const res = await agent.post('/api/v1/nodes', { path: 'eng/huge.md', content: 'c'.repeat(3 * 1024 * 1024 + 10) });
      expectError(res, 413, 'payload_too_large');
      // The server is still fine afterwards.
      expectStatus(await agent.get(`/api/v1/nodes/${page.id}`), 200);
    });

    it('content holding a NUL character is 400 invalid_content', async () => {
      expectError(await agent.post('/api/v1/nodes', { path: 'eng/nul.md', content: '# a\u0000b\n' }), 400, 'invalid_content');
      expectError(await agent.put(`/api/v1/nodes/${page.id}`, { content: '# a\u0000b\n' }), 400, 'invalid_content');
    });

    it('content holding half a surrogate pair is 400 invalid_content; whole pairs are fine', async () => {
      // JSON.stringify escapes a lone surrogate as \\ud800: the request is valid JSON, the text is not Unicode.
      for (const bad of ['# a\ud800b\n', '# a\udfffb\n', '# tail \ud83d', '# \ude00 head\n']) {
        expectError(await agent.post('/api/v1/nodes', { path: 'eng/half.md', content: bad }), 400, 'invalid_content');
        expectError(await agent.put(`/api/v1/nodes/${page.id}`, { content: bad }), 400, 'invalid_content');
      }
      expect((await agent.get(`/api/v1/nodes/${page.id}`)).body.content).toBe(PAGE);
      const ok = await agent.post('/api/v1/nodes', { path: 'eng/emoji.md', content: '# Lamp 😀🔦\n' });
      expectStatus(ok, 201);
      expect((await agent.get(`/api/v1/nodes/${ok.body.id}`)).body.content).toBe('# Lamp 😀🔦\n');
    });

    it('an archived page with an unknown archived_reason is 400 invalid_frontmatter', async () => {
      const content = '---\nstate: archived\narchived_reason: bored\n---\n# A\n';
      expectError(await agent.post('/api/v1/nodes', { path: 'eng/ar.md', content }), 400, 'invalid_frontmatter');
    });

    it('creating at a path that is taken is 409 already_exists and the page is untouched', async () => {
      expectError(await agent.post('/api/v1/nodes', { path: 'eng/existing.md', content: '# Other\n' }), 409, 'already_exists');
      expect((await agent.get(`/api/v1/nodes/${page.id}`)).body.content).toBe(PAGE);
    });

    it('invalid YAML frontmatter is 400 invalid_frontmatter', async () => {
      expectError(await agent.post('/api/v1/nodes', { path: 'eng/fm1.md', content: '---\nfoo: [unclosed\n---\nbody' }), 400, 'invalid_frontmatter');
      expectError(await agent.post('/api/v1/nodes', { path: 'eng/fm2.md', content: '---\ntitle: x\nno closing fence\n' }), 400, 'invalid_frontmatter');
      expectError(await agent.put(`/api/v1/nodes/${page.id}`, { content: '---\nfoo: [unclosed\n---\nbody' }), 400, 'invalid_frontmatter');
    });

    it('frontmatter that is a list or a scalar is 400 invalid_frontmatter', async () => {
      expectError(await agent.post('/api/v1/nodes', { path: 'eng/fm3.md', content: '---\n- a\n- b\n---\nbody\n' }), 400, 'invalid_frontmatter');
      expectError(await agent.post('/api/v1/nodes', { path: 'eng/fm4.md', content: '---\njust a string\n---\nbody\n' }), 400, 'invalid_frontmatter');
    });

    it('an unknown sensitivity is 400 invalid_sensitivity', async () => {
      expectError(await agent.post('/api/v1/nodes', { path: 'eng/s1.md', content: '---\nsensitivity: top-secret\n---\nbody\n' }), 400, 'invalid_sensitivity');
      expectError(await agent.put(`/api/v1/nodes/${page.id}`, { content: '---\nsensitivity: 3\n---\nbody\n' }), 400, 'invalid_sensitivity');
      expectError(await agent.patch(`/api/v1/nodes/${page.id}`, { frontmatter: { sensitivity: 'top-secret' } }), 400, 'invalid_sensitivity');
      expectError(
        await agent.post('/api/v1/nodes', { space: 'eng', title: 'S2', body: 'x', frontmatter: { sensitivity: 'ultra' } }),
        400,
        'invalid_sensitivity',
      );
    });

    it('an unknown state is 400', async () => {
      const res = await agent.post('/api/v1/nodes', { path: 'eng/st1.md', content: '---\nstate: weird\n---\nbody\n' });
      expectError(res, 400, ['invalid_frontmatter', 'invalid_state', 'invalid_request']);
      const res2 = await agent.patch(`/api/v1/nodes/${page.id}`, { frontmatter: { state: 'weird' } });
      expectError(res2, 400, ['invalid_frontmatter', 'invalid_state', 'invalid_request']);
      const after = await agent.get(`/api/v1/nodes/${page.id}`);
      expect(after.body.content).toBe(PAGE);
    });
  });

  describe('unknown ids, paths, commits and sections', () => {
    const ghost = `pg_${'0123456789abcdefghjkmnpqrs'}`;

    it('an unknown page id is 404 not_found on every page route', async () => {
      expect(ghost).toMatch(/^pg_[0-9a-z]{26}$/);
      expectError(await agent.get(`/api/v1/nodes/${ghost}`), 404, 'not_found');
      expectError(await agent.put(`/api/v1/nodes/${ghost}`, { content: '# x\n' }), 404, 'not_found');
      expectError(await agent.patch(`/api/v1/nodes/${ghost}`, { title: 'x' }), 404, 'not_found');
      expectError(await agent.delete(`/api/v1/nodes/${ghost}`), 404, 'not_found');
      expectError(await agent.get(`/api/v1/nodes/${ghost}/history`), 404, 'not_found');
      expectError(await agent.post(`/api/v1/nodes/${ghost}/move`, { to: 'eng/ghost.md' }), 404, 'not_found');
      expectError(await agent.post(`/api/v1/nodes/${ghost}/archive`, { reason: 'manual' }), 404, 'not_found');
      expectError(await agent.post(`/api/v1/nodes/${ghost}/restore`, {}), 404, 'not_found');
      expectError(await human.get(`/api/v1/nodes/${ghost}/diff`), 404, 'not_found');
      expectError(await human.get(`/api/v1/nodes/${ghost}`), 404, 'not_found');
      expectError(await human.delete(`/api/v1/nodes/${ghost}`), 404, 'not_found');
      // An id-shaped string that is not a valid id is just an unknown path.
      expectError(await agent.get('/api/v1/nodes/pg_short'), 404, 'not_found');
    });

    it('a path that does not exist is 404 not_found', async () => {
      expectError(await agent.get(`/api/v1/nodes/${enc('eng/nope.md')}`), 404, 'not_found');
      expectError(await agent.put(`/api/v1/nodes/${enc('eng/nope.md')}`, { content: '# x\n' }), 404, 'not_found');
      expectError(await agent.get(`/api/v1/nodes/${enc('eng/nope.md')}/history`), 404, 'not_found');
      expectError(await agent.delete(`/api/v1/nodes/${enc('eng/nope.md')}`), 404, 'not_found');
      // The same page by its path works.
      const byPath = await agent.get(`/api/v1/nodes/${enc('eng/existing.md')}`);
      expectStatus(byPath, 200);
      expect(byPath.body.id).toBe(page.id);
    });

    it('at= with a non-hex value is 400 invalid_sha; an unknown sha is 404 commit_not_found', async () => {
      expectError(await agent.get(`/api/v1/nodes/${page.id}?at=zzzzzzzz`), 400, 'invalid_sha');
      expectError(await agent.get(`/api/v1/nodes/${page.id}?at=${'g'.repeat(40)}`), 400, 'invalid_sha');
      expectError(await agent.get(`/api/v1/nodes/${page.id}?at=${'d'.repeat(40)}`), 404, 'commit_not_found');
      expectError(await agent.get(`/api/v1/nodes/${page.id}?at=deadbee`), 404, 'commit_not_found');
      // The page's own commit works.
      const atOwn = await agent.get(`/api/v1/nodes/${page.id}?at=${page.commit_sha}`);
      expectStatus(atOwn, 200);
      expect(atOwn.body.content).toBe(PAGE);
      // A commit from another workspace is unknown here.
      expectError(await agent.get(`/api/v1/nodes/${page.id}?at=${pageB.commit_sha}`), 404, 'commit_not_found');
    });

    it('a diff without to= (the latest version) answers 200, never 500', async () => {
      // The owner has the secret-level read a diff needs.
      const latest = await human.get(`/api/v1/nodes/${page.id}/diff`);
      expectStatus(latest, 200);
      expect(latest.body.to).toBe(page.commit_sha);
      expect(latest.body.to_content).toBe(PAGE);
      expectStatus(await human.get(`/api/v1/nodes/${page.id}/diff?from=${page.commit_sha}`), 200);
    });

    it('before= on history and from=/to= on diff are checked like at=', async () => {
      expectError(await agent.get(`/api/v1/nodes/${page.id}/history?before=zzzzzzzz`), 400, 'invalid_sha');
      expectError(await agent.get(`/api/v1/nodes/${page.id}/history?before=${'e'.repeat(40)}`), 404, 'commit_not_found');
      expectError(await human.get(`/api/v1/nodes/${page.id}/diff?from=zzzzzzzz&to=${page.commit_sha}`), 400, 'invalid_sha');
      expectError(await human.get(`/api/v1/nodes/${page.id}/diff?to=${'e'.repeat(40)}`), 404, 'commit_not_found');
      expectError(await human.get(`/api/v1/nodes/${page.id}/diff?to=zzzzzzzz`), 400, 'invalid_sha');
      expectStatus(await human.get(`/api/v1/nodes/${page.id}/diff?to=${page.commit_sha}`), 200);
    });

    it('section= naming no heading is 404 section_not_found; a real heading works', async () => {
      expectError(await agent.get(`/api/v1/nodes/${page.id}?section=${enc('No such heading')}`), 404, 'section_not_found');
      expectError(await agent.get(`/api/v1/nodes/${page.id}?format=md&section=${enc('No such heading')}`), 404, 'section_not_found');
      const empty = await agent.get(`/api/v1/nodes/${page.id}?section=`);
      expect(empty.status, empty.text).toBeLessThan(500);
      const ok = await agent.get(`/api/v1/nodes/${page.id}?section=Details`);
      expectStatus(ok, 200);
      expect(ok.body.section).toContain('Some details.');
    });
  });

  describe('ids from another workspace', () => {
    it("workspace A's agent gets 404 not_found for B's page on every route, and B's page is untouched", async () => {
      const id = pageB.id;
      const byPath = enc(pageB.path);
      const tries: Res[] = [
        await agent.get(`/api/v1/nodes/${id}`),
        await agent.get(`/api/v1/nodes/${byPath}`),
        await agent.get(`/api/v1/nodes/${id}?at=${pageB.commit_sha}`),
        await agent.put(`/api/v1/nodes/${id}`, { content: '# Hijacked\n' }),
        await agent.patch(`/api/v1/nodes/${id}`, { title: 'Hijacked' }),
        await agent.delete(`/api/v1/nodes/${id}`),
        await agent.get(`/api/v1/nodes/${id}/history`),
        await agent.get(`/api/v1/nodes/${id}/diff`),
        await agent.post(`/api/v1/nodes/${id}/move`, { to: 'eng/stolen.md' }),
        await agent.post(`/api/v1/nodes/${id}/archive`, { reason: 'manual' }),
        await agent.post(`/api/v1/nodes/${id}/restore`, {}),
      ];
      for (const res of tries) {
        expectError(res, 404, 'not_found');
        expect(res.text).not.toContain('Only for workspace B');
      }
      const stolen = await agent.get(`/api/v1/nodes/${enc('eng/stolen.md')}`);
      expectError(stolen, 404, 'not_found');
    });

    it("workspace A's human gets 404 not_found for B's page on every route", async () => {
      const id = pageB.id;
      const tries: Res[] = [
        await human.get(`/api/v1/nodes/${id}`),
        await human.put(`/api/v1/nodes/${id}`, { content: '# Hijacked\n' }),
        await human.patch(`/api/v1/nodes/${id}`, { title: 'Hijacked' }),
        await human.delete(`/api/v1/nodes/${id}`),
        await human.get(`/api/v1/nodes/${id}/history`),
        await human.post(`/api/v1/nodes/${id}/move`, { to: 'eng/stolen-by-human.md' }),
        await human.post(`/api/v1/nodes/${id}/archive`, { reason: 'manual' }),
        await human.get(`/api/v1/nodes/${id}/diff`),
        await human.get(`/api/v1/nodes/${id}?at=${pageB.commit_sha}`),
      ];
      for (const res of tries) {
        expectError(res, 404, 'not_found');
        expect(res.text).not.toContain('Only for workspace B');
      }
    });

    it('after all that, B still reads its page unchanged with one version', async () => {
      for (const c of [agentB, humanB]) {
        const res = await c.get(`/api/v1/nodes/${pageB.id}`);
        expectStatus(res, 200);
        expect(res.body.content).toBe(pageB.content);
        expect(res.body.path).toBe('eng/b-plan.md');
        expect(res.body.state).toBe('active');
        expect(res.body.commit_sha).toBe(pageB.commit_sha);
      }
      const hist = await agentB.get(`/api/v1/nodes/${pageB.id}/history`);
      expectStatus(hist, 200);
      expect(hist.body.versions).toHaveLength(1);
      // And the reverse: B cannot see A's page either.
      expectError(await agentB.get(`/api/v1/nodes/${page.id}`), 404, 'not_found');
    });
  });

  describe('routes and query strings', () => {
    it('an unknown route is 404 not_found', async () => {
      expectError(await agent.get('/api/v1/nope'), 404, 'not_found');
      expectError(await agent.post('/api/v1/nope', { a: 1 }), 404, 'not_found');
      expectError(await human.get('/api/v1/nodes'), 404, 'not_found');
      expectError(await human.post('/api/v1/nope', { a: 1 }), 404, 'not_found');
      expectError(await agent.get(`/api/v1/nodes/${page.id}/nope`), 404, 'not_found');
      expectError(await agent.get('/no/such/thing'), 404, 'not_found');
    });

    it('an unknown route without credentials answers 401 or 404, with the error body', async () => {
      // Unknown routes go through the same credential check as /api/v1 (so an anonymous
      // caller learns nothing about which routes exist); either answer is acceptable.
      const res = await new Client(s.url).get('/api/v1/nope');
      expectError(res, res.status === 401 ? 401 : 404, res.status === 401 ? 'unauthorized' : 'not_found');
    });

    it('a wrong method on a known path is 404 or 405 with the error body', async () => {
      const tries: Res[] = [
        await agent.request('PATCH', '/api/v1/spaces', { json: {} }),
        await agent.request('DELETE', '/api/v1/principals'),
        await agent.request('PUT', `/api/v1/nodes/${page.id}/history`, { json: {} }),
        await agent.request('GET', `/api/v1/nodes/${page.id}/move`),
      ];
      for (const res of tries) {
        expect([404, 405], res.text).toContain(res.status);
        expectError(res, res.status, res.status === 404 ? 'not_found' : 'method_not_allowed');
      }
    });

    it('depth=abc on the tree is 400 invalid_request; out-of-range depth too', async () => {
      expectError(await agent.get('/api/v1/spaces/eng/tree?depth=abc'), 400, 'invalid_request');
      expectError(await agent.get('/api/v1/spaces/eng/tree?depth=-1'), 400, 'invalid_request');
      expectError(await agent.get('/api/v1/spaces/eng/tree?depth=11'), 400, 'invalid_request');
      expectError(await agent.get('/api/v1/spaces/eng/tree?depth=1.5'), 400, 'invalid_request');
      expectError(await agent.get('/api/v1/spaces/eng/tree?include_archived=maybe'), 400, 'invalid_request');
      expectStatus(await agent.get('/api/v1/spaces/eng/tree?depth=2'), 200);
    });

    it('a tree path with traversal is 400 invalid_path; an unknown Space is 404', async () => {
      expectError(await agent.get(`/api/v1/spaces/eng/tree?path=${enc('../other')}`), 400, 'invalid_path');
      expectError(await agent.get('/api/v1/spaces/nospace/tree'), 404, 'not_found');
    });

    it('limit=0 and limit=1000 on history are 400 invalid_request; limit=1 works', async () => {
      expectError(await agent.get(`/api/v1/nodes/${page.id}/history?limit=0`), 400, 'invalid_request');
      expectError(await agent.get(`/api/v1/nodes/${page.id}/history?limit=1000`), 400, 'invalid_request');
      expectError(await agent.get(`/api/v1/nodes/${page.id}/history?limit=ten`), 400, 'invalid_request');
      const one = await agent.get(`/api/v1/nodes/${page.id}/history?limit=1`);
      expectStatus(one, 200);
      expect(one.body.versions).toHaveLength(1);
    });

    it('a repeated query parameter is 400 invalid_request, never 500', async () => {
      expectError(await agent.get(`/api/v1/nodes/${page.id}/history?limit=1&limit=2`), 400, 'invalid_request');
      expectError(await agent.get('/api/v1/spaces/eng/tree?depth=1&depth=2'), 400, 'invalid_request');
      expectError(await agent.get(`/api/v1/nodes/${page.id}?at=${page.commit_sha}&at=${page.commit_sha}`), 400, 'invalid_request');
      expectError(await agent.get(`/api/v1/nodes/${page.id}?section=Details&section=Intro`), 400, 'invalid_request');
    });

    it('format= other than json or md is 400 invalid_request', async () => {
      expectError(await agent.get(`/api/v1/nodes/${page.id}?format=xml`), 400, 'invalid_request');
    });

    it('a bad space id on POST /api/v1/spaces is 400 invalid_path', async () => {
      expectError(await agent.post('/api/v1/spaces', { id: '../up', name: 'Up' }), 400, 'invalid_path');
      expectError(await agent.post('/api/v1/spaces', { id: 'a/b', name: 'AB' }), 400, 'invalid_path');
      expectError(await agent.post('/api/v1/spaces', { id: '.git', name: 'Git' }), 400, 'invalid_path');
    });
  });
});
