import type { IncomingHttpHeaders, IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import { errorBody, USAGE_REPORT_HEADER } from '../kit/core/index.js';
import { sendJson, takeUsageReport, type ForwardTarget } from './proxy.js';

/**
 * The edge's hand-off to a service running in the same process (`npm start`): the service's
 * request handler gets the client's request and response objects, with no loopback HTTP hop, and
 * sees what the hop would have delivered: the upstream path, the header copy the plugins edited
 * (gateway token and identity set, client-supplied identity stripped, hop-by-hop headers gone,
 * `Host` of the service), the body unread. The plugins' response headers (CORS, rate-limit,
 * request id) win over the service's, as they do over a proxied answer. A service that sends
 * nothing for `readTimeoutMs` gets the same treatment as over HTTP: 504 before the head, the
 * connection cut after it. Client disconnects reach the service as the close of its own req/res.
 */
export function dispatchInProcess(
  handler: RequestListener,
  req: IncomingMessage,
  res: ServerResponse,
  target: ForwardTarget,
  readTimeoutMs: number,
): void {
  const headers = target.headers;
  headers.host = target.origin.host;
  // Over HTTP a body without a length is re-sent chunked; keep that signal so the service reads it.
  if (req.headers['transfer-encoding'] !== undefined && headers['content-length'] === undefined) headers['transfer-encoding'] = 'chunked';
  req.url = target.path;
  req.headers = headers as IncomingHttpHeaders;
  // Express records the URL it first saw; the service must see the path it is reached at.
  const expressReq = req as IncomingMessage & { originalUrl?: string; baseUrl?: string };
  expressReq.originalUrl = undefined;
  expressReq.baseUrl = undefined;

  const extra = target.responseHeaders;
  let lastActivity = performance.now();
  const writeHead = res.writeHead;
  res.writeHead = function edgeHeaders(this: ServerResponse, status: number, ...rest: unknown[]) {
    res.writeHead = writeHead;
    lastActivity = performance.now();
    const last = rest[rest.length - 1];
    const passed = last !== null && typeof last === 'object' ? (last as Record<string, unknown>) : undefined;
    // The service's usage report is for the edge only (as over HTTP, where the proxy removes it).
    const reported = this.getHeader(USAGE_REPORT_HEADER);
    if (reported !== undefined) {
      this.removeHeader(USAGE_REPORT_HEADER);
      takeUsageReport({ [USAGE_REPORT_HEADER]: reported }, target);
    }
    if (passed) {
      takeUsageReport(passed, target);
      delete passed.trailer;
    }
    this.removeHeader('trailer');
    for (const name in extra) {
      if (passed) passed[name] = extra[name];
      else this.setHeader(name, extra[name]!);
    }
    if (!this.hasHeader('x-request-id') && !(passed && 'x-request-id' in passed)) this.setHeader('x-request-id', target.requestId);
    return (writeHead as (...args: unknown[]) => ServerResponse).call(this, status, ...rest);
  } as ServerResponse['writeHead'];
  // A stream's usage trailer is taken here instead of being sent to the client.
  res.addTrailers = (trailers) => takeUsageReport(trailers as Record<string, unknown>, target);
  const write = res.write;
  res.write = function touch(this: ServerResponse, ...args: unknown[]) {
    lastActivity = performance.now();
    return (write as (...a: unknown[]) => boolean).apply(this, args);
  } as ServerResponse['write'];

  // One timer per request, re-armed only when it fires early (no per-write timer work).
  let timer: NodeJS.Timeout | undefined;
  const check = () => {
    const idle = performance.now() - lastActivity;
    if (idle < readTimeoutMs) {
      timer = setTimeout(check, readTimeoutMs - idle);
      return;
    }
    if (res.headersSent) {
      res.destroy();
    } else if (!res.destroyed) {
      // The service may still answer later; its writes then fail quietly, as they would on a cut hop.
      res.on('error', () => {});
      sendJson(res, 504, errorBody(504, 'The upstream service did not answer in time', { requestId: target.requestId }), { ...extra, 'x-request-id': target.requestId });
    }
  };
  timer = setTimeout(check, readTimeoutMs);
  res.once('close', () => clearTimeout(timer));

  try {
    handler(req, res);
  } catch {
    clearTimeout(timer);
    if (!res.headersSent) sendJson(res, 502, errorBody(502, 'The upstream service is unreachable', { requestId: target.requestId }), { ...extra, 'x-request-id': target.requestId });
    else res.destroy();
  }
}
