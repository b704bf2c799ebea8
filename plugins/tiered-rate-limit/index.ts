/** The tiered-rate-limit plugin's host-neutral core and its configuration schema (Kong loads kong.ts). */
export * from './core.js';
export * from './key-limits.js';
export * from './schema.js';
export * from './policies/index.js';
