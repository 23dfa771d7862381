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
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
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
  toolsets: Record<Toolset, { tools: Map<string, ToolDef>; toolList: ListToolsResult }>;
  validator: AjvJsonSchemaValidator;
}

function buildToolset(defs: readonly ToolDef[]): { tools: Map<string, ToolDef>; toolList: ListToolsResult } {
  const toolList: ListToolsResult = {
    tools: defs.map((t) => ({
      name: t.name,
      description: t.description,
      inputSchema: inputSchema(t.schema),
      annotations: { readOnlyHint: t.readOnly, openWorldHint: false },
    })),
  };
  return { tools: new Map(defs.map((t) => [t.name, t])), toolList };
}

export function buildShared(): McpShared {
  return { toolsets: { spec: buildToolset(TOOLSETS.spec), extended: buildToolset(TOOLSETS.extended) }, validator: new AjvJsonSchemaValidator() };
}

/** `args.x: message; …` from a zod error, for `invalid_request: …`. */
function argumentError(err: z.ZodError): string {
  return err.issues.map((i) => `${i.path.length > 0 ? i.path.join('.') : 'arguments'}: ${i.message}`).join('; ');
}

async function callTool(ctx: CoreContext, shared: McpShared, log: FastifyBaseLogger, name: string, args: unknown, extra: Extra): Promise<CallToolResult> {
  const { principal: p, signal, spendBundle, spendCall, toolset } = callContext(extra);
  const tool = shared.toolsets[toolset].tools.get(name);
  // Unknown tool: a protocol error (JSON-RPC -32602), as the MCP specification says.
  if (!tool) throw new McpError(ErrorCode.InvalidParams, `Unknown tool: ${name}`);
  try {
    await spendCall();
    const parsed = tool.schema.safeParse(args ?? {});
    if (!parsed.success) throw badRequest(`Invalid arguments for ${name}: ${argumentError(parsed.error)}`);
    enforce(decideToolGrant(p, tool.grants));
    return toolResult(
      await tool.run(parsed.data, {
        ctx,
        p,
        spendBundle,
        get signal() {
          return anySignal(signal, extra.signal);
        },
      }),
    );
  } catch (e) {
    const { error, unexpected } = asServiceError(e);
    if (unexpected) log.error({ err: e, tool: name }, 'MCP tool failed');
    return toolError(error, tool.forbiddenHint);
  }
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
  const mcp = new McpServer(SERVER_INFO, { jsonSchemaValidator: shared.validator });
  const server = mcp.server;
  server.registerCapabilities({ tools: {} });
  server.setRequestHandler(ListToolsRequestSchema, (_req, extra) => shared.toolsets[callContext(extra).toolset].toolList);
  // Registered with a loose schema: the SDK then checks the request against the real one itself
  // and answers a malformed call -32602 (its own strict parse would answer -32603).
  server.setRequestHandler(LooseCallTool, (req, extra) => {
    // The SDK checked the request against CallToolRequestSchema before calling us.
    const params = req.params as CallToolRequest['params'];
    return callTool(ctx, shared, log, params.name, params.arguments, extra);
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
