import { isIP } from 'node:net';
import { trustedPeers, unmapIpv4 } from '../kit/index.js';

/**
 * The client address for per-IP limits (ARCHITECTURE.md): the socket peer, unless that peer is a
 * trusted proxy (`TRUSTED_PROXIES`: addresses or CIDR ranges); then the right-most
 * `X-Forwarded-For` entry that is not itself trusted.
 */
export function createClientIp(trusted: string[]) {
  const { any, isTrusted } = trustedPeers(trusted);

  return function clientIp(peer: string | undefined, forwardedFor: string | string[] | undefined): string {
    const socketIp = unmapIpv4(peer ?? '');
    if (!any || !isTrusted(socketIp) || !forwardedFor) return socketIp;
    const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor).split(',').map((h) => unmapIpv4(hopAddress(h.trim()))).filter(Boolean);
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = hops[i]!;
      if (!isIP(hop)) return socketIp;
      if (!isTrusted(hop)) return hop;
    }
    return hops[0] ?? socketIp;
  };
}

/**
 * The address of one `X-Forwarded-For` entry. Some proxies (Azure's, IIS ARR) append the client's
 * port: `203.0.113.7:4711`, or for IPv6 the bracketed `[2001:db8::1]:4711` (RFC 7239's node form).
 * A bare IPv6 address has several colons and no brackets, so only one colon marks an IPv4 port.
 * What is left is still checked as an address by the caller; anything else stays as it was.
 */
export function hopAddress(entry: string): string {
  if (entry.charCodeAt(0) === 91 /* [ */) {
    const close = entry.indexOf(']');
    if (close < 0) return entry;
    const rest = entry.slice(close + 1);
    return rest === '' || /^:\d{1,5}$/.test(rest) ? entry.slice(1, close) : entry;
  }
  const colon = entry.indexOf(':');
  if (colon < 0 || entry.indexOf(':', colon + 1) >= 0) return entry;
  return /^\d{1,5}$/.test(entry.slice(colon + 1)) ? entry.slice(0, colon) : entry;
}
