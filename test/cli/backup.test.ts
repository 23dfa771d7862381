import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gzipSync, gunzipSync } from 'node:zlib';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { exited, spawnService } from '../support/service-process.js';
import { Client } from '../support/server.js';
import { cli, CONTROL, oneCleanLine } from './support.js';

/**
 * Backup and restore round trip (issue 16), per engine, every step a child process: a deployment
 * with pages, history, an agent and its key is backed up while its service runs and takes
 * writes, restored into an empty deployment, and served again. What a user reads must be the
 * same: pages, their history (git commits), search, the agent key, the audit chains.
 */
const PASSWORD = 'correct horse battery';

function envOf(t: TestDatabase): Record<string, string> {
  return t.databaseUrl ? { DATA_DIR: t.dataDir, DATABASE_URL: t.databaseUrl } : { DATA_DIR: t.dataDir };
}

async function stop(svc: { child: ChildProcess } | undefined): Promise<void> {
  if (!svc) return;
  svc.child.kill('SIGTERM');
  await exited(svc.child);
}

async function loginAs(url: string, email: string): Promise<Client> {
  const c = new Client(url);
  const r = await c.post('/api/auth/login', { email, password: PASSWORD });
  if (r.status !== 200) throw new Error(`login: ${r.status} ${r.text}`);
  return c;
}

/** What a reader sees of a page and its history, without what reading itself changes. */
async function observe(c: Client, id: string) {
  const page = await c.get(`/api/v1/nodes/${id}`);
  const history = await c.get(`/api/v1/nodes/${id}/history`);
  expect(page.status, page.text).toBe(200);
  expect(history.status, history.text).toBe(200);
  const { last_touched_at: _t, ...stable } = page.body;
  return { page: stable, etag: page.headers.get('etag'), history: history.body };
}

describe.each(testEngines())('backup and restore (%s)', (engine) => {
  let source: TestDatabase;
  let target: TestDatabase;
  let svc: { child: ChildProcess; url: string } | undefined;
  let tmp: string;
  let file: string;
  const email = 'owner@example.com';
  let slug: string;
  let pageId: string;
  let agentKey: string;
  let seen: Awaited<ReturnType<typeof observe>>;

  beforeAll(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-backup-'));
    file = path.join(tmp, 'vault.cvbak');
    source = await createTestDatabase(engine);
    target = await createTestDatabase(engine);
  });

  afterAll(async () => {
    await stop(svc);
    await source?.cleanup();
    await target?.cleanup();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('backs up a live deployment while it takes writes, quietly in a pipe', async () => {
    const env = envOf(source);
    const made = await cli(['create-owner', '--email', email, '--name', 'Owner', '--password-stdin', '--json'], { env, input: `${PASSWORD}\n` });
    expect(made.code, made.stderr).toBe(0);
    slug = JSON.parse(made.stdout).workspace.slug;
    svc = await spawnService(env);
    const owner = await loginAs(svc.url, email);

    const created = await owner.post('/api/v1/nodes', { path: 'eng/runbooks/deploy.md', content: '# Deploy\n\nRoll out with the narwhal script.\n' });
    expect(created.status, created.text).toBe(201);
    pageId = created.body.id;
    let etag = created.headers.get('etag')!;
    for (let v = 2; v <= 3; v++) {
      const up = await owner.request('PUT', `/api/v1/nodes/${pageId}`, {
        json: { content: `# Deploy\n\nRoll out with the narwhal script, version ${v}.\n` },
        headers: { 'if-match': etag },
      });
      expect(up.status, up.text).toBe(200);
      etag = up.headers.get('etag')!;
    }
    for (let i = 0; i < 20; i++)
      expect((await owner.post('/api/v1/nodes', { path: `eng/notes/n${i}.md`, content: `# Note ${i}\n\nbody ${i}\n` })).status).toBe(201);
    const agent = await owner.post('/api/v1/principals', {
      name: 'reader',
      ceiling: 'internal',
      grants: [{ action: 'read', scope: '*', ceiling: 'internal' }],
    });
    expect(agent.status, agent.text).toBe(201);
    const minted = await cli(['mint-key', '--workspace', slug, '--agent', 'reader'], { env });
    expect(minted.code, minted.stderr).toBe(0);
    agentKey = minted.stdout.trim();
    expect((await new Client(svc.url, agentKey).get('/api/v1/me')).status).toBe(200);
    seen = await observe(owner, pageId);
    expect(seen.history.versions).toHaveLength(3);

    // Writes go on while the backup reads its snapshot: it must still be consistent.
    let writing = true;
    const writes = (async () => {
      let n = 0;
      while (writing) {
        await owner.post('/api/v1/nodes', { path: `eng/during/d${n}.md`, content: `# During ${n}\n` });
        n += 1;
      }
      return n;
    })();
    const r = await cli(['backup', '--out', file], { env });
    writing = false;
    await writes;
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^backup written: .*vault\.cvbak \(.*rows in \d+ tables, \d+ ms\)\n$/);
    expect(r.stderr).toBe('');
    expect(CONTROL.test(r.stdout)).toBe(false);
    expect(fs.existsSync(file)).toBe(true);

    const again = await cli(['backup', '--out', file], { env });
    expect(again.code).toBe(2);
    expect(again.stderr).toContain('exists');
    await stop(svc);
    svc = undefined;
  }, 120_000);

  it('restores into an empty deployment: pages, history, search, the agent key and the audit chains are as they were', async () => {
    const env = envOf(target);
    const r = await cli(['restore', '--from', file, '--json'], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ engine, from_engine: engine });
    if (target.databaseUrl) {
      // The planner has statistics of what was restored at once, not when autovacuum comes by.
      const c = new pg.Client({ connectionString: target.databaseUrl });
      await c.connect();
      const stale = await c.query<{ relname: string }>(
        `select relname from pg_stat_user_tables where relname in ('pages', 'page_sections', 'git_objects') and last_analyze is null`,
      );
      // The word statistics are derived, not in the file: the restore rebuilt them from the sections.
      const narwhal = await c.query<{ docs: number }>(`select sum(docs)::int as docs from term_stats where lexeme = 'narwhal'`);
      await c.end();
      expect(stale.rows.map((x) => x.relname)).toEqual([]);
      expect(narwhal.rows[0]?.docs).toBe(1);
    }

    const twice = await cli(['restore', '--from', file], { env });
    expect(twice.code).toBe(2);
    expect(twice.stderr).toContain('not empty');
    expect(oneCleanLine(twice.stderr), twice.stderr).toBe(true);

    const verify = await cli(['audit-verify'], { env });
    expect(verify.code, verify.stdout).toBe(0);
    expect(verify.stdout).toContain(`ok     ${slug}:`);

    svc = await spawnService(env);
    const owner = await loginAs(svc.url, email);
    expect(await observe(owner, pageId)).toEqual(seen);
    const search = await owner.get('/api/v1/search?q=narwhal&mode=fts');
    expect(search.status).toBe(200);
    expect(JSON.stringify(search.body)).toContain('eng/runbooks/deploy.md');
    const me = await new Client(svc.url, agentKey).get('/api/v1/me');
    expect(me.status, me.text).toBe(200);

    // The restored deployment takes new writes (ids and sequences moved past the restored ones).
    const more = await owner.post('/api/v1/nodes', { path: 'eng/after/restore.md', content: '# After\n\nthe axolotl note\n' });
    expect(more.status, more.text).toBe(201);
    expect(JSON.stringify((await owner.get('/api/v1/search?q=axolotl&mode=fts')).body)).toContain('eng/after/restore.md');
    const readBack = await new Client(svc.url, agentKey).get(`/api/v1/nodes/${pageId}`);
    expect(readBack.status).toBe(200);
    await stop(svc);
    svc = undefined;
    expect((await cli(['audit-verify'], { env })).code).toBe(0);
  }, 120_000);
});

describe('restore refuses what is not a whole backup, and leaves the deployment empty', () => {
  let source: TestDatabase;
  let tmp: string;
  let good: string;

  beforeAll(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-backup-bad-'));
    good = path.join(tmp, 'good.cvbak');
    source = await createTestDatabase('sqlite');
    const env = envOf(source);
    expect((await cli(['create-owner', '--email', 'o@example.com', '--name', 'O', '--password-stdin'], { env, input: `${PASSWORD}\n` })).code).toBe(0);
    expect((await cli(['backup', '--out', good], { env })).code).toBe(0);
  });

  afterAll(async () => {
    await source?.cleanup();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('a missing file, random bytes, a cut gzip, a file without its end line, or a changed row count: exit 2, nothing restored', async () => {
    const lines = gunzipSync(fs.readFileSync(good)).toString('utf8').trimEnd().split('\n');
    const bytes = fs.readFileSync(good);
    const bad: Array<[string, Buffer | null, string]> = [
      ['missing.cvbak', null, 'No backup file'],
      ['random.cvbak', Buffer.from('this is not a backup at all'), 'not a readable Context Vault backup'],
      ['cut.cvbak', bytes.subarray(0, Math.floor(bytes.length / 2)), 'not a readable Context Vault backup'],
      ['noend.cvbak', gzipSync(`${lines.slice(0, -1).join('\n')}\n`), 'truncated'],
      ['plain.cvbak', gzipSync('{"hello":"world"}\n'), 'no backup header'],
      ['rows.cvbak', gzipSync(`${lines.filter((l) => !(l.startsWith('[') && l.includes('account.signup'))).join('\n')}\n`), 'corrupt'],
    ];
    const target = await createTestDatabase('sqlite');
    try {
      const env = envOf(target);
      for (const [name, content, message] of bad) {
        const f = path.join(tmp, name);
        if (content) fs.writeFileSync(f, content);
        const r = await cli(['restore', '--from', f], { env });
        expect(r.code, `${name}: ${r.stderr}`).toBe(2);
        expect(r.stderr, name).toContain(message);
        expect(oneCleanLine(r.stderr), r.stderr).toBe(true);
      }
      // Each failure rolled back: the deployment is still empty and takes the good file.
      const ok = await cli(['restore', '--from', good], { env });
      expect(ok.code, ok.stderr).toBe(0);
      expect((await cli(['audit-verify'], { env })).code).toBe(0);
    } finally {
      await target.cleanup();
    }
  }, 120_000);

  it.runIf(testEngines().includes('postgres'))(
    'a SQLite backup restores into PostgreSQL (a migration path)',
    async () => {
      const pg = await createTestDatabase('postgres');
      try {
        const env = envOf(pg);
        const r = await cli(['restore', '--from', good, '--json'], { env });
        expect(r.code, r.stderr).toBe(0);
        expect(JSON.parse(r.stdout)).toMatchObject({ engine: 'postgres', from_engine: 'sqlite' });
        const svc = await spawnService(env);
        try {
          const owner = await loginAs(svc.url, 'o@example.com');
          expect((await owner.post('/api/v1/nodes', { path: 'a/b/c.md', content: '# C\n\nplatypus\n' })).status).toBe(201);
          expect(JSON.stringify((await owner.get('/api/v1/search?q=platypus&mode=fts')).body)).toContain('a/b/c.md');
        } finally {
          await stop(svc);
        }
      } finally {
        await pg.cleanup();
      }
    },
    120_000,
  );
});
