import { spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { currentTotp } from '../../src/auth/totp.js';
import { exited, ROOT, spawnService } from '../support/service-process.js';
import { Client } from '../support/server.js';
import { cli, CONTROL, oneCleanLine } from './support.js';

/**
 * The operator's command line (issue 16), each command run as a child process through the bin
 * entry against one SQLite deployment that a running service (its own process) serves at the
 * same time: what a command changes is checked over HTTP, as a person would see it.
 */
const PASSWORD = 'correct horse battery';
const NEW_PASSWORD = 'a brand new passphrase';

describe('operator commands (sqlite, service running)', { timeout: 120_000 }, () => {
  let dataDir: string;
  let env: Record<string, string>;
  let svc: { child: ChildProcess; url: string };
  const email = 'ada@example.com';
  let slug: string;

  beforeAll(async () => {
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-cli-'));
    env = { DATA_DIR: dataDir, OPERATOR: 'test-operator' };
    // The first owner is made before the service ever starts, as on a fresh install.
    const r = await cli(['create-owner', '--email', email, '--name', 'Ada', '--password-stdin', '--json'], { env, input: `${PASSWORD}\n` });
    expect(r.code, r.stderr).toBe(0);
    slug = JSON.parse(r.stdout).workspace.slug;
    svc = await spawnService(env);
  });

  afterAll(async () => {
    if (svc) {
      svc.child.kill('SIGTERM');
      await exited(svc.child);
    }
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  async function login(password: string): Promise<{ client: Client; status: number; body: any }> {
    const client = new Client(svc.url);
    const res = await client.post('/api/auth/login', { email, password });
    return { client, status: res.status, body: res.body };
  }

  it('--help lists every command; a command has its own help; unknown commands and options exit 2 with usage', async () => {
    const help = await cli(['--help']);
    expect(help.code).toBe(0);
    for (const c of ['serve', 'migrate', 'create-owner', 'reset-password', 'reset-totp', 'mint-key', 'backup', 'restore', 'audit-verify', 'reindex']) {
      expect(help.stdout).toContain(c);
    }
    const one = await cli(['mint-key', '--help']);
    expect(one.code).toBe(0);
    expect(one.stdout).toContain('--workspace SLUG --agent ID-OR-NAME');

    const unknown = await cli(['frobnicate'], { env });
    expect(unknown.code).toBe(2);
    expect(unknown.stdout).toBe('');
    expect(unknown.stderr).toContain('unknown command "frobnicate"');
    expect(unknown.stderr).toContain('Usage: context-vault');

    const badFlag = await cli(['audit-verify', '--everything'], { env });
    expect(badFlag.code).toBe(2);
    expect(oneCleanLine(badFlag.stderr), badFlag.stderr).toBe(true);
    expect(badFlag.stderr).toContain('unknown option --everything');

    const missing = await cli(['reset-password'], { env });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('--email is required');
    expect(oneCleanLine(missing.stderr), missing.stderr).toBe(true);
  });

  it('create-owner made a real owner who signs in; a second one is refused, and so is a bad configuration', async () => {
    const l = await login(PASSWORD);
    expect(l.status, JSON.stringify(l.body)).toBe(200);
    const me = await l.client.get('/api/v1/me');
    expect(me.status).toBe(200);
    expect(JSON.stringify(me.body)).toContain(slug);

    const again = await cli(['create-owner', '--email', 'bob@example.com', '--name', 'Bob', '--password-stdin'], { env, input: `${PASSWORD}\n` });
    expect(again.code).toBe(2);
    expect(again.stderr).toContain('already has an account');
    expect(oneCleanLine(again.stderr), again.stderr).toBe(true);

    const badEnv = await cli(['audit-verify'], { env: { ...env, DATABASE_URL: 'mysql://nope' } });
    expect(badEnv.code).toBe(2);
    expect(badEnv.stderr).toContain('DATABASE_URL');
  });

  it('reset-password: refuses an unknown email, an empty or weak password; then sets it, ends sessions and audits it', async () => {
    const before = await login(PASSWORD);
    expect(before.status).toBe(200);

    const unknown = await cli(['reset-password', '--email', 'nobody@example.com', '--password-stdin'], { env, input: `${NEW_PASSWORD}\n` });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('No account with the email nobody@example.com');
    const empty = await cli(['reset-password', '--email', email, '--password-stdin'], { env, input: '' });
    expect(empty.code).toBe(2);
    expect(empty.stderr).toContain('no password given');
    const weak = await cli(['reset-password', '--email', email, '--password-stdin'], { env, input: 'short\n' });
    expect(weak.code).toBe(2);
    expect(oneCleanLine(weak.stderr), weak.stderr).toBe(true);
    // Nothing changed: the old password still works.
    expect((await login(PASSWORD)).status).toBe(200);

    const r = await cli(['reset-password', '--email', 'ADA@example.com', '--password-stdin', '--json'], {
      env,
      input: `${NEW_PASSWORD}\nignored second line\n`,
    });
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.email).toBe(email);
    expect(out.sessions_revoked).toBeGreaterThanOrEqual(2);
    expect(out.audited_in).toBe(1);

    expect((await before.client.get('/api/v1/me')).status).toBe(401);
    expect((await login(PASSWORD)).status).toBe(401);
    const after = await login(NEW_PASSWORD);
    expect(after.status).toBe(200);
    const audit = await after.client.get('/api/v1/audit?action=operator.');
    expect(audit.status, audit.text).toBe(200);
    expect(audit.body.items[0].action).toBe('operator.password_reset');
    expect(audit.body.items[0].actor).toBeNull();
    expect(audit.body.items[0].detail).toMatchObject({ email, operator: 'test-operator' });
  }, 60_000);

  it('reset-totp: a person who lost their authenticator signs in with the password alone again', async () => {
    const c = (await login(NEW_PASSWORD)).client;
    expect((await c.post('/api/auth/stepup', { password: NEW_PASSWORD })).status).toBe(200);
    const start = await c.post('/api/auth/totp/enroll');
    const secret: string = start.body.secret;
    expect((await c.post('/api/auth/totp/enroll', { code: currentTotp(secret) })).body).toEqual({ enabled: true });
    expect((await login(NEW_PASSWORD)).body.status).toBe('totp_required');

    const r = await cli(['reset-totp', '--email', email], { env: { ...env, OPERATOR: 'test-operator' } });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`TOTP reset for ${email}`);
    expect((await c.get('/api/v1/me')).status).toBe(401);
    const l = await login(NEW_PASSWORD);
    expect(l.status).toBe(200);
    expect(l.body.status).toBe('ok');
    expect((await l.client.get('/api/v1/me')).body.totp).toBe(false);

    const twice = await cli(['reset-totp', '--email', email], { env });
    expect(twice.code).toBe(2);
    expect(twice.stderr).toContain('TOTP is not enabled');
  }, 60_000);

  it('mint-key: the printed key answers GET /api/v1/me as the agent; bad workspace, agent, days or ceiling exit 2', async () => {
    const owner = (await login(NEW_PASSWORD)).client;
    const made = await owner.post('/api/v1/principals', { name: 'ci-bot', ceiling: 'internal', grants: [{ action: 'read', scope: '*', ceiling: 'internal' }] });
    expect(made.status, made.text).toBe(201);

    const r = await cli(['mint-key', '--workspace', slug, '--agent', 'ci-bot', '--days', '30', '--ceiling', 'internal'], { env });
    expect(r.code, r.stderr).toBe(0);
    const key = r.stdout.trim();
    expect(key).toMatch(/^ak_\S+$/);
    expect(r.stderr).toContain('shown only once');
    const me = await new Client(svc.url, key).get('/api/v1/me');
    expect(me.status, me.text).toBe(200);
    expect(JSON.stringify(me.body)).toContain(made.body.id);

    const keys = await owner.get(`/api/v1/principals/${made.body.id}/tokens`);
    expect(keys.body.tokens).toHaveLength(1);
    expect(keys.body.tokens[0]).toMatchObject({ ceiling: 'internal', name: 'operator' });
    expect(Date.parse(keys.body.tokens[0].expires_at) - Date.now()).toBeGreaterThan(29 * 86_400_000);
    const audit = await owner.get('/api/v1/audit?action=agent.key.mint');
    expect(audit.body.items[0].detail).toMatchObject({ agent: made.body.id, via: 'operator' });

    for (const [args, message] of [
      [['--workspace', 'no-such-ws', '--agent', 'ci-bot'], 'no-such-ws'],
      [['--workspace', slug, '--agent', 'nobody'], 'No agent "nobody"'],
      [['--workspace', slug, '--agent', 'ci-bot', '--days', '0'], '--days'],
      [['--workspace', slug, '--agent', 'ci-bot', '--ceiling', 'top'], '--ceiling'],
      [['--agent', 'ci-bot'], '--workspace is required'],
    ] as const) {
      const bad = await cli(['mint-key', ...args], { env });
      expect(bad.code, args.join(' ')).toBe(2);
      expect(bad.stderr).toContain(message);
      expect(oneCleanLine(bad.stderr), bad.stderr).toBe(true);
    }
  }, 90_000);

  it('reindex in a pipe prints only its summary (no progress bar) and search still finds the pages', async () => {
    const owner = (await login(NEW_PASSWORD)).client;
    for (let i = 0; i < 5; i++) {
      const p = await owner.post('/api/v1/nodes', { path: `eng/notes/n${i}.md`, content: `# Note ${i}\n\nThe quokka count is ${i}.\n` });
      expect(p.status, p.text).toBe(201);
    }
    const r = await cli(['reindex'], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^reindexed 5 page\(s\) in \d+ ms\n$/);
    expect(r.stderr).toBe('');
    expect(CONTROL.test(r.stdout + r.stderr)).toBe(false);
    const one = await cli(['reindex', '--workspace', slug, '--json'], { env });
    expect(JSON.parse(one.stdout)).toMatchObject({ pages: 5, workspace: slug });
    const search = await owner.get('/api/v1/search?q=quokka&mode=fts');
    expect(search.status).toBe(200);
    expect(JSON.stringify(search.body)).toContain('eng/notes/n3.md');
    const unknown = await cli(['reindex', '--workspace', 'nope'], { env });
    expect(unknown.code).toBe(2);
  }, 60_000);

  // `script` gives the command a terminal: then, and only then, a progress bar is drawn.
  it.runIf(spawnSync('script', ['--version']).status === 0)(
    'reindex on a terminal draws a progress bar on stderr',
    () => {
      const bin = path.join(ROOT, 'bin/context-vault.mjs');
      const r = spawnSync('script', ['-qec', `${JSON.stringify(process.execPath)} ${JSON.stringify(bin)} reindex`, '/dev/null'], {
        env: { ...process.env, ...env, LOG_LEVEL: 'warn' },
        encoding: 'utf8',
        timeout: 60_000,
      });
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/\rreindex \[#+\] 100% 5\/5/);
      expect(r.stdout).toContain('reindexed 5 page(s)');
    },
    60_000,
  );

  it('audit-verify: exit 0 on intact chains; a tampered entry makes it exit 1 naming the first broken link', async () => {
    const ok = await cli(['audit-verify'], { env });
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toContain(`ok     ${slug}:`);

    const db = new Database(path.join(dataDir, 'context-vault.sqlite'));
    try {
      db.pragma('busy_timeout = 5000');
      const row = db.prepare('select seq from audit_log where action = ? order by seq limit 1').get('operator.password_reset') as { seq: number };
      db.prepare(`update audit_log set detail = '{"email":"mallory@example.com"}' where action = 'operator.password_reset' and seq = ?`).run(row.seq);
      const broken = await cli(['audit-verify', '--workspace', slug], { env });
      expect(broken.code).toBe(1);
      expect(broken.stdout).toContain(`BROKEN ${slug}: first broken link at seq ${row.seq} (operator.password_reset`);
      const json = await cli(['audit-verify', '--json'], { env });
      expect(json.code).toBe(1);
      expect(JSON.parse(json.stdout)).toMatchObject({ ok: false, workspaces: [{ workspace: slug, first_broken: { seq: row.seq } }] });
    } finally {
      db.close();
    }
  }, 60_000);
});
