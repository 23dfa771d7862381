/**
 * The baseline for the git benchmark: plain `git http-backend` over ordinary bare repositories
 * under GIT_PROJECT_ROOT, behind the smallest node:http CGI bridge that works. No auth, no
 * database, no sync: what git's smart HTTP costs by itself on this machine, next to the service.
 *
 * Env: PORT, HOST (default 127.0.0.1), GIT_PROJECT_ROOT (required). GET /healthz answers 200.
 */
import { spawn } from 'node:child_process';
import http from 'node:http';

const root = process.env.GIT_PROJECT_ROOT;
if (!root) throw new Error('GIT_PROJECT_ROOT is required');

/** The same sealed environment the service gives its git children: no user or system config. */
const BASE_ENV: NodeJS.ProcessEnv = {
  PATH: process.env.PATH ?? '/usr/bin:/bin',
  HOME: '/nonexistent',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_TERMINAL_PROMPT: '0',
  LANG: 'C',
};

function headerEnd(buf: Buffer): { at: number; skip: number } | null {
  const crlf = buf.indexOf('\r\n\r\n');
  const lf = buf.indexOf('\n\n');
  if (crlf >= 0 && (lf < 0 || crlf < lf)) return { at: crlf, skip: 4 };
  if (lf >= 0) return { at: lf, skip: 2 };
  return null;
}

const one = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[0] : v);

const server = http.createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://x');
  if (url.pathname === '/healthz') {
    res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
    return;
  }
  const env: NodeJS.ProcessEnv = {
    ...BASE_ENV,
    GIT_PROJECT_ROOT: root,
    GIT_HTTP_EXPORT_ALL: '1',
    PATH_INFO: decodeURIComponent(url.pathname),
    REQUEST_METHOD: req.method ?? 'GET',
    QUERY_STRING: url.search.slice(1),
    REMOTE_ADDR: req.socket.remoteAddress ?? '127.0.0.1',
  };
  const ct = one(req.headers['content-type']);
  const cl = one(req.headers['content-length']);
  const ce = one(req.headers['content-encoding']);
  const gp = one(req.headers['git-protocol']);
  if (ct) env.CONTENT_TYPE = ct;
  if (cl) env.CONTENT_LENGTH = cl;
  if (ce) env.HTTP_CONTENT_ENCODING = ce;
  if (gp) env.GIT_PROTOCOL = gp;

  const child = spawn('git', ['http-backend'], { env, stdio: ['pipe', 'pipe', 'inherit'] });
  child.stdin.on('error', () => undefined);
  child.on('error', () => {
    if (!res.headersSent) res.writeHead(500).end();
  });
  req.pipe(child.stdin);

  let head = Buffer.alloc(0);
  const onData = (c: Buffer) => {
    head = Buffer.concat([head, c]);
    const end = headerEnd(head);
    if (!end) return;
    child.stdout.off('data', onData);
    let status = 200;
    const headers: Record<string, string> = {};
    for (const line of head.subarray(0, end.at).toString('latin1').split(/\r?\n/)) {
      const colon = line.indexOf(':');
      if (colon <= 0) continue;
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      if (name === 'status') status = Number.parseInt(value, 10) || 500;
      else headers[name] = value;
    }
    res.writeHead(status, headers);
    res.write(head.subarray(end.at + end.skip));
    child.stdout.pipe(res);
  };
  child.stdout.on('data', onData);
  child.on('close', () => {
    if (!res.headersSent) res.writeHead(502).end();
  });
});

server.listen(Number(process.env.PORT ?? 0), process.env.HOST ?? '127.0.0.1');
const stop = () => server.close(() => process.exit(0));
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
