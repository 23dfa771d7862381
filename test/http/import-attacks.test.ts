import { crc32 } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IMPORT_LIMITS } from '../../src/core/import/limits.js';
import { testEngines } from '../support/engines.js';
import { expectError, expectStatus } from '../support/expect.js';
import { Client, createAgentWithKey, joinAs, signupHuman, startTestServer, type Res, type TestServer } from '../support/server.js';
import { finished, postJson, postZip, reasons, type ImportJob } from '../support/imports.js';
import { buildZip, multipart } from '../support/zip.js';

/**
 * Attacks on `POST /api/v1/import` (issue 16), each a real request against a started server:
 * pages the importer cannot see (a secret page at the same path, a key ceiling below the grant,
 * a redacted block), other workspaces, a background job that outlives the importer's rights
 * (member removed, key revoked, lockdown), hostile uploads (malformed multipart, wrong types,
 * odd names, frontmatter and body bombs, zips that lie: overlapping entries, bad CRCs, zip64
 * markers), replays and races into the same Space. Whatever happens, no answer is a 500, the
 * server keeps answering, and nothing the importer may not write is written or revealed.
 */

const enc = encodeURIComponent;
const BATCH = IMPORT_LIMITS.batchFiles;

function done(res: Res<ImportJob>): ImportJob {
  expectStatus(res, 200);
  expect(res.body.status, JSON.stringify(res.body).slice(0, 400)).toBe('done');
  return res.body;
}

/** Files for a job long enough to act on while it runs (several batches). */
const many = (n: number, tag: string) => Array.from({ length: n }, (_, i) => ({ path: `d${i % 20}/${tag}${i}.md`, content: `# ${tag} ${i}\n\nbody ${i}\n` }));

describe.each(testEngines())('import attacks (%s)', (engine) => {
  let s: TestServer;
  let owner: Awaited<ReturnType<typeof signupHuman>>;
  let editor: { client: Client; id: string };
  const ownerPassword = 'correct horse battery';

  const raw = (path: string, c = owner.client) => c.get(`/api/v1/nodes/${enc(path)}?format=md`);
  const page = (path: string, c = owner.client) => c.get(`/api/v1/nodes/${enc(path)}`);
  /** Live pages of a Space, counted in the database (whatever the caller may see). */
  const livePages = async (space: string) =>
    Number(
      (
        await s.ctx.store.db
          .selectFrom('pages')
          .select((eb) => eb.fn.countAll().as('n'))
          .where('deleted_at', 'is', null)
          .where('path', 'like', `${space}/%`)
          .executeTakeFirstOrThrow()
      ).n,
    );
  const healthy = async () => expectStatus(await owner.client.get('/healthz'), 200);

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = await signupHuman(s.url, 'Oona');
    owner.client.workspace = owner.workspace.slug;
    editor = await joinAs(owner.client, owner.workspace.slug, 'editor', 'Eli');
  }, 60_000);
  afterAll(async () => s?.stop());

  describe('pages the importer cannot see', () => {
    it('a secret page at an imported path is neither overwritten nor described beyond what a REST create says', async () => {
      const content = '---\nsensitivity: secret\n---\n# Launch codes\n\nThe codes are 0000.\n';
      const hidden = await owner.client.post('/api/v1/nodes', { path: 'vault/hidden.md', content });
      expectStatus(hidden, 201);
      // What REST tells the editor about that path.
      const rest = await editor.client.post('/api/v1/nodes', { path: 'vault/hidden.md', content: '# Mine\n' });
      expectError(rest, 409, 'already_exists');
      expectError(await page('vault/hidden.md', editor.client), 404, 'not_found');

      // Other bytes: skipped, and said no more than the create's answer (it exists; nothing
      // about its level, as "holds content above your ceiling" would).
      const job = done(await postZip(editor.client, 'vault', buildZip([{ name: 'hidden.md', data: '# Mine\n\nOverwritten.\n' }])));
      expect(job).toMatchObject({ created: 0, updated: 0, unchanged: 0, skipped_count: 1 });
      expect(reasons(job)['vault/hidden.md']).toBe(rest.body.error.message);
      // The same bytes: refused for their own level, never "unchanged".
      const same = done(await postZip(editor.client, 'vault', buildZip([{ name: 'hidden.md', data: content }])));
      expect(same).toMatchObject({ created: 0, updated: 0, unchanged: 0, skipped_count: 1 });
      const after = await page('vault/hidden.md');
      expect(after.body.commit_sha).toBe(hidden.body.commit_sha);
      expect((await raw('vault/hidden.md')).text).toBe(content);
    });

    it('an agent that may write but not read a folder learns nothing of its pages (no "unchanged" oracle) and overwrites none', async () => {
      const content = '# Salaries\n\nAlice 100, Bob 90.\n';
      const target = await owner.client.post('/api/v1/nodes', { path: 'hr/salaries.md', content });
      expectStatus(target, 201);
      const writer = await createAgentWithKey(owner.client, [
        { action: 'write', scope: 'hr' },
        { action: 'read', scope: 'elsewhere' },
      ]);
      // REST: the page does not exist for it, and a create there is 409.
      expectError(await page('hr/salaries.md', writer.client), 404, 'not_found');
      const rest = await writer.client.post('/api/v1/nodes', { path: 'hr/salaries.md', content: '# Guess\n' });
      expectError(rest, 409, 'already_exists');
      for (const guess of [content, '# Salaries\n\nAlice 1, Bob 1.\n']) {
        const job = done(await postJson(writer.client, 'hr', [{ path: 'salaries.md', content: guess }]));
        expect(job, 'a right guess must not be told apart from a wrong one').toMatchObject({ created: 0, updated: 0, unchanged: 0, skipped_count: 1 });
        expect(reasons(job)['hr/salaries.md']).toBe(rest.body.error.message);
      }
      expect((await page('hr/salaries.md')).body.commit_sha).toBe(target.body.commit_sha);
    });

    it("a key whose ceiling is below its grant writes nothing above the key's ceiling, inline or in the background job", async () => {
      const conf = await owner.client.post('/api/v1/nodes', { path: 'kc/conf.md', content: '---\nsensitivity: confidential\n---\n# Conf\n\nKept.\n' });
      expectStatus(conf, 201);
      const agent = await createAgentWithKey(
        owner.client,
        [
          { action: 'write', scope: 'kc', ceiling: 'confidential' },
          { action: 'read', scope: 'kc', ceiling: 'confidential' },
        ],
        { ceiling: 'confidential', key: { ceiling: 'internal' } },
      );
      const inline = done(
        await postZip(
          agent.client,
          'kc',
          buildZip([
            { name: 'conf.md', data: '# Conf\n\nOverwritten by a key limited to internal.\n' },
            { name: 'new-conf.md', data: '---\nsensitivity: confidential\n---\n# New conf\n' },
            { name: 'plain.md', data: '# Plain\n' },
          ]),
        ),
      );
      expect(inline).toMatchObject({ created: 1, updated: 0 });
      expect(Object.keys(reasons(inline)).sort()).toEqual(['kc/conf.md', 'kc/new-conf.md']);
      expect((await page('kc/conf.md')).body.commit_sha).toBe(conf.body.commit_sha);

      // The same in the batch the background job applies (after the first).
      const files = [
        ...many(BATCH, 'bg'),
        { path: 'conf.md', content: '# Conf\n\nOverwritten in batch two.\n' },
        { path: 'late-conf.md', content: '---\nsensitivity: confidential\n---\n# Late\n' },
      ];
      const res = await postJson(agent.client, 'kc', files);
      expectStatus(res, 202);
      const job = await finished(agent.client, res.body);
      expect(job.status).toBe('done');
      expect(Object.keys(reasons(job)).sort()).toEqual(['kc/conf.md', 'kc/late-conf.md']);
      expect(job.created).toBe(BATCH);
      expect((await page('kc/conf.md')).body.commit_sha).toBe(conf.body.commit_sha);
      expectError(await page('kc/late-conf.md'), 404, 'not_found');
    });

    it('a page holding a ::: secret block is not overwritten by an agent below secret (the block survives)', async () => {
      const guarded = await owner.client.post('/api/v1/nodes', {
        path: 'blocks/guarded.md',
        content: '# Guarded\n\nOpen part.\n\n::: secret\nThe vault combination.\n:::\n',
      });
      expectStatus(guarded, 201);
      const agent = await createAgentWithKey(owner.client, [
        { action: 'write', scope: 'blocks' },
        { action: 'read', scope: 'blocks' },
      ]);
      // What the agent reads is redacted; writing it back must not erase the block.
      const seen = await raw('blocks/guarded.md', agent.client);
      expectStatus(seen, 200);
      expect(seen.text).not.toContain('combination');
      const job = done(await postJson(agent.client, 'blocks', [{ path: 'guarded.md', content: seen.text }]));
      expect(job).toMatchObject({ updated: 0, unchanged: 0, skipped_count: 1 });
      expect((await raw('blocks/guarded.md')).text).toContain('The vault combination.');
    });
  });

  describe('other workspaces', () => {
    it('X-Service-Workspace naming a workspace the caller is not in imports nothing there', async () => {
      const stranger = await signupHuman(s.url, 'Stan');
      const before = await livePages('theirs');
      const res = await postJson(owner.client, 'theirs', [{ path: 'x.md', content: '# X\n' }], { 'x-service-workspace': stranger.workspace.slug });
      expect([403, 404]).toContain(res.status);
      expect(await livePages('theirs')).toBe(before);
      expectError(await page('theirs/x.md', stranger.client), 404, 'not_found');
      // A key of this workspace pointed at the other one.
      const agent = await createAgentWithKey(owner.client, [{ action: 'write' }]);
      const viaKey = await postJson(agent.client, 'theirs', [{ path: 'y.md', content: '# Y\n' }], { 'x-service-workspace': stranger.workspace.slug });
      expect(viaKey.status).toBeGreaterThanOrEqual(400);
      expect(viaKey.status).toBeLessThan(500);
      expect(await livePages('theirs')).toBe(0);
      // The stranger's job id in this workspace: 404, even to an owner.
      const theirs = done(await postJson(stranger.client, 'own', [{ path: 'a.md', content: '# A\n' }]));
      expectError(await owner.client.get(theirs.status_url), 404, 'not_found');
      const other = await owner.client.get(theirs.status_url, { 'x-service-workspace': stranger.workspace.slug });
      expect([403, 404]).toContain(other.status);
      expect(other.text).not.toContain(theirs.id);
    });
  });

  describe('a background job stops when its importer loses the right to write', () => {
    const N = 12 * BATCH;

    async function stopsAfter(c: Client, space: string, act: () => Promise<void>): Promise<ImportJob> {
      const res = await postJson(c, space, many(N, 'p'));
      expectStatus(res, 202);
      await act();
      const at = await owner.client.get<ImportJob>(res.body.status_url);
      expectStatus(at, 200);
      const job = await finished(owner.client, at.body);
      expect(job.status, 'the job outran the revocation: make N larger').toBe('failed');
      expect(job.error).toMatch(/no longer|stopped/);
      // Only whole batches from before the loss are in, and exactly what the report counts.
      expect(job.done % BATCH).toBe(0);
      expect(job.done).toBeLessThan(N);
      expect(await livePages(space)).toBe(job.created);
      // Nothing more arrives later.
      await new Promise((r) => setTimeout(r, 500));
      expect(await livePages(space)).toBe(job.created);
      return job;
    }

    it('a revoked key', async () => {
      const agent = await createAgentWithKey(owner.client, [{ action: 'write' }, { action: 'read' }]);
      await stopsAfter(agent.client, 'revoked', async () => {
        expectStatus(await owner.client.delete(`/api/v1/principals/${agent.id}/tokens/${agent.keyId}`), 200);
      });
    }, 120_000);

    it('an editor removed from the workspace', async () => {
      const ed = await joinAs(owner.client, owner.workspace.slug, 'editor', 'Rem');
      await stopsAfter(ed.client, 'removed', async () => {
        expectStatus(await owner.client.delete(`/api/v1/workspaces/${owner.workspace.slug}/members/${ed.id}`), 200);
      });
    }, 120_000);

    it('an editor demoted to viewer', async () => {
      const ed = await joinAs(owner.client, owner.workspace.slug, 'editor', 'Dem');
      const res = await postJson(ed.client, 'demoted', many(N, 'p'));
      expectStatus(res, 202);
      expectStatus(await owner.client.patch(`/api/v1/workspaces/${owner.workspace.slug}/members/${ed.id}`, { role: 'viewer' }), 200);
      const job = await finished(owner.client, (await owner.client.get<ImportJob>(res.body.status_url)).body);
      // Whatever the job says, a viewer's files are not written after the demotion.
      expect(job.done).toBeLessThan(N + 1);
      expect(await livePages('demoted')).toBe(job.created);
      expect(job.created).toBeLessThan(N);
    }, 120_000);

    it("a lockdown (token epoch bump) stops a key's job and a session's job", async () => {
      // A workspace of its own, so the lockdown does not end the other tests' keys.
      const boss = await signupHuman(s.url, 'Lou');
      boss.client.workspace = boss.workspace.slug;
      const agent = await createAgentWithKey(boss.client, [{ action: 'write' }, { action: 'read' }]);
      const ed = await joinAs(boss.client, boss.workspace.slug, 'editor', 'Lee');
      const a = await postJson(agent.client, 'lock-key', many(N, 'k'));
      expectStatus(a, 202);
      const b = await postJson(ed.client, 'lock-session', many(N, 's'));
      expectStatus(b, 202);
      expectStatus(await boss.client.post('/api/auth/stepup', { password: ownerPassword }), 200);
      expectStatus(await boss.client.post(`/api/v1/workspaces/${boss.workspace.slug}/lockdown`), 200);
      for (const [res, space] of [
        [a, 'lock-key'],
        [b, 'lock-session'],
      ] as const) {
        const job = await finished(boss.client, (await boss.client.get<ImportJob>(res.body.status_url)).body);
        expect(job.status, `${space}: ${JSON.stringify(job).slice(0, 300)}`).toBe('failed');
        expect(job.done).toBeLessThan(N);
      }
    }, 180_000);
  });

  describe('hostile uploads: 4xx or a report, never a 500 or a hang', () => {
    const md = buildZip([{ name: 'a.md', data: '# A\n' }]);

    it('malformed multipart: no boundary, two files, another field name, a huge space field, many fields, no file, a cut body', async () => {
      const send = (body: Buffer | string, type: string) => owner.client.request('POST', '/api/v1/import', { body, headers: { 'content-type': type } });
      const one = multipart({ space: 'mp' }, { field: 'file', name: 'a.zip', data: md });
      const boundary = one.contentType.split('boundary=')[1]!;
      const second = Buffer.concat([
        Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="b.zip"\r\nContent-Type: application/zip\r\n\r\n`),
        md,
        Buffer.from('\r\n'),
      ]);
      const other = multipart({ space: 'mp' }, { field: 'upload', name: 'a.zip', data: md });
      const huge = multipart({ space: 'x'.repeat(100_000) }, { field: 'file', name: 'a.zip', data: md });
      const lots = multipart(Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`f${i}`, 'v'])), { field: 'file', name: 'a.zip', data: md });
      const none = multipart({ space: 'mp' });
      const cases: Record<string, () => Promise<Res>> = {
        'no boundary': () => send('x', 'multipart/form-data'),
        'empty boundary': () => send('x', 'multipart/form-data; boundary='),
        'boundary not in the body': () => send(one.body, 'multipart/form-data; boundary=nothere'),
        'empty body': () => send('', one.contentType),
        'two files': () => send(Buffer.concat([second, one.body]), one.contentType),
        'field named upload': () => send(other.body, other.contentType),
        'huge space field': () => send(huge.body, huge.contentType),
        '50 fields': () => send(lots.body, lots.contentType),
        'no file': () => send(none.body, none.contentType),
        'cut short': () => send(one.body.subarray(0, one.body.length - 30), one.contentType),
      };
      const statuses: Record<string, number> = {};
      for (const [name, run] of Object.entries(cases)) {
        const res = await run();
        statuses[name] = res.status >= 400 && res.status < 500 ? 400 : res.status;
        if (res.status >= 500) statuses[name] = res.status;
      }
      expect(statuses).toEqual(Object.fromEntries(Object.keys(cases).map((k) => [k, 400])));
      expect(await livePages('mp')).toBe(0);
      await healthy();
    });

    it('wrong content types and JSON of the wrong shape', async () => {
      const text = await owner.client.request('POST', '/api/v1/import?space=ct', { body: md, headers: { 'content-type': 'text/plain' } });
      expect([400, 415]).toContain(text.status);
      const octet = await owner.client.request('POST', '/api/v1/import?space=ct', { body: md, headers: { 'content-type': 'application/octet-stream' } });
      expect([400, 415]).toContain(octet.status);
      for (const body of [
        { space: 'ct', files: 'x' },
        { space: 'ct', files: [{ path: 1, content: '# A' }] },
        { space: 'ct', files: [{ path: 'a.md', content: null }] },
        { space: ['ct'], files: [] },
        { space: 'ct', files: [{ path: 'a.md', content: '# A', extra: true }] },
        { files: [] },
        [],
        'just a string',
        null,
      ]) {
        const res = await owner.client.request('POST', '/api/v1/import', { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
        expectError(res, 400, ['invalid_request', 'validation_failed', 'bad_request']);
      }
      const broken = await owner.client.request('POST', '/api/v1/import', {
        body: '{"space": "ct", "files": [',
        headers: { 'content-type': 'application/json' },
      });
      expect(broken.status).toBe(400);
      expect(await livePages('ct')).toBe(0);
    });

    it('20,001 files in JSON are refused whole; spaces that are not one safe name are refused', async () => {
      const files = Array.from({ length: IMPORT_LIMITS.maxEntries + 1 }, (_, i) => ({ path: `p${i}.md`, content: 'x' }));
      expectError(await postJson(owner.client, 'toomany', files), 400, 'invalid_request');
      expect(await livePages('toomany')).toBe(0);
      for (const space of ['../x', 'a/b', '.hidden', '..', 'x\u0000y', '/abs', 'a\\b', ' ', 'x'.repeat(101)]) {
        const res = await postJson(owner.client, space, [{ path: 'a.md', content: '# A\n' }]);
        expect(res.status, `${JSON.stringify(space)}: ${res.text}`).toBe(400);
        const zipRes = await postZip(owner.client, space, md);
        expect(zipRes.status, `${JSON.stringify(space)}: ${zipRes.text}`).toBe(400);
      }
      await healthy();
    });

    it('odd names are skipped with a reason: 10 KB, NUL and control characters, log.md/index.md are plain pages', async () => {
      const job = done(
        await postZip(
          owner.client,
          'names',
          buildZip([
            { name: `${'n'.repeat(10_000)}.md`, data: '# Long\n' },
            { name: 'nul\u0000.md', data: '# Nul\n' },
            { name: 'ctl\u0007bell.md', data: '# Bell\n' },
            { name: 'tab\tname.md', data: '# Tab\n' },
            { name: 'new\nline.md', data: '# Newline\n' },
            { name: 'rtl\u202Egpj.md', data: '# RTL override\n' },
            { name: 'log.md', data: '# Log\n' },
            { name: 'index.md', data: '# Index\n' },
            { name: 'ok.md', data: '# OK\n' },
          ]),
        ),
      );
      expect(job.status).toBe('done');
      const created = job.created;
      expect(created).toBeGreaterThanOrEqual(1);
      expect(job.total + job.skipped_count).toBe(9);
      expect(await livePages('names')).toBe(created);
      for (const p of ['names/nul\u0000.md', 'names/ctl\u0007bell.md', 'names/new\nline.md']) {
        expect(job.skipped.map((x) => x.path).join('|')).not.toContain(p.slice(6) + 'x');
      }
      // No page with a control character in its path.
      const paths = await s.ctx.store.db.selectFrom('pages').select('path').where('path', 'like', 'names/%').execute();
      for (const { path } of paths) expect(path).not.toMatch(/[\u0000-\u001f\u007f]/);
    });

    it('a 60,000-character name is reported shortened, not stored and sent back whole', async () => {
      const long = `${'n'.repeat(60_000)}.md`;
      const res = await postZip(
        owner.client,
        'longname',
        buildZip([
          { name: long, data: '# Long\n' },
          { name: `${'s p'.repeat(20_000)}.md`, data: '# Spaces\n' },
        ]),
      );
      const job = done(res);
      expect(job.skipped_count).toBe(2);
      for (const x of job.skipped) expect(x.path.length).toBeLessThanOrEqual(1024);
      expect(job.skipped[0]!.path.startsWith('nnnn')).toBe(true);
      expect(res.text.length).toBeLessThan(10_000);
    });

    it('NFC and NFD spellings of one name become one page (the first), not a skip of every macOS name', async () => {
      const nfc = 'caf\u00e9.md';
      const nfd = 'cafe\u0301.md';
      expect(nfc.normalize('NFC')).toBe(nfd.normalize('NFC'));
      const job = done(
        await postZip(
          owner.client,
          'unicode',
          buildZip([
            { name: `r\u00e9sum\u00e9s/${nfd}`, data: '# NFD first\n' },
            { name: `r\u00e9sum\u00e9s/${nfc}`, data: '# NFC second\n' },
            { name: 'Case.md', data: '# Upper\n' },
            { name: 'case.md', data: '# Lower\n' },
          ]),
        ),
      );
      const paths = (await s.ctx.store.db.selectFrom('pages').select('path').where('path', 'like', 'unicode/%').execute()).map((r) => r.path).sort();
      // macOS writes NFD names: the page is there, under the NFC spelling, once.
      expect(paths).toContain(`unicode/r\u00e9sum\u00e9s/${nfc}`);
      expect(paths.filter((p) => p.normalize('NFC') === `unicode/r\u00e9sum\u00e9s/${nfc}`)).toHaveLength(1);
      expect((await raw(`unicode/r\u00e9sum\u00e9s/${nfc}`)).text).toBe('# NFD first\n');
      expect(job.skipped_count).toBe(1);
      // Case variants are different pages (paths are case-sensitive, as in git).
      expect(paths).toEqual(expect.arrayContaining(['unicode/Case.md', 'unicode/case.md']));
    });

    it('a name that is a file and a folder (x.md and x.md/y.md) skips the one file, not the whole import', async () => {
      // In one archive, either order.
      const one = done(
        await postZip(
          owner.client,
          'ff',
          buildZip([
            { name: 'x.md', data: '# X\n' },
            { name: 'x.md/y.md', data: '# Y\n' },
            { name: 'q.md/a.md', data: '# QA\n' },
            { name: 'q.md', data: '# Q\n' },
            { name: 'ok.md', data: '# OK\n' },
          ]),
        ),
      );
      expect(one).toMatchObject({ created: 3, skipped_count: 2 });
      expect(Object.keys(reasons(one)).sort()).toEqual(['ff/q.md', 'ff/x.md/y.md']);
      // Against what the workspace holds already.
      expectStatus(await owner.client.post('/api/v1/nodes', { path: 'ff2/e.md', content: '# E\n' }), 201);
      expectStatus(await owner.client.post('/api/v1/nodes', { path: 'ff2/g.md/h.md', content: '# H\n' }), 201);
      const two = done(
        await postZip(
          owner.client,
          'ff2',
          buildZip([
            { name: 'e.md/f.md', data: '# F\n' },
            { name: 'g.md', data: '# G\n' },
            { name: 'fine.md', data: '# Fine\n' },
          ]),
        ),
      );
      expect(two).toMatchObject({ created: 1, skipped_count: 2 });
      expect(Object.keys(reasons(two)).sort()).toEqual(['ff2/e.md/f.md', 'ff2/g.md']);
      // Across batches of one job.
      const files = [
        { path: 'k.md', content: '# K\n' },
        ...many(BATCH - 1, 'f'),
        { path: 'k.md/l.md', content: '# L\n' },
        { path: 'after.md', content: '# After\n' },
      ];
      const res = await postJson(owner.client, 'ff3', files);
      expectStatus(res, 202);
      const job = await finished(owner.client, res.body);
      expect(job).toMatchObject({ status: 'done', created: BATCH + 1, skipped_count: 1 });
      expect(Object.keys(reasons(job))).toEqual(['ff3/k.md/l.md']);
      expectStatus(await page('ff3/after.md'), 200);
    });

    it('frontmatter bombs (billion laughs, deep nesting) and body bombs are skipped or imported quickly', async () => {
      const laughs = ['---', 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'];
      let prev = 'a';
      for (const n of 'bcdefghi') {
        laughs.push(`${n}: &${n} [${Array(9).fill(`*${prev}`).join(',')}]`);
        prev = n;
      }
      laughs.push('---', '# Laughs', '');
      const started = Date.now();
      const job = done(
        await postJson(owner.client, 'bombs', [
          { path: 'laughs.md', content: laughs.join('\n') },
          { path: 'deep-flow.md', content: `---\nx: ${'['.repeat(50_000)}${']'.repeat(50_000)}\n---\n# Deep\n` },
          { path: 'deep-block.md', content: `---\n${Array.from({ length: 3000 }, (_, i) => `${' '.repeat(i)}k${i}:`).join('\n')} 1\n---\n# Deep block\n` },
          { path: 'quotes.md', content: `# Quotes\n\n${'> '.repeat(100_000)}deep\n` },
          { path: 'brackets.md', content: `# Brackets\n\n${'['.repeat(200_000)}\n` },
          { path: 'lists.md', content: `# Lists\n\n${Array.from({ length: 2000 }, (_, i) => `${'  '.repeat(i)}- item`).join('\n')}\n` },
          { path: 'links.md', content: `# Links\n\n${'[[a]] '.repeat(50_000)}\n` },
          { path: 'fences.md', content: `# Fences\n\n${'::: secret\nx\n:::\n'.repeat(10_000)}x\n` },
          { path: 'ok.md', content: '# OK\n' },
        ]),
      );
      expect(Date.now() - started).toBeLessThan(30_000);
      expect(reasons(job)['bombs/laughs.md']).toMatch(/frontmatter|alias/i);
      expect(reasons(job)['bombs/deep-flow.md']).toMatch(/frontmatter|deep/i);
      expect(job.created + job.skipped_count).toBe(9);
      expectStatus(await page('bombs/ok.md'), 200);
      await healthy();
    }, 60_000);

    // Found here, not fixed here (src/retrieval/chunking.ts): chunkBody marks every line of every
    // block, and an unclosed `::: secret` runs to the end of the body, so N unclosed openers cost
    // N x lines: 20,000 of them (220 KB) took 7 s of one core, a 1 MiB page minutes, during which
    // the process answers nothing. REST and MCP writes of the same body are as slow.
    it('a page of 20,000 unclosed ::: openers (220 KB) is imported in under 3 s, and the server answers meanwhile', async () => {
      const started = Date.now();
      const pending = postJson(owner.client, 'fences', [{ path: 'open.md', content: `# Fences\n\n${'::: secret\n'.repeat(20_000)}x\n` }]);
      await new Promise((r) => setTimeout(r, 300));
      const ping = Date.now();
      await healthy();
      const pingMs = Date.now() - ping;
      const job = done(await pending);
      expect(job.created).toBe(1);
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(pingMs).toBeLessThan(2_000);
    }, 120_000);

    /** A one-entry zip, store method, so its data can be tampered with. */
    const stored = (name: string, data: string) => buildZip([{ name, data, method: 'store' }]);

    it('a CRC that does not match the data is invalid_archive, and nothing is written', async () => {
      const zip = stored('crc.md', '# CRC\n\nOriginal text.\n');
      const at = 30 + 'crc.md'.length;
      zip.write('T', at + 2, 'latin1'); // "# TRC": same size, other bytes
      const res = await postZip(owner.client, 'crc', zip);
      expectError(res, 400, 'invalid_archive');
      expect(await livePages('crc')).toBe(0);
    });

    it('overlapping entries (many central records over one local file) are refused by declared size, not inflated', async () => {
      const big = 'a'.repeat(1024 * 1024 - 16);
      const base = buildZip([{ name: 'x.md', data: big }]);
      // Split the one-entry zip: local part, its central record, end record.
      const eocd = base.length - 22;
      const cdOffset = base.readUInt32LE(eocd + 16);
      const central = base.subarray(cdOffset, eocd);
      const n = 300;
      const records: Buffer[] = [];
      for (let i = 0; i < n; i++) {
        const name = Buffer.from(`o${String(i).padStart(3, '0')}.md`);
        const rec = Buffer.concat([central.subarray(0, 46), name]);
        rec.writeUInt16LE(name.length, 28);
        records.push(rec);
      }
      const cd = Buffer.concat(records);
      const end = Buffer.alloc(22);
      end.writeUInt32LE(0x06054b50, 0);
      end.writeUInt16LE(n, 8);
      end.writeUInt16LE(n, 10);
      end.writeUInt32LE(cd.length, 12);
      end.writeUInt32LE(cdOffset, 16);
      const zip = Buffer.concat([base.subarray(0, cdOffset), cd, end]);
      const res = await postZip(owner.client, 'overlap', zip);
      expectError(res, 400, 'archive_refused');
      // 20 of them stay under every limit: each imports the same bytes, or the archive is refused; no 500.
      const few = Buffer.concat([base.subarray(0, cdOffset), Buffer.concat(records.slice(0, 3))]);
      const end3 = Buffer.from(end);
      end3.writeUInt16LE(3, 8);
      end3.writeUInt16LE(3, 10);
      end3.writeUInt32LE(
        records.slice(0, 3).reduce((k, r) => k + r.length, 0),
        12,
      );
      const res3 = await postZip(owner.client, 'overlap', Buffer.concat([few, end3]));
      expect([200, 400]).toContain(res3.status);
      await healthy();
    });

    it('zip64 markers, an empty zip, a zip content type on JSON, a body that is only an end record with garbage offsets', async () => {
      const z64 = buildZip([{ name: 'big.md', data: '# Big\n', declaredSize: 0xffffffff, method: 'store' }]);
      const r64 = await postZip(owner.client, 'z64', z64);
      expect([400]).toContain(r64.status);

      const empty = await postZip(owner.client, 'empty', buildZip([]));
      expect(empty.status, empty.text).toBeLessThan(500);
      if (empty.status === 200) expect(empty.body).toMatchObject({ total: 0, created: 0 });

      const json = await postZip(owner.client, 'nz', Buffer.from(JSON.stringify({ space: 'nz', files: [] })));
      expectError(json, 400, 'invalid_archive');

      const end = Buffer.alloc(22);
      end.writeUInt32LE(0x06054b50, 0);
      end.writeUInt16LE(5, 8);
      end.writeUInt16LE(5, 10);
      end.writeUInt32LE(0xfffffff0, 12);
      end.writeUInt32LE(0xfffffff0, 16);
      expectError(await postZip(owner.client, 'nz', end), 400, 'invalid_archive');
      await healthy();
    });

    it('a stored entry that declares fewer bytes than its data, and one that declares more', async () => {
      const less = buildZip([{ name: 'less.md', data: '# Less\n\nmore text than declared\n', method: 'store', declaredSize: 4 }]);
      expectError(await postZip(owner.client, 'lies', less), 400, 'invalid_archive');
      const more = buildZip([{ name: 'more.md', data: '# More\n', method: 'store', declaredSize: 5000 }]);
      expectError(await postZip(owner.client, 'lies', more), 400, 'invalid_archive');
      expect(await livePages('lies')).toBe(0);
    });

    it('a JSON body above 50 MiB is 413', async () => {
      const content = 'x'.repeat(1024 * 1024 - 100);
      const files = Array.from({ length: 51 }, (_, i) => ({ path: `p${i}.md`, content }));
      const res = await postJson(owner.client, 'huge', files);
      expectError(res, 413, 'payload_too_large');
      expect(await livePages('huge')).toBe(0);
    }, 60_000);
  });

  describe('replays and races', () => {
    it('the same import twice: the second is all unchanged and makes no commit', async () => {
      const files = many(40, 'r');
      const first = done(await postJson(owner.client, 'replay', files));
      expect(first.created).toBe(40);
      const second = done(await postJson(owner.client, 'replay', files));
      expect(second).toMatchObject({ created: 0, updated: 0, unchanged: 40, commits: [] });
    });

    it('two imports at once into one Space with overlapping paths: every page once, no 500', async () => {
      const a = Array.from({ length: 300 }, (_, i) => ({ path: `p${i}.md`, content: `# A ${i}\n` }));
      const b = Array.from({ length: 300 }, (_, i) => ({ path: `p${i + 150}.md`, content: `# B ${i + 150}\n` }));
      const [ra, rb] = await Promise.all([postJson(owner.client, 'race', a), postJson(editor.client, 'race', b)]);
      for (const r of [ra, rb]) expect(r.status, r.text.slice(0, 300)).toBeLessThan(500);
      const ja = await finished(owner.client, ra.body);
      const jb = await finished(owner.client, rb.body);
      expect(ja.status).toBe('done');
      expect(jb.status).toBe('done');
      expect(await livePages('race')).toBe(450);
      // The overlap was created by one and updated by the other.
      expect(ja.created + jb.created).toBe(450);
      expect(ja.updated + jb.updated).toBe(150);
      const dupes = await s.ctx.store.db
        .selectFrom('pages')
        .select(['path', (eb) => eb.fn.countAll().as('n')])
        .where('path', 'like', 'race/%')
        .where('deleted_at', 'is', null)
        .groupBy('path')
        .having((eb) => eb.fn.countAll(), '>', 1)
        .execute();
      expect(dupes).toEqual([]);
    });

    it('an import racing REST creates of the same paths: no 500, one page per path', async () => {
      const files = Array.from({ length: 100 }, (_, i) => ({ path: `p${i}.md`, content: `# Import ${i}\n` }));
      const rest = Array.from({ length: 20 }, (_, i) => owner.client.post('/api/v1/nodes', { path: `rr/p${i * 5}.md`, content: `# REST ${i}\n` }));
      const [imp, ...creates] = await Promise.all([postJson(editor.client, 'rr', files), ...rest]);
      expect(imp!.status, imp!.text.slice(0, 300)).toBe(200);
      for (const c of creates) expect([201, 409]).toContain(c.status);
      expect(await livePages('rr')).toBe(100);
      expect(imp!.body.created + imp!.body.updated).toBe(100);
    });
  });
});

describe.each(testEngines())('single writes through the bulk indexer (%s)', (engine) => {
  let s: TestServer;
  let owner: Client;
  let internal: Client;
  beforeAll(async () => {
    s = await startTestServer(engine);
    const h = await signupHuman(s.url, 'Ivy');
    owner = h.client;
    owner.workspace = h.workspace.slug;
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
  }, 60_000);
  afterAll(async () => s?.stop());

  const backlinks = async (ref: string, c = owner) => {
    const res = await c.get(`/api/v1/nodes/${enc(ref)}/backlinks`);
    expectStatus(res, 200);
    return (res.body.backlinks as { path: string }[]).map((b) => b.path).sort();
  };
  const found = async (q: string, c = owner) => {
    const res = await c.get(`/api/v1/search?q=${enc(q)}&mode=fts&limit=20`);
    expectStatus(res, 200);
    return (res.body.results as { path: string }[]).map((r) => r.path).sort();
  };

  it('create, update, move, delete and re-create keep links, backlinks and keyword search right both ways', async () => {
    // A link to a page that does not exist yet resolves when the page is created by REST.
    const a = await owner.post('/api/v1/nodes', { path: 'w/a.md', content: '# A\n\nSee [[Bee Page]] and [c](c.md).\n' });
    expectStatus(a, 201);
    const b = await owner.post('/api/v1/nodes', { path: 'w/bee-page.md', content: '# Bee Page\n\nThe echidna lives here.\n' });
    expectStatus(b, 201);
    expect(await backlinks('w/bee-page.md')).toEqual(['w/a.md']);
    // ... and when it is created by an import.
    done(await postJson(owner, 'w', [{ path: 'c.md', content: '# C\n\nBack to [[A]].\n' }]));
    expect(await backlinks('w/c.md')).toEqual(['w/a.md']);
    expect(await backlinks('w/a.md')).toEqual(['w/c.md']);

    // Update: new words are found, old ones are not; a removed link is no backlink.
    expectStatus(await owner.put(`/api/v1/nodes/${b.body.id}`, { content: '# Bee Page\n\nThe platypus moved in.\n' }), 200);
    expect(await found('platypus')).toEqual(['w/bee-page.md']);
    expect(await found('echidna')).toEqual([]);
    expectStatus(await owner.put(`/api/v1/nodes/${a.body.id}`, { content: '# A\n\nNo links any more.\n' }), 200);
    expect(await backlinks('w/bee-page.md')).toEqual([]);
    expect(await backlinks('w/c.md')).toEqual([]);
    expect(await backlinks('w/a.md')).toEqual(['w/c.md']);

    // Move: backlinks follow the page by id; search finds it at its new path.
    expectStatus(await owner.post(`/api/v1/nodes/${a.body.id}/move`, { to: 'w/sub/a.md' }), 200);
    expect(await backlinks(a.body.id)).toEqual(['w/c.md']);
    expectStatus(await owner.put(`/api/v1/nodes/${a.body.id}`, { content: '# A\n\nThe quoll is [[Bee Page]]s friend.\n' }), 200);
    expect(await found('quoll')).toEqual(['w/sub/a.md']);
    expect(await backlinks('w/bee-page.md')).toEqual(['w/sub/a.md']);

    // Delete, then a new page at the name: the link reaches the new page.
    expectStatus(await owner.post('/api/auth/stepup', { password: 'correct horse battery' }), 200);
    expectStatus(await owner.delete(`/api/v1/nodes/${b.body.id}`), 200);
    expect(await found('platypus')).toEqual([]);
    const b2 = await owner.post('/api/v1/nodes', { path: 'w/bee-page.md', content: '# Bee Page\n\nA new bee page.\n' });
    expectStatus(b2, 201);
    expect(await backlinks(b2.body.id)).toEqual(['w/sub/a.md']);
  });

  it("raising a page to confidential removes it from an internal reader's search at once; lowering brings it back", async () => {
    const p = await owner.post('/api/v1/nodes', { path: 'lv/page.md', content: '# Page\n\nThe bandicoot report.\n' });
    expectStatus(p, 201);
    expect(await found('bandicoot', internal)).toEqual(['lv/page.md']);
    expectStatus(await owner.put(`/api/v1/nodes/${p.body.id}`, { content: '---\nsensitivity: confidential\n---\n# Page\n\nThe bandicoot report.\n' }), 200);
    expect(await found('bandicoot', internal)).toEqual([]);
    expect(await found('bandicoot')).toEqual(['lv/page.md']);
    expectStatus(await owner.put(`/api/v1/nodes/${p.body.id}`, { content: '# Page\n\nThe bandicoot report.\n\n::: secret\nThe wallaby code.\n:::\n' }), 200);
    expect(await found('bandicoot', internal)).toEqual(['lv/page.md']);
    expect(await found('wallaby', internal)).toEqual([]);
    expect(await found('wallaby')).toEqual(['lv/page.md']);
  });
});

describe.each(testEngines())('import rate limit from the environment (%s)', (engine) => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer(engine, { RATE_LIMITS: 'on', RATE_LIMIT_IMPORT_PER_HOUR: '2', RATE_LIMIT_API_BURST: '1000', RATE_LIMIT_API_PER_MIN: '6000' });
  }, 60_000);
  afterAll(async () => s?.stop());

  it('RATE_LIMIT_IMPORT_PER_HOUR=2: the 3rd import is 429, whatever its form', async () => {
    const owner = await signupHuman(s.url, 'Rae');
    for (let i = 0; i < 2; i++) done(await postJson(owner.client, 'rl', [{ path: `p${i}.md`, content: `# P${i}\n` }]));
    expectError(await postJson(owner.client, 'rl', [{ path: 'p2.md', content: '# P2\n' }]), 429, 'rate_limited');
    expectError(await postZip(owner.client, 'rl', buildZip([{ name: 'z.md', data: '# Z\n' }])), 429, 'rate_limited');
  });

  it('six imports sent at once by a fresh principal: exactly two get through', async () => {
    const owner = await signupHuman(s.url, 'Ray');
    const all = await Promise.all(Array.from({ length: 6 }, (_, i) => postJson(owner.client, 'burst', [{ path: `p${i}.md`, content: `# P${i}\n` }])));
    const statuses = all.map((r) => r.status).sort();
    expect(statuses).toEqual([200, 200, 429, 429, 429, 429]);
  });
});

// Silence the unused helper in engines without it.
void crc32;
