/**
 * The thin Kong side of every plugin: read the request through the PDK (few calls: each one is
 * an RPC round trip), run the core, apply its decision. Facts this relies on
 * (../shared/reference/kong-plugin-server.md): headers arrive as a multimap of arrays; only the
 * first Lua return value crosses; `kong.response.exit` is never answered, so it is always
 * returned and nothing runs after it; an exception would fail OPEN (the server proceeds), so every
 * handler catches and answers 500 itself.
 */
import { errorBody } from '../../services/kit/errors.js';
import type { Decision, EdgeRequest, HeaderMap, PluginCore, PluginLogger, SharedContext } from './types.js';

/** The subset of the Kong PDK the adapters use, with the real wire shapes. */
export interface KongPdk {
  request: {
    getHeaders(max?: number): Promise<Record<string, string[]> | undefined>;
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
  const headers = needs.headers ? ((await kong.request.getHeaders()) ?? {}) : {};
  const method = needs.method ? ((await kong.request.getMethod()) ?? 'GET') : 'GET';
  const path = needs.path ? ((await kong.request.getPath()) ?? '/') : '/';
  const clientIp = needs.ip ? ((await kong.client.getForwardedIp()) ?? '') : '';
  const shared = ((await kong.ctx.shared.get(SHARED_KEY)) ?? {}) as SharedContext;
  return { method, path, headers: headers as HeaderMap, clientIp, shared };
}

/**
 * `kong.response.exit` with a JSON body sent as a string: a table body would lose its `null`
 * fields on the way (msgpack nil → absent key), and shape A carries `"param": null`.
 */
export function exitJson(kong: KongPdk, status: number, body: unknown, headers: Record<string, string> = {}): Promise<void> {
  if (body === null || body === undefined) return kong.response.exit(status, undefined, headers);
  return kong.response.exit(status, JSON.stringify(body), { 'Content-Type': 'application/json; charset=utf-8', ...headers });
}

export async function applyDecision(kong: KongPdk, decision: Decision, request: EdgeRequest): Promise<void> {
  if (decision.kind === 'respond') {
    return exitJson(kong, decision.status, decision.body, decision.headers);
  }
  if (decision.identity) {
    const shared: SharedContext = { ...request.shared, [decision.identity.authMethod]: decision.identity, anonymous: false };
    await kong.ctx.shared.set(SHARED_KEY, shared);
    // A verified credential replaces an anonymous consumer an earlier plugin may have set.
    await kong.client.authenticate(null, { id: decision.identity.bucket });
  } else if (decision.anonymous && !request.shared.jwt && !request.shared.apikey) {
    const consumer = await kong.client.loadConsumer(decision.anonymous, true);
    if (!consumer) {
      return exitJson(kong, 500, errorBody(500, 'The gateway is misconfigured (anonymous consumer missing)'));
    }
    await kong.ctx.shared.set(SHARED_KEY, { ...request.shared, anonymous: true });
    await kong.client.authenticate(consumer, null);
  }
  for (const name of decision.removeUpstream ?? []) await kong.service.request.clearHeader(name);
  if (decision.setUpstream && Object.keys(decision.setUpstream).length > 0) await kong.service.request.setHeaders(decision.setUpstream);
  if (decision.responseHeaders && Object.keys(decision.responseHeaders).length > 0) await kong.response.setHeaders(decision.responseHeaders);
}

/** One phase of an adapter (access, or rewrite for global plugins): never throws, never fails open. */
export async function runPhase(kong: KongPdk, core: PluginCore, needs: Needs, name: string, phase: 'access' | 'rewrite' = 'access'): Promise<void> {
  try {
    const request = await readRequest(kong, needs);
    const decision = phase === 'rewrite' ? await core.rewrite!(request) : await core.access(request);
    return await applyDecision(kong, decision, request);
  } catch (error) {
    try {
      await kong.log.err(`${name}: ${(error as Error).message}`);
    } catch {
      // the log call itself failed; still answer
    }
    return exitJson(kong, 500, errorBody(500, 'The gateway could not process the request'));
  }
}
