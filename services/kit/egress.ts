import { lookup as dnsLookup } from 'node:dns/promises';
import http from 'node:http';
import https from 'node:https';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { ApiError } from './errors.js';
import { embeddedIpv4 } from './ip.js';
import { trimTrailing } from './strings.js';

/**
 * The egress guard for user-supplied URLs (media download, scrape, webhooks). It refuses private,
 * loopback, link-local, metadata and other special-purpose destinations unless the host is in
 * `EGRESS_ALLOW_HOSTS`; it checks the address the name resolves to and then connects to exactly
 * that address (the check lives in the socket's lookup, so DNS rebinding cannot slip a second
 * answer in); every redirect is a new request and is checked again (one to another origin goes
 * without the caller's Authorization, Proxy-Authorization and Cookie headers).
 */

/** The reason of the refusal of a redirect past the caller's bound (callers may say it their own way). */
export const TOO_MANY_REDIRECTS = 'too many redirects';

export class EgressRefusedError extends Error {
  /**
   * The refused destination as scheme and host (`https://hooks.example.com:8443`): never its path,
   * query or credentials, which may carry a token, so the error can be logged and shown as it is.
   */
  readonly destination: string;
  constructor(url: string, readonly reason: string) {
    const destination = originOf(url);
    super(`refused destination ${destination}: ${reason}`);
    this.name = 'EgressRefusedError';
    this.destination = destination;
  }
}

export type Resolver = (hostname: string) => Promise<{ address: string; family: number }[]>;
const systemResolver: Resolver = (hostname) => dnsLookup(hostname, { all: true, verbatim: true });
let processResolver: Resolver = systemResolver;

/**
 * The resolver of every guard in this process that was built without one (the services build
 * theirs from settings alone), consulted at each resolution, so guards already built follow it.
 * The DNS server is a third party: tests answer names with a stub here (there is no outside DNS
 * on a test machine), as they answer third-party HTTP with nock. `null` restores the system's.
 */
export function setEgressResolver(resolver: Resolver | null): void {
  processResolver = resolver ?? systemResolver;
}

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
  ['3fff::', 20], ['5f00::', 16], // documentation (RFC 9637), SRv6 SIDs (RFC 9602): no public host lives there
  ['fc00::', 7], ['fe80::', 10], ['fec0::', 10], ['ff00::', 8],
] as const) blocked.addSubnet(net, prefix, 'ipv6');

const BLOCKED_NAMES = [/^localhost$/i, /\.localhost$/i, /^metadata(\.google\.internal)?$/i, /^instance-data(\.ec2\.internal)?$/i, /\.internal$/i];

/**
 * A host name as compared against names and lists: lower case, without brackets and without
 * trailing dots (`LOCALHOST.` is the fully qualified spelling of `localhost`).
 */
export function normalizeHost(host: string): string {
  // A host from a URL or a redirect's Location may hold any run of dots.
  return trimTrailing(host.toLowerCase().replace(/^\[|\]$/g, ''), '.');
}

/** Why `address` may not be contacted, or null when it is a public address. */
export function blockedReason(address: string): string | null {
  const family = isIP(address);
  if (family === 4) return blocked.check(address, 'ipv4') ? 'private or special-purpose IPv4 address' : null;
  if (family === 6) {
    // A zone id (`fe80::1%eth0`) means a link on this host, and hides the address from the
    // embedded-IPv4 parse (`::ffff:0:7f00:1%1` would pass as public): no public address has one.
    if (address.includes('%')) return 'scoped IPv6 address';
    const embedded = embeddedIpv4(address);
    if (embedded) {
      // Every form that carries an IPv4 address is judged by that address first, so no spelling
      // of 127.0.0.1 or 169.254.169.254 gets through; NAT64 and 6to4 stay refused as a whole.
      if (blockedReason(embedded.ipv4)) return `${embedded.form} form of a private or special-purpose IPv4 address`;
      if (embedded.form === 'mapped' || embedded.form === 'translated') return null;
    }
    return blocked.check(address, 'ipv6') ? 'private or special-purpose IPv6 address' : null;
  }
  return 'not an IP address';
}

/**
 * A list of destinations: host names (exact, case-insensitive, trailing dot ignored), IP
 * addresses and CIDR ranges (`10.0.0.0/8`, `fd00::/8`). An IPv6 address that embeds an IPv4
 * address matches the IPv4 entries as well.
 */
export interface DestinationList {
  readonly size: number;
  hasName(host: string): boolean;
  hasAddress(address: string): boolean;
}

export function destinationList(entries: readonly string[]): DestinationList {
  const names = new Set<string>();
  const addresses = new BlockList();
  let size = 0;
  for (const raw of entries) {
    const entry = raw.trim();
    if (!entry) continue;
    size++;
    const cidr = /^\[?([^\]/]+)\]?\/(\d{1,3})$/.exec(entry);
    if (cidr) {
      const family = isIP(cidr[1]!);
      const prefix = Number(cidr[2]);
      if (!family || prefix > (family === 4 ? 32 : 128)) throw new Error(`"${entry}" is not a valid CIDR range`);
      addresses.addSubnet(cidr[1]!, prefix, family === 4 ? 'ipv4' : 'ipv6');
      continue;
    }
    const host = normalizeHost(entry);
    const family = isIP(host);
    if (family) addresses.addAddress(host, family === 4 ? 'ipv4' : 'ipv6');
    else names.add(host);
  }
  return {
    size,
    hasName: (host) => names.has(normalizeHost(host)),
    hasAddress(address) {
      const bare = normalizeHost(address);
      const family = isIP(bare);
      if (!family) return names.has(bare);
      if (addresses.check(bare, family === 4 ? 'ipv4' : 'ipv6')) return true;
      const embedded = family === 6 ? embeddedIpv4(bare) : null;
      return embedded ? addresses.check(embedded.ipv4, 'ipv4') : false;
    },
  };
}

export interface EgressGuardOptions {
  /**
   * Destinations reachable even when private or loopback: host names, IP addresses, CIDR ranges
   * (`EGRESS_ALLOW_HOSTS`, `PROVIDER_URL_ALLOW`).
   */
  allowHosts?: string[];
  /**
   * When true and `allowHosts` is not empty, ONLY the listed destinations are reachable (an
   * allow-list, as `PROVIDER_URL_ALLOW` is); when the list is empty the usual rules apply.
   */
  exclusive?: boolean;
  resolver?: Resolver;
}

export interface GuardedResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** The body; with `bodyPrefixBytes`, at most its first bytes. */
  body: Buffer;
  /** The URL that answered (after redirects). */
  url: string;
  /** With `bodyPrefixBytes`: true when `body` may not be the whole body (reading stopped at the limit, or the time limit or the connection ended it). */
  truncated: boolean;
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
  /**
   * For callers that judge an answer by its status line (webhooks): keep at most this many bytes of
   * the body and stop reading there (the rest is never read, the connection is closed). A body cut
   * short after the status line arrived, by the timeout, the signal or the connection, is no error:
   * the answer resolves with the bytes that came and `truncated`. `maxBytes` does not apply.
   */
  bodyPrefixBytes?: number;
  signal?: AbortSignal;
}

/** A URL that passed the checks, with the addresses its host resolved to (every one allowed). */
export interface CheckedDestination {
  url: URL;
  /** The first of `addresses`. */
  address: string;
  family: number;
  addresses: { address: string; family: number }[];
}

/** `promise`, or the signal's reason as soon as it aborts (the promise itself cannot be cancelled). */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) {
    promise.catch(() => {}); // settles unobserved: its failure must not become an unhandled rejection
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/** The statuses a redirect is followed for, as fetch follows them (not 300, 304 or 305, whatever their Location says). */
const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/** Request headers that carry credentials: dropped when a redirect leaves the origin. */
const CREDENTIAL_HEADERS = new Set(['authorization', 'proxy-authorization', 'cookie']);
/** Request headers that describe the body: dropped when a redirect turns the request into a GET. */
const BODY_HEADERS = new Set(['content-type', 'content-length', 'content-encoding', 'content-language', 'content-location', 'transfer-encoding']);

function withoutHeaders(headers: Record<string, string> | undefined, names: ReadonlySet<string>): Record<string, string> | undefined {
  if (!headers) return headers;
  return Object.fromEntries(Object.entries(headers).filter(([name]) => !names.has(name.toLowerCase())));
}

/** Marks an error that came before the socket connected: nothing reached that address. */
const NOT_CONNECTED = Symbol('egress.notConnected');

export function createEgressGuard(options: EgressGuardOptions = {}) {
  const allow = destinationList(options.allowHosts ?? []);
  const exclusive = Boolean(options.exclusive) && allow.size > 0;
  const resolver: Resolver = options.resolver ?? ((hostname) => processResolver(hostname));
  const isAllowed = (host: string) => allow.hasName(host) || (isIP(normalizeHost(host)) > 0 && allow.hasAddress(host));

  /**
   * The checks that need no DNS: scheme, credentials, the name lists and literal addresses.
   * Returns the normalised host and whether it is allowed by name (its addresses are then trusted).
   */
  function checkUrl(raw: string): { url: URL; host: string; literal: number; trusted: boolean } {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new EgressRefusedError(raw, 'not a valid URL');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new EgressRefusedError(raw, 'only http and https are allowed');
    if (url.username || url.password) throw new EgressRefusedError(raw, 'credentials in URLs are not allowed');
    const host = normalizeHost(url.hostname);
    const literal = isIP(host);
    const trusted = isAllowed(host);
    if (literal) {
      if (trusted) return { url, host, literal, trusted };
      if (exclusive) throw new EgressRefusedError(raw, 'address is not in the allow-list');
      const reason = blockedReason(host);
      if (reason) throw new EgressRefusedError(raw, reason);
      return { url, host, literal, trusted };
    }
    if (!trusted && BLOCKED_NAMES.some((re) => re.test(host))) throw new EgressRefusedError(raw, 'internal host name');
    return { url, host, literal, trusted };
  }

  /** Why a resolved address of an untrusted name may not be contacted, or null. */
  function addressRefusal(address: string): string | null {
    if (allow.hasAddress(address)) return null;
    if (exclusive) return 'an address that is not in the allow-list';
    const reason = blockedReason(address);
    return reason ? `a ${reason}` : null;
  }

  /**
   * Parses and checks a URL; resolves the host and checks every address it resolves to. `address`
   * is the first answer; `addresses` all of them in the resolver's order (each passed the check),
   * which a request tries in turn while a connection cannot be made.
   */
  async function check(raw: string, signal?: AbortSignal): Promise<CheckedDestination> {
    const { url, host, literal, trusted } = checkUrl(raw);
    if (literal) return { url, address: host, family: literal, addresses: [{ address: host, family: literal }] };
    let answers: { address: string; family: number }[];
    try {
      answers = await untilAborted(resolver(host), signal);
    } catch (error) {
      // The caller's time is up (or it gave up) while the name was resolving: its reason, not a refusal.
      if (signal?.aborted && error === signal.reason) throw error;
      throw new EgressRefusedError(raw, 'host name does not resolve');
    }
    if (answers.length === 0) throw new EgressRefusedError(raw, 'host name does not resolve');
    if (!trusted) {
      for (const answer of answers) {
        const reason = addressRefusal(answer.address);
        if (reason) throw new EgressRefusedError(raw, `resolves to ${reason}`);
      }
    }
    const addresses = answers.map((a) => ({ address: a.address, family: a.family || isIP(a.address) || 4 }));
    return { url, address: addresses[0]!.address, family: addresses[0]!.family, addresses };
  }

  /**
   * A socket `lookup` for HTTP clients that keep their own connection pools (undici agents): the
   * name is resolved here and the connection goes to an address that passed the same rules, so
   * a name cannot be re-pointed between the check and the connect.
   */
  const lookup = ((hostname: string, opts: { all?: boolean } | number | undefined, callback: (...args: unknown[]) => void) => {
    const host = normalizeHost(hostname);
    resolver(host).then(
      (answers) => {
        const trusted = allow.hasName(host);
        const ok = trusted ? answers : answers.filter((a) => addressRefusal(a.address) === null);
        if (answers.length === 0) return callback(Object.assign(new Error(`${host} does not resolve`), { code: 'ENOTFOUND' }));
        if (ok.length !== answers.length || ok.length === 0) {
          return callback(new EgressRefusedError(`http://${host}/`, `resolves to ${addressRefusal(answers.find((a) => addressRefusal(a.address))!.address)}`));
        }
        if (typeof opts === 'object' && opts?.all) callback(null, ok);
        else callback(null, ok[0]!.address, ok[0]!.family);
      },
      (error: unknown) => callback(error),
    );
  }) as unknown as LookupFunction;

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
    let headers = opts.headers;
    for (let hop = 0; ; hop++) {
      // The request's signal bounds the resolution too: a DNS server that never answers ends it.
      const target = await check(current, opts.signal);
      const response = await toAnyAddress(target, { ...opts, method, body, headers });
      const location = response.headers.location;
      if (REDIRECTS.has(response.status) && location && maxRedirects > 0) {
        if (hop >= maxRedirects) throw new EgressRefusedError(current, TOO_MANY_REDIRECTS);
        let next: URL;
        try {
          next = new URL(location, current);
        } catch {
          throw new EgressRefusedError(current, 'a redirect to a location that is not a URL');
        }
        // Credentials were meant for the origin they were given for (as fetch does): not for
        // another host, port or scheme (an https origin's token never goes out over http).
        if (next.origin !== target.url.origin) headers = withoutHeaders(headers, CREDENTIAL_HEADERS);
        if (response.status === 303 || ((response.status === 301 || response.status === 302) && method === 'POST')) {
          method = 'GET';
          body = undefined;
          // The body is gone, and so is what described it (a stale Content-Length would hang the request).
          headers = withoutHeaders(headers, BODY_HEADERS);
        }
        current = next.toString();
        continue;
      }
      return response;
    }
  }

  /**
   * The request to the checked addresses in turn: a connection that cannot be made (refused,
   * unreachable, timed out before it connected) moves on to the next address, so a dual-stack
   * host with one broken family is still reached. Once connected, the answer (or the error) is final:
   * nothing was sent to an address that was not connected to, so trying the next is safe for any method.
   */
  async function toAnyAddress(target: CheckedDestination, opts: GuardedRequestOptions): Promise<GuardedResponse> {
    const literal = isIP(normalizeHost(target.url.hostname)) > 0;
    const addresses = literal ? [target.addresses[0]!] : target.addresses;
    for (let i = 0; ; i++) {
      try {
        return await once(target.url, literal ? undefined : addresses[i]!, opts);
      } catch (error) {
        const last = i >= addresses.length - 1;
        if (last || !(error as { [NOT_CONNECTED]?: boolean })[NOT_CONNECTED] || opts.signal?.aborted) throw error;
      }
    }
  }

  function once(url: URL, pinned: { address: string; family: number } | undefined, opts: GuardedRequestOptions): Promise<GuardedResponse> {
    const transport = url.protocol === 'https:' ? https : http;
    const maxBytes = opts.maxBytes ?? 10 * 1024 * 1024;
    const prefix = opts.bodyPrefixBytes;
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.body !== undefined) headers['content-length'] = String(Buffer.byteLength(opts.body));
    return new Promise((resolve, reject) => {
      const req = transport.request(url, {
        method: opts.method,
        headers,
        lookup: pinned ? pinnedLookup(pinned.address, pinned.family) : undefined,
        timeout: opts.timeoutMs ?? 10_000,
        signal: opts.signal,
      });
      let connected = false;
      req.on('socket', (socket) => {
        if (!socket.connecting) connected = true;
        else socket.once('connect', () => (connected = true));
      });
      // With `bodyPrefixBytes`, the answer is decided once the status line is in: what ends the body
      // early (the time limit, the connection) ends it with the bytes that arrived.
      let answered: ((truncated: boolean) => void) | undefined;
      // A 101 (Switching Protocols) never reaches 'response': without a listener here Node destroys
      // the socket and the request settles neither way (its timeout and signal no longer fire), so
      // the caller would wait for ever. The status is the answer; the switched connection is closed.
      req.on('upgrade', (res: http.IncomingMessage, socket: import('node:net').Socket) => {
        socket.destroy();
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.alloc(0), url: url.toString(), truncated: true });
      });
      req.on('timeout', () => req.destroy(Object.assign(new Error('request timed out'), { code: 'ETIMEDOUT' })));
      req.on('error', (error) => {
        if (answered) return answered(true);
        reject(connected ? error : Object.assign(error, { [NOT_CONNECTED]: true }));
      });
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        let settled = false;
        const finish = (truncated: boolean) => {
          if (settled) return;
          settled = true;
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), url: url.toString(), truncated });
        };
        if (prefix !== undefined) {
          answered = finish;
          res.on('close', () => finish(!res.complete));
        }
        res.on('data', (chunk: Buffer) => {
          if (prefix !== undefined) {
            const room = prefix - size;
            if (chunk.length >= room) {
              // Enough for the caller: the rest is not read; the connection goes with it.
              chunks.push(chunk.subarray(0, room));
              size = prefix;
              finish(true);
              req.destroy();
              return;
            }
            chunks.push(chunk);
            size += chunk.length;
            return;
          }
          size += chunk.length;
          if (size > maxBytes) {
            req.destroy(Object.assign(new Error(`response exceeds ${maxBytes} bytes`), { code: 'E_TOO_LARGE' }));
            return;
          }
          chunks.push(chunk);
        });
        res.on('error', (error) => (prefix !== undefined ? finish(true) : reject(error)));
        res.on('end', () => finish(false));
      });
      req.end(opts.body);
    });
  }

  return { check, checkUrl, lookup, request, isAllowed };
}

export type EgressGuard = ReturnType<typeof createEgressGuard>;

/**
 * Checks a URL an admin stores (a webhook receiver, a provider) as every later call to it will be
 * checked, and answers the refusal, or null. A host name that does not resolve (yet), or not within
 * `timeoutMs` (a DNS server that never answers must not hold the admin request), passes: it may
 * resolve later, and each call checks again.
 */
export async function storedUrlRefusal(guard: Pick<EgressGuard, 'check'>, url: string, timeoutMs: number): Promise<EgressRefusedError | null> {
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    await guard.check(url, signal);
    return null;
  } catch (error) {
    if (signal.aborted && error === signal.reason) return null;
    if (!(error instanceof EgressRefusedError)) throw error;
    return error.reason === 'host name does not resolve' ? null : error;
  }
}

/** A refused destination as a client error, for routes that take URLs from users. */
export function egressError(error: EgressRefusedError, param: string): ApiError {
  return new ApiError(400, `The URL is not allowed: ${error.reason}`, { param });
}

/** Scheme and host of a URL, for messages: never the path or query (tokens live there) nor credentials. */
function originOf(raw: string): string {
  try {
    const u = new URL(raw);
    return `${u.protocol}//${u.host}`;
  } catch {
    return '<invalid url>';
  }
}
