/** The caller as the edge verified it, resolved to one platform user ("one user, one id"). */
export interface Principal {
  userId: string;
  subject: string;
  email: string | null;
  username: string | null;
  authMethod: 'jwt' | 'apikey';
  isAdmin: boolean;
  isGuest: boolean;
  /** The API key the request was authenticated with (`key_…`), when it was an API key. */
  apiKeyId?: string | null;
}

/** Identity headers the edge sets after verifying a credential (SPEC.md section 5, rule 4). */
export const IDENTITY_HEADERS = {
  authMethod: 'x-auth-method',
  userId: 'x-user-id',
  subject: 'x-user-subject',
  email: 'x-user-email',
  username: 'x-user-username',
  /** Set by the edge from the key validation; the edge strips every client-sent `X-User-*` header. */
  apiKeyId: 'x-user-key-id',
} as const;

export const GATEWAY_TOKEN_HEADER = 'x-gateway-token';

/** The headers a service-to-service call carries to act for `principal`. */
export function identityHeadersFor(principal: Principal): Record<string, string> {
  const headers: Record<string, string> = {
    [IDENTITY_HEADERS.authMethod]: principal.authMethod,
    [IDENTITY_HEADERS.userId]: principal.userId,
    [IDENTITY_HEADERS.subject]: principal.subject,
  };
  if (principal.email) headers[IDENTITY_HEADERS.email] = principal.email;
  if (principal.username) headers[IDENTITY_HEADERS.username] = principal.username;
  if (principal.apiKeyId) headers[IDENTITY_HEADERS.apiKeyId] = principal.apiKeyId;
  return headers;
}
