import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IMPORT_LIMITS } from '../../src/core/import/limits.js';
import { waitForVectors } from '../support/embeddings-server.js';
import { testEngines } from '../support/engines.js';
import { expectError, expectStatus } from '../support/expect.js';
import { Client, createAgentWithKey, joinAs, signupHuman, startTestServer, type Res, type TestServer } from '../support/server.js';
import { finished, postJson, postMultipart, postZip, reasons, type ImportJob } from '../support/imports.js';
import { buildZip, ENCRYPTED, multipart, type ZipEntry } from '../support/zip.js';

/**
 * `POST /api/v1/import` and `GET /api/v1/import/:id` (issue 16), over HTTP against a started
 * server: the three upload forms, hostile archives (zip-slip, absolute and Windows paths,
 * symlinks, bombs by entry count, declared size and ratio, lying sizes, duplicates, non-UTF-8
 * and non-markdown entries), 49 MB and 51 MB uploads, an import of 10,000 tiny entries run as a
 * background job, who may import and read an import, the 5-per-hour limit, and what an import
 * leaves behind (frontmatter byte for byte, history credited to the importer, search, links,
 * vectors, the audit chain). Counts that follow from the batch size are computed from
 * IMPORT_LIMITS, so a change of the batch size changes the expectations, not the test.
 */

const MiB = 1024 * 1024;
const BATCH = IMPORT_LIMITS.batchFiles;
const enc = encodeURIComponent;

/** Random bytes for the big uploads, made once per file (they do not compress: stored entries the size they say). */
const noise = randomBytes(51 * MiB + 4096);

/** The finished job of a 200 answer, checked for the shape every finished import has. */
function done(res: Res<ImportJob>): ImportJob {
  expectStatus(res, 200);
  const job = res.body;
  expect(job.status, JSON.stringify(job)).toBe('done');
  expect(job.error).toBeNull();
  expect(job.done).toBe(job.total);
  expect(job.id).toMatch(/^im_[0-9a-z]{26}$/);
  expect(job.status_url).toBe(`/api/v1/import/${job.id}`);
  expect(job.finished_at).not.toBeNull();
  return job;
}

/** A page's raw markdown, or the response when it is not there. */
const raw = (c: Client, path: string) => c.get(`/api/v1/nodes/${enc(path)}?format=md`);

/** Every page path of a Space the caller can see (the tree, all levels). */
async function pagePaths(c: Client, space: string): Promise<string[]> {
  const res = await c.get(`/api/v1/spaces/${enc(space)}/tree?depth=10`);
  if (res.status === 404) return [];
  expectStatus(res, 200);
  const out: string[] = [];
  const walk = (f: { pages: { path: string }[]; folders: unknown[] }) => {
    for (const p of f.pages) out.push(p.path);
    for (const sub of f.folders) walk(sub as typeof f);
  };
  walk(res.body.tree);
  return out.sort();
}

/** Pages in every workspace of the server (GET /healthz counts them). */
const pageTotal = async (c: Client) => ((await c.get('/healthz')).body as { nodes: number }).nodes;

describe.each(testEngines())('import over REST (%s)', (engine) => {
  let s: TestServer;
  let owner: Awaited<ReturnType<typeof signupHuman>>;
  let editor: { client: Client; id: string };
  let viewer: { client: Client; id: string };
  let anon: Client;

  /** Import jobs stored (all workspaces): a refused upload must not leave one behind. */
  const jobRows = async () =>
    Number(
      (
        await s.ctx.store.db
          .selectFrom('import_jobs')
          .select((eb) => eb.fn.countAll().as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    );

  /** Asserts that `send` is refused with `status`/`code` and leaves no job and no page behind. */
  async function refusedWithoutTrace(send: () => Promise<Res>, status: number, code: string | readonly string[]): Promise<Res> {
    const jobs = await jobRows();
    const pages = await pageTotal(owner.client);
    const res = await send();
    expectError(res, status, code);
    expect(await jobRows()).toBe(jobs);
    expect(await pageTotal(owner.client)).toBe(pages);
    return res;
  }

  beforeAll(async () => {
    s = await startTestServer(engine);
    owner = await signupHuman(s.url, 'Olga');
    editor = await joinAs(owner.client, owner.workspace.slug, 'editor', 'Eddie');
    viewer = await joinAs(owner.client, owner.workspace.slug, 'viewer', 'Vera');
    anon = new Client(s.url);
  }, 60_000);
  afterAll(async () => s?.stop());

  describe('the three forms', () => {
    const entries: ZipEntry[] = [
      { name: 'guides/setup.md', data: '# Setup\n\nInstall the quokka toolchain.\n' },
      { name: 'guides/', data: '' },
      { name: 'faq.md', data: '# FAQ\n\nQuestions about quokkas.\n' },
    ];
    const paths = (space: string) => [`${space}/faq.md`, `${space}/guides/setup.md`];

    it('a raw application/zip body with ?space= is imported and answered 200 with the finished report', async () => {
      const before = Date.now();
      const job = done(await postZip(owner.client, 'form-raw', buildZip(entries)));
      expect(job).toMatchObject({
        space: 'form-raw',
        total: 2,
        done: 2,
        created: 2,
        updated: 0,
        unchanged: 0,
        skipped: [],
        skipped_count: 0,
        renamed: [],
        renamed_count: 0,
      });
      expect(job.commits).toHaveLength(1);
      expect(job.commits[0]).toMatch(/^[0-9a-f]{40}$/);
      expect(Date.parse(job.created_at)).toBeGreaterThanOrEqual(before - 1000);
      expect(await pagePaths(owner.client, 'form-raw')).toEqual(paths('form-raw'));
      // The Space was created by the import.
      expect((await owner.client.get('/api/v1/spaces')).body.spaces.map((x: { id: string }) => x.id)).toContain('form-raw');
      // GET on the import answers the same record.
      const again = await owner.client.get<ImportJob>(job.status_url);
      expectStatus(again, 200);
      expect(again.body).toEqual(job);
    });

    it('application/x-zip-compressed is taken as a zip too', async () => {
      done(await postZip(owner.client, 'form-xzip', buildZip(entries), { type: 'application/x-zip-compressed' }));
      expect(await pagePaths(owner.client, 'form-xzip')).toEqual(paths('form-xzip'));
    });

    it('multipart with field file and field space (in either order)', async () => {
      const zip = buildZip(entries);
      const a = done(await postMultipart(owner.client, { space: 'form-mp' }, { data: zip }));
      expect(a).toMatchObject({ space: 'form-mp', created: 2 });
      expect(await pagePaths(owner.client, 'form-mp')).toEqual(paths('form-mp'));
      // The space field after the file.
      const mp = multipart({}, { field: 'file', name: 'x.zip', data: zip });
      const tail = Buffer.from(`--${mp.contentType.split('boundary=')[1]}\r\nContent-Disposition: form-data; name="space"\r\n\r\nform-mp2\r\n`);
      const body = Buffer.concat([tail, mp.body]);
      const b = await owner.client.request<ImportJob>('POST', '/api/v1/import', { body, headers: { 'content-type': mp.contentType } });
      expect(done(b).space).toBe('form-mp2');
    });

    it('JSON {space, files[]} is imported, and a body above the ordinary 3 MiB limit is accepted', async () => {
      const job = done(
        await postJson(owner.client, 'form-json', [
          { path: 'guides/setup.md', content: '# Setup\n\nInstall the quokka toolchain.\n' },
          { path: 'faq.md', content: '# FAQ\n\nQuestions about quokkas.\n' },
        ]),
      );
      expect(job).toMatchObject({ space: 'form-json', total: 2, created: 2 });
      expect(await pagePaths(owner.client, 'form-json')).toEqual(paths('form-json'));
      // Four files of 900 KiB: 3.6 MiB of JSON, above every other route's limit.
      const big = Array.from({ length: 4 }, (_, i) => ({ path: `big/p${i}.md`, content: `# Big ${i}\n\n${'lorem ipsum '.repeat(75_000)}\n` }));
      expect(JSON.stringify({ space: 'form-json', files: big }).length).toBeGreaterThan(3 * MiB);
      expect(done(await postJson(owner.client, 'form-json', big)).created).toBe(4);
    });

    it('refuses an upload without a Space, without a file, or in another form', async () => {
      const zip = buildZip(entries);
      await refusedWithoutTrace(() => postZip(owner.client, null, zip), 400, 'invalid_request');
      await refusedWithoutTrace(() => postMultipart(owner.client, {}, { data: zip }), 400, 'invalid_request');
      await refusedWithoutTrace(() => postMultipart(owner.client, { space: 'nofile' }), 400, 'invalid_request');
      await refusedWithoutTrace(() => postMultipart(owner.client, { space: 'wrongfield' }, { data: zip, field: 'archive' }), 400, 'invalid_request');
      await refusedWithoutTrace(() => owner.client.post('/api/v1/import', { space: 'j', files: [{ path: 'a.md' }] }), 400, 'invalid_request');
      await refusedWithoutTrace(() => owner.client.post('/api/v1/import', { files: [] }), 400, 'invalid_request');
      await refusedWithoutTrace(
        () => owner.client.request('POST', '/api/v1/import?space=t', { body: 'a,b\n', headers: { 'content-type': 'text/csv' } }),
        415,
        'unsupported_media_type',
      );
      // A Space name that is no Space name.
      await refusedWithoutTrace(() => postJson(owner.client, '../etc', [{ path: 'a.md', content: '# A\n' }]), 400, 'invalid_path');
      await refusedWithoutTrace(() => postZip(owner.client, 'a/b', buildZip(entries)), 400, 'invalid_path');
    });
  });

  describe('what an import leaves behind', () => {
    // Frontmatter with comments, odd spacing, quoting and key order that a re-serialiser would change.
    const setup =
      '---\n' +
      'title:   "Setup guide"   # kept as written\n' +
      'tags: [ops,  onboarding]\n' +
      'custom:\n' +
      "  nested: { a: 1, b: 'two' }\n" +
      'sensitivity: internal\n' +
      '---\n' +
      '# Setup\n\n' +
      'Install the wombatron first. See [[Glossary]] and [the FAQ](../faq.md).\n';
    const glossary = '# Glossary\n\nTerms used by the wombatron team.\n';
    const faq = '---\ntags: faq\n---\n# FAQ\n\nAsked about the wombatron.\n';
    let job: ImportJob;

    beforeAll(async () => {
      job = done(
        await postZip(
          editor.client,
          'kept',
          buildZip([
            { name: 'guides/setup.md', data: setup },
            { name: 'guides/glossary.md', data: glossary },
            { name: 'faq.md', data: faq },
          ]),
        ),
      );
    });

    it('keeps every file byte for byte, frontmatter included', async () => {
      for (const [path, content] of [
        ['kept/guides/setup.md', setup],
        ['kept/guides/glossary.md', glossary],
        ['kept/faq.md', faq],
      ] as const) {
        const res = await raw(owner.client, path);
        expectStatus(res, 200);
        expect(res.text).toBe(content);
      }
      const page = await owner.client.get(`/api/v1/nodes/${enc('kept/guides/setup.md')}`);
      expect(page.body).toMatchObject({ title: 'Setup guide', tags: ['ops', 'onboarding'], frontmatter: { custom: { nested: { a: 1, b: 'two' } } } });
    });

    it('makes one commit, authored by the importer, shown in each page history', async () => {
      expect(job.commits).toHaveLength(1);
      for (const path of ['kept/guides/setup.md', 'kept/faq.md']) {
        const page = await owner.client.get(`/api/v1/nodes/${enc(path)}`);
        expect(page.body).toMatchObject({ commit_sha: job.commits[0], created_by: editor.id, updated_by: editor.id });
        const history = await owner.client.get(`/api/v1/nodes/${page.body.id}/history`);
        expectStatus(history, 200);
        expect(history.body.versions).toHaveLength(1);
        expect(history.body.versions[0]).toMatchObject({ commit_sha: job.commits[0], action: 'create', principal_id: editor.id, path });
        expect(history.body.versions[0].message).toContain(job.id);
      }
    });

    it('is found by keyword search as soon as the import is answered', async () => {
      const res = await owner.client.get('/api/v1/search?q=wombatron&mode=fts&limit=10');
      expectStatus(res, 200);
      expect(res.body.results.map((r: { path: string }) => r.path).sort()).toEqual(['kept/faq.md', 'kept/guides/glossary.md', 'kept/guides/setup.md']);
    });

    it('resolves links between imported pages (wiki and relative), both ways', async () => {
      for (const target of ['kept/guides/glossary.md', 'kept/faq.md']) {
        const res = await owner.client.get(`/api/v1/nodes/${enc(target)}/backlinks`);
        expectStatus(res, 200);
        expect(res.body.backlinks.map((b: { path: string }) => b.path)).toEqual(['kept/guides/setup.md']);
      }
    });

    it('queues embeddings for every imported page (vector search finds them once the backlog drains)', async () => {
      await waitForVectors(owner.client, 30_000);
      const res = await owner.client.get('/api/v1/search?q=wombatron%20team%20terms&mode=vector&space=kept&limit=3');
      expectStatus(res, 200);
      expect(res.body.mode_used).toBe('vector');
      expect(res.body.results.map((r: { path: string }) => r.path)).toContain('kept/guides/glossary.md');
    });

    it('writes page.create entries, one import.batch per commit and import.done, and the audit chain still verifies', async () => {
      const audit = await owner.client.get('/api/v1/audit?action=import.&limit=500');
      expectStatus(audit, 200);
      const mine = audit.body.items.filter((i: { detail: { import?: string } }) => i.detail?.import === job.id);
      expect(mine.map((i: { action: string }) => i.action)).toEqual(['import.done', 'import.batch']);
      expect(mine[1]).toMatchObject({ actor: { id: editor.id }, detail: { commit: job.commits[0], files: 3, space: 'kept' } });
      expect(mine[0]).toMatchObject({ detail: { created: 3, updated: 0, unchanged: 0, skipped: 0, commits: 1 } });
      const creates = await owner.client.get(`/api/v1/audit?action=page.create&principal=${editor.id}&limit=500`);
      expectStatus(creates, 200);
      const created = creates.body.items.map((i: { target: { path: string } | null }) => i.target?.path);
      expect(created).toEqual(expect.arrayContaining(['kept/guides/setup.md', 'kept/guides/glossary.md', 'kept/faq.md']));
      const verify = await owner.client.get('/api/v1/audit/verify');
      expectStatus(verify, 200);
      expect(verify.body).toMatchObject({ ok: true, first_broken: null });
    });
  });

  describe('pages that exist already', () => {
    it('same content is unchanged, other content is a new version by the importer, a new path is created', async () => {
      const a = await owner.client.post('/api/v1/nodes', { path: 'upd/a.md', content: '# A\n\nSame.\n' });
      const b = await owner.client.post('/api/v1/nodes', { path: 'upd/b.md', content: '# B\n\nOld text.\n' });
      expectStatus(a, 201);
      expectStatus(b, 201);
      const files = [
        { name: 'a.md', data: '# A\n\nSame.\n' },
        { name: 'b.md', data: '# B\n\nNew text from the import.\n' },
        { name: 'c.md', data: '# C\n\nBrand new.\n' },
      ];
      const job = done(await postZip(editor.client, 'upd', buildZip(files)));
      expect(job).toMatchObject({ total: 3, created: 1, updated: 1, unchanged: 1 });
      expect(job.commits).toHaveLength(1);

      // a: untouched, still the owner's commit.
      const pa = await owner.client.get(`/api/v1/nodes/${a.body.id}`);
      expect(pa.body).toMatchObject({ commit_sha: a.body.commit_sha, updated_by: owner.id });
      // b: same id, new content, two versions, the newer one by the editor.
      const pb = await owner.client.get(`/api/v1/nodes/${b.body.id}`);
      expect(pb.body).toMatchObject({ content: '# B\n\nNew text from the import.\n', commit_sha: job.commits[0], created_by: owner.id, updated_by: editor.id });
      const hist = await owner.client.get(`/api/v1/nodes/${b.body.id}/history`);
      expect(hist.body.versions.map((v: { principal_id: string; action: string }) => [v.action, v.principal_id])).toEqual([
        ['update', editor.id],
        ['create', owner.id],
      ]);

      // The same archive again: nothing changes and no commit is made.
      const again = done(await postZip(editor.client, 'upd', buildZip(files)));
      expect(again).toMatchObject({ total: 3, created: 0, updated: 0, unchanged: 3, commits: [] });
      expect((await owner.client.get(`/api/v1/nodes/${b.body.id}/history`)).body.versions).toHaveLength(2);
    });
  });

  describe('hostile entries are skipped with a reason, and nothing reaches outside the Space', () => {
    let job: ImportJob;
    let pagesBefore: number;
    const good = '# Kept\n\nThe first copy.\n';

    beforeAll(async () => {
      pagesBefore = await pageTotal(owner.client);
      const zip = buildZip([
        { name: 'good/kept.md', data: good },
        { name: 'good/', data: '' },
        { name: '../escape.md', data: '# Escape\n' },
        { name: 'good/../../escape2.md', data: '# Escape\n' },
        { name: './dot.md', data: '# Dot\n' },
        { name: 'a//double.md', data: '# Double\n' },
        { name: '/etc/abs.md', data: '# Absolute\n' },
        { name: 'C:/Windows/drive.md', data: '# Drive\n' },
        { name: 'c:relative.md', data: '# Drive relative\n' },
        { name: 'good\\..\\..\\win.md', data: '# Backslash\n' },
        { name: '.hidden.md', data: '# Hidden\n' },
        { name: 'good/.obsidian/workspace.md', data: '# Hidden folder\n' },
        { name: '__MACOSX/good/._kept.md', data: '# Resource fork\n' },
        { name: 'good/photo.png', data: Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0, 0]) },
        { name: 'good/notes.txt', data: 'plain text\n' },
        { name: 'good/link.md', data: '../../../../etc/passwd', mode: 0o120777 },
        { name: 'good/fifo.md', data: '', mode: 0o010644 },
        { name: 'good/dir-as-file.md', data: '', mode: 0o040755 },
        { name: 'good/locked.md', data: '# Locked\n', flags: ENCRYPTED },
        { name: 'good/zstd.md', data: '# Zstd\n', method: 'store', methodId: 93 },
        { name: 'good/latin1.md', data: Buffer.from('# Café au lait\n', 'latin1') },
        { name: 'good/empty.md', data: '' },
        { name: 'good/blank.md', data: ' \n\n\t\n' },
        { name: 'good/nul.md', data: '# Binary\n\u0000\u0001\u0002' },
        { name: 'good/huge.md', data: `# Huge\n\n${'a'.repeat(IMPORT_LIMITS.maxFileBytes)}` },
        // Declares 5 MiB and holds 4 bytes: inflating it would fail the whole archive (sizes differ); it is skipped unread.
        { name: 'good/declared-huge.md', data: Buffer.from([0xde, 0xad, 0xbe, 0xef]), declaredSize: 5 * MiB },
        { name: Buffer.from([...Buffer.from('good/bad-name-'), 0xff, 0xfe, ...Buffer.from('.md')]), data: '# Bad name\n', utf8: true },
        { name: 'good/kept.md', data: '# Kept\n\nThe second copy.\n' },
        { name: 'good/bogus.md', data: '---\nsensitivity: bogus\n---\n# Bogus\n' },
        { name: 'good/broken-yaml.md', data: '---\ntitle: [unclosed\n---\n# Broken\n' },
      ]);
      job = done(await postZip(owner.client, 'hostile', zip));
    });

    it('imports only the one good file, its first copy', async () => {
      // `total` counts what passed the name and byte checks; the two with bad frontmatter fail when written.
      expect(job).toMatchObject({ total: 3, done: 3, created: 1, updated: 0, unchanged: 0 });
      expect(job.commits).toHaveLength(1);
      expect(await pagePaths(owner.client, 'hostile')).toEqual(['hostile/good/kept.md']);
      expect((await raw(owner.client, 'hostile/good/kept.md')).text).toBe(good);
      // One page more in the whole service: nothing was written anywhere else.
      expect(await pageTotal(owner.client)).toBe(pagesBefore + 1);
      const spaces = (await owner.client.get('/api/v1/spaces')).body.spaces.map((x: { id: string }) => x.id);
      for (const s2 of ['etc', 'C:', 'c:relative.md', '__MACOSX', 'good', 'escape.md']) expect(spaces).not.toContain(s2);
      for (const p of ['escape.md', 'hostile/escape.md', 'escape2.md', 'hostile/escape2.md', 'etc/abs.md', 'hostile/etc/abs.md', 'hostile/win.md']) {
        expect((await owner.client.get(`/api/v1/nodes/${enc(p)}`)).status, p).not.toBe(200);
      }
    });

    it('reports every other entry with its reason (folder entries are not files and are not reported)', async () => {
      const r = reasons(job);
      const want: Record<string, RegExp> = {
        '../escape.md': /leaves the archive/,
        'good/../../escape2.md': /leaves the archive/,
        './dot.md': /empty or \. segment/,
        'a//double.md': /empty or \. segment/,
        '/etc/abs.md': /absolute/,
        'C:/Windows/drive.md': /absolute/,
        'c:relative.md': /absolute/,
        'good\\..\\..\\win.md': /backslash/,
        '.hidden.md': /hidden/,
        'good/.obsidian/workspace.md': /hidden/,
        '__MACOSX/good/._kept.md': /hidden or system/,
        'good/photo.png': /not a markdown file/,
        'good/notes.txt': /not a markdown file/,
        'good/link.md': /symbolic link/,
        'good/fifo.md': /not a regular file/,
        'good/dir-as-file.md': /not a regular file/,
        'good/locked.md': /encrypted/,
        'good/zstd.md': /method 93/,
        'good/latin1.md': /UTF-8/,
        'good/empty.md': /empty/,
        'good/blank.md': /empty/,
        'good/nul.md': /NUL/,
        'good/huge.md': /larger than/,
        'good/declared-huge.md': /larger than/,
        'good/kept.md': /duplicate/,
        // Refused when written (the content is judged as any write's): reported under the page path.
        'hostile/good/bogus.md': /frontmatter sensitivity must be one of/,
        'hostile/good/broken-yaml.md': /frontmatter YAML/,
      };
      for (const [path, reason] of Object.entries(want)) expect(r[path], `${path}: ${JSON.stringify(job.skipped)}`).toMatch(reason);
      // The entry whose name is not UTF-8 is reported under a readable name.
      const badName = job.skipped.find((x) => x.path.startsWith('good/bad-name-'));
      expect(badName, JSON.stringify(job.skipped)).toBeDefined();
      expect(badName!.path).toMatch(/not UTF-8/);
      expect(job.skipped).toHaveLength(Object.keys(want).length + 1);
      expect(job.skipped_count).toBe(job.skipped.length);
      expect(job.skipped.some((x) => x.path === 'good/')).toBe(false);
    });

    it('the same names in a JSON import are judged the same way', async () => {
      const res = done(
        await postJson(owner.client, 'hostile-json', [
          { path: 'ok.md', content: '# OK\n' },
          { path: '../escape.md', content: '# Escape\n' },
          { path: '/abs.md', content: '# Abs\n' },
          { path: 'C:/drive.md', content: '# Drive\n' },
          { path: 'a\\b.md', content: '# Backslash\n' },
          { path: '.git/config.md', content: '# Hidden\n' },
          { path: 'script.js', content: 'alert(1)\n' },
          { path: 'empty.md', content: '' },
          { path: 'nul.md', content: '# A\u0000' },
          { path: 'ok.md', content: '# Second\n' },
        ]),
      );
      expect(res).toMatchObject({ total: 1, created: 1, skipped_count: 9 });
      const r = reasons(res);
      expect(r).toMatchObject({
        '../escape.md': expect.stringMatching(/leaves/),
        '/abs.md': expect.stringMatching(/absolute/),
        'C:/drive.md': expect.stringMatching(/absolute/),
        'a\\b.md': expect.stringMatching(/backslash/),
        '.git/config.md': expect.stringMatching(/hidden/),
        'script.js': expect.stringMatching(/markdown/),
        'empty.md': expect.stringMatching(/empty/),
        'nul.md': expect.stringMatching(/NUL/),
        'ok.md': expect.stringMatching(/duplicate/),
      });
      expect(await pagePaths(owner.client, 'hostile-json')).toEqual(['hostile-json/ok.md']);
      expect((await raw(owner.client, 'hostile-json/ok.md')).text).toBe('# OK\n');
    });
  });

  describe('names are made page paths and reported as renamed', () => {
    it('spaces become -, .markdown and .MD become .md, and two names that become one path keep the first', async () => {
      const job = done(
        await postZip(
          owner.client,
          'renamed',
          buildZip([
            { name: 'Meeting notes/First meeting.md', data: '# First meeting\n' },
            { name: 'notes.markdown', data: '# Notes\n' },
            { name: 'README.MD', data: '# Readme\n' },
            { name: 'Two words.md', data: '# Two words (first)\n' },
            { name: 'Two-words.md', data: '# Two words (second)\n' },
            { name: 'plain.md', data: '# Plain\n' },
          ]),
        ),
      );
      expect(job).toMatchObject({ total: 5, created: 5, renamed_count: 4, skipped_count: 1 });
      expect(job.renamed).toEqual(
        expect.arrayContaining([
          { path: 'Meeting notes/First meeting.md', imported_as: 'renamed/Meeting-notes/First-meeting.md' },
          { path: 'notes.markdown', imported_as: 'renamed/notes.md' },
          { path: 'README.MD', imported_as: 'renamed/README.md' },
          { path: 'Two words.md', imported_as: 'renamed/Two-words.md' },
        ]),
      );
      expect(job.skipped).toEqual([{ path: 'Two-words.md', reason: expect.stringMatching(/becomes renamed\/Two-words\.md, as Two words\.md does/) }]);
      expect(await pagePaths(owner.client, 'renamed')).toEqual([
        'renamed/Meeting-notes/First-meeting.md',
        'renamed/README.md',
        'renamed/Two-words.md',
        'renamed/notes.md',
        'renamed/plain.md',
      ]);
      expect((await raw(owner.client, 'renamed/Two-words.md')).text).toBe('# Two words (first)\n');
    });
  });

  describe('archives refused whole', () => {
    it('more than 20,000 entries: 400 archive_refused; exactly 20,000 are read (all skipped here, the report lists the first 1,000)', async () => {
      const many = (n: number) => buildZip(Array.from({ length: n }, (_, i) => ({ name: `n/${i}.txt`, method: 'store' as const })));
      const over = many(IMPORT_LIMITS.maxEntries + 1);
      const res = await refusedWithoutTrace(() => postZip(owner.client, 'bomb-count', over), 400, 'archive_refused');
      expect(res.body.error.message).toMatch(/entries/);
      const at = done(await postZip(owner.client, 'bomb-count', many(IMPORT_LIMITS.maxEntries)));
      expect(at).toMatchObject({ total: 0, created: 0, commits: [], skipped_count: IMPORT_LIMITS.maxEntries });
      expect(at.skipped).toHaveLength(IMPORT_LIMITS.maxReported);
    });

    it('more than 256 MiB declared unpacked, in one entry or in several: 400 archive_refused', async () => {
      const one = buildZip([
        { name: 'ok.md', data: '# OK\n' },
        { name: 'movie.bin', data: 'x', declaredSize: IMPORT_LIMITS.maxUnpackedBytes + 1 },
      ]);
      await refusedWithoutTrace(() => postZip(owner.client, 'bomb-size', one), 400, 'archive_refused');
      const several = buildZip(Array.from({ length: 3 }, (_, i) => ({ name: `part${i}.bin`, data: 'x', declaredSize: 100 * MiB })));
      const res = await refusedWithoutTrace(() => postMultipart(owner.client, { space: 'bomb-size' }, { data: several }), 400, 'archive_refused');
      expect(res.body.error.message).toMatch(/unpacks to/);
    });

    it('a real zip bomb (17 MiB of zeros in a few KiB) is refused by its ratio; below 16 MiB the same ratio passes', async () => {
      const bomb = buildZip([
        { name: 'ok.md', data: '# OK\n' },
        { name: 'zeros.md', data: Buffer.alloc(IMPORT_LIMITS.ratioFloorBytes + MiB) },
      ]);
      expect(bomb.length * IMPORT_LIMITS.maxRatio).toBeLessThan(IMPORT_LIMITS.ratioFloorBytes);
      const res = await refusedWithoutTrace(() => postZip(owner.client, 'bomb-ratio', bomb), 400, 'archive_refused');
      expect(res.body.error.message).toMatch(/times its size/);
      // 15 MiB of zeros, as compressible, under the floor: read; the big entry is skipped unread.
      const small = buildZip([
        { name: 'ok.md', data: '# OK\n' },
        { name: 'zeros.md', data: Buffer.alloc(IMPORT_LIMITS.ratioFloorBytes - MiB) },
      ]);
      const job = done(await postZip(owner.client, 'bomb-ratio', small));
      expect(job).toMatchObject({ created: 1, skipped: [{ path: 'zeros.md', reason: expect.stringMatching(/larger than/) }] });
    });

    it('not a zip, a truncated zip, an empty body: 400 invalid_archive', async () => {
      await refusedWithoutTrace(() => postZip(owner.client, 'nozip', Buffer.from('# just markdown\n')), 400, 'invalid_archive');
      await refusedWithoutTrace(
        () => postMultipart(owner.client, { space: 'nozip' }, { data: Buffer.from('hello'), name: 'a.md', type: 'text/markdown' }),
        400,
        'invalid_archive',
      );
      const zip = buildZip([{ name: 'a.md', data: '# A\n' }]);
      await refusedWithoutTrace(() => postZip(owner.client, 'nozip', zip.subarray(0, zip.length - 10)), 400, 'invalid_archive');
      await refusedWithoutTrace(() => postZip(owner.client, 'nozip', Buffer.alloc(0)), 400, 'invalid_archive');
    });

    it('an entry whose data is longer than its declared size: 400 invalid_archive, and the entries before it are not imported either', async () => {
      const liar = buildZip([
        { name: 'first.md', data: '# First\n' },
        { name: 'liar.md', data: `# Liar\n\n${'b'.repeat(2 * MiB)}`, declaredSize: 100 },
        { name: 'last.md', data: '# Last\n' },
      ]);
      await refusedWithoutTrace(() => postZip(owner.client, 'liar', liar), 400, 'invalid_archive');
      expectError(await owner.client.get(`/api/v1/nodes/${enc('liar/first.md')}`), 404, 'not_found');
    });
  });

  describe('upload size', () => {
    const withNoise = (bytes: number) =>
      buildZip([
        { name: 'big/readme.md', data: '# Big upload\n\nA readme beside a large binary.\n' },
        { name: 'big/video.bin', data: noise.subarray(0, bytes), method: 'store' },
      ]);

    it('a 49 MB archive (raw and multipart) is imported; its large non-markdown entry is skipped', async () => {
      const zip = withNoise(49 * MiB);
      expect(zip.length).toBeGreaterThan(49 * MiB);
      expect(zip.length).toBeLessThan(IMPORT_LIMITS.maxUploadBytes);
      const a = done(await postZip(owner.client, 'size49', zip));
      expect(a).toMatchObject({ created: 1, skipped: [{ path: 'big/video.bin', reason: expect.stringMatching(/not a markdown/) }] });
      const b = done(await postMultipart(owner.client, { space: 'size49mp' }, { data: zip }));
      expect(b).toMatchObject({ created: 1 });
      expect(await pagePaths(owner.client, 'size49mp')).toEqual(['size49mp/big/readme.md']);
    });

    it('a 51 MB upload is 413 payload_too_large, raw, multipart and JSON, and no job is created', async () => {
      const zip = withNoise(51 * MiB);
      expect(zip.length).toBeGreaterThan(IMPORT_LIMITS.maxUploadBytes);
      await refusedWithoutTrace(() => postZip(owner.client, 'size51', zip), 413, 'payload_too_large');
      await refusedWithoutTrace(() => postMultipart(owner.client, { space: 'size51' }, { data: zip }), 413, 'payload_too_large');
      const content = `# Big\n\n${'z'.repeat(51 * MiB)}`;
      await refusedWithoutTrace(() => postJson(owner.client, 'size51', [{ path: 'big.md', content }]), 413, 'payload_too_large');
      expect(await pagePaths(owner.client, 'size51')).toEqual([]);
    });
  });

  describe('large imports run as a job', () => {
    it(`${BATCH} files are answered finished (200); ${BATCH + 1} are answered 202 and finish in the background, one commit per batch`, async () => {
      const files = (n: number) => Array.from({ length: n }, (_, i) => ({ path: `f/p${i}.md`, content: `# P${i}\n` }));
      const one = done(await postJson(owner.client, 'batch-edge', files(BATCH)));
      expect(one).toMatchObject({ total: BATCH, created: BATCH });
      expect(one.commits).toHaveLength(1);
      const res = await postJson(owner.client, 'batch-over', files(BATCH + 1));
      expectStatus(res, 202);
      expect(res.body.total).toBe(BATCH + 1);
      const job = await finished(owner.client, res.body);
      expect(job).toMatchObject({ status: 'done', total: BATCH + 1, done: BATCH + 1, created: BATCH + 1, error: null });
      expect(job.commits).toHaveLength(2);
    });

    it('10,000 tiny entries: 202 at once, progress while it runs, then every page is there', async () => {
      const n = 10_000;
      const expected = Array.from({ length: n }, (_, i) => `tiny/d${i % 10}/p${i}.md`).sort();
      const zip = buildZip(Array.from({ length: n }, (_, i) => ({ name: `d${i % 10}/p${i}.md`, data: `# Tiny ${i}\n\nnumbat${i}\n` })));
      const res = await postZip(owner.client, 'tiny', zip);
      expectStatus(res, 202);
      expect(res.body).toMatchObject({ space: 'tiny', total: n, error: null, status_url: `/api/v1/import/${res.body.id}` });
      expect(['queued', 'running', 'done']).toContain(res.body.status);
      // Someone else's import does not exist for an editor, running or not.
      expectError(await editor.client.get(res.body.status_url), 404, 'not_found');
      // The service answers while the job runs (a job yields between batches, on SQLite too).
      const early = await owner.client.get<ImportJob>(res.body.status_url);
      expectStatus(early, 200);
      expect(early.body.done, 'the job ran to its end before the service answered anyone').toBeLessThan(n);
      // Progress only grows.
      let last = early.body.done;
      let cur = early.body;
      while (cur.status !== 'done' && cur.status !== 'failed') {
        await new Promise((r) => setTimeout(r, 100));
        cur = (await owner.client.get<ImportJob>(res.body.status_url)).body;
        expect(cur.done).toBeGreaterThanOrEqual(last);
        expect(cur.done).toBeLessThanOrEqual(n);
        last = cur.done;
      }
      expect(cur).toMatchObject({ status: 'done', total: n, done: n, created: n, updated: 0, unchanged: 0, skipped_count: 0, error: null });
      expect(cur.commits).toHaveLength(Math.ceil(n / BATCH));
      expect(new Set(cur.commits).size).toBe(cur.commits.length);
      expect(Date.parse(cur.finished_at!)).toBeGreaterThanOrEqual(Date.parse(cur.started_at!));
      expect(await pagePaths(owner.client, 'tiny')).toEqual(expected);
      const found = await owner.client.get('/api/v1/search?q=numbat9999&mode=fts');
      expect(found.body.results.map((r: { path: string }) => r.path)).toEqual(['tiny/d9/p9999.md']);
      // One import.batch per commit.
      const audit = await owner.client.get('/api/v1/audit?action=import.batch&limit=500');
      const batches = audit.body.items.filter((i: { detail: { import?: string } }) => i.detail.import === cur.id);
      expect(batches.map((b: { detail: { commit: string } }) => b.detail.commit).reverse()).toEqual(cur.commits);
    }, 180_000);
  });

  describe('who may import, and who may see an import', () => {
    const one = () => buildZip([{ name: 'a.md', data: '# A\n' }]);

    it('a viewer is refused (403), an editor and an owner import', async () => {
      await refusedWithoutTrace(() => postZip(viewer.client, 'who', one()), 403, 'forbidden');
      await refusedWithoutTrace(() => postJson(viewer.client, 'who', [{ path: 'a.md', content: '# A\n' }]), 403, 'forbidden');
      expect(done(await postZip(editor.client, 'who-editor', one())).created).toBe(1);
      expect(done(await postZip(owner.client, 'who-owner', one())).created).toBe(1);
    });

    it("an editor's files above the editor's ceiling, or over a page holding content it cannot see, are skipped", async () => {
      const guarded = await owner.client.post('/api/v1/nodes', { path: 'ceiling/guarded.md', content: '# Guarded\n\n::: secret\nThe vault code.\n:::\n' });
      expectStatus(guarded, 201);
      const job = done(
        await postZip(
          editor.client,
          'ceiling',
          buildZip([
            { name: 'ok.md', data: '---\nsensitivity: confidential\n---\n# Confidential is fine\n' },
            { name: 'secret.md', data: '---\nsensitivity: secret\n---\n# Too high\n' },
            { name: 'guarded.md', data: '# Guarded\n\nOverwritten by an import.\n' },
          ]),
        ),
      );
      expect(job).toMatchObject({ total: 3, created: 1, updated: 0 });
      expect(Object.keys(reasons(job)).sort()).toEqual(['ceiling/guarded.md', 'ceiling/secret.md']);
      expect((await owner.client.get(`/api/v1/nodes/${guarded.body.id}`)).body).toMatchObject({ commit_sha: guarded.body.commit_sha });
      expect(await pagePaths(owner.client, 'ceiling')).toEqual(['ceiling/guarded.md', 'ceiling/ok.md']);
    });

    it('no credential is 401, a session without the CSRF header is 403 csrf_failed', async () => {
      await refusedWithoutTrace(() => postZip(anon, 'who', one()), 401, 'unauthorized');
      await refusedWithoutTrace(
        () => owner.client.request('POST', '/api/v1/import?space=who', { body: one(), headers: { 'content-type': 'application/zip' }, csrf: false }),
        403,
        'csrf_failed',
      );
      const mp = multipart({ space: 'who' }, { field: 'file', name: 'a.zip', data: one() });
      await refusedWithoutTrace(
        () => owner.client.request('POST', '/api/v1/import', { body: mp.body, headers: { 'content-type': mp.contentType }, csrf: false }),
        403,
        'csrf_failed',
      );
    });

    it('an agent without a write grant over the Space is refused; one with write on a folder imports that folder only', async () => {
      const reader = await createAgentWithKey(owner.client, [{ action: 'read' }, { action: 'propose' }, { action: 'search' }]);
      await refusedWithoutTrace(() => postZip(reader.client, 'team', one()), 403, 'forbidden');
      const elsewhere = await createAgentWithKey(owner.client, [{ action: 'write', scope: 'other' }]);
      await refusedWithoutTrace(() => postZip(elsewhere.client, 'team', one()), 403, 'forbidden');

      const folder = await createAgentWithKey(
        owner.client,
        [
          { action: 'write', scope: 'team/eng', ceiling: 'internal' },
          { action: 'read', scope: 'team', ceiling: 'internal' },
        ],
        {
          ceiling: 'internal',
        },
      );
      const job = done(
        await postZip(
          folder.client,
          'team',
          buildZip([
            { name: 'eng/a.md', data: '# Eng A\n' },
            { name: 'eng/deep/b.md', data: '# Eng B\n' },
            { name: 'ops/c.md', data: '# Ops C\n' },
            { name: 'root.md', data: '# Root\n' },
            { name: 'eng/conf.md', data: '---\nsensitivity: confidential\n---\n# Confidential\n' },
          ]),
        ),
      );
      expect(job).toMatchObject({ created: 2, total: 5 });
      expect(Object.keys(reasons(job)).sort()).toEqual(['team/eng/conf.md', 'team/ops/c.md', 'team/root.md']);
      expect(await pagePaths(owner.client, 'team')).toEqual(['team/eng/a.md', 'team/eng/deep/b.md']);
      // The agent reads its own import; the owner sees it too; the editor does not.
      expectStatus(await folder.client.get(job.status_url), 200);
      expectStatus(await owner.client.get(job.status_url), 200);
      expectError(await editor.client.get(job.status_url), 404, 'not_found');
      // Revoked, the key reads nothing, its import included.
      expectStatus(await owner.client.delete(`/api/v1/principals/${folder.id}/tokens/${folder.keyId}`), 200);
      expectError(await folder.client.get(job.status_url), 401, 'invalid_token');
    });

    it("an import is seen by its importer and the workspace's owners only; to anyone else it does not exist", async () => {
      const mine = done(await postZip(editor.client, 'seen', one()));
      expectStatus(await editor.client.get(mine.status_url), 200);
      expectStatus(await owner.client.get(mine.status_url), 200);
      expectError(await viewer.client.get(mine.status_url), 404, 'not_found');
      const owners = done(await postZip(owner.client, 'seen2', one()));
      expectError(await editor.client.get(owners.status_url), 404, 'not_found');
      // The owner of another workspace, and an unknown id.
      const stranger = await signupHuman(s.url, 'Stella');
      expectError(await stranger.client.get(mine.status_url), 404, 'not_found');
      expectError(await owner.client.get('/api/v1/import/im_00000000000000000000000000'), 404, 'not_found');
      expectError(await anon.get(mine.status_url), 401, 'unauthorized');
      // The stranger's own import is invisible to this workspace's owner.
      const theirs = done(await postZip(stranger.client, 'theirs', one()));
      expectError(await owner.client.get(theirs.status_url), 404, 'not_found');
    });
  });
});

describe.each(testEngines())('import rate limit (%s)', (engine) => {
  let s: TestServer;
  beforeAll(async () => {
    // Limits on, as in production; the general API bucket wide enough not to interfere.
    s = await startTestServer(engine, { RATE_LIMITS: 'on', RATE_LIMIT_API_BURST: '1000', RATE_LIMIT_API_PER_MIN: '6000' });
  }, 60_000);
  afterAll(async () => s?.stop());

  it('5 imports an hour per principal: the 6th is 429 rate_limited with Retry-After; another member still imports', async () => {
    const owner = await signupHuman(s.url, 'Rita');
    const editor = await joinAs(owner.client, owner.workspace.slug, 'editor', 'Ravi');
    const jobs: ImportJob[] = [];
    for (let i = 0; i < 5; i++) jobs.push(done(await postJson(owner.client, 'rl', [{ path: `p${i}.md`, content: `# P${i}\n` }])));
    const sixth = await postJson(owner.client, 'rl', [{ path: 'p5.md', content: '# P5\n' }]);
    expectError(sixth, 429, 'rate_limited');
    const retry = Number(sixth.headers.get('retry-after'));
    expect(retry).toBeGreaterThan(60);
    expect(retry).toBeLessThanOrEqual(3600);
    expect(sixth.text).toMatch(/5 per hour/);
    expectError(await owner.client.get(`/api/v1/nodes/${enc('rl/p5.md')}`), 404, 'not_found');
    // Reading an import is not an import.
    expectStatus(await owner.client.get(jobs[0]!.status_url), 200);
    done(await postJson(editor.client, 'rl', [{ path: 'e.md', content: '# E\n' }]));
  });
});
