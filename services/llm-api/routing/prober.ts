import type { Logger } from '../../kit/index.js';
import type { ModelRegistry } from '../models/registry.js';
import type { EndpointHealth } from './health.js';
import { authHeaders, joinUrl, type Upstream } from './upstream.js';

/**
 * The active half of endpoint health: every interval, each endpoint currently marked unhealthy is
 * probed with `GET {url}/models`; a 2xx restores it at once instead of waiting for the cool-down.
 */
export function createProber(deps: { registry: ModelRegistry; health: EndpointHealth; upstream: Upstream; logger: Logger; intervalMs: number; timeoutMs: number }) {
  let timer: NodeJS.Timeout | undefined;

  async function probeOnce(): Promise<string[]> {
    const down = new Set(deps.health.unhealthy());
    const restored: string[] = [];
    if (down.size === 0) return restored;
    for (const provider of deps.registry.providers()) {
      for (const endpoint of provider.endpoints) {
        if (!down.has(endpoint.url)) continue;
        down.delete(endpoint.url);
        try {
          const res = await deps.upstream.getJson(joinUrl(endpoint.url, 'models'), authHeaders(provider.apiKey), deps.timeoutMs);
          if (res.status >= 200 && res.status < 300) {
            deps.health.success(endpoint.url);
            restored.push(endpoint.url);
            deps.logger.info({ endpoint: endpoint.url }, 'endpoint restored by probe');
          }
        } catch {
          // still down
        }
      }
    }
    return restored;
  }

  return {
    probeOnce,
    start() {
      if (deps.intervalMs <= 0) return;
      const tick = () => {
        timer = setTimeout(() => void probeOnce().finally(() => timer && tick()), deps.intervalMs);
        timer.unref();
      };
      tick();
    },
    stop() {
      clearTimeout(timer);
      timer = undefined;
    },
  };
}
