import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyAuditChain } from '../../src/core/audit.js';
import { openStore } from '../../src/store/db.js';
import { exportToBareRepo } from '../../src/store/git/export.js';
import { createTestDatabase, testEngines, type TestDatabase } from '../support/engines.js';
import { Client, createAgentWithKey, signupHuman, startTestServer, type TestServer } from '../support/server.js';
import { exited, ROOT, spawnService } from '../support/service-process.js';

const TSX = path.join(ROOT, 'node_modules/.bin/tsx');

describe('configuration', () => {
  it.each([
    [{ PORT: 'eighty' }, 'PORT'],
    [{ PORT: '70000' }, 'PORT'],
    [{ SIGNUPS: 'maybe' }, 'SIGNUPS'],
    [{ DATABASE_URL: 'mysql://x' }, 'DATABASE_URL'],
    [{ PUBLIC_URL: 'not a url' }, 'PUBLIC_URL'],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL'],
    [{ SQLITE_CACHE_MB: '1' }, 'SQLITE_CACHE_MB'],
    [{ SQLITE_CACHE_MB: 'big' }, 'SQLITE_CACHE_MB'],
  ])('refuses %o at start with a message naming the variable', (env, name) => {
    const r = spawnSync(TSX, ['src/main.ts'], { cwd: ROOT, env: { ...process.env, ...env }, encoding: 'utf8', timeout: 20_000 });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('Invalid configuration');
    expect(r.stderr).toContain(name);
  });
});

describe('SQLite page cache', () => {
  it('is 32 MiB unless SQLITE_CACHE_MB says otherwise', async () => {
    for (const [env, kib] of [
      [{}, 32768],
      [{ SQLITE_CACHE_MB: '16' }, 16384],
    ] as const) {
      const s = await startTestServer('sqlite', env);
      try {
        const r = await sql<{ cache_size: number }>`pragma cache_size`.execute(s.ctx.store.db);
        expect(r.rows[0]!.cache_size).toBe(-kib);
      } finally {
        await s.close();
      }
    }
  });
});

describe.each(testEngines())('health, OpenAPI and durability (%s)', (engine) => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer(engine);
  });
  afterAll(async () => s?.stop());

  it('reports health and readiness', async () => {
    const c = new Client(s.url);
    const h = await c.get('/healthz');
    expect(h.status).toBe(200);
    expect(h.body).toMatchObject({ status: 'ok', version: '0.1.0', nodes: 0, indexed_at: null });
    const human = (await signupHuman(s.url)).client;
    await human.post('/api/v1/nodes', { path: 'a/b/c.md', content: 'x' });
    const h2 = await c.get('/healthz');
    expect(h2.body.nodes).toBe(1);
    expect(Date.parse(h2.body.indexed_at)).not.toBeNaN();
    const r = await c.get('/readyz');
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      status: 'ready',
      version: '0.1.0',
      database: { ok: true, engine },
      embeddings: { provider: 'builtin', model: 'hashed-ngrams-v2', dimensions: 512 },
    });
    expect(r.body.embeddings.backlog).toBeGreaterThanOrEqual(0);
    expect(['ok', 'degraded']).toContain(r.body.embeddings.status);
    expect(r.body.git_sha).toMatch(/^([0-9a-f]{40}|unknown)$/);
  });

  it('serves an OpenAPI document that lists every REST route with its schemas', async () => {
    const c = new Client(s.url);
    const doc = await c.get('/api/v1/openapi.json');
    expect(doc.status).toBe(200);
    expect(doc.body.openapi).toMatch(/^3\./);
    const documented = new Set<string>();
    for (const [p, ops] of Object.entries(doc.body.paths as Record<string, Record<string, unknown>>)) {
      for (const m of Object.keys(ops)) documented.add(`${m.toUpperCase()} ${p.replace(/\{\*\}/g, '*').replace(/\{(\w+)\}/g, ':$1')}`);
    }
    const expected = [
      'POST /api/v1/auth/signup',
      'GET /api/v1/me',
      'GET /api/v1/whoami',
      'GET /api/v1/principals',
      'POST /api/v1/principals',
      'GET /api/v1/principals/:id',
      'DELETE /api/v1/principals/:id',
      'GET /api/v1/principals/:id/grants',
      'PUT /api/v1/principals/:id/grants',
      'GET /api/v1/principals/:id/tokens',
      'POST /api/v1/principals/:id/tokens',
      'DELETE /api/v1/principals/:id/tokens/:tid',
      'GET /api/v1/spaces',
      'POST /api/v1/spaces',
      'GET /api/v1/spaces/:s/tree',
      'POST /api/v1/nodes',
      'GET /api/v1/nodes/:id',
      'PUT /api/v1/nodes/:id',
      'PATCH /api/v1/nodes/:id',
      'DELETE /api/v1/nodes/:id',
      'GET /api/v1/nodes/:id/history',
      'GET /api/v1/nodes/:id/diff',
      'POST /api/v1/nodes/:id/move',
      'POST /api/v1/nodes/:id/archive',
      'POST /api/v1/nodes/:id/restore',
      'POST /api/auth/login',
      'POST /api/auth/logout',
      'GET /api/auth/me',
      'GET /healthz',
      'GET /readyz',
    ];
    for (const e of expected) expect(documented, e).toContain(e);
    // Nothing registered under /api/v1 is missing from the document.
    const registered = s.app.routeList;
    expect(registered.length).toBeGreaterThan(25);
    for (const r of registered.filter((x) => x.includes(' /api/v1/') && !x.endsWith('/openapi.json'))) expect(documented, r).toContain(r);
    const post = doc.body.paths['/api/v1/nodes'].post;
    expect(post.requestBody.content['application/json'].schema).toBeTruthy();
    expect(post.responses['201']).toBeTruthy();
  });

  it('gives sessions a 7-day lifetime and ends them when it passes', async () => {
    const c = new Client(s.url);
    const res = await fetch(`${s.url}/api/v1/auth/signup`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: `life-${Date.now()}@example.com`, password: 'correct horse battery', name: 'Life' }),
    });
    const cookie = res.headers.getSetCookie().find((x) => x.startsWith('svc_session='))!;
    expect(cookie).toMatch(/HttpOnly/i);
    expect(cookie).toMatch(/SameSite=Lax/i);
    const expires = Date.parse(/Expires=([^;]+)/i.exec(cookie)![1]!);
    expect(Math.abs(expires - (Date.now() + 7 * 86_400_000))).toBeLessThan(60_000);
    c.cookies.set('svc_session', cookie.split(';')[0]!.split('=')[1]!);
    expect((await c.get('/api/v1/me')).status).toBe(200);
    // No API can move the clock: age the session row itself.
    const { principal } = (await res.json()) as { principal: { id: string } };
    await s.ctx.store.db
      .updateTable('sessions')
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where('principal_id', '=', principal.id)
      .execute();
    const after = await c.get('/api/v1/me');
    expect(after.status).toBe(401);
    expect(after.body.code).toBe('session_expired');
  });

  it('reports 503 on /readyz when the database is gone', async () => {
    const other = await startTestServer(engine);
    try {
      await other.ctx.store.db.destroy();
      const r = await new Client(other.url).get('/readyz');
      expect(r.status).toBe(503);
      expect(r.body).toMatchObject({ status: 'unavailable', database: { ok: false } });
    } finally {
      await other.app.close();
      await other.stop().catch(() => undefined);
    }
  });
});

describe.each(testEngines())('a kill -9 loses nothing acknowledged (%s)', (engine) => {
  let tdb: TestDatabase;
  beforeAll(async () => {
    tdb = await createTestDatabase(engine);
  });
  afterAll(async () => tdb?.cleanup());

  it('keeps every acknowledged write across a crash, with valid git history and audit chain', async () => {
    const env: Record<string, string> = { DATA_DIR: tdb.dataDir, ...(tdb.databaseUrl ? { DATABASE_URL: tdb.databaseUrl } : {}) };
    let svc = await spawnService(env);
    const h = await signupHuman(svc.url);
    const agent = await createAgentWithKey(h.client, [{ action: 'read' }, { action: 'write' }]);
    const acked = new Map<string, string>();
    let stop = false;
    // Four writers, each writing until the process dies under them.
    const writer = async (w: number) => {
      for (let i = 0; !stop; i++) {
        const p = `crash/w${w}/p${i}.md`;
        const content = `# Page ${w}-${i}\n\n${'body '.repeat(50)}\n`;
        try {
          const r = await new Client(svc.url, agent.key).post('/api/v1/nodes', { path: p, content });
          if (r.status === 201) acked.set(p, content);
        } catch {
          return; // connection reset: the process is gone
        }
      }
    };
    const writers = [0, 1, 2, 3].map(writer);
    await new Promise((r) => setTimeout(r, 1500));
    svc.child.kill('SIGKILL');
    stop = true;
    await Promise.all(writers);
    await exited(svc.child);
    expect(acked.size).toBeGreaterThan(5);

    svc = await spawnService(env);
    try {
      const c = new Client(svc.url, agent.key);
      for (const [p, content] of acked) {
        const r = await c.get(`/api/v1/nodes/${encodeURIComponent(p)}`);
        expect(r.status, p).toBe(200);
        expect(r.body.content).toBe(content);
      }
      // Writes go on after the restart.
      expect((await c.post('/api/v1/nodes', { path: 'crash/after.md', content: 'after' })).status).toBe(201);
    } finally {
      svc.child.kill('SIGTERM');
      await exited(svc.child);
    }
    const store = await openStore({ dataDir: tdb.dataDir, databaseUrl: tdb.databaseUrl });
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-crash-'));
    try {
      expect(await verifyAuditChain(store.db, h.workspace.id)).toBeNull();
      await exportToBareRepo(store.db, h.workspace.id, dir);
      const fsck = spawnSync('git', ['fsck', '--strict', '--no-dangling'], { cwd: dir, encoding: 'utf8' });
      expect(fsck.status, fsck.stderr).toBe(0);
      const files = spawnSync('git', ['ls-tree', '-r', '--name-only', 'main'], { cwd: dir, encoding: 'utf8' }).stdout.split('\n');
      for (const p of acked.keys()) expect(files).toContain(p);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
      await store.close();
    }
  }, 120_000);
});
