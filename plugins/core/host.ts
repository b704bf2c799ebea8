/**
 * The one plugin host runner. A host (the embedded edge in services/gateway, the Kong adapter in
 * kong-host.ts) implements `HostIO`, the handful of effects a decision can have; everything else
 * (merging identities and the anonymous consumer into the shared context, recording refused
 * credentials, request ids on every refusal, failing closed when a plugin throws) lives here once,
 * so both hosts answer the same request the same way.
 */
import { randomUUID } from 'node:crypto';
import { errorBody, sha256Hex } from '../../services/kit/core/index.js';
import type { Decision, EdgeRequest, PluginCore, PluginLogger, SharedContext, VerifiedIdentity } from './types.js';
import { firstHeader } from './types.js';

export const REQUEST_ID_HEADER = 'X-Request-ID';
/** Client ids that are safe to log and echo; anything else is replaced by a fresh UUID. */
const ACCEPTABLE_REQUEST_ID = /^[\w.:@/+=-]{1,128}$/;

export interface HostIO {
  setUpstreamHeaders(headers: Record<string, string>): unknown;
  clearUpstreamHeader(name: string): unknown;
  setResponseHeaders(headers: Record<string, string>): unknown;
  /** Makes the request authenticated as this identity, or as the named anonymous consumer; false when that consumer does not exist. */
  authenticate(as: { identity: VerifiedIdentity } | { anonymous: string }): Promise<boolean> | boolean;
  /** Persists the shared context for the plugins that run next (Kong: `kong.ctx.shared`; embedded: already shared). */
  saveShared(shared: SharedContext): unknown;
  /** Answers now; nothing of the request runs after it. */
  exit(status: number, body: unknown, headers: Record<string, string>): unknown;
}

/** The request id a client sent, when acceptable; otherwise a new one. */
export function acceptRequestId(sent: string | undefined): string {
  return sent !== undefined && ACCEPTABLE_REQUEST_ID.test(sent) ? sent : randomUUID();
}

/**
 * Fixes the request id once per request: the first plugin that runs takes the client's
 * X-Request-ID (or makes one), sends it upstream and back to the client. Later plugins find it in
 * the shared context. A host that fixed it itself (the embedded edge) sets `shared.requestId` first.
 */
export async function ensureRequestId(request: EdgeRequest, io: HostIO, sent: () => Promise<string | undefined> | string | undefined): Promise<string> {
  if (request.shared.requestId) return request.shared.requestId;
  const id = acceptRequestId(await sent());
  request.shared.requestId = id;
  await io.setUpstreamHeaders({ [REQUEST_ID_HEADER.toLowerCase()]: id });
  await io.setResponseHeaders({ [REQUEST_ID_HEADER]: id });
  await io.saveShared(request.shared);
  return id;
}

/**
 * SHA-256 (hex) of the API key a request presents, hashed once per request: the rate limiter (its
 * exempt-key memory, before authentication) and api-key-auth (its cache and the validator) both
 * need it. Kept on the request object the host hands to every plugin, which holds the key anyway.
 */
export function apiKeyHash(request: EdgeRequest, key: string): string {
  const known = request.keyHash;
  if (known !== undefined && known.key === key) return known.hash;
  const hash = sha256Hex(key);
  request.keyHash = { key, hash };
  return hash;
}

export const headerRequestId = (request: EdgeRequest) => firstHeader(request.headers, 'x-request-id');

/** Adds `request_id` to an error body (`{"error":{…}}`); other bodies pass unchanged. */
export function stampRequestId(body: unknown, requestId: string): unknown {
  if (body && typeof body === 'object' && !Buffer.isBuffer(body) && 'error' in body && typeof (body as { error: unknown }).error === 'object') {
    return { error: { ...(body as { error: object }).error, request_id: requestId } };
  }
  if (Buffer.isBuffer(body)) {
    // A static JSON body from configuration (request-termination): stamped too, when it is an error body.
    try {
      const parsed = JSON.parse(body.toString('utf8')) as unknown;
      if (parsed && typeof parsed === 'object' && 'error' in parsed) return stampRequestId(parsed, requestId);
    } catch {
      // not JSON: sent as configured
    }
  }
  return body;
}

export function exitWith(io: HostIO, status: number, body: unknown, headers: Record<string, string> | undefined, requestId: string): unknown {
  return io.exit(status, stampRequestId(body, requestId), { ...headers, [REQUEST_ID_HEADER]: requestId });
}

/**
 * Waits for a host effect only when it is pending: the embedded host's effects are synchronous,
 * and an `await` of a plain value still costs a turn of the microtask queue and its allocations,
 * several times per plugin on every request. Kong's effects are promises and are awaited in order.
 */
const pending = (value: unknown): value is PromiseLike<unknown> => typeof (value as PromiseLike<unknown> | null | undefined)?.then === 'function';

/**
 * Applies one decision through the host. Returns false when the request was answered (exit), true
 * when it continues to the next plugin.
 */
export async function applyDecision(io: HostIO, decision: Decision, request: EdgeRequest, requestId: string): Promise<boolean> {
  if (decision.kind === 'respond') {
    await exitWith(io, decision.status, decision.body, decision.headers, requestId);
    return false;
  }
  const shared = request.shared;
  let changed = false;
  let effect: unknown;
  if (decision.failure) {
    shared.failures = [...(shared.failures ?? []), decision.failure];
    changed = true;
  }
  if (decision.share) {
    Object.assign(shared, decision.share);
    changed = true;
  }
  if (decision.identity) {
    shared[decision.identity.authMethod] = decision.identity;
    shared.anonymous = false;
    if (pending((effect = io.saveShared(shared)))) await effect;
    changed = false;
    // A verified credential replaces an anonymous consumer an earlier plugin may have set.
    if (pending((effect = io.authenticate({ identity: decision.identity })))) await effect;
  } else if (decision.anonymous && !shared.jwt && !shared.apikey) {
    shared.anonymous = true;
    if (pending((effect = io.saveShared(shared)))) await effect;
    changed = false;
    if (!(await io.authenticate({ anonymous: decision.anonymous }))) {
      await exitWith(io, 500, errorBody(500, 'The gateway is misconfigured (anonymous consumer missing)'), undefined, requestId);
      return false;
    }
  }
  if (changed && pending((effect = io.saveShared(shared)))) await effect;
  if (decision.removeUpstream) {
    for (const name of decision.removeUpstream) if (pending((effect = io.clearUpstreamHeader(name)))) await effect;
  }
  if (decision.setUpstream && hasKeys(decision.setUpstream) && pending((effect = io.setUpstreamHeaders(decision.setUpstream)))) await effect;
  if (decision.responseHeaders && hasKeys(decision.responseHeaders) && pending((effect = io.setResponseHeaders(decision.responseHeaders)))) await effect;
  return true;
}

/** `Object.keys(o).length > 0` without the array. */
function hasKeys(object: object): boolean {
  for (const _ in object) return true;
  return false;
}

/** Runs one phase of one plugin: never throws, never fails open (a throwing plugin answers 500). */
export async function runPlugin(
  core: PluginCore,
  phase: 'rewrite' | 'access',
  request: EdgeRequest,
  io: HostIO,
  context: { name: string; requestId: string; logger: PluginLogger },
): Promise<boolean> {
  let decision: Decision;
  try {
    decision = phase === 'rewrite' ? await core.rewrite!(request) : await core.access(request);
  } catch (error) {
    context.logger.error({ err: (error as Error).message, plugin: context.name, phase, request_id: context.requestId }, 'gateway: plugin failed');
    await exitWith(io, 500, errorBody(500, 'The gateway could not process the request'), undefined, context.requestId);
    return false;
  }
  return await applyDecision(io, decision, request, context.requestId);
}
