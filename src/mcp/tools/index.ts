import type { ToolDef } from './define.js';
import { EXTENDED_COLLAB_TOOLS } from './extended-collab.js';
import { EXTENDED_PAGE_TOOLS } from './extended-pages.js';
import { SPEC_TOOLS } from './spec.js';
import { WATCH_TOOLS } from './extended-watch.js';

/**
 * The two toolsets a client can be served. `spec`: the spec's 16 tools, the default, so the
 * list an LLM reads stays compact. `extended`: those plus the calls beyond the spec, asked for
 * per endpoint (`/mcp?toolset=extended`).
 */
export type Toolset = 'spec' | 'extended';

/** Tools beyond the spec, each through the same core functions and policy as REST. */
const EXTENDED_TOOLS: ToolDef[] = [...EXTENDED_PAGE_TOOLS, ...EXTENDED_COLLAB_TOOLS, ...WATCH_TOOLS];

export const TOOLSETS: Record<Toolset, readonly ToolDef[]> = {
  spec: SPEC_TOOLS,
  extended: [...SPEC_TOOLS, ...EXTENDED_TOOLS],
};

export { type ToolCall, type ToolDef } from './define.js';
