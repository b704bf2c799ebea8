import type { IncomingMessage, OutgoingHttpHeaders, RequestListener, ServerResponse } from 'node:http';
import { MAX_HEADER_LINES, runPlugin, tooManyHeaderLines, type HostIO } from '../../plugins/core/index.js';
import type { EdgeRequest, SharedContext, VerifiedIdentity } from '../../plugins/core/index.js';
import { ServiceResponse, whenClosed } from '../kit/http/index.js';
import { acceptRequestId, checkReadiness, errorBody, isPending, USAGE_REPORT_REQUEST_HEADER, type MaybePromise, type ReadinessChecks, type ReadinessReport, type RequestOutcome, type UsageReport } from '../kit/core/index.js';
import { buildChains, instanceFor, type ChainEntry, type ChainSlot, type HostDeps } from './chain.js';
import { serviceTarget, type DeckFile, type DeckRoute } from './deck.js';
import { createClientIp } from './client-ip.js';
import { dispatchInProcess } from './in-process.js';
import { UPSTREAM_TIMEOUT_DEFAULTS } from './config.js';
import { createProxy, sendJson, type ForwardTarget, type UpstreamTimeouts } from './proxy.js';
import { createRouter } from './router.js';

export interface EdgeOptions {
  deck: DeckFile;
  deps: HostDeps;
  trustedProxies: string[];
  /**
   * Upstream timeouts for every service, over each service's deck values (`connect_timeout`,
   * `read_timeout`, `write_timeout`); a service without them gets UPSTREAM_TIMEOUT_DEFAULTS.
   */
  connectTimeoutMs?: number;
  readTimeoutMs?: number;
  writeTimeoutMs?: number;
  /**
   * The request handler of a service running in this process, by the origin the deck reaches it at
   * (`npm start`): such routes are dispatched in process instead of over loopback HTTP.
   */
  inProcess?: (origin: string) => RequestListener | undefined;
  /** Called once per finished request (access log); omitted in benchmarks and tests. */
  accessLog?: (entry: AccessLogEntry) => void;
  /**
   * The process's readiness checks (`ctx.runtime.readiness`, which gains `shutdown` when a drain
   * starts). When one fails, the deck's readiness route (the one `GET /readyz` matches) answers
   * 503 instead of its static answer. Omitted: that route always answers as the deck says.
   */
  readiness?: ReadinessChecks;
}

/**
 * One line per request. Identity comes from what the auth plugins verified (never from client
 * headers); model, provider and tokens from the service's usage report (chat). No credential,
 * query string or body is included.
 */
export interface AccessLogEntry extends RequestOutcome {
  client_ip: string;
  auth_method: 'jwt' | 'apikey' | null;
  key_id: string | null;
  model?: string;
  provider?: string | null;
  prompt_tokens?: number;
  completion_tokens?: number;
  total_tokens?: number;
}

interface RoutePlan {
  origin: URL;
  chain: ChainSlot[];
  /** Set when the service runs in this process. */
  local: RequestListener | undefined;
  /** The route's `preserve_host`: the service gets the client's `Host` instead of its own. */
  preserveHost: boolean;
  /** The service's timeouts (one object per service, shared by its requests). */
  timeouts: UpstreamTimeouts;
}

/**
 * The embedded edge: route (Kong's rules) → plugin chain in priority order (the same cores as on
 * Kong) → stream to the upstream. Everything per route is computed once at start; per request
 * there is one header copy and one small shared context.
 */
export async function createEdge(options: EdgeOptions) {
  const targets = new Map<string, { origin: URL; path: string }>();
  for (const service of options.deck.services ?? []) {
    const t = serviceTarget(service);
    targets.set(service.name, { origin: new URL(t.origin), path: t.path });
  }
  const router = createRouter(options.deck, (service) => targets.get(service.name)!.path);
  const { chains, rewriteChain, close: closeChains } = await buildChains(options.deck, options.deps);
  const plans = new Map<DeckRoute, RoutePlan>();
  for (const service of options.deck.services ?? []) {
    const origin = targets.get(service.name)!.origin;
    const local = options.inProcess?.(origin.origin);
    const timeouts: UpstreamTimeouts = {
      connectTimeoutMs: options.connectTimeoutMs ?? service.connect_timeout ?? UPSTREAM_TIMEOUT_DEFAULTS.connectTimeoutMs,
      readTimeoutMs: options.readTimeoutMs ?? service.read_timeout ?? UPSTREAM_TIMEOUT_DEFAULTS.readTimeoutMs,
      writeTimeoutMs: options.writeTimeoutMs ?? service.write_timeout ?? UPSTREAM_TIMEOUT_DEFAULTS.writeTimeoutMs,
    };
    for (const route of service.routes ?? []) plans.set(route, { origin, chain: chains.get(route)!, local, preserveHost: route.preserve_host === true, timeouts });
  }
  // The readiness route is the deck's (Kong answers it with request-termination, statically; its
  // drain-aware readiness is the status listener's /status/ready): only its answer changes here.
  const readinessRoute = options.readiness ? router.match('GET', '/readyz')?.route : undefined;
  // The readiness route is public and exempt from every limit, and each run of the checks costs a
  // database and a bus round trip: probes that arrive while a run is in flight share it, so a flood
  // of them costs one run at a time instead of one each (and one log line per failing check, not
  // one per probe). A run started before the set of checks changed (the drain adds `shutdown`) is
  // not shared with a later probe.
  let readinessRun: { checks: number; report: Promise<ReadinessReport> } | null = null;
  const readinessReport = (checks: ReadinessChecks): Promise<ReadinessReport> => {
    const count = Object.keys(checks).length;
    if (readinessRun !== null && readinessRun.checks === count) return readinessRun.report;
    const run = { checks: count, report: checkReadiness(checks, logger) };
    readinessRun = run;
    void run.report.finally(() => {
      if (readinessRun === run) readinessRun = null;
    });
    return run.report;
  };
  const clientIpOf = createClientIp(options.trustedProxies);
  const proxy = createProxy(UPSTREAM_TIMEOUT_DEFAULTS);
  const logger = options.deps.logger;
  // The listening port as text, kept between requests: an edge listens on one port (or a few), so
  // its `X-Forwarded-Port` costs no string per request.
  let lastPort = -1;
  let lastPortText = '';
  const portText = (port: number): string => {
    if (port !== lastPort) {
      lastPort = port;
      lastPortText = String(port);
    }
    return lastPortText;
  };

  async function handle(req: IncomingMessage, res: ServerResponse, requestId: string, responseHeaders: Record<string, string>): Promise<void> {
    let url = req.url ?? '/';
    if (url.charCodeAt(0) !== 47 /* / */) url = originForm(req, url);
    const q = url.indexOf('?');
    const rawPath = q < 0 ? url : url.slice(0, q);
    const query = q < 0 ? '' : url.slice(q);
    const method = req.method ?? 'GET';

    const peer = req.socket.remoteAddress;
    let routeName: string | null = null;
    let usage: UsageReport | undefined;
    if (options.accessLog) {
      const log = options.accessLog;
      const started = process.hrtime.bigint();
      whenClosed(res, () => {
        const identity = shared.apikey ?? shared.jwt;
        // Every field always present (JSON drops the undefined ones): a spread of the report made
        // each entry a dictionary-mode object, which JSON.stringify serialises the slow way.
        log({
          request_id: requestId,
          method,
          path: rawPath,
          route: routeName,
          status: res.statusCode,
          duration_ms: Math.round(Number(process.hrtime.bigint() - started) / 1e4) / 100,
          client_ip: edgeRequest.clientIp,
          aborted: !res.writableFinished,
          auth_method: identity?.authMethod ?? null,
          user_id: identity?.userId ?? null,
          key_id: shared.apikey?.keyId ?? null,
          model: usage?.model,
          provider: usage?.provider,
          prompt_tokens: usage?.prompt_tokens,
          completion_tokens: usage?.completion_tokens,
          total_tokens: usage?.total_tokens,
        });
      });
    }
    const shared: SharedContext = { requestId };
    const edgeRequest: EdgeRequest = {
      method,
      path: rawPath,
      headers: req.headers,
      clientIp: clientIpOf(peer, req.headers['x-forwarded-for']),
      shared,
    };
    const headers = proxy.upstreamHeaders(req);
    const io = new EmbeddedIO(res, headers, responseHeaders, edgeRequest, requestId, logger);
    if (req.rawHeaders.length >= 2 * MAX_HEADER_LINES) {
      // Kong's limit, kept here too, so both hosts answer such a request alike.
      const refusal = tooManyHeaderLines(requestId);
      sendJson(res, refusal.status, refusal.body, responseHeaders);
      return;
    }

    // Rewrite phase (global plugins, before routing): the per-IP limit counts every request. For a
    // key it saw valid in the last minute it leaves the count to its access phase (one counter
    // call with the tier's); until that phase runs, the count is owed, and every answer the edge
    // makes before it settles the count first (io.exit), so no request goes uncounted.
    for (const entry of rewriteChain) {
      let passed = runPlugin(entry.core, 'rewrite', edgeRequest, io, { name: entry.name, requestId, logger });
      if (isPending(passed)) passed = await passed;
      if (!passed) return;
      if (io.owedBy === null && shared.ipCountAtAccess === true && entry.core.settleRewrite) io.owedBy = entry;
    }

    const match = router.match(method, rawPath);
    if (!match) {
      const allowed = router.allowedMethods(rawPath);
      let sent: unknown;
      if (allowed) {
        const allow = allowed.join(', ');
        sent = io.exit(405, errorBody(405, `${method} is not allowed on ${rawPath}; allowed: ${allow}`, { requestId }), { allow });
      } else sent = io.exit(404, errorBody(404, 'no Route matched with those values', { requestId }), {});
      if (isPending(sent)) await sent;
      return;
    }
    const plan = plans.get(match.route)!;
    routeName = match.route.name;
    if (match.route === readinessRoute) {
      const report = await readinessReport(options.readiness!);
      if (!report.ready) {
        const sent = io.exit(503, { status: 'not_ready', service: 'gateway', checks: report.checks }, { 'cache-control': 'no-store' });
        if (isPending(sent)) await sent;
        return;
      }
    }
    edgeRequest.path = match.upstreamPath;
    headers['x-request-id'] = requestId;
    const xff = req.headers['x-forwarded-for'];
    const socketIp = peer?.startsWith('::ffff:') ? peer.slice(7) : peer ?? '';
    headers['x-forwarded-for'] = xff ? `${Array.isArray(xff) ? xff.join(', ') : xff}, ${socketIp}` : socketIp;
    headers['x-forwarded-proto'] = 'http';
    // As Kong's `proxy_set_header X-Real-IP $remote_addr` (with `trusted_ips`/`real_ip_header`):
    // the address the edge derived, replacing any the client sent. A client's `Forwarded` is
    // removed by identity-headers (its `strip_headers`), on both hosts.
    headers['x-real-ip'] = edgeRequest.clientIp;
    if (req.headers.host) {
      headers['x-forwarded-host'] = req.headers.host;
      if (plan.preserveHost) headers.host = req.headers.host;
    } else delete headers['x-forwarded-host']; // HTTP/1.0 without Host: never the client's own value
    // As Kong: the port the client connected to, the path it asked for, and a prefix only when the
    // route stripped one; a client's values never pass (a service building URLs would trust them).
    const localPort = req.socket.localPort;
    if (localPort !== undefined) headers['x-forwarded-port'] = portText(localPort);
    else if (req.headers['x-forwarded-port'] !== undefined) delete headers['x-forwarded-port'];
    headers['x-forwarded-path'] = rawPath;
    if (match.strippedPrefix !== null) headers['x-forwarded-prefix'] = match.strippedPrefix;
    else if (req.headers['x-forwarded-prefix'] !== undefined) delete headers['x-forwarded-prefix'];

    for (const slot of plan.chain) {
      // One instance per plugin, the most specific for this route and the consumer the request is
      // authenticated as by now (Kong picks it when its iterator reaches the plugin, after auth).
      const entry = instanceFor(slot, io.consumer);
      if (entry === null) continue;
      if (io.owedBy !== null && entry.priority <= io.owedBy.priority) {
        // The plugin that owes the count counts it in its access phase, with the tier's; any
        // other one in its place (a route-level instance) runs after the count is settled.
        if (entry === io.owedBy) io.owedBy = null;
        else {
          let settled = io.settleOwedCount();
          if (isPending(settled)) settled = await settled;
          if (!settled) return;
        }
      }
      let passed = runPlugin(entry.core, 'access', edgeRequest, io, { name: entry.name, requestId, logger });
      if (isPending(passed)) passed = await passed; // only a plugin that waited (validator, Redis, JWKS)
      if (!passed) return;
    }
    if (io.owedBy !== null) {
      let settled = io.settleOwedCount();
      if (isPending(settled)) settled = await settled;
      if (!settled) return;
    }
    if (res.destroyed) return;
    headers[USAGE_REPORT_REQUEST_HEADER] = '1'; // after the plugins, which strip a client-sent one
    const target: ForwardTarget = {
      origin: plan.origin,
      path: match.upstreamPath + query,
      headers: headers as OutgoingHttpHeaders,
      responseHeaders,
      requestId,
      onUsageReport: (report) => (usage = report),
      timeouts: plan.timeouts,
    };
    // In process only on the kit's servers, whose responses the edge can watch without patching them.
    if (plan.local && res instanceof ServiceResponse) dispatchInProcess(plan.local, req, res, target, plan.timeouts.readTimeoutMs);
    else proxy.forward(req, res, target);
  }

  /** A failure of the edge's own code: logged once with the request id (the message only), answered 500 with it. */
  function requestFailed(error: unknown, res: ServerResponse, requestId: string, responseHeaders: Record<string, string>): void {
    logger.error({ err: error instanceof Error ? error.message : String(error), request_id: requestId }, 'gateway: request failed');
    if (res.headersSent) res.destroy();
    else if (!res.destroyed) sendJson(res, 500, errorBody(500, 'The gateway could not process the request', { requestId }), responseHeaders);
  }

  return {
    handle(req: IncomingMessage, res: ServerResponse) {
      // The id (and the answer's headers, which carry it) exist before anything can fail, so the
      // catch-all answer below carries it as every other answer of the edge does.
      const incomingId = req.headers['x-request-id'];
      const requestId = acceptRequestId(typeof incomingId === 'string' ? incomingId : undefined);
      const responseHeaders: Record<string, string> = { 'x-request-id': requestId };
      handle(req, res, requestId, responseHeaders).catch((error) => requestFailed(error, res, requestId, responseHeaders));
    },
    router,
    async close() {
      proxy.close();
      await closeChains();
    },
  };
}

export type Edge = Awaited<ReturnType<typeof createEdge>>;

const ABSOLUTE_FORM = /^https?:\/\/([^/?#]*)/i;

/**
 * A request target in absolute form (`GET http://host/v1/models HTTP/1.1`, as a client set up for a
 * forward proxy sends it) is routed by its path, as Kong (nginx) does. As RFC 9112 asks of a server
 * receiving one, its authority replaces the `Host` header, so what the plugins read and what
 * `X-Forwarded-Host` says are one host. The path then meets the router, every plugin and the
 * `/internal` block exactly as an origin-form one would. Anything else (`*`, authority form, a
 * scheme other than http(s)) is left as it came and matches no route.
 */
function originForm(req: IncomingMessage, url: string): string {
  const absolute = ABSOLUTE_FORM.exec(url);
  if (absolute === null) return url;
  const authority = absolute[1]!;
  // Userinfo has no place in a request target; its host part alone would be a guess.
  if (authority === '' || authority.includes('@')) return url;
  req.headers.host = authority;
  const rest = url.slice(absolute[0].length);
  const path = rest.charCodeAt(0) === 47 ? rest : `/${rest}`;
  req.url = path;
  return path;
}

/**
 * The embedded side of the host interface: the plugins edit the upstream header copy and the
 * response headers in place. One object per request (methods on the prototype, not a closure each).
 */
class EmbeddedIO implements HostIO {
  /** The consumer the request is authenticated as (Kong's consumer-scoped plugins). */
  consumer: string | null = null;
  /**
   * The plugin whose rewrite phase left this request's per-address count to its access phase,
   * until that phase runs or the count is settled (`PluginCore.settleRewrite`).
   */
  owedBy: ChainEntry | null = null;

  constructor(
    private readonly res: ServerResponse,
    private readonly headers: OutgoingHttpHeaders,
    private readonly responseHeaders: Record<string, string>,
    private readonly request: EdgeRequest,
    private readonly requestId: string,
    private readonly logger: HostDeps['logger'],
  ) {}

  /**
   * Settles the owed count: true when the request goes on (the count's headers added to the
   * answer), false when it was answered (over the address's limit: the 429 the rewrite would have sent).
   */
  settleOwedCount(): MaybePromise<boolean> {
    const entry = this.owedBy!;
    this.owedBy = null;
    return runPlugin(entry.core, 'settle', this.request, this, { name: entry.name, requestId: this.requestId, logger: this.logger });
  }

  setUpstreamHeaders(set: Record<string, string>): void {
    for (const name in set) this.headers[name.toLowerCase()] = set[name];
  }

  clearUpstreamHeader(name: string): void {
    delete this.headers[name.toLowerCase()];
  }

  setResponseHeaders(set: Record<string, string>): void {
    for (const name in set) this.responseHeaders[name.toLowerCase()] = set[name]!;
  }

  authenticate(as: { identity: VerifiedIdentity } | { anonymous: string }): boolean {
    this.consumer = 'identity' in as ? null : as.anonymous;
    return true;
  }

  saveShared(): void {}

  /** Every answer the edge makes itself settles an owed per-address count first, and becomes its 429 when it refuses. */
  exit(status: number, body: unknown, exitHeaders: Record<string, string>): MaybePromise<void> {
    if (this.owedBy !== null) {
      const settled = this.settleOwedCount();
      if (!isPending(settled)) return settled ? this.exit(status, body, exitHeaders) : undefined;
      return settled.then((goOn) => (goOn ? this.exit(status, body, exitHeaders) : undefined));
    }
    if (this.res.destroyed) return;
    const all = { ...this.responseHeaders };
    for (const name in exitHeaders) all[name.toLowerCase()] = exitHeaders[name]!;
    sendJson(this.res, status, body, all);
  }
}
