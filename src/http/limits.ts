import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { RateLimits } from '../config.js';
import type { CoreContext } from '../core/context.js';
import { ServiceError } from '../core/errors.js';
import { clientKey } from './client-ip.js';

/**
 * Spec §8 limits as token buckets in the shared store (src/store/rate-limits.ts).
 *
 * - Per IP, in an onRequest hook that runs before authentication (so a password guess is
 *   counted before it is checked, and routes that do not exist yet are covered by URL):
 *   login (password login, TOTP verify, step-up, the HTML login and step-up forms), sign-up (the three
 *   sign-up paths, the HTML sign-up page and the HTML invite form), git, OAuth registration, OAuth token.
 * - Per principal, in a preParsing hook (after the faces' caller hooks, before a body is read):
 *   every /api/v1 request, plus bundle and import on top. A request without a principal (public
 *   route, unknown route) counts under its IP. A request refused by authentication never gets
 *   here (credentials are unguessable; the limit is about what a known caller may consume).
 *
 * A bucket's size is the limit's count (the API's is RATE_LIMIT_API_BURST) and it refills at
 * count / window, so "5 per minute" means 5 at once, then one every 12 s.
 */

declare module 'fastify' {
  interface FastifyRequest {
    /** Spends one token of a per-principal bucket for this request's caller; throws 429 `rate_limited` when empty. */
    spendLimit(id: 'bundle' | 'api'): Promise<void>;
  }
}

interface Rule {
  id: string;
  /** Bucket size. */
  capacity: number;
  refillPerSecond: number;
  /** For the error message: "5 per minute per IP". */
  text: string;
}

type Scope = 'ip' | 'principal';

const LOGIN_PATHS = new Set(['/api/auth/login', '/api/auth/totp/verify', '/api/auth/stepup', '/login', '/login/totp', '/app/stepup']);
const SIGNUP_PATHS = new Set(['/api/v1/auth/signup', '/auth/signup', '/api/auth/signup', '/signup']);

/** The rules of spec §8 with the configured values. */
export function limitRules(l: RateLimits) {
  const perMin = (id: string, n: number, text: string): Rule => ({ id, capacity: n, refillPerSecond: n / 60, text: `${n} per minute ${text}` });
  return {
    api: { id: 'api', capacity: l.apiBurst, refillPerSecond: l.apiPerMin / 60, text: `${l.apiPerMin} per minute (burst ${l.apiBurst})` },
    bundle: perMin('bundle', l.bundlePerMin, ''),
    import: { id: 'import', capacity: l.importPerHour, refillPerSecond: l.importPerHour / 3600, text: `${l.importPerHour} per hour` },
    login: perMin('login', l.loginPerMin, 'per IP'),
    signup: perMin('signup', l.loginPerMin, 'per IP'),
    git: perMin('git', l.gitPerMin, 'per IP'),
    oauthRegister: perMin('oauth_register', l.oauthRegisterPerMin, 'per IP'),
    oauthToken: perMin('oauth_token', l.oauthTokenPerMin, 'per IP'),
  } satisfies Record<string, Rule>;
}

type Rules = ReturnType<typeof limitRules>;

/** Per-IP rules for a request, decided by method and path before authentication. */
export function ipRulesFor(rules: Rules, method: string, path: string): Rule[] {
  const post = method === 'POST';
  if (post && LOGIN_PATHS.has(path)) return [rules.login];
  if (post && (SIGNUP_PATHS.has(path) || path.startsWith('/invite/'))) return [rules.signup];
  if (path === '/git' || path.startsWith('/git/')) return [rules.git];
  if (post && path === '/oauth/register') return [rules.oauthRegister];
  if (post && path === '/oauth/token') return [rules.oauthToken];
  return [];
}

/** Per-principal rules for a request (API first, then the narrower one). */
export function principalRulesFor(rules: Rules, method: string, path: string): Rule[] {
  // MCP calls do the same work for the same principal as /api/v1: one bucket for both.
  if (path === '/mcp' || path === '/w/:slug/mcp') return [rules.api];
  if (path !== '/api/v1' && !path.startsWith('/api/v1/')) return [];
  const out: Rule[] = [rules.api];
  if ((method === 'GET' || method === 'HEAD' || method === 'POST') && path === '/api/v1/bundle') out.push(rules.bundle);
  if (method === 'POST' && path === '/api/v1/import') out.push(rules.import);
  return out;
}

/**
 * The path a rule is matched against: the route's own pattern when one matched (so a
 * percent-encoded spelling of /api/auth/login is still login), else the decoded URL path.
 */
function matchPath(req: FastifyRequest): string {
  const pattern = req.is404 ? undefined : req.routeOptions.url;
  if (pattern) return pattern;
  const raw = req.url.split('?')[0]!;
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

function methodOf(req: FastifyRequest): string {
  return req.method === 'HEAD' ? 'GET' : req.method;
}

const OFF_WARNING =
  'RATE LIMITS ARE OFF (RATE_LIMITS=off): no request is limited — logins can be guessed at full speed. Use this only for benchmarks or behind a limiting proxy.';

/** One bucket hit's answer (src/store/rate-limits.ts gives it). */
export interface RateLimitResult {
  allowed: boolean;
  /** Whole seconds until a refused hit would pass (≥ 1 when refused, 0 when allowed). */
  retryAfterSeconds: number;
  /** Whole tokens left after this hit. */
  remaining: number;
}

/** The token-bucket store the limits spend from: the composition root opens it (src/app.ts). */
export interface BucketStore {
  hit(bucket: string, spec: { capacity: number; refillPerSecond: number }): Promise<RateLimitResult>;
  prune(idleMs: number): Promise<number>;
  close(): Promise<void>;
}

export interface RateLimitOptions {
  /** Where the start warning and store failures go; the app's logger by default. */
  log?: FastifyBaseLogger;
  /** The bucket store; needed when the limits are on (tests inject a failing one). */
  store?: BucketStore;
}

/**
 * Registers the spec §8 limits, or — when RATE_LIMITS=off — registers nothing and logs one loud
 * warning. Register on the root instance, after the host check and before the faces (whose hooks
 * resolve the caller): the rules are keyed by URL, so one hook covers every face and unknown URLs. A breach answers 429
 * `rate_limited` with `Retry-After` (whole seconds, ≥ 1); every limited route also answers
 * `RateLimit-Limit` (the bucket size) and `RateLimit-Remaining` (whole requests left) of its
 * tightest bucket. A failing store lets the request through and is logged once per outage.
 */
export function registerRateLimits(app: FastifyInstance, ctx: Pick<CoreContext, 'config' | 'store'>, opts: RateLimitOptions = {}): void {
  const log = opts.log ?? app.log;
  const limits = ctx.config.rateLimits;
  if (!limits.enabled) {
    log.warn(OFF_WARNING);
    app.decorateRequest('spendLimit', async () => {});
    return;
  }
  const rules = limitRules(limits);
  if (!opts.store) throw new Error('rate limits are on but no bucket store was given');
  const store: BucketStore = opts.store;

  let failing = false;
  async function hit(bucket: string, rule: Rule): Promise<RateLimitResult | null> {
    try {
      const r = await store.hit(bucket, rule);
      if (failing) {
        failing = false;
        log.warn('rate-limit store answers again; limits apply');
      }
      return r;
    } catch (err) {
      if (!failing) {
        failing = true;
        log.error({ err }, 'rate-limit store failed: requests pass UNLIMITED until it answers again');
      }
      return null;
    }
  }

  async function apply(req: FastifyRequest, reply: FastifyReply, scope: Scope, list: Rule[]): Promise<void> {
    for (const rule of list) {
      const who = scope === 'principal' && req.principal ? `p:${req.principal.id}` : `ip:${clientKey(req.ip)}`;
      const r = await hit(`${rule.id}:${who}`, rule);
      if (!r) continue;
      const shown = Number(reply.getHeader('ratelimit-remaining'));
      if (!r.allowed || !(shown <= r.remaining)) {
        reply.header('RateLimit-Limit', String(rule.capacity));
        reply.header('RateLimit-Remaining', String(r.remaining));
      }
      if (!r.allowed) {
        reply.header('Retry-After', String(r.retryAfterSeconds));
        throw new ServiceError(429, 'rate_limited', `Too many requests: the limit is ${rule.text}; retry in ${r.retryAfterSeconds} s`);
      }
    }
  }

  // Work that only the body names (MCP's context_bundle, each further call of a JSON-RPC
  // batch) spends its bucket once it is known.
  app.decorateRequest('spendLimit', async function (this: FastifyRequest, id: 'bundle' | 'api') {
    const reply = { getHeader: () => undefined, header: () => reply } as unknown as FastifyReply;
    await apply(this, reply, 'principal', [rules[id]]);
  });

  // Callback hooks: most requests have no per-IP rule, and then nothing is waited for.
  app.addHook('onRequest', (req, reply, done) => {
    const list = ipRulesFor(rules, methodOf(req), matchPath(req));
    if (list.length === 0) done();
    else apply(req, reply, 'ip', list).then(() => done(), done);
  });
  app.addHook('preParsing', (req, reply, payload, done) => {
    const list = principalRulesFor(rules, methodOf(req), matchPath(req));
    if (list.length === 0) done(null, payload);
    else apply(req, reply, 'principal', list).then(() => done(null, payload), done);
  });

  // Buckets untouched for the longest refill are full again: deleting them loses nothing.
  const idleMs = Math.ceil(Math.max(...Object.values(rules).map((r) => r.capacity / r.refillPerSecond)) * 1000);
  const timer = setInterval(() => {
    store.prune(idleMs).catch((err: unknown) => log.warn({ err }, 'rate-limit prune failed'));
  }, PRUNE_EVERY_MS);
  timer.unref();
  app.addHook('onClose', async () => {
    clearInterval(timer);
    await store.close();
  });
}

export const PRUNE_EVERY_MS = 10 * 60 * 1000;
