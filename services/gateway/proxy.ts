import http, { type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import { decodeUsageReport, errorBody, USAGE_REPORT_HEADER, type UsageReport } from '../kit/core/index.js';
import { whenClosed } from '../kit/http/index.js';
import { connectionOptions } from '../../plugins/core/index.js';

/**
 * Streams a request to its upstream and the answer back, unbuffered in both directions (SSE
 * chunks are written as they arrive), over kept-alive connections (one agent per upstream origin).
 * Connect failure → 502, no bytes for `readTimeoutMs` → 504 (when nothing was sent yet; otherwise
 * the client connection is cut, since the status line is already gone).
 */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host']);

/** A message's headers minus the hop-by-hop ones: the fixed set, and any its `Connection` header names. */
function endToEndHeaders(source: IncomingMessage['headers']): OutgoingHttpHeaders {
  const headers: OutgoingHttpHeaders = {};
  const connection = source.connection;
  // The usual values name only hop-by-hop options already dropped: nothing to split on the hot path.
  const named = connection === undefined || connection === 'keep-alive' || connection === 'close' ? undefined : connectionOptions(connection);
  for (const name in source) {
    const value = source[name];
    if (value !== undefined && !HOP_BY_HOP.has(name) && !named?.includes(name)) headers[name] = value;
  }
  return headers;
}

/**
 * An upstream that answers 101 Switching Protocols. The edge never forwards an `Upgrade` (it is
 * hop-by-hop), so the switch is the upstream misbehaving. Without an `upgrade` listener Node's
 * client destroys the socket and the request emits neither `response` nor `error`: the client was
 * never answered. With this one (module-level: one listener per request, no closure) the switched
 * socket, already taken out of the agent's pool, is closed and the request fails like any other
 * upstream fault, through its `error` listener (502 with the request id).
 */
function refuseUpgrade(this: http.ClientRequest, _res: IncomingMessage, socket: Duplex): void {
  socket.destroy();
  this.emit('error', Object.assign(new Error('upstream switched protocols without being asked'), { code: 'EUNEXPECTEDUPGRADE' }));
}

/** Where a request goes, and where the edge hears what the service reported about it (access log). */
export interface ForwardTarget {
  origin: URL;
  path: string;
  headers: OutgoingHttpHeaders;
  responseHeaders: Record<string, string>;
  requestId: string;
  /** Called with the service's usage report (header, or trailer of a stream); never forwarded to the client. */
  onUsageReport?: (report: UsageReport) => void;
  /** The service's timeouts (its deck `connect_timeout`, `read_timeout`, `write_timeout`); unset: the proxy's. */
  timeouts?: UpstreamTimeouts;
}

/**
 * Kong's service timeouts, in ms. Connect: to open the connection. Write: the longest pause while
 * the request is still being sent. Read: the longest pause once it is sent (no bytes → 504).
 */
export interface UpstreamTimeouts {
  connectTimeoutMs: number;
  readTimeoutMs: number;
  writeTimeoutMs?: number;
}

export type ProxyOptions = UpstreamTimeouts;

/** After the request is sent, the socket's idle bound becomes the read timeout (module-level: no closure per request). */
function toReadTimeout(this: http.ClientRequest & { readTimeoutMs: number }): void {
  this.setTimeout(this.readTimeoutMs);
}

export function createProxy(options: ProxyOptions) {
  const agents = new Map<string, http.Agent>();

  function agentFor(origin: URL): http.Agent {
    let agent = agents.get(origin.origin);
    if (!agent) {
      const settings = { keepAlive: true, keepAliveMsecs: 30_000, maxSockets: 1024, maxFreeSockets: 256, scheduling: 'lifo' as const };
      agent = origin.protocol === 'https:' ? new https.Agent(settings) : new http.Agent(settings);
      agents.set(origin.origin, agent);
    }
    return agent;
  }

  /**
   * Copies the client's headers minus hop-by-hop ones (the plugins then edit the copy), and says
   * how the body is framed whatever the client's `Connection` named and whatever the method. Node's
   * client frames a body of its own accord only for the methods it expects one on (POST, PUT,
   * PATCH): a DELETE, GET or OPTIONS that came chunked (`Transfer-Encoding` is hop-by-hop, so not
   * copied), or whose `Content-Length` the client's `Connection` named, would have its body written
   * after the head with no length at all, and the service would read it as a next request on the
   * kept-alive connection: a request past every plugin, its answer handed to whoever reuses that
   * connection.
   * The server's parser has already refused a request with both headers or an unusable one.
   */
  function upstreamHeaders(req: IncomingMessage): OutgoingHttpHeaders {
    const headers = endToEndHeaders(req.headers);
    const length = req.headers['content-length'];
    if (length !== undefined) headers['content-length'] = length;
    else if (req.headers['transfer-encoding'] !== undefined) headers['transfer-encoding'] = 'chunked';
    return headers;
  }

  function forward(req: IncomingMessage, res: ServerResponse, target: ForwardTarget): void {
    const transport = target.origin.protocol === 'https:' ? https : http;
    const timeouts = target.timeouts ?? options;
    const writeTimeoutMs = timeouts.writeTimeoutMs ?? timeouts.readTimeoutMs;
    const upstream = transport.request({
      protocol: target.origin.protocol,
      hostname: target.origin.hostname,
      port: target.origin.port || (target.origin.protocol === 'https:' ? 443 : 80),
      method: req.method,
      path: target.path,
      headers: target.headers,
      agent: agentFor(target.origin),
      // The socket's idle bound (either direction): the write timeout while the request is being
      // sent, the read timeout after. Equal (the usual case): one bound, nothing to switch.
      timeout: writeTimeoutMs,
    });
    if (writeTimeoutMs !== timeouts.readTimeoutMs) {
      (upstream as http.ClientRequest & { readTimeoutMs: number }).readTimeoutMs = timeouts.readTimeoutMs;
      upstream.once('finish', toReadTimeout);
    }
    let connectTimer: NodeJS.Timeout | null = null;
    upstream.on('socket', (socket) => {
      if (socket.connecting) {
        socket.setNoDelay(true);
        connectTimer = setTimeout(() => upstream.destroy(Object.assign(new Error('connect timeout'), { code: 'ECONNECTTIMEOUT' })), timeouts.connectTimeoutMs);
        socket.once('connect', () => connectTimer && clearTimeout(connectTimer));
      }
    });
    upstream.on('timeout', () => upstream.destroy(Object.assign(new Error('upstream timeout'), { code: 'ETIMEDOUT' })));
    upstream.on('upgrade', refuseUpgrade);
    upstream.on('response', (upstreamRes) => {
      const headers = endToEndHeaders(upstreamRes.headers);
      takeUsageReport(headers, target);
      // A stream reports its usage in a trailer; trailers are not forwarded (`pipe` drops them).
      if (target.onUsageReport) upstreamRes.once('end', () => takeUsageReport(upstreamRes.trailers, target));
      const extra = target.responseHeaders;
      for (const name in extra) headers[name] = extra[name];
      headers['x-request-id'] ??= target.requestId;
      if (!req.complete) {
        // The service answered before the client finished sending (e.g. 413 on a large body). The
        // rest of the body is no longer wanted, and a keep-alive socket with unread request bytes
        // would corrupt the client's next request: drain what is in flight and close after this answer.
        headers.connection = 'close';
        req.unpipe(upstream);
        req.resume();
      }
      res.writeHead(upstreamRes.statusCode ?? 502, headers);
      // A stream's headers go out at once (the first event may take a while); other answers
      // leave with their first body chunk, in one packet.
      if (isEventStream(upstreamRes.headers['content-type'])) res.flushHeaders();
      upstreamRes.pipe(res);
      upstreamRes.on('error', () => res.destroy());
    });
    upstream.on('error', (error: NodeJS.ErrnoException) => {
      if (connectTimer) clearTimeout(connectTimer);
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (res.destroyed) return;
      const timedOut = error.code === 'ETIMEDOUT' || error.code === 'ECONNECTTIMEOUT';
      const status = timedOut ? 504 : 502;
      const message = timedOut ? 'The upstream service did not answer in time' : 'The upstream service is unreachable';
      const headers: Record<string, string> = { ...target.responseHeaders, 'x-request-id': target.requestId };
      if (!req.complete) {
        // The client is still sending a body nobody will read: as for an early answer, drain what
        // is in flight and close after this one, or the unread bytes stall the kept-alive connection.
        headers.connection = 'close';
        req.unpipe(upstream);
        req.resume();
      }
      sendJson(res, status, errorBody(status, message, { requestId: target.requestId }), headers);
    });
    whenClosed(res, () => {
      if (!res.writableFinished) upstream.destroy();
    });
    req.pipe(upstream);
  }

  function close() {
    for (const agent of agents.values()) agent.destroy();
    agents.clear();
  }

  return { forward, upstreamHeaders, close };
}

/** Removes the service's usage report from headers (or trailers) headed for the client, and hands it to the access log. */
export function takeUsageReport(headers: Record<string, unknown>, target: Pick<ForwardTarget, 'onUsageReport'>): void {
  const value = headers[USAGE_REPORT_HEADER];
  if (value === undefined) return;
  delete headers[USAGE_REPORT_HEADER];
  const report = decodeUsageReport(value as string | string[]);
  if (report) target.onUsageReport?.(report);
}

const isEventStream = (contentType: string | undefined) => contentType !== undefined && contentType.startsWith('text/event-stream');

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (body === null || body === undefined) {
    res.writeHead(status, { ...headers, 'content-length': '0' });
    res.end();
    return;
  }
  const payload = Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body));
  const contentType = Buffer.isBuffer(body) ? undefined : 'application/json; charset=utf-8';
  res.writeHead(status, { ...(contentType ? { 'content-type': contentType } : {}), ...headers, 'content-length': String(payload.length) });
  res.end(payload);
}
