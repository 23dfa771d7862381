/**
 * The resources an OAuth token can be bound to (RFC 8707): this server's MCP endpoints, `/mcp`
 * (the person's workspace chosen at consent) and `/w/<slug>/mcp` (that workspace only). Every
 * URL is absolute, from PUBLIC_URL.
 */
export interface McpResource {
  /** The absolute URL, exactly as advertised and as a token is bound to it. */
  url: string;
  /** The workspace slug of `/w/<slug>/mcp`; null for `/mcp`. */
  slug: string | null;
}

/** Workspace slugs as src/core/workspaces.ts makes them, with room to spare. */
const SLUG_RE = /^[a-z0-9][a-z0-9-]{0,99}$/;

export function mcpResourceUrl(publicUrl: string, slug: string | null): string {
  return slug === null ? `${publicUrl}/mcp` : `${publicUrl}/w/${slug}/mcp`;
}

/** The MCP resource a URL names, or null when it is not one of this server's MCP endpoints. */
export function parseMcpResource(publicUrl: string, raw: string | undefined): McpResource | null {
  if (raw === undefined || raw.length > 2048) return null;
  if (raw === `${publicUrl}/mcp`) return { url: raw, slug: null };
  const prefix = `${publicUrl}/w/`;
  if (!raw.startsWith(prefix) || !raw.endsWith('/mcp')) return null;
  const slug = raw.slice(prefix.length, -'/mcp'.length);
  return SLUG_RE.test(slug) ? { url: raw, slug } : null;
}

/** A path of this server that is an MCP endpoint (`/mcp`, `/w/<slug>/mcp`), as a resource. */
export function mcpResourceForPath(publicUrl: string, path: string): McpResource | null {
  return parseMcpResource(publicUrl, `${publicUrl}${path}`);
}
