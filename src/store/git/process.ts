import { spawn } from 'node:child_process';
import type { Readable } from 'node:stream';

/** What a finished git command gave back. */
export interface GitRun {
  code: number;
  stdout: Buffer;
  stderr: string;
}

/**
 * Runs the git CLI on a repository, never prompting and with no user or system config, and
 * collects its output. Throws only when git cannot be started; a non-zero exit is returned.
 */
export function runGit(args: string[], opts: { cwd: string; env?: NodeJS.ProcessEnv; input?: Buffer | string; timeoutMs?: number }): Promise<GitRun> {
  return new Promise((resolve, reject) => {
    const child = spawn('git', args, { cwd: opts.cwd, env: { ...gitEnv(), ...opts.env }, stdio: ['pipe', 'pipe', 'pipe'], timeout: opts.timeoutMs ?? 120_000 });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => err.push(c));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString('utf8') }));
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.input ?? '');
  });
}

/** The environment every git child gets: the service's PATH and nothing from a user's config. */
export function gitEnv(): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: '/nonexistent',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_TERMINAL_PROMPT: '0',
    LANG: 'C',
  };
}

/**
 * One `git cat-file --batch` process: reads objects by sha, one at a time, without a process
 * per object. Objects are answered in the order asked, so requests are queued.
 */
export class ObjectReader {
  private readonly child;
  private buffer: Buffer = Buffer.alloc(0);
  private waiting: Array<{ resolve: (v: { type: string; body: Buffer } | null) => void; reject: (e: Error) => void }> = [];
  private failed: Error | null = null;

  constructor(cwd: string, env: NodeJS.ProcessEnv) {
    this.child = spawn('git', ['cat-file', '--batch'], { cwd, env: { ...gitEnv(), ...env }, stdio: ['pipe', 'pipe', 'ignore'] });
    this.child.on('error', (e) => this.fail(e));
    this.child.on('close', () => this.fail(new Error('git cat-file exited')));
    this.child.stdin.on('error', (e) => this.fail(e));
    (this.child.stdout as Readable).on('data', (c: Buffer) => {
      this.buffer = this.buffer.length === 0 ? c : Buffer.concat([this.buffer, c]);
      this.drain();
    });
  }

  private fail(e: Error): void {
    if (!this.failed) this.failed = e;
    for (const w of this.waiting.splice(0)) w.reject(e);
  }

  private drain(): void {
    while (this.waiting.length > 0) {
      const nl = this.buffer.indexOf(0x0a);
      if (nl < 0) return;
      const header = this.buffer.toString('latin1', 0, nl);
      if (header.endsWith(' missing')) {
        this.buffer = this.buffer.subarray(nl + 1);
        this.waiting.shift()!.resolve(null);
        continue;
      }
      const [, type = '', size = '0'] = header.split(' ');
      const len = Number(size);
      if (this.buffer.length < nl + 1 + len + 1) return;
      const body = Buffer.from(this.buffer.subarray(nl + 1, nl + 1 + len));
      this.buffer = this.buffer.subarray(nl + 1 + len + 1);
      this.waiting.shift()!.resolve({ type, body });
    }
  }

  read(sha: string): Promise<{ type: string; body: Buffer } | null> {
    if (this.failed) return Promise.reject(this.failed);
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      this.child.stdin.write(`${sha}\n`);
    });
  }

  close(): void {
    this.child.stdin.end();
  }
}
