import type { IncomingHttpHeaders, IncomingMessage, RequestListener } from 'node:http';
import { errorBody, USAGE_REPORT_HEADER, type UsageReport } from '../kit/core/index.js';
import { whenClosed, type ResponseObserver, type ServiceResponse } from '../kit/http/index.js';
import { sendJson, takeUsageReport, type ForwardTarget } from './proxy.js';

/**
 * The edge's hand-off to a service running in the same process (`npm start`): the service's
 * request handler gets the client's request and response objects, with no loopback HTTP hop, and
 * sees what the hop would have delivered: the upstream path, the header copy the plugins edited
 * (gateway token and identity set, client-supplied identity stripped, hop-by-hop headers gone,
 * `Host` of the service), the body unread. The plugins' response headers (CORS, rate-limit,
 * request id) win over the service's, as they do over a proxied answer. A service that sends
 * nothing for `readTimeoutMs` gets the same treatment as over HTTP: 504 before the head, the
 * connection cut after it: `readTimeoutMs` is the service's deck `read_timeout`, the one bound that
 * still means something without a hop (there is no connection to open, and the service reads the
 * body from the client itself, so `connect_timeout` and `write_timeout` have nothing to time).
 * Client disconnects reach the service as the close of its own req/res.
 * The answer is watched through the response's observer slot (`ServiceResponse`, built by the kit's
 * servers), not by replacing its methods, which would cost every request dearly in V8.
 */
export function dispatchInProcess(
  handler: RequestListener,
  req: IncomingMessage,
  res: ServiceResponse,
  target: ForwardTarget,
  readTimeoutMs: number,
): void {
  const headers = target.headers;
  // The service's own Host, unless the route preserves the client's (the edge set it then).
  if (headers.host === undefined) headers.host = target.origin.host;
  // The body's framing (Content-Length, or Transfer-Encoding: chunked) is in the copy already, as
  // the hop sends it (proxy.upstreamHeaders), so the service reads the body it would have read.
  req.url = target.path;
  req.headers = headers as IncomingHttpHeaders;
  // Express records the URL it first saw; the service must see the path it is reached at.
  const expressReq = req as IncomingMessage & { originalUrl?: string; baseUrl?: string };
  expressReq.originalUrl = undefined;
  expressReq.baseUrl = undefined;

  const observer = new EdgeObserver(target);
  res.observer = observer;
  const extra = target.responseHeaders;

  // One timer per request, re-armed only when it fires early (no per-write timer work).
  let timer: NodeJS.Timeout | undefined;
  const check = () => {
    const idle = performance.now() - observer.lastActivity;
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
  whenClosed(res, () => {
    clearTimeout(timer);
    res.observer = undefined;
  });

  try {
    handler(req, res);
  } catch {
    clearTimeout(timer);
    if (!res.headersSent) sendJson(res, 502, errorBody(502, 'The upstream service is unreachable', { requestId: target.requestId }), { ...extra, 'x-request-id': target.requestId });
    else res.destroy();
  }
}

/**
 * The edge's view of an answer written in process: merges the plugins' response headers into the
 * head, takes the service's usage report (header or trailer) instead of the client, and notes when
 * the service last wrote (the read timeout).
 */
class EdgeObserver implements ResponseObserver {
  lastActivity = performance.now();

  constructor(private readonly target: ForwardTarget) {}

  head(res: ServiceResponse, args: unknown[]): void {
    // Once only: a second writeHead is Node's error to raise, not a head to edit.
    if (res.headersSent) return;
    this.lastActivity = performance.now();
    const target = this.target;
    const last = args[args.length - 1];
    const passed = last !== null && typeof last === 'object' ? (last as Record<string, unknown>) : undefined;
    // The service's usage report is for the edge only (as over HTTP, where the proxy removes it).
    const reported = res.getHeader(USAGE_REPORT_HEADER);
    if (reported !== undefined) {
      res.removeHeader(USAGE_REPORT_HEADER);
      takeUsageReport({ [USAGE_REPORT_HEADER]: reported }, target);
    }
    if (passed) {
      takeUsageReport(passed, target);
      delete passed.trailer;
    }
    res.removeHeader('trailer');
    const extra = target.responseHeaders;
    for (const name in extra) {
      if (passed) passed[name] = extra[name];
      else res.setHeader(name, extra[name]!);
    }
    if (!res.hasHeader('x-request-id') && !(passed && 'x-request-id' in passed)) res.setHeader('x-request-id', target.requestId);
  }

  wrote(): void {
    this.lastActivity = performance.now();
  }

  /** A stream's usage trailer is taken here instead of being sent to the client. */
  trailers(trailers: Record<string, unknown>): void {
    takeUsageReport(trailers, this.target);
  }

  usage(report: UsageReport): void {
    this.target.onUsageReport?.(report);
  }
}
