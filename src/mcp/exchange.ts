import type { Transport, TransportSendOptions } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import {
  JSONRPCMessageSchema,
  SUPPORTED_PROTOCOL_VERSIONS,
  type JSONRPCMessage,
  type JSONRPCRequest,
  type RequestId,
} from '@modelcontextprotocol/sdk/types.js';

/** What an HTTP exchange answers: a status and a JSON-RPC body (null: no body). */
export interface ExchangeAnswer {
  status: number;
  body: unknown;
}

const MAX_BATCH = 100;

/**
 * The SDK's message checks are zod parses (its type guards too): a fifth of an MCP call's CPU.
 * A plain request (what nearly every POST holds) is recognised by its shape, exactly as
 * JSONRPCRequestSchema would accept it; anything else, or a request with `_meta` in its params,
 * goes through the schema.
 */
function plainRequest(m: unknown): m is JSONRPCRequest {
  if (typeof m !== 'object' || m === null || Array.isArray(m)) return false;
  const r = m as Record<string, unknown>;
  for (const k of Object.keys(r)) if (k !== 'jsonrpc' && k !== 'id' && k !== 'method' && k !== 'params') return false;
  if (r.jsonrpc !== '2.0' || typeof r.method !== 'string') return false;
  if (!(typeof r.id === 'string' || Number.isSafeInteger(r.id))) return false;
  if (r.params === undefined) return true;
  return typeof r.params === 'object' && r.params !== null && !Array.isArray(r.params) && !Object.hasOwn(r.params, '_meta');
}

function parseMessage(m: unknown): JSONRPCMessage {
  return plainRequest(m) ? m : JSONRPCMessageSchema.parse(m);
}

/** A valid message that expects a response (a notification has no id). */
const isRequest = (m: JSONRPCMessage): m is JSONRPCRequest => 'method' in m && 'id' in m;

const rpcError = (status: number, code: number, message: string): ExchangeAnswer => ({
  status,
  body: { jsonrpc: '2.0', error: { code, message }, id: null },
});

/**
 * Stateless Streamable HTTP with JSON responses, as an SDK Transport: each POST is one exchange
 * (one at a time; the server stays connected between them), its messages go to the connected
 * McpServer, and the exchange resolves once every request in it has its response. The checks
 * are the SDK Streamable HTTP transport's (Accept, JSON-RPC shape, batch size, distinct ids,
 * one initialize per batch, protocol version); what it leaves out is what a
 * stateless JSON server never uses (sessions, SSE streams, resumption), and the conversion of
 * every request to a web Request and back, which was most of its cost per call.
 */
export class ExchangeTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage, extra?: { authInfo?: AuthInfo }) => void;
  sessionId = undefined;
  private readonly waiting = new Map<RequestId, JSONRPCMessage | null>();
  private finish: ((a: ExchangeAnswer) => void) | undefined;
  private batch = false;
  /** Requests handed to the server and not answered yet, over every exchange so far. */
  private outstanding = 0;

  /**
   * True when every request the server was given has been answered: no handler of an earlier
   * exchange can still answer into the next one, so the server may serve another caller.
   */
  get idle(): boolean {
    return this.outstanding === 0;
  }

  async start(): Promise<void> {}

  /** Ends the exchange; one still waiting (the client went away, the server is closing) answers 503. */
  async close(): Promise<void> {
    this.waiting.clear();
    const finish = this.finish;
    this.finish = undefined;
    finish?.(rpcError(503, -32000, 'unavailable: the exchange was closed before its answer'));
    this.onclose?.();
  }

  async send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    // JSON mode: notifications and requests from the server during a call have no channel.
    if ('method' in message || !('result' in message || 'error' in message)) return;
    const id = message.id ?? options?.relatedRequestId;
    if (id !== undefined && id !== null) this.outstanding--;
    if (id === undefined || this.waiting.get(id) !== null) return;
    this.waiting.set(id, message);
    if ([...this.waiting.values()].some((m) => m === null)) return;
    const responses = [...this.waiting.values()];
    const finish = this.finish;
    this.finish = undefined;
    finish?.({ status: 200, body: this.batch ? responses : responses[0] });
  }

  /**
   * Runs one POST body (already parsed JSON) through the server. `direct` may answer a request
   * alone in its POST itself (server.ts directToolCall) once the checks here have passed; when
   * it returns undefined the server answers.
   */
  exchange(
    raw: unknown,
    headers: { accept: string | undefined; protocolVersion: string | undefined },
    authInfo: AuthInfo,
    direct?: (request: JSONRPCRequest) => Promise<JSONRPCMessage> | undefined,
  ): Promise<ExchangeAnswer> {
    const accept = headers.accept ?? '';
    if (!accept.includes('application/json') || !accept.includes('text/event-stream')) {
      return Promise.resolve(rpcError(406, -32000, 'Not Acceptable: Client must accept both application/json and text/event-stream'));
    }
    if (Array.isArray(raw) && raw.length > MAX_BATCH) {
      return Promise.resolve(rpcError(400, -32600, `Invalid Request: Batch must not exceed ${MAX_BATCH} messages`));
    }
    let messages: JSONRPCMessage[];
    try {
      messages = (Array.isArray(raw) ? raw : [raw]).map(parseMessage);
    } catch {
      return Promise.resolve(rpcError(400, -32700, 'Parse error: Invalid JSON-RPC message'));
    }
    // The SDK's own initialize handler checks the params.
    const initialize = messages.some((m) => isRequest(m) && m.method === 'initialize');
    if (initialize && messages.length > 1) {
      return Promise.resolve(rpcError(400, -32600, 'Invalid Request: Only one initialization request is allowed'));
    }
    const version = headers.protocolVersion;
    if (!initialize && version !== undefined && !SUPPORTED_PROTOCOL_VERSIONS.includes(version)) {
      return Promise.resolve(
        rpcError(400, -32000, `Bad Request: Unsupported protocol version: ${version} (supported versions: ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')})`),
      );
    }
    const requests = messages.filter(isRequest);
    // An id names one answer: two requests under one id could not be told apart.
    if (new Set(requests.map((r) => r.id)).size !== requests.length) {
      return Promise.resolve(rpcError(400, -32600, 'Invalid Request: the requests of a batch need distinct ids'));
    }
    // The transport serves one exchange after another (the face pools connected servers).
    this.waiting.clear();
    if (requests.length === 0) {
      for (const m of messages) this.onmessage?.(m, { authInfo });
      return Promise.resolve({ status: 202, body: null });
    }
    this.batch = Array.isArray(raw);
    const only = !this.batch && requests.length === 1 && messages.length === 1 ? direct?.(requests[0]!) : undefined;
    if (only) return only.then((body) => ({ status: 200, body }));
    return new Promise<ExchangeAnswer>((resolve) => {
      this.finish = resolve;
      for (const r of requests) this.waiting.set(r.id, null);
      this.outstanding += requests.length;
      for (const m of messages) this.onmessage?.(m, { authInfo });
    });
  }
}
