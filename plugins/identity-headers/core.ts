import { GATEWAY_TOKEN_HEADER, IDENTITY_HEADERS } from '../../services/kit/identity/principal.js';
import type { Continue, EdgeRequest, PluginCore, VerifiedIdentity } from '../core/types.js';
import type { IdentityHeadersConfig } from './schema.js';

export const PRIORITY = 1000; // after every auth plugin (1450, 1250), before rate limiting (910)

/** The identity the request was authenticated with: the token's when both were presented (same user). */
export const identityOf = (shared: EdgeRequest['shared']): VerifiedIdentity | undefined => shared.jwt ?? shared.apikey;

/**
 * Strips every client-sent identity header (`X-User-*`, `X-Auth-Method`, `X-Gateway-*`, the API key),
 * then sets X-Auth-Method, X-User-ID, X-User-Subject, X-User-Email, X-User-Username from the verified
 * identity only, and X-Gateway-Token when configured. Runs on every route, public ones included.
 */
export function createIdentityHeaders(config: IdentityHeadersConfig): PluginCore {
  const prefixes = config.strip_header_prefixes.map((p) => p.toLowerCase());
  const exact = new Set(config.strip_headers.map((h) => h.toLowerCase()));

  function access(request: EdgeRequest): Continue {
    const removeUpstream: string[] = [];
    for (const name of Object.keys(request.headers)) {
      const lower = name.toLowerCase();
      if (exact.has(lower) || prefixes.some((p) => lower.startsWith(p))) removeUpstream.push(lower);
    }
    const setUpstream: Record<string, string> = {};
    if (config.gateway_token) setUpstream[GATEWAY_TOKEN_HEADER] = config.gateway_token;
    const identity = identityOf(request.shared);
    if (identity) {
      setUpstream[IDENTITY_HEADERS.authMethod] = identity.authMethod;
      setUpstream[IDENTITY_HEADERS.userId] = identity.userId;
      setUpstream[IDENTITY_HEADERS.subject] = identity.subject;
      if (identity.email) setUpstream[IDENTITY_HEADERS.email] = identity.email;
      if (identity.username) setUpstream[IDENTITY_HEADERS.username] = identity.username;
      if (identity.authMethod === 'apikey' && identity.keyId) setUpstream[IDENTITY_HEADERS.apiKeyId] = identity.keyId;
    }
    return { kind: 'continue', removeUpstream, setUpstream };
  }

  return { access };
}
