/** The api-key-auth plugin's host-neutral core and its configuration schema (Kong loads kong.ts). */
export * from './core.js';
export * from './schema.js';
