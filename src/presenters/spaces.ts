import type { SpaceRecord } from '../core/spaces.js';

/** The Spaces a caller may read as each face shows them; one source: `listSpaces` (core/spaces.ts). */

/** `GET /api/v1/spaces`, and `context_tree` without a path. */
export function spacesView(spaces: SpaceRecord[]) {
  return { spaces };
}

/** The MCP resource `service://index`: the Spaces with their summaries. */
export function spaceIndexView(spaces: SpaceRecord[]) {
  return { spaces: spaces.map((s) => ({ id: s.id, name: s.name, summary: s.summary })) };
}
