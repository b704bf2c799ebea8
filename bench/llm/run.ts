/**
 * LLM benchmark (`node --import tsx bench/llm/run.ts`): the fake upstream and the platform run in
 * child processes; this process is the client. Prints figures and ratios, not pass/fail:
 *   1. added latency of one non-stream completion over calling the fake directly (1 connection,
 *      p50/p99), through llm-api alone and through edge + llm-api;
 *   2. non-stream throughput at 64 connections (autocannon) for the same three targets;
 *   3. streaming: time to first chunk (1 connection) and how many concurrent streams are held
 *      without a stall (every stream gets all its chunks; no gap between chunks > 2× the interval).
 * Env: BENCH_REQUESTS (default 2000), BENCH_SECONDS (10), BENCH_STREAMS (1000).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { createRequire } from 'node:module';
import { Agent, request } from 'undici';

// autocannon ships no types; loaded through require to keep the bench self-contained.
const autocannon = createRequire(import.meta.url)('autocannon') as (opts: Record<string, unknown>) => Promise<any>;

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 2000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const STREAMS = Number(process.env.BENCH_STREAMS ?? 1000);

async function child(script: string, args: string[] = []): Promise<{ proc: ChildProcess; info: any }> {
  const proc = spawn(process.execPath, ['--import', 'tsx', script, ...args], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, NODE_ENV: 'test' } });
  const lines = createInterface({ input: proc.stdout! });
  for await (const line of lines) {
    try {
      return { proc, info: JSON.parse(line) };
    } catch {
      // log noise
    }
  }
  throw new Error(`${script} exited before it was ready`);
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
const ms = (n: number) => `${n.toFixed(3)} ms`;

const body = (stream = false, content = 'hello there') => JSON.stringify({ model: 'bench-model', messages: [{ role: 'user', content }], stream });

async function latency(url: string, headers: Record<string, string>, n: number): Promise<number[]> {
  const agent = new Agent({ connections: 1 });
  const out: number[] = [];
  const payload = body();
  for (let i = 0; i < n + 200; i++) {
    const t0 = process.hrtime.bigint();
    const res = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: payload, dispatcher: agent });
    await res.body.text();
    if (res.statusCode !== 200) throw new Error(`status ${res.statusCode} from ${url}`);
    if (i >= 200) out.push(Number(process.hrtime.bigint() - t0) / 1e6); // first 200: warm-up
  }
  await agent.close();
  return out.sort((a, b) => a - b);
}

async function ttfc(url: string, headers: Record<string, string>, n: number): Promise<number[]> {
  const agent = new Agent({ connections: 1 });
  const out: number[] = [];
  const payload = body(true);
  for (let i = 0; i < n + 100; i++) {
    const t0 = process.hrtime.bigint();
    const res = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: payload, dispatcher: agent });
    let first = 0;
    for await (const chunk of res.body) {
      if (!first && chunk.toString().includes('data:')) first = Number(process.hrtime.bigint() - t0) / 1e6;
    }
    if (i >= 100) out.push(first);
  }
  await agent.close();
  return out.sort((a, b) => a - b);
}

async function throughput(url: string, headers: Record<string, string>): Promise<{ rps: number; p99: number; errors: number }> {
  const result = await autocannon({
    url,
    method: 'POST',
    connections: 64,
    duration: SECONDS,
    headers: { 'content-type': 'application/json', ...headers },
    body: body(),
  });
  return { rps: result.requests.average, p99: result.latency.p99, errors: result.errors + result.non2xx };
}

/** N concurrent streams of 6 chunks, one every 500 ms: all must complete with no gap > 1000 ms. */
async function concurrentStreams(url: string, headers: Record<string, string>, n: number) {
  const agent = new Agent({ connections: n + 16 });
  const interval = 500;
  let maxGap = 0;
  let completed = 0;
  let stalled = 0;
  let firstFailure: string | undefined;
  const t0 = Date.now();
  await Promise.all(
    Array.from({ length: n }, async () => {
      try {
        const res = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: body(true, `#slow:${interval} #words:4`), dispatcher: agent, bodyTimeout: 60_000, headersTimeout: 60_000 });
        let last = 0;
        let text = '';
        for await (const chunk of res.body) {
          const now = Date.now();
          const s = chunk.toString();
          if (s.includes('data: {')) {
            if (last) maxGap = Math.max(maxGap, now - last);
            if (last && now - last > 2 * interval) stalled++;
            last = now;
          }
          text += s;
        }
        if (text.endsWith('data: [DONE]\n\n') && text.includes('w3')) completed++;
        else firstFailure ??= res.statusCode === 200 ? 'a stream ended without its last word and [DONE]' : `status ${res.statusCode}: ${text.slice(0, 200)}`;
      } catch (error) {
        firstFailure ??= (error as Error).message;
      }
    }),
  );
  await agent.close();
  return { n, completed, stalled, maxGap, seconds: (Date.now() - t0) / 1000, firstFailure };
}

const fake = await child('bench/llm/fake-server.ts');
const platform = await child('bench/llm/platform-server.ts', [fake.info.url]);
const { edge, llm, gatewaySecret, adminKey, adminId } = platform.info;
const targets = {
  direct: { url: `${fake.info.url}/chat/completions`, headers: {} as Record<string, string> },
  llmApi: { url: `${llm}/v1/chat/completions`, headers: { 'x-gateway-token': gatewaySecret, 'x-auth-method': 'apikey', 'x-user-id': adminId, 'x-user-subject': adminId } },
  edge: { url: `${edge}/v1/chat/completions`, headers: { 'x-api-key': adminKey } },
};

try {
  console.log(`# LLM bench on ${(await import('node:os')).cpus().length} cores, Node ${process.version}`);
  console.log('\n## 1. Non-stream latency, 1 connection (%d requests after warm-up)', REQUESTS);
  const lat: Record<string, number[]> = {};
  for (const [name, t] of Object.entries(targets)) {
    lat[name] = await latency(t.url, t.headers, REQUESTS);
    console.log(`${name.padEnd(7)} p50 ${ms(pct(lat[name]!, 50))}  p99 ${ms(pct(lat[name]!, 99))}`);
  }
  for (const name of ['llmApi', 'edge']) {
    console.log(`added by ${name === 'edge' ? 'edge + llm-api' : 'llm-api'}: p50 ${ms(pct(lat[name]!, 50) - pct(lat.direct!, 50))}  p99 ${ms(pct(lat[name]!, 99) - pct(lat.direct!, 99))}`);
  }

  console.log('\n## 2. Non-stream throughput, 64 connections, %d s each', SECONDS);
  const tp: Record<string, { rps: number; p99: number; errors: number }> = {};
  for (const [name, t] of Object.entries(targets)) {
    tp[name] = await throughput(t.url, t.headers);
    console.log(`${name.padEnd(7)} ${tp[name]!.rps.toFixed(0)} req/s  p99 ${tp[name]!.p99} ms  errors ${tp[name]!.errors}`);
  }
  console.log(`ratio edge/direct ${(tp.edge!.rps / tp.direct!.rps).toFixed(2)}, llm-api/direct ${(tp.llmApi!.rps / tp.direct!.rps).toFixed(2)}`);

  console.log('\n## 3. Streaming');
  const tf: Record<string, number[]> = {};
  for (const [name, t] of Object.entries(targets)) {
    tf[name] = await ttfc(t.url, t.headers, Math.min(REQUESTS, 1000));
    console.log(`time to first chunk ${name.padEnd(7)} p50 ${ms(pct(tf[name]!, 50))}  p99 ${ms(pct(tf[name]!, 99))}`);
  }
  console.log(`TTFC overhead edge + llm-api: p50 ${ms(pct(tf.edge!, 50) - pct(tf.direct!, 50))}  p99 ${ms(pct(tf.edge!, 99) - pct(tf.direct!, 99))}`);
  const held = await concurrentStreams(targets.edge.url, targets.edge.headers, STREAMS);
  console.log(`concurrent streams through edge + llm-api: ${held.completed}/${held.n} completed, ${held.stalled} stalls, max gap between chunks ${held.maxGap} ms (interval 500 ms), ${held.seconds.toFixed(1)} s${held.firstFailure ? ` (first failure: ${held.firstFailure})` : ''}`);
} finally {
  platform.proc.kill('SIGTERM');
  fake.proc.kill('SIGTERM');
  await Promise.all([once(platform.proc, 'exit'), once(fake.proc, 'exit')]);
}
