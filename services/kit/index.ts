/**
 * The service kit, whole: every layer plus the process runtime (logger, runtime, service and
 * worker definitions). Import the narrowest entry instead where it is enough: kit/core (plugins,
 * pure domain code), kit/settings, kit/http, kit/data, kit/identity.
 */
export * from './core/index.js';
export * from './settings/index.js';
export * from './http/index.js';
export * from './data/index.js';
export * from './identity/index.js';
export * from './logger.js';
export * from './runtime.js';
export * from './service.js';
