import { expect } from 'vitest';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

/** The SDK's own client over Streamable HTTP, presenting a bearer token. */
export async function connectMcp(base: string, token: string, path = '/mcp'): Promise<McpClient> {
  const client = new McpClient({ name: 'vault-tests', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(base + path), { requestInit: { headers: { authorization: `Bearer ${token}` } } });
  await client.connect(transport);
  return client;
}

export interface ToolOutcome {
  isError: boolean;
  text: string;
  json: any;
}

/** Calls a tool and returns its one text item (parsed as JSON when it is JSON). */
export async function call(client: McpClient, name: string, args: Record<string, unknown> = {}): Promise<ToolOutcome> {
  const r = await client.callTool({ name, arguments: args });
  const content = r.content as { type: string; text: string }[];
  expect(content).toHaveLength(1);
  expect(content[0]!.type).toBe('text');
  const text = content[0]!.text;
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { isError: r.isError === true, text, json };
}

/** A successful tool call's JSON. */
export async function ok(client: McpClient, name: string, args: Record<string, unknown> = {}): Promise<any> {
  const r = await call(client, name, args);
  expect(r.isError, `${name}: ${r.text}`).toBe(false);
  return r.json ?? r.text;
}

/** A tool error: isError and text `<code>: <message>`. */
export async function fails(client: McpClient, name: string, args: Record<string, unknown>, code: string): Promise<string> {
  const r = await call(client, name, args);
  expect(r.isError, `${name}: ${r.text}`).toBe(true);
  expect(r.text).toMatch(new RegExp(`^${code}: \\S`));
  return r.text;
}

/** The spec's 16 tools (its table, in its order): what tools/list on /mcp must hold, exactly. */
export const SPEC_16 = [
  'context_bundle',
  'context_search',
  'context_get',
  'context_tree',
  'context_related',
  'context_propose',
  'context_write',
  'context_log',
  'context_archive',
  'context_restore',
  'collab_post',
  'collab_inbox',
  'collab_ack',
  'context_whoami',
  'search',
  'fetch',
];

/** What a Streamable HTTP client must accept. */
export const MCP_ACCEPT = 'application/json, text/event-stream';

export interface RawAnswer {
  status: number;
  headers: Headers;
  text: string;
  json: any;
}

/** One raw HTTP request to an MCP endpoint (POST JSON by default), its body parsed when it is JSON. */
export async function rawMcp(
  base: string,
  path: string,
  init: { method?: string; token?: string; body?: string; headers?: Record<string, string> } = {},
): Promise<RawAnswer> {
  const headers: Record<string, string> = { accept: MCP_ACCEPT, 'content-type': 'application/json', ...(init.headers ?? {}) };
  if (init.token) headers.authorization = `Bearer ${init.token}`;
  const res = await fetch(base + path, { method: init.method ?? 'POST', headers, body: init.body });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}
