/**
 * The thin Kong side of every plugin: read the request through the PDK (few calls: each one is
 * an RPC round trip), run the core, apply its decision. Facts this relies on
 * (../shared/reference/kong-plugin-server.md): headers arrive as a multimap of arrays; only the
 * first Lua return value crosses; `kong.response.exit` is never answered, so it is always
 * returned and nothing runs after it; an exception would fail OPEN (the server proceeds), so every
 * handler catches and answers 500 itself.
 */
import { acceptRequestId, errorBody } from '../../services/kit/core/index.js';
import { ensureRequestId, headerRequestId, MAX_HEADER_LINES, REQUEST_ID_HEADER, runPlugin, stampRequestId, tooManyHeaderLines, type HostIO } from './host.js';
import type { EdgeRequest, HeaderMap, PluginCore, PluginLogger, SharedContext, VerifiedIdentity } from './types.js';

/** The subset of the Kong PDK the adapters use, with the real wire shapes. */
export interface KongPdk {
  request: {
    getHeaders(max?: number): Promise<Record<string, string[]> | undefined>;
    getHeader(name: string): Promise<string | undefined>;
    getMethod(): Promise<string>;
    getPath(): Promise<string>;
  };
  client: {
    getForwardedIp(): Promise<string | undefined>;
    loadConsumer(id: string, byUsername: boolean): Promise<Record<string, unknown> | undefined>;
    authenticate(consumer: Record<string, unknown> | null, credential: Record<string, unknown> | null): Promise<unknown>;
  };
  ctx: { shared: { get(key: string): Promise<unknown>; set(key: string, value: unknown): Promise<unknown> } };
  service: { request: { setHeaders(headers: Record<string, string>): Promise<unknown>; clearHeader(name: string): Promise<unknown> } };
  response: {
    setHeaders(headers: Record<string, string>): Promise<unknown>;
    exit(status: number, body?: unknown, headers?: Record<string, string>): Promise<void>;
  };
  log: { warn(...args: unknown[]): Promise<unknown>; err(...args: unknown[]): Promise<unknown> };
}

/** What a core needs from the request; the adapter makes only those PDK calls. */
export interface Needs {
  headers?: boolean;
  method?: boolean;
  path?: boolean;
  ip?: boolean;
}

export const SHARED_KEY = 'platform_auth';

/**
 * `kong.ctx.shared` keeps what it is given in a Lua table, and a Lua table cannot hold nil: a
 * `null` field (msgpack nil) comes back absent. Some of ours differ between the two: a key's own
 * limit of `null` is "no limit" where an absent one is "its tier's". So a null travels as this
 * marker (a string, which Lua keeps) and is turned back into `null` when the context is read. A
 * string of ours that starts with NUL (the marker's first character; a token claim could) gets one
 * more in front, taken off on read, so no value ever reads back as another.
 */
export const SHARED_NULL = '\u0000null';

/** The shared context as it goes to `kong.ctx.shared.set`: nulls marked, undefined fields left out. */
export function encodeShared(value: unknown): unknown {
  if (value === null) return SHARED_NULL;
  if (typeof value === 'string') return value.charCodeAt(0) === 0 ? `\u0000${value}` : value;
  if (Array.isArray(value)) return value.map(encodeShared);
  if (typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const key in value) {
      const field = (value as Record<string, unknown>)[key];
      if (field !== undefined) out[key] = encodeShared(field);
    }
    return out;
  }
  return value;
}

/** The shared context as `kong.ctx.shared.get` returns it, with its nulls back. */
export function decodeShared(value: unknown): unknown {
  if (typeof value === 'string') return value.charCodeAt(0) !== 0 ? value : value === SHARED_NULL ? null : value.slice(1);
  if (Array.isArray(value)) return value.map(decodeShared);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const key in value) out[key] = decodeShared((value as Record<string, unknown>)[key]);
    return out;
  }
  return value;
}

export function kongLogger(kong: KongPdk): PluginLogger {
  return {
    warn: (fields, message) => void kong.log.warn(message, JSON.stringify(fields)).catch(() => {}),
    error: (fields, message) => void kong.log.err(message, JSON.stringify(fields)).catch(() => {}),
  };
}

/** A logger for work outside a request (subscriptions): the plugin server's stderr. */
export const processLogger: PluginLogger = {
  warn: (fields, message) => process.stderr.write(`[warn] ${message} ${JSON.stringify(fields)}\n`),
  error: (fields, message) => process.stderr.write(`[error] ${message} ${JSON.stringify(fields)}\n`),
};

export async function readRequest(kong: KongPdk, needs: Needs): Promise<EdgeRequest> {
  // Sequential on purpose: one event's PDK calls share one pipe.
  // The PDK's most: its default (100) would hide every header after the hundredth from the plugins.
  const headers = needs.headers ? ((await kong.request.getHeaders(MAX_HEADER_LINES)) ?? {}) : {};
  const method = needs.method ? ((await kong.request.getMethod()) ?? 'GET') : 'GET';
  const path = needs.path ? ((await kong.request.getPath()) ?? '/') : '/';
  const clientIp = needs.ip ? ((await kong.client.getForwardedIp()) ?? '') : '';
  const shared = (decodeShared(await kong.ctx.shared.get(SHARED_KEY)) ?? {}) as SharedContext;
  return { method, path, headers: headers as HeaderMap, clientIp, shared };
}

/**
 * The request headers Node keeps the first line of when one is repeated (`matchKnownFields` in
 * Node's lib/_http_incoming.js); it joins the lines of any other header with ", " (a Cookie's with
 * "; ", and keeps Set-Cookie's as a list).
 */
const NODE_FIRST_LINE_ONLY = new Set([
  'age',
  'authorization',
  'content-length',
  'content-type',
  'etag',
  'expires',
  'from',
  'host',
  'if-modified-since',
  'if-unmodified-since',
  'last-modified',
  'location',
  'max-forwards',
  'proxy-authorization',
  'referer',
  'retry-after',
  'server',
  'user-agent',
]);

/**
 * Kong hands a plugin each line of a repeated header (`get_headers`: name → array of lines); the
 * embedded edge reads Node's `req.headers`, where a repeated header is one value. So that a core
 * reads a request the same way on both hosts, the repeated headers are turned into Node's values
 * here, in place (a header of one line stays `[value]`, which the cores read as that value): two
 * X-API-Key lines read as `"k1, k2"` (no one key, refused by api-key-auth and no key to the rate
 * limiter), two X-Request-ID lines as no acceptable id. Returns the first line of a repeated
 * Authorization: Node keeps only that one, and only that one goes upstream from the embedded edge.
 */
export function readRepeatedAsNode(headers: HeaderMap): string | undefined {
  let authorization: string | undefined;
  for (const name in headers) {
    const lines = headers[name];
    if (!Array.isArray(lines) || lines.length < 2 || name === 'set-cookie') continue;
    if (NODE_FIRST_LINE_ONLY.has(name)) {
      headers[name] = lines[0];
      if (name === 'authorization') authorization = lines[0];
    } else {
      headers[name] = lines.join(name === 'cookie' ? '; ' : ', ');
    }
  }
  return authorization;
}

/** Header lines as Kong counts them: each value of a repeated header is a line of its own. */
function headerLines(headers: EdgeRequest['headers']): number {
  let lines = 0;
  for (const name in headers) {
    const value = headers[name];
    lines += Array.isArray(value) ? value.length : 1;
  }
  return lines;
}

/**
 * `kong.response.exit` with a JSON body sent as a string: a table body would lose its `null`
 * fields on the way (msgpack nil → absent key), and shape A carries `"param": null`.
 */
export function exitJson(kong: KongPdk, status: number, body: unknown, headers: Record<string, string> = {}): Promise<void> {
  if (body === null || body === undefined) return kong.response.exit(status, undefined, headers);
  return kong.response.exit(status, JSON.stringify(body), { 'Content-Type': 'application/json; charset=utf-8', ...headers });
}

/**
 * The id of the credential registered with `kong.client.authenticate`, which Kong's log serializer
 * writes to every access log line: for a token its bucket (`user:<id>`), for an API key the key's
 * id (`key_…`, the validator's `key_id`), never anything derived from the key itself (its hash, in
 * the key's rate-limit bucket, would link its requests and stems from the secret). A validator
 * answer without a key id leaves the owner (`user:<id>`).
 */
export function credentialIdOf(identity: VerifiedIdentity): string {
  if (identity.authMethod !== 'apikey') return identity.bucket;
  return identity.keyId ? identity.keyId : `user:${identity.userId}`;
}

/** The Kong side of the host interface: each effect is one PDK call. */
export function kongIO(kong: KongPdk): HostIO {
  return {
    setUpstreamHeaders: (headers) => kong.service.request.setHeaders(headers),
    clearUpstreamHeader: (name) => kong.service.request.clearHeader(name),
    setResponseHeaders: (headers) => kong.response.setHeaders(headers),
    async authenticate(as) {
      if ('identity' in as) {
        await kong.client.authenticate(null, { id: credentialIdOf(as.identity) });
        return true;
      }
      const consumer = await kong.client.loadConsumer(as.anonymous, true);
      if (!consumer) return false;
      await kong.client.authenticate(consumer, null);
      return true;
    },
    saveShared: (shared) => kong.ctx.shared.set(SHARED_KEY, encodeShared(shared)),
    exit: (status, body, headers) => exitJson(kong, status, body, headers),
  };
}

/** A refusal outside any request context (a misconfigured plugin): still carries a request id. */
export async function exitMisconfigured(kong: KongPdk, name: string): Promise<void> {
  let sent: string | undefined;
  try {
    sent = await kong.request.getHeader('x-request-id');
  } catch {
    // answer anyway
  }
  const id = acceptRequestId(sent);
  return exitJson(kong, 500, stampRequestId(errorBody(500, `The gateway plugin ${name} is misconfigured`), id), { [REQUEST_ID_HEADER]: id });
}

/** One phase of an adapter (access, or rewrite for global plugins): never throws, never fails open. */
export async function runPhase(kong: KongPdk, core: PluginCore, needs: Needs, name: string, phase: 'access' | 'rewrite' = 'access'): Promise<void> {
  const io = kongIO(kong);
  let requestId = '';
  try {
    const request = await readRequest(kong, needs);
    if (needs.headers) {
      const tooMany = headerLines(request.headers) >= MAX_HEADER_LINES;
      const authorization = readRepeatedAsNode(request.headers);
      if (tooMany) {
        // The PDK may have dropped lines past its most; what the plugins did not see must not pass.
        const refusal = tooManyHeaderLines(acceptRequestId(headerRequestId(request)));
        return exitJson(kong, refusal.status, refusal.body, refusal.headers);
      }
      // Kong would forward every Authorization line (a second one may be an API key nothing checked);
      // the embedded edge forwards the first. Kong's later plugins then read that one line too.
      if (authorization !== undefined) await io.setUpstreamHeaders({ authorization });
    }
    // A fresh request id is saved with the plugin's own decision: one kong.ctx.shared.set per phase.
    const sharedUnsaved = !request.shared.requestId;
    requestId = await ensureRequestId(request, io, () => (needs.headers ? headerRequestId(request) : kong.request.getHeader('x-request-id')), true);
    await runPlugin(core, phase, request, io, { name, requestId, logger: kongLogger(kong), sharedUnsaved });
  } catch (error) {
    // A PDK call failed (the host itself): still answer, never proceed.
    try {
      await kong.log.err(`${name}: ${(error as Error).message}`);
    } catch {
      // the log call itself failed; still answer
    }
    const id = requestId || acceptRequestId(undefined);
    return exitJson(kong, 500, stampRequestId(errorBody(500, 'The gateway could not process the request'), id), { [REQUEST_ID_HEADER]: id });
  }
}
