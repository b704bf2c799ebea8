/**
 * The one plugin host runner. A host (the embedded edge in services/gateway, the Kong adapter in
 * kong-host.ts) implements `HostIO`, the handful of effects a decision can have; everything else
 * (merging identities and the anonymous consumer into the shared context, recording refused
 * credentials, request ids on every refusal, failing closed when a plugin throws) lives here once,
 * so both hosts answer the same request the same way.
 */
import { acceptRequestId, errorBody, isPending, sha256Hex, whenSettled, type MaybePromise } from '../../services/kit/core/index.js';
import type { Continue, Decision, EdgeRequest, PluginCore, PluginLogger, SharedContext, VerifiedIdentity } from './types.js';
import { firstHeader } from './types.js';

export const REQUEST_ID_HEADER = 'X-Request-ID';

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

/**
 * Fixes the request id once per request: the first plugin that runs takes the client's
 * X-Request-ID (or makes one), sends it upstream and back to the client. Later plugins find it in
 * the shared context. A host that fixed it itself (the embedded edge) sets `shared.requestId` first.
 * With `saveLater`, the shared context is not saved here: the caller passes `sharedUnsaved` to
 * `runPlugin`, whose decision saves it (once, with whatever the plugin adds) unless it answers the
 * request. Kong's `kong.ctx.shared.set` is a round trip to Kong, so a phase makes at most one.
 */
export async function ensureRequestId(request: EdgeRequest, io: HostIO, sent: () => Promise<string | undefined> | string | undefined, saveLater = false): Promise<string> {
  if (request.shared.requestId) return request.shared.requestId;
  const id = acceptRequestId(await sent());
  request.shared.requestId = id;
  await io.setUpstreamHeaders({ [REQUEST_ID_HEADER.toLowerCase()]: id });
  await io.setResponseHeaders({ [REQUEST_ID_HEADER]: id });
  if (!saveLater) await io.saveShared(request.shared);
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

/**
 * The most header lines a request may carry through either host. Kong's PDK hands a plugin at most
 * 1000 (`kong.request.get_headers(1000)`; 100 without the argument) and drops the rest silently:
 * only Lua's first return value crosses to the plugin server, never its "truncated". A header past
 * that count would still reach the upstream, unseen by identity-headers, which strips client-sent
 * identity. So a request that reaches the count is refused (431) by both hosts alike.
 */
export const MAX_HEADER_LINES = 1000;

/**
 * The header names a `Connection` header lists (any case, repeated or comma-joined), lower-cased:
 * hop-by-hop headers of this connection only (RFC 9110 section 7.6.1), which a proxy removes before
 * forwarding. Kong clears them after the access phase; the embedded edge when it copies the headers.
 */
export function connectionOptions(value: string | string[] | undefined): string[] {
  if (value === undefined) return [];
  const names: string[] = [];
  for (const line of Array.isArray(value) ? value : [value]) {
    for (const option of line.split(',')) {
      const name = option.trim().toLowerCase();
      if (name !== '') names.push(name);
    }
  }
  return names;
}

/** The 431 both hosts answer a request of `MAX_HEADER_LINES` header lines or more with. */
export function tooManyHeaderLines(requestId: string) {
  return {
    status: 431,
    body: errorBody(431, `The request carries ${MAX_HEADER_LINES} header lines or more; the gateway reads fewer`, { param: 'headers', requestId }),
    headers: { [REQUEST_ID_HEADER]: requestId },
  };
}

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
 * Applies one decision through the host. Returns false when the request was answered (exit), true
 * when it continues to the next plugin: synchronously while the host's effects are, as a promise
 * from the first effect that is pending.
 */
export function applyDecision(io: HostIO, decision: Decision, request: EdgeRequest, requestId: string, sharedUnsaved = false): MaybePromise<boolean> {
  if (decision.kind === 'respond') return whenSettled(exitWith(io, decision.status, decision.body, decision.headers, requestId), () => false);
  const shared = request.shared;
  let changed = sharedUnsaved;
  if (decision.failure) {
    shared.failures = [...(shared.failures ?? []), decision.failure];
    changed = true;
  }
  if (decision.share) {
    Object.assign(shared, decision.share);
    changed = true;
  }
  // An anonymous consumer only where no credential has been verified yet.
  const anonymous = decision.identity ? undefined : decision.anonymous && !shared.jwt && !shared.apikey ? decision.anonymous : undefined;
  if (decision.identity) {
    shared[decision.identity.authMethod] = decision.identity;
    shared.anonymous = false;
  } else if (anonymous) {
    shared.anonymous = true;
  }
  // Saved once, before the consumer is set, when anything in it changed.
  const save = changed || decision.identity !== undefined || anonymous !== undefined;
  return applyEffects(io, decision, shared, save, anonymous, requestId, 0);
}

/**
 * The host effects of a continuing decision, in order, from step `from`: save the shared context;
 * authenticate (a verified credential replaces an anonymous consumer an earlier plugin may have
 * set); strip upstream headers; set upstream headers; set response headers. At an effect that is
 * pending, the steps after it continue once it settles.
 */
function applyEffects(io: HostIO, decision: Continue, shared: SharedContext, save: boolean, anonymous: string | undefined, requestId: string, from: number): MaybePromise<boolean> {
  const removals = decision.removeUpstream?.length ?? 0;
  for (let step = from; ; step++) {
    let effect: unknown;
    if (step === 0) {
      if (save) effect = io.saveShared(shared);
    } else if (step === 1) {
      if (decision.identity) effect = io.authenticate({ identity: decision.identity });
      else if (anonymous) {
        const found = io.authenticate({ anonymous });
        if (isPending(found)) {
          const after = step + 1;
          return Promise.resolve(found).then((exists) => (exists ? applyEffects(io, decision, shared, save, anonymous, requestId, after) : misconfigured(io, requestId)));
        }
        if (!found) return misconfigured(io, requestId);
      }
    } else if (step < 2 + removals) {
      effect = io.clearUpstreamHeader(decision.removeUpstream![step - 2]!);
    } else if (step === 2 + removals) {
      if (decision.setUpstream && hasKeys(decision.setUpstream)) effect = io.setUpstreamHeaders(decision.setUpstream);
    } else if (step === 3 + removals) {
      if (decision.responseHeaders && hasKeys(decision.responseHeaders)) effect = io.setResponseHeaders(decision.responseHeaders);
    } else {
      return true;
    }
    if (isPending(effect)) {
      const after = step + 1;
      return Promise.resolve(effect).then(() => applyEffects(io, decision, shared, save, anonymous, requestId, after));
    }
  }
}

/** The anonymous consumer the configuration names does not exist on the host. */
function misconfigured(io: HostIO, requestId: string): MaybePromise<boolean> {
  return whenSettled(exitWith(io, 500, errorBody(500, 'The gateway is misconfigured (anonymous consumer missing)'), undefined, requestId), () => false);
}

/** `Object.keys(o).length > 0` without the array. */
function hasKeys(object: object): boolean {
  for (const _ in object) return true;
  return false;
}

/**
 * Runs one phase of one plugin: never throws, never fails open (a throwing plugin answers 500).
 * Synchronous while the plugin's decision and the host's effects are; a promise otherwise.
 */
export function runPlugin(
  core: PluginCore,
  phase: 'rewrite' | 'access' | 'settle',
  request: EdgeRequest,
  io: HostIO,
  context: { name: string; requestId: string; logger: PluginLogger; sharedUnsaved?: boolean },
): MaybePromise<boolean> {
  let decision: MaybePromise<Decision>;
  try {
    decision = phase === 'access' ? core.access(request) : phase === 'rewrite' ? core.rewrite!(request) : core.settleRewrite!(request);
  } catch (error) {
    return pluginFailed(error, phase, io, context);
  }
  if (!isPending(decision)) return applyDecision(io, decision, request, context.requestId, context.sharedUnsaved);
  return Promise.resolve(decision).then(
    (settled) => applyDecision(io, settled, request, context.requestId, context.sharedUnsaved),
    (error) => pluginFailed(error, phase, io, context),
  );
}

function pluginFailed(error: unknown, phase: string, io: HostIO, context: { name: string; requestId: string; logger: PluginLogger }): MaybePromise<boolean> {
  context.logger.error({ err: (error as Error).message, plugin: context.name, phase, request_id: context.requestId }, 'gateway: plugin failed');
  return whenSettled(exitWith(io, 500, errorBody(500, 'The gateway could not process the request'), undefined, context.requestId), () => false);
}
