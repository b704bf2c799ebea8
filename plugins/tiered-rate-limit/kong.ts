import { kongPluginClass, VERSION } from '../core/kong-plugin.js';
import { processLogger } from '../core/kong-host.js';
import { createTieredRateLimit, PRIORITY } from './core.js';
import { createCounterStore } from './policies/index.js';
import { parseTieredRateLimitConfig, Schema } from './schema.js';

export const Name = 'tiered-rate-limit';
export const Version = VERSION;
export const Priority = PRIORITY;
export { Schema };
export const Plugin = kongPluginClass(
  Name,
  (raw) => {
    const config = parseTieredRateLimitConfig(raw);
    return createTieredRateLimit(config, { store: createCounterStore(config), logger: processLogger });
  },
  { ip: true },
);
