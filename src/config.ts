import path from 'node:path';
import { z } from 'zod';

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

const schema = z.object({
  PORT: z.coerce.number().int().min(0).max(65535).default(8787),
  HOST: z.string().min(1).default('127.0.0.1'),
  DATA_DIR: z.string().min(1).default('./data'),
  DATABASE_URL: z
    .string()
    .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// or postgresql:// URL')
    .optional(),
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
});

export interface Config {
  port: number;
  host: string;
  dataDir: string;
  databaseUrl: string | undefined;
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
  const hostForUrl = c.HOST.includes(':') ? `[${c.HOST}]` : c.HOST;
  return {
    port: c.PORT,
    host: c.HOST,
    dataDir: path.resolve(c.DATA_DIR),
    databaseUrl: c.DATABASE_URL,
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
  };
}
