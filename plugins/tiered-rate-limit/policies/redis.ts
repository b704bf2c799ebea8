import { Redis } from 'ioredis';
import type { CounterStore, CounterWindow, HitResult } from './types.js';

/**
 * Check-all-then-increment-all in one Lua script, so every edge node sharing this Redis sees one
 * counter and none overshoots. ARGV holds limit and TTL per key, then where the second stage starts
 * (a key index; past the last key when there is one stage): each stage is checked and incremented
 * before the next is looked at.
 */
const HIT_SCRIPT = `
local n = #KEYS
local split = tonumber(ARGV[2 * n + 1])
local counts = {}
for i = 1, n do
  counts[i] = tonumber(redis.call('GET', KEYS[i]) or '0')
end
local stages = {{1, n}}
if split > 1 and split <= n then stages = {{1, split - 1}, {split, n}} end
for _, stage in ipairs(stages) do
  for i = stage[1], stage[2] do
    if counts[i] >= tonumber(ARGV[2 * i - 1]) then
      local out = {0, i}
      for j = 1, n do out[#out + 1] = counts[j] end
      return out
    end
  end
  for i = stage[1], stage[2] do
    local c = redis.call('INCR', KEYS[i])
    if c == 1 then redis.call('PEXPIRE', KEYS[i], ARGV[2 * i]) end
    counts[i] = c
  end
end
local out = {1, 0}
for i = 1, n do out[#out + 1] = counts[i] end
return out
`;

type HitCommand = (numKeys: number, ...args: Array<string | number>) => Promise<number[]>;

export interface RedisStoreOptions {
  url: string;
  /** Per-command timeout; a slow Redis fails fast and the fault policy decides. */
  timeoutMs: number;
}

export function createRedisStore(options: RedisStoreOptions): CounterStore & { ready(): Promise<void>; client: Redis } {
  const connectTimeoutMs = Math.max(options.timeoutMs, 1000);
  const client = new Redis(options.url, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: options.timeoutMs,
    connectTimeout: connectTimeoutMs,
    enableAutoPipelining: true,
    retryStrategy: (attempt) => Math.min(50 * attempt, 1000),
    lazyConnect: false,
  });
  client.on('error', () => {}); // reported per command through the fault policy
  client.defineCommand('edgeHit', { lua: HIT_SCRIPT });
  const hitCommand = (client as unknown as { edgeHit: HitCommand }).edgeHit.bind(client);
  // Commands fail at once while there is no connection (no offline queue: an outage costs no wait),
  // except while the first one is being made: a request that arrives as the store starts waits for
  // it, up to the connect timeout, instead of meeting the fault policy (with `deny`, a 503 from
  // every edge that just started). Once connected, or once that wait is over, nothing waits again.
  let firstConnection: Promise<void> | null = new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      client.off('ready', done);
      firstConnection = null;
      resolve();
    };
    const timer = setTimeout(done, connectTimeoutMs);
    timer.unref();
    client.once('ready', done);
  });

  return {
    name: 'redis',
    client,
    ready: () =>
      client.status === 'ready'
        ? Promise.resolve()
        : new Promise((resolve, reject) => {
            client.once('ready', () => resolve());
            client.once('end', () => reject(new Error('redis connection ended')));
          }),
    async hit(windows: CounterWindow[], _now: number, firstStage = windows.length): Promise<HitResult> {
      if (firstConnection !== null) await firstConnection;
      const args: Array<string | number> = windows.map((w) => w.key);
      for (const w of windows) args.push(w.limit, w.ttlMs);
      // Lua indexes from 1: the second stage's first key, or past the last key for one stage.
      args.push(firstStage > 0 && firstStage < windows.length ? firstStage + 1 : windows.length + 1);
      const out = await hitCommand(windows.length, ...args);
      return { allowed: out[0] === 1, blocked: Number(out[1]) - 1, counts: out.slice(2).map(Number) };
    },
    async close() {
      client.disconnect();
    },
  };
}
