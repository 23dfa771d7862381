import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { authenticateGit } from '../auth/git-token.js';
import { notFound, ServiceError } from '../core/errors.js';
import { cacheIsCurrent, cacheRepoDir, syncCache, withCacheTurn } from '../core/git/cache.js';
import { toServiceError } from '../http/shared/errors.js';
import { decideGitFetch, decideGitPush } from '../policy/git.js';
import { enforce } from '../policy/pages.js';
import { runBackend, type BackendAnswer } from './backend.js';
import { HookChannel, hookFiles } from './hook-channel.js';

/**
 * The git face (spec §4 "Git", DESIGN.md §8): `/git/<workspace-slug>.git` over git's smart HTTP
 * protocol, served by `git http-backend` from a cache repository that is brought up to the
 * database before git reads it. Who may fetch or push is decided in policy/git.ts; what a push
 * does is core/git/push.ts, called by the pre-receive hook through hook-channel.ts. Errors are
 * text/plain: git shows such a body to its user as `remote:` lines.
 */

const REPO_PATH = /^([A-Za-z0-9][A-Za-z0-9_-]{0,99})\.git\/(info\/refs|git-upload-pack|git-receive-pack)$/;
const SERVICES = new Set(['git-upload-pack', 'git-receive-pack']);
/** What a Git-Protocol header may hold (`version=2`, colon-separated parameters). */
const GIT_PROTOCOL = /^[A-Za-z0-9=:._-]{1,100}$/;

type Service = 'git-upload-pack' | 'git-receive-pack';

function header(req: FastifyRequest, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function sendText(reply: FastifyReply, e: ServiceError): FastifyReply {
  if (e.status === 401) reply.header('WWW-Authenticate', 'Basic realm="Context Vault git", charset="UTF-8"');
  return reply.code(e.status).header('Cache-Control', 'no-store').type('text/plain; charset=utf-8').send(`${e.message}\n`);
}

/** The service and CGI path of a smart-HTTP request, or a 404. */
function route(req: FastifyRequest, workspaceId: string, rest: string, method: 'GET' | 'POST'): { service: Service; pathInfo: string; query: string } {
  const m = REPO_PATH.exec(rest);
  const what = m?.[2];
  const query = (req.query as Record<string, unknown>) ?? {};
  if (what === 'info/refs' && method === 'GET' && typeof query.service === 'string' && SERVICES.has(query.service)) {
    return { service: query.service as Service, pathInfo: `/${workspaceId}.git/info/refs`, query: `service=${query.service}` };
  }
  if ((what === 'git-upload-pack' || what === 'git-receive-pack') && method === 'POST') {
    return { service: what, pathInfo: `/${workspaceId}.git/${what}`, query: '' };
  }
  throw notFound("Only git's smart HTTP protocol is served here: clone the repository's URL with git");
}

export async function gitFace(face: FastifyInstance): Promise<void> {
  const ctx = face.ctx;
  const hooks = new HookChannel(ctx, face.log);
  face.addHook('onClose', async () => hooks.close());

  // git sends its request bodies as they are (pack data, maybe gzip): they go to git untouched.
  face.removeAllContentTypeParsers();
  face.addContentTypeParser('*', (_req, _payload, done) => done(null));
  face.setErrorHandler((err, req, reply) => sendText(reply, toServiceError(err, req)));

  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    const rest = (req.params as { '*': string })['*'] ?? '';
    const slug = /^([^/]+)\.git(\/|$)/.exec(rest)?.[1] ?? '';
    // Who first, for every path: an unknown path answers the same 401 as a real one.
    const p = await authenticateGit(ctx, { authorization: header(req, 'authorization'), slug });
    req.principal = p;
    const method: 'GET' | 'POST' = req.method === 'POST' ? 'POST' : 'GET';
    const { service, pathInfo, query } = route(req, p.workspaceId, rest, method);
    enforce(service === 'git-receive-pack' ? decideGitPush(p) : decideGitFetch(p));

    const max = ctx.config.git.pushMaxBytes;
    if (Number(header(req, 'content-length') ?? 0) > max)
      throw new ServiceError(413, 'payload_too_large', `This push is larger than the server accepts (${Math.floor(max / 1048576)} MB)`);
    // git never compresses a push; a compressed one would be inflated by git past the size limit.
    if (service === 'git-receive-pack' && method === 'POST' && header(req, 'content-encoding')) {
      throw new ServiceError(400, 'invalid_request', 'Push bodies must not be compressed (Content-Encoding)');
    }
    const protocol = header(req, 'git-protocol');
    const common = {
      projectRoot: ctx.config.git.cacheDir,
      pathInfo,
      method,
      query,
      contentType: header(req, 'content-type'),
      contentEncoding: header(req, 'content-encoding'),
      contentLength: header(req, 'content-length'),
      gitProtocol: protocol && GIT_PROTOCOL.test(protocol) ? protocol : undefined,
      remoteUser: p.id,
      remoteAddr: req.ip,
      body: method === 'POST' ? req.raw : null,
      maxBodyBytes: ctx.config.git.pushMaxBytes,
    };

    let answer: BackendAnswer;
    if (service === 'git-receive-pack' && method === 'POST') {
      // A push holds the workspace's turn until git has finished: its ref update and the next
      // sync never interleave, and pushes through this node are serialised.
      const socket = await hooks.socket();
      answer = await new Promise<BackendAnswer>((resolve, reject) => {
        withCacheTurn(p.workspaceId, async () => {
          const repoDir = await syncCache(ctx, p.workspaceId, hookFiles(cacheRepoDir(ctx, p.workspaceId)));
          const token = hooks.register({ principal: p, repoDir });
          try {
            const a = await runBackend({ ...common, extraEnv: { CV_HOOK_SOCKET: socket, CV_HOOK_TOKEN: token } });
            resolve(a);
            await a.done;
          } finally {
            hooks.release(token);
          }
        }).catch(reject);
      });
    } else {
      // Reading while a push runs is safe in git: only a cache behind the database waits its turn.
      if (!(await cacheIsCurrent(ctx, p.workspaceId))) {
        await withCacheTurn(p.workspaceId, () => syncCache(ctx, p.workspaceId, hookFiles(cacheRepoDir(ctx, p.workspaceId))));
      }
      answer = await runBackend(common);
    }
    // A client gone before the answer was read must not leave git blocked on a full pipe.
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) answer.kill();
    });
    reply.code(answer.status).header('Cache-Control', answer.headers['cache-control'] ?? 'no-cache');
    for (const [k, v] of Object.entries(answer.headers)) if (k !== 'cache-control') reply.header(k, v);
    return reply.send(answer.body);
  };

  const config = { config: { auth: 'public' as const }, schema: { hide: true } };
  face.get('/git/*', config, handler);
  face.post('/git/*', config, handler);
}
