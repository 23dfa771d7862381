import path from 'node:path';
import { z } from 'zod';

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

const schema = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(8787),
  HOST: z.string().min(1).default('127.0.0.1'),
  DATA_DIR: z.string().min(1).default('./data'),
  SQLITE_CACHE_MB: z.coerce.number().int().min(2).max(65536).default(32),
  DATABASE_URL: z
    .string()
    .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL')
    .optional(),
  DATABASE_POOL_MAX: z.coerce.number().int().min(2).max(1000).default(10),
  PUBLIC_URL: z.string().url().optional(),
  SIGNUPS: z.enum(['open', 'invite']).default('open'),
  LOG_LEVEL: z.enum(LOG_LEVELS).default('info'),
  ALLOWED_HOSTS: z.string().optional(),
  TRUST_PROXY: z.enum(['true', 'false']).default('false'),
  REQUIRE_TOTP: z.enum(['on', 'off']).default('off'),
  RATE_LIMITS: z.enum(['on', 'off']).default('on'),
  RATE_LIMIT_API_PER_MIN: z.coerce.number().int().min(1).default(120),
  RATE_LIMIT_API_BURST: z.coerce.number().int().min(1).default(30),
  RATE_LIMIT_BUNDLE_PER_MIN: z.coerce.number().int().min(1).default(30),
  RATE_LIMIT_IMPORT_PER_HOUR: z.coerce.number().int().min(1).default(5),
  RATE_LIMIT_LOGIN_PER_MIN: z.coerce.number().int().min(1).default(5),
  RATE_LIMIT_GIT_PER_MIN: z.coerce.number().int().min(1).default(60),
  RATE_LIMIT_OAUTH_REGISTER_PER_MIN: z.coerce.number().int().min(1).default(10),
  RATE_LIMIT_OAUTH_TOKEN_PER_MIN: z.coerce.number().int().min(1).default(30),
  OAUTH_ACCESS_TOKEN_TTL_S: z.coerce.number().int().min(60).max(86400).default(3600),
  OAUTH_REFRESH_TOKEN_TTL_S: z.coerce.number().int().min(300).max(31536000).default(2592000),
  OAUTH_REDIRECT_ALLOWLIST: z.string().optional(),
  OAUTH_CIMD_ALLOW_LOOPBACK: z.enum(['on', 'off']).default('off'),
  GIT_CACHE_DIR: z.string().min(1).optional(),
  GIT_PUSH_MAX_MB: z.coerce.number().int().min(1).max(4096).default(100),
  // Long enough that guessing it online is hopeless: wrong tries are not rate limited.
  METRICS_TOKEN: z.string().min(16, 'must be at least 16 characters (use a random token, e.g. `openssl rand -hex 32`)').optional(),
  EMBEDDINGS: z.enum(['builtin', 'openai']).default('builtin'),
  EMBEDDINGS_URL: z.string().url().optional(),
  EMBEDDINGS_MODEL: z.string().min(1).max(200).optional(),
  EMBEDDINGS_API_KEY: z.string().min(1).optional(),
  EMBEDDINGS_DIMENSIONS: z.coerce.number().int().min(1).max(8192).optional(),
  EMBEDDINGS_BATCH: z.coerce.number().int().min(1).max(2048).default(64),
  EMBEDDINGS_TIMEOUT_MS: z.coerce.number().int().min(100).max(600000).default(30000),
  EMBEDDINGS_MAX_RETRIES: z.coerce.number().int().min(0).max(10).default(3),
  LIFECYCLE_MODE: z.enum(['off', 'dry', 'apply']).default('dry'),
  LIFECYCLE_INTERVAL_S: z.coerce.number().int().min(1).max(31536000).default(86400),
});

export interface Config {
  port: number;
  host: string;
  dataDir: string;
  /** SQLite page cache of the database connection, in MiB. */
  sqliteCacheMb: number;
  databaseUrl: string | undefined;
  /** Connections of the main PostgreSQL pool of one process (docs/deploy.md, sizing). */
  databasePoolMax: number;
  publicUrl: string;
  signups: 'open' | 'invite';
  logLevel: (typeof LOG_LEVELS)[number];
  /** Lower-cased host names (optionally host:port) accepted in Host and Origin; empty = any. */
  allowedHosts: string[];
  /** Take the client address from X-Forwarded-For (behind a reverse proxy). */
  trustProxy: boolean;
  /** Every human must enrol TOTP before a session becomes active. */
  requireTotp: boolean;
  rateLimits: RateLimits;
  oauth: OAuthConfig;
  git: GitConfig;
  embeddings: EmbeddingsConfig;
  lifecycle: LifecycleConfig;
  /** Bearer token of GET /metrics; unset, /metrics does not exist (404). */
  metricsToken: string | undefined;
}

/** The scheduled lifecycle job (src/core/lifecycle-job.ts). */
export interface LifecycleConfig {
  /** off: no scheduled runs; dry: runs report what they would archive; apply: they archive. */
  mode: 'off' | 'dry' | 'apply';
  /** Seconds per slot: one scheduled run per workspace per slot (default a day). */
  intervalS: number;
}

/** The git face (/git/<slug>.git): where its cache repositories live and how big a push may be. */
export interface GitConfig {
  /** One bare repository per workspace, rebuilt from the database when missing (default DATA_DIR/git-cache). */
  cacheDir: string;
  /** The largest push body accepted, in bytes (GIT_PUSH_MAX_MB). */
  pushMaxBytes: number;
}

/** OAuth 2.1 for MCP clients (src/auth/oauth/): token lifetimes and where clients may redirect. */
export interface OAuthConfig {
  accessTokenTtlS: number;
  refreshTokenTtlS: number;
  /**
   * Redirect URIs a registration may name besides loopback ones: https URLs, each an exact
   * origin (`https://claude.ai`) or a URL prefix (`https://app.example.com/callback`).
   */
  redirectAllowlist: string[];
  /** Development only: client metadata documents may be fetched from loopback addresses, over http. */
  cimdAllowLoopback: boolean;
}

/** EMBEDDINGS=builtin (default: no network, no weights) or openai (an OpenAI-compatible /v1/embeddings server). */
export interface EmbeddingsConfig {
  provider: 'builtin' | 'openai';
  /** Base URL ending before `/embeddings`, e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1. */
  url: string | undefined;
  model: string;
  apiKey: string | undefined;
  /** Sent as `dimensions` when set (models that can shorten their vectors). */
  dimensions: number | undefined;
  batch: number;
  timeoutMs: number;
  maxRetries: number;
}

/** Requests allowed per window; `burst` is the API bucket's size. null when limits are off. */
export interface RateLimits {
  enabled: boolean;
  apiPerMin: number;
  apiBurst: number;
  bundlePerMin: number;
  importPerHour: number;
  loginPerMin: number;
  gitPerMin: number;
  oauthRegisterPerMin: number;
  oauthTokenPerMin: number;
}

export class ConfigError extends Error {}

/** OAUTH_REDIRECT_ALLOWLIST: comma-separated https URLs; anything else stops the start with its name. */
function parseRedirectAllowlist(raw: string | undefined): string[] {
  const items = (raw ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const item of items) {
    let u: URL | undefined;
    try {
      u = new URL(item);
    } catch {
      u = undefined;
    }
    if (!u || u.protocol !== 'https:' || u.hash || u.username || u.password) {
      throw new ConfigError(`Invalid configuration:\n  OAUTH_REDIRECT_ALLOWLIST: ${JSON.stringify(item)} is not an https URL (no fragment, no credentials)`);
    }
  }
  return items;
}

/** Reads the environment into a typed config; a bad value names the variable and what is expected. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const picked: Record<string, string> = {};
  for (const key of Object.keys(schema.shape)) {
    const v = env[key];
    if (v !== undefined && v !== '') picked[key] = v;
  }
  const parsed = schema.safeParse(picked);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`);
    throw new ConfigError(`Invalid configuration:\n${lines.join('\n')}`);
  }
  const c = parsed.data;
  if (c.EMBEDDINGS === 'openai' && !c.EMBEDDINGS_URL) {
    throw new ConfigError('Invalid configuration:\n  EMBEDDINGS_URL: required when EMBEDDINGS=openai (e.g. https://api.openai.com/v1)');
  }
  const hostForUrl = c.HOST.includes(':') ? `[${c.HOST}]` : c.HOST;
  return {
    port: c.PORT,
    host: c.HOST,
    dataDir: path.resolve(c.DATA_DIR),
    sqliteCacheMb: c.SQLITE_CACHE_MB,
    databaseUrl: c.DATABASE_URL,
    databasePoolMax: c.DATABASE_POOL_MAX,
    publicUrl: (c.PUBLIC_URL ?? `http://${hostForUrl}:${c.PORT}`).replace(/\/+$/, ''),
    signups: c.SIGNUPS,
    logLevel: c.LOG_LEVEL,
    allowedHosts: (c.ALLOWED_HOSTS ?? '')
      .split(',')
      .map((h) => h.trim().toLowerCase())
      .filter(Boolean),
    trustProxy: c.TRUST_PROXY === 'true',
    requireTotp: c.REQUIRE_TOTP === 'on',
    rateLimits: {
      enabled: c.RATE_LIMITS === 'on',
      apiPerMin: c.RATE_LIMIT_API_PER_MIN,
      apiBurst: c.RATE_LIMIT_API_BURST,
      bundlePerMin: c.RATE_LIMIT_BUNDLE_PER_MIN,
      importPerHour: c.RATE_LIMIT_IMPORT_PER_HOUR,
      loginPerMin: c.RATE_LIMIT_LOGIN_PER_MIN,
      gitPerMin: c.RATE_LIMIT_GIT_PER_MIN,
      oauthRegisterPerMin: c.RATE_LIMIT_OAUTH_REGISTER_PER_MIN,
      oauthTokenPerMin: c.RATE_LIMIT_OAUTH_TOKEN_PER_MIN,
    },
    oauth: {
      accessTokenTtlS: c.OAUTH_ACCESS_TOKEN_TTL_S,
      refreshTokenTtlS: c.OAUTH_REFRESH_TOKEN_TTL_S,
      redirectAllowlist: parseRedirectAllowlist(c.OAUTH_REDIRECT_ALLOWLIST),
      cimdAllowLoopback: c.OAUTH_CIMD_ALLOW_LOOPBACK === 'on',
    },
    git: {
      cacheDir: path.resolve(c.GIT_CACHE_DIR ?? path.join(c.DATA_DIR, 'git-cache')),
      pushMaxBytes: c.GIT_PUSH_MAX_MB * 1024 * 1024,
    },
    embeddings: {
      provider: c.EMBEDDINGS,
      url: c.EMBEDDINGS_URL?.replace(/\/+$/, ''),
      model: c.EMBEDDINGS_MODEL ?? (c.EMBEDDINGS === 'openai' ? 'text-embedding-3-small' : 'hashed-ngrams-v2'),
      apiKey: c.EMBEDDINGS_API_KEY,
      dimensions: c.EMBEDDINGS_DIMENSIONS,
      batch: c.EMBEDDINGS_BATCH,
      timeoutMs: c.EMBEDDINGS_TIMEOUT_MS,
      maxRetries: c.EMBEDDINGS_MAX_RETRIES,
    },
    lifecycle: { mode: c.LIFECYCLE_MODE, intervalS: c.LIFECYCLE_INTERVAL_S },
    metricsToken: c.METRICS_TOKEN,
  };
}
