import { lookup as dnsLookup } from 'node:dns/promises';
import http from 'node:http';
import https from 'node:https';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { ApiError } from './errors.js';

/**
 * The egress guard for user-supplied URLs (media download, scrape, webhooks). It refuses private,
 * loopback, link-local, metadata and other special-purpose destinations unless the host is in
 * `EGRESS_ALLOW_HOSTS`; it checks the address the name resolves to and then connects to exactly
 * that address (the check lives in the socket's lookup, so DNS rebinding cannot slip a second
 * answer in); every redirect is a new request and is checked again.
 */

export class EgressRefusedError extends Error {
  constructor(readonly url: string, readonly reason: string) {
    super(`refused destination ${safeUrl(url)}: ${reason}`);
    this.name = 'EgressRefusedError';
  }
}

export type Resolver = (hostname: string) => Promise<{ address: string; family: number }[]>;
const systemResolver: Resolver = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });

const blocked = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16],
  ['172.16.0.0', 12], ['192.0.0.0', 24], ['192.0.2.0', 24], ['192.88.99.0', 24], ['192.168.0.0', 16],
  ['198.18.0.0', 15], ['198.51.100.0', 24], ['203.0.113.0', 24], ['224.0.0.0', 4], ['240.0.0.0', 4],
] as const) blocked.addSubnet(net, prefix, 'ipv4');
for (const [net, prefix] of [
  ['::', 96], // unspecified, loopback and IPv4-compatible
  ['64:ff9b::', 96], ['64:ff9b:1::', 48], // NAT64: can reach any IPv4, including private ones
  ['100::', 64], ['2001::', 32], ['2001:db8::', 32], ['2002::', 16], // discard, Teredo, documentation, 6to4
  ['fc00::', 7], ['fe80::', 10], ['fec0::', 10], ['ff00::', 8],
] as const) blocked.addSubnet(net, prefix, 'ipv6');

const BLOCKED_NAMES = [/^localhost$/i, /\.localhost$/i, /^metadata(\.google\.internal)?$/i, /^instance-data(\.ec2\.internal)?$/i, /\.internal$/i];

/** Why `address` may not be contacted, or null when it is a public address. */
export function blockedReason(address: string): string | null {
  const family = isIP(address);
  if (family === 4) return blocked.check(address, 'ipv4') ? 'private or special-purpose IPv4 address' : null;
  if (family === 6) {
    const mapped = ipv4FromMapped(address);
    if (mapped) return blockedReason(mapped) ? 'IPv4-mapped private address' : null;
    return blocked.check(address, 'ipv6') ? 'private or special-purpose IPv6 address' : null;
  }
  return 'not an IP address';
}

/** `::ffff:a.b.c.d` and `::ffff:7f00:1` → `a.b.c.d`. */
function ipv4FromMapped(address: string): string | null {
  const lower = address.toLowerCase();
  const dotted = /^(?:0{0,4}:){0,5}:?ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(lower) ?? /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(lower);
  if (dotted) return dotted[1]!;
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(lower);
  if (hex) {
    const hi = parseInt(hex[1]!, 16);
    const lo = parseInt(hex[2]!, 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return null;
}

export interface EgressGuardOptions {
  allowHosts?: string[];
  resolver?: Resolver;
}

export interface GuardedResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  /** The URL that answered (after redirects). */
  url: string;
}

export interface GuardedRequestOptions {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  timeoutMs?: number;
  /** 0: a 3xx is returned as is (webhooks). Default 5. */
  maxRedirects?: number;
  /** Larger bodies are refused (the request is aborted). Default 10 MiB. */
  maxBytes?: number;
  signal?: AbortSignal;
}

export function createEgressGuard(options: EgressGuardOptions = {}) {
  const allow = new Set((options.allowHosts ?? []).map((h) => h.toLowerCase().replace(/^\[|\]$/g, '')));
  const resolver = options.resolver ?? systemResolver;
  const isAllowed = (host: string) => allow.has(host.toLowerCase());

  /** Parses and checks a URL; resolves the host and checks every address it resolves to. */
  async function check(raw: string): Promise<{ url: URL; address: string; family: number }> {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new EgressRefusedError(raw, 'not a valid URL');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new EgressRefusedError(raw, 'only http and https are allowed');
    if (url.username || url.password) throw new EgressRefusedError(raw, 'credentials in URLs are not allowed');
    const host = url.hostname.replace(/^\[|\]$/g, '');
    const literal = isIP(host);
    const allowed = isAllowed(host);
    if (literal) {
      const reason = allowed ? null : blockedReason(host);
      if (reason) throw new EgressRefusedError(raw, reason);
      return { url, address: host, family: literal };
    }
    if (!allowed && BLOCKED_NAMES.some((re) => re.test(host))) throw new EgressRefusedError(raw, 'internal host name');
    let answers: { address: string; family: number }[];
    try {
      answers = await resolver(host);
    } catch {
      throw new EgressRefusedError(raw, 'host name does not resolve');
    }
    if (answers.length === 0) throw new EgressRefusedError(raw, 'host name does not resolve');
    if (!allowed) {
      for (const answer of answers) {
        const reason = blockedReason(answer.address);
        if (reason) throw new EgressRefusedError(raw, `resolves to a ${reason}`);
      }
    }
    return { url, address: answers[0]!.address, family: answers[0]!.family };
  }

  /** A socket lookup that connects only to the address the check approved. */
  function pinnedLookup(address: string, family: number): LookupFunction {
    return ((_hostname: string, opts: { all?: boolean }, callback: (...args: unknown[]) => void) => {
      const fam = family || isIP(address) || 4;
      if (opts && opts.all) callback(null, [{ address, family: fam }]);
      else callback(null, address, fam);
    }) as unknown as LookupFunction;
  }

  async function request(raw: string, opts: GuardedRequestOptions = {}): Promise<GuardedResponse> {
    const maxRedirects = opts.maxRedirects ?? 5;
    let current = raw;
    let method = opts.method ?? 'GET';
    let body = opts.body;
    for (let hop = 0; ; hop++) {
      const target = await check(current);
      const response = await once(target, { ...opts, method, body });
      const location = response.headers.location;
      if (response.status >= 300 && response.status < 400 && location && maxRedirects > 0) {
        if (hop >= maxRedirects) throw new EgressRefusedError(current, 'too many redirects');
        current = new URL(location, current).toString();
        if (response.status === 303 || ((response.status === 301 || response.status === 302) && method === 'POST')) {
          method = 'GET';
          body = undefined;
        }
        continue;
      }
      return response;
    }
  }

  function once(target: { url: URL; address: string; family: number }, opts: GuardedRequestOptions): Promise<GuardedResponse> {
    const { url } = target;
    const transport = url.protocol === 'https:' ? https : http;
    const maxBytes = opts.maxBytes ?? 10 * 1024 * 1024;
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.body !== undefined) headers['content-length'] = String(Buffer.byteLength(opts.body));
    return new Promise((resolve, reject) => {
      const req = transport.request(url, {
        method: opts.method,
        headers,
        lookup: isIP(url.hostname.replace(/^\[|\]$/g, '')) ? undefined : pinnedLookup(target.address, target.family),
        timeout: opts.timeoutMs ?? 10_000,
        signal: opts.signal,
      });
      req.on('timeout', () => req.destroy(Object.assign(new Error('request timed out'), { code: 'ETIMEDOUT' })));
      req.on('error', reject);
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > maxBytes) {
            req.destroy(Object.assign(new Error(`response exceeds ${maxBytes} bytes`), { code: 'E_TOO_LARGE' }));
            return;
          }
          chunks.push(chunk);
        });
        res.on('error', reject);
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), url: url.toString() }));
      });
      req.end(opts.body);
    });
  }

  return { check, request, isAllowed };
}

export type EgressGuard = ReturnType<typeof createEgressGuard>;

/** A refused destination as a client error, for routes that take URLs from users. */
export function egressError(error: EgressRefusedError, param: string): ApiError {
  return new ApiError(400, `The URL is not allowed: ${error.reason}`, { param });
}

function safeUrl(raw: string): string {
  try {
    const u = new URL(raw);
    return `${u.protocol}//${u.host}${u.pathname}`;
  } catch {
    return '<invalid url>';
  }
}
