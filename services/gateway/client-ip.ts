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
    const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor).split(',').map((h) => unmapIpv4(h.trim())).filter(Boolean);
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = hops[i]!;
      if (!isIP(hop)) return socketIp;
      if (!isTrusted(hop)) return hop;
    }
    return hops[0] ?? socketIp;
  };
}
