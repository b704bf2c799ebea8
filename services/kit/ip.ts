import { BlockList, isIP } from 'node:net';

/**
 * IP address arithmetic shared by the egress guard (kit/egress.ts), the edge's client address and
 * trusted proxies (services/gateway/client-ip.ts) and the plugins' per-address keys
 * (plugins/core/address.ts): one parser, so every part reads every spelling of an address alike.
 */

/** The eight 16-bit groups of an IPv6 address (dotted IPv4 tail accepted), or null. */
export function ipv6Groups(address: string): number[] | null {
  let text = address.toLowerCase().replace(/^\[|\]$/g, '');
  if (text.includes('%')) return null; // zone ids only make sense for link-local, which is refused anyway
  const dotted = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    if (isIP(dotted[2]!) !== 4) return null;
    const [a, b, c, d] = dotted[2]!.split('.').map(Number) as [number, number, number, number];
    text = `${dotted[1]}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const parse = (part: string) => (part === '' ? [] : part.split(':').map((g) => (/^[0-9a-f]{1,4}$/.test(g) ? parseInt(g, 16) : NaN)));
  const head = parse(halves[0]!);
  const tail = halves.length === 2 ? parse(halves[1]!) : [];
  if ([...head, ...tail].some(Number.isNaN)) return null;
  const missing = 8 - head.length - tail.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return null;
  return [...head, ...new Array<number>(halves.length === 2 ? missing : 0).fill(0), ...tail];
}

const v4 = (hi: number, lo: number) => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;

/**
 * The IPv4 address an IPv6 address carries, and in which form: IPv4-mapped `::ffff:a.b.c.d`,
 * IPv4-translated `::ffff:0:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`,
 * 6to4 `2002:AABB:CCDD::`. Null for any other address.
 */
export function embeddedIpv4(address: string): { ipv4: string; form: 'mapped' | 'translated' | 'compatible' | 'nat64' | '6to4' } | null {
  const g = ipv6Groups(address);
  if (!g) return null;
  const zeros = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  if (zeros(0, 5) && g[5] === 0xffff) return { ipv4: v4(g[6]!, g[7]!), form: 'mapped' };
  if (zeros(0, 4) && g[4] === 0xffff && g[5] === 0) return { ipv4: v4(g[6]!, g[7]!), form: 'translated' };
  if (zeros(0, 6) && (g[6] !== 0 || g[7]! > 1)) return { ipv4: v4(g[6]!, g[7]!), form: 'compatible' };
  if (g[0] === 0x64 && g[1] === 0xff9b && zeros(2, 6)) return { ipv4: v4(g[6]!, g[7]!), form: 'nat64' };
  if (g[0] === 0x2002) return { ipv4: v4(g[1]!, g[2]!), form: '6to4' };
  return null;
}

/** An IPv4-mapped IPv6 address in any spelling (`::ffff:1.2.3.4`, `::ffff:102:304`) as its IPv4 address; anything else as it is. */
export function unmapIpv4(address: string): string {
  if (!address.includes(':')) return address;
  // The spelling a dual-stack socket gives every IPv4 peer, on each request: no parse needed.
  if (address.startsWith('::ffff:') && isIP(address.slice(7)) === 4) return address.slice(7);
  if (isIP(address) !== 6) return address;
  const embedded = embeddedIpv4(address);
  return embedded?.form === 'mapped' ? embedded.ipv4 : address;
}

/**
 * `TRUSTED_PROXIES` (addresses or CIDR ranges) as a membership test (the edge's client address and the
 * setting's own check read it with this one parser). An IPv4-mapped peer matches its
 * IPv4 entries; other IPv6 forms that carry an IPv4 address (NAT64, 6to4) do not, unlike the egress
 * guard's destination lists: they are other hosts, and trust is given narrowly.
 */
export function trustedPeers(trusted: string[]) {
  const list = new BlockList();
  let any = false;
  for (const entry of trusted) {
    const [address, bits, extra] = entry.split('/');
    const family = isIP(address ?? '');
    const maxBits = family === 6 ? 128 : 32;
    if (!family || extra !== undefined || (bits !== undefined && (!/^\d{1,3}$/.test(bits) || Number(bits) > maxBits))) {
      throw new Error(`"${entry}" is not an address or CIDR range`);
    }
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

