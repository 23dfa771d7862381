import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import { badRequest } from '../../core/errors.js';
import type { Action, Principal } from '../../policy/principal.js';
import { SCOPE_MAX_CHARS } from '../../retrieval/search-input.js';

/**
 * What every MCP tool is made of: its definition, the call context its handler gets, and the
 * argument helpers the tool groups share (spec.ts: the spec's 16; extended*.ts: the opt-in
 * extended toolset).
 */

/** What a tool handler gets besides its arguments. */
export interface ToolCall {
  ctx: CoreContext;
  p: Principal;
  /** Ends long-polls when the client goes away or the server closes. */
  signal: AbortSignal | undefined;
  /** Spends the caller's bundle bucket; throws 429 `rate_limited` when it is empty. */
  spendBundle: () => Promise<void>;
}

export interface ToolDef {
  name: string;
  description: string;
  schema: z.ZodObject;
  /** The spec's Grant column; empty: any caller. */
  grants: readonly Action[];
  readOnly: boolean;
  /** Appended to a `forbidden` error of this tool (e.g. where to go instead). */
  forbiddenHint?: string;
  /**
   * JSON Schema of the result (MCP 2025-06-18 `outputSchema`): declared only by tools whose
   * answer is always one JSON object; the result then also comes as `structuredContent`, which
   * clients validate against it. Kept to the fields always present, so it stays small in
   * tools/list and never rejects a valid answer.
   */
  output?: OutputSchema;
  /** Called with the arguments the schema parsed (src/mcp/server.ts). */
  run(args: unknown, call: ToolCall): Promise<unknown>;
}

/** A JSON Schema object as MCP's `outputSchema` takes it (type object at the root). */
export interface OutputSchema {
  type: 'object';
  properties: Record<string, object>;
  required: string[];
}

type Json = Record<string, object>;

/** An object schema requiring every field named, unless `optional` names it. */
export function out(properties: Json, optional: readonly string[] = []): OutputSchema {
  return { type: 'object', properties, required: Object.keys(properties).filter((k) => !optional.includes(k)) };
}

/** Field schemas for `out`, the few kinds the results use. */
export const J = {
  str: { type: 'string' },
  int: { type: 'integer' },
  num: { type: 'number' },
  bool: { type: 'boolean' },
  arr: { type: 'array' },
  obj: { type: 'object' },
  strOrNull: { type: ['string', 'null'] },
} as const;

/** A tool whose `run` sees its own schema's parsed arguments, typed; the table erases the type. */
export function tool<S extends z.ZodObject>(
  t: Omit<ToolDef, 'schema' | 'run'> & { schema: S; run(args: z.infer<S>, call: ToolCall): Promise<unknown> },
): ToolDef {
  return t as ToolDef;
}

export const Scope = z.string().min(1).max(SCOPE_MAX_CHARS).describe('Space or space/folder');

export const INBOX_MAX_WAIT_MCP_S = 20;

/** One page reference out of id / node_id / path (the spec's alternatives). */
export function pageRef(a: { id?: string | undefined; node_id?: string | undefined; path?: string | undefined }, names: string): string {
  const given = [a.id, a.node_id, a.path].filter((x): x is string => x !== undefined);
  if (given.length !== 1) throw badRequest(`Name the page with exactly one of ${names}`);
  return given[0]!;
}

/** A Space or `space/folder…` scope, split as the search filters take it. */
export function splitScope(scope: string | undefined): { space?: string; folder?: string } {
  if (scope === undefined) return {};
  const s = scope.replace(/^\/+|\/+$/g, '');
  const space = s.split('/')[0]!;
  return s.includes('/') ? { space, folder: s } : { space };
}
