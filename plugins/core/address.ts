import { isIP } from 'node:net';

/**
 * The first `bits` bits of an IPv6 address, as a compact key (`2001:db8:1:2::/64`). A client
 * usually controls a whole /64, so per-address limits keyed on the full address would give it
 * 2^64 buckets. IPv4-mapped addresses (`::ffff:1.2.3.4`) are keyed as their IPv4 address.
 */
export function ipv6Prefix(ip: string, bits: number): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped) return mapped[1]!;
  if (isIP(ip) !== 6) return ip;
  const groups = expand(ip);
  const words: number[] = [];
  let remaining = Math.max(0, Math.min(128, bits));
  for (const group of groups) {
    const keep = Math.min(16, remaining);
    remaining -= keep;
    words.push(keep === 0 ? 0 : group & (0xffff << (16 - keep)) & 0xffff);
  }
  return `${words.map((w) => w.toString(16)).join(':')}/${bits}`;
}

/** Eight 16-bit groups of an IPv6 address (zone id dropped, embedded IPv4 converted). */
function expand(ip: string): number[] {
  let address = ip.split('%')[0]!.toLowerCase();
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(address);
  if (v4) {
    const [a, b, c, d] = v4.slice(1).map(Number) as [number, number, number, number];
    address = address.slice(0, v4.index) + `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = address.includes('::') ? address.split('::') : [address, null];
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const zeros = tail === null ? 0 : 8 - left.length - right.length;
  return [...left, ...Array(zeros).fill('0'), ...right].map((g) => parseInt(g || '0', 16));
}
