import type { CounterStore, CounterWindow, HitResult } from './types.js';

/** In-process counters (one node; `npm start` without REDIS_URL). */
export function createLocalStore(): CounterStore {
  const counters = new Map<string, { count: number; expiresAt: number }>();
  let hits = 0;

  function sweep(now: number) {
    for (const [key, entry] of counters) if (entry.expiresAt <= now) counters.delete(key);
  }

  return {
    name: 'local',
    hit(windows: CounterWindow[], now: number): HitResult {
      if (++hits % 10_000 === 0) sweep(now);
      const current = windows.map((w) => {
        const entry = counters.get(w.key);
        return entry && entry.expiresAt > now ? entry.count : 0;
      });
      const blocked = windows.findIndex((w, i) => current[i]! >= w.limit);
      if (blocked >= 0) return { allowed: false, counts: current, blocked };
      const counts = windows.map((w, i) => {
        const count = current[i]! + 1;
        const entry = counters.get(w.key);
        if (entry && entry.expiresAt > now) entry.count = count;
        else counters.set(w.key, { count, expiresAt: now + w.ttlMs });
        return count;
      });
      return { allowed: true, counts, blocked: -1 };
    },
    async close() {
      counters.clear();
    },
  };
}
