/** The caller as the edge verified it, resolved to one platform user ("one user, one id"). */
export interface Principal {
  userId: string;
  subject: string;
  email: string | null;
  username: string | null;
  authMethod: 'jwt' | 'apikey';
  isAdmin: boolean;
  isGuest: boolean;
}

/** Identity headers the edge sets after verifying a credential (SPEC.md section 5, rule 4). */
export const IDENTITY_HEADERS = {
  authMethod: 'x-auth-method',
  userId: 'x-user-id',
  subject: 'x-user-subject',
  email: 'x-user-email',
  username: 'x-user-username',
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
  return headers;
}
