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
  /** Answer 401 (503 when a credential could not be checked) when the auth plugins left only the anonymous consumer. */
  { refuse_anonymous: { type: 'boolean', default: true } },
];

export interface IdentityHeadersConfig {
  gateway_token?: string;
  strip_header_prefixes: string[];
  strip_headers: string[];
  refuse_anonymous: boolean;
}

export const parseIdentityHeadersConfig = (input: unknown) => applySchema(Schema, input) as unknown as IdentityHeadersConfig;
