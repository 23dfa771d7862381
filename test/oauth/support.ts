import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import type { OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';

/** Where the test's MCP client says it listens for the redirect; nothing needs to listen there. */
export const REDIRECT = 'http://127.0.0.1:53682/callback';

/**
 * An in-memory OAuthClientProvider, as an MCP client application implements one: the SDK's own
 * OAuth flow (discovery from the 401, registration, PKCE, resource, code exchange, refresh)
 * drives it; the test plays the person's browser at `redirectToAuthorization`.
 */
export class MemoryProvider implements OAuthClientProvider {
  info: OAuthClientInformationMixed | undefined;
  saved: OAuthTokens | undefined;
  verifier = '';
  authorizationUrl: URL | undefined;
  constructor(readonly metadata: Partial<OAuthClientMetadata> = {}) {}
  get redirectUrl(): string {
    return REDIRECT;
  }
  get clientMetadata(): OAuthClientMetadata {
    return {
      redirect_uris: [REDIRECT],
      client_name: 'Test MCP client',
      token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      ...this.metadata,
    };
  }
  state(): string {
    return 'state-123';
  }
  clientInformation() {
    return this.info;
  }
  saveClientInformation(i: OAuthClientInformationMixed) {
    this.info = i;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(t: OAuthTokens) {
    this.saved = t;
  }
  redirectToAuthorization(url: URL) {
    this.authorizationUrl = url;
  }
  saveCodeVerifier(v: string) {
    this.verifier = v;
  }
  codeVerifier() {
    return this.verifier;
  }
}

export function oauthTransport(base: string, provider: MemoryProvider, path = '/mcp'): StreamableHTTPClientTransport {
  return new StreamableHTTPClientTransport(new URL(base + path), { authProvider: provider });
}

export function newMcpClient(): McpClient {
  return new McpClient({ name: 'oauth-tests', version: '1.0.0' });
}

/** A form-encoded POST, as OAuth clients send to the token and revocation endpoints. */
export async function form(
  base: string,
  path: string,
  fields: Record<string, string>,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: any; headers: Headers }> {
  const res = await fetch(base + path, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams(fields).toString(),
  });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: res.status, body, headers: res.headers };
}
