import type { FastifyBaseLogger } from 'fastify';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import {
  type CallToolRequest,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
  type CallToolResult,
  type ListToolsResult,
  type ServerNotification,
  type ServerRequest,
  type JSONRPCRequest,
  type JSONRPCResultResponse,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import { distance } from 'fastest-levenshtein';
import { z } from 'zod';
import type { CoreContext } from '../core/context.js';
import { badRequest } from '../core/errors.js';
import { listSpaces } from '../core/spaces.js';
import { decideToolGrant } from '../policy/tools.js';
import { enforce } from '../policy/pages.js';
import type { Principal } from '../policy/principal.js';
import { spaceIndexView } from '../presenters/spaces.js';
import { VERSION } from '../version.js';
import { PROMPT, runPrompt } from './prompt.js';
import { asServiceError, toolError, toolResult } from './results.js';
import { TOOLSETS, type ToolDef, type Toolset } from './tools/index.js';

/** Spec §4: the MCP server's name and version. */
export const SERVER_INFO = { name: 'service-connect', version: VERSION } as const;

/**
 * What `initialize` tells a client's model before its first call (the SDK sends it as the
 * server's `instructions`): where to start, how paths look, how to cite, what to do without the
 * write grant, and that more tools exist.
 */
export const INSTRUCTIONS = [
  "Context Vault: a team's knowledge as versioned markdown pages in Spaces and folders.",
  'Start with the load_project_context prompt or context_bundle (intent, scope); context_tree and service://index show Spaces and folders with summaries.',
  'Paths look like space/folder/page.md; a scope is a Space or space/folder.',
  'Cite the source line: the path and the short commit id.',
  'To edit, pass the commit_sha you read as base_sha to context_write; without the write grant use context_propose (a person reviews it).',
  'collab_inbox returns your events until you collab_ack them.',
  'More tools (append, history, changes since, move…): connect with ?toolset=extended.',
].join('\n');

/** What the HTTP face hands every handler of one request (through the transport's authInfo). */
export interface McpCallContext {
  principal: Principal;
  /** Spends the caller's bundle bucket (30 per minute), as GET/POST /api/v1/bundle do. */
  spendBundle: () => Promise<void>;
  /**
   * Spends the caller's API bucket for one tool call. The HTTP request already paid for its
   * first call; every further call of a JSON-RPC batch pays its own unit (issue 11), so a batch
   * of 100 calls costs what 100 requests cost.
   */
  spendCall: () => Promise<void>;
  /** Aborted when the client goes away or the server closes (ends inbox long-polls). */
  signal: AbortSignal;
  /** Which tools this endpoint serves (`/mcp?toolset=extended` asks for the extended set). */
  toolset: Toolset;
}

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

function callContext(extra: Extra): McpCallContext {
  const c = extra.authInfo?.extra?.mcp as McpCallContext | undefined;
  // The HTTP face authenticates before any message reaches a handler; this cannot happen.
  if (!c) throw new McpError(ErrorCode.InternalError, 'No caller');
  return c;
}

const LooseCallTool = z.object({ method: z.literal('tools/call'), params: z.unknown() });

/** JSON Schema of a tool's arguments, as clients see it (no `$schema` noise). */
function inputSchema(schema: z.ZodObject): Tool['inputSchema'] {
  const { $schema: _s, ...rest } = z.toJSONSchema(schema, { io: 'input' }) as Record<string, unknown>;
  return rest as Tool['inputSchema'];
}

/**
 * Everything that is the same for every request, built once at start: the tools/list answer
 * (JSON Schemas converted once), the tool table, and one JSON Schema validator. Profiling
 * showed that an McpServer built per request with its own validator and its own schema
 * conversions spends most of a small call on them.
 */
export interface McpShared {
  toolsets: Record<Toolset, ToolTable>;
  validator: AjvJsonSchemaValidator;
}

/** One toolset: the definitions, what each argument is (for coercion and suggestions), and the tools/list answer. */
interface ToolTable {
  tools: Map<string, ToolDef>;
  args: Map<string, ToolArgs>;
  toolList: ListToolsResult;
}

/** A tool's argument names, and those that take a number (`scalar`) or a list of numbers (`list`). */
interface ToolArgs {
  names: string[];
  numeric: Map<string, 'scalar' | 'list'>;
}

function isNumericSchema(s: unknown): boolean {
  const t = (s as { type?: unknown } | undefined)?.type;
  return t === 'integer' || t === 'number';
}

function toolArgs(schema: Tool['inputSchema']): ToolArgs {
  const numeric = new Map<string, 'scalar' | 'list'>();
  const props = (schema.properties ?? {}) as Record<string, { type?: unknown; items?: unknown }>;
  for (const [name, p] of Object.entries(props)) {
    if (isNumericSchema(p)) numeric.set(name, 'scalar');
    else if (p.type === 'array' && isNumericSchema(p.items)) numeric.set(name, 'list');
  }
  return { names: Object.keys(props), numeric };
}

function buildToolset(defs: readonly ToolDef[]): ToolTable {
  const args = new Map<string, ToolArgs>();
  const toolList: ListToolsResult = {
    tools: defs.map((t) => {
      const input = inputSchema(t.schema);
      args.set(t.name, toolArgs(input));
      return {
        name: t.name,
        description: t.description,
        inputSchema: input,
        ...(t.output ? { outputSchema: t.output as Tool['outputSchema'] } : {}),
        annotations: { readOnlyHint: t.readOnly, openWorldHint: false },
      };
    }),
  };
  return { tools: new Map(defs.map((t) => [t.name, t])), args, toolList };
}

/** A whole or decimal number written as a string, as models often send one: `"5"`, `" 4000 "`, `"-1"`, `"2.5"`. */
const NUMERIC_STRING = /^\s*-?\d+(\.\d+)?\s*$/;

/**
 * Numeric strings become numbers where the schema wants a number (or a list of them);
 * everything else is left for the schema to judge, so `"abc"` still fails with its message.
 */
export function coerceNumbers(args: unknown, spec: ToolArgs | undefined): unknown {
  if (!spec || spec.numeric.size === 0 || typeof args !== 'object' || args === null || Array.isArray(args)) return args;
  const out: Record<string, unknown> = { ...(args as Record<string, unknown>) };
  const num = (v: unknown): unknown => (typeof v === 'string' && NUMERIC_STRING.test(v) ? Number(v) : v);
  for (const [name, kind] of spec.numeric) {
    if (!(name in out)) continue;
    const v = out[name];
    out[name] = kind === 'scalar' ? num(v) : Array.isArray(v) ? v.map(num) : v;
  }
  return out;
}

/**
 * The known argument an unknown one most likely meant, if any is close: a typo (one edit in a
 * name of up to 4 letters, two up to 8, three beyond), another case, `-` or no `_` for `_`, or
 * the start of a longer name (`budget` for `budget_tokens`).
 */
export function suggestArgument(unknown: string, known: readonly string[]): string | undefined {
  const norm = (x: string) => x.toLowerCase().replace(/[-_]/g, '');
  const u = norm(unknown);
  let best: { name: string; d: number } | undefined;
  for (const k of known) {
    const n = norm(k);
    const limit = n.length <= 4 ? 1 : n.length <= 8 ? 2 : 3;
    const d = u === n ? 0 : u.length >= 4 && (n.startsWith(u) || u.startsWith(n)) ? 1 : distance(u, n);
    if (d <= limit && d < n.length && (!best || d < best.d)) best = { name: k, d };
  }
  return best?.name;
}

export function buildShared(): McpShared {
  return { toolsets: { spec: buildToolset(TOOLSETS.spec), extended: buildToolset(TOOLSETS.extended) }, validator: new AjvJsonSchemaValidator() };
}

/**
 * `x: message; …` from a zod error, for `invalid_request: …`, written for the model that sent
 * the call: an unknown argument names the likely one it meant (or the ones the tool takes), and
 * a required argument that is missing says so instead of "expected string, received undefined".
 */
export function argumentError(err: z.ZodError, args: unknown, spec: ToolArgs | undefined): string {
  const given = typeof args === 'object' && args !== null ? (args as Record<string, unknown>) : {};
  const known = spec?.names ?? [];
  const parts: string[] = [];
  // Unknown arguments first: the suggestion is usually the whole fix.
  const issues = [...err.issues].sort((a, b) => Number(b.code === 'unrecognized_keys') - Number(a.code === 'unrecognized_keys'));
  for (const i of issues) {
    if (i.code === 'unrecognized_keys') {
      for (const key of i.keys) {
        const like = suggestArgument(
          key,
          known.filter((k) => given[k] === undefined),
        );
        parts.push(
          like
            ? `unknown argument "${key}", did you mean "${like}"?`
            : `unknown argument "${key}"; this tool takes ${known.length > 0 ? known.map((k) => `"${k}"`).join(', ') : 'no arguments'}`,
        );
      }
      continue;
    }
    const at = i.path.length > 0 ? i.path.join('.') : 'arguments';
    if (i.path.length === 1 && i.code === 'invalid_type' && given[String(i.path[0])] === undefined) parts.push(`${at}: required`);
    else parts.push(`${at}: ${i.message}`);
  }
  return parts.join('; ');
}

async function callTool(
  ctx: CoreContext,
  shared: McpShared,
  log: FastifyBaseLogger,
  name: string,
  args: unknown,
  call: McpCallContext,
  sdkSignal: AbortSignal | undefined,
): Promise<CallToolResult> {
  const { principal: p, signal, spendBundle, spendCall, toolset } = call;
  const tool = shared.toolsets[toolset].tools.get(name);
  // Unknown tool: a protocol error (JSON-RPC -32602), as the MCP specification says.
  if (!tool) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}`);
  try {
    await spendCall();
    const spec = shared.toolsets[toolset].args.get(name);
    const given = coerceNumbers(args ?? {}, spec);
    const parsed = tool.schema.safeParse(given);
    if (!parsed.success) throw badRequest(`Invalid arguments for ${name}: ${argumentError(parsed.error, given, spec)}`);
    enforce(decideToolGrant(p, tool.grants));
    return toolResult(
      await tool.run(parsed.data, {
        ctx,
        p,
        spendBundle,
        get signal() {
          return anySignal(signal, sdkSignal);
        },
      }),
      tool.output !== undefined,
    );
  } catch (e) {
    const { error, unexpected } = asServiceError(e);
    if (unexpected) log.error({ err: e, tool: name }, 'MCP tool failed');
    return toolError(error, tool.forbiddenHint);
  }
}

/**
 * A plain `tools/call` of a known tool (one request alone in its POST, params of just `name`
 * and an `arguments` object), answered without the SDK's protocol machinery: its per-request
 * AbortController and handler context, and its zod parses of the request and of the result.
 * These were a third of an MCP call's CPU. The answer is the one the SDK path gives (the same
 * callTool; results are well-formed by construction); anything else returns undefined and goes
 * through the SDK: unknown tools (a protocol error), `_meta` or task params, batches.
 */
export function directToolCall(
  ctx: CoreContext,
  shared: McpShared,
  log: FastifyBaseLogger,
  request: JSONRPCRequest,
  call: McpCallContext,
): Promise<JSONRPCResultResponse> | undefined {
  if (request.method !== 'tools/call') return undefined;
  const params = request.params as Record<string, unknown> | undefined;
  if (params === undefined || typeof params.name !== 'string') return undefined;
  for (const k of Object.keys(params)) if (k !== 'name' && k !== 'arguments') return undefined;
  const args = params.arguments;
  if (args !== undefined && (typeof args !== 'object' || args === null || Array.isArray(args))) return undefined;
  if (!shared.toolsets[call.toolset].tools.has(params.name)) return undefined;
  return callTool(ctx, shared, log, params.name, args, call, undefined).then((result) => ({ jsonrpc: '2.0' as const, id: request.id, result }));
}

/** The request's own signal and the SDK's (a notifications/cancelled), combined only when used. */
function anySignal(a: AbortSignal, b: AbortSignal | undefined): AbortSignal {
  return b ? AbortSignal.any([a, b]) : a;
}

/**
 * One McpServer for one HTTP request (stateless Streamable HTTP: a server and a transport
 * serve exactly one POST). Only the cheap parts are per request: the handlers close over
 * the shared table and read the caller from the request's authInfo.
 */
export function buildServer(ctx: CoreContext, shared: McpShared, log: FastifyBaseLogger): McpServer {
  const mcp = new McpServer(SERVER_INFO, { jsonSchemaValidator: shared.validator, instructions: INSTRUCTIONS });
  const server = mcp.server;
  server.registerCapabilities({ tools: {} });
  server.setRequestHandler(ListToolsRequestSchema, (_req, extra) => shared.toolsets[callContext(extra).toolset].toolList);
  // Registered with a loose schema: the SDK then checks the request against the real one itself
  // and answers a malformed call -32602 (its own strict parse would answer -32603).
  server.setRequestHandler(LooseCallTool, (req, extra) => {
    // The SDK checked the request against CallToolRequestSchema before calling us.
    const params = req.params as CallToolRequest['params'];
    return callTool(ctx, shared, log, params.name, params.arguments, callContext(extra), extra.signal);
  });

  mcp.registerResource(
    'space-index',
    'service://index',
    { description: 'JSON list of the Spaces you can read, with summaries', mimeType: 'application/json' },
    async (uri, extra) => {
      const { principal, spendCall } = callContext(extra);
      // A read in a batch spends its own unit, as a tool call does.
      await spendCall().catch((e: unknown) => {
        const { error } = asServiceError(e);
        throw new McpError(-32000, `${error.code}: ${error.message}`);
      });
      const index = spaceIndexView(await listSpaces(ctx, principal));
      return { contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify(index) }] };
    },
  );

  mcp.registerPrompt(PROMPT.name, { description: PROMPT.description, argsSchema: PROMPT.args }, async (args, extra) =>
    runPrompt(ctx, callContext(extra), args),
  );
  return mcp;
}
