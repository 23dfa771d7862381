import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import { authenticateMcp } from '../auth/resolve.js';
import { isServiceError, ServiceError } from '../core/errors.js';
import { toServiceError } from '../http/shared/errors.js';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { ExchangeTransport } from './exchange.js';
import { buildServer, buildShared, directToolCall, type McpCallContext } from './server.js';
import type { Toolset } from './tools/index.js';

/** The face's two endpoints: the token's own workspace, and one pinned to a workspace slug. */
export const MCP_PATHS = ['/mcp', '/w/:slug/mcp'] as const;

/** JSON-RPC error codes used at the HTTP level (the SDK's own conventions). */
const PARSE_ERROR = -32700;
const SERVER_ERROR = -32000;
const INTERNAL_ERROR = -32603;

/** Idle servers kept for reuse. */
const POOL = 64;

/** A pooled server and the transport it stays connected to. */
interface Slot {
  mcp: McpServer;
  transport: ExchangeTransport;
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/**
 * RFC 9728 §3.1 path-aware protected resource metadata URL of an MCP endpoint: the
 * well-known segment goes between the host and the resource's path.
 */
export function resourceMetadataUrl(publicUrl: string, slug: string | undefined): string {
  const base = new URL(publicUrl);
  const prefix = base.pathname.replace(/\/+$/, '');
  const resource = slug === undefined ? '/mcp' : `/w/${encodeURIComponent(slug)}/mcp`;
  return `${base.origin}/.well-known/oauth-protected-resource${prefix}${resource}`;
}

/** The toolset asked for in the query (`?toolset=spec|extended`); undefined when unknown. */
function toolsetOf(query: unknown): Toolset | undefined {
  const v = (query as Record<string, unknown> | undefined)?.toolset;
  if (v === undefined || v === 'spec') return 'spec';
  return v === 'extended' ? 'extended' : undefined;
}

function sendRpcError(
  reply: FastifyReply,
  e: ServiceError,
  rpcCode = e.status >= 500 && e.code !== 'unavailable' ? INTERNAL_ERROR : SERVER_ERROR,
): FastifyReply {
  return reply
    .code(e.status)
    .type('application/json; charset=utf-8')
    .send({ jsonrpc: '2.0', error: { code: rpcCode, message: `${e.code}: ${e.message}` }, id: null });
}

/**
 * The MCP face (spec §4 "MCP endpoints"): POST /mcp and /w/:slug/mcp, stateless Streamable
 * HTTP with JSON responses. The two endpoints share no prefix, so app.ts registers the face at
 * the root and it declares both paths. It owns its body parser, its error handler and its
 * caller hook: bearer tokens only, checked in auth/ (authenticateMcp). Every failure outside a
 * tool — no or bad token, bad JSON, wrong content type, too large, rate limited, wrong method —
 * answers a JSON-RPC error body, never the REST one and never a 500. Host check and rate limits
 * (one API bucket shared with /api/v1) come from the root.
 */
export async function mcpFace(face: FastifyInstance): Promise<void> {
  const ctx = face.ctx;
  const shared = buildShared();
  // Servers are reused, one request at a time each, and stay connected to their transport:
  // building one per request was a tenth of a call, and closing one after each (the SDK aborts
  // its handlers' signals and builds a "Connection closed" error, stack and all) a tenth again.
  const idle: Slot[] = [];
  const newSlot = async (): Promise<Slot> => {
    const mcp = buildServer(ctx, shared, face.log);
    const transport = new ExchangeTransport();
    await mcp.connect(transport);
    return { mcp, transport };
  };
  // Long-polls in flight end when the server closes; one whose request was still on its way in
  // (authentication) when the close began ends as soon as it gets here.
  const inFlight = new Set<AbortController>();
  let closing = false;
  face.addHook('preClose', async () => {
    closing = true;
    for (const ac of inFlight) ac.abort();
  });

  // The body is read as text and parsed here, so bad JSON answers a JSON-RPC parse error.
  face.removeAllContentTypeParsers();
  face.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => done(null, body));

  face.setErrorHandler((err, req, reply) => {
    const e = toServiceError(err, req);
    return sendRpcError(reply, e, e.code === 'invalid_json' ? PARSE_ERROR : undefined);
  });

  // Who is calling: bearer tokens only (agent keys now, OAuth later), checked in auth/.
  face.addHook('onRequest', async (req, reply) => {
    const slug = (req.params as { slug?: string }).slug;
    try {
      req.principal = await authenticateMcp(ctx, { authorization: headerValue(req.headers.authorization), ip: req.ip, pinnedWorkspace: slug });
    } catch (e) {
      if (isServiceError(e) && e.status === 401) {
        const meta = `resource_metadata="${resourceMetadataUrl(ctx.config.publicUrl, slug)}"`;
        const hasToken = headerValue(req.headers.authorization)?.trim();
        reply.header('WWW-Authenticate', hasToken ? `Bearer error="invalid_token", ${meta}` : `Bearer ${meta}`);
      }
      throw e;
    }
  });

  const post = async (req: FastifyRequest, reply: FastifyReply) => {
    const type = headerValue(req.headers['content-type']) ?? '';
    if (!/^application\/json\s*(;|$)/i.test(type)) {
      return sendRpcError(reply, new ServiceError(415, 'unsupported_media_type', 'Content-Type must be application/json'));
    }
    let message: unknown;
    try {
      message = JSON.parse(typeof req.body === 'string' ? req.body : '');
    } catch {
      return sendRpcError(reply, new ServiceError(400, 'invalid_json', 'Parse error: the body is not valid JSON'), PARSE_ERROR);
    }
    const toolset = toolsetOf(req.query);
    if (toolset === undefined) {
      return sendRpcError(reply, new ServiceError(400, 'invalid_request', 'toolset must be spec or extended'));
    }
    const ac = new AbortController();
    inFlight.add(ac);
    if (closing) ac.abort();
    const slot = idle.pop() ?? (await newSlot());
    const raw = reply.raw;
    let kept = false;
    // A finished answer leaves the server ready for the next request; only a client that went
    // away before its answer ends the call's work (an inbox long-poll) and the server with it.
    const done = () => {
      inFlight.delete(ac);
      if (raw.writableFinished) return;
      ac.abort();
      if (!kept) void slot.mcp.close().catch(() => {});
    };
    raw.once('close', done);
    try {
      // The request's own unit (spent in the limits hook) pays for its first tool call.
      let calls = 0;
      const call: McpCallContext = {
        principal: req.principal!,
        signal: ac.signal,
        toolset,
        spendBundle: () => req.spendLimit('bundle'),
        spendCall: async () => {
          if (++calls > 1) await req.spendLimit('api');
        },
      };
      const authInfo: AuthInfo = { token: '', clientId: call.principal.id, scopes: [], extra: { mcp: call } };
      const answer = await slot.transport.exchange(
        message,
        { accept: headerValue(req.headers.accept), protocolVersion: headerValue(req.headers['mcp-protocol-version']) },
        authInfo,
        (request) => directToolCall(ctx, shared, face.log, request, call),
      );
      // The exchange is over: the server goes back to the pool for the next request.
      if (!ac.signal.aborted && slot.transport.idle && idle.length < POOL) {
        kept = true;
        idle.push(slot);
      } else void slot.mcp.close().catch(() => {});
      reply.code(answer.status);
      if (answer.body === null) return reply.send();
      return reply.type('application/json').send(JSON.stringify(answer.body));
    } catch (err) {
      if (!kept) void slot.mcp.close().catch(() => {});
      req.log.error({ err }, 'MCP request failed');
      if (!raw.headersSent) {
        return reply
          .code(500)
          .type('application/json; charset=utf-8')
          .send(
            JSON.stringify({
              jsonrpc: '2.0',
              error: { code: INTERNAL_ERROR, message: 'internal_error: Something went wrong on our side; it has been logged' },
              id: null,
            }),
          );
      }
      if (!raw.writableEnded) raw.end();
      return reply;
    }
  };

  // Stateless: no server-initiated stream to GET and no session to DELETE (Streamable HTTP: 405).
  const notAllowed = async (req: FastifyRequest, reply: FastifyReply) => {
    reply.header('Allow', 'POST');
    return sendRpcError(
      reply,
      new ServiceError(405, 'method_not_allowed', `${req.method} is not supported: this MCP server is stateless; POST JSON-RPC messages`),
    );
  };

  for (const url of MCP_PATHS) {
    const opts = { config: { auth: 'public' as const }, schema: { hide: true } };
    face.post(url, opts, post);
    face.get(url, opts, notAllowed);
    face.delete(url, opts, notAllowed);
  }
}
