import type { Transport, TransportSendOptions } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import {
  isInitializeRequest,
  isJSONRPCErrorResponse,
  isJSONRPCRequest,
  isJSONRPCResultResponse,
  JSONRPCMessageSchema,
  SUPPORTED_PROTOCOL_VERSIONS,
  type JSONRPCMessage,
  type RequestId,
} from '@modelcontextprotocol/sdk/types.js';

/** What an HTTP exchange answers: a status and a JSON-RPC body (null: no body). */
export interface ExchangeAnswer {
  status: number;
  body: unknown;
}

const MAX_BATCH = 100;

const rpcError = (status: number, code: number, message: string): ExchangeAnswer => ({
  status,
  body: { jsonrpc: '2.0', error: { code, message }, id: null },
});

/**
 * One POST of stateless Streamable HTTP with JSON responses, as an SDK Transport: the messages
 * of the body go to the connected McpServer, and the exchange resolves once every request in
 * it has its response. The checks are the SDK Streamable HTTP transport's (Accept, JSON-RPC
 * shape, batch size, one initialize per batch, protocol version); what it leaves out is what a
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
    if (!isJSONRPCResultResponse(message) && !isJSONRPCErrorResponse(message)) return;
    const id = message.id ?? options?.relatedRequestId;
    if (id === undefined || !this.waiting.has(id)) return;
    this.waiting.set(id, message);
    if ([...this.waiting.values()].some((m) => m === null)) return;
    const responses = [...this.waiting.values()];
    const finish = this.finish;
    this.finish = undefined;
    finish?.({ status: 200, body: this.batch ? responses : responses[0] });
  }

  /** Runs one POST body (already parsed JSON) through the server. */
  exchange(raw: unknown, headers: { accept: string | undefined; protocolVersion: string | undefined }, authInfo: AuthInfo): Promise<ExchangeAnswer> {
    const accept = headers.accept ?? '';
    if (!accept.includes('application/json') || !accept.includes('text/event-stream')) {
      return Promise.resolve(rpcError(406, -32000, 'Not Acceptable: Client must accept both application/json and text/event-stream'));
    }
    if (Array.isArray(raw) && raw.length > MAX_BATCH) {
      return Promise.resolve(rpcError(400, -32600, `Invalid Request: Batch must not exceed ${MAX_BATCH} messages`));
    }
    let messages: JSONRPCMessage[];
    try {
      messages = (Array.isArray(raw) ? raw : [raw]).map((m) => JSONRPCMessageSchema.parse(m));
    } catch {
      return Promise.resolve(rpcError(400, -32700, 'Parse error: Invalid JSON-RPC message'));
    }
    const initialize = messages.some((m) => isInitializeRequest(m));
    if (initialize && messages.length > 1) {
      return Promise.resolve(rpcError(400, -32600, 'Invalid Request: Only one initialization request is allowed'));
    }
    const version = headers.protocolVersion;
    if (!initialize && version !== undefined && !SUPPORTED_PROTOCOL_VERSIONS.includes(version)) {
      return Promise.resolve(
        rpcError(400, -32000, `Bad Request: Unsupported protocol version: ${version} (supported versions: ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')})`),
      );
    }
    const requests = messages.filter((m) => isJSONRPCRequest(m));
    if (requests.length === 0) {
      for (const m of messages) this.onmessage?.(m, { authInfo });
      return Promise.resolve({ status: 202, body: null });
    }
    this.batch = Array.isArray(raw);
    return new Promise<ExchangeAnswer>((resolve) => {
      this.finish = resolve;
      for (const r of requests) this.waiting.set(r.id, null);
      for (const m of messages) this.onmessage?.(m, { authInfo });
    });
  }
}
