import type { Clock } from '../../kit/index.js';

/**
 * Passive endpoint health, per process: consecutive failures (connect errors, timeouts, 5xx) reach
 * `threshold` → the endpoint is unhealthy for `cooldownMs`; after the cool-down it is tried again
 * (half-open), and one success restores it. The active prober (prober.ts) restores endpoints early.
 */
export interface HealthOptions {
  threshold: number;
  cooldownMs: number;
  clock: Clock;
}

interface State {
  failures: number;
  unhealthyUntil: number;
}

export class EndpointHealth {
  private readonly states = new Map<string, State>();
  constructor(private readonly options: HealthOptions) {}

  isHealthy(url: string): boolean {
    const s = this.states.get(url);
    if (!s || s.unhealthyUntil === 0) return true;
    return this.options.clock.now() >= s.unhealthyUntil;
  }

  /** Endpoints currently out of rotation (what the prober checks). */
  unhealthy(): string[] {
    const now = this.options.clock.now();
    return [...this.states.entries()].filter(([, s]) => s.unhealthyUntil > now).map(([url]) => url);
  }

  failure(url: string): void {
    const s = this.states.get(url) ?? { failures: 0, unhealthyUntil: 0 };
    s.failures++;
    if (s.failures >= this.options.threshold) s.unhealthyUntil = this.options.clock.now() + Math.max(this.options.cooldownMs, 1);
    this.states.set(url, s);
  }

  success(url: string): void {
    if (this.states.has(url)) this.states.delete(url);
  }
}
