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

/** One plugin instance (one enabled decK plugin entry); the same object wherever it runs. */
export interface ChainEntry {
  name: string;
  priority: number;
  core: PluginCore;
}

/**
 * One plugin's place in a route's chain. Kong runs one instance of a plugin per request, the most
 * specific one for the request's route, service and consumer; the consumer is known only once an
 * auth plugin has set it, so the instance is picked when the chain reaches this place (as Kong's
 * plugins iterator does in the access phase).
 */
export interface ChainSlot {
  name: string;
  priority: number;
  /** The instance for a request without a consumer, or whose consumer has none of its own here (null: none). */
  entry: ChainEntry | null;
  /** Consumers with a more specific instance than `entry` on this route (null: none). */
  byConsumer: Map<string, ChainEntry> | null;
}

/** The instance a slot runs for the request's consumer. */
export function instanceFor(slot: ChainSlot, consumer: string | null): ChainEntry | null {
  if (slot.byConsumer === null || consumer === null) return slot.entry;
  return slot.byConsumer.get(consumer) ?? slot.entry;
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

/** Where a decK plugin entry applies: a null field is not part of its scope (all null: global). */
interface Scoped {
  plugin: DeckPlugin;
  route: string | null;
  service: string | null;
  consumer: string | null;
}

const scopeOf = (s: Scoped): string =>
  [s.consumer !== null ? `consumer ${s.consumer}` : '', s.route !== null ? `route ${s.route}` : '', s.service !== null ? `service ${s.service}` : '']
    .filter(Boolean)
    .join(', ') || 'global';

/**
 * Kong's plugin precedence, most specific first: consumer+route+service > consumer+route >
 * consumer+service > route+service > consumer > route > service > global.
 */
function rankOf(s: Scoped): number {
  if (s.consumer !== null) return s.route !== null ? (s.service !== null ? 8 : 7) : s.service !== null ? 6 : 4;
  return s.route !== null ? (s.service !== null ? 5 : 3) : s.service !== null ? 2 : 1;
}

/**
 * Builds one plugin instance per decK plugin entry (disabled ones are skipped, and so are those of
 * ACCEPTED_NOT_RUN once their config is checked; any other enabled plugin the embedded gateway
 * cannot run stops the start: silently skipping an auth plugin would fail open) and, per route,
 * the chain in priority order: one slot per plugin, which runs exactly one instance per request,
 * the most specific for the route, its service and the request's consumer, as Kong does.
 */
export async function buildChains(deck: DeckFile, deps: HostDeps) {
  const all: Scoped[] = [];
  const at = (plugin: DeckPlugin, fixed: Partial<Omit<Scoped, 'plugin'>>): Scoped => ({
    plugin,
    route: fixed.route ?? plugin.route ?? null,
    service: fixed.service ?? plugin.service ?? null,
    consumer: fixed.consumer ?? plugin.consumer ?? null,
  });
  for (const plugin of deck.plugins ?? []) all.push(at(plugin, {}));
  for (const service of deck.services ?? []) {
    for (const plugin of service.plugins ?? []) all.push(at(plugin, { service: service.name }));
    for (const route of service.routes ?? []) for (const plugin of route.plugins ?? []) all.push(at(plugin, { route: route.name }));
  }
  for (const consumer of deck.consumers ?? []) {
    for (const plugin of consumer.plugins ?? []) all.push(at(plugin, { consumer: consumer.username }));
  }

  const instances = new Map<DeckPlugin, ChainEntry>();
  for (const scoped of all) {
    const { plugin } = scoped;
    if (plugin.enabled === false) continue;
    const notRun = ACCEPTED_NOT_RUN[plugin.name];
    if (notRun) {
      try {
        notRun(plugin.config ?? {});
      } catch (error) {
        throw new DeckError(`plugin ${plugin.name} (${scopeOf(scoped)}): ${(error as Error).message}`);
      }
      continue;
    }
    const factory = FACTORIES[plugin.name];
    if (!factory) throw new DeckError(`plugin ${plugin.name} is enabled but the embedded gateway cannot run it (supported: ${SUPPORTED_PLUGINS.join(', ')})`);
    try {
      const { priority, core } = await factory(plugin.config ?? {}, deps, rankOf(scoped) > 1);
      instances.set(plugin, { name: plugin.name, priority, core });
    } catch (error) {
      if (error instanceof DeckError) throw error;
      throw new DeckError(`plugin ${plugin.name} (${scopeOf(scoped)}): ${(error as Error).message}`);
    }
  }

  const serviceOf = new Map<DeckRoute, string>();
  for (const service of deck.services ?? []) for (const route of service.routes ?? []) serviceOf.set(route, service.name);

  function chainFor(route: DeckRoute): ChainSlot[] {
    const service = serviceOf.get(route)!;
    const slots = new Map<string, { slot: ChainSlot; rank: number; consumers: Map<string, { rank: number; entry: ChainEntry }> }>();
    for (const scoped of all) {
      const entry = instances.get(scoped.plugin);
      if (!entry) continue;
      if ((scoped.route !== null && scoped.route !== route.name) || (scoped.service !== null && scoped.service !== service)) continue;
      let place = slots.get(entry.name);
      if (!place) {
        place = { slot: { name: entry.name, priority: entry.priority, entry: null, byConsumer: null }, rank: 0, consumers: new Map() };
        slots.set(entry.name, place);
      }
      const rank = rankOf(scoped);
      if (scoped.consumer === null) {
        if (rank > place.rank) {
          place.rank = rank;
          place.slot.entry = entry;
        }
      } else {
        const current = place.consumers.get(scoped.consumer);
        if (!current || current.rank < rank) place.consumers.set(scoped.consumer, { rank, entry });
      }
    }
    for (const { slot, rank, consumers } of slots.values()) {
      // A consumer's instance runs in place of the others only where it is the more specific one
      // (a consumer-only instance loses to one on this route and its service).
      for (const [consumer, best] of consumers) if (best.rank > rank) (slot.byConsumer ??= new Map()).set(consumer, best.entry);
    }
    return [...slots.values()].map((p) => p.slot).sort((a, b) => b.priority - a.priority);
  }

  const chains = new Map<DeckRoute, ChainSlot[]>();
  for (const route of serviceOf.keys()) chains.set(route, chainFor(route));
  // Kong runs the rewrite phase for global plugins only, before the router.
  const rewriteChain = all
    .filter((scoped) => rankOf(scoped) === 1 && instances.get(scoped.plugin)?.core.rewrite)
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
