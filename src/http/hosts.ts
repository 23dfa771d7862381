import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ConfigError, type Config } from '../config.js';
import { forbidden } from '../core/errors.js';

/** One ALLOWED_HOSTS entry: a lower-cased name and, when the entry names one, a port. */
export interface HostEntry {
  name: string;
  port: number | null;
}

/**
 * Parses `name`, `name:port`, `[v6]`, `[v6]:port` or a bare IPv6 address. Names are compared
 * case-insensitively and without a trailing dot. Returns null for something that is no host.
 */
export function parseHost(raw: string): HostEntry | null {
  const s = raw.trim().toLowerCase();
  if (!s) return null;
  let name: string;
  let port: string | undefined;
  if (s.startsWith('[')) {
    const end = s.indexOf(']');
    if (end < 0) return null;
    name = s.slice(1, end);
    const after = s.slice(end + 1);
    if (after) {
      if (!after.startsWith(':')) return null;
      port = after.slice(1);
    }
  } else if (s.indexOf(':') !== s.lastIndexOf(':')) {
    name = s; // a bare IPv6 address: it has no room for a port
  } else {
    const i = s.indexOf(':');
    name = i < 0 ? s : s.slice(0, i);
    port = i < 0 ? undefined : s.slice(i + 1);
  }
  name = name.replace(/\.$/, '');
  if (!name || /[\s/@?#\\]/.test(name)) return null;
  if (port === undefined) return { name, port: null };
  if (!/^\d{1,5}$/.test(port) || Number(port) > 65535) return null;
  return { name, port: Number(port) };
}

/** Parses the configured list once; an entry that is no host refuses the start (never a silent hole). */
export function parseAllowedHosts(list: string[]): HostEntry[] {
  return list.map((raw) => {
    const e = parseHost(raw);
    if (!e) throw new ConfigError(`Invalid configuration:\n  ALLOWED_HOSTS: "${raw}" is not a host name, host:port or IP address`);
    return e;
  });
}

/**
 * An entry without a port accepts the name on any port; an entry with a port accepts only that
 * port, where a Host or Origin without one means the scheme's default (80 or 443).
 */
export function hostAllowed(allowed: HostEntry[], name: string, port: number): boolean {
  return allowed.some((e) => e.name === name && (e.port === null || e.port === port));
}

const DEFAULT_PORT: Record<string, number> = { http: 80, https: 443, ws: 80, wss: 443 };

/**
 * Load-balancer probes and Prometheus call these with the node's IP as Host; they are exempt from
 * the Host check only (/metrics keeps its bearer token, which a rebinding page cannot know).
 */
const PROBES = new Set(['/healthz', '/readyz', '/metrics']);

function originHost(origin: string): { name: string; port: number } | null {
  let u: URL;
  try {
    u = new URL(origin);
  } catch {
    return null; // includes the opaque origin `null`
  }
  const scheme = u.protocol.replace(/:$/, '');
  const e = parseHost(u.host);
  if (!e || !(scheme in DEFAULT_PORT)) return null;
  return { name: e.name, port: e.port ?? DEFAULT_PORT[scheme]! };
}

/** Why a request is refused by ALLOWED_HOSTS, or null when it may go on. */
export function checkHosts(
  allowed: HostEntry[],
  req: { method: string; url: string; host: string; protocol: string; origin: string | undefined },
): 'forbidden_host' | 'forbidden_origin' | null {
  if (allowed.length === 0) return null;
  const path = req.url.split('?')[0]!;
  const probe = (req.method === 'GET' || req.method === 'HEAD') && PROBES.has(path);
  if (!probe) {
    const h = parseHost(req.host);
    if (!h || !hostAllowed(allowed, h.name, h.port ?? DEFAULT_PORT[req.protocol] ?? 80)) return 'forbidden_host';
  }
  if (req.origin !== undefined) {
    const o = originHost(req.origin);
    if (!o || !hostAllowed(allowed, o.name, o.port)) return 'forbidden_origin';
  }
  return null;
}

function single(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/**
 * ALLOWED_HOSTS: when set, a request whose Host (X-Forwarded-Host behind a trusted proxy) or
 * Origin is outside the list is answered 403 `forbidden_host` / `forbidden_origin` before any
 * credential, limit or route runs — unknown routes included. Register it before every other
 * onRequest hook that does work.
 */
export function registerHostCheck(app: FastifyInstance, config: Pick<Config, 'allowedHosts'>): void {
  const allowed = parseAllowedHosts(config.allowedHosts);
  if (allowed.length === 0) return;
  app.addHook('onRequest', async (req: FastifyRequest) => {
    const verdict = checkHosts(allowed, {
      method: req.method,
      url: req.url,
      host: req.host,
      protocol: req.protocol,
      origin: single(req.headers.origin),
    });
    if (verdict === 'forbidden_host') throw forbidden('This host name is not served here (ALLOWED_HOSTS)', 'forbidden_host');
    if (verdict === 'forbidden_origin') throw forbidden('Requests from this origin are not accepted (ALLOWED_HOSTS)', 'forbidden_origin');
  });
}
