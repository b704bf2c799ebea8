import { kongPluginClass, VERSION } from '../core/kong-plugin.js';
import { processLogger, type KongPdk } from '../core/kong-host.js';
import { createTieredRateLimit, PRIORITY } from './core.js';
import { createCounterStore } from './policies/index.js';
import { parseTieredRateLimitConfig, Schema } from './schema.js';

export const Name = 'tiered-rate-limit';
export const Version = VERSION;
export const Priority = PRIORITY;
export { Schema };
const Base = kongPluginClass(
  Name,
  (raw) => {
    const config = parseTieredRateLimitConfig(raw);
    return createTieredRateLimit(config, { store: createCounterStore(config), logger: processLogger });
  },
  { ip: true },
);

/** Adds the rewrite phase (per-IP limit before authentication; Kong runs it for global plugins). */
export class Plugin extends Base {
  async rewrite(kong: KongPdk): Promise<void> {
    return this.runRewrite(kong, { ip: true });
  }
}
