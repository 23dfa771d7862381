import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { promises as dns } from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import ipaddr from 'ipaddr.js';
import { z } from 'zod';
import type { CoreContext } from '../../core/context.js';
import type { ClientRecord } from './clients.js';
import { ClientName, MAX_REDIRECT_URIS } from './client-metadata.js';
import { redirectUriProblem } from './redirect.js';

/**
 * Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document, the MCP
 * 2025-11 authorization spec's alternative to dynamic registration): a `client_id` that is an
 * https URL names the client's metadata, which this server fetches — with a time limit, a size
 * limit, no redirects, and never from a private address (the fetch is made on behalf of anyone
 * who can send an authorization request, so it must not become a way into the operator's
 * network). Results are cached, failures briefly too, so a flood of requests fetches once.
 */

export const CIMD_TIMEOUT_MS = 5_000;
export const CIMD_MAX_BYTES = 64 * 1024;
const CIMD_URL_MAX = 1000;
const CACHE_ENTRIES = 500;
const CACHE_DEFAULT_MS = 5 * 60_000;
const CACHE_MIN_MS = 60_000;
const CACHE_MAX_MS = 24 * 60 * 60_000;
/** A failure is remembered this long: retries within it answer from memory. */
const FAILURE_CACHE_MS = 30_000;
/**
 * Fetches under way at once, per server: anyone may send an authorization request, so distinct
 * URLs must not tie up unbounded sockets and timers. Past it a request is refused, not cached.
 */
export const CIMD_MAX_IN_FLIGHT = 20;

/** Why a metadata document cannot name a client; the message is shown to the person or client. */
export class MetadataDocumentError extends Error {}

/** Whether a client_id is meant as a metadata document URL (rather than a registered `oc_` id). */
export function isMetadataDocumentId(id: string): boolean {
  return /^https?:\/\//i.test(id);
}

type Outcome = { ok: true; client: ClientRecord } | { ok: false; reason: string };
interface Entry {
  until: number;
  outcome: Promise<Outcome>;
}

/** One cache per server (its store): tests run servers with different settings side by side. */
const caches = new WeakMap<object, Map<string, Entry>>();
const inFlight = new WeakMap<object, { n: number }>();

/**
 * The client a metadata document URL names, from the cache or fetched now. Throws
 * MetadataDocumentError with the reason when the URL, its address or its document is refused.
 */
export async function resolveMetadataDocumentClient(ctx: CoreContext, clientId: string): Promise<ClientRecord> {
  let cache = caches.get(ctx.store);
  if (!cache) caches.set(ctx.store, (cache = new Map()));
  const now = Date.now();
  let entry = cache.get(clientId);
  if (entry && entry.until <= now) {
    cache.delete(clientId);
    entry = undefined;
  }
  if (entry) {
    // LRU: a hit moves to the end of the map's order.
    cache.delete(clientId);
    cache.set(clientId, entry);
  } else {
    let busy = inFlight.get(ctx.store);
    if (!busy) inFlight.set(ctx.store, (busy = { n: 0 }));
    if (busy.n >= CIMD_MAX_IN_FLIGHT)
      throw new MetadataDocumentError('too many client metadata documents are being fetched right now; try again in a few seconds');
    const counter = busy;
    counter.n++;
    // In flight counts as cached: concurrent requests share one fetch.
    const e: Entry = { until: now + FAILURE_CACHE_MS, outcome: Promise.resolve({ ok: false, reason: 'pending' }) };
    e.outcome = fetchClient(ctx, clientId)
      .finally(() => counter.n--)
      .then(
        ({ client, maxAgeMs }) => {
          e.until = Date.now() + maxAgeMs;
          return { ok: true as const, client };
        },
        (err: unknown) => {
          e.until = Date.now() + FAILURE_CACHE_MS;
          return { ok: false as const, reason: err instanceof MetadataDocumentError ? err.message : 'the document could not be fetched' };
        },
      );
    cache.set(clientId, e);
    while (cache.size > CACHE_ENTRIES) cache.delete(cache.keys().next().value!);
    entry = e;
  }
  const outcome = await entry.outcome;
  if (!outcome.ok) throw new MetadataDocumentError(outcome.reason);
  return outcome.client;
}

/** Draft §3: https, a path, no dot segments, no fragment, no credentials. */
function checkClientIdUrl(raw: string, allowLoopback: boolean): URL {
  if (raw.length > CIMD_URL_MAX) throw new MetadataDocumentError(`a client_id URL is at most ${CIMD_URL_MAX} characters`);
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new MetadataDocumentError('the client_id is not a valid URL');
  }
  if (u.username || u.password) throw new MetadataDocumentError('the client_id URL must not carry credentials');
  if (raw.includes('#')) throw new MetadataDocumentError('the client_id URL must not have a fragment');
  if (u.pathname === '/' || u.pathname === '') throw new MetadataDocumentError('the client_id URL must have a path (the metadata document)');
  if (/(^|\/)\.\.?(\/|$)/.test(raw.slice(u.origin.length).split('?')[0]!) || u.href !== raw) {
    throw new MetadataDocumentError('the client_id URL must be in normal form (no dot segments, no escapes that change it)');
  }
  if (u.protocol === 'http:') {
    if (!allowLoopback) throw new MetadataDocumentError('the client_id URL must be https');
    if (!isLoopbackHost(u.hostname)) throw new MetadataDocumentError('the client_id URL must be https (http only on a loopback address, in development)');
  } else if (u.protocol !== 'https:') {
    throw new MetadataDocumentError('the client_id URL must be https');
  }
  return u;
}

function isLoopbackHost(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, '');
  if (h === 'localhost') return true;
  return ipaddr.isValid(h) && ipaddr.process(h).range() === 'loopback';
}

/**
 * Why an address must not be fetched from, or null. Only public unicast passes: private,
 * loopback, link-local (cloud metadata), unique-local, CGNAT, multicast, unspecified, reserved
 * and the transition ranges that can embed any of them. IPv4-mapped IPv6 is judged as IPv4.
 */
export function addressProblem(address: string, allowLoopback: boolean): string | null {
  if (!ipaddr.isValid(address)) return `${address} is not an IP address`;
  const range = ipaddr.process(address).range();
  if (range === 'unicast') return null;
  if (range === 'loopback' && allowLoopback) return null;
  return `${address} is a ${range} address; metadata documents are fetched only from public addresses`;
}

/** Resolves the host and checks every address; answers the one to connect to. */
async function checkedAddress(u: URL, allowLoopback: boolean): Promise<LookupAddress> {
  const host = u.hostname.replace(/^\[|\]$/g, '');
  if (/^localhost$|\.localhost$/i.test(host) && !allowLoopback)
    throw new MetadataDocumentError(`${host} is a loopback name; metadata documents are fetched only from public addresses`);
  let addresses: LookupAddress[];
  if (ipaddr.isValid(host)) {
    addresses = [{ address: host, family: host.includes(':') ? 6 : 4 }];
  } else {
    try {
      addresses = await dns.lookup(host, { all: true, verbatim: true });
    } catch {
      throw new MetadataDocumentError(`the host ${host} could not be resolved`);
    }
  }
  if (addresses.length === 0) throw new MetadataDocumentError(`the host ${host} has no address`);
  // Any private address refuses the host: which one a connection would use is not ours to pick.
  for (const a of addresses) {
    const problem = addressProblem(a.address, allowLoopback);
    if (problem) throw new MetadataDocumentError(problem);
  }
  return addresses[0]!;
}

/** The document's fields this server uses; others are ignored (RFC 7591 §2 allows it). */
const Document = z.object({
  client_id: z.string(),
  redirect_uris: z.array(z.string().max(2000)).min(1).max(MAX_REDIRECT_URIS),
  token_endpoint_auth_method: z.string().optional(),
  grant_types: z.array(z.string()).optional(),
  response_types: z.array(z.string()).optional(),
  client_name: ClientName,
});

async function fetchClient(ctx: CoreContext, clientId: string): Promise<{ client: ClientRecord; maxAgeMs: number }> {
  const allowLoopback = ctx.config.oauth.cimdAllowLoopback;
  const u = checkClientIdUrl(clientId, allowLoopback);
  const address = await checkedAddress(u, allowLoopback);
  const { status, body, cacheControl } = await fetchPinned(u, address);
  if (status >= 300 && status < 400) throw new MetadataDocumentError(`the document answered a redirect (${status}); redirects are not followed`);
  if (status !== 200) throw new MetadataDocumentError(`the document answered ${status}, not 200`);
  let json: unknown;
  try {
    json = JSON.parse(body.toString('utf8'));
  } catch {
    throw new MetadataDocumentError('the document is not JSON');
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new MetadataDocumentError('the document is not a JSON object');
  const raw = json as Record<string, unknown>;
  if (raw.redirect_uris === undefined) throw new MetadataDocumentError('the document has no redirect_uris');
  const parsed = Document.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new MetadataDocumentError(`the document's ${issue.path.join('.') || 'metadata'}: ${issue.message}`);
  }
  const d = parsed.data;
  if (d.client_id !== clientId) throw new MetadataDocumentError('the document names another client_id than its own URL');
  if (raw.client_secret !== undefined || raw.client_secret_expires_at !== undefined)
    throw new MetadataDocumentError('the document must not hold a client secret');
  const method = d.token_endpoint_auth_method ?? 'none';
  if (method !== 'none') {
    throw new MetadataDocumentError(
      `token_endpoint_auth_method is ${method}: this server accepts metadata-document clients only as public clients (none); private_key_jwt is not supported`,
    );
  }
  const grantTypes = d.grant_types ?? ['authorization_code'];
  if (!grantTypes.includes('authorization_code')) throw new MetadataDocumentError("the document's grant_types must include authorization_code");
  if (d.response_types && !d.response_types.includes('code')) throw new MetadataDocumentError("the document's response_types must include code");
  for (const uri of d.redirect_uris) {
    const problem = documentRedirectProblem(uri, u, ctx.config.oauth.redirectAllowlist);
    if (problem) throw new MetadataDocumentError(problem);
  }
  const metadata = {
    client_id: clientId,
    redirect_uris: d.redirect_uris,
    token_endpoint_auth_method: 'none',
    grant_types: grantTypes.filter((g) => g === 'authorization_code' || g === 'refresh_token'),
    response_types: ['code'],
    ...(d.client_name ? { client_name: d.client_name } : {}),
    metadata_document: true,
  };
  const client: ClientRecord = {
    id: clientId,
    secret_hash: null,
    name: d.client_name ?? '',
    redirect_uris: JSON.stringify(d.redirect_uris),
    auth_method: 'none',
    metadata: JSON.stringify(metadata),
    created_at: new Date().toISOString(),
    used_at: null,
  };
  return { client, maxAgeMs: maxAge(cacheControl) };
}

/**
 * Where a metadata-document client may redirect: loopback, the operator's allowlist, or https on
 * the document's own origin (the domain that serves the document vouches for its own pages).
 */
export function documentRedirectProblem(uri: string, documentUrl: URL, allowlist: readonly string[]): string | null {
  const vouched = documentUrl.protocol === 'https:' ? [documentUrl.origin] : [];
  const problem = redirectUriProblem(uri, [...allowlist, ...vouched]);
  return problem ? `${problem}, nor https on the document's own origin` : null;
}

/** Cache-Control max-age, held within [1 min, 1 day]; 5 minutes when absent. */
function maxAge(header: string | undefined): number {
  const m = /(?:^|,)\s*max-age\s*=\s*"?(\d+)"?/i.exec(header ?? '');
  if (/(?:^|,)\s*no-(?:store|cache)\b/i.test(header ?? '')) return CACHE_MIN_MS;
  if (!m) return CACHE_DEFAULT_MS;
  return Math.min(CACHE_MAX_MS, Math.max(CACHE_MIN_MS, Number(m[1]) * 1000));
}

/**
 * GET the document from the checked address only: the connection's lookup answers that address,
 * so a second DNS answer (rebinding) cannot send it elsewhere; TLS still verifies the host name.
 * One deadline covers connecting, headers and body; the body is counted as it arrives.
 */
function fetchPinned(u: URL, address: LookupAddress): Promise<{ status: number; body: Buffer; cacheControl: string | undefined }> {
  return new Promise((resolve, reject) => {
    const pinned = ((_host: string, opts: { all?: boolean }, cb: (...args: unknown[]) => void) => {
      if (opts?.all) cb(null, [address]);
      else cb(null, address.address, address.family);
    }) as unknown as typeof dnsLookup;
    const get = u.protocol === 'https:' ? https.request : http.request;
    const req = get(
      {
        protocol: u.protocol,
        hostname: u.hostname.replace(/^\[|\]$/g, ''),
        port: u.port || undefined,
        path: `${u.pathname}${u.search}`,
        method: 'GET',
        headers: { accept: 'application/json', 'user-agent': 'context-vault-oauth' },
        lookup: pinned,
        agent: false,
      },
      (res) => {
        const status = res.statusCode ?? 0;
        const cacheControl = res.headers['cache-control'];
        if (status !== 200) {
          res.destroy();
          clearTimeout(timer);
          resolve({ status, body: Buffer.alloc(0), cacheControl });
          return;
        }
        const declared = Number(res.headers['content-length'] ?? 0);
        if (declared > CIMD_MAX_BYTES) return fail(new MetadataDocumentError(`the document is over ${CIMD_MAX_BYTES / 1024} KiB`));
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > CIMD_MAX_BYTES) return fail(new MetadataDocumentError(`the document is over ${CIMD_MAX_BYTES / 1024} KiB`));
          chunks.push(c);
        });
        res.on('end', () => {
          clearTimeout(timer);
          resolve({ status, body: Buffer.concat(chunks), cacheControl });
        });
        res.on('error', () => fail(new MetadataDocumentError('the document could not be read')));
      },
    );
    let done = false;
    const fail = (e: Error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      req.destroy();
      reject(e);
    };
    const timer = setTimeout(() => fail(new MetadataDocumentError(`the document did not arrive within ${CIMD_TIMEOUT_MS / 1000} s`)), CIMD_TIMEOUT_MS);
    req.on('error', (e) => fail(new MetadataDocumentError(`the document could not be fetched (${(e as NodeJS.ErrnoException).code ?? e.message})`)));
    req.end();
  });
}

/** The host a metadata-document client comes from (what the person can judge), else null. */
export function metadataDocumentHost(clientId: string): string | null {
  if (!isMetadataDocumentId(clientId)) return null;
  try {
    return new URL(clientId).host;
  } catch {
    return null;
  }
}
