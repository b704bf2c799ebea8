import { encodeIdentityText, GATEWAY_TOKEN_HEADER, IDENTITY_HEADERS, startsWithAny } from '../../services/kit/core/index.js';
import { connectionOptions, deny, identityOf, INVALID_TOKEN_CHALLENGE, MISSING_CREDENTIALS_MESSAGE } from '../core/index.js';
import type { Decision, EdgeRequest, PluginCore, SharedContext } from '../core/index.js';
import type { IdentityHeadersConfig } from './schema.js';

export const PRIORITY = 1000; // after every auth plugin (1450, 1250), before rate limiting (910)

/** The identity the request was authenticated with: the token's when both were presented (same user). */

/**
 * Strips every client-sent identity header (`X-User-*`, `X-Auth-Method`, `X-Gateway-*`, the API key,
 * `Forwarded`, a client's own claim about its address, and Kong's own `KONG_CONSUMER_HEADERS`),
 * then sets X-Auth-Method, X-User-ID, X-User-Subject, X-User-Email, X-User-Username from the verified
 * identity only, and X-Gateway-Token when configured. Runs on every route, public ones included.
 * With `refuse_anonymous`, a request the auth plugins left to the anonymous consumer (no credential,
 * or only refused ones) is answered here, after every auth plugin had its say (OR logic), in the
 * platform's error shape with the reason and the request id; Kong's consumer-scoped
 * request-termination on the anonymous consumer stays as a second line.
 */
/**
 * Stripped whatever the configuration lists: the services take these from the edge alone (the
 * identity, the gateway token, the project a platform service names), so a configuration that
 * leaves one out must not let a client set it. The configured lists add to these.
 */
const ALWAYS_STRIPPED_PREFIXES = ['x-user-', 'x-gateway-'];
const ALWAYS_STRIPPED = [IDENTITY_HEADERS.authMethod];

/**
 * The identity headers Kong's bundled plugins set on the upstream request (key-auth, jwt,
 * basic-auth, oauth2, hmac-auth, ldap-auth, acl…). Kong itself neither sets nor removes them for our
 * plugins, so a client-sent one would reach the service as if Kong had vouched for it: stripped
 * with `strip_kong_consumer_headers` (the default), in the same loop as the others (no extra cost).
 * Not in a phase before Kong's auth plugins: only the rewrite phase comes before them, which Kong
 * runs for global plugins only and which would be a second plugin-server event per request.
 */
export const KONG_CONSUMER_HEADERS = [
  'x-consumer-id',
  'x-consumer-custom-id',
  'x-consumer-username',
  'x-consumer-groups',
  'x-credential-identifier',
  'x-anonymous-consumer',
  'x-authenticated-groups',
  'x-authenticated-scope',
  'x-authenticated-userid',
];

export function createIdentityHeaders(config: IdentityHeadersConfig): PluginCore {
  const prefixes = [...new Set([...ALWAYS_STRIPPED_PREFIXES, ...config.strip_header_prefixes.map((p) => p.toLowerCase())])];
  const exact = new Set([...ALWAYS_STRIPPED, ...config.strip_headers.map((h) => h.toLowerCase()), ...(config.strip_kong_consumer_headers ? KONG_CONSUMER_HEADERS : [])]);

  const guarded = (lower: string) => exact.has(lower) || startsWithAny(lower, prefixes);

  function access(request: EdgeRequest): Decision {
    if (config.refuse_anonymous && request.shared.anonymous && !identityOf(request.shared)) return anonymousRefusal(request.shared);
    const dropped = connectionOption(request.headers.connection, guarded);
    if (dropped !== null) return deny(400, `The Connection header may not name ${dropped}: the gateway removes or sets that header for the service`, { param: 'Connection' });
    const removeUpstream: string[] = [];
    for (const name of Object.keys(request.headers)) {
      const lower = name.toLowerCase();
      if (guarded(lower)) removeUpstream.push(lower);
    }
    const setUpstream: Record<string, string> = {};
    if (config.gateway_token) setUpstream[GATEWAY_TOKEN_HEADER] = config.gateway_token;
    const identity = identityOf(request.shared);
    if (identity) {
      setUpstream[IDENTITY_HEADERS.authMethod] = identity.authMethod;
      setUpstream[IDENTITY_HEADERS.userId] = identity.userId;
      setUpstream[IDENTITY_HEADERS.subject] = identity.subject;
      // Unicode travels encoded (encodeIdentityText); a string with no UTF-8 form is left out, never a failed request.
      const email = identity.email ? encodeIdentityText(identity.email) : null;
      if (email) setUpstream[IDENTITY_HEADERS.email] = email;
      const username = identity.username ? encodeIdentityText(identity.username) : null;
      if (username) setUpstream[IDENTITY_HEADERS.username] = username;
      if (identity.authMethod === 'apikey' && identity.keyId) setUpstream[IDENTITY_HEADERS.apiKeyId] = identity.keyId;
    }
    return { kind: 'continue', removeUpstream, setUpstream };
  }

  return { access };
}

/**
 * The first header the request's `Connection` header names (any case, repeated or comma-joined)
 * that `guarded` holds, or null. Kong clears every header `Connection` names after the access
 * phase (its runloop's hop-by-hop clearing), so such a request would reach the service without the
 * identity headers set here: without `X-User-Key-Id` a key's own budget and model allow-list
 * would not apply, without `X-User-ID` it would be anonymous. No client needs to name them.
 */
function connectionOption(value: string | string[] | undefined, guarded: (lower: string) => boolean): string | null {
  const name = connectionOptions(value).find(guarded);
  return name === undefined ? null : name.slice(0, 64);
}

/** 503 when a credential could not be checked (and none succeeded); otherwise 401 with the reasons. */
function anonymousRefusal(shared: SharedContext): Decision {
  const failures = shared.failures ?? [];
  const unavailable = failures.find((f) => f.status === 503);
  if (unavailable) return deny(503, unavailable.message);
  if (failures.length === 0) return deny(401, MISSING_CREDENTIALS_MESSAGE);
  const message = failures.map((f) => f.message).join('; ');
  const param = failures.length === 1 ? (failures[0]!.param ?? null) : null;
  return deny(401, message, { param, headers: INVALID_TOKEN_CHALLENGE });
}

// Kept here too: the identity a request carries is this plugin's subject.
export { identityOf };
