import { createRedisRevocations, revocationChannelFor } from '../../services/kit/core/index.js';
import { kongPluginClass, VERSION } from '../core/index.js';
import { processLogger } from '../core/index.js';
import { createApiKeyAuth, PRIORITY } from './core.js';
import { parseApiKeyAuthConfig, Schema } from './schema.js';

export const Name = 'api-key-auth';
export const Version = VERSION;
export const Priority = PRIORITY;
export { Schema };
export const Plugin = kongPluginClass(
  Name,
  parseApiKeyAuthConfig,
  (config) => {
    const core = createApiKeyAuth(config, { logger: processLogger });
    if (config.redis_url) {
      // Every Kong node subscribes, on the channel llm-api publishes on for the same Redis prefix;
      // a lost subscription flushes the cache on reconnect.
      const name = config.revocation_channel ?? revocationChannelFor(config.redis_prefix);
      const channel = createRedisRevocations(config.redis_url, { channel: name, logger: processLogger });
      core.attach(channel).catch((error) => processLogger.error({ err: (error as Error).message }, 'api-key-auth: revocation subscription failed'));
    }
    return core;
  },
  { headers: true, method: true },
);
