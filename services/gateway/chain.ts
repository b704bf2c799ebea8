import { createApiKeyAuth, PRIORITY as API_KEY_PRIORITY } from '../../plugins/api-key-auth/index.js';
import { parseApiKeyAuthConfig } from '../../plugins/api-key-auth/index.js';
import type { PluginCore, PluginLogger } from '../../plugins/core/index.js';
import { createIdentityHeaders, PRIORITY as IDENTITY_PRIORITY } from '../../plugins/identity-headers/index.js';
import { parseIdentityHeadersConfig } from '../../plugins/identity-headers/index.js';
import { createJwtAuth, PRIORITY as JWT_PRIORITY } from '../../plugins/jwt-auth/index.js';
import { parseJwtAuthConfig } from '../../plugins/jwt-auth/index.js';
import { configAtScope, createTieredRateLimit, PRIORITY as RATE_LIMIT_PRIORITY } from '../../plugins/tiered-rate-limit/index.js';
import { createCounterStore } from '../../plugins/tiered-rate-limit/index.js';
import { parseTieredRateLimitConfig } from '../../plugins/tiered-rate-limit/index.js';
import type { Clock } from '../kit/core/index.js';
import type { RevocationChannel } from '../kit/core/index.js';
import { createCors, PRIORITY as CORS_PRIORITY, type CorsConfig } from './bundled/cors.js';
import { checkPrometheusConfig } from './bundled/prometheus.js';
import { createRequestTermination, PRIORITY as TERMINATION_PRIORITY, type RequestTerminationConfig } from './bundled/request-termination.js';
import { DeckError, type DeckFile, type DeckPlugin, type DeckRoute } from './deck.js';

export interface HostDeps {
  clock: Clock;
  logger: PluginLogger;
  /** The runtime's revocation channel (in-process or Redis); api-key-auth subscribes to it. */
  revocations: RevocationChannel;
}

export interface ChainEntry {
  name: string;
  priority: number;
  core: PluginCore;
  /** Runs only when this consumer is the authenticated one (Kong's consumer-scoped plugins). */
  consumer: string | null;
}

/** `scoped`: the instance is on a route, a service or a consumer (never in the rewrite chain). */
type Factory = (config: Record<string, unknown>, deps: HostDeps, scoped: boolean) => Promise<{ priority: number; core: PluginCore }>;

/** Plugins the embedded gateway runs: ours (the same cores as on Kong) and the bundled ones deck/kong.yaml uses. */
const FACTORIES: Record<string, Factory> = {
  'jwt-auth': async (config, deps) => ({ priority: JWT_PRIORITY, core: createJwtAuth(parseJwtAuthConfig(config), deps) }),
  'api-key-auth': async (config, deps) => {
    // The host's channel replaces the plugin's own Redis subscription (same channel, same messages).
    const core = createApiKeyAuth(parseApiKeyAuthConfig(config), deps);
    await core.attach(deps.revocations);
    return { priority: API_KEY_PRIORITY, core };
  },
  'identity-headers': async (config) => ({ priority: IDENTITY_PRIORITY, core: createIdentityHeaders(parseIdentityHeadersConfig(config)) }),
  'tiered-rate-limit': async (config, deps, scoped) => {
    // A scoped instance counts addresses in the access phase, the only one it runs (as on Kong).
    const parsed = configAtScope(parseTieredRateLimitConfig(config), scoped);
    const core = createTieredRateLimit(parsed, { store: createCounterStore(parsed), clock: deps.clock, logger: deps.logger });
    // Revocations make it forget keys at once, which lets a known key's two counts take one call.
    await core.attach(deps.revocations);
    return { priority: RATE_LIMIT_PRIORITY, core };
  },
  cors: async (config) => ({ priority: CORS_PRIORITY, core: createCors(config as CorsConfig) }),
  'request-termination': async (config) => ({ priority: TERMINATION_PRIORITY, core: createRequestTermination(config as RequestTerminationConfig) }),
};

export const SUPPORTED_PLUGINS = Object.keys(FACTORIES);

/**
 * Plugins deck/kong.yaml enables for Kong that the embedded gateway accepts without running them,
 * named one by one (any other unknown plugin still stops the start): each only observes requests,
 * so skipping it cannot let one through. The check refuses a config Kong would refuse.
 */
const ACCEPTED_NOT_RUN: Record<string, (config: Record<string, unknown>) => void> = {
  // Kong's metrics; the embedded edge serves its own /metrics.
  prometheus: checkPrometheusConfig,
};

interface Scoped {
  plugin: DeckPlugin;
  scope: 'global' | 'service' | 'route' | 'consumer';
  owner: string | null;
}

/**
 * Builds one plugin instance per decK plugin entry (disabled ones are skipped, and so are those of
 * ACCEPTED_NOT_RUN once their config is checked; any other enabled plugin the embedded gateway
 * cannot run stops the start: silently skipping an auth plugin would fail open) and, per route,
 * the chain in priority order. For a plugin configured at several levels the most specific wins
 * (route > service > global), as in Kong.
 */
export async function buildChains(deck: DeckFile, deps: HostDeps) {
  const all: Scoped[] = [];
  for (const plugin of deck.plugins ?? []) {
    const scope = plugin.route ? 'route' : plugin.service ? 'service' : plugin.consumer ? 'consumer' : 'global';
    all.push({ plugin, scope, owner: plugin.route ?? plugin.service ?? plugin.consumer ?? null });
  }
  for (const service of deck.services ?? []) {
    for (const plugin of service.plugins ?? []) all.push({ plugin, scope: 'service', owner: service.name });
    for (const route of service.routes ?? []) for (const plugin of route.plugins ?? []) all.push({ plugin, scope: 'route', owner: route.name });
  }
  for (const consumer of deck.consumers ?? []) {
    for (const plugin of consumer.plugins ?? []) all.push({ plugin, scope: 'consumer', owner: consumer.username });
  }

  const instances = new Map<DeckPlugin, ChainEntry>();
  for (const { plugin, scope, owner } of all) {
    if (plugin.enabled === false) continue;
    const notRun = ACCEPTED_NOT_RUN[plugin.name];
    if (notRun) {
      try {
        notRun(plugin.config ?? {});
      } catch (error) {
        throw new DeckError(`plugin ${plugin.name} (${scope}${owner ? ` ${owner}` : ''}): ${(error as Error).message}`);
      }
      continue;
    }
    const factory = FACTORIES[plugin.name];
    if (!factory) throw new DeckError(`plugin ${plugin.name} is enabled but the embedded gateway cannot run it (supported: ${SUPPORTED_PLUGINS.join(', ')})`);
    try {
      const { priority, core } = await factory(plugin.config ?? {}, deps, scope !== 'global');
      instances.set(plugin, { name: plugin.name, priority, core, consumer: scope === 'consumer' ? owner : null });
    } catch (error) {
      if (error instanceof DeckError) throw error;
      throw new DeckError(`plugin ${plugin.name} (${scope}${owner ? ` ${owner}` : ''}): ${(error as Error).message}`);
    }
  }

  const serviceOf = new Map<DeckRoute, string>();
  for (const service of deck.services ?? []) for (const route of service.routes ?? []) serviceOf.set(route, service.name);

  function chainFor(route: DeckRoute): ChainEntry[] {
    const service = serviceOf.get(route)!;
    const byName = new Map<string, { rank: number; entry: ChainEntry }>();
    const consumerEntries: ChainEntry[] = [];
    for (const { plugin, scope, owner } of all) {
      const entry = instances.get(plugin);
      if (!entry) continue;
      if (scope === 'consumer') {
        consumerEntries.push(entry);
        continue;
      }
      const rank = scope === 'route' ? (owner === route.name ? 3 : -1) : scope === 'service' ? (owner === service ? 2 : -1) : 1;
      if (rank < 0) continue;
      const current = byName.get(plugin.name);
      if (!current || current.rank < rank) byName.set(plugin.name, { rank, entry });
    }
    return [...[...byName.values()].map((v) => v.entry), ...consumerEntries].sort((a, b) => b.priority - a.priority);
  }

  const chains = new Map<DeckRoute, ChainEntry[]>();
  for (const route of serviceOf.keys()) chains.set(route, chainFor(route));
  // Kong runs the rewrite phase for global plugins only, before the router.
  const rewriteChain = all
    .filter(({ plugin, scope }) => scope === 'global' && instances.get(plugin)?.core.rewrite)
    .map(({ plugin }) => instances.get(plugin)!)
    .sort((a, b) => b.priority - a.priority);

  return {
    chains,
    rewriteChain,
    async close() {
      for (const entry of instances.values()) await entry.core.close?.().catch(() => {});
    },
  };
}
