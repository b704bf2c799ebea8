import { runEvery, type Logger, type Periodic } from '../../kit/index.js';
import type { ModelRegistry } from '../models/registry.js';
import type { EndpointHealth } from './health.js';
import { authHeaders, joinUrl, type Upstream } from './upstream.js';

/**
 * The active half of endpoint health: every interval, each endpoint currently marked unhealthy is
 * probed with `GET {url}/models`; a 2xx restores it at once instead of waiting for the cool-down.
 */
export function createProber(deps: { registry: ModelRegistry; health: EndpointHealth; upstream: Upstream; logger: Logger; intervalMs: number; timeoutMs: number }) {
  let periodic: Periodic | undefined;

  async function probeOnce(): Promise<string[]> {
    const down = new Set(deps.health.unhealthy());
    const restored: string[] = [];
    if (down.size === 0) return restored;
    for (const provider of deps.registry.providers()) {
      // A key that does not decrypt is never replaced by no key, not even for a probe.
      if (provider.keyUnavailable) continue;
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
    /** Probes every `intervalMs` after the last pass ended (0: never); a second start is ignored. */
    start() {
      if (deps.intervalMs <= 0 || periodic) return;
      periodic = runEvery(deps.intervalMs, probeOnce, (error) => deps.logger.warn({ err: error.message }, 'endpoint probe pass failed'));
    },
    /** Cancels the next pass and waits for one in progress. */
    async stop(): Promise<void> {
      const stopping = periodic?.stop();
      periodic = undefined;
      await stopping;
    },
  };
}
