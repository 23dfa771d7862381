import { spawn } from 'node:child_process';
import { PassThrough, type Readable } from 'node:stream';
import { ServiceError } from '../core/errors.js';
import { gitEnv } from '../core/git/cache.js';

/** One request for `git http-backend`, as CGI sees it (git's own docs: git-http-backend(1)). */
export interface BackendRequest {
  projectRoot: string;
  /** `/<repo>.git/<info/refs|git-upload-pack|git-receive-pack>`: built by the face, never taken from the URL. */
  pathInfo: string;
  method: 'GET' | 'POST';
  query: string;
  contentType: string | undefined;
  contentEncoding: string | undefined;
  contentLength: string | undefined;
  /** `version=2` and the like, from the client's Git-Protocol header (already checked). */
  gitProtocol: string | undefined;
  remoteUser: string;
  remoteAddr: string;
  /** For a push: how the pre-receive hook reaches the service. */
  extraEnv?: Record<string, string>;
  body: Readable | null;
  maxBodyBytes: number;
}

export interface BackendAnswer {
  status: number;
  headers: Record<string, string>;
  body: Readable;
  /** Settles when git has exited (a push holds the workspace's turn until then). */
  done: Promise<void>;
  /** Stops git (the client went away before the answer was read). */
  kill(): void;
}

/** How long a request body may stay silent before git is stopped. */
const BODY_IDLE_MS = 60_000;
/** No request keeps a git process longer than this (a stalled client must not hold a push turn). */
const MAX_RUN_MS = 30 * 60 * 1000;

/** CGI headers end at the first empty line; git writes them with CRLF. */
function headerEnd(buf: Buffer): { at: number; skip: number } | null {
  const crlf = buf.indexOf('\r\n\r\n');
  const lf = buf.indexOf('\n\n');
  if (crlf >= 0 && (lf < 0 || crlf < lf)) return { at: crlf, skip: 4 };
  if (lf >= 0) return { at: lf, skip: 2 };
  return null;
}

/**
 * Runs `git http-backend` for one request and answers once it has written its CGI headers; the
 * body streams on. The request body is cut off (and the answer is 413) past maxBodyBytes.
 */
export function runBackend(req: BackendRequest): Promise<BackendAnswer> {
  const env: NodeJS.ProcessEnv = {
    ...gitEnv(),
    GIT_PROJECT_ROOT: req.projectRoot,
    GIT_HTTP_EXPORT_ALL: '1',
    GIT_HTTP_MAX_REQUEST_BUFFER: String(Math.min(req.maxBodyBytes, 100 * 1024 * 1024)),
    PATH_INFO: req.pathInfo,
    REQUEST_METHOD: req.method,
    QUERY_STRING: req.query,
    REMOTE_USER: req.remoteUser,
    REMOTE_ADDR: req.remoteAddr,
    ...(req.contentType ? { CONTENT_TYPE: req.contentType } : {}),
    // No CONTENT_LENGTH: git then reads to EOF, which it gets when the body ends or when we stop
    // it. With a length, git 2.39 spins forever on a client that hung up early.
    ...(req.contentEncoding ? { HTTP_CONTENT_ENCODING: req.contentEncoding } : {}),
    ...(req.gitProtocol ? { GIT_PROTOCOL: req.gitProtocol } : {}),
    ...req.extraEnv,
  };
  // Its own process group: git's wrapper, http-backend and receive-pack die together.
  const child = spawn('git', ['http-backend'], { env, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
  const killAll = () => {
    try {
      if (child.pid) process.kill(-child.pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  };
  const deadline = setTimeout(killAll, MAX_RUN_MS);
  deadline.unref();
  const done = new Promise<void>((resolve) => {
    const end = () => {
      clearTimeout(deadline);
      resolve();
    };
    child.on('exit', end);
    child.on('close', end);
  });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => {
    if (stderr.length < 4096) stderr += c.toString('utf8');
  });

  return new Promise<BackendAnswer>((resolve, reject) => {
    let settled = false;
    const fail = (e: Error) => {
      killAll();
      if (settled) return;
      settled = true;
      reject(e);
    };
    child.on('error', fail);
    child.stdin.on('error', () => undefined);

    if (req.body) {
      let seen = 0;
      // A client that stops sending keeps its push's turn: after a minute of silence it is dropped.
      let idle = setTimeout(() => fail(new ServiceError(408, 'request_timeout', 'The upload stalled; nothing was changed')), BODY_IDLE_MS);
      const stopIdle = () => clearTimeout(idle);
      req.body.on('end', stopIdle);
      req.body.on('close', stopIdle);
      req.body.on('data', (c: Buffer) => {
        clearTimeout(idle);
        idle = setTimeout(() => fail(new ServiceError(408, 'request_timeout', 'The upload stalled; nothing was changed')), BODY_IDLE_MS);
        seen += c.length;
        if (seen > req.maxBodyBytes) {
          req.body!.unpipe(child.stdin);
          req.body!.resume();
          fail(new ServiceError(413, 'payload_too_large', `This push is larger than the server accepts (${Math.floor(req.maxBodyBytes / 1048576)} MB)`));
        }
      });
      // A client that hangs up mid-upload leaves git waiting for input that never comes.
      req.body.on('close', () => {
        if (!(req.body as Readable & { complete?: boolean }).complete)
          fail(new ServiceError(400, 'invalid_request', 'The client closed the request before its body ended'));
      });
      req.body.pipe(child.stdin);
    } else {
      child.stdin.end();
    }

    let head = Buffer.alloc(0);
    const onData = (c: Buffer) => {
      head = Buffer.concat([head, c]);
      const end = headerEnd(head);
      if (!end) {
        if (head.length > 64 * 1024) fail(new Error('git http-backend wrote no header'));
        return;
      }
      child.stdout.off('data', onData);
      const headers: Record<string, string> = {};
      let status = 200;
      for (const line of head.subarray(0, end.at).toString('latin1').split(/\r?\n/)) {
        const colon = line.indexOf(':');
        if (colon <= 0) continue;
        const name = line.slice(0, colon).trim().toLowerCase();
        const value = line.slice(colon + 1).trim();
        if (name === 'status') status = Number.parseInt(value, 10) || 500;
        else headers[name] = value;
      }
      const body = new PassThrough();
      body.write(head.subarray(end.at + end.skip));
      child.stdout.pipe(body);
      settled = true;
      resolve({ status, headers, body, done, kill: () => child.kill('SIGKILL') });
    };
    child.stdout.on('data', onData);
    child.on('close', (code) => {
      if (!settled) fail(new Error(`git http-backend exited (${code}) before answering: ${stderr.trim()}`));
      killAll();
    });
  });
}
