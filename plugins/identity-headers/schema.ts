import { applySchema, type KongFieldEntry } from '../core/kong-schema.js';

export const Schema: KongFieldEntry[] = [
  /** Sent upstream as X-Gateway-Token so services accept the identity headers. */
  { gateway_token: { type: 'string', referenceable: true, encrypted: true } },
  /** Client headers removed whatever their case: every name starting with one of these … */
  { strip_header_prefixes: { type: 'array', elements: { type: 'string' }, default: ['x-user-', 'x-gateway-'] } },
  /** … and these exact names. */
  { strip_headers: { type: 'array', elements: { type: 'string' }, default: ['x-auth-method', 'x-api-key'] } },
];

export interface IdentityHeadersConfig {
  gateway_token?: string;
  strip_header_prefixes: string[];
  strip_headers: string[];
}

export const parseIdentityHeadersConfig = (input: unknown) => applySchema(Schema, input) as unknown as IdentityHeadersConfig;
