/**
 * plugins/core: what every plugin and both hosts share. The host-neutral plugin interface and
 * request shape (types), the one runner of a plugin chain (host), the Kong adapter pieces
 * (kong-host, kong-plugin, kong-schema), error answers (respond) and client addresses (address).
 * Plugins import this file and kit/core only.
 */
export * from './address.js';
export * from './host.js';
export * from './kong-host.js';
export * from './kong-plugin.js';
export * from './kong-schema.js';
export * from './respond.js';
export * from './types.js';
