import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Client } from '../support/server.js';
import { exited, freePort, ROOT } from '../support/service-process.js';

/**
 * `npm start` as the README runs it (issue 19): scripts/build.mjs transpiles src/ to dist/ and the
 * service runs as plain JavaScript, with no TypeScript loader in its process. The started service
 * answers health, serves the web app's static files (copied beside the modules) and takes a
 * sign-up and a page write: the whole path from a fresh build to a durable commit.
 */
describe('npm start', () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-start-'));
  afterAll(() => fs.rmSync(dataDir, { recursive: true, force: true }));

  it('builds dist/ and serves from it without a transpiler', { timeout: 120_000 }, async () => {
    const port = await freePort();
    // Its own process group: npm runs a shell that runs node; the whole group is stopped at the end.
    const child = spawn('npm', ['start', '--silent'], {
      cwd: ROOT,
      env: { ...process.env, PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, LOG_LEVEL: 'warn', RATE_LIMITS: 'off' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let output = '';
    child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    const url = `http://127.0.0.1:${port}`;
    try {
      let up = false;
      for (let i = 0; i < 900 && !up && child.exitCode === null; i++) {
        up = await fetch(`${url}/healthz`).then(
          (r) => r.ok,
          () => false,
        );
        if (!up) await new Promise((r) => setTimeout(r, 100));
      }
      expect(up, `the service did not answer /healthz; its output:\n${output}`).toBe(true);

      // The build wrote plain modules and the assets beside them.
      expect(fs.existsSync(path.join(ROOT, 'dist', 'main.js'))).toBe(true);
      const css = await fetch(`${url}/assets/app.css`);
      expect(css.status).toBe(200);
      expect(await css.text()).toBe(fs.readFileSync(path.join(ROOT, 'src', 'web', 'assets', 'app.css'), 'utf8'));

      // The node process serving is running dist/main.js, with no tsx hook loaded.
      const ps = fs
        .readFileSync(`/proc/${await servingPid(child.pid!)}/cmdline`, 'utf8')
        .split('\0')
        .filter(Boolean);
      expect(ps.at(-1)).toBe('dist/main.js');
      expect(ps.join(' ')).not.toMatch(/tsx/);

      const c = new Client(url);
      const signup = await c.post('/api/v1/auth/signup', { email: `start-${process.pid}@example.com`, password: 'correct horse battery', name: 'Sam' });
      expect(signup.status, signup.text).toBe(201);
      const page = await c.post('/api/v1/nodes', { path: 'notes/started.md', content: '# Started\n\nFrom the built service.\n' });
      expect(page.status, page.text).toBe(201);
      expect((await c.get(`/api/v1/nodes/${page.body.id}`)).body.content).toContain('From the built service.');
    } finally {
      try {
        process.kill(-child.pid!, 'SIGTERM');
      } catch {
        /* already gone */
      }
      await exited(child);
    }
  });
});

/** The node process under npm's shell: the deepest descendant of the group leader. */
async function servingPid(leader: number): Promise<number> {
  let pid = leader;
  for (let depth = 0; depth < 5; depth++) {
    const children = fs
      .readdirSync('/proc')
      .filter((d) => /^\d+$/.test(d))
      .filter((d) => {
        try {
          return fs.readFileSync(`/proc/${d}/stat`, 'utf8').split(') ')[1]!.split(' ')[1] === String(pid);
        } catch {
          return false;
        }
      });
    if (children.length === 0) return pid;
    pid = Number(children[0]);
  }
  return pid;
}
