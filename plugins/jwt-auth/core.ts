import { decodeProtectedHeader, errors as joseErrors, jwtVerify, type JWTPayload, type ProtectedHeaderParameters } from 'jose';
import { systemClock, type Clock, type MaybePromise } from '../../services/kit/core/index.js';
import { deny, INVALID_CREDENTIALS_MESSAGE, INVALID_TOKEN_CHALLENGE, MISSING_CREDENTIALS_MESSAGE } from '../core/index.js';
import { CONTINUE, firstHeader, fitsInHeader, isPreflight, silentLogger, type Decision, type EdgeRequest, type PluginCore, type PluginLogger } from '../core/index.js';
import { JwksCache, JwksUnavailableError } from './jwks.js';
import type { JwtAuthConfig } from './schema.js';

export const PRIORITY = 1450; // like Kong's bundled jwt plugin: after cors, before key auth
const BEARER = /^Bearer\s+([A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*)\s*$/i;
const API_KEY_BEARER = /^Bearer\s+sk_/i;

export interface JwtAuthDeps {
  clock?: Clock;
  fetch?: typeof fetch;
  logger?: PluginLogger;
}

/**
 * Verifies `Authorization: Bearer` tokens against the issuer's JWKS: signature with an allow-listed
 * asymmetric algorithm, issuer, audience, `exp` (required), `nbf`, `iat` not in the future, and a
 * lifetime (exp − iat, or exp − nbf) of at most `max_lifetime_seconds`. No token → anonymous
 * (OR logic with api-key-auth) or 401. A presented token that fails any check → 401, or, with
 * `anonymous` configured, the anonymous consumer plus the reason (an API key may still succeed;
 * the anonymous refusal reports the reason otherwise).
 */
export function createJwtAuth(config: JwtAuthConfig, deps: JwtAuthDeps = {}): PluginCore & { jwks: JwksCache } {
  const clock = deps.clock ?? systemClock;
  const logger = deps.logger ?? silentLogger;
  const jwks = new JwksCache(config.jwks_url, {
    cooldownMs: config.jwks_refresh_cooldown_seconds * 1000,
    maxAgeMs: config.jwks_max_age_seconds * 1000,
    timeoutMs: config.jwks_timeout_ms,
    clock,
    fetch: deps.fetch,
  });
  // With `anonymous` configured (OR logic) a refused token is not the last word: the request falls
  // back to the anonymous consumer, and another credential (an API key) may still authenticate it.
  const refuse = (message: string): Decision =>
    config.anonymous
      ? { kind: 'continue', anonymous: config.anonymous, failure: { method: 'jwt', status: 401, message } }
      : deny(401, message, { headers: INVALID_TOKEN_CHALLENGE });

  /** Synchronous when there is no token to verify (an API-key caller, or none at all). */
  function access(request: EdgeRequest): MaybePromise<Decision> {
    if (!config.run_on_preflight && isPreflight(request)) return CONTINUE;
    const header = firstHeader(request.headers, 'authorization');
    // `Bearer sk_…` is an API key (OpenAI SDKs send keys that way): api-key-auth handles it.
    if (header === undefined || header === '' || API_KEY_BEARER.test(header)) {
      return config.anonymous ? { kind: 'continue', anonymous: config.anonymous } : deny(401, MISSING_CREDENTIALS_MESSAGE);
    }
    const match = BEARER.exec(header);
    if (!match) return refuse(INVALID_CREDENTIALS_MESSAGE);
    const token = match[1]!;

    let protectedHeader;
    try {
      protectedHeader = decodeProtectedHeader(token);
    } catch {
      return refuse('Malformed token');
    }
    if (typeof protectedHeader.alg !== 'string' || !config.algorithms.includes(protectedHeader.alg)) {
      return refuse('Token algorithm not accepted');
    }
    return verify(token, protectedHeader);
  }

  async function verify(token: string, protectedHeader: ProtectedHeaderParameters): Promise<Decision> {
    const now = clock.now();
    let payload: JWTPayload;
    try {
      const resolver = await jwks.resolverFor(protectedHeader);
      ({ payload } = await jwtVerify(token, resolver, {
        issuer: config.issuer,
        audience: config.audience,
        algorithms: config.algorithms,
        currentDate: new Date(now),
        clockTolerance: config.clock_skew_seconds,
        requiredClaims: ['exp'],
      }));
    } catch (error) {
      if (error instanceof JwksUnavailableError) {
        logger.error({ err: error.message }, 'jwt-auth: JWKS unavailable');
        const message = 'Token verification is temporarily unavailable';
        return config.anonymous ? { kind: 'continue', anonymous: config.anonymous, failure: { method: 'jwt', status: 503, message } } : deny(503, message);
      }
      return refuse(describe(error));
    }

    const nowSeconds = now / 1000;
    const skew = config.clock_skew_seconds;
    if (typeof payload.iat === 'number' && payload.iat > nowSeconds + skew) return refuse('Token issued in the future');
    const start = typeof payload.iat === 'number' ? payload.iat : typeof payload.nbf === 'number' ? payload.nbf : nowSeconds;
    if (payload.exp! - start > config.max_lifetime_seconds) {
      return refuse(`Token lifetime exceeds ${config.max_lifetime_seconds} seconds`);
    }
    const userId = payload[config.user_id_claim];
    if (typeof userId !== 'string' || userId.length === 0 || userId.length > 256) return refuse('Token has no subject');
    const subject = typeof payload.sub === 'string' ? payload.sub : userId;
    // The user travels upstream in X-User-ID and X-User-Subject: a value no header can carry names no user the services can see.
    if (!fitsInHeader(userId) || !fitsInHeader(subject)) return refuse('Token subject cannot be passed on');
    const email = typeof payload.email === 'string' ? payload.email : null;
    const username = typeof payload.preferred_username === 'string' ? payload.preferred_username : null;
    return {
      kind: 'continue',
      identity: {
        authMethod: 'jwt',
        userId,
        subject,
        email,
        username,
        isGuest: payload[config.guest_claim] === true,
        emailVerified: typeof payload.email_verified === 'boolean' ? payload.email_verified : null,
        bucket: `user:${userId}`,
      },
    };
  }

  return { access, jwks };
}

function describe(error: unknown): string {
  if (error instanceof joseErrors.JWTExpired) return 'Token expired';
  if (error instanceof joseErrors.JWTClaimValidationFailed) {
    if (error.claim === 'nbf') return 'Token not yet valid';
    if (error.claim === 'iss') return 'Token issuer not accepted';
    if (error.claim === 'aud') return 'Token audience not accepted';
    if (error.claim === 'exp') return 'Token has no expiry';
    return `Token claim "${error.claim}" is invalid`;
  }
  if (error instanceof joseErrors.JWKSNoMatchingKey) return 'Token signed with an unknown key';
  if (error instanceof joseErrors.JOSEAlgNotAllowed) return 'Token algorithm not accepted';
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return 'Token signature is invalid';
  return 'Invalid token';
}
