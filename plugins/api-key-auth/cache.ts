import type { Clock } from '../../services/kit/core/index.js';
import type { VerifiedIdentity } from '../core/index.js';

interface Entry {
  identity: VerifiedIdentity;
  expiresAt: number;
}

/**
 * Positive validations keyed by the key's SHA-256 (the key itself is never kept). Bounded: the
 * oldest entry goes first. `epoch` moves on every purge, so an answer fetched before a revocation
 * arrived is used for its own request but never cached.
 */
export class ValidationCache {
  private entries = new Map<string, Entry>();
  epoch = 0;

  constructor(private readonly options: { ttlMs: number; maxEntries: number; clock: Clock }) {}

  get(hash: string): VerifiedIdentity | undefined {
    const entry = this.entries.get(hash);
    if (!entry) return undefined;
    if (entry.expiresAt <= this.options.clock.now()) {
      this.entries.delete(hash);
      return undefined;
    }
    return entry.identity;
  }

  /** `keyExpiresAt` (ms): the key's own expiry; the entry never outlives it. */
  set(hash: string, identity: VerifiedIdentity, epochAtStart: number, keyExpiresAt: number | null = null): void {
    if (this.options.ttlMs <= 0 || epochAtStart !== this.epoch) return;
    const now = this.options.clock.now();
    const expiresAt = Math.min(now + this.options.ttlMs, keyExpiresAt ?? Number.POSITIVE_INFINITY);
    if (expiresAt <= now) return;
    if (this.entries.size >= this.options.maxEntries) {
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
    this.entries.set(hash, { identity, expiresAt });
  }

  /** A revocation message: the SHA-256 hex of a key, or `user:<id>` for every key of a user. */
  revoke(message: string): void {
    this.epoch++;
    if (message.startsWith('user:')) {
      const userId = message.slice('user:'.length);
      for (const [hash, entry] of this.entries) if (entry.identity.userId === userId) this.entries.delete(hash);
    } else {
      this.entries.delete(message);
    }
  }

  flush(): void {
    this.epoch++;
    this.entries.clear();
  }

  get size(): number {
    return this.entries.size;
  }
}
