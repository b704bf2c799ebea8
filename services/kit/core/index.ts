/**
 * kit/core: what every layer may import, plugins included. Errors in the platform's one shape,
 * clock, ids, secrets, cancellation, validation, the config loader and the platform-wide settings, identity
 * header names, the context-window estimate, credential revocations, webhook signatures. It loads no package: zod is used for
 * types only (schemas come from the caller; kit/settings builds the shared ones) and ioredis is
 * loaded only when a Redis revocation channel is used, so importing it is cheap
 * (`node bench/kit/import-time.mjs` prints the figure).
 */
export * from '../errors.js';
export * from '../clock.js';
export * from '../ids.js';
export * from '../media-ids.js';
export * from '../ip.js';
export * from '../secrets.js';
export * from '../cancel.js';
export * from '../maybe-async.js';
export * from '../strings.js';
export * from '../context-window.js';
export * from '../validation.js';
export * from '../json-members.js';
export * from '../config.js';
export * from '../identity/principal.js';
export * from '../revocations.js';
export { createRedisRevocations } from '../revocations-redis.js';
export * from '../webhook-signature.js';
export * from '../usage-report.js';
export * from '../readiness.js';
export * from '../periodic.js';
export type * from '../request-outcome.js';
export type { Logger } from '../logger.js';
