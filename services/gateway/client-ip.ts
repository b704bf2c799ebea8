import { BlockList, isIP } from 'node:net';
import { unmapIpv4 } from '../kit/index.js';

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

/**
 * `TRUSTED_PROXIES` (addresses or CIDR ranges) as a membership test. An IPv4-mapped peer matches its
 * IPv4 entries; other IPv6 forms that carry an IPv4 address (NAT64, 6to4) do not, unlike the egress
 * guard's destination lists: they are other hosts, and trust is given narrowly.
 */
export function trustedPeers(trusted: string[]) {
  const list = new BlockList();
  let any = false;
  for (const entry of trusted) {
    const [address, bits] = entry.split('/');
    const family = isIP(address ?? '');
    if (!family) throw new Error(`TRUSTED_PROXIES: "${entry}" is not an address or CIDR range`);
    const type = family === 6 ? 'ipv6' : 'ipv4';
    if (bits !== undefined) list.addSubnet(address!, Number(bits), type);
    else list.addAddress(address!, type);
    any = true;
  }
  const isTrusted = (ip: string) => {
    const family = isIP(ip);
    return family !== 0 && list.check(ip, family === 6 ? 'ipv6' : 'ipv4');
  };
  return { any, isTrusted: (ip: string) => any && isTrusted(unmapIpv4(ip)) };
}

