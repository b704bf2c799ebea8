import { kongPluginClass, VERSION } from '../core/index.js';
import { processLogger, type KongPdk } from '../core/index.js';
import { configAtScope, createTieredRateLimit, PRIORITY } from './core.js';
import { createCounterStore } from './policies/index.js';
import { parseTieredRateLimitConfig, Schema } from './schema.js';

export const Name = 'tiered-rate-limit';
export const Version = VERSION;
export const Priority = PRIORITY;
export { Schema };
const Base = kongPluginClass(
  Name,
  parseTieredRateLimitConfig,
  (config) => createTieredRateLimit(config, { store: createCounterStore(config), logger: processLogger }),
  { ip: true, path: true },
  // A route-, service- or consumer-scoped instance (Kong runs its access phase only) counts addresses there.
  configAtScope,
);

/** Adds the rewrite phase (per-IP limit before authentication; Kong runs it for global plugins). */
export class Plugin extends Base {
  async rewrite(kong: KongPdk): Promise<void> {
    // Headers too: a request carrying an API key of an exempt tier skips the per-address count.
    return this.runRewrite(kong, { ip: true, path: true, headers: true });
  }
}
