/**
 * The host-neutral plugin contract. A core sees one request (method, path, headers, client IP and
 * the per-request shared context that earlier plugins filled) and returns a decision: continue
 * with these changes, or answer now. Cores import neither Kong nor Express: the same core runs in
 * Kong (through `kong.ts` adapters), in services/gateway, or in any other Node gateway.
 */

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
  /** API keys: the key's tier and custom limits from the validator. */
  tier?: string | null;
  limits?: TierLimits | null;
  /** API keys: the key's id (`key_…`) as the validator reported it, for usage attribution upstream. */
  keyId?: string | null;
  /** Rate-limit bucket of the credential: `key:<sha256>` for API keys, `user:<id>` for tokens. */
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
}

export interface EdgeRequest {
  method: string;
  path: string;
  headers: HeaderMap;
  clientIp: string;
  shared: SharedContext;
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
  /** No credential presented: authenticate as the configured anonymous consumer. */
  anonymous?: string;
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
  rewrite?(request: EdgeRequest): Promise<Decision> | Decision;
  access(request: EdgeRequest): Promise<Decision> | Decision;
  close?(): Promise<void>;
}

export interface PluginLogger {
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
}

export const silentLogger: PluginLogger = { warn() {}, error() {} };

/** First value of a header (Kong's `get_header` returns the first of repeated values). */
export function firstHeader(headers: HeaderMap, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}
