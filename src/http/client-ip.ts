import { isIPv4, isIPv6 } from 'node:net';

/**
 * Fastify's `trustProxy` for TRUST_PROXY. `true` would trust every X-Forwarded-For hop, so a
 * client could prepend any address and pick its own rate-limit bucket; a hop count is refused
 * by Fastify 5 (it fails closed). We trust exactly the peer that connected to us: `req.ip` is
 * then the address that one reverse proxy saw (the right-most X-Forwarded-For entry), and
 * X-Forwarded-Host / X-Forwarded-Proto are honoured only when that peer sent them.
 */
export function trustProxyOption(trust: boolean): false | ((addr: string, hop: number) => boolean) {
  return trust ? (_addr: string, hop: number) => hop < 1 : false;
}

/** Expands an IPv6 address to its 8 groups (no zone, embedded IPv4 converted). */
function ipv6Groups(ip: string): number[] | null {
  let s = ip.split('%')[0]!.toLowerCase();
  const tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (tail) {
    const o = tail[1]!.split('.').map(Number);
    s = s.slice(0, -tail[1]!.length) + `${((o[0]! << 8) | o[1]!).toString(16)}:${((o[2]! << 8) | o[3]!).toString(16)}`;
  }
  const halves = s.split('::');
  if (halves.length > 2) return null;
  const head = halves[0] ? halves[0].split(':') : [];
  const rest = halves.length === 2 && halves[1] ? halves[1].split(':') : [];
  const fill = halves.length === 2 ? 8 - head.length - rest.length : 0;
  const all = [...head, ...Array<string>(Math.max(0, fill)).fill('0'), ...rest];
  if (all.length !== 8) return null;
  const groups = all.map((g) => Number.parseInt(g, 16));
  return groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? groups : null;
}

/**
 * The key a per-IP limit counts under. IPv4 (and IPv4-mapped IPv6) is the address itself;
 * other IPv6 addresses count per /64, because one subscriber usually holds a whole /64 and
 * could otherwise rotate through it to escape the limit.
 */
export function clientKey(ip: string | undefined): string {
  if (!ip) return 'unknown';
  if (isIPv4(ip)) return ip;
  if (!isIPv6(ip.split('%')[0]!)) return ip;
  const g = ipv6Groups(ip);
  if (!g) return ip.toLowerCase();
  // ::ffff:a.b.c.d is an IPv4 client on a dual-stack socket.
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) {
    return [g[6]! >> 8, g[6]! & 0xff, g[7]! >> 8, g[7]! & 0xff].join('.');
  }
  return `${g
    .slice(0, 4)
    .map((x) => x.toString(16))
    .join(':')}::/64`;
}
