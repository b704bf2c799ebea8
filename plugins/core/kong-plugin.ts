import { exitMisconfigured, runPhase, type KongPdk, type Needs } from './kong-host.js';
import type { PluginCore } from './types.js';

export const VERSION = '0.1.0';

/**
 * The keys Kong's plugins iterator (`get_plugin_config` in kong/runloop/plugins_iterator.lua, 3.x)
 * adds to a plugin's `config` before it sends it to the plugin server as JSON (`StartInstance`):
 * the scope the instance was configured at (`route_id`, `service_id`, `consumer_id`,
 * `consumer_group_id`: present for a route-, service- or consumer-scoped plugin), `ordering`,
 * `plugin_instance_name`, plus `__key__`, `__seq__`, `__plugin_id` (the `__` ones `applySchema`
 * drops itself), and `$refs` when a field is a vault reference (`KONG_REFS_KEY`). None is a field of
 * our schemas; the schema refuses every other unknown key.
 */
export const KONG_SCOPE_KEYS: readonly string[] = ['route_id', 'service_id', 'consumer_id', 'consumer_group_id', 'ordering', 'plugin_instance_name'];

/** The keys of `KONG_SCOPE_KEYS` that name the entity an instance is scoped to (absent for a global plugin). */
const KONG_SCOPE_ID_KEYS = ['route_id', 'service_id', 'consumer_id', 'consumer_group_id'] as const;

/**
 * The instance is configured on a route, a service, a consumer or a consumer group (not globally),
 * as the configuration Kong sends says: Kong never runs such an instance's rewrite phase.
 */
export function kongScoped(config: Record<string, unknown> | null | undefined): boolean {
  if (!config) return false;
  for (const key of KONG_SCOPE_ID_KEYS) if (config[key] !== undefined && config[key] !== null) return true;
  return false;
}

/**
 * Where Kong keeps the vault references of a configuration's referenceable fields once it has
 * resolved them (`config["$refs"] = { gateway_token = "{vault://…}" }`, set by `process_auto_fields`
 * in kong/db/schema/init.lua): present whenever a field such as `gateway_token` or `redis_url` is a
 * vault reference, and sent to the plugin server with the rest.
 */
export const KONG_REFS_KEY = '$refs';

/** The configuration as decK wrote it: Kong's own keys removed. */
export function withoutKongKeys(config: Record<string, unknown> | null | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(config ?? {})) {
    if (key.startsWith('__') || key === KONG_REFS_KEY || KONG_SCOPE_KEYS.includes(key)) continue;
    out[key] = config![key];
  }
  return out;
}

/** JSON with object keys sorted: equal configurations give equal text whatever order Kong encoded them in. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const object = value as Record<string, unknown>;
    return `{${Object.keys(object)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${canonicalJson(object[key])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** How long a core no plugin entity is configured with any more is kept before it is closed. */
export const RETIRE_AFTER_MS = 60_000;

/** A core built for one configuration, and the plugin entities (`__plugin_id`) last started with it. */
interface HeldCore {
  core: PluginCore;
  key: string;
  owners: Set<string>;
  closed: boolean;
  retiring: NodeJS.Timeout | null;
}

/**
 * Builds the `Plugin` class kong-js-pluginserver instantiates once per configuration (shared by
 * every request: no per-request state on `this`). `access` is a real class method, so the server
 * detects the phase; there is deliberately no `response` method (it would buffer and break SSE).
 * A configuration the core rejects answers 500 on every request instead of failing open.
 *
 * Kong starts an instance per nginx worker (its table of running instances is per worker) and a
 * new one whenever its plugin configuration is rebuilt, and the plugin server tells the plugin
 * object nothing when an instance is closed. So the core is built once per distinct configuration
 * in this process and shared by every instance of it: one set of local counters (not one per
 * worker, which would multiply every limit by the number of workers), one key cache, one JWKS
 * cache, one Redis connection and revocation subscription.
 *
 * A core holds resources (api-key-auth: a Redis subscriber and the validator's connection pool;
 * tiered-rate-limit: a Redis connection and its subscription), so one per configuration ever seen
 * would leak a connection at every configuration change. Kong sends each instance's plugin entity
 * id (`__plugin_id`): when an entity starts with another configuration, the core of its former one
 * is closed once no entity has used that configuration for `retireAfterMs` (workers that have not
 * rebuilt yet, and requests in flight, finish on it meanwhile). An instance still running on a
 * closed core (a worker slower than that) builds its configuration's core again, so a request
 * never meets a closed one; that core is retired the same way once unused by any entity.
 */
export function kongPluginClass<C>(
  name: string,
  parse: (config: Record<string, unknown>) => C,
  build: (config: C) => PluginCore,
  needs: Needs,
  /** The configuration an instance runs with at its scope (`kongScoped`), decided once per instance; the cores are shared by that. */
  atScope?: (config: C, scoped: boolean) => C,
  options: { retireAfterMs?: number } = {},
) {
  const retireAfterMs = options.retireAfterMs ?? RETIRE_AFTER_MS;
  const cores = new Map<string, HeldCore>();
  /** The configuration key each plugin entity last started an instance with. */
  const keyOfEntity = new Map<string, string>();

  function retireLater(held: HeldCore): void {
    if (held.retiring !== null || held.closed) return;
    held.retiring = setTimeout(() => {
      held.retiring = null;
      if (held.owners.size > 0 || cores.get(held.key) !== held) return;
      cores.delete(held.key);
      held.closed = true;
      held.core.close?.().catch((error: Error) => process.stderr.write(`[warn] ${name}: closing a former configuration failed: ${error.message}\n`));
    }, retireAfterMs);
    held.retiring.unref();
  }

  function coreFor(raw: Record<string, unknown> | null | undefined, revive: boolean): HeldCore {
    const parsed = parse(withoutKongKeys(raw));
    const config = atScope ? atScope(parsed, kongScoped(raw)) : parsed;
    const key = canonicalJson(config);
    let held = cores.get(key);
    if (!held) {
      held = { core: build(config), key, owners: new Set(), closed: false, retiring: null };
      cores.set(key, held);
    }
    const entity = raw?.__plugin_id;
    if (revive || typeof entity !== 'string') {
      // Rebuilt for an instance of a former configuration: no entity uses it, it goes again when unused.
      if (held.owners.size === 0 && revive) retireLater(held);
      return held;
    }
    const former = keyOfEntity.get(entity);
    held.owners.add(entity);
    if (held.retiring !== null) {
      clearTimeout(held.retiring);
      held.retiring = null;
    }
    if (former !== undefined && former !== key) {
      const previous = cores.get(former);
      previous?.owners.delete(entity);
      if (previous && previous.owners.size === 0) retireLater(previous);
    }
    keyOfEntity.set(entity, key);
    return held;
  }

  return class Plugin {
    protected readonly name = name;
    private held: HeldCore | null;
    private readonly config: Record<string, unknown>;

    constructor(config: Record<string, unknown>) {
      let held: HeldCore | null = null;
      try {
        held = coreFor(config, false);
      } catch (error) {
        process.stderr.write(`[error] ${name}: invalid configuration: ${(error as Error).message}\n`);
      }
      this.held = held;
      this.config = config;
    }

    /** The instance's core; built again when its configuration's was closed (a stale instance). */
    private core(): PluginCore | null {
      const held = this.held;
      if (held === null) return null;
      if (!held.closed) return held.core;
      this.held = coreFor(this.config, true);
      return this.held.core;
    }

    async access(kong: KongPdk): Promise<void> {
      const core = this.core();
      if (!core) {
        return exitMisconfigured(kong, name);
      }
      return runPhase(kong, core, needs, name);
    }

    /** For subclasses that also run in Kong's rewrite phase (global plugins only). */
    protected async runRewrite(kong: KongPdk, rewriteNeeds: Needs): Promise<void> {
      const core = this.core();
      if (!core) {
        return exitMisconfigured(kong, name);
      }
      if (!core.rewrite) return;
      return runPhase(kong, core, rewriteNeeds, name, 'rewrite');
    }
  };
}
