import { applySchema, type KongFieldEntry } from '../core/index.js';

export const Schema: KongFieldEntry[] = [
  /** Sent upstream as X-Gateway-Token so services accept the identity headers. */
  { gateway_token: { type: 'string', referenceable: true, encrypted: true } },
  /** Client headers removed whatever their case: every name starting with one of these … */
  { strip_header_prefixes: { type: 'array', elements: { type: 'string' }, default: ['x-user-', 'x-gateway-'] } },
  /**
   * … and these exact names. `forwarded` (RFC 7239): a client's claim about its address, scheme and
   * host, which no host rewrites (Kong passes it on); the services get `X-Forwarded-*` and
   * `X-Real-IP`, which the host sets itself.
   */
  { strip_headers: { type: 'array', elements: { type: 'string' }, default: ['x-auth-method', 'x-api-key', 'forwarded'] } },
  /**
   * Also strip the identity headers Kong's bundled plugins set (`KONG_CONSUMER_HEADERS`:
   * X-Consumer-*, X-Credential-Identifier, X-Anonymous-Consumer, X-Authenticated-*), which Kong
   * itself passes on from the client. Set it false only when Kong's bundled auth plugins (key-auth,
   * jwt, basic-auth, oauth2, hmac-auth, ldap-auth, openid-connect, session) run beside ours: they
   * set these headers in the access phase before this plugin runs (their priorities are all above
   * its 1000), so it would remove their values too.
   */
  { strip_kong_consumer_headers: { type: 'boolean', default: true } },
  /** Answer 401 (503 when a credential could not be checked) when the auth plugins left only the anonymous consumer. */
  { refuse_anonymous: { type: 'boolean', default: true } },
];

export interface IdentityHeadersConfig {
  gateway_token?: string;
  strip_header_prefixes: string[];
  strip_headers: string[];
  strip_kong_consumer_headers: boolean;
  refuse_anonymous: boolean;
}

export const parseIdentityHeadersConfig = (input: unknown) => applySchema(Schema, input) as unknown as IdentityHeadersConfig;
