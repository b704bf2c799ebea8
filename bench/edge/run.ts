/**
 * Edge benchmark (not a test): prints
 *  1. the embedded edge's added latency over a direct call, p50/p99 at 1 connection (API-key
 *     request: cors, auth with a cached key, identity headers, rate limit, streaming proxy);
 *  2. throughput at 64 connections through the edge vs direct (autocannon);
 *  3. the rate-limit overshoot with 4 gateway processes sharing one Redis.
 * Usage: node --import tsx bench/edge/run.ts   (needs Redis on REDIS_URL or 127.0.0.1:6379)
 * Targets: added p99 <= 1.5 ms, overshoot <= 1 %.
 */
import { spawn } from 'node:child_process';
import { offsetToNextMinute } from '../../services/kit/clock.js';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import autocannon from 'autocannon';
import { Agent, request } from 'undici';
import { startFakeValidator } from '../../test/plugins/fakes.js';
import { deckVars } from '../../test/gateway/deck-fixture.js';
import { spawnEdgeProcess, type EdgeProcess } from './spawn.js';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const TOKEN = randomBytes(24).toString('base64url');
const LATENCY_REQUESTS = Number(process.env.BENCH_LATENCY_REQUESTS ?? 10000);
const THROUGHPUT_SECONDS = Number(process.env.BENCH_THROUGHPUT_SECONDS ?? 10);

async function startUpstream(): Promise<{ url: string; stop(): void }> {
  const child = spawn(process.execPath, ['bench/edge/upstream.mjs'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise<string>((resolve) => createInterface({ input: child.stdout! }).once('line', resolve));
  return { url: `http://127.0.0.1:${(JSON.parse(line) as { port: number }).port}`, stop: () => child.kill('SIGTERM') };
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Direct and edge requests interleaved one by one, so both see the same machine noise. */
async function latency(directUrl: string, edgeUrl: string, headers: Record<string, string>, n: number) {
  const agents = [new Agent({ connections: 1, pipelining: 1, keepAliveTimeout: 60_000 }), new Agent({ connections: 1, pipelining: 1, keepAliveTimeout: 60_000 })];
  const urls = [directUrl, edgeUrl];
  const samples: number[][] = [[], []];
  for (let i = 0; i < n + 500; i++) {
    for (const which of [0, 1]) {
      const start = process.hrtime.bigint();
      const res = await request(urls[which]!, { headers, dispatcher: agents[which] });
      await res.body.dump();
      if (res.statusCode !== 200) throw new Error(`status ${res.statusCode} from ${urls[which]}`);
      if (i >= 500) samples[which]!.push(Number(process.hrtime.bigint() - start) / 1e6);
    }
  }
  await Promise.all(agents.map((a) => a.close()));
  const stats = samples.map((s) => {
    s.sort((a, b) => a - b);
    return { p50: percentile(s, 50), p99: percentile(s, 99) };
  });
  return { direct: stats[0]!, viaEdge: stats[1]! };
}

async function throughput(url: string, headers: Record<string, string>) {
  const result = await autocannon({ url, connections: 64, duration: THROUGHPUT_SECONDS, headers, pipelining: 1 });
  return { rps: result.requests.average, non2xx: result.non2xx, errors: result.errors, p99: result.latency.p99 };
}

const baseVars = (upstream: string, validatorUrl: string, extra: Record<string, string> = {}) =>
  deckVars({
    DECK_LLM_API_URL: upstream,
    DECK_RESPONSE_API_URL: upstream,
    DECK_MEDIA_API_URL: upstream,
    DECK_MCP_TOOLS_URL: upstream,
    DECK_GATEWAY_SHARED_SECRET: TOKEN,
    DECK_API_KEY_VALIDATE_URL: validatorUrl,
    DECK_API_KEY_CACHE_TTL_SECONDS: '3600',
    DECK_RATE_LIMIT_IP_PER_MINUTE: '100000000',
    DECK_RATE_LIMIT_PRO_PER_MINUTE: '100000000',
    DECK_RATE_LIMIT_PRO_PER_DAY: '100000000',
    ...extra,
  });

const fmt = (ms: number) => `${ms.toFixed(3)} ms`;

async function main() {
  const upstream = await startUpstream();
  const validator = await startFakeValidator(TOKEN);
  const key = validator.add('user_bench', 'pro');
  const headers = { 'x-api-key': key.key };
  const edge = await spawnEdgeProcess({ EDGE_PROCESS_VARS: JSON.stringify(baseVars(upstream.url, validator.url)) });
  const nodes: EdgeProcess[] = [];
  try {
    console.log(`edge benchmark — node ${process.version}, ${LATENCY_REQUESTS} sequential requests, ${THROUGHPUT_SECONDS}s at 64 connections`);
    const { direct, viaEdge } = await latency(`${upstream.url}/v1/models`, `${edge.url}/v1/models`, headers, LATENCY_REQUESTS);
    console.log(`latency, 1 connection   direct p50 ${fmt(direct.p50)} p99 ${fmt(direct.p99)} | edge p50 ${fmt(viaEdge.p50)} p99 ${fmt(viaEdge.p99)}`);
    console.log(`added by the edge       p50 ${fmt(viaEdge.p50 - direct.p50)}  p99 ${fmt(viaEdge.p99 - direct.p99)}  (target p99 <= 1.5 ms)`);

    const directT = await throughput(`${upstream.url}/v1/models`, headers);
    const edgeT = await throughput(`${edge.url}/v1/models`, headers);
    console.log(`throughput, 64 conns    direct ${directT.rps.toFixed(0)} req/s | edge ${edgeT.rps.toFixed(0)} req/s (p99 ${edgeT.p99} ms, non-2xx ${edgeT.non2xx}, errors ${edgeT.errors}) — ratio ${(edgeT.rps / directT.rps).toFixed(2)}`);

    // Overshoot: 4 gateway processes, one Redis, one key with a per-minute limit, hammered at once.
    const limit = Number(process.env.BENCH_OVERSHOOT_LIMIT ?? 2000);
    const offset = offsetToNextMinute(); // all nodes at second 1 of a window
    const vars = baseVars(upstream.url, validator.url, {
      DECK_RATE_LIMIT_POLICY: 'redis',
      DECK_REDIS_URL: REDIS_URL,
      DECK_REDIS_PREFIX: `bench_${randomBytes(4).toString('hex')}`,
      DECK_RATE_LIMIT_FREE_PER_MINUTE: String(limit),
      DECK_RATE_LIMIT_FREE_PER_DAY: '100000000',
    });
    const env = { EDGE_PROCESS_VARS: JSON.stringify(vars), EDGE_PROCESS_REDIS_URL: REDIS_URL, EDGE_PROCESS_CLOCK_OFFSET_MS: String(offset) };
    nodes.push(...(await Promise.all([0, 1, 2, 3].map(() => spawnEdgeProcess(env)))));
    const free = validator.add('user_overshoot', 'free');
    const total = limit * 2;
    const results = await Promise.all(
      nodes.map((node) =>
        autocannon({ url: `${node.url}/v1/models`, connections: 16, amount: total / nodes.length, headers: { 'x-api-key': free.key } }),
      ),
    );
    const accepted = results.reduce((sum, r) => sum + r['2xx'], 0);
    const refused = results.reduce((sum, r) => sum + (r.statusCodeStats?.['429']?.count ?? 0), 0);
    const overshoot = ((accepted - limit) / limit) * 100;
    console.log(`overshoot, 4 nodes      limit ${limit}/min, ${total} requests: ${accepted} accepted, ${refused} refused (429) — overshoot ${overshoot.toFixed(2)} % (target <= 1 %)`);
  } finally {
    await Promise.all([edge.stop(), ...nodes.map((n) => n.stop())]);
    await validator.close();
    upstream.stop();
  }
}

await main();
