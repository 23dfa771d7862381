import type { Kysely } from 'kysely';
import type { Dialect } from '../db.js';
import { createdAt, principalFk, textId, workspaceFk } from './columns.js';

/**
 * Issue 14: OAuth 2.1 for MCP clients (src/auth/oauth/).
 *
 * - `oauth_clients`: dynamically registered clients (RFC 7591). `secret_hash` is null for public
 *   clients (`token_endpoint_auth_method: none`); `used_at` stays null until a person consents,
 *   and a registration never used is forgotten after a day.
 * - `oauth_grants`: one consent — a person, a workspace, a client, the resource (`/mcp` or
 *   `/w/<slug>/mcp`) — and the workspace's token epoch at the time (a lockdown ends it).
 *   Revoking the grant ends every token issued under it.
 * - `oauth_codes`: authorization codes (hashed), single use, with the PKCE challenge and the
 *   redirect URI they were issued for.
 * - `oauth_tokens`: access (`oa_`) and refresh tokens (hashed). A refresh token's `used_at` is
 *   when it was rotated: presenting it again revokes the grant.
 */
export async function up(db: Kysely<unknown>, _dialect: Dialect): Promise<void> {
  await db.schema
    .createTable('oauth_clients')
    .$call(textId)
    .addColumn('secret_hash', 'text')
    .addColumn('name', 'text', (c) => c.notNull())
    // JSON array of exact redirect URIs.
    .addColumn('redirect_uris', 'text', (c) => c.notNull())
    // none | client_secret_basic | client_secret_post
    .addColumn('auth_method', 'text', (c) => c.notNull())
    // The registered metadata as answered at registration (JSON).
    .addColumn('metadata', 'text', (c) => c.notNull())
    .$call(createdAt)
    .addColumn('used_at', 'text')
    .execute();

  await db.schema
    .createTable('oauth_grants')
    .$call(textId)
    .addColumn('client_id', 'text', (c) => c.notNull().references('oauth_clients.id').onDelete('cascade'))
    .$call(principalFk)
    .$call(workspaceFk)
    .addColumn('resource', 'text', (c) => c.notNull())
    .addColumn('scope', 'text', (c) => c.notNull())
    .addColumn('epoch', 'integer', (c) => c.notNull())
    .$call(createdAt)
    .addColumn('revoked_at', 'text')
    .addColumn('revoked_reason', 'text')
    .execute();
  await db.schema.createIndex('oauth_grants_principal').on('oauth_grants').columns(['principal_id', 'workspace_id']).execute();
  await db.schema.createIndex('oauth_grants_client').on('oauth_grants').column('client_id').execute();

  await db.schema
    .createTable('oauth_codes')
    .addColumn('code_hash', 'text', (c) => c.primaryKey())
    .addColumn('grant_id', 'text', (c) => c.notNull().references('oauth_grants.id').onDelete('cascade'))
    .addColumn('redirect_uri', 'text', (c) => c.notNull())
    // 1 when the authorization request named redirect_uri: the token request must then name it too (RFC 6749 §4.1.3).
    .addColumn('redirect_uri_named', 'integer', (c) => c.notNull())
    .addColumn('code_challenge', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .addColumn('used_at', 'text')
    .execute();
  await db.schema.createIndex('oauth_codes_grant').on('oauth_codes').column('grant_id').execute();

  await db.schema
    .createTable('oauth_tokens')
    .$call(textId)
    .addColumn('grant_id', 'text', (c) => c.notNull().references('oauth_grants.id').onDelete('cascade'))
    // access | refresh
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .addColumn('expires_at', 'text', (c) => c.notNull())
    .$call(createdAt)
    .addColumn('used_at', 'text')
    .addColumn('revoked_at', 'text')
    .execute();
  await db.schema.createIndex('oauth_tokens_grant').on('oauth_tokens').column('grant_id').execute();
}
