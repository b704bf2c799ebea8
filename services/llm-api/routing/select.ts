import type { EndpointConfig } from '../models/types.js';
import type { EndpointHealth } from './health.js';

/** A source of numbers in [0, 1): Math.random in production, a seeded generator when LLM_ROUTING_SEED is set. */
export type Random = () => number;

/** mulberry32: small, fast, good enough to spread load; deterministic for a given seed. */
export function seededRandom(seed: number): Random {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Orders the endpoints of one provider for an attempt: lowest `priority` first; among equal
 * priorities a weighted random permutation (weight 0 = only when nothing else is left).
 * Endpoints switched off by an admin (`healthy: false`) are left out. Returns the endpoints in
 * runtime health and those currently unhealthy separately, so the caller tries the latter only
 * when every healthy endpoint of every provider failed.
 */
export function orderEndpoints(endpoints: EndpointConfig[], health: Pick<EndpointHealth, 'isHealthy'>, random: Random): { healthy: EndpointConfig[]; unhealthy: EndpointConfig[] } {
  // Most providers have one endpoint: nothing to order, on every chat request.
  if (endpoints.length === 1) {
    const only = endpoints[0]!;
    if (only.healthy === false) return { healthy: [], unhealthy: [] };
    return health.isHealthy(only.url) ? { healthy: [only], unhealthy: [] } : { healthy: [], unhealthy: [only] };
  }
  const enabled = endpoints.filter((e) => e.healthy !== false);
  const byPriority = new Map<number, EndpointConfig[]>();
  for (const e of enabled) byPriority.set(e.priority, [...(byPriority.get(e.priority) ?? []), e]);
  const ordered: EndpointConfig[] = [];
  for (const priority of [...byPriority.keys()].sort((a, b) => a - b)) ordered.push(...weightedPermutation(byPriority.get(priority)!, random));
  return {
    healthy: ordered.filter((e) => health.isHealthy(e.url)),
    unhealthy: ordered.filter((e) => !health.isHealthy(e.url)),
  };
}

export function weightedPermutation<T extends { weight: number }>(items: T[], random: Random): T[] {
  if (items.length <= 1) return [...items];
  const pool = [...items];
  const out: T[] = [];
  while (pool.length) {
    const total = pool.reduce((sum, e) => sum + Math.max(e.weight, 0), 0);
    let index = 0;
    if (total > 0) {
      let r = random() * total;
      index = pool.findIndex((e) => (r -= Math.max(e.weight, 0)) < 0);
      if (index < 0) index = pool.length - 1;
    }
    out.push(pool.splice(index, 1)[0]!);
  }
  return out;
}
