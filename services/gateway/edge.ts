import { randomUUID } from 'node:crypto';
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { Continue, Decision, EdgeRequest, Respond, SharedContext } from '../../plugins/core/types.js';
import { errorBody } from '../kit/errors.js';
import { buildChains, type ChainEntry, type HostDeps } from './chain.js';
import { serviceTarget, type DeckFile, type DeckRoute } from './deck.js';
import { createClientIp } from './client-ip.js';
import { createProxy, sendJson } from './proxy.js';
import { createRouter } from './router.js';

export interface EdgeOptions {
  deck: DeckFile;
  deps: HostDeps;
  trustedProxies: string[];
  connectTimeoutMs: number;
  readTimeoutMs: number;
  /** Called once per finished request (access log); omitted in benchmarks and tests. */
  accessLog?: (entry: { request_id: string; method: string; path: string; route: string | null; status: number; duration_ms: number; client_ip: string; aborted: boolean }) => void;
}

const ACCEPTABLE_REQUEST_ID = /^[\w.:@/+=-]{1,128}$/;

interface RoutePlan {
  origin: URL;
  chain: ChainEntry[];
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
    for (const route of service.routes ?? []) plans.set(route, { origin: targets.get(service.name)!.origin, chain: chains.get(route)! });
  }
  const clientIpOf = createClientIp(options.trustedProxies);
  const proxy = createProxy({ connectTimeoutMs: options.connectTimeoutMs, readTimeoutMs: options.readTimeoutMs });
  const logger = options.deps.logger;

  /** Runs one plugin phase; a plugin that throws answers 500 (fail closed, never upstream). */
  async function run(entry: ChainEntry, phase: 'rewrite' | 'access', request: EdgeRequest, requestId: string): Promise<Decision> {
    try {
      return phase === 'rewrite' ? await entry.core.rewrite!(request) : await entry.core.access(request);
    } catch (error) {
      logger.error({ err: (error as Error).message, plugin: entry.name, phase, request_id: requestId }, 'gateway: plugin failed');
      return { kind: 'respond', status: 500, body: errorBody(500, 'The gateway could not process the request') };
    }
  }

  function respond(res: ServerResponse, decision: Respond, responseHeaders: Record<string, string>, requestId: string): void {
    if (res.destroyed) return;
    const body =
      decision.body && typeof decision.body === 'object' && 'error' in (decision.body as object)
        ? { error: { ...(decision.body as { error: object }).error, request_id: requestId } }
        : decision.body;
    sendJson(res, decision.status, body, { ...responseHeaders, ...decision.headers, 'x-request-id': requestId });
  }

  function apply(decision: Continue, headers: OutgoingHttpHeaders, responseHeaders: Record<string, string>): void {
    if (decision.removeUpstream) for (const name of decision.removeUpstream) delete headers[name];
    if (decision.setUpstream) Object.assign(headers, decision.setUpstream);
    if (decision.responseHeaders) Object.assign(responseHeaders, decision.responseHeaders);
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const incomingId = req.headers['x-request-id'];
    const requestId = typeof incomingId === 'string' && ACCEPTABLE_REQUEST_ID.test(incomingId) ? incomingId : randomUUID();
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const rawPath = q < 0 ? url : url.slice(0, q);
    const query = q < 0 ? '' : url.slice(q);
    const method = req.method ?? 'GET';

    const peer = req.socket.remoteAddress;
    let routeName: string | null = null;
    if (options.accessLog) {
      const log = options.accessLog;
      const started = process.hrtime.bigint();
      res.once('close', () =>
        log({
          request_id: requestId,
          method,
          path: rawPath,
          route: routeName,
          status: res.statusCode,
          duration_ms: Math.round(Number(process.hrtime.bigint() - started) / 1e4) / 100,
          client_ip: edgeRequest.clientIp,
          aborted: !res.writableFinished,
        }),
      );
    }
    const shared: SharedContext = {};
    const edgeRequest: EdgeRequest = {
      method,
      path: rawPath,
      headers: req.headers,
      clientIp: clientIpOf(peer, req.headers['x-forwarded-for']),
      shared,
    };
    const headers = proxy.upstreamHeaders(req);
    const responseHeaders: Record<string, string> = {};

    // Rewrite phase (global plugins, before routing): the per-IP limit counts every request.
    for (const entry of rewriteChain) {
      const decision = await run(entry, 'rewrite', edgeRequest, requestId);
      if (decision.kind === 'respond') return respond(res, decision, responseHeaders, requestId);
      apply(decision, headers, responseHeaders);
    }

    const match = router.match(method, rawPath);
    if (!match) {
      sendJson(res, 404, errorBody(404, 'no Route matched with those values', { requestId }), { ...responseHeaders, 'x-request-id': requestId });
      return;
    }
    const plan = plans.get(match.route)!;
    routeName = match.route.name;
    edgeRequest.path = match.upstreamPath;
    headers['x-request-id'] = requestId;
    const xff = req.headers['x-forwarded-for'];
    const socketIp = peer?.startsWith('::ffff:') ? peer.slice(7) : peer ?? '';
    headers['x-forwarded-for'] = xff ? `${Array.isArray(xff) ? xff.join(', ') : xff}, ${socketIp}` : socketIp;
    headers['x-forwarded-proto'] = 'http';
    if (req.headers.host) headers['x-forwarded-host'] = req.headers.host;
    let consumer: string | null = null;

    for (const entry of plan.chain) {
      if (entry.consumer !== null && entry.consumer !== consumer) continue;
      const decision = await run(entry, 'access', edgeRequest, requestId);
      if (decision.kind === 'respond') return respond(res, decision, responseHeaders, requestId);
      if (decision.identity) {
        shared[decision.identity.authMethod] = decision.identity;
        shared.anonymous = false;
        consumer = null;
      } else if (decision.anonymous && !shared.jwt && !shared.apikey) {
        shared.anonymous = true;
        consumer = decision.anonymous;
      }
      apply(decision, headers, responseHeaders);
    }
    if (res.destroyed) return;
    proxy.forward(req, res, { origin: plan.origin, path: match.upstreamPath + query, headers: headers as OutgoingHttpHeaders, responseHeaders, requestId });
  }

  return {
    handle(req: IncomingMessage, res: ServerResponse) {
      handle(req, res).catch((error) => {
        logger.error({ err: (error as Error).message }, 'gateway: request failed');
        if (!res.headersSent) sendJson(res, 500, errorBody(500, 'The gateway could not process the request'));
        else res.destroy();
      });
    },
    router,
    async close() {
      proxy.close();
      await closeChains();
    },
  };
}

export type Edge = Awaited<ReturnType<typeof createEdge>>;
