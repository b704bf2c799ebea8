/**
 * The host-neutral plugin contract. A core sees one request (method, path, headers, client IP and
 * the per-request shared context that earlier plugins filled) and returns a decision: continue
 * with these changes, or answer now. Cores import neither Kong nor Express: the same core runs in
 * Kong (through `kong.ts` adapters), in services/gateway, or in any other Node gateway.
 */
import type { MaybePromise } from '../../services/kit/core/index.js';

/** Header names are lower-case; a repeated header is an array (Kong's multimap shape). */
export type HeaderMap = Record<string, string | string[] | undefined>;

/** The caller as an auth core verified it. Never built from client-sent identity headers. */
export interface VerifiedIdentity {
  authMethod: 'jwt' | 'apikey';
  userId: string;
  subject: string;
  email: string | null;
  username: string | null;
  isGuest: boolean;
  /** Tokens: the `email_verified` claim when present (false: an account nobody verified). */
  emailVerified?: boolean | null;
  /** API keys: the key's tier and custom limits from the validator. */
  tier?: string | null;
  limits?: TierLimits | null;
  /** API keys: the owner is an administrator (as the validator reported it). */
  isAdmin?: boolean;
  /** API keys: the key's id (`key_…`) as the validator reported it, for usage attribution upstream. */
  keyId?: string | null;
  /** Rate-limit bucket of the credential: `key:<sha256>` for API keys, `user:<id>` for tokens. Internal: never logged (Kong registers an API key by its `keyId`, see `credentialIdOf`). */
  bucket: string;
}

export interface TierLimits {
  minute?: number | null;
  day?: number | null;
}

/** What plugins of one request share (Kong: `kong.ctx.shared`). */
export interface SharedContext {
  /** Verified identities by method; both may be present (then they must name the same user). */
  jwt?: VerifiedIdentity;
  apikey?: VerifiedIdentity;
  /** Set when no credential was presented and an auth plugin fell back to the anonymous consumer. */
  anonymous?: boolean;
  /**
   * Credentials presented but refused by a plugin configured with `anonymous` (OR logic: another
   * credential may still authenticate the request). The anonymous refusal reports them.
   */
  failures?: CredentialFailure[];
  /** The request's id (X-Request-ID), fixed by the first plugin that runs; every refusal carries it. */
  requestId?: string;
  /**
   * A per-address refusal the rate limiter put off until the credential is known (the request
   * carries an API key, and keys of some tiers are exempt from the per-address limit).
   */
  deferredIpRefusal?: { status: number; message: string; code: string; headers: Record<string, string> };
  /**
   * The rate limiter left the per-address count of this request to the access phase (its API key
   * was seen valid in the last minute), where it goes to the counters with the tier count at once.
   */
  ipCountAtAccess?: boolean;
}

export interface CredentialFailure {
  method: 'jwt' | 'apikey';
  /** 401: the credential is wrong; 503: it could not be checked (JWKS or validator down). */
  status: 401 | 503;
  message: string;
  /** The header that carried the refused credential, named by the error's `param` when it is the only failure. */
  param?: string | null;
}

export interface EdgeRequest {
  method: string;
  path: string;
  headers: HeaderMap;
  clientIp: string;
  shared: SharedContext;
  /** Set by `apiKeyHash`: the presented key's hash, for the next plugin that needs it on this request. */
  keyHash?: { key: string; hash: string };
}

export interface Continue {
  kind: 'continue';
  /** Headers to set on the upstream request (replacing any client value). */
  setUpstream?: Record<string, string>;
  /** Headers to remove from the upstream request. */
  removeUpstream?: string[];
  /** Headers to add to the response sent to the client. */
  responseHeaders?: Record<string, string>;
  /** Identity verified by this plugin (stored in the shared context by the host). */
  identity?: VerifiedIdentity;
  /** No credential presented (or, with OR logic, a refused one): authenticate as the configured anonymous consumer. */
  anonymous?: string;
  /** Why a presented credential was refused while falling back to `anonymous`. */
  failure?: CredentialFailure;
  /** Facts for the plugins that run later in this request (merged into the shared context). */
  share?: Pick<SharedContext, 'deferredIpRefusal' | 'ipCountAtAccess'>;
}

export interface Respond {
  kind: 'respond';
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

export type Decision = Continue | Respond;

export const CONTINUE: Continue = Object.freeze({ kind: 'continue' }) as Continue;

/** One plugin instance: built once per configuration, shared by all concurrent requests. */
export interface PluginCore {
  /** Kong's rewrite phase: global plugins only, before routing and authentication (no identity yet). */
  rewrite?(request: EdgeRequest): MaybePromise<Decision>;
  access(request: EdgeRequest): MaybePromise<Decision>;
  /**
   * What this plugin's rewrite phase left to its access phase for this request (the rate limiter's
   * per-address count of a key it knows: `shared.ipCountAtAccess`), done now. A host that lets the
   * rewrite leave work to the access phase calls it, at most once, when the request is answered
   * before that phase runs (no route, 405, a CORS preflight, an earlier plugin's refusal), or when
   * another instance of the plugin takes the access phase (a route-level one).
   */
  settleRewrite?(request: EdgeRequest): MaybePromise<Decision>;
  close?(): Promise<void>;
}

export interface PluginLogger {
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
}

export const silentLogger: PluginLogger = { warn() {}, error() {} };

/** A CORS preflight: OPTIONS with `Origin` and `Access-Control-Request-Method`. Any other OPTIONS is an ordinary request. */
export function isPreflight(request: Pick<EdgeRequest, 'method' | 'headers'>): boolean {
  return request.method === 'OPTIONS' && !!firstHeader(request.headers, 'origin') && !!firstHeader(request.headers, 'access-control-request-method');
}

/** First value of a header (Kong's `get_header` returns the first of repeated values). */
export function firstHeader(headers: HeaderMap, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * A value a host can send upstream as a header: what an HTTP/1.1 field value may hold (RFC 9110:
 * visible characters, spaces, tabs, and obs-text, which Node sends as Latin-1). A verified claim
 * outside it (a Unicode name an external issuer signed, a line break) would make the embedded
 * edge's upstream request throw (a 500 on every request of that user).
 */
export function fitsInHeader(value: string): boolean {
  return HEADER_VALUE.test(value);
}
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/** The identity the auth plugins verified for this request (a token wins over a key), if any. */
export const identityOf = (shared: SharedContext): VerifiedIdentity | undefined => shared.jwt ?? shared.apikey;

/**
 * The person a verified credential belongs to, named the way their tokens name them: a token's
 * user claim (`userId`, `sub` by default), and for an API key the validator's `subject` (the
 * users row's subject: the id the user's tokens carry; the key's `user_id` when it reports none).
 * With the embedded issuer both are the platform id. With an external issuer (Keycloak) a key's
 * `user_id` is the platform id (`user_…`) while the user's tokens carry the issuer's id, so the
 * per-user limits and the same-user check of a token and a key go by this, never by `userId`.
 */
export function personOf(identity: VerifiedIdentity): string {
  return identity.authMethod === 'jwt' ? identity.userId : identity.subject;
}
