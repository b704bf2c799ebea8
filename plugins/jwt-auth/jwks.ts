import { createLocalJWKSet, type JSONWebKeySet, type JWTHeaderParameters, type FlattenedJWSInput } from 'jose';
import type { Clock } from '../../services/kit/core/index.js';

type KeyResolver = ReturnType<typeof createLocalJWKSet>;

export class JwksUnavailableError extends Error {
  constructor(detail: string) {
    super(`JWKS unavailable: ${detail}`);
    this.name = 'JwksUnavailableError';
  }
}

/**
 * The issuer's JWKS, fetched on first use and cached for at most `maxAgeMs` (jose's
 * `createRemoteJWKSet` `cacheMaxAge`): the first token after that waits for a fresh copy, so a key
 * the issuer removed stops being trusted within that time. A token whose `kid` is unknown triggers
 * a refetch earlier (key rotation needs no restart), at most once per cool-down period; concurrent
 * misses share one fetch. A failed refetch keeps the keys already known while they are younger than
 * the maximum age; past it they are dropped (no keys → 503), never trusted indefinitely. A failed
 * fetch is retried at most once per cool-down too: while the issuer is down (first load, or past
 * the maximum age) requests are answered 503 at once, not each with a fetch of its own.
 */
export class JwksCache {
  private resolver: KeyResolver | null = null;
  private kids = new Set<string>();
  private lastFetch = Number.NEGATIVE_INFINITY;
  /** When the keys in hand were fetched. */
  private loadedAt = Number.NEGATIVE_INFINITY;
  private inflight: Promise<void> | null = null;
  fetches = 0;

  constructor(
    private readonly url: string,
    private readonly options: { cooldownMs: number; maxAgeMs: number; timeoutMs: number; clock: Clock; fetch?: typeof fetch },
  ) {}

  /** The key resolver for a token header; refetches once (cool-down permitting) when the kid is unknown. */
  async resolverFor(header: { kid?: string }): Promise<KeyResolver> {
    const now = this.options.clock.now();
    if (now - this.loadedAt >= this.options.maxAgeMs) {
      // A fetch in flight is shared; one that failed (the last fetch did not load the keys in hand)
      // is retried once the cool-down has passed, not on every request while the issuer is down.
      const failedRecently = this.lastFetch > this.loadedAt && now - this.lastFetch < this.options.cooldownMs;
      if (this.inflight || !failedRecently) await this.refresh().catch(() => {});
    }
    const known = () => this.resolver !== null && (header.kid === undefined || this.kids.has(header.kid));
    if (!known() && this.inflight) await this.inflight.catch(() => {});
    if (!known() && this.options.clock.now() - this.lastFetch >= this.options.cooldownMs) {
      await this.refresh().catch(() => {});
    }
    // Keys past the maximum age are never used, whichever fetch failed last.
    if (!this.resolver || this.options.clock.now() - this.loadedAt >= this.options.maxAgeMs) throw new JwksUnavailableError('no keys could be loaded');
    return this.resolver;
  }

  private refresh(): Promise<void> {
    this.inflight ??= this.load().finally(() => {
      this.inflight = null;
    });
    return this.inflight;
  }

  private async load(): Promise<void> {
    this.lastFetch = this.options.clock.now();
    this.fetches++;
    try {
      const res = await (this.options.fetch ?? fetch)(this.url, {
        headers: { accept: 'application/json' },
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const jwks = (await res.json()) as JSONWebKeySet;
      if (!jwks || !Array.isArray(jwks.keys)) throw new Error('not a JWKS document');
      this.resolver = createLocalJWKSet(jwks);
      this.kids = new Set(jwks.keys.map((k) => k.kid).filter((k): k is string => typeof k === 'string'));
      this.loadedAt = this.lastFetch;
    } catch (error) {
      if (this.options.clock.now() - this.loadedAt >= this.options.maxAgeMs) {
        this.resolver = null;
        this.kids = new Set();
      }
      throw new JwksUnavailableError((error as Error).message);
    }
  }
}

export type { JWTHeaderParameters, FlattenedJWSInput };
