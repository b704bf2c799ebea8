/**
 * `node --import tsx bench/redis-rtt.ts`: what one request of a regular user's key waits for the
 * production rate limiter, alone, one call at a time: the Redis round trip of a PING beside the
 * limiter's own counter call (`createRedisStore().hit`, the four windows of a known `pro` key: the
 * address's minute and hour, then the user's minute and day, counted in two stages in one script).
 * Rounds alternate the two so drift hits both alike; prints p50 / p90 / p99 in µs per round and
 * their medians. Compare with `bench/phases.ts --mode production --connections 1`, whose `in` phase
 * holds this call for a user's key and not for `BENCH_CLIENT_KEY=admin` (bench/README.md,
 * "Thirty-seventh pass").
 *   --calls N (per kind and round, 4000)   --rounds N (4)   REDIS_URL (redis://127.0.0.1:6379)
 */
import { parseArgs } from 'node:util';
import { createRedisStore } from '../plugins/tiered-rate-limit/policies/index.js';
import { median, percentile } from './lib/load.js';

const { values: args } = parseArgs({ options: { calls: { type: 'string', default: '4000' }, rounds: { type: 'string', default: '4' } } });
const calls = Number(args.calls);
const rounds = Number(args.rounds);

const store = createRedisStore({ url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', timeoutMs: 2000 });
await store.ready();
const prefix = `bench_${process.pid}`;
const MINUTE = 60_000;
// Limits far above what the run counts: every call is an allowed hit that increments all four.
const windows = [
  { key: `${prefix}:rl:ip:127.0.0.1:m:0`, limit: 1e9, ttlMs: 2 * MINUTE },
  { key: `${prefix}:rl:ip:127.0.0.1:h:0`, limit: 1e9, ttlMs: 61 * MINUTE },
  { key: `${prefix}:rl:user:u1:m:0`, limit: 1e9, ttlMs: 2 * MINUTE },
  { key: `${prefix}:rl:user:u1:d:0`, limit: 1e9, ttlMs: 1441 * MINUTE },
];

async function sample(call: () => Promise<unknown>): Promise<number[]> {
  const micros: number[] = [];
  for (let i = 0; i < calls; i++) {
    const started = process.hrtime.bigint();
    await call();
    micros.push(Number(process.hrtime.bigint() - started) / 1000);
  }
  return micros.sort((a, b) => a - b);
}

const kinds: Record<string, () => Promise<unknown>> = {
  'PING': () => store.client.ping(),
  'limiter hit, 4 windows in 2 stages': async () => store.hit(windows, Date.now(), 2),
};
const figures: Record<string, { p50: number[]; p90: number[]; p99: number[] }> = {};
try {
  for (const call of Object.values(kinds)) await sample(call); // warm-up: the script loaded, the code compiled
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? Object.keys(kinds) : Object.keys(kinds).reverse();
    const line: string[] = [];
    for (const name of order) {
      const sorted = await sample(kinds[name]!);
      const f = (figures[name] ??= { p50: [], p90: [], p99: [] });
      f.p50.push(percentile(sorted, 50));
      f.p90.push(percentile(sorted, 90));
      f.p99.push(percentile(sorted, 99));
      line.push(`${name} ${percentile(sorted, 50).toFixed(0)} / ${percentile(sorted, 90).toFixed(0)} / ${percentile(sorted, 99).toFixed(0)} µs`);
    }
    console.log(`round ${round + 1}/${rounds}: ${line.join(' | ')}`);
  }
  console.log(`\n| one call at a time, µs (medians of ${rounds} rounds × ${calls}) | p50 | p90 | p99 |\n|---|---|---|---|`);
  for (const [name, f] of Object.entries(figures)) console.log(`| ${name} | ${median(f.p50).toFixed(0)} | ${median(f.p90).toFixed(0)} | ${median(f.p99).toFixed(0)} |`);
} finally {
  await store.client.del(...windows.map((w) => w.key));
  await store.close();
}
