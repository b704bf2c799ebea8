import { systemClock, type Clock, type MaybePromise } from '../../services/kit/core/index.js';
import type { RevocationChannel } from '../../services/kit/core/index.js';
import { apiKeyHash, deny, MISSING_CREDENTIALS_MESSAGE, personOf } from '../core/index.js';
import { CONTINUE, firstHeader, isPreflight, silentLogger, type Decision, type EdgeRequest, type PluginCore, type PluginLogger, type VerifiedIdentity } from '../core/index.js';
import { ValidationCache } from './cache.js';
import type { ApiKeyAuthConfig } from './schema.js';
import { createKeyValidator, ownLimitsOf, type ValidationResult } from './validator.js';

export const PRIORITY = 1250; // like Kong's key-auth: after jwt auth
const KEY_FORMAT = /^sk_[0-9A-Za-z]{32}$/;
const BEARER_KEY = /^Bearer\s+(sk_\S*)\s*$/i;

export interface ApiKeyAuthDeps {
  clock?: Clock;
  logger?: PluginLogger;
  /** Replaces the HTTP validator (tests of the host adapters only). */
  validate?: (apiKey: string) => Promise<ValidationResult>;
}

/**
 * `X-API-Key: sk_…` (or `Authorization: Bearer sk_…`, as OpenAI SDKs send it) checked by llm-api's validator, cached briefly by SHA-256 and purged by
 * revocation messages, never past the key's own `expires_at`. The key header never goes upstream.
 * A malformed or unknown key → 401; validator down or slow → 503 (never a pass-through). With
 * `anonymous` configured (OR logic), a refused key beside a valid token is ignored, and without a
 * token the request falls back to the anonymous consumer with the reason recorded. A valid key of
 * another person than a valid token on the same request → 401 (compared by `personOf`: the id the
 * user's tokens carry, which the validator reports for a key as `subject`).
 */
/** The validator's `expires_at` (Unix seconds; null = never) in milliseconds. */
function expiresAtMs(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value * 1000 : null;
}

export function createApiKeyAuth(config: ApiKeyAuthConfig, deps: ApiKeyAuthDeps = {}) {
  const clock = deps.clock ?? systemClock;
  const logger = deps.logger ?? silentLogger;
  const header = config.header_name.toLowerCase();
  const cache = new ValidationCache({ ttlMs: config.cache_ttl_seconds * 1000, maxEntries: config.cache_max_entries, clock });
  const validator = deps.validate ? null : createKeyValidator({ url: config.validate_url, gatewayToken: config.gateway_token, timeoutMs: config.timeout_ms });
  const validate = deps.validate ?? validator!.validate;
  const inflight = new Map<string, Promise<{ result: ValidationResult; epoch: number }> & { epoch: number }>();
  const unsubscribers: Array<() => Promise<void>> = [];
  // The header an error's `param` names: the one the key came in (the default spelled as documented).
  const keyHeader = header === 'x-api-key' ? 'X-API-Key' : config.header_name;
  const removeKey = [header];
  const removeKeyAndBearer = [header, 'authorization'];

  /** The validator's answer for a key the cache does not hold (one call per key at a time). */
  async function validateKey(hash: string, apiKey: string): Promise<VerifiedIdentity | 'invalid' | { unavailable: string }> {
    // A call started before a revocation (the epoch moved since) may answer for a revoked key: a
    // request arriving after it gets a call of its own instead of joining that one.
    let pending = inflight.get(hash);
    if (!pending || pending.epoch !== cache.epoch) {
      const epoch = cache.epoch;
      const started = Object.assign(validate(apiKey).then((result) => ({ result, epoch })), { epoch });
      pending = started;
      inflight.set(hash, started);
      started.finally(() => inflight.get(hash) === started && inflight.delete(hash)).catch(() => {});
    }
    const { result, epoch } = await pending;
    if (result.kind === 'invalid') return 'invalid';
    if (result.kind === 'unavailable') return { unavailable: result.reason };
    const key = result.key;
    const identity: VerifiedIdentity = {
      authMethod: 'apikey',
      userId: key.user_id,
      subject: typeof key.subject === 'string' && key.subject ? key.subject : key.user_id,
      email: typeof key.email === 'string' ? key.email : null,
      username: typeof key.username === 'string' ? key.username : null,
      isGuest: false,
      isAdmin: key.is_admin === true,
      tier: typeof key.tier === 'string' ? key.tier : null,
      limits: ownLimitsOf(key),
      keyId: typeof key.key_id === 'string' ? key.key_id : null,
      bucket: `key:${hash}`,
    };
    cache.set(hash, identity, epoch, expiresAtMs(key.expires_at));
    return identity;
  }

  /** A refused key: with `anonymous` configured (OR logic) a valid token on the same request still authenticates it. */
  function refuse(request: EdgeRequest, status: 401 | 503, message: string, param: string | null): Decision {
    if (request.shared.jwt) return { kind: 'continue', removeUpstream: removeKeyAndBearerIfAny(request) };
    if (config.anonymous) return { kind: 'continue', anonymous: config.anonymous, failure: { method: 'apikey', status, message, param } };
    return deny(status, message, { param });
  }

  /** Synchronous for a key the cache holds (every request but a key's first in a while). */
  function access(request: EdgeRequest): MaybePromise<Decision> {
    if (!config.run_on_preflight && isPreflight(request)) return CONTINUE;
    const sent = request.headers[header];
    let apiKey = Array.isArray(sent) ? sent[0] : sent;
    // Repeated, the header is a list of lines on Kong and one comma-joined line in Node: either way
    // it names more than one key (a key holds no comma), and neither host picks one for the caller.
    if ((Array.isArray(sent) && sent.length > 1) || (apiKey !== undefined && apiKey.includes(','))) {
      return refuse(request, 401, `${config.header_name} must carry exactly one API key`, keyHeader);
    }
    const bearer = config.accept_bearer ? BEARER_KEY.exec(firstHeader(request.headers, 'authorization') ?? '') : null;
    // The key header wins over a Bearer key: the one checked is the one a refusal names.
    const fromBearer = (apiKey === undefined || apiKey === '') && bearer !== null;
    if (fromBearer) apiKey = bearer[1]!;
    if (apiKey === undefined || apiKey === '') {
      if (request.shared.jwt) return CONTINUE;
      return config.anonymous ? { kind: 'continue', anonymous: config.anonymous } : deny(401, MISSING_CREDENTIALS_MESSAGE);
    }
    if (!KEY_FORMAT.test(apiKey)) return refuse(request, 401, 'Invalid API key', fromBearer ? 'Authorization' : keyHeader);
    const hash = apiKeyHash(request, apiKey);
    const cached = cache.get(hash);
    if (cached) return accept(request, cached, fromBearer);
    return validateKey(hash, apiKey).then((found) => accept(request, found, fromBearer));
  }

  function accept(request: EdgeRequest, found: VerifiedIdentity | 'invalid' | { unavailable: string }, fromBearer: boolean): Decision {
    if (found === 'invalid') return refuse(request, 401, 'Invalid API key', fromBearer ? 'Authorization' : keyHeader);
    if ('unavailable' in found) {
      logger.error({ reason: found.unavailable }, 'api-key-auth: validator unavailable');
      return refuse(request, 503, 'API key validation is temporarily unavailable', null);
    }
    // One person whichever credential: with an external issuer the token names the issuer's id and
    // the key's owner is reported as the platform id, with the token's id as its `subject`.
    if (request.shared.jwt && personOf(request.shared.jwt) !== personOf(found)) {
      return deny(401, 'The bearer token and the API key belong to different users');
    }
    // A key that came as the Bearer value is that header: no second look at it on the hot path.
    return { kind: 'continue', identity: found, removeUpstream: fromBearer ? removeKeyAndBearer : removeKeyAndBearerIfAny(request) };
  }

  /** The key never goes upstream, even when it was ignored. */
  function removeKeyAndBearerIfAny(request: EdgeRequest): string[] {
    const bearer = BEARER_KEY.test(firstHeader(request.headers, 'authorization') ?? '');
    return bearer ? removeKeyAndBearer : removeKey;
  }

  /** Purges on every revocation; a lost subscription (onResync) flushes everything. */
  async function attach(channel: RevocationChannel): Promise<void> {
    unsubscribers.push(await channel.subscribe({ onRevoked: (message) => cache.revoke(message), onResync: () => cache.flush() }));
  }

  async function close(): Promise<void> {
    for (const unsubscribe of unsubscribers.splice(0)) await unsubscribe().catch(() => {});
    await validator?.close();
  }

  return { access, attach, close, cache } satisfies PluginCore & Record<string, unknown>;
}
