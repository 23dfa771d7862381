import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'vitest';
import type { Dialect } from '../../src/store/db.js';
import { Client, signupHuman, startTestServer, type TestServer } from '../support/server.js';

/**
 * The git face's test kit: a real `git` CLI in a sealed environment (own HOME, no system or
 * user config but ours, never a prompt), a started server with an owner and a git token, and
 * small helpers for clones, commits and REST reads.
 */

export const PASSWORD = 'correct horse battery';
export const enc = encodeURIComponent;

export interface GitResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface GitOptions {
  cwd?: string;
  env?: Record<string, string>;
  input?: string;
  /** Kills git after this long; a hung git is a failure, not a hung suite. */
  timeoutMs?: number;
}

/** A temporary HOME with its own .gitconfig; every git run and scratch directory lives under it. */
export class GitHome {
  readonly root: string;
  readonly home: string;
  private n = 0;

  constructor() {
    this.root = fs.mkdtempSync(path.join(os.tmpdir(), 'cv-gitface-'));
    this.home = path.join(this.root, 'home');
    fs.mkdirSync(this.home);
    fs.writeFileSync(
      path.join(this.home, '.gitconfig'),
      [
        '[user]',
        '\tname = Git Tester',
        '\temail = git-tester@example.com',
        '[init]',
        '\tdefaultBranch = main',
        '[credential]',
        // No helper: credentials come from the URL or nowhere; nothing is stored.
        '\thelper =',
        '[advice]',
        '\tdetachedHead = false',
        '[pull]',
        '\trebase = false',
        '[core]',
        '\tfileMode = true',
        '',
      ].join('\n'),
    );
  }

  /** A fresh, empty scratch directory path (not created: `git clone` wants to make it). */
  path(prefix = 'd'): string {
    return path.join(this.root, `${prefix}-${++this.n}`);
  }

  env(extra: Record<string, string> = {}): Record<string, string> {
    return {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: this.home,
      XDG_CONFIG_HOME: path.join(this.home, '.config'),
      GIT_CONFIG_NOSYSTEM: '1',
      GIT_TERMINAL_PROMPT: '0',
      // Asked for a password anyway, answer nothing rather than hang.
      GIT_ASKPASS: '/bin/false',
      SSH_ASKPASS: '/bin/false',
      LANG: 'C',
      LC_ALL: 'C',
      ...extra,
    };
  }

  /** Runs git asynchronously (the server lives in this process: a sync spawn would deadlock). */
  git(args: string[], opts: GitOptions = {}): Promise<GitResult> {
    return new Promise((resolve, reject) => {
      // Its own process group: on a timeout git's helpers (git-remote-http) die with it, or they
      // would hold the pipes open and this promise would never settle.
      const child = spawn('git', args, { cwd: opts.cwd ?? this.root, env: this.env(opts.env), stdio: ['pipe', 'pipe', 'pipe'], detached: true });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const timer = setTimeout(() => {
        try {
          process.kill(-child.pid!, 'SIGKILL');
        } catch {
          child.kill('SIGKILL');
        }
      }, opts.timeoutMs ?? 60_000);
      child.on('error', (e) => {
        clearTimeout(timer);
        reject(e);
      });
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        resolve({ code: code ?? (signal ? 128 : 1), stdout, stderr: signal ? `${stderr}\n[killed by ${signal}]` : stderr });
      });
      // git may exit without reading stdin; a broken pipe then is no error of the test.
      child.stdin.on('error', () => undefined);
      child.stdin.end(opts.input ?? '');
    });
  }

  /** Runs git and fails the test with git's output when it does not succeed. */
  async ok(args: string[], opts: GitOptions = {}): Promise<string> {
    const r = await this.git(args, opts);
    expect(r.code, `git ${args.join(' ')}\n${r.stderr}\n${r.stdout}`).toBe(0);
    return r.stdout;
  }

  cleanup(): void {
    fs.rmSync(this.root, { recursive: true, force: true });
  }
}

/** Commit and tree shas of a working copy. */
export async function head(g: GitHome, dir: string, rev = 'HEAD'): Promise<string> {
  return (await g.ok(['rev-parse', rev], { cwd: dir })).trim();
}

/** Writes a file (creating folders) in a working copy. */
export function writeFile(dir: string, rel: string, content: string | Buffer): void {
  const p = path.join(dir, rel);
  fs.mkdirSync(path.dirname(p), { recursive: true });
  fs.writeFileSync(p, content);
}

/** Stages everything and commits; returns the new commit's sha. */
export async function commitAll(g: GitHome, dir: string, message: string): Promise<string> {
  await g.ok(['add', '-A'], { cwd: dir });
  await g.ok(['commit', '-q', '-m', message], { cwd: dir });
  return head(g, dir);
}

/** `git log --format=%H [rev] [-- path]`, newest first. */
export async function log(g: GitHome, dir: string, pathspec?: string, extra: string[] = []): Promise<string[]> {
  const out = await g.ok(['log', '--format=%H', ...extra, ...(pathspec ? ['--', pathspec] : [])], { cwd: dir });
  return out.split('\n').filter(Boolean);
}

export async function stepUp(c: Client): Promise<void> {
  const r = await c.post('/api/auth/stepup', { password: PASSWORD });
  if (r.status !== 200) throw new Error(`step-up failed: ${r.status} ${r.text}`);
}

/** Mints a git token for the session's human (steps up first). */
export async function mintGitToken(c: Client, body: Record<string, unknown> = {}): Promise<{ id: string; token: string; body: any }> {
  await stepUp(c);
  const r = await c.post('/api/v1/me/git-tokens', body);
  if (r.status !== 201) throw new Error(`git token mint failed: ${r.status} ${r.text}`);
  return { id: r.body.id, token: r.body.token, body: r.body };
}

/** A git remote URL; with a password, HTTP Basic credentials are embedded (any user name). */
export function gitUrl(base: string, slug: string, password?: string, user = 'x'): string {
  const u = new URL(`${base}/git/${slug}.git`);
  if (password !== undefined) {
    u.username = user;
    u.password = password;
  }
  return u.toString();
}

export function basic(password: string, user = 'x'): string {
  return `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
}

/** A raw HTTP GET whose path is sent as written (fetch() would normalise `..` away). */
export function rawGet(
  base: string,
  rawPath: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, method: 'GET', path: rawPath, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end();
  });
}

export interface GitWorld {
  s: TestServer;
  g: GitHome;
  owner: Client;
  ownerId: string;
  ws: { id: string; slug: string };
  /** The owner's git token. */
  token: string;
  tokenId: string;
  /** The workspace's remote URL with the owner's token (or the given password) embedded. */
  url(password?: string, slug?: string): string;
  /** Clones the workspace with the owner's token into a fresh directory; returns it. */
  clone(opts?: { args?: string[] }): Promise<string>;
  /** Creates a page over REST as the owner; returns its record. */
  page(p: string, content: string): Promise<any>;
  /** Reads a page over REST by id or path. */
  read(idOrPath: string): Promise<{ status: number; body: any }>;
  /** A page's history commit shas over REST, newest first. */
  history(id: string): Promise<string[]>;
  /** The head of `main` as the server advertises it (ls-remote), or null when empty. */
  remoteHead(): Promise<string | null>;
  stop(): Promise<void>;
}

/** Starts a server on `engine`, signs an owner up and mints their git token. */
export async function setupGitWorld(engine: Dialect, env: Record<string, string> = {}): Promise<GitWorld> {
  const s = await startTestServer(engine, env);
  const g = new GitHome();
  const h = await signupHuman(s.url, 'Owner');
  const owner = h.client;
  const t = await mintGitToken(owner, { name: 'suite' });
  const url = (password: string = t.token, slug: string = h.workspace.slug) => gitUrl(s.url, slug, password);
  const world: GitWorld = {
    s,
    g,
    owner,
    ownerId: h.id,
    ws: h.workspace,
    token: t.token,
    tokenId: t.id,
    url,
    clone: async (opts = {}) => {
      const dir = g.path('clone');
      await g.ok(['clone', '-q', ...(opts.args ?? []), url(), dir]);
      return dir;
    },
    page: async (p, content) => {
      const r = await owner.post('/api/v1/nodes', { path: p, content });
      if (r.status !== 201) throw new Error(`page ${p}: ${r.status} ${r.text}`);
      return r.body;
    },
    read: async (idOrPath) => {
      const r = await owner.get(`/api/v1/nodes/${enc(idOrPath)}`);
      return { status: r.status, body: r.body };
    },
    history: async (id) => {
      const r = await owner.get(`/api/v1/nodes/${enc(id)}/history?limit=200`);
      if (r.status !== 200) throw new Error(`history ${id}: ${r.status} ${r.text}`);
      return r.body.versions.map((v: { commit_sha: string }) => v.commit_sha);
    },
    remoteHead: async () => {
      const out = await g.ok(['ls-remote', url(), 'refs/heads/main']);
      const line = out.split('\n').find((l) => l.endsWith('\trefs/heads/main'));
      return line ? line.split('\t')[0]! : null;
    },
    stop: async () => {
      g.cleanup();
      await s.stop();
    },
  };
  return world;
}

/** Git's own output, for assertions on what a user reads (`remote: …` lines included). */
export function said(r: GitResult): string {
  return `${r.stderr}\n${r.stdout}`;
}
