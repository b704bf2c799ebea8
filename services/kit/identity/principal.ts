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

/**
 * The project a platform service's request is made in: response-api sends it to llm-api with each
 * step of a response in a project (llm-api checks it is the caller's), and llm-api sends it to
 * response-api with a deep research run made in a project. The edge strips every client-sent
 * `X-Gateway-*` header, so only a platform service can send it.
 */
export const PROJECT_HEADER = 'x-gateway-project-id';

/** The project a platform service made this request in (`PROJECT_HEADER`), or undefined when none was named. */
export function projectNamedIn(headers: Readonly<Record<string, string | string[] | undefined>>): string | undefined {
  const project = headers[PROJECT_HEADER];
  return typeof project === 'string' && project !== '' ? project : undefined;
}

/** The headers a service-to-service call carries to act for `principal`. */
export function identityHeadersFor(principal: Principal): Record<string, string> {
  const headers: Record<string, string> = {
    [IDENTITY_HEADERS.authMethod]: principal.authMethod,
    [IDENTITY_HEADERS.userId]: principal.userId,
    [IDENTITY_HEADERS.subject]: principal.subject,
  };
  const email = principal.email ? encodeIdentityText(principal.email) : null;
  if (email) headers[IDENTITY_HEADERS.email] = email;
  const username = principal.username ? encodeIdentityText(principal.username) : null;
  if (username) headers[IDENTITY_HEADERS.username] = username;
  if (principal.apiKeyId) headers[IDENTITY_HEADERS.apiKeyId] = principal.apiKeyId;
  return headers;
}

/**
 * E-mail addresses and names are Unicode, header values are bytes: Kong sends a plugin's value as
 * UTF-8, Node reads a header as Latin-1 and refuses to send anything past U+00FF. So a value that
 * is not printable ASCII travels as an RFC 8187 ext-value, `UTF-8''` and its percent-encoded
 * UTF-8 bytes; so does one that already starts with that prefix, so decoding is never ambiguous.
 * Null for a string that has no UTF-8 form (a lone surrogate): the header is left out.
 */
export function encodeIdentityText(value: string): string | null {
  if (PRINTABLE_ASCII.test(value) && !value.startsWith(EXT_VALUE_PREFIX)) return value;
  try {
    return EXT_VALUE_PREFIX + encodeURIComponent(value);
  } catch {
    return null;
  }
}

/** The text `encodeIdentityText` encoded; null when an ext-value does not decode. */
export function decodeIdentityText(value: string): string | null {
  if (!value.startsWith(EXT_VALUE_PREFIX)) return value;
  try {
    return decodeURIComponent(value.slice(EXT_VALUE_PREFIX.length));
  } catch {
    return null;
  }
}

const EXT_VALUE_PREFIX = "UTF-8''";
const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;
