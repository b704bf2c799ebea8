/**
 * kit/identity: the caller as the edge verified it. Principals, the users table, its cached
 * directory (`is_admin` from the table), and how a request's identity headers resolve to a principal.
 */
export * from './principal.js';
export * from './directory.js';
export * from './users-store.js';
export { requireGatewayToken, resolvePrincipal, hasIdentityHeaders } from './middleware.js';
