import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEngines } from '../support/engines.js';
import { signupHuman } from '../support/server.js';
import { commitAll, enc, gitUrl, head, log, mintGitToken, said, setupGitWorld, writeFile, type GitResult, type GitWorld } from './support.js';

/** Issue 15: git push turns commits into page writes, keeping the commit ids; refusals change nothing. */

/** git refused the push and printed `needle` on a `remote:` line (case-insensitive). */
function expectRemoteRefusal(r: GitResult, needle: string): void {
  const out = said(r);
  expect(r.code, out).not.toBe(0);
  const lines = out.split('\n').filter((l) => l.startsWith('remote:'));
  expect(
    lines.some((l) => l.toLowerCase().includes(needle.toLowerCase())),
    `expected a "remote:" line naming ${needle}; git said:\n${out}`,
  ).toBe(true);
}

describe.each(testEngines())('git push (%s)', (engine) => {
  let w: GitWorld;
  beforeAll(async () => {
    w = await setupGitWorld(engine);
    // Pushes land on a workspace that already has history from REST.
    await w.page('eng/base/start.md', '# Start\n');
  });
  afterAll(async () => w?.stop());

  const push = (dir: string, ...args: string[]) => w.g.git(['push', ...args], { cwd: dir });

  describe('accepted pushes', () => {
    it('new pages from two commits: REST shows them with the pushed commit ids, the pusher and the messages', async () => {
      const dir = await w.clone();
      writeFile(dir, 'eng/pushed/kilo.md', '# Kilo\n\nFirst version.\n');
      const c1 = await commitAll(w.g, dir, 'Add kilo');
      writeFile(dir, 'eng/pushed/kilo.md', '# Kilo\n\nSecond version.\n');
      writeFile(dir, 'eng/pushed/lima.md', '---\ntitle: Lima\ntags: [pushed]\nsensitivity: confidential\n---\n# Lima\n\nThe xylophonic anteater.\n');
      const c2 = await commitAll(w.g, dir, 'Edit kilo, add lima');
      const r = await push(dir, 'origin', 'main');
      expect(r.code, said(r)).toBe(0);

      expect(await w.remoteHead()).toBe(c2);
      const kilo = await w.read('eng/pushed/kilo.md');
      expect(kilo.status).toBe(200);
      expect(kilo.body).toMatchObject({ content: '# Kilo\n\nSecond version.\n', commit_sha: c2 });
      const hist = await w.owner.get(`/api/v1/nodes/${kilo.body.id}/history`);
      expect(hist.body.versions.map((v: any) => [v.commit_sha, v.action, v.message])).toEqual([
        [c2, 'update', 'Edit kilo, add lima'],
        [c1, 'create', 'Add kilo'],
      ]);
      expect(hist.body.versions.map((v: any) => v.principal_id)).toEqual([w.ownerId, w.ownerId]);
      const lima = await w.read('eng/pushed/lima.md');
      expect(lima.body).toMatchObject({ commit_sha: c2, title: 'Lima', tags: ['pushed'], sensitivity: 'confidential' });
      expect(lima.body.id).toMatch(/^pg_/);
    });

    it('the first push into an empty workspace creates its history', async () => {
      const h = await signupHuman(w.s.url, 'Fresh');
      const t = await mintGitToken(h.client);
      const dir = w.g.path('first');
      await w.g.ok(['clone', '-q', gitUrl(w.s.url, h.workspace.slug, t.token), dir]);
      writeFile(dir, 'notes/day/one.md', '# Day one\n');
      const sha = await commitAll(w.g, dir, 'First page');
      const r = await push(dir, 'origin', 'main');
      expect(r.code, said(r)).toBe(0);
      const page = await h.client.get(`/api/v1/nodes/${enc('notes/day/one.md')}`);
      expect(page.body).toMatchObject({ content: '# Day one\n', commit_sha: sha });
      const fresh = w.g.path('first-fresh');
      await w.g.ok(['clone', '-q', gitUrl(w.s.url, h.workspace.slug, t.token), fresh]);
      expect(await head(w.g, fresh)).toBe(sha);
      // A root commit pushed as is: no parent.
      expect((await w.g.ok(['rev-list', '--parents', '-n', '1', 'HEAD'], { cwd: fresh })).trim()).toBe(sha);
    });

    it('pushed content is searchable at once', async () => {
      const found = await w.owner.get(`/api/v1/search?q=${enc('xylophonic anteater')}`);
      expect(found.status).toBe(200);
      expect(found.body.results.map((x: { path: string }) => x.path)).toContain('eng/pushed/lima.md');
    });

    it('pushed links are indexed: the target lists the pushed page among its backlinks', async () => {
      const target = await w.page('eng/linked/target.md', '# Target\n');
      const dir = await w.clone();
      writeFile(dir, 'eng/linked/source.md', '# Source\n\nSee [the target](target.md).\n');
      await commitAll(w.g, dir, 'Link to the target');
      const r = await push(dir);
      expect(r.code, said(r)).toBe(0);
      const b = await w.owner.get(`/api/v1/nodes/${target.id}/backlinks`);
      expect(b.status, b.text).toBe(200);
      expect(b.body.backlinks.map((x: { path: string }) => x.path)).toEqual(['eng/linked/source.md']);
    });

    it('an edit pushed replaces the old text in search', async () => {
      const p = await w.page('eng/search/quasar.md', '# Quasar\n\nThe marmoset protocol.\n');
      const dir = await w.clone();
      writeFile(dir, 'eng/search/quasar.md', '# Quasar\n\nThe capybara protocol.\n');
      await commitAll(w.g, dir, 'Swap the animal');
      const r = await push(dir);
      expect(r.code, said(r)).toBe(0);
      const hits = async (q: string) => (await w.owner.get(`/api/v1/search?q=${q}&mode=fts`)).body.results.map((x: { id: string }) => x.id);
      expect(await hits('capybara')).toContain(p.id);
      expect(await hits('marmoset')).not.toContain(p.id);
    });

    it('a changed page keeps its id and gets the pushed commit', async () => {
      const p = await w.page('eng/change/mike.md', '# Mike\n\nBefore.\n');
      const dir = await w.clone();
      writeFile(dir, 'eng/change/mike.md', '# Mike\n\nAfter, from git.\n');
      const sha = await commitAll(w.g, dir, 'Edit mike in my editor');
      const r = await push(dir);
      expect(r.code, said(r)).toBe(0);
      const now = await w.read(p.id);
      expect(now.body).toMatchObject({ id: p.id, path: 'eng/change/mike.md', content: '# Mike\n\nAfter, from git.\n', commit_sha: sha });
      expect(await w.history(p.id)).toEqual([sha, p.commit_sha]);
    });

    it('git mv (same content) is a move: the page id stays, the old path is gone', async () => {
      const p = await w.page('eng/move/november.md', '# November\n\nMoving house.\n');
      const dir = await w.clone();
      fs.mkdirSync(path.join(dir, 'ops/moved'), { recursive: true });
      await w.g.ok(['mv', 'eng/move/november.md', 'ops/moved/november.md'], { cwd: dir });
      const sha = await commitAll(w.g, dir, 'Move november');
      const r = await push(dir);
      expect(r.code, said(r)).toBe(0);
      const now = await w.read(p.id);
      expect(now.body).toMatchObject({ id: p.id, path: 'ops/moved/november.md', space: 'ops', content: '# November\n\nMoving house.\n', commit_sha: sha });
      expect((await w.read('eng/move/november.md')).status).toBe(404);
      const hist = await w.owner.get(`/api/v1/nodes/${p.id}/history`);
      expect(hist.body.versions.map((v: any) => [v.commit_sha, v.action])).toEqual([
        [sha, 'move'],
        [p.commit_sha, 'create'],
      ]);
    });

    it('git rm is a delete: the page is gone, its history ends in the pushed commit', async () => {
      const p = await w.page('eng/delete/oscar.md', '# Oscar\n');
      const dir = await w.clone();
      await w.g.ok(['rm', '-q', 'eng/delete/oscar.md'], { cwd: dir });
      const sha = await commitAll(w.g, dir, 'Remove oscar');
      const r = await push(dir);
      expect(r.code, said(r)).toBe(0);
      expect((await w.read(p.id)).status).toBe(404);
      const hist = await w.owner.get(`/api/v1/nodes/${p.id}/history`);
      expect(hist.body.versions[0]).toMatchObject({ commit_sha: sha, action: 'delete' });
      expect(await w.remoteHead()).toBe(sha);
    });

    it('a fresh clone after the pushes passes fsck --strict and shows the same history as REST', async () => {
      const dir = await w.clone();
      await w.g.ok(['fsck', '--strict', '--no-dangling'], { cwd: dir });
      const kilo = await w.read('eng/pushed/kilo.md');
      expect(await log(w.g, dir, 'eng/pushed/kilo.md')).toEqual(await w.history(kilo.body.id));
      expect(fs.readFileSync(path.join(dir, 'eng/pushed/kilo.md'), 'utf8')).toBe(kilo.body.content);
    });
  });

  describe('refused pushes change nothing', () => {
    /** What REST and git show now, to compare after a refusal. */
    const snapshot = async (ids: string[]) => ({
      head: await w.remoteHead(),
      // What a write would change; last_touched_at moves with every read, so it is left out.
      pages: await Promise.all(
        ids.map(async (id) => {
          const b = (await w.read(id)).body;
          return { id: b.id, path: b.path, content: b.content, content_hash: b.content_hash, commit_sha: b.commit_sha, updated_at: b.updated_at };
        }),
      ),
    });

    /**
     * A clone with one good edit of an existing page and one offending change, committed and
     * pushed; git must refuse it with `needle` on a `remote:` line, and nothing may change.
     */
    async function refusedPush(bad: (dir: string) => Promise<void> | void, needle: string, absentPath?: string): Promise<void> {
      const good = await w.page(`eng/guard/${Math.random().toString(36).slice(2, 10)}.md`, '# Guard\n\nUntouched.\n');
      const before = await snapshot([good.id]);
      const dir = await w.clone();
      writeFile(dir, good.path, '# Guard\n\nThis edit must not land.\n');
      await bad(dir);
      await commitAll(w.g, dir, 'A push to refuse');
      const r = await push(dir);
      expectRemoteRefusal(r, needle);
      expect(await snapshot([good.id])).toEqual(before);
      if (absentPath) expect((await w.read(absentPath)).status).toBe(404);
      const fresh = await w.clone();
      expect(await head(w.g, fresh)).toBe(before.head);
      expect(fs.readFileSync(path.join(fresh, good.path), 'utf8')).toBe('# Guard\n\nUntouched.\n');
    }

    it('a file that is not markdown', async () => {
      await refusedPush((dir) => writeFile(dir, 'eng/files/diagram.png', Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2, 3])), 'eng/files/diagram.png');
    });

    it('a page at the repository root (no Space)', async () => {
      await refusedPush((dir) => writeFile(dir, 'README.md', '# Root\n'), 'README.md');
    });

    it('a path the REST face refuses (bad characters)', async () => {
      await refusedPush((dir) => writeFile(dir, 'eng/we!rd/page.md', '# Weird\n'), 'eng/we!rd/page.md');
    });

    it('a hidden folder (leading dot)', async () => {
      await refusedPush((dir) => writeFile(dir, 'eng/.hidden/page.md', '# Hidden\n'), 'eng/.hidden/page.md');
    });

    it('bad frontmatter (sensitivity: bogus), alongside a good new page that must not appear', async () => {
      await refusedPush(
        (dir) => {
          writeFile(dir, 'eng/fm/bogus.md', '---\nsensitivity: bogus\n---\n# Bogus\n');
          writeFile(dir, 'eng/fm/fine.md', '# Fine on its own\n');
        },
        'eng/fm/bogus.md',
        'eng/fm/fine.md',
      );
    });

    it('a page over 1 MiB', async () => {
      await refusedPush((dir) => writeFile(dir, 'eng/big/huge.md', `# Huge\n\n${'a'.repeat(1024 * 1024)}\n`), 'eng/big/huge.md', 'eng/big/huge.md');
    });

    it('a symlink', async () => {
      await refusedPush((dir) => {
        fs.mkdirSync(path.join(dir, 'eng/links'), { recursive: true });
        fs.symlinkSync('../base/start.md', path.join(dir, 'eng/links/link.md'));
      }, 'eng/links/link.md');
    });

    it('an executable file', async () => {
      await refusedPush((dir) => {
        writeFile(dir, 'eng/exec/run.md', '# Run me\n');
        fs.chmodSync(path.join(dir, 'eng/exec/run.md'), 0o755);
      }, 'eng/exec/run.md');
    });

    it('an offending file in an earlier commit of the push, removed by a later one', async () => {
      const before = await w.remoteHead();
      const dir = await w.clone();
      writeFile(dir, 'eng/midway/notes.txt', 'not markdown\n');
      writeFile(dir, 'eng/midway/page.md', '# Midway\n');
      await commitAll(w.g, dir, 'Add a text file');
      await w.g.ok(['rm', '-q', 'eng/midway/notes.txt'], { cwd: dir });
      await commitAll(w.g, dir, 'Remove it again');
      // Commit ids are kept, so the first commit's tree would be kept too: every commit is checked.
      const r = await push(dir);
      expectRemoteRefusal(r, 'eng/midway/notes.txt');
      expect(await w.remoteHead()).toBe(before);
      expect((await w.read('eng/midway/page.md')).status).toBe(404);
    });

    it('a branch other than main', async () => {
      const before = await w.remoteHead();
      const dir = await w.clone();
      writeFile(dir, 'eng/branch/page.md', '# On a branch\n');
      await commitAll(w.g, dir, 'On a branch');
      const r = await push(dir, 'origin', 'HEAD:refs/heads/feature');
      expect(r.code, said(r)).not.toBe(0);
      expect(said(r)).toMatch(/feature/);
      expect(said(r)).toMatch(/^remote: /m);
      const refs = await w.g.ok(['ls-remote', w.url()]);
      expect(refs).not.toMatch(/refs\/heads\/feature/);
      expect(await w.remoteHead()).toBe(before);
      expect((await w.read('eng/branch/page.md')).status).toBe(404);
    });

    it('a tag', async () => {
      const dir = await w.clone();
      await w.g.ok(['tag', 'v1'], { cwd: dir });
      const r = await push(dir, 'origin', 'refs/tags/v1');
      expect(r.code, said(r)).not.toBe(0);
      expect(await w.g.ok(['ls-remote', w.url()])).not.toMatch(/refs\/tags\/v1/);
    });

    it('deleting main', async () => {
      const before = await w.remoteHead();
      const dir = await w.clone();
      const r = await push(dir, '--delete', 'origin', 'main');
      expect(r.code, said(r)).not.toBe(0);
      expect(said(r)).toMatch(/main/);
      expect(await w.remoteHead()).toBe(before);
      const fresh = await w.clone();
      expect(await head(w.g, fresh)).toBe(before);
    });

    it('a force push that rewrites main', async () => {
      const p = await w.page('eng/force/papa.md', '# Papa\n');
      const before = await w.remoteHead();
      expect(before).toBe(p.commit_sha);
      const dir = await w.clone();
      // Rewrite the last commit (REST's), then force it over main.
      writeFile(dir, 'eng/force/papa.md', '# Papa, rewritten\n');
      await w.g.ok(['commit', '-q', '-a', '--amend', '-m', 'Rewritten'], { cwd: dir });
      const r = await push(dir, '--force', 'origin', 'main');
      expect(r.code, said(r)).not.toBe(0);
      expect(said(r)).toMatch(/fast-forward|rejected/i);
      expect(await w.remoteHead()).toBe(before);
      expect((await w.read(p.id)).body).toMatchObject({ content: '# Papa\n', commit_sha: p.commit_sha });
      expect(await w.history(p.id)).toEqual([p.commit_sha]);
    });
  });

  describe('races', () => {
    it('a push racing a REST write is refused as non-fast-forward; after pull both changes land', async () => {
      const q = await w.page('eng/race/quebec.md', '# Quebec\n');
      const r0 = await w.page('eng/race/romeo.md', '# Romeo\n');
      const dir = await w.clone();
      const rest = await w.owner.put(`/api/v1/nodes/${q.id}`, { content: '# Quebec\n\nFrom REST.\n' });
      expect(rest.status).toBe(200);
      writeFile(dir, 'eng/race/romeo.md', '# Romeo\n\nFrom git.\n');
      const local = await commitAll(w.g, dir, 'Edit romeo locally');

      const refused = await push(dir);
      expect(refused.code, said(refused)).not.toBe(0);
      expect(said(refused)).toMatch(/fetch first|non-fast-forward|rejected/i);
      expect(await w.remoteHead()).toBe(rest.body.commit_sha);
      expect((await w.read(q.id)).body.content).toBe('# Quebec\n\nFrom REST.\n');
      expect((await w.read(r0.id)).body.content).toBe('# Romeo\n');

      await w.g.ok(['pull', '-q', '--rebase'], { cwd: dir });
      const rebased = await head(w.g, dir);
      expect(rebased).not.toBe(local);
      const ok = await push(dir);
      expect(ok.code, said(ok)).toBe(0);
      expect(await w.remoteHead()).toBe(rebased);
      expect((await w.read(q.id)).body).toMatchObject({ content: '# Quebec\n\nFrom REST.\n', commit_sha: rest.body.commit_sha });
      expect((await w.read(r0.id)).body).toMatchObject({ content: '# Romeo\n\nFrom git.\n', commit_sha: rebased });
    });

    it('a merge commit made by git pull lands and keeps both sides', async () => {
      const s1 = await w.page('eng/merge/sierra.md', '# Sierra\n');
      const t1 = await w.page('eng/merge/tango.md', '# Tango\n');
      const dir = await w.clone();
      const rest = await w.owner.put(`/api/v1/nodes/${s1.id}`, { content: '# Sierra\n\nFrom REST.\n' });
      writeFile(dir, 'eng/merge/tango.md', '# Tango\n\nFrom git.\n');
      const local = await commitAll(w.g, dir, 'Edit tango');
      await w.g.ok(['pull', '-q', '--no-rebase', '--no-edit'], { cwd: dir });
      const merge = await head(w.g, dir);
      const r = await push(dir);
      expect(r.code, said(r)).toBe(0);
      expect(await w.remoteHead()).toBe(merge);
      expect((await w.read(s1.id)).body.content).toBe('# Sierra\n\nFrom REST.\n');
      expect((await w.read(t1.id)).body.content).toBe('# Tango\n\nFrom git.\n');
      expect(await w.history(t1.id)).toContain(local);
      expect(await w.history(s1.id)).toContain(rest.body.commit_sha);
      const fresh = await w.clone();
      await w.g.ok(['fsck', '--strict', '--no-dangling'], { cwd: fresh });
      expect(await head(w.g, fresh)).toBe(merge);
    });

    it('two pushes at once from two clones: exactly one lands, the other is refused, nothing is lost', async () => {
      const u = await w.page('eng/twin/uniform.md', '# Uniform\n');
      const v = await w.page('eng/twin/victor.md', '# Victor\n');
      const a = await w.clone();
      const b = await w.clone();
      writeFile(a, 'eng/twin/uniform.md', '# Uniform\n\nFrom clone A.\n');
      const shaA = await commitAll(w.g, a, 'A edits uniform');
      writeFile(b, 'eng/twin/victor.md', '# Victor\n\nFrom clone B.\n');
      const shaB = await commitAll(w.g, b, 'B edits victor');

      const [ra, rb] = await Promise.all([push(a), push(b)]);
      const codes = [ra.code === 0, rb.code === 0];
      expect(codes.filter(Boolean), `A: ${said(ra)}\nB: ${said(rb)}`).toHaveLength(1);
      const [winner, loser, winnerSha] = ra.code === 0 ? [a, b, shaA] : [b, a, shaB];
      expect(await w.remoteHead()).toBe(winnerSha);

      await w.g.ok(['pull', '-q', '--rebase'], { cwd: loser });
      const ok = await push(loser);
      expect(ok.code, said(ok)).toBe(0);
      const final = await head(w.g, loser);
      expect(await w.remoteHead()).toBe(final);
      expect((await w.read(u.id)).body.content).toBe('# Uniform\n\nFrom clone A.\n');
      expect((await w.read(v.id)).body.content).toBe('# Victor\n\nFrom clone B.\n');
      expect(await log(w.g, loser)).toContain(winnerSha);
      await w.g.ok(['pull', '-q', '--ff-only'], { cwd: winner });
      expect(await head(w.g, winner)).toBe(final);
    });
  });
});
