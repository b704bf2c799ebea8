import { isIP } from 'node:net';
import { ipv6Groups, unmapIpv4 } from '../../services/kit/core/index.js';

/**
 * The first `bits` bits of an IPv6 address, as a compact key (`2001:db8:1:2:0:0:0:0/64`). A client
 * usually controls a whole /64, so per-address limits keyed on the full address would give it
 * 2^64 buckets. IPv4-mapped addresses (`::ffff:1.2.3.4`, in any spelling) are keyed as their IPv4
 * address.
 */
export function ipv6Prefix(ip: string, bits: number): string {
  const address = ip.split('%')[0]!;
  const unmapped = unmapIpv4(address);
  if (unmapped !== address) return unmapped;
  const groups = isIP(address) === 6 ? ipv6Groups(address) : null;
  if (!groups) return ip;
  const words: number[] = [];
  let remaining = Math.max(0, Math.min(128, bits));
  for (const group of groups) {
    const keep = Math.min(16, remaining);
    remaining -= keep;
    words.push(keep === 0 ? 0 : group & (0xffff << (16 - keep)) & 0xffff);
  }
  return `${words.map((w) => w.toString(16)).join(':')}/${bits}`;
}
