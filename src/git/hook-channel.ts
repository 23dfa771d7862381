import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { CoreContext } from '../core/context.js';
import { isDatabaseUnavailable, isServiceError } from '../core/errors.js';
import type { HookFile } from '../core/git/cache.js';
import { importPush, type PushResult } from '../core/git/push.js';
import type { Principal } from '../policy/principal.js';

/**
 * How git's pre-receive hook asks this process to check and import a push (DESIGN.md §8). The
 * hook is a child of the `git http-backend` this process started for the push; it reaches us
 * over a Unix socket in a directory only this user can open, and proves which push it belongs
 * to with a one-time secret handed to http-backend in its environment. Nothing of this listens
 * on the network.
 */

/** The hook's request: small (the ref update lines and three paths). */
const MAX_HOOK_BODY = 256 * 1024;

interface Pending {
  principal: Principal;
  repoDir: string;
}

interface HookAnswer {
  ok: boolean;
  message: string;
}

/** The hook git runs: the service's own node runs the script below. */
export function hookFiles(repoDir: string): HookFile[] {
  const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  return [
    {
      name: 'pre-receive',
      content: `#!/bin/sh\n# Context Vault: the service checks and imports this push (DESIGN.md §8).\nexec ${q(process.execPath)} ${q(path.join(repoDir, 'hooks', 'pre-receive.mjs'))}\n`,
    },
    { name: 'pre-receive.mjs', content: HOOK_SCRIPT },
  ];
}

// Plain JavaScript, run by node as git's hook: it forwards stdin and git's quarantine paths and
// prints the answer, which git shows the pusher as `remote:` lines. No answer, no push.
const HOOK_SCRIPT = `import http from 'node:http';
const socketPath = process.env.CV_HOOK_SOCKET;
const token = process.env.CV_HOOK_TOKEN;
if (!socketPath || !token) {
  process.stderr.write('This repository accepts pushes only through the Context Vault service.\\n');
  process.exit(1);
}
const chunks = [];
for await (const c of process.stdin) chunks.push(c);
const body = JSON.stringify({
  token,
  updates: Buffer.concat(chunks).toString('utf8'),
  objectDirectory: process.env.GIT_OBJECT_DIRECTORY ?? '',
  alternates: process.env.GIT_ALTERNATE_OBJECT_DIRECTORIES ?? '',
  quarantinePath: process.env.GIT_QUARANTINE_PATH ?? '',
});
const req = http.request({ socketPath, path: '/pre-receive', method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
  const parts = [];
  res.on('data', (c) => parts.push(c));
  res.on('end', () => {
    let answer = { ok: false, message: 'The service gave no answer; nothing was changed.' };
    try { answer = JSON.parse(Buffer.concat(parts).toString('utf8')); } catch {}
    for (const line of String(answer.message).split('\\n')) process.stderr.write(line + '\\n');
    process.exit(answer.ok === true ? 0 : 1);
  });
});
req.on('error', (e) => {
  process.stderr.write('The service could not be reached to check this push (' + e.message + '); nothing was changed.\\n');
  process.exit(1);
});
req.end(body);
`;

export class HookChannel {
  private server: http.Server | null = null;
  private starting: Promise<string> | null = null;
  private dir: string | null = null;
  private readonly pending = new Map<string, Pending>();

  constructor(
    private readonly ctx: CoreContext,
    private readonly log: { error(o: object, msg: string): void; warn(o: object, msg: string): void },
  ) {}

  /** The socket path, listening. */
  socket(): Promise<string> {
    this.starting ??= this.listen();
    return this.starting;
  }

  private async listen(): Promise<string> {
    this.dir = await fs.mkdtemp(path.join(os.tmpdir(), 'cv-git-'));
    await fs.chmod(this.dir, 0o700);
    const socketPath = path.join(this.dir, 'hook.sock');
    const server = http.createServer((req, res) => void this.handle(req, res));
    // A big push is imported while the hook waits: no server-side timeout.
    server.requestTimeout = 0;
    server.headersTimeout = 0;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socketPath, () => resolve());
    });
    this.server = server;
    return socketPath;
  }

  /** A one-time secret for the push of one request; forget it when the request ends. */
  register(p: Pending): string {
    const token = randomBytes(32).toString('hex');
    this.pending.set(token, p);
    return token;
  }

  release(token: string): void {
    this.pending.delete(token);
  }

  async close(): Promise<void> {
    const server = this.server;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
    if (this.dir) await fs.rm(this.dir, { recursive: true, force: true });
    this.server = null;
    this.starting = null;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const answer = (a: HookAnswer) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(a));
    };
    try {
      if (req.method !== 'POST' || req.url !== '/pre-receive') return answer({ ok: false, message: 'Unknown hook request' });
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const c of req) {
        size += (c as Buffer).length;
        if (size > MAX_HOOK_BODY) return answer({ ok: false, message: 'The push names too many refs' });
        chunks.push(c as Buffer);
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
      const str = (k: string) => (typeof body[k] === 'string' ? (body[k] as string) : '');
      const entry = this.pending.get(str('token'));
      // One use only: a replayed secret finds nothing.
      this.pending.delete(str('token'));
      if (!entry) return answer({ ok: false, message: 'This push is not known to the service; nothing was changed.' });
      const result: PushResult = await importPush(this.ctx, entry.principal, {
        repoDir: entry.repoDir,
        updates: str('updates'),
        quarantine: { objectDirectory: str('objectDirectory'), alternates: str('alternates'), quarantinePath: str('quarantinePath') },
      });
      const plural = (n: number, w: string) => `${n} ${w}${n === 1 ? '' : 's'}`;
      return answer({ ok: true, message: `Context Vault: imported ${plural(result.commits, 'commit')} (${plural(result.changes, 'page change')}).` });
    } catch (e) {
      if (isServiceError(e)) return answer({ ok: false, message: e.message });
      // The database went out of reach (or could not make the import durable) somewhere in the
      // import: it may have been stored or not, so git must not be told nothing changed.
      if (isDatabaseUnavailable(e)) {
        this.log.warn({ err: e }, 'git push import: database unavailable');
        return answer({
          ok: false,
          message:
            'The service could not confirm this push (its database is unavailable); it may or may not have been stored. Fetch later to see, then push again if it is not there.',
        });
      }
      this.log.error({ err: e }, 'git push import failed');
      return answer({ ok: false, message: 'The service failed to import this push; nothing was changed.' });
    }
  }
}
