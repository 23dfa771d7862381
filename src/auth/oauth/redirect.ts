/**
 * Where an OAuth client may send a person back to (issue 14): a loopback address on any port
 * (RFC 8252 §7.3: native clients listen on 127.0.0.1, [::1] or localhost; http is fine there),
 * or a URL the operator allowlisted (OAUTH_REDIRECT_ALLOWLIST, https only). Never a fragment,
 * never credentials in the URL.
 */
const LOOPBACK_HOSTS = new Set(['127.0.0.1', '[::1]', 'localhost']);

/** Why a redirect URI is refused, or null when it is allowed. */
export function redirectUriProblem(raw: string, allowlist: readonly string[]): string | null {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return `${JSON.stringify(raw)} is not an absolute URL`;
  }
  if (u.hash || raw.includes('#')) return `${raw} has a fragment; redirect URIs may not`;
  if (u.username || u.password) return `${raw} carries credentials`;
  if ((u.protocol === 'http:' || u.protocol === 'https:') && LOOPBACK_HOSTS.has(u.hostname)) return null;
  if (u.protocol === 'https:' && allowlist.some((item) => allowedBy(u, item))) return null;
  return `${raw} is neither a loopback address (http://127.0.0.1, http://[::1] or http://localhost, any port) nor on this server's allowlist (OAUTH_REDIRECT_ALLOWLIST)`;
}

/** An allowlist item that is a bare origin allows that origin; one with a path allows that path and below. */
function allowedBy(u: URL, item: string): boolean {
  const a = new URL(item);
  if (a.origin !== u.origin) return false;
  if (a.pathname === '/' && !a.search) return true;
  const path = u.pathname;
  const base = a.pathname.replace(/\/+$/, '');
  return path === a.pathname || path === base || path.startsWith(`${base}/`);
}
