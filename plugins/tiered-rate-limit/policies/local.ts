import type { CounterStore, CounterWindow, HitResult } from './types.js';

/** In-process counters (one node; `npm start` without REDIS_URL). */
export function createLocalStore(): CounterStore {
  const counters = new Map<string, { count: number; expiresAt: number }>();
  let hits = 0;

  /** Windows `from`..`to` (exclusive) as one hit: the first at its limit, or -1 and each counted (`counts` updated). */
  function countStage(windows: CounterWindow[], counts: number[], from: number, to: number, now: number): number {
    for (let i = from; i < to; i++) if (counts[i]! >= windows[i]!.limit) return i;
    for (let i = from; i < to; i++) {
      const w = windows[i]!;
      const count = counts[i]! + 1;
      const entry = counters.get(w.key);
      if (entry && entry.expiresAt > now) entry.count = count;
      else counters.set(w.key, { count, expiresAt: now + w.ttlMs });
      counts[i] = count;
    }
    return -1;
  }

  function sweep(now: number) {
    for (const [key, entry] of counters) if (entry.expiresAt <= now) counters.delete(key);
  }

  return {
    name: 'local',
    hit(windows: CounterWindow[], now: number, firstStage = windows.length): HitResult {
      if (++hits % 10_000 === 0) sweep(now);
      const counts = windows.map((w) => {
        const entry = counters.get(w.key);
        return entry && entry.expiresAt > now ? entry.count : 0;
      });
      const split = firstStage > 0 && firstStage < windows.length ? firstStage : windows.length;
      let blocked = countStage(windows, counts, 0, split, now);
      if (blocked < 0 && split < windows.length) blocked = countStage(windows, counts, split, windows.length, now);
      return blocked < 0 ? { allowed: true, counts, blocked: -1 } : { allowed: false, counts, blocked };
    },
    async close() {
      counters.clear();
    },
  };
}
