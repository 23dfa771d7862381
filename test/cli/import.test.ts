import { spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exited, spawnService } from '../support/service-process.js';
import { Client } from '../support/server.js';
import { buildZip } from '../support/zip.js';
import { cli, CONTROL, oneCleanLine } from './support.js';

/**
 * `context-vault import` (issue 16) as a child process through the bin entry, against one
 * SQLite deployment that a running service (its own process) serves at the same time: a folder
 * with a nested folder, a symbolic link (reported, never followed) and a non-markdown file; a
 * zip; the --json report; exit codes; and what a person then sees over HTTP (the pages, credited
 * to the workspace's owner, and `operator.import` in the audit log).
 */
const PASSWORD = 'correct horse battery';
const enc = encodeURIComponent;

describe('context-vault import (sqlite, service running)', { timeout: 120_000 }, () => {
  let dataDir: string;
  let work: string;
  let env: Record<string, string>;
  let svc: { child: ChildProcess; url: string };
  let owner: Client;
  let ownerId: string;
  const email = 'ida@example.com';
  let slug: string;

  beforeAll(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-cli-import-'));
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-cli-import-src-'));
    env = { DATA_DIR: dataDir, OPERATOR: 'test-operator' };
    const r = await cli(['create-owner', '--email', email, '--name', 'Ida', '--password-stdin', '--json'], { env, input: `${PASSWORD}\n` });
    expect(r.code, `${r.stderr}\n${r.stdout}`).toBe(0);
    slug = JSON.parse(r.stdout).workspace.slug;
    svc = await spawnService(env);
    owner = new Client(svc.url);
    const l = await owner.post('/api/auth/login', { email, password: PASSWORD });
    expect(l.status, l.text).toBe(200);
    const me = await owner.get('/api/v1/me');
    ownerId = me.body.id ?? me.body.principal?.id;
    expect(ownerId).toBeTruthy();
  }, 60_000);

  afterAll(async () => {
    if (svc) {
      svc.child.kill('SIGTERM');
      await exited(svc.child);
    }
    fs.rmSync(dataDir, { recursive: true, force: true });
    fs.rmSync(work, { recursive: true, force: true });
  });

  const raw = (p: string) => owner.get(`/api/v1/nodes/${enc(p)}?format=md`);

  it('imports a folder (nested folders kept), skips a symlink without following it and a non-markdown file; --json report; exit 0', async () => {
    const src = path.join(work, 'handbook');
    fs.mkdirSync(path.join(src, 'guides', 'deep'), { recursive: true });
    fs.writeFileSync(path.join(src, 'intro.md'), '# Intro\n\nWelcome to the numbat handbook.\n');
    fs.writeFileSync(path.join(src, 'guides', 'setup.md'), '---\ntitle: Setup\ntags: [ops]\n---\n# Setup\n\nSee [[Intro]].\n');
    fs.writeFileSync(path.join(src, 'guides', 'deep', 'nested.markdown'), '# Nested\n\nDeep numbat notes.\n');
    fs.writeFileSync(path.join(src, 'logo.png'), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0, 0, 0]));
    // Links that point outside the folder: a file and a folder holding markdown.
    const outside = path.join(work, 'outside');
    fs.mkdirSync(outside);
    fs.writeFileSync(path.join(outside, 'passwords.md'), '# Passwords\n\nhunter2-outside-the-folder\n');
    fs.symlinkSync(path.join(outside, 'passwords.md'), path.join(src, 'linked.md'));
    fs.symlinkSync(outside, path.join(src, 'linked-dir'));
    // A named pipe called like a page: reading it would hang the command.
    expect(spawnSync('mkfifo', [path.join(src, 'pipe.md')]).status).toBe(0);
    // An editor's hidden folder (Obsidian, git) is not content.
    fs.mkdirSync(path.join(src, '.obsidian'));
    fs.writeFileSync(path.join(src, '.obsidian', 'workspace.md'), '# Editor state\n');

    const r = await cli(['import', '--workspace', slug, '--space', 'handbook', '--from', src, '--json'], { env, timeoutMs: 90_000 });
    expect(r.code, `${r.stderr}\n${r.stdout}`).toBe(0);
    expect(CONTROL.test(r.stdout)).toBe(false);
    const out = JSON.parse(r.stdout);
    expect(out).toMatchObject({ status: 'done', space: 'handbook', total: 3, created: 3, updated: 0, unchanged: 0, error: null });
    expect(out.id).toMatch(/^im_/);
    expect(out.commits).toHaveLength(1);
    const skipped = Object.fromEntries((out.skipped as { path: string; reason: string }[]).map((s) => [s.path, s.reason]));
    expect(Object.keys(skipped).sort()).toEqual(['linked-dir', 'linked.md', 'logo.png', 'pipe.md']);
    expect(skipped['pipe.md']).toMatch(/not a regular file/);
    expect(skipped['linked.md']).toMatch(/symbolic link/);
    expect(skipped['linked-dir']).toMatch(/symbolic link/);
    expect(skipped['logo.png']).toMatch(/not a markdown file/);
    expect(out.skipped_count).toBe(4);
    expect(out.renamed).toEqual([{ path: 'guides/deep/nested.markdown', imported_as: 'handbook/guides/deep/nested.md' }]);

    // Over HTTP: the pages, byte for byte, credited to the workspace's owner.
    const intro = await raw('handbook/intro.md');
    expect(intro.status).toBe(200);
    expect(intro.text).toBe('# Intro\n\nWelcome to the numbat handbook.\n');
    expect((await raw('handbook/guides/deep/nested.md')).text).toBe('# Nested\n\nDeep numbat notes.\n');
    const setup = await owner.get(`/api/v1/nodes/${enc('handbook/guides/setup.md')}`);
    expect(setup.status).toBe(200);
    expect(setup.body).toMatchObject({ title: 'Setup', tags: ['ops'], created_by: ownerId, updated_by: ownerId, commit_sha: out.commits[0] });
    const history = await owner.get(`/api/v1/nodes/${setup.body.id}/history`);
    expect(history.body.versions[0]).toMatchObject({ principal_id: ownerId, action: 'create' });
    expect(history.body.versions[0].message).toContain(out.id);
    // Nothing of what the links point at came in.
    expect((await raw('handbook/linked.md')).status).toBe(404);
    expect((await raw('handbook/linked-dir/passwords.md')).status).toBe(404);
    expect((await raw('handbook/.obsidian/workspace.md')).status).toBe(404);
    const found = await owner.get('/api/v1/search?q=hunter2&mode=fts');
    expect(found.status).toBe(200);
    expect(found.body.results).toEqual([]);
    // The running service searches what the command wrote.
    const numbat = await owner.get('/api/v1/search?q=numbat&mode=fts');
    expect(numbat.body.results.map((x: { path: string }) => x.path).sort()).toEqual(['handbook/guides/deep/nested.md', 'handbook/intro.md']);
    // Links resolved between imported pages.
    const back = await owner.get(`/api/v1/nodes/${enc('handbook/intro.md')}/backlinks`);
    expect(back.body.backlinks.map((b: { path: string }) => b.path)).toEqual(['handbook/guides/setup.md']);

    // The audit log names the operator's import, and the pages as the owner's.
    const audit = await owner.get('/api/v1/audit?action=operator.import');
    expect(audit.status, audit.text).toBe(200);
    expect(audit.body.items[0]).toMatchObject({
      action: 'operator.import',
      detail: { import: out.id, space: 'handbook', source: 'handbook', operator: 'test-operator' },
    });
    const creates = await owner.get(`/api/v1/audit?action=page.create&principal=${ownerId}&limit=50`);
    expect(creates.body.items.map((i: { target: { path: string } | null }) => i.target?.path)).toEqual(
      expect.arrayContaining(['handbook/intro.md', 'handbook/guides/setup.md', 'handbook/guides/deep/nested.md']),
    );
    const verify = await owner.get('/api/v1/audit/verify');
    expect(verify.body).toMatchObject({ ok: true });

    // The same folder again: nothing changes, every file is unchanged, no commit.
    const again = await cli(['import', '--workspace', slug, '--space', 'handbook', '--from', src, '--json'], { env, timeoutMs: 90_000 });
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ status: 'done', created: 0, updated: 0, unchanged: 3, commits: [] });
  }, 120_000);

  it('imports a zip; without --json it prints a one-line summary and the skipped files', async () => {
    const zipPath = path.join(work, 'export.zip');
    fs.writeFileSync(
      zipPath,
      buildZip([
        { name: 'runbooks/', data: '' },
        { name: 'runbooks/deploy.md', data: '# Deploy\n\nShip the bilby service.\n' },
        { name: '../escape.md', data: '# Escape\n' },
        { name: 'notes.txt', data: 'plain text' },
      ]),
    );
    const r = await cli(['import', '--workspace', slug, '--space', 'ops', '--from', zipPath], { env, timeoutMs: 90_000 });
    expect(r.code, `${r.stderr}\n${r.stdout}`).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^import im_[0-9a-z]+ into ${slug}/ops: done; 1 created, 0 updated, 0 unchanged, 2 skipped, 1 commit\\(s\\)\n`));
    expect(r.stdout).toContain('skipped ../escape.md: unsafe name');
    expect(r.stdout).toContain('skipped notes.txt: not a markdown file');
    expect(CONTROL.test(r.stdout + r.stderr)).toBe(false);
    const page = await raw('ops/runbooks/deploy.md');
    expect(page.status).toBe(200);
    expect(page.text).toBe('# Deploy\n\nShip the bilby service.\n');
    expect((await raw('escape.md')).status).toBe(404);
    expect((await raw('ops/escape.md')).status).toBe(404);
  }, 120_000);

  it('exit 2 with one clean line: unknown workspace, missing source, missing flags, a Space with a slash, a zip over 50 MiB, not a zip', async () => {
    const folder = path.join(work, 'small');
    fs.mkdirSync(folder);
    fs.writeFileSync(path.join(folder, 'a.md'), '# A\n');
    const big = path.join(work, 'big.zip');
    // Sparse: 51 MiB on paper, refused by its size before it is read.
    fs.closeSync(fs.openSync(big, 'w'));
    fs.truncateSync(big, 51 * 1024 * 1024);
    // More markdown files than an import takes: refused before anything is stored.
    const crowd = path.join(work, 'crowd');
    fs.mkdirSync(crowd);
    for (let i = 0; i <= 20_000; i++) fs.writeFileSync(path.join(crowd, `p${i}.md`), '# P\n');
    const notZip = path.join(work, 'not.zip');
    fs.writeFileSync(notZip, 'this is not an archive');

    for (const [args, message] of [
      [['--workspace', 'no-such-ws', '--space', 'x', '--from', folder], 'no-such-ws'],
      [['--workspace', slug, '--space', 'x', '--from', path.join(work, 'missing')], 'no such file or folder'],
      [['--workspace', slug, '--from', folder], '--space is required'],
      [['--space', 'x', '--from', folder], '--workspace is required'],
      [['--workspace', slug, '--space', 'x'], '--from is required'],
      [['--workspace', slug, '--space', 'a/b', '--from', folder], 'without "/"'],
      [['--workspace', slug, '--space', '..', '--from', folder], 'context-vault import: '],
      [['--workspace', slug, '--space', 'x', '--from', big], 'larger than'],
      [['--workspace', slug, '--space', 'x', '--from', notZip], 'not a zip'],
      [['--workspace', slug, '--space', 'x', '--from', crowd], 'more than 20000'],
    ] as const) {
      const bad = await cli(['import', ...args], { env });
      expect(bad.code, `${args.join(' ')}: ${bad.stderr}`).toBe(2);
      expect(bad.stderr).toContain(message);
      expect(oneCleanLine(bad.stderr), bad.stderr).toBe(true);
      expect(bad.stdout).toBe('');
    }
    // None of them wrote anything.
    expect((await raw('x/a.md')).status).toBe(404);
    const jobs = await owner.get('/api/v1/audit?action=operator.import');
    expect(jobs.body.items.map((i: { detail: { source: string } }) => i.detail.source)).toEqual(['export.zip', 'handbook', 'handbook']);
  }, 120_000);
});
